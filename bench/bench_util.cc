#include "bench/bench_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/rpc.h"
#include "base/system.h"
#include "echo.grpc.pb.h"
#include "tests/testing/test_util.h"

namespace phalanx::bench {

namespace {

// The echo floor is plaintext gRPC whatever the cluster's transport (its server is a bare
// gRPC server); one connection per channel, as rpc::MakeChannel makes them.
std::shared_ptr<grpc::Channel> EchoChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace

testing::GcsProcess::Options GcsOptions() {
  testing::GcsProcess::Options options;
  const char* tls = std::getenv("PHALANX_BENCH_TLS");
  options.tls = tls != nullptr && std::string(tls) == "1";
  return options;
}

void UseGcsTls(const testing::GcsProcess& gcs) {
  if (!gcs.tls_dir().empty()) ::setenv("PHALANX_TLS_DIR", gcs.tls_dir().c_str(), 1);
}

std::string TransportName() { return GcsOptions().tls ? "tls" : "plaintext"; }

OneNodeCluster::OneNodeCluster(double num_cpus) : gcs(redis, GcsOptions()) {
  UseGcsTls(gcs);
  testing::NodeOptions options;
  options.num_cpus = num_cpus;
  node = testing::StartNode(gcs, "bench-node", options);
}

int64_t PrivateBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  if (!in) return -1;
  std::string key;
  int64_t kb, total = 0;
  std::string unit;
  while (in >> key) {
    if (key == "Private_Clean:" || key == "Private_Dirty:") {
      in >> kb >> unit;
      total += kb * 1024;
    } else {
      std::getline(in, unit);
    }
  }
  return total;
}

std::string Shell(const std::string& command) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  return out;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t i = static_cast<size_t>(p * (values.size() - 1) + 0.5);
  return values[std::min(i, values.size() - 1)];
}

EchoServer::EchoServer(EchoApi api, int redis_port, const std::string& redis_password)
    : api_(api), port_(FreePort()) {
  std::vector<std::string> argv = {testing::BinDir() + "/bench_echo_server", absl::StrCat(port_),
                                   api_name()};
  if (api == EchoApi::kPersist) {
    argv.push_back(absl::StrCat(redis_port));
    argv.push_back(redis_password);
  }
  process_ = testing::ChildProcess(argv);
  auto stub = EchoService::NewStub(EchoChannel(address()));
  for (int i = 0; i < 500; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    EchoMessage in, out;
    if (stub->Echo(&ctx, in, &out).ok()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::string EchoServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

const char* EchoServer::api_name() const {
  switch (api_) {
    case EchoApi::kSync:
      return "sync";
    case EchoApi::kCallback:
      return "callback";
    case EchoApi::kHandoff:
      return "handoff";
    case EchoApi::kPersist:
      return "persist";
  }
  return "sync";
}

double MeasureEcho(const std::string& address, int clients, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::vector<std::thread> threads;
  absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto stub = EchoService::NewStub(EchoChannel(address));
      EchoMessage in;
      in.set_data(std::string(32, 'x'));
      int64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        grpc::ClientContext ctx;
        EchoMessage out;
        if (stub->Echo(&ctx, in, &out).ok()) ++n;
      }
      done += n;
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(done) / absl::ToDoubleSeconds(absl::Now() - start);
}

EchoRates MeasureEchoFloor(const EchoFloor& floor, int clients, double seconds) {
  EchoRates rates;
  rates.sync = MeasureEcho(floor.sync.address(), clients, seconds);
  rates.callback = MeasureEcho(floor.callback.address(), clients, seconds);
  return rates;
}

std::vector<double> EchoLatenciesUs(const std::string& address, int n) {
  auto stub = EchoService::NewStub(EchoChannel(address));
  EchoMessage in;
  in.set_data(std::string(32, 'x'));
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    grpc::ClientContext ctx;
    EchoMessage reply;
    absl::Time t0 = absl::Now();
    if (stub->Echo(&ctx, in, &reply).ok()) {
      out.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
    }
  }
  return out;
}

}  // namespace phalanx::bench
