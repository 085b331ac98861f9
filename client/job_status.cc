#include "client/job_status.h"

#include <algorithm>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/describe.h"
#include "base/ids.h"
#include "base/proto/common.pb.h"
#include "base/system.h"

namespace phalanx {
namespace {

// "0.143 s" from a to b, or "—" when b was not reached.
std::string Span(int64_t from_ms, int64_t to_ms) {
  if (from_ms <= 0 || to_ms <= 0) return "—";
  return absl::StrFormat("%.3f s", static_cast<double>(to_ms - from_ms) / 1000);
}

std::string Clock(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return absl::StrFormat("%s.%03d", buf, static_cast<int>(ms % 1000));
}

}  // namespace

JobStatus ToStatus(const rpc::JobInfo& job) {
  JobStatus s;
  s.job_id = JobId(job.job_id());
  s.name = job.name();
  s.state = rpc::StateName(job.state());
  s.message = job.message();
  const auto& el = job.elastic();
  s.world_size = el.world_size();
  s.epoch = el.epoch();
  s.step = el.step();
  s.loss = el.loss();
  s.restarts = el.restarts();
  s.last_checkpoint_step = el.last_checkpoint_step();
  s.steps_per_second = el.steps_per_second();
  s.steps_per_call = el.steps_per_call();
  s.allowed_nodes.assign(el.allowed_nodes().begin(), el.allowed_nodes().end());
  s.results = el.results();
  s.total_steps = el.total_steps();
  s.controller_actor_id = ActorId(job.controller_actor_id());
  for (const auto& m : el.members()) {
    s.ranks.push_back({m.rank(), ActorId(m.actor_id()), NodeId(m.node_id()), m.memory_bytes()});
  }
  for (const auto& c : job.conditions()) {
    s.conditions.push_back({c.type(), c.time_ms(), c.reason(), c.message()});
  }
  for (const auto& e : job.events()) {
    s.events.push_back({e.time_ms(), e.kind(), e.message(), e.world_size(), e.epoch()});
  }
  for (const auto& r : el.recoveries()) {
    s.recoveries.push_back({r.id(), r.kind(), r.message(), r.fault_ms(), r.detected_ms(),
                            r.resumed_ms(), r.full_strength_ms(), r.world_before(),
                            r.world_during(), r.restored_from()});
  }
  for (const auto& [cause, n] : el.restarts_by_cause()) s.restarts_by_cause.emplace_back(cause, n);
  std::sort(s.restarts_by_cause.begin(), s.restarts_by_cause.end());
  s.fault_seconds = el.fault_seconds();
  s.step_skew = el.step_skew() > 0 ? el.step_skew() : 1;
  s.network_check_skew = el.network_check_skew();
  return s;
}

std::string FormatStatus(const JobStatus& s, bool with_events) {
  std::string out = absl::StrFormat("job %s (%s): %s", s.job_id.str(), s.name, s.state);
  absl::StrAppendFormat(&out, " — world size %d, epoch %d, step %d", s.world_size, s.epoch, s.step);
  if (s.total_steps > 0) absl::StrAppendFormat(&out, "/%d", s.total_steps);
  absl::StrAppendFormat(&out, ", loss %.6g", s.loss);
  if (s.restarts > 0) absl::StrAppendFormat(&out, ", %d respawn(s)", s.restarts);
  if (s.steps_per_second > 0) absl::StrAppendFormat(&out, ", %.1f steps/s", s.steps_per_second);
  if (s.steps_per_call > 1) absl::StrAppendFormat(&out, " (%d a call)", s.steps_per_call);
  if (!s.message.empty()) absl::StrAppend(&out, "\n  ", s.message);
  absl::StrAppend(&out, "\nRanks:");
  if (!s.allowed_nodes.empty()) {
    absl::StrAppend(&out, " (on nodes ", absl::StrJoin(s.allowed_nodes, ","), " only)");
  }
  for (const auto& r : s.ranks) {
    absl::StrAppendFormat(
        &out, "\n  %d  actor %s  node %s%s", r.rank, ShortId(r.actor_id.Hex()),
        ShortId(r.node_id.Hex()),
        r.memory_bytes > 0 ? absl::StrCat("  memory ", FormatBytes(r.memory_bytes)) : "");
  }
  absl::StrAppend(&out, "\nConditions:");
  for (const auto& c : s.conditions) {
    absl::StrAppendFormat(&out, "\n  %s  %-10s %-16s %s", Clock(c.time_ms), c.type, c.reason,
                          c.message);
  }
  if (!s.recoveries.empty()) {
    absl::StrAppendFormat(&out, "\nRecoveries (time lost to faults %.3f s):", s.fault_seconds);
    absl::StrAppendFormat(&out, "\n  %-12s %-12s %-9s %-9s %-9s %-6s %s", "FAULT AT", "KIND",
                          "DETECT", "RESUME", "FULL", "WORLD", "WHAT");
    // The newest ten: `phalanx job status` stays a screen; the dashboard has them all.
    size_t first = s.recoveries.size() > 10 ? s.recoveries.size() - 10 : 0;
    for (size_t i = first; i < s.recoveries.size(); ++i) {
      const RecoveryStatus& r = s.recoveries[i];
      // "%-8s": the arrow is 3 bytes and one column wide, so this pads "3→2" to 6 columns.
      absl::StrAppendFormat(
          &out, "\n  %-12s %-12s %-9s %-9s %-9s %-8s %s", Clock(r.fault_ms), r.kind,
          Span(r.fault_ms, r.detected_ms), Span(r.detected_ms, r.resumed_ms),
          Span(r.fault_ms, r.full_strength_ms), absl::StrCat(r.world_before, "→", r.world_during),
          r.restored_from.empty() ? r.message
                                  : absl::StrCat(r.message, "; restored ", r.restored_from));
    }
  }
  if (with_events) {
    absl::StrAppend(&out, "\nEvents:");
    for (const auto& e : s.events) {
      absl::StrAppendFormat(&out, "\n  %s  %-14s %s (world %d, epoch %d)", Clock(e.time_ms), e.kind,
                            e.message, e.world_size, e.epoch);
    }
  }
  return out;
}

}  // namespace phalanx
