#include "node/worker_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/node_lease.h"
#include "base/process.h"
#include "base/python_env.h"
#include "base/system.h"
#include "base/worker_env.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

namespace phalanx::node {
namespace {

// The cgroup v2 directory to put workers under, or "" for RSS sampling. Only a directory the
// operator delegated ($PHALANX_CGROUP_ROOT: cgroup2, writable, memory controller enabled for
// its children) is used: the node never reorganizes a hierarchy it does not own.
std::string DetectCgroupRoot(const std::string& mode) {
  if (mode == "rss") return "";
  const char* root = std::getenv("PHALANX_CGROUP_ROOT");
  std::string why;
  if (root == nullptr || *root == '\0') {
    why = "PHALANX_CGROUP_ROOT is not set";
  } else {
    struct statfs fs;
    auto controls = ReadFile(absl::StrCat(root, "/cgroup.subtree_control"));
    if (::statfs(root, &fs) != 0 || fs.f_type != CGROUP2_SUPER_MAGIC) {
      why = absl::StrCat(root, " is not a cgroup v2 directory");
    } else if (::access(root, W_OK) != 0) {
      why = absl::StrCat(root, " is not writable");
    } else if (!controls.ok() || !absl::StrContains(*controls, "memory")) {
      why = absl::StrCat(root, "/cgroup.subtree_control does not enable memory");
    } else {
      return root;
    }
  }
  if (mode == "cgroup") {
    spdlog::warn("memory enforcement 'cgroup' asked for but unavailable ({}); sampling RSS", why);
  } else {
    spdlog::info("memory limits enforced by RSS sampling ({})", why);
  }
  return "";
}

int64_t ReadCgroupValue(const std::string& path, const std::string& key = "") {
  auto content = ReadFile(path);
  if (!content.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(*content, '\n')) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t v;
    if (key.empty() && parts.size() == 1 && absl::SimpleAtoi(parts[0], &v)) return v;
    if (parts.size() == 2 && parts[0] == key && absl::SimpleAtoi(parts[1], &v)) return v;
  }
  return -1;
}

// How long the exit of a child we do not know is kept, in case it is a worker whose record
// is still being written.
constexpr absl::Duration kUnclaimedExitKept = absl::Seconds(10);

// How often the RSS of a worker without a memory limit is read (one with a limit: every
// sample_period).
constexpr absl::Duration kUnlimitedSamplePeriod = absl::Seconds(1);

// The modules a Python worker of `actor` imports first ("" when none).
std::string Imports(const rpc::ActorInfo& actor) {
  auto it = actor.env().find(kWorkerImportsEnv);
  return it == actor.env().end() ? "" : it->second;
}

// Which prestarted workers can take `actor`: the same language, program and imports.
std::string CodeKey(const rpc::ActorInfo& actor) {
  return absl::StrCat(actor.language(), "|", actor.code_path(), "|", Imports(actor));
}

// A prestarted worker can take an actor that needs nothing set before its process starts:
// its environment may only name the job (taken on late) and the imports (part of the key).
bool Poolable(const rpc::ActorInfo& actor) {
  for (const auto& [key, value] : actor.env()) {
    if (key != kJobIdEnv && key != kWorkerImportsEnv) return false;
  }
  return true;
}

}  // namespace

WorkerPool::WorkerPool(WorkerPoolOptions options, ExitCallback on_exit)
    : options_(std::move(options)), on_exit_(std::move(on_exit)) {
  cgroup_root_ = DetectCgroupRoot(options_.memory_enforcement);
  MakeDirs(options_.log_dir).IgnoreError();
  if (options_.fork_server) {
    fork_servers_ = std::make_unique<ForkServers>(ForkServerOptions{options_.log_dir});
  }
  spawn_thread_ = std::thread([this] { SpawnLoop(); });
  reap_thread_ = std::thread([this] { ReapLoop(); });
  monitor_thread_ = std::thread([this] { MonitorLoop(); });
}

