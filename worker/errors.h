// The kinds of errors an actor call can end with. Each is an absl::Status whose message
// names the actor and the cause, tagged with its kind (a payload) so that callers (and the
// Python layer) can tell them apart.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace phalanx::worker {

inline constexpr char kErrorKindPayload[] = "phalanx.error_kind";

namespace error_kind {
inline constexpr char kActorDied[] = "ActorDied";                // the actor is DEAD (cause)
inline constexpr char kActorUnavailable[] = "ActorUnavailable";  // died mid-call, restarting
inline constexpr char kTaskError[] = "TaskError";                // the method raised
inline constexpr char kInvalidCall[] = "InvalidCall";            // unknown method, bad arguments
inline constexpr char kGetTimeout[] = "GetTimeout";              // Get/Wait timed out
inline constexpr char kCreationFailed[] = "CreationFailed";      // the constructor failed
inline constexpr char kTaskCancelled[] = "TaskCancelled";        // a task was cancelled
// A plain method ended its actor (exit_actor(), sys.exit()): the worker sends the answers of
// the calls before it, then waits for its end; never sent to a caller.
inline constexpr char kActorExiting[] = "ActorExiting";
// A task's worker process died (a kind of kActorDied: the task ran in a worker actor), and
// the same when it was killed for memory (Ray's WorkerCrashedError, OutOfMemoryError).
inline constexpr char kWorkerCrashed[] = "WorkerCrashed";
inline constexpr char kOutOfMemory[] = "OutOfMemory";
}  // namespace error_kind

// A status of `code` with `message`, tagged with `kind`.
absl::Status MakeError(absl::StatusCode code, absl::string_view kind, absl::string_view message);

// The kind a status was tagged with ("" if none).
std::string ErrorKind(const absl::Status& status);

// Whether the actor (or the worker of a task) is dead.
inline bool IsActorDied(const absl::Status& s) {
  const std::string kind = ErrorKind(s);
  return kind == error_kind::kActorDied || kind == error_kind::kWorkerCrashed ||
         kind == error_kind::kOutOfMemory;
}
inline bool IsTaskError(const absl::Status& s) { return ErrorKind(s) == error_kind::kTaskError; }
inline bool IsGetTimeout(const absl::Status& s) { return ErrorKind(s) == error_kind::kGetTimeout; }

}  // namespace phalanx::worker
