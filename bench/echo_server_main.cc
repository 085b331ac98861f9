// bench_echo_server PORT: a raw gRPC unary echo server (the floor for RPC benchmarks).
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "echo.grpc.pb.h"
#include "runtime/rpc/rpc.h"

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
  auto server = phalanx::rpc::StartServer(absl::StrCat("127.0.0.1:", argv[1]), {&service});
  if (!server.ok()) return 1;
  server->server->Wait();
  return 0;
}