WorkerPool::~WorkerPool() {
  Shutdown();
  spawn_thread_.join();
  reap_thread_.join();
  monitor_thread_.join();
}

void WorkerPool::Shutdown() {
  std::vector<pid_t> pids;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (const auto& [pid, w] : workers_) pids.push_back(pid);
  }
  if (fork_servers_) fork_servers_->StopAll();
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  for (pid_t pid : pids) WaitProcessGone(pid, absl::Seconds(2));
}

absl::StatusOr<pid_t> WorkerPool::Start(const rpc::ActorInfo& actor, int attempt) {
  std::vector<pid_t> stale;
  rpc::DeathCause superseded;
  superseded.set_kind(rpc::DeathCause::KILLED_BY_USER);
  superseded.set_message("superseded by a newer attempt");
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the node manager is stopping");
    for (auto& [pid, w] : workers_) {
      if (w.idle || w.actor_id != actor.actor_id()) continue;
      if (w.attempt == attempt) return pid;
      if (w.attempt < attempt) {
        w.kill_cause = superseded;
        stale.push_back(pid);
      }
    }
    if (auto it = actor_spawns_.find(actor.actor_id()); it != actor_spawns_.end()) {
      std::shared_ptr<SpawnRequest> under_way = it->second;
      if (under_way->attempt == attempt) {
        mu_.Await(absl::Condition(&under_way->done));
        return under_way->result;
      }
      if (under_way->attempt < attempt && under_way->kill_cause.kind() == rpc::DeathCause::NONE) {
        under_way->kill_cause = superseded;
      }
    }
  }
  for (pid_t pid : stale) ::kill(pid, SIGKILL);
  {
    // A prestarted worker of the same program takes the actor at once.
    absl::MutexLock lock(&mu_);
    bool limited = actor.resources().amounts().count("memory") > 0;
    if (Poolable(actor) && (cgroup_root_.empty() || !limited)) {
      for (auto& [pid, w] : workers_) {
        if (!w.idle || w.code_key != CodeKey(actor) ||
            w.kill_cause.kind() != rpc::DeathCause::NONE) {
          continue;
        }
        w.idle = false;
        w.actor_id = actor.actor_id();
        w.job_id = actor.job_id();
        w.class_name = actor.class_name();
        w.attempt = attempt;
        w.started = absl::Now();
        w.peak_rss = 0;
        auto limit = actor.resources().amounts().find("memory");
        w.memory_limit =
            limit == actor.resources().amounts().end() ? 0 : static_cast<int64_t>(limit->second);
        w.log_path = absl::StrCat(options_.log_dir, "/worker-", ShortId(actor.actor_id()), "-",
                                  attempt, ".log");
        w.assignment = Assignment{actor, attempt, w.log_path};
        spdlog::info("prestarted worker {} takes actor {} ({}) attempt {}", pid,
                     ShortId(actor.actor_id()), actor.class_name(), attempt);
        TopUpLocked(actor);
        return pid;
      }
    }
  }
  auto request = std::make_shared<SpawnRequest>();
  request->actor = actor;
  request->attempt = attempt;
  absl::MutexLock lock(&mu_);
  // Another Start of this attempt may have queued it while the lock was free: wait for that.
  if (auto it = actor_spawns_.find(actor.actor_id());
      it != actor_spawns_.end() && it->second->attempt == attempt) {
    std::shared_ptr<SpawnRequest> under_way = it->second;
    mu_.Await(absl::Condition(&under_way->done));
    return under_way->result;
  }
  actor_spawns_[actor.actor_id()] = request;
  spawn_queue_.push_back(request);
  mu_.Await(absl::Condition(&request->done));
  if (request->result.ok() && Poolable(actor)) TopUpLocked(actor);
  return request->result;
}

