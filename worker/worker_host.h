// WorkerHost: what a worker process runs. It learns from its node manager which actor to
// host, builds it from the registry (its constructor's error becomes CREATION_FAILED), serves
// WorkerService (one PushCalls stream per caller; each call runs on its concurrency group's
// executor), and reports ready. The process is one actor for its whole life.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace phalanx::worker {

// The actor this worker process hosts, and which attempt of it (0 first, then one more per
// restart); known from just before its constructor runs. nullopt outside a worker.
struct HostedActor {
  std::string actor_id;
  int attempt = 0;
  std::string class_name;
};
std::optional<HostedActor> CurrentHostedActor();

// The built-in task worker classes, of C++ programs and of Python: actors that run a pool's
// tasks rather than an object of their own.
inline constexpr char kCppTaskWorkerClass[] = "phalanx.TaskWorker";
inline constexpr char kPythonTaskWorkerClass[] = "phalanx._task.TaskWorker";
inline bool IsTaskWorkerClass(std::string_view class_name) {
  return class_name == kCppTaskWorkerClass || class_name == kPythonTaskWorkerClass;
}

// A call of this method is not queued: the worker runs ActorInstance::Interrupt at once,
// beside the running call, and answers true if it interrupted one (a task's cancel).
inline constexpr char kInterruptMethod[] = "__phalanx_interrupt__";

// A call of this method is not queued either: its args name (in decimal) the sequence number
// of an earlier call of the same caller, which is cancelled (Ray's cancel of an actor task).
// One that has not started is never run (its result: a TaskCancelled error); one that runs
// is handed to ActorInstance::Cancel. Answers true.
inline constexpr char kCancelMethod[] = "__phalanx_cancel__";

// "<caller>/<seq>" of the actor call this thread runs now ("" when none): how an actor's
// own code (a Python actor's is_canceled) names its call.
std::string CurrentCall();

// Marks actor call `call` (CurrentCall's form) cancelled while it runs: a cancel of an actor
// call (kCancelMethod), or a C++ task's (kInterruptMethod to its task worker). Kept
// kCallResultKeep.
void MarkCallCancelled(const std::string& call);
// Whether the call this thread runs was marked cancelled (false when it runs none): what a
// C++ task or method checks to stop early (phalanx::IsCanceled), as it cannot be interrupted.
bool CurrentCallCancelled();

// True when this process was started by a node manager to host an actor.
bool InWorkerMode();

// Hosts the actor named by the environment the node manager set; returns when the worker
// is told to exit (or cannot start), with the process exit code.
int RunWorker();

}  // namespace phalanx::worker
