// Test helpers: real processes (redis-server, phalanx daemons) started on free loopback ports
// in a temporary directory, and stopped by pid when the helper goes out of scope.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace phalanx::testing {

// The directory with the built binaries (phalanx, phalanx-gcs, phalanx-node, …).
std::string BinDir();

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A child process that is SIGKILLed (if still alive) and reaped on destruction.
class ChildProcess {
 public:
  ChildProcess() = default;
  // Starts argv with output appended to `log` (if set).
  ChildProcess(std::vector<std::string> argv, const std::string& log = "",
               std::vector<std::pair<std::string, std::string>> env = {});
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool alive() const;
  void Kill(int signal);  // sends a signal (SIGKILL, SIGSTOP, SIGCONT, …)
  void KillAndWait();     // SIGKILL and reap
  bool Terminate(absl::Duration grace = absl::Seconds(5));  // SIGTERM, then SIGKILL
  // Waits for exit; returns the raw wait status, or -1 on timeout.
  int WaitExit(absl::Duration timeout);

 private:
  pid_t pid_ = -1;
};

// A real redis-server on a free loopback port, with data in a temp dir (no persistence
// unless `aof`, synced to disk per `appendfsync`: "everysec" or "always"), optionally
// password-protected.
class RedisServer {
 public:
  // `data_dir`: where Redis keeps its files (its AOF), if not a temporary dir of its own.
  explicit RedisServer(const std::string& password = "", bool aof = false,
                       std::string appendfsync = "everysec", std::string data_dir = "");
  int port() const { return port_; }
  const std::string& password() const { return password_; }
  void Kill() { process_.KillAndWait(); }
  void Signal(int signal) { process_.Kill(signal); }  // SIGSTOP, SIGCONT, ...
  void Restart();                                     // same port, same data dir

 private:
  void Start();
  TempDir dir_;
  int port_;
  std::string password_;
  bool aof_;
  std::string appendfsync_;
  std::string data_dir_;
  ChildProcess process_;
};

// A Sentinel-managed Redis on free loopback ports: a primary and one replica (both with
// `password`, AOF everysec as `phalanx start --head` runs Redis) and 3 sentinels (`sentinel monitor
// NAME 127.0.0.1 P 2`, down-after 1 s, failover-timeout 3 s; a kill -9 of the primary is failed
// over in ~2.5 s). The constructor returns once every sentinel sees the replica in sync.
// Available() says whether redis-server can run as a sentinel here.
class SentinelRedis {
 public:
  static bool Available();
  explicit SentinelRedis(const std::string& password = "pw",
                         const std::string& master_name = "phx");
  const std::string& password() const { return password_; }
  const std::string& master_name() const { return master_name_; }
  // "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3", as --redis-sentinel takes it.
  std::string sentinels() const;
  std::vector<std::pair<std::string, int>> sentinel_list() const;
  // The primary's port as the first sentinel that answers says; -1 if none does.
  int PrimaryPort() const;
  int ReplicaPort() const;  // the other one of the two
  void KillPrimary();       // kill -9 of the current primary
  void KillAll();           // kill -9 of the primary and the replica (the sentinels live on)
  // Waits until the sentinels name a primary other than `old_port` and it answers ROLE as
  // master; its port, or -1 after `timeout`.
  int WaitFailover(int old_port, absl::Duration timeout);
  // A command's reply on the Redis at `port` (with the password), flattened to strings;
  // empty on error.
  std::vector<std::string> Command(int port, const std::vector<std::string>& args) const;

 private:
  TempDir dir_;
  std::string password_;
  std::string master_name_;
  int ports_[2];
  ChildProcess redis_[2];
  int sentinel_ports_[3];
  ChildProcess sentinel_[3];
};

// A phalanx-gcs process on a free port over `redis`, with its token in a temp dir. Kill9()
// and Restart() (same port, same Redis, same cluster id) exercise GCS restarts.
class GcsProcess {
 public:
  struct Options {
    int64_t node_timeout_ms = 3000;
    int64_t restart_grace_ms = 10000;
    // TLS as `phalanx start --head` sets it up: a CA and a certificate in dir()/tls, the GCS
    // and the nodes StartNode starts serving with them, and this process's channels trusting
    // the CA (rpc::UseTls). Off: plaintext.
    bool tls = false;
    // --dashboard-port (-1: none, 0: any free one; GetClusterInfo says which).
    int dashboard_port = -1;
    int64_t node_call_timeout_ms = 0;  // --node-call-timeout-ms (0: the GCS's default)
  };
  // `session_dir`: its --session-dir, where it runs driver jobs (empty: no driver jobs).
  GcsProcess(const RedisServer& redis, Options options, std::string session_dir = "");
  GcsProcess(const RedisServer& redis) : GcsProcess(redis, Options()) {}
  // Over the primary that `redis`'s sentinels name (--redis-sentinel).
  GcsProcess(const SentinelRedis& redis, Options options);
  std::string address() const;
  const std::string& token() const { return token_; }
  const std::string& token_file() const { return token_file_; }
  const std::string& dir() const { return dir_.path(); }
  std::string tls_dir() const { return options_.tls ? dir_.path() + "/tls" : ""; }
  pid_t pid() const { return process_.pid(); }
  void Kill9() { process_.KillAndWait(); }
  void Signal(int signal) { process_.Kill(signal); }
  // Waits for the process to exit; its raw wait status, or -1 after `timeout`.
  int WaitExit(absl::Duration timeout) { return process_.WaitExit(timeout); }
  void Restart();  // waits until it serves again

 private:
  void Start();
  void MakeTlsDir();
  TempDir dir_;
  std::vector<std::string> redis_args_;  // --redis-address or --redis-sentinel ...
  std::string redis_password_;
  Options options_;
  std::string session_dir_;
  int port_;
  std::string token_ = "test-token-0123456789";
  std::string token_file_;
  ChildProcess process_;
};

// A phalanx-node process registered with `gcs` (waits until it is alive there).
struct NodeOptions {
  double num_cpus = 2;
  double memory = 4.0 * (1 << 30);
  std::string resources_json = "{}";
  int heartbeat_ms = 100;
  double memory_usage_threshold = 0.95;
  int debug_reserve_delay_ms = 0;  // --debug-reserve-delay-ms
  int debug_record_delay_ms = 0;   // --debug-record-delay-ms
  int metrics_port = -1;           // --metrics-port (0: any free one)
  bool fork_server = true;         // --fork-server
  int64_t object_store_bytes = 0;  // --object-store-memory (0: the node's default)
};
ChildProcess StartNode(const GcsProcess& gcs, const std::string& node_id,
                       const NodeOptions& options,
                       std::vector<std::pair<std::string, std::string>> env = {});
inline ChildProcess StartNode(const GcsProcess& gcs, const std::string& node_id) {
  return StartNode(gcs, node_id, NodeOptions());
}

// The live children of `parent` whose process name (comm) is `name`.
std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& name);

// Polls `condition` every 10 ms until it holds or `timeout` passes; returns the last result.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout);

// Runs a command to completion (bounded by `timeout`, then SIGKILLed) and captures its
// stdout+stderr.
struct CommandResult {
  int exit_code = -1;  // -1: killed or timed out
  std::string output;
};
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env = {},
                         absl::Duration timeout = absl::Seconds(60));

// Every live process whose command line contains `needle` (for "no process left behind").
std::vector<pid_t> FindProcesses(const std::string& needle);

}  // namespace phalanx::testing