void WorkerPool::TopUpLocked(const rpc::ActorInfo& actor) {
  if (options_.prestart <= 0 || stopping_) return;
  std::string key = CodeKey(actor);
  int have = prestarting_[key];
  for (const auto& [pid, w] : workers_) {
    if (w.idle && w.code_key == key) ++have;
  }
  rpc::ActorInfo program;
  program.set_language(actor.language());
  program.set_code_path(actor.code_path());
  program.set_class_name("(prestarted)");
  if (std::string imports = Imports(actor); !imports.empty()) {
    (*program.mutable_env())[kWorkerImportsEnv] = imports;
  }
  for (; have < options_.prestart; ++have) {
    auto request = std::make_shared<SpawnRequest>();
    request->actor = program;
    request->idle = true;
    spawn_queue_.push_back(request);
    ++prestarting_[key];
  }
}

absl::StatusOr<Assignment> WorkerPool::WaitForAssignment(pid_t pid, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  // Not in workers_ while a spawn is in flight: probably not recorded yet (it called in
  // before its spawn had its pid), so wait for the record.
  auto has_news = [this, pid]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> bool {
    auto it = workers_.find(pid);
    if (it == workers_.end()) return stopping_ || spawning_ == 0;
    return stopping_ || it->second.assignment.has_value();
  };
  mu_.AwaitWithTimeout(absl::Condition(&has_news), timeout);
  auto it = workers_.find(pid);
  if (stopping_ || (it == workers_.end() && spawning_ == 0)) {
    return absl::UnavailableError("this node no longer keeps that worker");
  }
  if (it == workers_.end() || !it->second.assignment.has_value()) {
    return absl::DeadlineExceededError("no actor yet");
  }
  return *it->second.assignment;
}

void WorkerPool::SpawnLoop() {
  while (true) {
    std::shared_ptr<SpawnRequest> request;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->spawn_queue_.empty();
          },
          this));
      if (spawn_queue_.empty()) return;  // stopping
      request = spawn_queue_.front();
      spawn_queue_.erase(spawn_queue_.begin());
      if (stopping_) {
        FinishSpawnLocked(*request, absl::UnavailableError("the node manager is stopping"));
        continue;
      }
    }
    absl::StatusOr<pid_t> result = SpawnNow(request->actor, request->attempt, request->idle);
    pid_t kill_now = 0;
    {
      absl::MutexLock lock(&mu_);
      FinishSpawnLocked(*request, result);
      // Killed (or superseded) before it had a pid: its exit is reported with that cause.
      if (result.ok() && request->kill_cause.kind() != rpc::DeathCause::NONE) {
        auto w = workers_.find(*result);
        if (w != workers_.end() && w->second.kill_cause.kind() == rpc::DeathCause::NONE) {
          w->second.kill_cause = request->kill_cause;
          kill_now = *result;
        }
      }
    }
    if (kill_now > 0) ::kill(kill_now, SIGKILL);
  }
}

void WorkerPool::FinishSpawnLocked(SpawnRequest& request, absl::StatusOr<pid_t> result) {
  request.result = std::move(result);
  request.done = true;
  if (request.idle) --prestarting_[CodeKey(request.actor)];
  auto it = actor_spawns_.find(request.actor.actor_id());
  if (it != actor_spawns_.end() && it->second.get() == &request) actor_spawns_.erase(it);
}

