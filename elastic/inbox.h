// Inbox: what reaches an elastic job's step loop from other threads, on one queue, in the
// order it came. The controller's subscription thread posts a rank's death (the GCS's push)
// and a node's arrival or freed resources; the job recorder posts a user's scale and stop
// requests (the KV keys the job kind writes: pushed by the GCS as they are written, and read
// again each writer period, so that a request made while no controller ran still arrives).
// The step loop takes them at the points where it looks up (between steps, and in its waits)
// and only there changes its view, so every change to the loop's state happens on its own
// thread, in arrival order. Thread-safe.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::elastic {

struct Signal {
  enum class Kind {
    kRankDied,          // actor_id: a member's actor is dead (the GCS said so)
    kResourcesChanged,  // resources were freed on some node: growth may follow
    kNodeAdded,         // a node joined: growth may follow, past a shrink's ceiling
    kScaleRequested,    // value: the request as the job kind wrote it (job_keys.h)
    kStopRequested,     // `phalanx job stop`
  };
  Kind kind = Kind::kStopRequested;
  std::string actor_id;
  std::string value;
  absl::Time at = absl::InfinitePast();  // when it was posted
};
const char* SignalName(Signal::Kind kind);

class Inbox {
 public:
  // Queues `signal`, stamped with the time now if it has none.
  void Post(Signal signal);
  // Every signal queued, oldest first; the queue is then empty.
  std::vector<Signal> Take();
  // Waits until a signal is queued, at most `timeout`; true when one is.
  bool Await(absl::Duration timeout);
  bool Empty();

 private:
  absl::Mutex mu_;
  std::deque<Signal> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::elastic
