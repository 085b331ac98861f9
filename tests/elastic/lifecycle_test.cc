// The training loop's state machine (elastic/lifecycle.h) without a cluster: every (phase,
// event) pair's next phase, then what each transition says and does.
#include "elastic/lifecycle.h"

#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace phalanx::elastic {
namespace {

using K = LoopEvent::Kind;
using P = JobPhase;

const std::vector<P> kPhases = {P::kStarting,  P::kForming, P::kRunning, P::kBelowMin,
                                P::kSucceeded, P::kFailed,  P::kStopped};
const std::vector<K> kEvents = {K::kStopRequested, K::kRanksUp,       K::kRanksShort,
                                K::kEpochFailed,   K::kStepAgreed,    K::kStepFailed,
                                K::kBelowMin,      K::kBackToMin,     K::kBelowMinTimedOut,
                                K::kDone,          K::kDeathFailsJob, K::kScaleRequested};

JobSpec Spec() {
  JobSpec spec;
  spec.min_replicas = 2;
  spec.below_min_timeout_s = 30;
  return spec;
}

// A plain event of each kind: a rank lost in a failed step, a first failure in a row.
LoopEvent Plain(K kind) {
  LoopEvent e(kind, 3);
  e.step = 41;
  e.lost = kind == K::kStepFailed ? 1 : 0;
  e.failures_in_a_row = 1;
  e.waited_s = 30.2;
  e.error = "boom\nstack";
  return e;
}

// The next phase of every pair, row by row (one row per phase, one column per event, in
// kPhases' and kEvents' order).
TEST(LifecycleTest, EveryPhaseAndEventPairGoesWhereTheDiagramSays) {
  const P S = P::kStarting, F = P::kForming, R = P::kRunning, B = P::kBelowMin, OK = P::kSucceeded,
          X = P::kFailed, STOP = P::kStopped;
  //  Stop  RanksUp RanksShort EpochFailed StepAgreed StepFailed BelowMin BackToMin
  //  BelowMinTimedOut Done DeathFailsJob ScaleRequested
  const std::vector<std::vector<P>> expected = {
      /* Starting  */ {STOP, F, X, S, S, S, S, S, S, S, X, S},
      /* Forming   */ {STOP, F, F, F, R, F, B, F, X, OK, X, F},
      /* Running   */ {STOP, R, R, F, R, F, B, R, X, OK, X, R},
      /* BelowMin  */ {STOP, B, B, F, R, F, B, F, X, OK, X, B},
      /* Succeeded */ {OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK},
      /* Failed    */ {X, X, X, X, X, X, X, X, X, X, X, X},
      /* Stopped   */ {STOP, STOP, STOP, STOP, STOP, STOP, STOP, STOP, STOP, STOP, STOP, STOP},
  };
  for (size_t p = 0; p < kPhases.size(); ++p) {
    for (size_t e = 0; e < kEvents.size(); ++e) {
      Transition t = Next(Spec(), kPhases[p], Plain(kEvents[e]));
      EXPECT_EQ(t.next, expected[p][e])
          << JobPhaseName(kPhases[p]) << " --" << LoopEventName(kEvents[e]) << "--> "
          << JobPhaseName(t.next) << ", expected " << JobPhaseName(expected[p][e]);
      // A final phase never moves, says nothing and fails nothing.
      if (IsFinal(kPhases[p])) {
        EXPECT_TRUE(t.condition_type.empty() && t.failure.empty() && t.event_kind.empty());
      }
      // Only a transition into Failed carries a failure, and it always says why.
      EXPECT_EQ(t.next == P::kFailed && !IsFinal(kPhases[p]), !t.failure.empty())
          << JobPhaseName(kPhases[p]) << " --" << LoopEventName(kEvents[e]);
    }
  }
}

TEST(LifecycleTest, TheFirstAgreedStepIsTrainingAndTheFirstAfterAFaultIsRecovered) {
  LoopEvent first = Plain(K::kStepAgreed);
  Transition t = Next(Spec(), P::kForming, first);
  EXPECT_EQ(t.condition_type, "Running");
  EXPECT_EQ(t.condition_reason, "Training");
  EXPECT_EQ(t.condition_message, "world size 3");
  LoopEvent again = first;
  again.ran_before = true;
  t = Next(Spec(), P::kForming, again);
  EXPECT_EQ(t.condition_reason, "Recovered");
  // Steps while running say nothing.
  EXPECT_TRUE(Next(Spec(), P::kRunning, again).condition_type.empty());
}

TEST(LifecycleTest, AFailedStepSaysWhyItRestarts) {
  Transition lost = Next(Spec(), P::kRunning, Plain(K::kStepFailed));
  EXPECT_EQ(lost.condition_type, "Restarting");
  EXPECT_EQ(lost.condition_reason, "RankLost");
  EXPECT_EQ(lost.condition_message, "step 41 failed; world size now 3");
  EXPECT_TRUE(lost.event_kind.empty());

  LoopEvent cut = Plain(K::kStepFailed);
  cut.lost = 0;
  cut.cut_off = 1;
  Transition partitioned = Next(Spec(), P::kRunning, cut);
  EXPECT_EQ(partitioned.next, P::kForming);
  EXPECT_EQ(partitioned.condition_reason, "Partitioned");
  EXPECT_EQ(partitioned.condition_message, "step 41 failed; world size now 3 (1 cut off)");

  // Nobody lost nor cut off: the event names the error's first line; the third in a row
  // fails the job.
  LoopEvent none = Plain(K::kStepFailed);
  none.lost = 0;
  none.failures_in_a_row = kMaxStepFailures - 1;
  Transition failed_step = Next(Spec(), P::kRunning, none);
  EXPECT_EQ(failed_step.next, P::kForming);
  EXPECT_EQ(failed_step.condition_reason, "StepFailed");
  EXPECT_EQ(failed_step.event_kind, "step_failed");
  EXPECT_EQ(failed_step.event_message, "step 41: boom");
  none.failures_in_a_row = kMaxStepFailures;
  Transition bug = Next(Spec(), P::kRunning, none);
  EXPECT_EQ(bug.next, P::kFailed);
  EXPECT_EQ(bug.failure, "step 41 failed three times without a rank dying: boom\nstack");

  // Every rank lost: the job starts again from nothing.
  LoopEvent all = Plain(K::kStepFailed);
  all.world = 0;
  EXPECT_EQ(Next(Spec(), P::kRunning, all).next, P::kStarting);
}

TEST(LifecycleTest, EpochFailuresFailTheJobOnlyPastTheirLimit) {
  LoopEvent e = Plain(K::kEpochFailed);
  e.error = "phase form timed out";
  e.failures_in_a_row = kMaxEpochFailures;
  EXPECT_EQ(Next(Spec(), P::kForming, e).next, P::kForming);
  e.failures_in_a_row = kMaxEpochFailures + 1;
  Transition t = Next(Spec(), P::kForming, e);
  EXPECT_EQ(t.next, P::kFailed);
  EXPECT_EQ(t.failure,
            "the group could not be formed five times in a row; the last time: phase form timed "
            "out");
  // An epoch that failed at a step's boundary is not counted.
  e.failures_in_a_row = 0;
  EXPECT_EQ(Next(Spec(), P::kRunning, e).next, P::kForming);
}

TEST(LifecycleTest, BelowMinSaysSoOnceAndItsBoundFailsTheJobNamingTheSetting) {
  Transition below = Next(Spec(), P::kRunning, Plain(K::kBelowMin));
  EXPECT_EQ(below.condition_reason, "BelowMinReplicas");
  EXPECT_EQ(below.condition_message, "3 ranks < minReplicas 2: waiting for replacements");
  EXPECT_TRUE(Next(Spec(), P::kBelowMin, Plain(K::kBelowMin)).condition_type.empty());
  LoopEvent out = Plain(K::kBelowMinTimedOut);
  out.world = 1;
  Transition t = Next(Spec(), P::kBelowMin, out);
  EXPECT_EQ(t.failure,
            "below minReplicas (1 < 2) for 30.2 s (failPolicy.belowMinTimeoutSeconds: 30)");
  LoopEvent few = Plain(K::kRanksShort);
  few.world = 1;
  EXPECT_EQ(Next(Spec(), P::kStarting, few).failure,
            "fewer than minReplicas (2) ranks could be started: 1 ready after 30.2 s "
            "(failPolicy.belowMinTimeoutSeconds: 30)");
}

TEST(LifecycleTest, AStopIsAFailedConditionAndADeathThatFailsTheJobKeepsItsWords) {
  Transition stop = Next(Spec(), P::kRunning, Plain(K::kStopRequested));
  EXPECT_EQ(stop.next, P::kStopped);
  EXPECT_EQ(stop.condition_type, "Failed");
  EXPECT_EQ(stop.condition_reason, "Stopped");
  LoopEvent death(K::kDeathFailsJob);
  death.error = "policy failJob: rank 2 died";
  EXPECT_EQ(Next(Spec(), P::kStarting, death).failure, "policy failJob: rank 2 died");
}

// A scale request keeps the phase and says what was asked and what the job will do.
TEST(LifecycleTest, AScaleRequestSaysWhatWasAskedAndWhatTheJobWillDo) {
  JobSpec spec = Spec();
  spec.max_replicas = 4;
  LoopEvent e(K::kScaleRequested, 3);
  e.asked = 9;
  e.replicas = 4;
  Transition t = Next(spec, P::kRunning, e);
  EXPECT_EQ(t.next, P::kRunning);
  EXPECT_EQ(t.condition_type, "Scaling");
  EXPECT_EQ(t.condition_reason, "ScaleRequested");
  EXPECT_EQ(t.condition_message, "replicas 9 (clamped to 4: min 2, max 4)");
  e.asked = e.replicas = 2;
  e.leaving = {0, 2};
  t = Next(spec, P::kBelowMin, e);
  EXPECT_EQ(t.next, P::kBelowMin);
  EXPECT_EQ(t.condition_message, "replicas 2, ranks 0,2 leave");
  EXPECT_TRUE(t.failure.empty());
}

}  // namespace
}  // namespace phalanx::elastic