absl::StatusOr<pid_t> WorkerPool::SpawnNow(const rpc::ActorInfo& actor, int attempt, bool idle) {
  SpawnOptions spawn;
  const std::string& code = actor.code_path();
  if (actor.language() == "python") {
    spawn.argv = {PhalanxPython(), "-m", "phalanx._worker"};
  } else if (code.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor ", actor.class_name(),
                     " names no code path (the program or shared library "
                     "that holds the class)"));
  } else {
    spawn.argv = {code};
  }
  spawn.env = {{"PHALANX_WORKER_ACTOR_ID", idle ? "" : actor.actor_id()},
               {"PHALANX_WORKER_ATTEMPT", absl::StrCat(attempt)},
               {"PHALANX_WORKER_POOLED", idle ? "1" : ""},
               {"PHALANX_NODE_ADDRESS", options_.node_address},
               {"PHALANX_NODE_ID", options_.node_id},
               {"PHALANX_ADDRESS", options_.gcs_address},
               {"PHALANX_TOKEN", options_.token},
               {"PHALANX_TLS_DIR", options_.tls_dir},
               {kNodeLeaseEnv, options_.node_lease_path}};
  if (actor.language() == "python") {
    // The phalanx package and its native module, ahead of whatever else is on the path.
    std::string path = PhalanxPythonPath();
    if (const char* old = std::getenv("PYTHONPATH"); old && *old) {
      path = absl::StrCat(path, ":", old);
    }
    spawn.env.emplace_back("PYTHONPATH", path);
    spawn.env.emplace_back("PYTHONUNBUFFERED", "1");
  }
  for (const auto& [k, v] : actor.env()) spawn.env.emplace_back(k, v);
  static std::atomic<int> prestarted_count{0};
  spawn.stdout_path =
      idle ? absl::StrCat(options_.log_dir, "/worker-prestarted-", prestarted_count++, ".log")
           : absl::StrCat(options_.log_dir, "/worker-", ShortId(actor.actor_id()), "-", attempt,
                          ".log");
  spawn.die_with_parent = true;
  {
    absl::MutexLock lock(&mu_);
    ++spawning_;
  }
  absl::StatusOr<pid_t> pid = absl::UnavailableError("not forked");
  if (fork_servers_ && actor.language() != "python" && Poolable(actor)) {
    // What every worker of this node shares is the server's; the rest the fork sets.
    std::vector<std::pair<std::string, std::string>> shared;
    for (const auto& [k, v] : spawn.env) {
      if (!absl::StartsWith(k, "PHALANX_WORKER_") && k != kJobIdEnv) shared.emplace_back(k, v);
    }
    pid = fork_servers_->Fork(code, shared, spawn.env, spawn.stdout_path);
    if (!pid.ok() && !absl::IsFailedPrecondition(pid.status())) {
      spdlog::warn("{}; starting a process instead", pid.status().message());
    }
  }
  if (!pid.ok()) pid = Spawn(spawn);
  if (!pid.ok()) {
    absl::MutexLock lock(&mu_);
    --spawning_;
    return pid.status();
  }
  if (options_.debug_record_delay > absl::ZeroDuration()) {
    absl::SleepFor(options_.debug_record_delay);
  }

  WorkerRecord record;
  record.actor_id = idle ? "" : actor.actor_id();
  record.job_id = idle ? "" : actor.job_id();
  record.class_name = idle ? "" : actor.class_name();
  record.attempt = attempt;
  record.pid = *pid;
  record.started = absl::Now();
  record.idle = idle;
  record.code_key = CodeKey(actor);
  record.log_path = spawn.stdout_path;
  if (idle) {
    absl::MutexLock lock(&mu_);
    workers_[*pid] = record;
    --spawning_;
    return *pid;
  }
  auto limit = actor.resources().amounts().find("memory");
  if (limit != actor.resources().amounts().end()) {
    record.memory_limit = static_cast<int64_t>(limit->second);
  }
  if (!cgroup_root_.empty() && record.memory_limit > 0) {
    std::string dir =
        absl::StrCat(cgroup_root_, "/actor-", ShortId(actor.actor_id()), "-", attempt, "-", *pid);
    if (::mkdir(dir.c_str(), 0755) == 0 &&
        WriteFile(dir + "/memory.max", absl::StrCat(record.memory_limit)).ok() &&
        WriteFile(dir + "/memory.swap.max", "0").ok() &&
        WriteFile(dir + "/cgroup.procs", absl::StrCat(*pid)).ok()) {
      record.cgroup = dir;
    } else {
      spdlog::warn("cannot put worker {} in a cgroup; sampling its RSS instead", *pid);
      ::rmdir(dir.c_str());
    }
  }
  spdlog::info("started worker {} for actor {} ({}) attempt {}{}", *pid, ShortId(actor.actor_id()),
               actor.class_name(), attempt,
               record.memory_limit > 0
                   ? absl::StrCat(" with memory limit ",
                                  FormatBytes(static_cast<double>(record.memory_limit)))
                   : "");
  absl::MutexLock lock(&mu_);
  workers_[*pid] = record;
  --spawning_;
  return *pid;
}

