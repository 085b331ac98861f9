// ObjectState: the slot an actor call's result lands in. Set once (by the thread that reads
// the reply); waited on by any number of threads or fibers (Boost.Fiber primitives, so a
// call made from a fiber of an async actor suspends only that fiber; they live in
// object_state.cc, so that this header, included by actors/api.h, pulls in no Boost).
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace phalanx::worker {

class ObjectState {
 public:
  ObjectState();
  ~ObjectState();
  ObjectState(const ObjectState&) = delete;
  ObjectState& operator=(const ObjectState&) = delete;

  // Completes the slot: `status` OK with `value` (serialized result), or an error. Later
  // calls are ignored. Runs the OnDone callbacks.
  void Set(absl::Status status, std::string value = "");

  // Waits until set or `timeout` passes; true if set.
  bool Wait(absl::Duration timeout);
  bool done() const;

  // Valid once done. After an error, value() holds the error's detail, if any (a Python
  // TaskError: the remote exception's class name).
  const absl::Status& status() const { return status_; }
  const std::string& value() const { return value_; }

  // Runs `callback` once the slot is set (at once, on this thread, if it already is).
  void OnDone(std::function<void()> callback);

 private:
  struct Sync;  // the fiber mutex and condition variable
  const std::unique_ptr<Sync> sync_;
  bool done_ = false;
  absl::Status status_;
  std::string value_;
  std::vector<std::function<void()>> callbacks_;
};

// Waits until `num_ready` of `states` are set or `timeout` passes. Returns for each whether
// it was set when the wait ended.
std::vector<bool> WaitAny(const std::vector<std::shared_ptr<ObjectState>>& states, int num_ready,
                          absl::Duration timeout);

}  // namespace phalanx::worker
