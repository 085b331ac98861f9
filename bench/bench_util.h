// Helpers shared by the benchmarks.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/testing/test_util.h"

namespace phalanx::bench {

// The benchmarked cluster's transport: plaintext, or TLS (as `phalanx start` sets it up by
// default) when $PHALANX_BENCH_TLS=1, so that TLS's cost is measured run against run.
testing::GcsProcess::Options GcsOptions();
// Once the GCS runs: this process's clients (Init included) use its TLS, if it has one.
void UseGcsTls(const testing::GcsProcess& gcs);
// "tls" or "plaintext", for the output.
std::string TransportName();

// A one-node cluster for a benchmark, started in this order: Redis, the GCS (its transport
// per $PHALANX_BENCH_TLS, trusted by this process's clients) and a node manager with
// `num_cpus`. Stopped, by pid, in the reverse order.
struct OneNodeCluster {
  explicit OneNodeCluster(double num_cpus);
  testing::RedisServer redis;
  testing::GcsProcess gcs;
  testing::ChildProcess node;
};

// Runs a shell command and returns its stdout (empty on failure).
std::string Shell(const std::string& command);

// The value at fraction `p` (0..1) of a sample.
double Percentile(std::vector<double> values, double p);

// Private (unshared) resident bytes of `pid` (USS, from /proc/PID/smaps_rollup); -1 if gone.
int64_t PrivateBytes(pid_t pid);

// A raw gRPC unary echo server in a child process (the floor for RPC benchmarks): started on
// a free loopback port (bench_echo_server), SIGKILLed on destruction.
class EchoServer {
 public:
  EchoServer();
  std::string address() const;

 private:
  int port_ = 0;
  testing::ChildProcess process_;
};

// Echo calls per second from `clients` threads (one channel each), blocking unary calls.
double MeasureEcho(const std::string& address, int clients, double seconds);

// Round-trip latencies (microseconds) of `n` blocking echo calls from one client.
std::vector<double> EchoLatenciesUs(const std::string& address, int n);

}  // namespace phalanx::bench
