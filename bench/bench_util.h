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

// Which of gRPC's server APIs a bench_echo_server serves with (echo_server_main.cc): the
// synchronous one, the callback one, or the callback one with each reply finished from a
// second thread (what a hand-off to a writer thread costs, with nothing written), or that
// thread first writing each call to Redis (what acknowledging after persisting costs).
enum class EchoApi { kSync, kCallback, kHandoff, kPersist };

// A raw gRPC unary echo server in a child process (the floor for RPC benchmarks): started on
// a free loopback port (bench_echo_server), SIGKILLed on destruction.
class EchoServer {
 public:
  // `redis_port` and `redis_password`: kPersist's Redis, on 127.0.0.1.
  explicit EchoServer(EchoApi api = EchoApi::kSync, int redis_port = 0,
                      const std::string& redis_password = "");
  std::string address() const;
  // "sync", "callback", "handoff" or "persist".
  const char* api_name() const;

 private:
  EchoApi api_;
  int port_ = 0;
  testing::ChildProcess process_;
};

// The floor at its best: gRPC's sync and callback echo servers, both started, each measured
// with the same client threads; the faster is the floor.
struct EchoFloor {
  EchoServer sync{EchoApi::kSync};
  EchoServer callback{EchoApi::kCallback};
};
struct EchoRates {
  double sync = 0;
  double callback = 0;
  double best() const { return sync > callback ? sync : callback; }
};

// Echo calls per second from `clients` threads (one channel each), blocking unary calls.
double MeasureEcho(const std::string& address, int clients, double seconds);

// MeasureEcho on each of the floor's servers, in turn.
EchoRates MeasureEchoFloor(const EchoFloor& floor, int clients, double seconds);

// Round-trip latencies (microseconds) of `n` blocking echo calls from one client.
std::vector<double> EchoLatenciesUs(const std::string& address, int n);

}  // namespace phalanx::bench
