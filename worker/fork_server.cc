#include "worker/fork_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/worker_env.h"

namespace phalanx::worker {
namespace {

// How long a forked worker waits to become the node's child (its first parent, a short-lived
// middle process, exits at once); past it, something is wrong and the worker gives up.
constexpr int kReparentWaitMs = 1000;

int ThreadCount() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
  ::closedir(dir);
  return n;
}

void Answer(const std::string& text) {
  while (::send(0, text.data(), text.size(), MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

// In the forked worker: wait to be the node's child, tie its life to the node's, and take
// the request's log and environment.
void BecomeWorker(pid_t node, pid_t middle, const std::vector<std::string>& request,
                  const char* name) {
  for (int waited = 0; ::getppid() == middle; ++waited) {
    if (waited >= kReparentWaitMs * 10) ::_exit(127);
    ::usleep(100);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != node) ::_exit(127);  // the node is gone, or is not a child subreaper
  ::prctl(PR_SET_NAME, name);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) ::dup2(null_fd, 0);
  int log = ::open(request[0].c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log >= 0) {
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::close(log);
  }
  if (null_fd > 2) ::close(null_fd);
  ::unsetenv(kForkServerEnv);
  ::unsetenv("LD_BIND_NOW");  // the server's (see ForkServers); the request may set it again
  for (size_t i = 1; i < request.size(); ++i) {
    size_t eq = request[i].find('=');
    if (eq == std::string::npos || eq == 0) continue;
    ::setenv(request[i].substr(0, eq).c_str(), request[i].c_str() + eq + 1, 1);
  }
}

// Forks the worker through a middle process that exits at once, so that the worker is
// reparented to the node (the nearest child subreaper) and the node reaps it. Returns the
// worker's pid here, 0 in the worker, -1 (errno set) when it cannot fork.
pid_t ForkWorker(pid_t node, const std::vector<std::string>& request, const char* name) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  pid_t middle = ::fork();
  if (middle < 0) {
    int err = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    errno = err;
    return -1;
  }
  if (middle == 0) {
    ::close(pipe_fds[0]);
    pid_t me = ::getpid();
    pid_t worker = ::fork();
    if (worker == 0) {
      ::close(pipe_fds[1]);
      BecomeWorker(node, me, request, name);
      return 0;
    }
    int err = worker < 0 ? errno : 0;
    (void)!::write(pipe_fds[1], &worker, sizeof(worker));
    (void)!::write(pipe_fds[1], &err, sizeof(err));
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  pid_t worker = -1;
  int err = EIO;
  if (::read(pipe_fds[0], &worker, sizeof(worker)) != sizeof(worker) ||
      ::read(pipe_fds[0], &err, sizeof(err)) != sizeof(err)) {
    worker = -1;
  }
  ::close(pipe_fds[0]);
  while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (worker < 0) errno = err;
  return worker;
}

}  // namespace

void ServeForks() {
  const pid_t node = ::getppid();
  if (int threads = ThreadCount(); threads != 1) {
    std::fprintf(stderr,
                 "fork server: this process runs %d threads before phalanx::Init (started by "
                 "the program's static initializers or its main), and a fork keeps only one; "
                 "not serving (the node starts each worker as a process of its own)\n",
                 threads);
    ::_exit(3);
  }
  // Output the program buffered before Init goes to the server's log, not to every worker's.
  std::fflush(stdout);
  std::fflush(stderr);
  char name[17] = {};  // the program's, for its workers
  ::prctl(PR_GET_NAME, name);
  ::prctl(PR_SET_NAME, kForkServerName);
  std::vector<char> buffer(kMaxForkRequestBytes);
  while (true) {
    ssize_t n = ::recv(0, buffer.data(), buffer.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(0);  // the node closed the socket, or is gone
    std::vector<std::string> request;
    for (ssize_t at = 0; at < n;) {
      const char* field = buffer.data() + at;
      size_t len = ::strnlen(field, static_cast<size_t>(n - at));
      request.emplace_back(field, len);
      at += static_cast<ssize_t>(len) + 1;
    }
    if (request.empty() || request[0].empty()) {
      Answer("!the request names no log path");
      continue;
    }
    pid_t worker = ForkWorker(node, request, name);
    if (worker == 0) return;
    Answer(worker > 0 ? absl::StrCat(worker) : absl::StrCat("!fork: ", std::strerror(errno)));
  }
}

}  // namespace phalanx::worker
