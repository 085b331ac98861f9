#include "elastic/lifecycle.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace phalanx::elastic {
namespace {

using Kind = LoopEvent::Kind;

Transition Stay(JobPhase phase) {
  Transition t;
  t.next = phase;
  return t;
}

Transition Fail(std::string failure) {
  Transition t = Stay(JobPhase::kFailed);
  t.failure = std::move(failure);
  return t;
}

Transition Enter(JobPhase next, std::string type, std::string reason, std::string message) {
  Transition t = Stay(next);
  t.condition_type = std::move(type);
  t.condition_reason = std::move(reason);
  t.condition_message = std::move(message);
  return t;
}

Transition Restarting(JobPhase next, std::string reason, std::string message) {
  return Enter(next, "Restarting", std::move(reason), std::move(message));
}

std::string Seconds(double s) { return absl::StrFormat("%.1f", s); }

// A step failed: the survivors form a new epoch without the lost (or without the cut off), a
// job with no rank left starts again, and one that keeps failing with nobody lost fails.
Transition StepFailed(const LoopEvent& e) {
  if (e.lost == 0 && e.cut_off > 0) {
    return Restarting(JobPhase::kForming, "Partitioned",
                      absl::StrCat("step ", e.step, " failed; world size now ", e.world, " (",
                                   e.cut_off, " cut off)"));
  }
  if (e.lost == 0 && e.failures_in_a_row >= kMaxStepFailures) {
    return Fail(
        absl::StrCat("step ", e.step, " failed three times without a rank dying: ", e.error));
  }
  Transition t = Restarting(e.world == 0 ? JobPhase::kStarting : JobPhase::kForming,
                            e.lost > 0 ? "RankLost" : "StepFailed",
                            absl::StrCat("step ", e.step, " failed; world size now ", e.world));
  if (e.lost == 0) {
    // Nobody died: say what failed (the first line of the error).
    t.event_kind = "step_failed";
    t.event_message = absl::StrCat("step ", e.step, ": ", e.error.substr(0, e.error.find('\n')));
  }
  return t;
}

Transition BelowMinTimedOut(const JobSpec& spec, const LoopEvent& e) {
  return Fail(absl::StrCat(
      "below minReplicas (", e.world, " < ", spec.min_replicas, ") for ", Seconds(e.waited_s),
      " s (failPolicy.belowMinTimeoutSeconds: ", spec.below_min_timeout_s, ")"));
}

// A scale request was taken: the phase stays, and the condition says what was asked and what
// the job will do (clamped to min and max; the ranks named to leave).
Transition ScaleRequested(const JobSpec& spec, JobPhase phase, const LoopEvent& e) {
  std::string message = absl::StrCat("replicas ", e.asked);
  if (e.replicas != e.asked) {
    absl::StrAppend(&message, " (clamped to ", e.replicas, ": min ", spec.min_replicas, ", max ",
                    spec.max_replicas, ")");
  }
  if (!e.leaving.empty())
    absl::StrAppend(&message, ", ranks ", absl::StrJoin(e.leaving, ","), " leave");
  return Enter(phase, "Scaling", "ScaleRequested", message);
}

// The events Forming, Running and BelowMin take alike.
Transition Live(const JobSpec& spec, JobPhase phase, const LoopEvent& e) {
  switch (e.kind) {
    case Kind::kStepAgreed:
      if (phase == JobPhase::kRunning) return Stay(phase);
      return Enter(JobPhase::kRunning, "Running", e.ran_before ? "Recovered" : "Training",
                   absl::StrCat("world size ", e.world));
    case Kind::kStepFailed:
      return StepFailed(e);
    case Kind::kEpochFailed:
      if (e.failures_in_a_row > kMaxEpochFailures) {
        return Fail(absl::StrCat("the group could not be formed five times in a row",
                                 e.error.empty() ? "" : "; the last time: ", e.error));
      }
      return Stay(JobPhase::kForming);
    case Kind::kBelowMin:
      if (phase == JobPhase::kBelowMin) return Stay(phase);
      return Restarting(JobPhase::kBelowMin, "BelowMinReplicas",
                        absl::StrCat(e.world, " ranks < minReplicas ", spec.min_replicas,
                                     ": waiting for replacements"));
    case Kind::kDone:
      return Stay(JobPhase::kSucceeded);
    case Kind::kBelowMinTimedOut:
      // Below minReplicas from a phase that did not say so (the ranks that started were
      // fewer than minReplicas from the start): the bound holds all the same.
      return BelowMinTimedOut(spec, e);
    default:
      return Stay(phase);
  }
}

}  // namespace

const char* JobPhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kStarting:
      return "Starting";
    case JobPhase::kForming:
      return "Forming";
    case JobPhase::kRunning:
      return "Running";
    case JobPhase::kBelowMin:
      return "BelowMin";
    case JobPhase::kSucceeded:
      return "Succeeded";
    case JobPhase::kFailed:
      return "Failed";
    case JobPhase::kStopped:
      return "Stopped";
  }
  return "?";
}

bool IsFinal(JobPhase phase) {
  return phase == JobPhase::kSucceeded || phase == JobPhase::kFailed || phase == JobPhase::kStopped;
}

const char* LoopEventName(LoopEvent::Kind kind) {
  switch (kind) {
    case Kind::kStopRequested:
      return "StopRequested";
    case Kind::kRanksUp:
      return "RanksUp";
    case Kind::kRanksShort:
      return "RanksShort";
    case Kind::kEpochFailed:
      return "EpochFailed";
    case Kind::kStepAgreed:
      return "StepAgreed";
    case Kind::kStepFailed:
      return "StepFailed";
    case Kind::kBelowMin:
      return "BelowMin";
    case Kind::kBackToMin:
      return "BackToMin";
    case Kind::kBelowMinTimedOut:
      return "BelowMinTimedOut";
    case Kind::kDone:
      return "Done";
    case Kind::kDeathFailsJob:
      return "DeathFailsJob";
    case Kind::kScaleRequested:
      return "ScaleRequested";
  }
  return "?";
}

Transition Next(const JobSpec& spec, JobPhase phase, const LoopEvent& e) {
  if (IsFinal(phase)) return Stay(phase);
  if (e.kind == Kind::kDeathFailsJob) return Fail(e.error);
  if (e.kind == Kind::kStopRequested) {
    return Enter(JobPhase::kStopped, "Failed", "Stopped", "stopped on request");
  }
  if (e.kind == Kind::kScaleRequested) return ScaleRequested(spec, phase, e);
  switch (phase) {
    case JobPhase::kStarting:
      if (e.kind == Kind::kRanksUp) return Stay(JobPhase::kForming);
      if (e.kind == Kind::kRanksShort) {
        return Fail(absl::StrCat(
            "fewer than minReplicas (", spec.min_replicas, ") ranks could be started: ", e.world,
            " ready after ", Seconds(e.waited_s),
            " s (failPolicy.belowMinTimeoutSeconds: ", spec.below_min_timeout_s, ")"));
      }
      return Stay(phase);
    case JobPhase::kBelowMin:
      if (e.kind == Kind::kBackToMin) return Stay(JobPhase::kForming);
      return Live(spec, phase, e);
    case JobPhase::kForming:
    case JobPhase::kRunning:
      return Live(spec, phase, e);
    default:
      return Stay(phase);
  }
}

}  // namespace phalanx::elastic
