#include "elastic/recovery.h"

#include <algorithm>
#include <string>

#include "elastic/fault.h"

namespace phalanx::elastic {

int64_t RecoveryTimeline::Open(rpc::FaultKind kind, const std::string& message, absl::Time fault,
                               absl::Time detected, int world_before, int full_world) {
  rpc::Recovery r;
  r.set_id(next_id_++);
  r.set_kind(std::string(FaultName(kind)));
  r.set_message(message);
  // A fault is never after its detection (clocks of two machines may disagree by a little).
  r.set_fault_ms(absl::ToUnixMillis(std::min(fault, detected)));
  r.set_detected_ms(absl::ToUnixMillis(detected));
  r.set_world_before(world_before);
  r.set_world_during(full_world);  // until the survivors resume: what it waits for
  recoveries_.push_back(std::move(r));
  full_world_.push_back(full_world);
  while (recoveries_.size() > kMaxRecoveries) {
    recoveries_.pop_front();
    full_world_.pop_front();
  }
  return recoveries_.back().id();
}

void RecoveryTimeline::StepAgreed(absl::Time when, int world) {
  int64_t ms = absl::ToUnixMillis(when);
  for (size_t i = 0; i < recoveries_.size(); ++i) {
    rpc::Recovery& r = recoveries_[i];
    if (r.full_strength_ms() != 0 || ms < r.detected_ms()) continue;
    if (r.resumed_ms() == 0) {
      r.set_resumed_ms(ms);
      r.set_world_during(world);
      if (r.kind() != FaultName(rpc::FAULT_SCALE)) {
        fault_seconds_ += static_cast<double>(ms - r.fault_ms()) / 1000;
      }
    }
    // A fault is healed once as many ranks train as before it; a scale request once the
    // world is the size it asked for.
    bool whole =
        r.kind() == FaultName(rpc::FAULT_SCALE) ? world == full_world_[i] : world >= full_world_[i];
    if (full_world_[i] > 0 && whole) r.set_full_strength_ms(ms);
  }
}

void RecoveryTimeline::Supersede(rpc::FaultKind kind) {
  for (size_t i = 0; i < recoveries_.size(); ++i) {
    if (recoveries_[i].kind() == FaultName(kind) && recoveries_[i].full_strength_ms() == 0) {
      full_world_[i] = 0;
    }
  }
}

void RecoveryTimeline::NoteRestored(const std::string& from) {
  for (rpc::Recovery& r : recoveries_) {
    if (r.resumed_ms() == 0 && r.restored_from().empty()) r.set_restored_from(from);
  }
}

void RecoveryTimeline::Restore(const rpc::ElasticStatus& previous) {
  recoveries_.clear();
  full_world_.clear();
  for (const auto& r : previous.recoveries()) {
    recoveries_.push_back(r);
    // An open one waits for the size it was missing (a scale request's target is lost with
    // the dead controller: it waits for its world before).
    full_world_.push_back(r.full_strength_ms() == 0 ? r.world_before() : 0);
    next_id_ = std::max(next_id_, r.id() + 1);
  }
  fault_seconds_ = previous.fault_seconds();
}

void RecoveryTimeline::CopyTo(rpc::ElasticStatus* status) const {
  status->clear_recoveries();
  for (const auto& r : recoveries_) *status->add_recoveries() = r;
  status->set_fault_seconds(fault_seconds_);
}

}  // namespace phalanx::elastic
