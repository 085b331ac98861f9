#include "gcs/job_history.h"

namespace phalanx::gcs {

void JobHistory::Record(const rpc::JobInfo& job, absl::Time now) {
  if (job.kind() != "elastic" || job.elastic().epoch() == 0) return;
  Point p;
  p.time_ms = absl::ToUnixMillis(now);
  p.world_size = job.elastic().world_size();
  p.step = job.elastic().step();
  p.steps_per_second = job.elastic().steps_per_second();
  absl::MutexLock lock(&mu_);
  auto [it, added] = points_.try_emplace(job.job_id());
  if (added) {
    order_.push_back(job.job_id());
    while (order_.size() > kMaxJobs) {
      points_.erase(order_.front());
      order_.pop_front();
    }
  }
  std::deque<Point>& points = it->second;
  if (!points.empty()) {
    const Point& last = points.back();
    bool changed = last.world_size != p.world_size;
    if (!changed &&
        (p.time_ms - last.time_ms < absl::ToInt64Milliseconds(kPeriod) || p.step == last.step)) {
      return;
    }
  }
  points.push_back(p);
  if (points.size() > kMaxPoints) points.pop_front();
}

std::vector<JobHistory::Point> JobHistory::Points(const rpc::JobInfo& job) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = points_.find(job.job_id());
    if (it != points_.end()) return {it->second.begin(), it->second.end()};
  }
  std::vector<Point> points;
  for (const auto& e : job.events()) {
    if (e.kind() != "epoch") continue;
    Point p;
    p.time_ms = e.time_ms();
    p.world_size = e.world_size();
    points.push_back(p);
  }
  return points;
}

}  // namespace phalanx::gcs