bool WorkerPool::Kill(const std::string& actor_id, int attempt, const rpc::DeathCause& cause) {
  std::vector<pid_t> pids;
  bool pending = false;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [pid, w] : workers_) {
      if (w.actor_id == actor_id && (attempt < 0 || w.attempt == attempt)) {
        if (w.kill_cause.kind() == rpc::DeathCause::NONE) w.kill_cause = cause;
        pids.push_back(pid);
      }
    }
    if (auto it = actor_spawns_.find(actor_id); it != actor_spawns_.end()) {
      SpawnRequest& spawn = *it->second;
      if (attempt < 0 || spawn.attempt == attempt) {
        if (spawn.kill_cause.kind() == rpc::DeathCause::NONE) spawn.kill_cause = cause;
        pending = true;
      }
    }
  }
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  return !pids.empty() || pending;
}

void WorkerPool::MarkReady(const std::string& actor_id, int attempt, const std::string& address,
                           const std::string& error) {
  absl::MutexLock lock(&mu_);
  auto recorded = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_ || spawning_ == 0) return true;
    for (const auto& [pid, w] : workers_) {
      if (w.actor_id == actor_id && w.attempt == attempt) return true;
    }
    return false;
  };
  mu_.AwaitWithTimeout(absl::Condition(&recorded), kUnrecordedWorkerWait);
  for (auto& [pid, w] : workers_) {
    if (w.actor_id == actor_id && w.attempt == attempt) {
      w.address = address;
      w.creation_error = error;
    }
  }
}

std::vector<WorkerRecord> WorkerPool::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerRecord> out;
  for (const auto& [pid, w] : workers_) out.push_back(w);
  return out;
}

