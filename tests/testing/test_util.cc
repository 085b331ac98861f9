#include "tests/testing/test_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gcs/gcs_client.h"
#include "gcs/store.h"
#include "runtime/common/files.h"
#include "runtime/common/process.h"
#include "runtime/common/system.h"

#ifndef PHALANX_BIN_DIR
#error "PHALANX_BIN_DIR must be defined by the build"
#endif

namespace phalanx::testing {

std::string BinDir() { return PHALANX_BIN_DIR; }

TempDir::TempDir() {
  char pattern[] = "/tmp/phx-test-XXXXXX";
  char* made = ::mkdtemp(pattern);
  path_ = made ? made : "/tmp";
}

TempDir::~TempDir() {
  // PHALANX_KEEP_TEST_DIRS=1 keeps the logs of a failing test for a look.
  if (path_ != "/tmp" && std::getenv("PHALANX_KEEP_TEST_DIRS") == nullptr) {
    RemoveAll(path_).IgnoreError();
  }
}

ChildProcess::ChildProcess(std::vector<std::string> argv, const std::string& log,
                           std::vector<std::pair<std::string, std::string>> env) {
  SpawnOptions options;
  options.argv = std::move(argv);
  options.stdout_path = log;
  options.env = std::move(env);
  options.die_with_parent = true;
  auto pid = Spawn(options);
  if (!pid.ok()) {
    std::fprintf(stderr, "cannot start %s: %s\n", options.argv[0].c_str(),
                 std::string(pid.status().message()).c_str());
    std::abort();
  }
  pid_ = *pid;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    KillAndWait();
    pid_ = other.pid_;
    other.pid_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() { KillAndWait(); }

bool ChildProcess::alive() const { return pid_ > 0 && ProcessAlive(pid_); }

void ChildProcess::Kill(int signal) {
  if (pid_ > 0) ::kill(pid_, signal);
}

void ChildProcess::KillAndWait() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

bool ChildProcess::Terminate(absl::Duration grace) {
  if (pid_ <= 0) return true;
  bool gone = TerminateProcess(pid_, grace);
  ::waitpid(pid_, nullptr, WNOHANG);
  pid_ = -1;
  return gone;
}

int ChildProcess::WaitExit(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

RedisServer::RedisServer(const std::string& password, bool aof)
    : port_(FreePort()), password_(password), aof_(aof) {
  Start();
}

void RedisServer::Start() {
  std::vector<std::string> argv = {"redis-server",
                                   "--port",
                                   absl::StrCat(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--dir",
                                   dir_.path(),
                                   "--save",
                                   "",
                                   "--appendonly",
                                   aof_ ? "yes" : "no",
                                   "--daemonize",
                                   "no"};
  if (!password_.empty()) {
    argv.push_back("--requirepass");
    argv.push_back(password_);
  }
  process_ = ChildProcess(argv, dir_.path() + "/redis.log");
  gcs::RedisOptions probe{"127.0.0.1", port_, password_, "probe"};
  probe.connect_timeout = absl::Milliseconds(200);
  WaitFor([&] { return gcs::ConnectRedisStore(probe).ok(); }, absl::Seconds(10));
}

void RedisServer::Restart() {
  process_.KillAndWait();
  Start();
}

GcsProcess::GcsProcess(const RedisServer& redis, Options options, std::string session_dir)
    : redis_port_(redis.port()),
      redis_password_(redis.password()),
      options_(options),
      session_dir_(std::move(session_dir)),
      port_(FreePort()),
      token_file_(dir_.path() + "/token") {
  WriteFile(token_file_, token_, 0600).IgnoreError();
  WriteFile(dir_.path() + "/redis_password", redis_password_, 0600).IgnoreError();
  Start();
}

std::string GcsProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

void GcsProcess::Start() {
  std::vector<std::string> argv = {BinDir() + "/phalanx-gcs",
                                   "--port",
                                   absl::StrCat(port_),
                                   "--redis-address",
                                   absl::StrCat("127.0.0.1:", redis_port_),
                                   "--redis-password-file",
                                   dir_.path() + "/redis_password",
                                   "--cluster-id",
                                   "testcluster",
                                   "--token-file",
                                   token_file_,
                                   "--node-timeout-ms",
                                   absl::StrCat(options_.node_timeout_ms),
                                   "--restart-grace-ms",
                                   absl::StrCat(options_.restart_grace_ms)};
  if (!session_dir_.empty()) {
    argv.insert(argv.end(), {"--session-dir", session_dir_});
  }
  process_ = ChildProcess(argv, dir_.path() + "/gcs.log");
  bool up = WaitFor(
      [&] {
        return gcs::GcsClient::Connect({address(), token_}, absl::Milliseconds(200)).ok();
      },
      absl::Seconds(20));
  if (!up) {
    std::fprintf(stderr, "GCS did not come up; log:\n%s\n",
                 ReadFile(dir_.path() + "/gcs.log").value_or("").c_str());
    std::abort();
  }
}

void GcsProcess::Restart() {
  process_.KillAndWait();
  Start();
}

ChildProcess StartNode(const GcsProcess& gcs, const std::string& node_id,
                       const NodeOptions& options,
                       std::vector<std::pair<std::string, std::string>> env) {
  ChildProcess node({BinDir() + "/phalanx-node",
                     "--gcs-address",
                     gcs.address(),
                     "--token-file",
                     gcs.token_file(),
                     "--node-id",
                     node_id,
                     "--num-cpus",
                     absl::StrCat(options.num_cpus),
                     "--memory",
                     absl::StrCat(static_cast<int64_t>(options.memory)),
                     "--resources",
                     options.resources_json,
                     "--heartbeat-ms",
                     absl::StrCat(options.heartbeat_ms),
                     "--memory-usage-threshold",
                     absl::StrCat(options.memory_usage_threshold),
                     "--session-dir",
                     gcs.dir(),
                     "--node-ip",
                     "127.0.0.1",
                     "--debug-prepare-delay-ms",
                     absl::StrCat(options.debug_prepare_delay_ms)},
                    absl::StrCat(gcs.dir(), "/node-", node_id, ".log"), std::move(env));
  auto client = gcs::GcsClient::Connect({gcs.address(), gcs.token()});
  WaitFor(
      [&] {
        auto nodes = (*client)->GetAllNodes(true);
        if (!nodes.ok()) return false;
        for (const auto& n : *nodes) {
          if (n.node_id() == node_id) return true;
        }
        return false;
      },
      absl::Seconds(20));
  return node;
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env,
                         absl::Duration timeout) {
  TempDir dir;
  std::string out_path = dir.path() + "/out";
  SpawnOptions options;
  options.argv = argv;
  options.env = env;
  options.stdout_path = out_path;
  CommandResult result;
  auto pid = Spawn(options);
  if (!pid.ok()) {
    result.output = std::string(pid.status().message());
    return result;
  }
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  bool exited = false;
  while (absl::Now() < deadline) {
    if (::waitpid(*pid, &status, WNOHANG) == *pid) {
      exited = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!exited) {
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  auto output = ReadFile(out_path);
  if (output.ok()) result.output = *output;
  return result;
}

std::vector<pid_t> FindProcesses(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& entry : ListDir("/proc")) {
    pid_t pid;
    if (!absl::SimpleAtoi(entry, &pid) || pid == ::getpid()) continue;
    if (!ProcessAlive(pid)) continue;
    if (ProcessCmdline(pid).find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}

}  // namespace phalanx::testing
