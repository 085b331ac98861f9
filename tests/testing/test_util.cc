#include "tests/testing/test_util.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/process.h"
#include "base/system.h"
#include "base/tls.h"
#include "client/gcs_client.h"
#include "gcs/store.h"

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

RedisServer::RedisServer(const std::string& password, bool aof, std::string appendfsync,
                         std::string data_dir)
    : port_(FreePort()),
      password_(password),
      aof_(aof),
      appendfsync_(std::move(appendfsync)),
      data_dir_(data_dir.empty() ? dir_.path() : std::move(data_dir)) {
  Start();
}

void RedisServer::Start() {
  std::vector<std::string> argv = {"redis-server",
                                   "--port",
                                   absl::StrCat(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--dir",
                                   data_dir_,
                                   "--save",
                                   "",
                                   "--appendonly",
                                   aof_ ? "yes" : "no",
                                   "--appendfsync",
                                   appendfsync_,
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

namespace {

struct ReplyFree {
  void operator()(redisReply* r) const {
    if (r) freeReplyObject(r);
  }
};

void Flatten(const redisReply* r, std::vector<std::string>* out) {
  if (r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; ++i) Flatten(r->element[i], out);
  } else if (r->type == REDIS_REPLY_INTEGER) {
    out->push_back(absl::StrCat(r->integer));
  } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
    out->emplace_back(r->str, r->len);
  }
}

std::vector<std::string> RunCommand(int port, const std::string& password,
                                    const std::vector<std::string>& args) {
  timeval tv{1, 0};
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(
      redisConnectWithTimeout("127.0.0.1", port, tv), redisFree);
  if (!c || c->err) return {};
  redisSetTimeout(c.get(), tv);
  if (!password.empty()) {
    std::unique_ptr<redisReply, ReplyFree> auth(
        static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", password.c_str())));
    if (!auth || auth->type == REDIS_REPLY_ERROR) return {};
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  std::unique_ptr<redisReply, ReplyFree> r(static_cast<redisReply*>(
      redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
  std::vector<std::string> out;
  if (r && r->type != REDIS_REPLY_ERROR) Flatten(r.get(), &out);
  return out;
}

}  // namespace

bool SentinelRedis::Available() {
  // Every redis-server build runs as a sentinel with --sentinel (redis-sentinel is the same
  // binary); --version only shows the binary is there.
  return std::system("redis-server --version > /dev/null 2>&1") == 0;
}

SentinelRedis::SentinelRedis(const std::string& password, const std::string& master_name)
    : password_(password), master_name_(master_name) {
  for (int i = 0; i < 2; ++i) {
    ports_[i] = FreePort();
    std::string dir = absl::StrCat(dir_.path(), "/redis", i);
    MakeDirs(dir, 0700).IgnoreError();
    std::vector<std::string> argv = {
        "redis-server", "--port", absl::StrCat(ports_[i]), "--bind", "127.0.0.1", "--dir", dir,
        "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no",
        "--requirepass", password_, "--masterauth", password_,
        // The replica's first sync starts at once, not after the default 5 s.
        "--repl-diskless-sync-delay", "0"};
    if (i == 1) argv.insert(argv.end(), {"--replicaof", "127.0.0.1", absl::StrCat(ports_[0])});
    redis_[i] = ChildProcess(argv, dir + "/redis.log");
  }
  for (int i = 0; i < 3; ++i) {
    sentinel_ports_[i] = FreePort();
    std::string dir = absl::StrCat(dir_.path(), "/sentinel", i);
    MakeDirs(dir, 0700).IgnoreError();
    // known-replica: the sentinels know the replica at once instead of after their 10 s INFO
    // poll of the primary.
    std::string conf = absl::StrCat(
        "port ", sentinel_ports_[i], "\nbind 127.0.0.1\ndir ", dir, "\nsentinel monitor ",
        master_name_, " 127.0.0.1 ", ports_[0], " 2\nsentinel auth-pass ", master_name_, " ",
        password_, "\nsentinel down-after-milliseconds ", master_name_,
        " 1000\nsentinel failover-timeout ", master_name_, " 3000\nsentinel known-replica ",
        master_name_, " 127.0.0.1 ", ports_[1], "\n");
    WriteFile(dir + "/sentinel.conf", conf, 0600).IgnoreError();
    sentinel_[i] =
        ChildProcess({"redis-server", dir + "/sentinel.conf", "--sentinel"}, dir + "/sentinel.log");
  }
  // Ready: the replica is in sync and every sentinel counts it (a failover needs both).
  bool ready = WaitFor(
      [&] {
        auto info = Command(ports_[1], {"INFO", "replication"});
        if (info.empty() || info[0].find("master_link_status:up") == std::string::npos) {
          return false;
        }
        for (int port : sentinel_ports_) {
          auto master = RunCommand(port, "", {"SENTINEL", "master", master_name_});
          bool one = false;
          for (size_t j = 0; j + 1 < master.size(); j += 2) {
            one |= master[j] == "num-slaves" && master[j + 1] == "1";
          }
          if (!one) return false;
        }
        return true;
      },
      absl::Seconds(30));
  if (!ready) {
    std::fprintf(stderr, "the sentinels never saw the replica in sync (logs in %s)\n",
                 dir_.path().c_str());
    std::abort();
  }
}

std::string SentinelRedis::sentinels() const {
  return absl::StrCat("127.0.0.1:", sentinel_ports_[0], ",127.0.0.1:", sentinel_ports_[1],
                      ",127.0.0.1:", sentinel_ports_[2]);
}

std::vector<std::pair<std::string, int>> SentinelRedis::sentinel_list() const {
  std::vector<std::pair<std::string, int>> out;
  for (int port : sentinel_ports_) out.emplace_back("127.0.0.1", port);
  return out;
}

int SentinelRedis::PrimaryPort() const {
  for (int port : sentinel_ports_) {
    auto addr = RunCommand(port, "", {"SENTINEL", "get-master-addr-by-name", master_name_});
    int primary = -1;
    if (addr.size() == 2 && absl::SimpleAtoi(addr[1], &primary)) return primary;
  }
  return -1;
}

int SentinelRedis::ReplicaPort() const {
  return PrimaryPort() == ports_[0] ? ports_[1] : ports_[0];
}

void SentinelRedis::KillPrimary() {
  int primary = PrimaryPort();
  for (int i = 0; i < 2; ++i) {
    if (ports_[i] == primary) redis_[i].KillAndWait();
  }
}

void SentinelRedis::KillAll() {
  for (auto& redis : redis_) redis.KillAndWait();
}

int SentinelRedis::WaitFailover(int old_port, absl::Duration timeout) {
  int found = -1;
  WaitFor(
      [&] {
        int port = PrimaryPort();
        if (port <= 0 || port == old_port) return false;
        auto role = Command(port, {"ROLE"});
        if (role.empty() || role[0] != "master") return false;
        found = port;
        return true;
      },
      timeout);
  return found;
}

std::vector<std::string> SentinelRedis::Command(int port,
                                                const std::vector<std::string>& args) const {
  return RunCommand(port, password_, args);
}

GcsProcess::GcsProcess(const SentinelRedis& redis, Options options)
    : redis_args_(
          {"--redis-sentinel", redis.sentinels(), "--redis-master-name", redis.master_name()}),
      redis_password_(redis.password()),
      options_(options),
      port_(FreePort()),
      token_file_(dir_.path() + "/token") {
  WriteFile(token_file_, token_, 0600).IgnoreError();
  WriteFile(dir_.path() + "/redis_password", redis_password_, 0600).IgnoreError();
  Start();
}

GcsProcess::GcsProcess(const RedisServer& redis, Options options, std::string session_dir)
    : redis_args_({"--redis-address", absl::StrCat("127.0.0.1:", redis.port())}),
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

void GcsProcess::MakeTlsDir() {
  auto made = rpc::MakeClusterTlsDir(tls_dir(), "testcluster", {"127.0.0.1"});
  if (!made.ok()) {
    std::fprintf(stderr, "cannot make a TLS dir: %s\n", made.status().ToString().c_str());
    std::abort();
  }
  rpc::UseTls(tls_dir()).IgnoreError();
}

void GcsProcess::Start() {
  if (options_.tls && !PathExists(tls_dir() + "/" + rpc::kCaCertFile)) MakeTlsDir();
  std::vector<std::string> argv = {BinDir() + "/phalanx-gcs",
                                   "--port",
                                   absl::StrCat(port_),
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
  argv.insert(argv.end(), redis_args_.begin(), redis_args_.end());
  if (!session_dir_.empty()) {
    argv.insert(argv.end(), {"--session-dir", session_dir_});
  }
  if (options_.tls) argv.insert(argv.end(), {"--tls-dir", tls_dir()});
  if (options_.node_call_timeout_ms > 0) {
    argv.insert(argv.end(),
                {"--node-call-timeout-ms", absl::StrCat(options_.node_call_timeout_ms)});
  }
  argv.insert(argv.end(), {"--dashboard-port", absl::StrCat(options_.dashboard_port)});
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
                     "--debug-reserve-delay-ms",
                     absl::StrCat(options.debug_reserve_delay_ms),
                     "--debug-record-delay-ms",
                     absl::StrCat(options.debug_record_delay_ms),
                     "--tls-dir",
                     gcs.tls_dir(),
                     "--metrics-port",
                     absl::StrCat(options.metrics_port),
                     "--fork-server",
                     options.fork_server ? "true" : "false",
                     "--object-store-memory",
                     absl::StrCat(options.object_store_bytes)},
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

namespace {

// Every process of this machine (in our pid namespace) that is alive, not a zombie.
std::vector<pid_t> LiveProcesses() {
  std::vector<pid_t> out;
  for (const auto& entry : ListDir("/proc")) {
    pid_t pid = 0;
    if (absl::SimpleAtoi(entry, &pid) && ProcessAlive(pid)) out.push_back(pid);
  }
  return out;
}

}  // namespace

std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& name) {
  std::vector<pid_t> found;
  for (pid_t pid : LiveProcesses()) {
    if (ProcessParent(pid) != parent) continue;
    auto comm = ReadFile(absl::StrCat("/proc/", pid, "/comm"));
    if (comm.ok() && absl::StripTrailingAsciiWhitespace(*comm) == name) found.push_back(pid);
  }
  return found;
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
  for (pid_t pid : LiveProcesses()) {
    if (pid != ::getpid() && ProcessCmdline(pid).find(needle) != std::string::npos) {
      out.push_back(pid);
    }
  }
  return out;
}

}  // namespace phalanx::testing
