// Machinery of actors/api.h, not part of the contract: remote functions (tasks) on pooled,
// leased workers, for C++ (phalanx::Task) and Python (@phalanx.remote on a function).
//
// A task runs on a task worker: an actor of a built-in class ("phalanx.TaskWorker" in a C++
// program, phalanx._task.TaskWorker in Python) that hosts functions instead of one object.
// The calling process keeps one pool of them per shape (language, program, resources,
// placement): a task goes to an idle worker of its pool as one actor call (one hop, no
// process start); when none is idle it queues, and the pool leases another worker (creates
// the actor and waits until it answers) while the queue is longer than the leases under
// way (short tasks are pipelined: see kPipelineTaskTime). A worker the queue no longer needs
// lends its CPU after kTaskWorkerLendAfterIdle and is returned (killed) after
// kTaskWorkerIdleTimeout; a task waiting in get lends its worker's CPU too (BlockedScope). Leases
// the cluster cannot grant stay pending in the GCS, as Ray's lease requests do, and are cancelled
// once the queue is empty.
//
// A task's ObjectRef arguments (`deps`) are resolved before it is sent: the pool waits for
// them and `assemble` splices their values into the call's arguments (by value; Python's
// large values travel as references into its object store, python/phalanx/_objects.py). A failed
// dependency fails the task with its error.
//
// A worker's death fails its task with ActorDied; the pool drops the worker and sends the
// task again (to another worker) up to `max_retries` times, and then fails it with the death
// cause. An application error is retried only when `retryable` says so.
//
// Thread-safe. Completions run on the thread that reads the reply; no lock is held while a
// call is sent.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "actors/internal/actor_options.h"
#include "worker/object_state.h"

namespace phalanx::internal {

// An idle task worker is returned (its actor killed) after this long without a task.
inline constexpr absl::Duration kTaskWorkerIdleTimeout = absl::Seconds(10);
// An idle task worker lends its CPU back to the cluster after this long without a task (the
// actor lives on, for kTaskWorkerIdleTimeout), as Ray returns an idle worker's lease: the
// tasks of other pools, a nested task's children among them, may need it. Its pool takes the
// CPU back before it sends the worker a task, or returns the worker if none is free.
inline constexpr absl::Duration kTaskWorkerLendAfterIdle = absl::Milliseconds(200);
// How often idle workers and unneeded leases are looked for.
inline constexpr absl::Duration kTaskPoolReapInterval = absl::Milliseconds(100);
// At most this many leases (worker actors not yet answering) under way per pool at once.
inline constexpr int kMaxLeasesInFlight = 8;
// At most this many workers per pool (a pool of tasks that ask for no CPU has no other bound).
inline constexpr int kMaxTaskWorkersPerPool = 256;
// Short tasks are pipelined: while the pool's tasks take less than kPipelineTaskTime each (a
// moving average of the time a worker spends on one), a worker is sent up to
// kMaxTasksInFlightPerWorker at once, so that it never waits a round trip between two; a
// task waits behind at most that many short ones. Longer tasks go one per worker, to the
// first that is free.
inline constexpr absl::Duration kPipelineTaskTime = absl::Milliseconds(5);
inline constexpr int kMaxTasksInFlightPerWorker = 16;

struct TaskSubmission {
  std::string function;  // the function's name, for messages ("mymodule.square")
  // The task worker: its class, creation options (resources, placement, language, program,
  // env) and constructor arguments; and the call that tells it is ready.
  std::string worker_class;
  ActorOptions worker;
  std::string worker_init_args;
  std::string ready_method;
  std::string ready_args;
  // The call that runs the task: `method` with the arguments `assemble` makes from the values
  // of `deps` (in order; serialized as each dependency's call returned them).
  std::string method;
  std::vector<std::shared_ptr<worker::ObjectState>> deps;
  std::function<std::string(const std::vector<std::string>& dep_values)> assemble;
  // Worker deaths survived per task (-1: no limit).
  int max_retries = 3;
  // Whether an application error (TaskError) is retried too (counted in max_retries). May
  // rewrite `detail`, the error's detail the caller sees. Empty: never.
  std::function<bool(const absl::Status& error, std::string* detail)> retryable;
  // The task may wait for results of this process's other tasks (refs inside its arguments,
  // read in the task): no task is pipelined behind it on its worker, where it would wait
  // for the task that waits for it.
  bool exclusive = false;
};

// Queues the task; the returned slot gets its result or its error. Never null.
std::shared_ptr<worker::ObjectState> SubmitTask(TaskSubmission task);

// Cancels the task whose result slot is `result` (Ray's cancel): the slot fails with
// kTaskCancelled at once. A queued task is never sent; a running one gets KeyboardInterrupt
// (Python) or sees IsCanceled() (C++) and its result is dropped, unless `force`, which kills
// its worker (no retry). A finished task keeps its result. INVALID_ARGUMENT for a slot that
// is not a task of this process.
absl::Status CancelTask(const std::shared_ptr<worker::ObjectState>& result, bool force);

// Runs `fn` on a thread of its own, which ShutdownTaskPools waits for (a bounded while).
void RunInBackground(std::function<void()> fn);

// Fails every queued task, forgets every pool and stops the reaper (phalanx::Shutdown calls
// it; the workers die with their owner).
void ShutdownTaskPools();

// For tests and benchmarks: the pools' sizes and counts.
struct TaskPoolStats {
  std::string worker_class;
  int workers = 0;  // answering, idle or busy
  int idle = 0;
  int leases_in_flight = 0;
  int queued = 0;
  int64_t tasks_done = 0;
  int64_t retries = 0;
  int64_t workers_leased = 0;
  int64_t workers_returned = 0;
};
std::vector<TaskPoolStats> GetTaskPoolStats();

}  // namespace phalanx::internal
