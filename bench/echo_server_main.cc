// bench_echo_server PORT: a raw gRPC unary echo server (the floor for RPC benchmarks).
#include <grpcpp/grpcpp.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "echo.grpc.pb.h"

namespace {
class EchoImpl final : public phalanx::bench::EchoService::Service {
  grpc::Status Echo(grpc::ServerContext*, const phalanx::bench::EchoMessage* request,
                    phalanx::bench::EchoMessage* reply) override {
    reply->set_data(request->data());
    return grpc::Status::OK;
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  EchoImpl service;
  // Plain gRPC, no token check: the floor that Phalanx's servers are compared with.
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", argv[1]), grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server) return 1;
  server->Wait();
  return 0;
}
