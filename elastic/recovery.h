// RecoveryTimeline: how an elastic job healed from each fault, phase by phase, as its
// controller saw it:
//
//   fault ──► detected ──► resumed ──► full strength
//   (the rank   (the controller  (the survivors'   (the first agreed step with as many
//    died)       knew)            next agreed       ranks as before the fault, or as a
//                                 step)             scale request asked for)
//
// The controller records each moment as it happens; the GCS exports the phases as histograms
// (phalanx_elastic_recovery_*_seconds) and the dashboard draws them. Not thread-safe: the
// controller's step loop owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "absl/time/time.h"
#include "base/proto/common.pb.h"

namespace phalanx::elastic {

class RecoveryTimeline {
 public:
  // The newest this many are kept (in the job's record).
  static constexpr size_t kMaxRecoveries = 200;

  // A fault (or scale request) the controller learned of at `detected`. `full_world`: the
  // world size that counts as whole again. Returns its id.
  // The record names its kind as FaultName does (elastic/fault.h).
  int64_t Open(rpc::FaultKind kind, const std::string& message, absl::Time fault,
               absl::Time detected, int world_before, int full_world);
  // A step was agreed by `world` ranks at `when`: open recoveries resume (the first step
  // after they were detected) and reach full strength (the first with `full_world` ranks).
  void StepAgreed(absl::Time when, int world);
  // A scale request replaced by a newer one before it was reached: it stops waiting.
  void Supersede(rpc::FaultKind kind);
  // Every rank was lost and the state came back from `from` (Recovery.restored_from): noted
  // on the recoveries not resumed yet.
  void NoteRestored(const std::string& from);

  // Carries on from a previous controller's record (adoption): its closed recoveries are
  // kept, its open ones go on being tracked.
  void Restore(const rpc::ElasticStatus& previous);
  // Writes `recoveries` and `fault_seconds` into the job's status.
  void CopyTo(rpc::ElasticStatus* status) const;

  // Time lost to faults (not scale requests): the sum of fault → resumed.
  double fault_seconds() const { return fault_seconds_; }
  const std::deque<rpc::Recovery>& recoveries() const { return recoveries_; }

 private:
  std::deque<rpc::Recovery> recoveries_;
  std::deque<int> full_world_;  // per recovery: the world size that ends it (0: none will)
  int64_t next_id_ = 1;
  double fault_seconds_ = 0;
};

}  // namespace phalanx::elastic
