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

class WorkerPool {
 public:
  // Called (on the reaper thread) when a worker ended, with its record and its cause.
  using ExitCallback = std::function<void(const WorkerRecord&, const rpc::DeathCause&)>;

  WorkerPool(WorkerPoolOptions options, ExitCallback on_exit);
  ~WorkerPool();

  // Starts the worker for one attempt of `actor`. Idempotent per (actor, attempt): returns the
  // running worker's pid. A worker of an older attempt of the same actor is killed first.
  absl::StatusOr<pid_t> Start(const rpc::ActorInfo& actor, int attempt);

  // A prestarted worker (`pid`) waits here for an actor; DeadlineExceeded after `timeout`
  // (it asks again), Unavailable when the pool stops or does not know it. A worker that calls
  // before its spawn recorded it waits for the record.
  absl::StatusOr<Assignment> WaitForAssignment(pid_t pid, absl::Duration timeout);

  // SIGKILLs the worker of `actor_id` (attempt -1: any) and remembers `cause` for its exit.
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
  // Queues prestarts until `key` has options_.prestart idle or starting workers.
  void TopUpLocked(const rpc::ActorInfo& actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  rpc::DeathCause CauseOf(const WorkerRecord& record, int wait_status) const;

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
  };
  std::vector<std::shared_ptr<SpawnRequest>> spawn_queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> prestarting_ ABSL_GUARDED_BY(mu_);  // code key → in the queue

  std::thread spawn_thread_;
  std::thread reap_thread_;
  std::thread monitor_thread_;
};

}  // namespace phalanx::node
