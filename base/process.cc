#include "base/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/files.h"

extern char** environ;

namespace phalanx {

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("Spawn: empty argv");

  // Everything the child needs is prepared here, before fork.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : options.env) replaced |= (k == name);
    if (!replaced) env_strings.push_back(std::move(entry));
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out_fd = -1, err_fd = -1;
  if (!options.stdout_path.empty()) {
    out_fd = ::open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (out_fd < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot open log ", options.stdout_path, ": ", std::strerror(errno)));
    }
  }
  if (!options.stderr_path.empty() && options.stderr_path != options.stdout_path) {
    err_fd = ::open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (err_fd < 0) {
      if (out_fd >= 0) ::close(out_fd);
      return absl::UnavailableError(
          absl::StrCat("cannot open log ", options.stderr_path, ": ", std::strerror(errno)));
    }
  } else {
    err_fd = out_fd;
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(status_pipe[0]);
    ::close(status_pipe[1]);
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    if (options.new_session) ::setsid();
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (options.stdin_fd >= 0) {
      ::dup2(options.stdin_fd, 0);
    } else if (null_fd >= 0) {
      ::dup2(null_fd, 0);
    }
    if (out_fd >= 0) ::dup2(out_fd, 1);
    if (err_fd >= 0) ::dup2(err_fd, 2);
    if (options.umask >= 0) ::umask(static_cast<mode_t>(options.umask));
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) {
      int err = errno;
      (void)!::write(status_pipe[1], &err, sizeof(err));
      ::_exit(127);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    (void)!::write(status_pipe[1], &err, sizeof(err));
    ::_exit(127);
  }
  ::close(status_pipe[1]);
  if (out_fd >= 0) ::close(out_fd);
  if (err_fd >= 0 && err_fd != out_fd) ::close(err_fd);
  if (null_fd >= 0) ::close(null_fd);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(status_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (n == sizeof(child_errno)) {
    ::waitpid(pid, nullptr, 0);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot execute ", options.argv[0], ": ", std::strerror(child_errno)));
  }
  return pid;
}

namespace {

// The fields of /proc/PID/stat after the command name (state, parent, …); "" if it is gone.
std::string StatFields(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return "";
  std::string line;
  std::getline(stat, line);
  size_t close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return "";
  return line.substr(close_paren + 2);
}

}  // namespace

char ProcessState(pid_t pid) {
  if (pid <= 0) return '\0';
  std::string fields = StatFields(pid);
  return fields.empty() ? '\0' : fields[0];
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = ProcessState(pid);
  return state != '\0' && state != 'Z' && state != 'X';
}

std::string ProcessStartTime(pid_t pid) {
  if (pid <= 0) return "";
  std::vector<std::string> fields = absl::StrSplit(StatFields(pid), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (the state), so field 22 is fields[19].
  return fields.size() > 19 ? fields[19] : "";
}

bool ProcessEnding(pid_t pid, const std::string& start_time) {
  std::vector<std::string> fields = absl::StrSplit(StatFields(pid), ' ', absl::SkipEmpty());
  if (fields.size() <= 19 || fields[19] != start_time) return true;  // gone, or pid reused
  if (fields[0] == "Z" || fields[0] == "X") return true;
  // Field 9, the kernel's flags: PF_EXITING once it has taken the fatal signal.
  constexpr uint64_t kPfExiting = 0x4;
  uint64_t flags = 0;
  if (absl::SimpleAtoi(fields[6], &flags) && (flags & kPfExiting) != 0) return true;
  // Before that, a SIGKILL sent is pending, to the process or to its main thread.
  auto status = ReadFileAtMost(absl::StrCat("/proc/", pid, "/status"), 8192);
  if (!status.ok()) return true;
  constexpr uint64_t kSigKillBit = uint64_t{1} << (SIGKILL - 1);
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::StartsWith(line, "SigPnd:") && !absl::StartsWith(line, "ShdPnd:")) continue;
    uint64_t mask = 0;
    if (absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line.substr(7)), &mask) &&
        (mask & kSigKillBit) != 0) {
      return true;
    }
  }
  return false;
}

bool StateCannotRun(char state) {
  return state == 'T' || state == 't' || state == 'Z' || state == 'X' || state == '\0';
}

pid_t ProcessParent(pid_t pid) {
  std::string fields = StatFields(pid);
  std::vector<absl::string_view> parts = absl::StrSplit(fields, ' ');
  pid_t parent = -1;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[1], &parent)) return -1;
  return parent;
}

std::string ProcessCmdline(pid_t pid) {
  auto content = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  if (!content.ok()) return "";
  std::string s = *content;
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

bool WaitProcessGone(pid_t pid, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    if (!ProcessAlive(pid)) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

bool TerminateProcess(pid_t pid, absl::Duration grace) {
  if (pid <= 0) return true;
  if (!ProcessAlive(pid)) {
    ::waitpid(pid, nullptr, WNOHANG);
    return true;
  }
  ::kill(pid, SIGTERM);
  if (WaitProcessGone(pid, grace)) return true;
  ::kill(pid, SIGKILL);
  return WaitProcessGone(pid, absl::Seconds(2));
}

int64_t ProcessRssBytes(pid_t pid) {
  std::ifstream statm(absl::StrCat("/proc/", pid, "/statm"));
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return -1;
  return resident * ::sysconf(_SC_PAGESIZE);
}

int64_t ProcessPeakRssBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    int64_t kib = 0;
    if (absl::ConsumePrefix(&rest, "VmHWM:") &&
        absl::SimpleAtoi(
            absl::StripAsciiWhitespace(absl::StripSuffix(absl::StripAsciiWhitespace(rest), "kB")),
            &kib)) {
      return kib * 1024;
    }
  }
  return -1;
}

}  // namespace phalanx
