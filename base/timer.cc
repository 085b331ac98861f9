#include "base/timer.h"

namespace phalanx {

TimerQueue::TimerQueue() {
  thread_ = std::thread([this] { Loop(); });
}

TimerQueue::~TimerQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void TimerQueue::RunAfter(absl::Duration delay, std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  queue_.emplace(absl::Now() + delay, std::move(callback));
}

void TimerQueue::Loop() {
  while (true) {
    std::function<void()> due;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_) {
        absl::Time now = absl::Now();
        if (!queue_.empty() && queue_.begin()->first <= now) break;
        absl::Time wake = queue_.empty() ? now + absl::Seconds(1) : queue_.begin()->first;
        // A callback added meanwhile that is due before `wake` wakes the loop.
        auto woken = [this, wake]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || (!queue_.empty() && queue_.begin()->first < wake);
        };
        mu_.AwaitWithDeadline(absl::Condition(&woken), wake);
      }
      if (stopping_) return;
      due = std::move(queue_.begin()->second);
      queue_.erase(queue_.begin());
    }
    due();
  }
}

}  // namespace phalanx
