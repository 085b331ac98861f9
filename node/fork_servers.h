// ForkServers: the fork servers (zygotes) of one node, one per C++ program that ran here.
// A fork server is a process of the program that has done its exec, dynamic linking and
// static initialization once, and forks a worker per request (worker/fork_server.h,
// protocol in base/worker_env.h). The forked worker becomes this process's child:
// the constructor makes this process a child subreaper, so the caller reaps and signals
// forked workers exactly like the ones it spawned.
//
// A program whose file changed (rebuilt) gets a new server; the least recently used server
// stops when more than `max_servers` run. A program that cannot serve (threads before Init,
// or a server that died or did not answer) is not tried again until its file changes; the
// caller then spawns its workers. Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::node {

struct ForkServerOptions {
  std::string log_dir;  // each server logs to fork-server-N.log there
  // How long a fork may take, the server's own start included (its first request waits for
  // the program's exec and initialization).
  absl::Duration reply_timeout = absl::Seconds(10);
  int max_servers = 8;  // programs with a server at once, per node
};

class ForkServers {
 public:
  explicit ForkServers(ForkServerOptions options);
  ~ForkServers();  // stops every server (its workers live on)
  ForkServers(const ForkServers&) = delete;
  ForkServers& operator=(const ForkServers&) = delete;

  // Forks a worker of the C++ program at `program`, starting the program's server first (with
  // `server_env` added to this process's environment) if none runs. The worker's stdout and
  // stderr go to `log_path` and `env` is set in it. Returns its pid; FailedPrecondition when
  // the program cannot have a server (it refused, or servers are off), another error when
  // its server failed this time. Either way the caller starts the worker some other way.
  absl::StatusOr<pid_t> Fork(const std::string& program,
                             const std::vector<std::pair<std::string, std::string>>& server_env,
                             const std::vector<std::pair<std::string, std::string>>& env,
                             const std::string& log_path);

  // Stops every server; Fork fails from then on (the node is stopping).
  void StopAll();

 private:
  struct Server {
    pid_t pid = 0;
    int fd = -1;          // our end of its socket
    std::string version;  // the program file's identity when the server started
    int64_t last_used = 0;
    int64_t forks = 0;  // workers it forked
  };
  // The program's server, started if none runs (or its file changed).
  absl::StatusOr<Server*> ServerLocked(const std::string& program, const std::string& version,
                                       const std::vector<std::pair<std::string, std::string>>& env)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<pid_t> AskLocked(Server& server, const std::string& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Server> StartLocked(const std::string& program, const std::string& version,
                                     const std::vector<std::pair<std::string, std::string>>& env)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopLocked(Server& server) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ForkServerOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Server> servers_ ABSL_GUARDED_BY(mu_);          // by program path
  std::map<std::string, std::string> unforkable_ ABSL_GUARDED_BY(mu_);  // program → version
  bool disabled_ ABSL_GUARDED_BY(mu_) = false;  // not a child subreaper, or stopped
  int64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace phalanx::node
