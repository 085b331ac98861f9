// JobHistory: each elastic job's world size, step and speed over time, as the head saw its
// record change, for the dashboard's charts. In memory: a restarted GCS begins again from the
// job's "epoch" events (each says the world size an epoch formed with). Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/common.pb.h"

namespace phalanx::gcs {

class JobHistory {
 public:
  struct Point {
    int64_t time_ms = 0;
    int world_size = 0;
    int64_t step = 0;
    double steps_per_second = 0;
  };

  // Points kept per job (at one a second while nothing changes: an hour).
  static constexpr size_t kMaxPoints = 3600;
  // While the world size stays the same, a point at most this often.
  static constexpr absl::Duration kPeriod = absl::Seconds(1);
  // Jobs kept (the oldest finished ones go first).
  static constexpr size_t kMaxJobs = 64;

  // The job's record changed (an UpdateJob from its controller).
  void Record(const rpc::JobInfo& job, absl::Time now);
  // Oldest first. A job this GCS has not seen change: from its epoch events.
  std::vector<Point> Points(const rpc::JobInfo& job) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::deque<Point>> points_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // first seen first
};

}  // namespace phalanx::gcs
