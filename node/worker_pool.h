// WorkerPool: the worker processes of one node, one per actor attempt. It starts them (from a
// thread of its own, so that the kernel's parent-death signal, which follows the starting
// thread, lasts as long as the pool), reaps them (waitpid), enforces each one's memory limit
// and the node-wide memory threshold, and says why each one ended. Thread-safe.
//
// Memory: with a delegated cgroup v2 hierarchy each worker gets a cgroup whose memory.max is
// its `memory` request, and the kernel's OOM kill is read back from memory.events; otherwise
// (this is the usual case on shared machines) RSS is sampled every `sample_period` and a
// worker above its limit is SIGKILLed. Either way the cause is OOM_KILLED with limit and peak.
// Like Ray's memory monitor, when the node's memory use passes `node_threshold` the newest
// worker is killed (OOM_KILLED, the message says why).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/common.pb.h"
#include "node/fork_servers.h"

namespace phalanx::node {

struct WorkerPoolOptions {
  std::string node_id;
  std::string node_address;  // the node manager's gRPC address, given to workers
  std::string gcs_address;
  std::string token;
  std::string tls_dir;  // $PHALANX_TLS_DIR of the workers (empty: plaintext)
  std::string log_dir;
  std::string node_lease_path;  // the node's lease (NodeLease), checked by every worker
  absl::Duration sample_period = absl::Milliseconds(50);
  double node_threshold = 0.95;  // fraction of total memory; >= 1 disables the node monitor
  // "auto" (cgroup v2 when delegated, else rss), "cgroup" or "rss".
  std::string memory_enforcement = "auto";
  // Idle workers kept started per program (code path) once an actor of it ran here, so that
  // the next actor of that program skips process start-up. 0 disables.
  int prestart = 2;
  // Fork C++ workers from a fork server (zygote) per program (node/fork_servers.h)
  // instead of starting a process of the program for each: a burst of creations then pays
  // a fork each, not an exec, dynamic linking and static initialization.
  bool fork_server = true;
  // Test hook: how long the pool waits between starting a worker and recording it, to widen
  // the window in which a worker's first calls reach the node before its record.
  absl::Duration debug_record_delay = absl::ZeroDuration();
};

// How long a worker's call that finds no record of it waits for the spawn in flight that
// started it to record it (the fork server's answer and the worker's cgroup come between
// the worker's start and its record).
inline constexpr absl::Duration kUnrecordedWorkerWait = absl::Seconds(5);

// What a prestarted worker is given when an actor is placed on it.
struct Assignment {
  rpc::ActorInfo actor;
  int attempt = 0;
  std::string log_path;
};

struct WorkerRecord {
  std::string actor_id;
  std::string job_id;      // its actor's job ("" while idle)
  std::string class_name;  // its actor's class
  int attempt = 0;
  pid_t pid = 0;
  std::string address;       // set once the worker is ready
  int64_t memory_limit = 0;  // bytes; 0 = none
  int64_t peak_rss = 0;
  bool warned = false;  // SIGUSR1 sent: near its memory limit (its dying gasp may run)
  int64_t last_rss = 0;
  absl::Time started;
  std::string creation_error;    // the constructor failed with this
  rpc::DeathCause kill_cause;    // set when we killed it (user request, OOM)
  bool node_oom_victim = false;  // killed by the node-wide memory monitor
  std::string cgroup;            // its cgroup v2 directory, if any
  bool idle = false;             // prestarted, waiting for an actor
  std::string code_key;          // language + code path
  std::string log_path;
  std::optional<Assignment> assignment;  // set when an idle worker gets an actor
};

// The memory monitor's rules, apart from /proc and signals (the pool samples, then signals
// what these say): unit-tested with made-up samples and a made-up clock.
struct MemoryPolicy {
  // A worker above this fraction of its limit is warned once (SIGUSR1).
  double warn_fraction = 0.9;
  double node_threshold = 0.95;  // WorkerPoolOptions::node_threshold
  int64_t node_total = 0;        // the node's memory, bytes (0: no node-wide rule)
  // After a node-wide kill, no other until this long passed and the victim is gone.
  absl::Duration between_node_kills = absl::Milliseconds(500);
};

// What one round of the monitor does.
struct MemoryRound {
  std::vector<pid_t> warn;                              // SIGUSR1: near its limit
  std::vector<std::pair<pid_t, rpc::DeathCause>> kill;  // SIGKILL, for this cause
};

// One round: `rss` is the round's samples (pid, bytes; a worker not sampled keeps its last),
// `node_used` reads the node's memory in use (asked only when the node-wide rule may act).
// Updates the records (last and peak RSS, warned, the kill cause, the node's victim) and
// `last_node_kill`. A worker above its limit, with no cgroup to enforce it, is killed
// (OOM_KILLED); past the node's threshold the newest worker not already on its way out is,
// one at a time.
MemoryRound JudgeMemory(std::map<pid_t, WorkerRecord>& workers,
                        const std::vector<std::pair<pid_t, int64_t>>& rss,
                        const std::function<int64_t()>& node_used, const MemoryPolicy& policy,
                        absl::Time now, absl::Time& last_node_kill);

// What a cgroup says of a worker that ended: whether the kernel's OOM killer killed it, and
// its peak use (0: unknown).
struct CgroupEnd {
  bool oom_killed = false;
  int64_t peak = 0;
};

// Why a worker ended, from its record and wait status: the cgroup's OOM kill first, then a
// kill the node made (the cause it recorded), a constructor that failed, then the exit code
// or signal.
rpc::DeathCause ExitCause(const WorkerRecord& record, int wait_status, const CgroupEnd& cgroup,
                          const std::string& node_id, int64_t now_ms);

class WorkerPool {
 public:
  // Called (on the reaper thread) when a worker ended, with its record and its cause.
  using ExitCallback = std::function<void(const WorkerRecord&, const rpc::DeathCause&)>;

