// The elastic job's training loop as a state machine, in policy.h's style: a pure
// Next(spec, phase, event) → Transition that the controller (controller.cc) calls with what it
// saw and then carries out. Every (phase, event) pair is a millisecond unit test
// (tests/elastic/lifecycle_test.cc). Placing and creating the ranks come before the loop
// (Controller::Begin); what the loop's turns do to get each event (waits, epochs, steps) is
// the controller's.
//
//               RanksUp               StepAgreed
//   Starting ───────────────► Forming ───────────────► Running ◄──┐ StepAgreed
//     ▲    │                   ▲   ▲  │                  │  │  └────┘
//     │    │                   │   │  │ BelowMin         │  │ BelowMin
//     │    │                   │   │  ▼                  │  ▼
//     │    │                   │   └─ BelowMin ◄─────────┼──┘
//     │    │                   │      BackToMin          │
//     │    │                   └───── StepFailed, EpochFailed (Restarting)
//     └────┼───────────────────────── StepFailed with no rank left
//          ▼
//   Failed    ◄── RanksShort; BelowMinTimedOut; the 6th EpochFailed in a row; the 3rd
//                 StepFailed in a row with no rank lost; DeathFailsJob (any live phase)
//   Succeeded ◄── Done (from Forming, Running or BelowMin)
//   Stopped   ◄── StopRequested (from any live phase)
//   ScaleRequested: any live phase stays where it is, with the condition Scaling (the
//   membership change follows at the next step boundary)
//
// Conditions: Running (Training at the first agreed step, Recovered at the first after a
// fault), Restarting (RankLost, StepFailed, Partitioned, BelowMinReplicas), Scaling
// (ScaleRequested), Failed (Stopped).
// Running and BelowMin take the events Running takes; Forming takes them too (a step agreed
// there is the first after a recovery). Failed, Succeeded and Stopped are final: every event
// leaves them as they are. A pair the loop never makes (RanksUp while Running, say) changes
// nothing, so a late or repeated event is harmless.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "elastic/job_spec.h"

namespace phalanx::elastic {

enum class JobPhase {
  kStarting,   // no rank trains (the first start, or every rank was lost): ranks come up
  kForming,    // an epoch is to be formed by the ranks there are
  kRunning,    // steps run
  kBelowMin,   // fewer than minReplicas train: replacements are awaited
  kSucceeded,  // final
  kFailed,     // final
  kStopped,    // final
};
const char* JobPhaseName(JobPhase phase);
bool IsFinal(JobPhase phase);

struct LoopEvent {
  enum class Kind {
    kStopRequested,     // a stop request (or the controller's own stop)
    kRanksUp,           // Starting: minReplicas ranks are up
    kRanksShort,        // Starting: fewer came up within belowMinTimeoutSeconds
    kEpochFailed,       // failures_in_a_row: this one included (0: a try not counted)
    kStepAgreed,        //
    kStepFailed,        // lost: ranks found dead; cut_off: left out, unreachable
    kBelowMin,          // fewer than minReplicas train
    kBackToMin,         // BelowMin: replacements brought the world back to minReplicas
    kBelowMinTimedOut,  // BelowMin: for belowMinTimeoutSeconds
    kDone,              // the steps asked for are agreed, or the trainer is done
    kDeathFailsJob,     // a rank's death fails the job (policy failJob; a rank not created)
    kScaleRequested,    // a user's scale request was taken: asked, replicas, leaving
  };
  explicit LoopEvent(Kind event_kind, int world_size = 0) : kind(event_kind), world(world_size) {}
  Kind kind;
  int world = 0;              // ranks training after the event
  int64_t step = 0;           // the agreed step
  bool ran_before = false;    // kStepAgreed: steps were agreed before (this is a recovery)
  int lost = 0;               // kStepFailed
  int cut_off = 0;            // kStepFailed: ranks left out as unreachable
  int failures_in_a_row = 0;  // kEpochFailed, kStepFailed: this one included
  double waited_s = 0;        // kRanksShort, kBelowMinTimedOut
  std::string error;          // kStepFailed: what failed; kEpochFailed: the last phase timeout;
                              // kDeathFailsJob: the job's failure
  int asked = 0;              // kScaleRequested: the replicas asked for
  int replicas = 0;           // kScaleRequested: the target, clamped to min and max
  std::vector<int> leaving;   // kScaleRequested: the ranks named to leave
};
const char* LoopEventName(LoopEvent::Kind kind);

// An epoch that cannot form this many times in a row fails the job; a step that fails this
// many times in a row with no rank lost does too (a bug, not a fault to heal).
inline constexpr int kMaxEpochFailures = 5;
inline constexpr int kMaxStepFailures = 3;

struct Transition {
  JobPhase next = JobPhase::kStarting;
  // The condition the job enters (type empty: none): Running, Restarting, or Failed for a
  // stop. A failure's condition is written as the job ends, with `failure`.
  std::string condition_type;
  std::string condition_reason;
  std::string condition_message;
  std::string failure;  // next == kFailed: the job's failure
  // An event for the job's log (kind empty: none).
  std::string event_kind;
  std::string event_message;
};

Transition Next(const JobSpec& spec, JobPhase phase, const LoopEvent& event);

}  // namespace phalanx::elastic
