// `phalanx start --head` and `phalanx start --address HOST:PORT`.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/process.h"
#include "base/resources.h"
#include "base/rpc.h"
#include "base/session.h"
#include "base/system.h"
#include "base/tls.h"
#include "cli/commands.h"
#include "client/gcs_client.h"
#include "gcs/store.h"

namespace phalanx::cli {
namespace {

int Fail(const std::string& message) {
  std::cerr << "phalanx start: " << message << "\n";
  return 1;
}

// Looks `program` up on PATH; empty if it is not there.
std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    std::string candidate = absl::StrCat(dir, "/", program);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// --block: how often it checks that the processes it started still live.
constexpr absl::Duration kBlockCheckInterval = absl::Milliseconds(500);

// A token given to `start --head`: long enough to resist guessing, and plain enough to travel
// in files, headers and command lines.
absl::Status CheckToken(const std::string& token) {
  constexpr size_t kMinTokenLength = 16;
  if (token.size() < kMinTokenLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token is ", token.size(), " characters; give at least ", kMinTokenLength,
                     " (e.g. `openssl rand -hex 24`), or leave it out for a random one"));
  }
  for (char c : token) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(
          "--token may hold letters, digits, '-', '_' and '.' only (e.g. `openssl rand -hex 24`)");
    }
  }
  return absl::OkStatus();
}

constexpr char kNoTlsWarning[] =
    "WARNING: --no-tls: the cluster token and all traffic travel in clear; anyone on the "
    "network can read them. Use it for debugging only.";

// A daemon this command started; stopped again if a later step fails.
struct Started {
  std::string name;
  pid_t pid;
};

class Starter {
 public:
  explicit Starter(const StartOptions& o) : o_(o) {}

  int Run() {
    // --block: a SIGTERM during start-up waits for Block() (it then stops what started)
    // rather than killing this process half way. Spawned children get an empty mask.
    if (o_.block) ::sigprocmask(SIG_BLOCK, &BlockedSignals(), nullptr);
    if (auto s = Validate(); !s.ok()) return Fail(std::string(s.message()));
    auto session = CreateSession();
    if (!session.ok()) return Fail(std::string(session.status().message()));
    session_ = *session;
    int rc = o_.head ? StartHead() : JoinCluster();
    if (rc != 0) {
      for (auto it = started_.rbegin(); it != started_.rend(); ++it) {
        TerminateProcess(it->pid, absl::Seconds(3));
      }
      DiscardSession(session_);
      return rc;
    }
    return o_.block ? Block() : 0;
  }

