// TimerQueue: runs callbacks after a delay on one thread of its own, in deadline order.
// Thread-safe. Destroying it drops the callbacks that have not run.
#pragma once

#include <functional>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx {

class TimerQueue {
 public:
  TimerQueue();
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  void RunAfter(absl::Duration delay, std::function<void()> callback);

 private:
  void Loop();
  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace phalanx
