// The elastic controller's decisions, as pure functions of the spec and of what happened: no
// cluster, no RPC, and no clock of their own (the time is an argument). Each row of the
// policy table is a unit test (tests/elastic/policy_test.cc); the controller only carries
// the decisions out.
//
//   a rank died ──► RankDeath ──► DecideOnDeath(spec, death, budget, now) ──► DeathDecision
//                                   │ the first policy that matches (the spec's, then the
//                                   │ defaults), then the restart budget
//                                   └► fail the job | shrink | replace (how: memory, bundle,
//                                      nodes to avoid)
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/proto/common.pb.h"
#include "elastic/job_spec.h"

namespace phalanx::elastic {

// How a rank died, in the terms the policies match on.
struct RankDeath {
  rpc::FaultKind fault = rpc::FAULT_KILLED;  // FAULT_HANG: the controller killed it, hung
  int exit_code = 0;                         // FAULT_EXIT_CODE
  int signal = 0;                            // FAULT_SIGNAL
  double memory = 0;                         // bytes it was started with (0: no memory request)
  int bundle = -1;                           // its placement-group bundle (-1: outside the group)
  std::string node_id;
};

// Respawns allowed within a sliding window: `restartLimit` within `restartTimeLimit` seconds.
class RestartBudget {
 public:
  RestartBudget(int limit, absl::Duration window) : limit_(limit), window_(window) {}
  // True while fewer than `limit` respawns happened in the window that ends at `now`.
  bool Left(absl::Time now);
  void Spend(absl::Time now) { spent_.push_back(now); }

 private:
  int limit_;
  absl::Duration window_;
  std::deque<absl::Time> spent_;  // oldest first
};

struct DeathDecision {
  enum class Kind { kFailJob, kShrink, kReplace };
  Kind kind = Kind::kReplace;
  FaultPolicy policy;  // the policy that matched
  // What the event log says after the death: "policy: failJob", "policy: shrink",
  // "restart budget exhausted: shrinking", "action: restart",
  // "action: respawnLarger: memory 1.0 GiB → 2.0 GiB", …
  std::string summary;
  // kReplace: how the replacement starts.
  double memory = 0;
  int bundle = -1;              // the bundle it takes (-1: outside the group)
  bool release_bundle = false;  // the dead rank's bundle is given back first
  std::vector<std::string> avoid_nodes;
};

// A rank died: fail the job, shrink, or replace it (and how). A replacement spends one
// respawn from `budget`; with none left, the job shrinks instead.
DeathDecision DecideOnDeath(const JobSpec& spec, const RankDeath& death, RestartBudget* budget,
                            absl::Time now);

// A straggler (the network check found it slow) under `policy`: true when it is replaced on
// another node (the policy restarts or reschedules it, and a respawn is left; spent).
bool ReplaceStraggler(const FaultPolicy& policy, RestartBudget* budget, absl::Time now);

// The memory a respawnLarger gives: ×memoryGrowth, at most maxMemoryStep more, at most
// memoryCap.
double GrownMemory(const FaultPolicy& policy, double memory);

// The step time that sizes the controller's calls and times their liveness probe: the median
// of `slowest`, each agreed call's slowest rank's time per step, oldest first (0: none yet).
// Not the last call's alone: one call that ran no work (a trainer-driven loop's extra commit
// at the end of its data epoch answers in a millisecond) made the next call cover 16 steps
// and probe its ranks 16 times later (a SIGSTOPped rank found 4 s after the stop instead of
// 1.3 s), and one slow call (the first after a resize) would hold the next ones back.
inline constexpr size_t kStepHistory = 5;
double TypicalStepMs(const std::deque<double>& slowest);

// A scale request, as `phalanx job scale` writes it to the job's "scale" key (job_keys.h):
// "<request id>:<replicas>[:<rank>,<rank>…[:=<node>,<node>…]]" (named ranks leave; the
// others keep their order; "=" sets the nodes the ranks may use).
struct ScaleRequest {
  int asked = 0;             // the replicas asked for (world size minus the leavers, if named)
  int replicas = 0;          // clamped to [minReplicas, maxReplicas]
  std::vector<int> leaving;  // ranks of the current world, in the order named
  // Set: the nodes the ranks may use from now on (empty: any).
  std::optional<std::vector<std::string>> nodes;
};
// InvalidArgument for text that is not such a request. Ranks outside [0, world) are ignored.
absl::StatusOr<ScaleRequest> ParseScaleRequest(const std::string& text, int world,
                                               const JobSpec& spec);

}  // namespace phalanx::elastic