rpc::DeathCause ExitCause(const WorkerRecord& w, int status, const CgroupEnd& cgroup,
                          const std::string& node_id, int64_t now_ms) {
  rpc::DeathCause cause;
  cause.set_node_id(node_id);
  cause.set_time_ms(now_ms);
  if (cgroup.oom_killed) {
    cause.set_kind(rpc::DeathCause::OOM_KILLED);
    cause.set_limit_bytes(w.memory_limit);
    cause.set_peak_bytes(std::max(cgroup.peak, w.peak_rss));
    cause.set_message("cgroup memory.max");
    return cause;
  }
  if (w.kill_cause.kind() != rpc::DeathCause::NONE) {
    rpc::DeathCause k = w.kill_cause;
    k.set_node_id(node_id);
    k.set_time_ms(now_ms);
    return k;
  }
  if (!w.creation_error.empty()) {
    cause.set_kind(rpc::DeathCause::CREATION_FAILED);
    cause.set_message(w.creation_error);
    return cause;
  }
  if (WIFEXITED(status)) {
    cause.set_kind(rpc::DeathCause::EXITED);
    cause.set_exit_code(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    cause.set_kind(rpc::DeathCause::SIGNALED);
    cause.set_signal(WTERMSIG(status));
  }
  return cause;
}

void WorkerPool::ReapLoop() {
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::map<pid_t, int> pidfds;
  std::map<pid_t, std::pair<int, absl::Time>> unclaimed;  // pid → wait status, when reaped
  while (true) {
    std::vector<pid_t> known;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ && workers_.empty()) break;
      for (const auto& [pid, w] : workers_) known.push_back(pid);
    }
    for (pid_t pid : known) {
      if (!pidfds.count(pid)) {
        int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
        pidfds[pid] = fd;  // -1 when it is already gone: waitpid below picks it up
      }
    }
    std::vector<pollfd> fds;
    fds.push_back({wake, POLLIN, 0});
    for (const auto& [pid, fd] : pidfds) {
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    }
    // New workers appear without waking us; a short timeout bounds how long one goes
    // unwatched. Exits of watched workers wake us at once.
    ::poll(fds.data(), fds.size(), 20);
    std::set<int> ended_fds;
    for (const auto& p : fds) {
      if (p.revents != 0) ended_fds.insert(p.fd);
    }
    for (auto it = pidfds.begin(); it != pidfds.end();) {
      pid_t pid = it->first;
      // Only a worker whose pidfd says it ended (or that was gone before we watched it, or
      // reaped by the sweep below) is asked: one waitpid per exit, not per worker per round.
      if (it->second >= 0 && !ended_fds.count(it->second) && !unclaimed.count(pid)) {
        ++it;
        continue;
      }
      int status = 0;
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == 0) {
        ++it;
        continue;
      }
      if (auto u = unclaimed.find(pid); r < 0 && u != unclaimed.end()) {
        // Reaped below before we knew it (a forked worker that ended at once).
        r = pid;
        status = u->second.first;
        unclaimed.erase(u);
      }
      if (it->second >= 0) ::close(it->second);
      it = pidfds.erase(it);
      WorkerRecord record;
      bool report;
      {
        absl::MutexLock lock(&mu_);
        auto w = workers_.find(pid);
        if (w == workers_.end()) continue;
        record = w->second;
        workers_.erase(w);
        report = !stopping_ && !record.idle;
      }
      CgroupEnd cgroup;
      if (!record.cgroup.empty()) {
        cgroup.oom_killed = ReadCgroupValue(record.cgroup + "/memory.events", "oom_kill") > 0;
        cgroup.peak = std::max<int64_t>(ReadCgroupValue(record.cgroup + "/memory.peak"), 0);
      }
      rpc::DeathCause cause =
          ExitCause(record, r == pid ? status : 0, cgroup, options_.node_id, NowMs());
      if (!record.cgroup.empty()) ::rmdir(record.cgroup.c_str());
      spdlog::info("worker {} of actor {} attempt {} ended: kind {} code {} signal {}", pid,
                   ShortId(record.actor_id), record.attempt, static_cast<int>(cause.kind()),
                   cause.exit_code(), cause.signal());
      if (report && on_exit_) on_exit_(record, cause);
    }
    // Every other child that ended: fork servers, and orphans that the kernel gives us as a
    // child subreaper (what a worker started and left behind). A worker we do not know yet
    // (forked, and ended before its record was written) is claimed above in a later round.
    absl::Time now = absl::Now();
    int status = 0;
    for (pid_t r; (r = ::waitpid(-1, &status, WNOHANG)) > 0;) unclaimed[r] = {status, now};
    for (auto it = unclaimed.begin(); it != unclaimed.end();) {
      it = now - it->second.second > kUnclaimedExitKept ? unclaimed.erase(it) : std::next(it);
    }
  }
  for (const auto& [pid, fd] : pidfds) {
    if (fd >= 0) ::close(fd);
  }
  ::close(wake);
}