  WorkerPool(WorkerPoolOptions options, ExitCallback on_exit);
  ~WorkerPool();

  // Starts the worker for one attempt of `actor`. Idempotent per (actor, attempt): returns the
  // running worker's pid, or waits for the spawn already queued or under way for it. A worker
  // of an older attempt of the same actor is killed first (once it has a pid, if it has none
  // yet).
  absl::StatusOr<pid_t> Start(const rpc::ActorInfo& actor, int attempt);

  // A prestarted worker (`pid`) waits here for an actor; DeadlineExceeded after `timeout`
  // (it asks again), Unavailable when the pool stops or does not know it. A worker that calls
  // before its spawn recorded it waits for the record.
  absl::StatusOr<Assignment> WaitForAssignment(pid_t pid, absl::Duration timeout);

  // SIGKILLs the worker of `actor_id` (attempt -1: any) and remembers `cause` for its exit. A
  // worker still queued or being spawned is killed as soon as it has a pid.
  bool Kill(const std::string& actor_id, int attempt, const rpc::DeathCause& cause);

  // Records the address (ready) or the constructor's error of a worker; one that reports
  // before its spawn recorded it waits for the record (at most kUnrecordedWorkerWait).
  void MarkReady(const std::string& actor_id, int attempt, const std::string& address,
                 const std::string& error);

  std::vector<WorkerRecord> List() const;
  // Stops every worker (SIGKILL) without reporting their exits.
  void Shutdown();

  bool using_cgroups() const { return !cgroup_root_.empty(); }

 private:
  void SpawnLoop();
  void ReapLoop();
  void MonitorLoop();
  // Starts a process for `actor` (attempt), or an idle one for its program when `idle`.
  absl::StatusOr<pid_t> SpawnNow(const rpc::ActorInfo& actor, int attempt, bool idle);
  struct SpawnRequest;
  // A spawn ended with `result`: its Start (and any that waits for it) returns.
  void FinishSpawnLocked(SpawnRequest& request, absl::StatusOr<pid_t> result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues prestarts until `key` has options_.prestart idle or starting workers.
  void TopUpLocked(const rpc::ActorInfo& actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerPoolOptions options_;
  const ExitCallback on_exit_;
  std::string cgroup_root_;                    // empty: RSS sampling
  std::unique_ptr<ForkServers> fork_servers_;  // null: fork servers off

  mutable absl::Mutex mu_;
  std::map<pid_t, WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Spawns between starting a worker and recording it in workers_: a worker runs, and may
  // call the node, before its spawn has its pid and records it.
  int spawning_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_node_kill_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  // Spawn requests, served by spawn_thread_.
  struct SpawnRequest {
    rpc::ActorInfo actor;
    int attempt;
    bool idle = false;  // a prestart: nobody waits for it
    absl::StatusOr<pid_t> result = absl::UnknownError("not run");
    bool done = false;
    // Set by a Kill (or a newer attempt's Start) that came before the worker had its pid: the
    // worker is killed for this cause as soon as it has one.
    rpc::DeathCause kill_cause;
  };
  std::vector<std::shared_ptr<SpawnRequest>> spawn_queue_ ABSL_GUARDED_BY(mu_);
  // Each actor's spawn, from its Start until its worker is recorded in workers_ (queued or
  // under way). A Start of the same attempt in that time (the GCS's call timed out on a busy
  // node and was sent again) waits for it, rather than starting a second worker of the attempt.
  std::map<std::string, std::shared_ptr<SpawnRequest>> actor_spawns_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> prestarting_ ABSL_GUARDED_BY(mu_);  // code key → in the queue

  std::thread spawn_thread_;
  std::thread reap_thread_;
  std::thread monitor_thread_;
};

}  // namespace phalanx::node
