#include "node/fork_servers.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/process.h"
#include "base/worker_env.h"

namespace phalanx::node {
namespace {

// The identity of the file at `path` (device, inode, size, modification time); "" when it
// cannot be read. A rebuilt program has a new one.
std::string FileVersion(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".",
                      st.st_mtim.tv_nsec);
}

}  // namespace

ForkServers::ForkServers(ForkServerOptions options) : options_(std::move(options)) {
  // Workers forked by a server are orphaned on purpose (their middle process exits) and
  // come to us: we reap them and get their exit status.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    spdlog::warn("cannot become a child subreaper ({}): no fork servers", std::strerror(errno));
    absl::MutexLock lock(&mu_);
    disabled_ = true;
  }
}

ForkServers::~ForkServers() { StopAll(); }

void ForkServers::StopAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [program, server] : servers_) StopLocked(server);
  servers_.clear();
  disabled_ = true;
}

void ForkServers::StopLocked(Server& server) {
  if (server.fd >= 0) ::close(server.fd);  // it sees the end of its socket and exits
  server.fd = -1;
  if (server.pid > 0) ::kill(server.pid, SIGKILL);  // and if it is stuck, this ends it
}

absl::StatusOr<ForkServers::Server> ForkServers::StartLocked(
    const std::string& program, const std::string& version,
    const std::vector<std::pair<std::string, std::string>>& env) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::UnavailableError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  SpawnOptions spawn;
  spawn.argv = {program};
  spawn.env = env;
  spawn.env.emplace_back(kForkServerEnv, "1");
  // Every symbol bound once, in the server, instead of lazily in each worker it forks.
  spawn.env.emplace_back("LD_BIND_NOW", "1");
  spawn.stdout_path = absl::StrCat(options_.log_dir, "/fork-server-", started_++, ".log");
  spawn.die_with_parent = true;
  spawn.stdin_fd = fds[1];
  auto pid = Spawn(spawn);
  ::close(fds[1]);
  if (!pid.ok()) {
    ::close(fds[0]);
    return pid.status();
  }
  spdlog::info("started fork server {} for {}", *pid, program);
  return Server{*pid, fds[0], version, 0, 0};
}

absl::StatusOr<pid_t> ForkServers::Fork(
    const std::string& program, const std::vector<std::pair<std::string, std::string>>& server_env,
    const std::vector<std::pair<std::string, std::string>>& env, const std::string& log_path) {
  std::string request = absl::StrCat(log_path, std::string(1, '\0'));
  for (const auto& [k, v] : env) absl::StrAppend(&request, k, "=", v, std::string(1, '\0'));
  if (request.size() > static_cast<size_t>(kMaxForkRequestBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("the worker's environment (", request.size(),
                                                   " bytes) is over the ", kMaxForkRequestBytes,
                                                   " a fork request carries"));
  }
  absl::MutexLock lock(&mu_);
  std::string version = FileVersion(program);
  if (version.empty()) {
    return absl::NotFoundError(absl::StrCat("cannot read ", program, ": ", std::strerror(errno)));
  }
  // A server that served before and is gone (killed) is replaced once, at once.
  absl::Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto server = ServerLocked(program, version, server_env);
    if (!server.ok()) return server.status();
    bool served_before = (*server)->forks > 0;
    auto pid = AskLocked(**server, request);
    if (pid.ok()) {
      ++(*server)->forks;
      return pid;
    }
    last = pid.status();
    if (absl::IsUnavailable(last)) continue;  // the answer said why: the server is fine
    spdlog::warn("fork server {} of {}: {}", (*server)->pid, program, last.message());
    StopLocked(**server);
    servers_.erase(program);
    // One that ended before its first fork refused to serve: not tried again for this file.
    if (!served_before && absl::IsAborted(last)) unforkable_[program] = version;
    if (!served_before) break;
  }
  return absl::UnavailableError(absl::StrCat("fork server of ", program, ": ", last.message()));
}

absl::StatusOr<ForkServers::Server*> ForkServers::ServerLocked(
    const std::string& program, const std::string& version,
    const std::vector<std::pair<std::string, std::string>>& env) {
  if (disabled_) return absl::FailedPreconditionError("fork servers are off on this node");
  if (auto bad = unforkable_.find(program); bad != unforkable_.end() && bad->second == version) {
    return absl::FailedPreconditionError(absl::StrCat(program, " cannot serve forks"));
  }
  auto it = servers_.find(program);
  if (it != servers_.end() && it->second.version != version) {
    spdlog::info("{} changed: its fork server {} stops", program, it->second.pid);
    StopLocked(it->second);
    servers_.erase(it);
    it = servers_.end();
  }
  if (it == servers_.end()) {
    if (static_cast<int>(servers_.size()) >= options_.max_servers) {
      auto oldest = servers_.begin();
      for (auto s = servers_.begin(); s != servers_.end(); ++s) {
        if (s->second.last_used < oldest->second.last_used) oldest = s;
      }
      StopLocked(oldest->second);
      servers_.erase(oldest);
    }
    auto started = StartLocked(program, version, env);
    if (!started.ok()) {
      unforkable_[program] = version;
      return started.status();
    }
    it = servers_.emplace(program, *started).first;
  }
  it->second.last_used = ++uses_;
  return &it->second;
}

// Sends the request and waits (bounded) for the answer: the pid; Unavailable when the server
// answered that it could not fork; Aborted when it is gone; DeadlineExceeded or Internal when
// it said nothing in time or something unreadable.
absl::StatusOr<pid_t> ForkServers::AskLocked(Server& server, const std::string& request) {
  if (::send(server.fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) {
    return absl::AbortedError(absl::StrCat("it is gone (", std::strerror(errno), ")"));
  }
  char answer[128];
  absl::Time deadline = absl::Now() + options_.reply_timeout;
  while (true) {
    int left_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no answer within ", absl::FormatDuration(options_.reply_timeout)));
    }
    pollfd p{server.fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms) <= 0) continue;
    ssize_t n = ::recv(server.fd, answer, sizeof(answer) - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return absl::AbortedError("it ended (its log says why)");
    answer[n] = '\0';
    break;
  }
  if (answer[0] == '!') return absl::UnavailableError(answer + 1);
  pid_t pid = 0;
  if (!absl::SimpleAtoi(answer, &pid) || pid <= 0) {
    return absl::InternalError(absl::StrCat("unreadable answer '", answer, "'"));
  }
  return pid;
}

}  // namespace phalanx::node
