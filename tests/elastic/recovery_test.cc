// The recovery timeline an elastic job's controller keeps: each fault's moments in order,
// cascading faults, a shrink that never comes back, scale requests, adoption by a new
// controller.
#include "elastic/recovery.h"

#include "gtest/gtest.h"

namespace phalanx::elastic {
namespace {

absl::Time At(int64_t ms) { return absl::FromUnixMillis(ms); }

TEST(RecoveryTest, AFaultResumesAtTheNextStepAndHealsWhenTheWorldIsWholeAgain) {
  RecoveryTimeline t;
  t.StepAgreed(At(900), 4);  // before the fault: nothing open
  t.Open(rpc::FAULT_SIGNAL, "rank 1 died", At(1000), At(1010), 4, 4);
  t.StepAgreed(At(1005), 4);  // a step agreed before the detection does not count
  t.StepAgreed(At(1150), 3);
  t.StepAgreed(At(1200), 3);
  t.StepAgreed(At(1250), 4);
  ASSERT_EQ(t.recoveries().size(), 1u);
  const rpc::Recovery& r = t.recoveries()[0];
  EXPECT_EQ(r.kind(), "signal");
  EXPECT_EQ(r.fault_ms(), 1000);
  EXPECT_EQ(r.detected_ms(), 1010);
  EXPECT_EQ(r.resumed_ms(), 1150);
  EXPECT_EQ(r.world_during(), 3);
  EXPECT_EQ(r.full_strength_ms(), 1250);
  EXPECT_DOUBLE_EQ(t.fault_seconds(), 0.15);
}

TEST(RecoveryTest, AFaultIsNeverAfterItsDetection) {
  RecoveryTimeline t;
  // The dead rank's node clock runs ahead of the controller's.
  t.Open(rpc::FAULT_SIGNAL, "x", At(2000), At(1990), 2, 2);
  EXPECT_EQ(t.recoveries()[0].fault_ms(), 1990);
}

TEST(RecoveryTest, CascadingFaultsEachKeepTheirOwnTimeline) {
  RecoveryTimeline t;
  t.Open(rpc::FAULT_SIGNAL, "a", At(100), At(110), 4, 4);
  t.Open(rpc::FAULT_NODE_DIED, "b", At(105), At(300), 3, 3);
  t.StepAgreed(At(200), 3);  // the first resumes; the second is not detected yet
  t.StepAgreed(At(400), 2);
  t.StepAgreed(At(600), 3);  // the second is whole (3), the first not (4)
  t.StepAgreed(At(700), 4);
  const auto& r = t.recoveries();
  EXPECT_EQ(r[0].resumed_ms(), 200);
  EXPECT_EQ(r[0].full_strength_ms(), 700);
  EXPECT_EQ(r[1].resumed_ms(), 400);
  EXPECT_EQ(r[1].full_strength_ms(), 600);
  EXPECT_DOUBLE_EQ(t.fault_seconds(), 0.1 + 0.295);
}

TEST(RecoveryTest, AScaleRequestIsWholeAtTheSizeItAskedAndCostsNoFaultTime) {
  RecoveryTimeline t;
  t.Open(rpc::FAULT_SCALE, "scale to 2", At(100), At(100), 3, 2);
  t.StepAgreed(At(150), 3);       // still 3: resumed, not whole
  t.Supersede(rpc::FAULT_SCALE);  // the first request gives way to a second
  t.Open(rpc::FAULT_SCALE, "scale to 4", At(160), At(160), 3, 4);
  t.StepAgreed(At(200), 2);  // the size the first asked for: it no longer counts
  t.StepAgreed(At(300), 4);
  const auto& r = t.recoveries();
  EXPECT_EQ(r[0].resumed_ms(), 150);
  EXPECT_EQ(r[0].full_strength_ms(), 0);
  EXPECT_EQ(r[1].full_strength_ms(), 300);
  EXPECT_DOUBLE_EQ(t.fault_seconds(), 0);
}

TEST(RecoveryTest, ANewControllerCarriesOnTheOpenOnes) {
  RecoveryTimeline before;
  before.Open(rpc::FAULT_OOM, "oom", At(100), At(120), 2, 2);
  before.StepAgreed(At(200), 1);
  rpc::ElasticStatus status;
  before.CopyTo(&status);
  RecoveryTimeline after;
  after.Restore(status);
  after.StepAgreed(At(500), 2);
  int64_t next = after.Open(rpc::FAULT_HANG, "hang", At(600), At(2600), 2, 2);
  EXPECT_EQ(after.recoveries()[0].full_strength_ms(), 500);
  EXPECT_EQ(next, 2);
  EXPECT_DOUBLE_EQ(after.fault_seconds(), 0.1);
}

TEST(RecoveryTest, OnlyTheNewestAreKept) {
  RecoveryTimeline t;
  for (size_t i = 0; i < RecoveryTimeline::kMaxRecoveries + 5; ++i) {
    t.Open(rpc::FAULT_SIGNAL, "x", At(i), At(i), 2, 2);
  }
  EXPECT_EQ(t.recoveries().size(), RecoveryTimeline::kMaxRecoveries);
  EXPECT_EQ(t.recoveries().front().id(), 6);
}

}  // namespace
}  // namespace phalanx::elastic
