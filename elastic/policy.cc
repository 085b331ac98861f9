#include "elastic/policy.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/system.h"
#include "elastic/fault.h"

namespace phalanx::elastic {

bool RestartBudget::Left(absl::Time now) {
  while (!spent_.empty() && spent_.front() < now - window_) spent_.pop_front();
  return static_cast<int>(spent_.size()) < limit_;
}

double TypicalStepMs(const std::deque<double>& slowest) {
  if (slowest.empty()) return 0;
  std::vector<double> sorted(slowest.begin(), slowest.end());
  std::sort(sorted.begin(), sorted.end());
  size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

double GrownMemory(const FaultPolicy& policy, double memory) {
  double grown =
      std::min(memory * policy.memory_growth, memory + static_cast<double>(policy.max_memory_step));
  return std::min(grown, static_cast<double>(policy.memory_cap));
}

DeathDecision DecideOnDeath(const JobSpec& spec, const RankDeath& death, RestartBudget* budget,
                            absl::Time now) {
  DeathDecision d;
  std::string event(SpecEvent(death.fault));
  int code = death.fault == rpc::FAULT_EXIT_CODE ? death.exit_code : 0;
  int signal = death.fault == rpc::FAULT_SIGNAL ? death.signal : 0;
  d.policy = MatchPolicy(spec, event, code, signal);
  const Action action = d.policy.action;
  if (action == Action::kFailJob) {
    d.kind = DeathDecision::Kind::kFailJob;
    d.summary = "policy: failJob";
    return d;
  }
  if (action == Action::kShrink || !budget->Left(now)) {
    d.kind = DeathDecision::Kind::kShrink;
    d.summary =
        action == Action::kShrink ? "policy: shrink" : "restart budget exhausted: shrinking";
    return d;
  }
  budget->Spend(now);
  d.kind = DeathDecision::Kind::kReplace;
  d.memory = death.memory;
  d.bundle = death.bundle;
  std::string what = ActionName(action);
  if (action == Action::kRespawnLarger && death.memory > 0) {
    d.memory = GrownMemory(d.policy, death.memory);
    what = absl::StrCat("respawnLarger: memory ", FormatBytes(death.memory), " → ",
                        FormatBytes(d.memory));
    d.bundle = -1;  // its bundle is too small now
  } else if (action == Action::kReschedule && event != "nodeDied") {
    // Elsewhere. (A dead node's bundles are placed again by the GCS, on a live node.)
    d.avoid_nodes.push_back(death.node_id);
    d.bundle = -1;
  }
  // A rank that leaves its bundle gives it back, or the bundle holds the resources its
  // replacement needs (one rank per host fills every host).
  d.release_bundle = d.bundle < 0 && death.bundle >= 0;
  d.summary = absl::StrCat("action: ", what);
  return d;
}

bool ReplaceStraggler(const FaultPolicy& policy, RestartBudget* budget, absl::Time now) {
  if (policy.action != Action::kReschedule && policy.action != Action::kRestart) return false;
  if (!budget->Left(now)) return false;
  budget->Spend(now);
  return true;
}

absl::StatusOr<ScaleRequest> ParseScaleRequest(const std::string& text, int world,
                                               const JobSpec& spec) {
  std::vector<std::string> f = absl::StrSplit(text, ':');
  ScaleRequest r;
  if (f.size() < 2 || !absl::SimpleAtoi(f[1], &r.asked)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale request '", text, "': expected <request id>:<replicas>[:<rank>,<rank>…]"));
  }
  if (f.size() >= 3 && !f[2].empty()) {
    for (absl::string_view part : absl::StrSplit(f[2], ',', absl::SkipEmpty())) {
      int rank;
      if (!absl::SimpleAtoi(part, &rank) || rank < 0 || rank >= world) continue;
      if (std::find(r.leaving.begin(), r.leaving.end(), rank) == r.leaving.end()) {
        r.leaving.push_back(rank);
      }
    }
    r.asked = world - static_cast<int>(r.leaving.size());
  }
  if (f.size() >= 4 && absl::StartsWith(f[3], "=")) {
    r.nodes = absl::StrSplit(f[3].substr(1), ',', absl::SkipEmpty());
  }
  r.replicas = std::clamp(r.asked, spec.min_replicas, spec.max_replicas);
  return r;
}

}  // namespace phalanx::elastic