MemoryRound JudgeMemory(std::map<pid_t, WorkerRecord>& workers,
                        const std::vector<std::pair<pid_t, int64_t>>& rss,
                        const std::function<int64_t()>& node_used, const MemoryPolicy& policy,
                        absl::Time now, absl::Time& last_node_kill) {
  MemoryRound round;
  for (const auto& [pid, bytes] : rss) {
    auto found = workers.find(pid);
    if (bytes < 0 || found == workers.end()) continue;
    WorkerRecord& w = found->second;
    w.last_rss = bytes;
    w.peak_rss = std::max(w.peak_rss, bytes);
    // Near the limit: warn the worker once (an elastic rank with `dump: true` writes its
    // committed state while it still can).
    if (w.memory_limit > 0 && !w.warned && !w.idle &&
        static_cast<double>(bytes) > policy.warn_fraction * static_cast<double>(w.memory_limit)) {
      w.warned = true;
      round.warn.push_back(pid);
    }
    if (w.memory_limit > 0 && w.cgroup.empty() && bytes > w.memory_limit &&
        w.kill_cause.kind() == rpc::DeathCause::NONE) {
      w.kill_cause.set_kind(rpc::DeathCause::OOM_KILLED);
      w.kill_cause.set_limit_bytes(w.memory_limit);
      w.kill_cause.set_peak_bytes(w.peak_rss);
      w.kill_cause.set_message("RSS above the actor's memory request");
      round.kill.emplace_back(pid, w.kill_cause);
    }
  }
  // One node-wide kill at a time: wait until the last victim is gone and its memory
  // released before judging again.
  bool victim_pending = false;
  for (const auto& [pid, w] : workers) victim_pending |= w.node_oom_victim;
  if (policy.node_threshold >= 1.0 || policy.node_total <= 0 || victim_pending ||
      now - last_node_kill <= policy.between_node_kills) {
    return round;
  }
  double fraction = static_cast<double>(node_used()) / static_cast<double>(policy.node_total);
  if (fraction <= policy.node_threshold) return round;
  // Kill the newest worker not already on its way out.
  WorkerRecord* newest = nullptr;
  for (auto& [pid, w] : workers) {
    if (w.idle || w.kill_cause.kind() != rpc::DeathCause::NONE) continue;
    if (newest == nullptr || w.started > newest->started) newest = &w;
  }
  if (newest == nullptr) return round;
  newest->node_oom_victim = true;
  newest->kill_cause.set_kind(rpc::DeathCause::OOM_KILLED);
  newest->kill_cause.set_limit_bytes(
      static_cast<int64_t>(policy.node_threshold * static_cast<double>(policy.node_total)));
  newest->kill_cause.set_peak_bytes(newest->peak_rss);
  newest->kill_cause.set_message(absl::StrCat(
      "node memory use ", static_cast<int>(fraction * 100), "% passed the ",
      static_cast<int>(policy.node_threshold * 100), "% threshold; the newest actor was killed"));
  round.kill.emplace_back(newest->pid, newest->kill_cause);
  last_node_kill = now;
  return round;
}

void WorkerPool::MonitorLoop() {
  MemoryPolicy policy;
  policy.node_threshold = options_.node_threshold;
  policy.node_total = TotalMemoryBytes();
  absl::Time last_full_sample = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.sample_period);
      if (stopping_) return;
    }
    // Read outside the lock (a /proc read per worker): workers with a limit every period,
    // the others every kUnlimitedSamplePeriod (their RSS only feeds peaks and metrics).
    absl::Time now = absl::Now();
    bool all = now - last_full_sample >= kUnlimitedSamplePeriod;
    if (all) last_full_sample = now;
    std::vector<pid_t> due;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [pid, w] : workers_) {
        if (all || w.memory_limit > 0) due.push_back(pid);
      }
    }
    std::vector<std::pair<pid_t, int64_t>> sampled;
    for (pid_t pid : due) sampled.emplace_back(pid, ProcessRssBytes(pid));
    MemoryRound round;
    {
      absl::MutexLock lock(&mu_);
      round = JudgeMemory(workers_, sampled, UsedMemoryBytes, policy, absl::Now(), last_node_kill_);
    }
    for (pid_t pid : round.warn) ::kill(pid, SIGUSR1);
    for (const auto& [pid, cause] : round.kill) {
      spdlog::warn("killing worker {}: OOM ({})", pid, cause.message());
      ::kill(pid, SIGKILL);
    }
  }
}

}  // namespace phalanx::node