 private:
  absl::Status Validate() {
    if (o_.head == !o_.address.empty()) {
      return absl::InvalidArgumentError(
          "give either --head (start a new cluster) or --address HOST:PORT (join one)");
    }
    if (auto s = ValidateResourcesJson(); !s.ok()) return s;
    if (o_.memory_usage_threshold >= 0 &&
        (o_.memory_usage_threshold == 0 || o_.memory_usage_threshold > 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--memory-usage-threshold ", o_.memory_usage_threshold,
          " is not a fraction of the machine's memory: give a number in (0, 1], e.g. 0.95"));
    }
    if (auto s = ValidateTrust(); !s.ok()) return s;
    if (o_.num_cpus < -0.5 && o_.num_cpus != -1) {
      return absl::InvalidArgumentError("--num-cpus must be >= 0");
    }
    resources_.Set("CPU", o_.num_cpus >= 0 ? o_.num_cpus : NumCpus());
    resources_.Set("GPU", o_.num_gpus >= 0 ? o_.num_gpus : NumGpus());
    resources_.Set("memory", o_.memory >= 0 ? o_.memory : static_cast<double>(TotalMemoryBytes()));
    node_ip_ = o_.node_ip.empty() ? DetectNodeIp() : o_.node_ip;
    bin_dir_ = ExecutableDir();
    for (const char* daemon : {"phalanx-gcs", "phalanx-node"}) {
      if (!PathExists(absl::StrCat(bin_dir_, "/", daemon))) {
        return absl::FailedPreconditionError(absl::StrCat(daemon, " is missing next to phalanx in ",
                                                          bin_dir_,
                                                          "; rebuild with scripts/setup.sh"));
      }
    }
    if (o_.head) return ValidateHead();
    if (auto split = rpc::SplitHostPort(o_.address, "--address"); !split.ok()) {
      return split.status();
    }
    return absl::OkStatus();
  }

  // --resources: JSON of custom resources (CPU, GPU and memory have flags of their own).
  absl::Status ValidateResourcesJson() {
    if (o_.resources_json.empty()) return absl::OkStatus();
    auto parsed = Resources::ParseJson(o_.resources_json, "--resources");
    if (!parsed.ok()) return parsed.status();
    resources_ = *parsed;
    for (const char* builtin : {"CPU", "GPU", "memory"}) {
      if (resources_.GetFixed(builtin) > 0) {
        return absl::InvalidArgumentError(absl::StrCat("--resources: give ", builtin,
                                                       " with --num-cpus, --num-gpus or "
                                                       "--memory, not in the JSON"));
      }
    }
    return absl::OkStatus();
  }

  // The CA to trust (--ca-dir) and the head's token (a flag, or $PHALANX_TOKEN).
  absl::Status ValidateTrust() {
    if (!o_.ca_dir.empty()) {
      if (o_.no_tls) {
        return absl::InvalidArgumentError("--ca-dir is for a TLS cluster: drop --no-tls");
      }
      if (!o_.ca_fingerprint.empty()) {
        return absl::InvalidArgumentError(
            "give either --ca-dir (trust the CA there) or --ca-fingerprint, not both");
      }
      if (o_.head) {
        auto ca = rpc::LoadClusterCa(o_.ca_dir);
        if (!ca.ok())
          return absl::InvalidArgumentError(absl::StrCat("--ca-dir: ", ca.status().message()));
        given_ca_ = *ca;
      } else if (!PathExists(absl::StrCat(o_.ca_dir, "/", rpc::kCaCertFile))) {
        return absl::InvalidArgumentError(absl::StrCat("--ca-dir: no ", o_.ca_dir, "/",
                                                       rpc::kCaCertFile,
                                                       ": give the directory holding the cluster "
                                                       "CA's certificate"));
      }
    }
    if (o_.head && o_.token.empty()) {
      // A head given its token in the environment (a Kubernetes Secret): never on its
      // command line.
      if (const char* env = std::getenv("PHALANX_TOKEN"); env && *env) o_.token = env;
    }
    if (o_.head && !o_.token.empty()) {
      if (auto s = CheckToken(o_.token); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // A head's port and its Redis: the embedded one, one address, or sentinels.
  absl::Status ValidateHead() {
    if (o_.port <= 0 || o_.port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("--port ", o_.port, " is not a port"));
    }
    if (PortInUse(o_.port)) {
      return absl::FailedPreconditionError(
          absl::StrCat("port ", o_.port,
                       " is in use (another cluster or program listens there); pass "
                       "--port with a free one, or `phalanx stop` the old cluster"));
    }
    if (!o_.redis_sentinel.empty()) {
      if (!o_.redis_address.empty()) {
        return absl::InvalidArgumentError(
            "give either --redis-sentinel (a Sentinel-managed Redis) or --redis-address (one "
            "Redis), not both");
      }
      auto sentinels = gcs::ParseSentinels(o_.redis_sentinel, "--redis-sentinel");
      if (!sentinels.ok()) return sentinels.status();
      if (o_.redis_master_name.empty()) {
        return absl::InvalidArgumentError(
            "--redis-sentinel needs --redis-master-name: the name the sentinels monitor "
            "(NAME in their `sentinel monitor NAME HOST PORT QUORUM`)");
      }
    } else if (!o_.redis_master_name.empty() || !o_.redis_sentinel_password.empty()) {
      return absl::InvalidArgumentError(
          "--redis-master-name and --redis-sentinel-password go with --redis-sentinel "
          "HOST:PORT[,HOST:PORT...]; pass the sentinels too");
    } else if (o_.redis_address.empty()) {
      redis_server_ = FindOnPath("redis-server");
      if (redis_server_.empty()) {
        return absl::FailedPreconditionError(
            "redis-server is not on PATH: install it (apt-get install redis-server, or run "
            "scripts/setup.sh), or pass --redis-address HOST:PORT of a running Redis");
      }
      if (o_.redis_fsync != "always" && o_.redis_fsync != "everysec") {
        return absl::InvalidArgumentError(absl::StrCat("--redis-fsync '", o_.redis_fsync,
                                                       "' is unknown; use always or everysec"));
      }
      if (o_.redis_port != 0 && PortInUse(o_.redis_port)) {
        return absl::FailedPreconditionError(
            absl::StrCat("--redis-port ", o_.redis_port, " is in use; pick a free one"));
      }
    } else if (auto split = rpc::SplitHostPort(o_.redis_address, "--redis-address"); !split.ok()) {
      return split.status();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<pid_t> Spawn(const std::string& name, std::vector<std::string> argv) {
    SpawnOptions spawn;
    spawn.argv = std::move(argv);
    spawn.stdout_path = absl::StrCat(session_, "/logs/", name, ".out");
    spawn.new_session = true;
    // Redis writes its log and AOF with the umask's modes: private, as Phalanx's own files are.
    // (The GCS and node managers set theirs; a worker keeps the user's umask for its files.)
    if (name == "redis") spawn.umask = 077;
    auto pid = phalanx::Spawn(spawn);
    if (!pid.ok()) return pid.status();
    started_.push_back({name, *pid});
    std::string program = spawn.argv[0].substr(spawn.argv[0].rfind('/') + 1);
    if (auto s = WritePidFile(session_, name, *pid, program); !s.ok()) return s;
    return *pid;
  }

  // Waits for `ready` (polled) while the process `pid` lives; explains a failure with the
  // tail of `log`.
  absl::Status WaitReady(const std::string& what, pid_t pid, const std::string& log,
                         absl::Duration timeout, const std::function<absl::Status()>& ready) {
    absl::Time deadline = absl::Now() + timeout;
    absl::Status last;
    while (absl::Now() < deadline) {
      if (!ProcessAlive(pid)) {
        return absl::UnavailableError(absl::StrCat(what, " exited during start-up; its log (", log,
                                                   ") ends with:\n", LogTail(log)));
      }
      last = ready();
      if (last.ok()) return absl::OkStatus();
      absl::SleepFor(absl::Milliseconds(50));
    }
    return absl::DeadlineExceededError(absl::StrCat(what, " was not ready within ",
                                                    absl::FormatDuration(timeout), " (",
                                                    last.message(), "); see ", log));
  }

  std::vector<std::string> NodeArgs(const std::string& gcs_address) {
    std::vector<std::string> argv = {
        bin_dir_ + "/phalanx-node",
        "--gcs-address",
        gcs_address,
        "--token-file",
        session_ + "/token",
        "--node-id",
        node_id_,
        "--node-ip",
        node_ip_,
        "--num-cpus",
        absl::StrCat(resources_.Get("CPU")),
        "--num-gpus",
        absl::StrCat(resources_.Get("GPU")),
        "--memory",
        absl::StrCat(resources_.GetFixed("memory") / Resources::kScale),
        "--session-dir",
        session_,
        "--heartbeat-ms",
        absl::StrCat(o_.heartbeat_ms),
        "--log-file",
        session_ + "/logs/node.log"};
    Resources custom = resources_;
    for (const char* builtin : {"CPU", "GPU", "memory"}) custom.SetFixed(builtin, 0);
    if (!custom.Empty()) {
      std::vector<std::string> parts;
      for (const auto& [name, amount] : custom.ToMap()) {
        parts.push_back(absl::StrCat("\"", name, "\": ", amount));
      }
      argv.push_back("--resources");
      argv.push_back(absl::StrCat("{", absl::StrJoin(parts, ", "), "}"));
    }
    if (o_.head) argv.push_back("--head");
    if (!tls_dir_.empty()) argv.insert(argv.end(), {"--tls-dir", tls_dir_});
    argv.insert(argv.end(), {"--metrics-port", absl::StrCat(o_.metrics_port)});
    if (o_.memory_usage_threshold > 0) {
      argv.insert(argv.end(),
                  {"--memory-usage-threshold", absl::StrCat(o_.memory_usage_threshold)});
    }
    if (!o_.object_store_dir.empty()) {
      argv.insert(argv.end(),
                  {"--object-store-dir", std::filesystem::absolute(o_.object_store_dir).string()});
    }
    if (o_.object_store_memory > 0) {
      argv.insert(argv.end(), {"--object-store-memory", absl::StrCat(o_.object_store_memory)});
    }
    return argv;
  }

  // Starts the node manager and waits until the GCS lists it alive.
  absl::Status StartNode(const std::string& gcs_address, gcs::GcsClient* gcs) {
    node_id_ = NewId();
    auto pid = Spawn("node", NodeArgs(gcs_address));
    if (!pid.ok()) return pid.status();
    return WaitReady("the node manager", *pid, session_ + "/logs/node.log", absl::Seconds(30),
                     [&]() -> absl::Status {
                       auto nodes = gcs->GetAllNodes(true);
                       if (!nodes.ok()) return nodes.status();
                       for (const auto& n : *nodes) {
                         if (n.node_id() == node_id_) return absl::OkStatus();
                       }
                       return absl::UnavailableError("not registered yet");
                     });
  }

  int StartHead() {
    std::string token = o_.token.empty() ? RandomHex(24) : o_.token;
    std::string cluster_id = RandomHex(4);
    if (auto s = WriteFile(session_ + "/token", token + "\n", 0600); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    WriteFile(session_ + "/cluster_id", cluster_id + "\n").IgnoreError();
    std::string fingerprint;
    if (o_.no_tls) {
      std::cerr << "phalanx start: " << kNoTlsWarning << "\n";
    } else {
      auto made = MakeHeadTls(cluster_id);
      if (!made.ok())
        return Fail(absl::StrCat("making the cluster's CA: ", made.status().message()));
      fingerprint = *made;
    }
    if (auto s = rpc::UseTls(tls_dir_); !s.ok()) return Fail(std::string(s.message()));

    Redis redis;
    if (auto s = StartRedis(&redis); !s.ok()) return Fail(std::string(s.message()));
    std::string gcs_address = absl::StrCat(node_ip_, ":", o_.port);
    std::unique_ptr<gcs::GcsClient> gcs;
    if (auto s = StartGcs(cluster_id, token, redis, &gcs); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    if (auto s = WriteFile(session_ + "/address", gcs_address + "\n"); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    if (auto s = StartNode(gcs_address, gcs.get()); !s.ok()) return Fail(std::string(s.message()));
    std::string dashboard = "none (--dashboard-port -1)";
    if (auto info = gcs->GetClusterInfo(); info.ok() && info->dashboard_port() > 0) {
      dashboard = absl::StrCat(info->dashboard_https() ? "https" : "http", "://", node_ip_, ":",
                               info->dashboard_port(),
                               "/ (sign in with the token; /metrics for Prometheus)");
    }
    PrintHeadStarted(cluster_id, token, gcs_address, redis, fingerprint, dashboard);
    return 0;
  }

  // The head's Redis: the embedded one, or the one given (an address, or sentinels).
  struct Redis {
    std::string address;
    std::string password;
    bool sentinel = false;
    bool embedded = false;
  };

  // Starts the embedded Redis (loopback only, generated password, AOF) and waits for it, or
  // checks the given one answers; writes its password where the GCS reads it.
  absl::Status StartRedis(Redis* out) {
    std::string& redis_address = out->address;
    std::string& password = out->password;
    redis_address = o_.redis_address;
    password = o_.redis_password;
    out->sentinel = !o_.redis_sentinel.empty();
    out->embedded = redis_address.empty() && !out->sentinel;
    const bool sentinel = out->sentinel;
    const bool embedded = out->embedded;
    if (embedded) {
      password = RandomHex(16);
      int redis_port = o_.redis_port != 0 ? o_.redis_port : FreePort();
      redis_address = absl::StrCat("127.0.0.1:", redis_port);
      std::string data_dir = session_ + "/redis";
      if (auto s = MakeDirs(data_dir, 0700); !s.ok()) return s;
      std::string conf = absl::StrCat(
          "port ", redis_port, "\nbind 127.0.0.1\nprotected-mode yes\nrequirepass ", password,
          "\ndir ", data_dir, "\nappendonly yes\nappendfsync ", o_.redis_fsync, "\nsave \"\"\n",
          "daemonize no\nlogfile ", session_, "/logs/redis.log\n",
          // Redis records its own pid (a bare pid) where `phalanx stop` looks, also when it is
          // started again by hand with this file.
          "pidfile ", session_, "/pids/redis.pid\n");
      if (auto s = WriteFile(session_ + "/redis.conf", conf, 0600); !s.ok()) {
        return s;
      }
      auto pid = Spawn("redis", {redis_server_, session_ + "/redis.conf"});
      if (!pid.ok()) return pid.status();
      gcs::RedisOptions probe{"127.0.0.1", redis_port, password, "probe"};
      probe.connect_timeout = absl::Milliseconds(500);
      auto ready =
          WaitReady("redis-server", *pid, session_ + "/logs/redis.log", absl::Seconds(10),
                    [&]() -> absl::Status { return gcs::ConnectRedisStore(probe).status(); });
      if (!ready.ok()) return ready;
    } else if (sentinel) {
      gcs::RedisOptions probe{"", 0, password, "probe"};
      probe.sentinels = *gcs::ParseSentinels(o_.redis_sentinel, "--redis-sentinel");
      probe.master_name = o_.redis_master_name;
      probe.sentinel_password = o_.redis_sentinel_password;
      if (auto s = gcs::ConnectRedisStore(probe).status(); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("--redis-sentinel: ", s.message()));
      }
      if (auto s = WriteFile(session_ + "/redis_sentinel_password",
                             o_.redis_sentinel_password + "\n", 0600);
          !s.ok()) {
        return s;
      }
    } else {
      auto split = rpc::SplitHostPort(redis_address, "--redis-address");
      gcs::RedisOptions probe{split->first, split->second, password, "probe"};
      if (auto s = gcs::ConnectRedisStore(probe).status(); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("--redis-address: ", s.message()));
      }
    }
    if (auto s = WriteFile(session_ + "/redis_password", password + "\n", 0600); !s.ok()) {
      return s;
    }
    return absl::OkStatus();
  }

  // Starts the GCS and waits until it answers; *gcs is a client of it.
  absl::Status StartGcs(const std::string& cluster_id, const std::string& token, const Redis& redis,
                        std::unique_ptr<gcs::GcsClient>* gcs) {
    std::vector<std::string> redis_args = {"--redis-address", redis.address};
    if (redis.sentinel) {
      redis_args = {"--redis-sentinel",
                    o_.redis_sentinel,
                    "--redis-master-name",
                    o_.redis_master_name,
                    "--redis-sentinel-password-file",
                    session_ + "/redis_sentinel_password"};
    }
    std::vector<std::string> gcs_args = {bin_dir_ + "/phalanx-gcs",
                                         "--port",
                                         absl::StrCat(o_.port),
                                         "--redis-password-file",
                                         session_ + "/redis_password",
                                         "--cluster-id",
                                         cluster_id,
                                         "--token-file",
                                         session_ + "/token",
                                         "--node-timeout-ms",
                                         absl::StrCat(o_.node_timeout_ms),
                                         "--driver-lease-timeout-ms",
                                         absl::StrCat(o_.driver_lease_timeout_ms),
                                         "--partition-timeout-ms",
                                         absl::StrCat(o_.partition_timeout_ms),
                                         "--node-call-timeout-ms",
                                         absl::StrCat(o_.node_call_timeout_ms),
                                         "--log-file",
                                         session_ + "/logs/gcs.log",
                                         "--session-dir",
                                         session_};
    if (!tls_dir_.empty()) gcs_args.insert(gcs_args.end(), {"--tls-dir", tls_dir_});
    gcs_args.insert(gcs_args.end(), {"--dashboard-port", absl::StrCat(o_.dashboard_port)});
    if (!o_.dashboard_port_given) gcs_args.push_back("--dashboard-port-fallback");
    gcs_args.insert(gcs_args.begin() + 3, redis_args.begin(), redis_args.end());
    WriteFile(session_ + "/gcs.args", absl::StrJoin(gcs_args, "\n") + "\n").IgnoreError();
    auto gcs_pid = Spawn("gcs", gcs_args);
    if (!gcs_pid.ok()) return gcs_pid.status();
    auto ready = WaitReady(
        "the GCS", *gcs_pid, session_ + "/logs/gcs.log", absl::Seconds(20), [&]() -> absl::Status {
          auto client = gcs::GcsClient::Connect({absl::StrCat("127.0.0.1:", o_.port), token},
                                                absl::Milliseconds(300));
          if (!client.ok()) return client.status();
          *gcs = std::move(*client);
          return absl::OkStatus();
        });
    if (!ready.ok()) return ready;
    return absl::OkStatus();
  }

  void PrintHeadStarted(const std::string& cluster_id, const std::string& token,
                        const std::string& gcs_address, const Redis& redis,
                        const std::string& fingerprint, const std::string& dashboard) {
    std::cout << "Phalanx head node started (cluster " << cluster_id << ").\n"
              << "  GCS address   " << gcs_address << "\n"
              << "  Redis         "
              << (redis.sentinel
                      ? absl::StrCat("the primary of '", o_.redis_master_name,
                                     "' by the sentinels ", o_.redis_sentinel,
                                     " (external; followed across failovers)")
                      : absl::StrCat(redis.address,
                                     redis.embedded
                                         ? " (embedded; loopback only, password protected, "
                                           "AOF on)"
                                         : " (external)"))
              << "\n"
              << "  Node          " << node_id_ << " with " << resources_.ToString() << "\n"
              << "  TLS           "
              << (o_.no_tls ? "off (--no-tls)"
                            : absl::StrCat("on; CA fingerprint ", fingerprint, " (", tls_dir_, ")"))
              << "\n"
              << "  Dashboard     " << dashboard << "\n"
              << "  Session dir   " << session_ << "\n"
              << "  Logs          " << session_ << "/logs\n\n"
              << "To add another machine to this cluster, run on it (the token in the "
                 "environment, not on a command line: `ps` shows command lines to every user):\n"
              << "  PHALANX_TOKEN=" << token << " phalanx start --address " << gcs_address
              << (o_.no_tls ? " --no-tls" : absl::StrCat(" --ca-fingerprint ", fingerprint)) << "\n"
              << "or put the token in a file only you can read and pass --token-file FILE.\n\n"
              << "Programs on this machine find the cluster by themselves; elsewhere set\n"
              << "  PHALANX_ADDRESS=" << gcs_address << " PHALANX_TOKEN=" << token
              << (o_.no_tls ? "" : " PHALANX_TLS_DIR=<a dir with a copy of tls/ca.pem>") << "\n\n"
              << "See the cluster: phalanx status     Stop everything here: phalanx stop\n";
  }

  int JoinCluster() {
    std::string token = o_.token;
    if (token.empty()) {
      if (const char* env = std::getenv("PHALANX_TOKEN"); env && *env) token = env;
    }
    if (token.empty()) {
      auto resolved = ResolveCluster(o_.address, "");
      if (resolved.ok()) token = resolved->token;
    }
    if (token.empty()) {
      return Fail(
          absl::StrCat("no cluster token: pass --token with the token that "
                       "`phalanx start --head` printed (or set PHALANX_TOKEN)"));
    }
    if (auto s = JoinTls(); !s.ok()) return Fail(std::string(s.message()));
    auto gcs = gcs::GcsClient::Connect({o_.address, token}, absl::Seconds(5));
    if (!gcs.ok()) {
      if (absl::IsUnauthenticated(gcs.status())) {
        return Fail(absl::StrCat("the GCS at ", o_.address,
                                 " refused the token: pass the token that `phalanx start "
                                 "--head` printed"));
      }
      return Fail(std::string(gcs.status().message()));
    }
    if (auto s = WriteFile(session_ + "/token", token + "\n", 0600); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    if (auto s = WriteFile(session_ + "/address", o_.address + "\n"); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    auto info = (*gcs)->GetClusterInfo();
    if (info.ok()) WriteFile(session_ + "/cluster_id", info->cluster_id() + "\n").IgnoreError();
    if (!tls_dir_.empty()) {
      // This machine's own key and certificate: the key never leaves it.
      auto key = rpc::NewPrivateKey();
      auto public_key = key.ok() ? rpc::PublicKeyOf(*key) : key.status();
      if (!public_key.ok()) return Fail(std::string(public_key.status().message()));
      auto chain = (*gcs)->IssueCertificate(*public_key, rpc::MachineNames(node_ip_));
      if (!chain.ok()) {
        return Fail(absl::StrCat("the head did not sign this machine's certificate: ",
                                 chain.status().message()));
      }
      for (auto [file, text] : {std::pair<const char*, const std::string*>{rpc::kKeyFile, &*key},
                                {rpc::kCertFile, &*chain}}) {
        if (auto s = WriteFile(absl::StrCat(tls_dir_, "/", file), *text, 0600); !s.ok()) {
          return Fail(std::string(s.message()));
        }
      }
    }
    if (auto s = StartNode(o_.address, gcs->get()); !s.ok()) return Fail(std::string(s.message()));
    std::cout << "Phalanx node " << node_id_ << " joined the cluster at " << o_.address << " with "
              << resources_.ToString() << ".\n"
              << "  Session dir   " << session_ << "\n"
              << "See the cluster: phalanx status     Stop this node: phalanx stop\n";
    return 0;
  }

  // The head's TLS dir: the cluster's CA and this machine's certificate, signed by it.
  // Returns the CA's fingerprint (what joining machines check).
  absl::StatusOr<std::string> MakeHeadTls(const std::string& cluster_id) {
    std::string dir = session_ + "/tls";
    auto fingerprint = rpc::MakeClusterTlsDir(dir, cluster_id, rpc::MachineNames(node_ip_),
                                              given_ca_ ? &*given_ca_ : nullptr);
    if (fingerprint.ok()) tls_dir_ = dir;
    return fingerprint;
  }

  // A joining machine's trust in the cluster: the CA the head shows, checked against
  // --ca-fingerprint (or taken from a local session of the cluster), into <session>/tls.
  // With --no-tls: the cluster must not speak TLS.
  absl::Status JoinTls() {
    auto tls = rpc::SpeaksTls(o_.address);
    if (!tls.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach the GCS at ", o_.address, ": ", tls.status().message()));
    }
    if (o_.no_tls) {
      if (*tls) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the GCS at ", o_.address, " speaks TLS: drop --no-tls and pass --ca-fingerprint"));
      }
      std::cerr << "phalanx start: " << kNoTlsWarning << "\n";
      return absl::OkStatus();
    }
    if (!*tls) {
      return absl::FailedPreconditionError(
          absl::StrCat("the GCS at ", o_.address,
                       " does not speak TLS (a cluster started with --no-tls): pass --no-tls "
                       "to join it anyway"));
    }
    std::string ca_pem;
    if (!o_.ca_dir.empty()) {
      auto ca = ReadFile(absl::StrCat(o_.ca_dir, "/", rpc::kCaCertFile));
      if (!ca.ok()) return ca.status();
      ca_pem = *ca;
    } else if (!o_.ca_fingerprint.empty()) {
      auto ca = rpc::FetchCaByFingerprint(o_.address, o_.ca_fingerprint);
      if (!ca.ok()) return ca.status();
      ca_pem = *ca;
    } else if (std::string local = LocalTlsDir(o_.address); !local.empty()) {
      auto ca = ReadFile(absl::StrCat(local, "/", rpc::kCaCertFile));
      if (!ca.ok()) return ca.status();
      ca_pem = *ca;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "the cluster at ", o_.address,
          " uses TLS: pass --ca-fingerprint with the fingerprint in the join command that "
          "`phalanx start --head` printed (`phalanx status` on the head shows it too)"));
    }
    tls_dir_ = session_ + "/tls";
    if (auto s = MakeDirs(tls_dir_, 0700); !s.ok()) return s;
    if (auto s = WriteFile(absl::StrCat(tls_dir_, "/", rpc::kCaCertFile), ca_pem, 0600); !s.ok()) {
      return s;
    }
    return rpc::UseTls(tls_dir_);
  }

  // --block: waits for SIGTERM/SIGINT/SIGHUP, or for a process this command started to die
  // (reaping it: they are this process's children), then stops this session's processes.
  static const sigset_t& BlockedSignals() {
    static const sigset_t signals = [] {
      sigset_t s;
      sigemptyset(&s);
      for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&s, sig);
      return s;
    }();
    return signals;
  }

  int Block() {
    const sigset_t& signals = BlockedSignals();
    std::cout << "Staying in the foreground (--block): SIGTERM or Ctrl-C stops this "
              << (o_.head ? "cluster's head" : "node") << "." << std::endl;
    int rc = 0;
    while (true) {
      timespec tick{0, static_cast<long>(absl::ToInt64Nanoseconds(kBlockCheckInterval))};
      int sig = ::sigtimedwait(&signals, nullptr, &tick);
      if (sig > 0) {
        std::cout << "phalanx start: " << strsignal(sig) << ": stopping." << std::endl;
        break;
      }
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      auto dead = std::find_if(started_.begin(), started_.end(),
                               [](const Started& s) { return !ProcessAlive(s.pid); });
      if (dead != started_.end()) {
        std::cerr << "phalanx start: " << dead->name << " (pid " << dead->pid
                  << ") exited; stopping the rest. Its log: " << session_ << "/logs/" << dead->name
                  << ".out" << std::endl;
        rc = 1;
        break;
      }
    }
    if (!StopSessions({session_}, StopOptions{})) rc = 1;
    return rc;
  }

  StartOptions o_;                           // a copy: the token may come from the environment
  std::optional<rpc::KeyAndCert> given_ca_;  // head, --ca-dir
  std::string tls_dir_;                      // this machine's TLS dir (empty: --no-tls)
  Resources resources_;
  std::string node_ip_;
  std::string node_id_;
  std::string bin_dir_;
  std::string redis_server_;
  std::string session_;
  std::vector<Started> started_;
};

}  // namespace

int RunStart(const StartOptions& options) { return Starter(options).Run(); }

int RunMakeCa(const std::string& dir) {
  if (PathExists(absl::StrCat(dir, "/", rpc::kCaKeyFile))) {
    std::cerr << "phalanx make-ca: " << dir << "/" << rpc::kCaKeyFile
              << " exists; give a new directory (a CA is never overwritten)\n";
    return 1;
  }
  auto ca = rpc::NewClusterCa(RandomHex(4));
  auto fingerprint = ca.ok() ? rpc::WriteClusterCa(dir, *ca) : ca.status();
  if (!fingerprint.ok()) {
    std::cerr << "phalanx make-ca: " << fingerprint.status().message() << "\n";
    return 1;
  }
  std::cout << "A cluster CA is in " << dir << " (" << rpc::kCaCertFile << ", " << rpc::kCaKeyFile
            << "; keep the key secret).\n"
            << "  fingerprint " << *fingerprint << "\n"
            << "Start the head with  phalanx start --head --ca-dir " << dir << "\n"
            << "and join with        phalanx start --address HEAD:PORT --ca-dir DIR (DIR holding "
            << rpc::kCaCertFile << ")\n"
            << "                 or  phalanx start --address HEAD:PORT --ca-fingerprint "
            << *fingerprint << "\n";
  return 0;
}

}  // namespace phalanx::cli
