#include "elastic/inbox.h"

#include <utility>

namespace phalanx::elastic {

const char* SignalName(Signal::Kind kind) {
  switch (kind) {
    case Signal::Kind::kRankDied:
      return "RankDied";
    case Signal::Kind::kResourcesChanged:
      return "ResourcesChanged";
    case Signal::Kind::kNodeAdded:
      return "NodeAdded";
    case Signal::Kind::kScaleRequested:
      return "ScaleRequested";
    case Signal::Kind::kStopRequested:
      return "StopRequested";
  }
  return "?";
}

void Inbox::Post(Signal signal) {
  if (signal.at == absl::InfinitePast()) signal.at = absl::Now();
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(signal));
}

std::vector<Signal> Inbox::Take() {
  absl::MutexLock lock(&mu_);
  std::vector<Signal> out(std::make_move_iterator(queue_.begin()),
                          std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool Inbox::Await(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](std::deque<Signal>* q) { return !q->empty(); }, &queue_),
                              timeout);
}

bool Inbox::Empty() {
  absl::MutexLock lock(&mu_);
  return queue_.empty();
}

}  // namespace phalanx::elastic
