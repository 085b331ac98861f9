#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/system.h"
#include "elastic/controller_internal.h"
#include "elastic/job_keys.h"
#include "elastic/trainer_host.h"
#include "worker/core_worker.h"

namespace phalanx::elastic {

bool Controller::RunStep(int64_t* ran, std::vector<size_t>* lost, std::string* error,
                         std::vector<Metrics>* results) {
  step_started_ = absl::Now();
  std::vector<ObjectRef<Metrics>> refs;
  int64_t count;
  if (!ahead_.empty() && ahead_step_ == agreed_ && ahead_epoch_ == epoch_ &&
      ahead_.size() == members_.size()) {
    refs = std::move(ahead_);
    count = ahead_count_;
  } else {
    count = StepsPerCall(agreed_);
    for (auto& m : members_) refs.push_back(m.trainer().Step(agreed_, agreed_, epoch_, count));
  }
  ahead_.clear();
  int64_t next = agreed_ + count;
  if (MayRunAhead(next)) {
    ahead_count_ = StepsPerCall(next);
    for (auto& m : members_) {
      ahead_.push_back(m.trainer().Step(next, agreed_, epoch_, ahead_count_));
    }
    ahead_step_ = next;
    ahead_epoch_ = epoch_;
  }
  // Until every rank answered, or one died or its call failed (the survivors are told to
  // abort: wait for their answers only briefly), or the hang timeout.
  absl::Time hang_at = absl::Now() + absl::Seconds(spec_.hang_timeout_s);
  absl::Time death_grace = absl::InfiniteFuture();
  int failed_rank = -1;  // the first rank whose call failed while others still ran
  // The liveness probe: Pings sent once the call ran long (hang.silentSeconds).
  LivenessProbe probe(spec_.hang_silent_s > 0 ? absl::Now() + ProbeAfter(count)
                                              : absl::InfiniteFuture());
  bool all_ready = false;
  bool frozen_killed = false;
  std::set<size_t> unreachable;  // ranks this host cannot reach: their answers are not awaited
  while (absl::Now() < std::min(hang_at, death_grace)) {
    auto waited = Wait(refs, static_cast<int>(refs.size()), kTimeouts.step_wait_slice);
    if (waited.not_ready.empty()) {
      all_ready = true;
      break;
    }
    std::set<std::string> dead = DeadMembers();
    // A rank whose call failed (its trainer raised, or the connection to it broke) will not
    // reach the step's collectives: the others would wait there for the group's timeout.
    for (size_t r = 0; r < refs.size() && failed_rank < 0; ++r) {
      if (AnsweredWithError(refs[r])) failed_rank = static_cast<int>(r);
    }
    if (dead.empty() && failed_rank < 0) {
      std::vector<bool> answered(refs.size());
      for (size_t r = 0; r < refs.size(); ++r) answered[r] = refs[r].Ready();
      std::vector<Frozen> frozen = Probe(&probe, answered, ProbeAfter(count));
      std::string reason;
      for (const Frozen& f : frozen) {
        reason = absl::StrFormat(
            "rank %d does not answer (silent for %.1f s while its "
            "host is up: %s; %.1f s into the call); restarting it",
            f.rank, absl::ToDoubleSeconds(absl::Now() - probe.probed), f.proof,
            absl::ToDoubleSeconds(absl::Now() - step_started_));
        KillHung(f.rank, reason, step_started_);
        lost->push_back(f.rank);
      }
      if (!frozen.empty()) {
        for (auto& m : members_) m.trainer().Abort(reason);
        frozen_killed = true;
        break;
      }
      continue;
    }
    if (death_grace == absl::InfiniteFuture()) {
      death_grace = absl::Now() + kTimeouts.aborted_step_grace;
      for (size_t r = 0; r < refs.size(); ++r) {
        if (!refs[r].Ready() && dead.count(members_[r].actor_id) == 0 && CutOffFromHere(r)) {
          unreachable.insert(r);
        }
      }
      // A published death has its survivors aborted already (OnActorMessage); a failed call
      // has not.
      if (dead.empty()) {
        std::vector<size_t> ranks(refs.size());
        for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = r;
        std::string reason =
            AbortReason(refs, ranks, members_, dead, absl::StrCat("in step ", next));
        for (size_t r = 0; r < refs.size(); ++r) {
          if (!refs[r].Ready()) members_[r].trainer().Abort(reason);
        }
      }
    }
    bool survivors_answered = true;
    for (size_t r = 0; r < refs.size(); ++r) {
      survivors_answered &=
          dead.count(members_[r].actor_id) > 0 || refs[r].Ready() || unreachable.count(r) > 0;
    }
    if (survivors_answered) break;
  }
  // The ranks killed for hanging count as lost: the survivors go on without them at once.
  if (!all_ready && !frozen_killed && death_grace == absl::InfiniteFuture()) {
    *lost = HandleHang(refs);
  }
  bool all_ok = true;
  bool done = false;
  double loss = 0;
  // The failure that ended the step first, not a survivor's "aborted".
  if (failed_rank >= 0) {
    *error = std::string(Get(refs[failed_rank], absl::ZeroDuration()).status().message());
  }
  for (size_t r = 0; r < refs.size(); ++r) {
    auto result = refs[r].Ready() || all_ready
                      ? Get(refs[r], kTimeouts.step_result)
                      : absl::StatusOr<Metrics>(absl::UnavailableError(
                            "no answer after a member died or its step failed (its step "
                            "was aborted)"));
    if (!result.ok()) {
      all_ok = false;
      if (error->empty()) *error = std::string(result.status().message());
      bool counted = std::find(lost->begin(), lost->end(), r) != lost->end();
      if (!counted && LostTheActor(result.status())) lost->push_back(r);
      continue;
    }
    results->push_back(*result);
    auto steps = result->find(step_metric::kSteps);
    int64_t rank_ran = steps == result->end() ? count : static_cast<int64_t>(steps->second);
    *ran = r == 0 ? rank_ran : std::min(*ran, rank_ran);
    if (r == 0) {
      loss = result->at("loss");
      data_epoch_ = static_cast<int64_t>(result->at("data_epoch"));
      // A trainer-driven loop (Python) ends when it returns.
      auto it = result->find("done");
      done = it != result->end() && it->second != 0;
    }
  }
  if (all_ok) last_loss_ = loss;
  trainer_done_ = all_ok && done;
  // A step sent ahead of a failed one fails too (the ranks refuse it: see TrainerHostBase::
  // Step); its answers are not waited for.
  if (!all_ok) ahead_.clear();
  return all_ok;
}

int64_t Controller::StepsPerCall(int64_t first) const {
  int64_t n = 1;
  // A call stays well inside the hang timeout, which bounds it as it bounds a step.
  double span_ms = std::min(spec_.step_call_ms, spec_.hang_timeout_s * 1000 / 10);
  double step_ms = TypicalCallStepMs();
  if (span_ms > 0 && step_ms > 0) {
    n = std::clamp(static_cast<int64_t>(span_ms / step_ms), int64_t{1}, kMaxStepsPerCall);
  }
  if (spec_.TotalSteps() > 0) n = std::min(n, spec_.TotalSteps() - first);
  if (spec_.checkpoint_interval > 0) {
    n = std::min(n, spec_.checkpoint_interval - first % spec_.checkpoint_interval);
  }
  return std::max(n, int64_t{1});
}

bool Controller::MayRunAhead(int64_t next) {
  if (spec_.TotalSteps() > 0 && next >= spec_.TotalSteps()) return false;
  if (CheckpointDueAt(next)) return false;
  TakeInbox();
  if (trainer_done_ || stop_requested_ || !scale_in_ranks_.empty()) return false;
  if (!scale_request_.empty()) return false;
  if (!displaced_.empty() && Placed() > 0) return false;  // they may leave now (Boundary)
  if (resource_event_ || !dead_.empty()) return false;
  // A joiner whose Setup answered (ready, or failed) is taken at the boundary, and so is a
  // rank a partition left out, when it is to be asked whether it reaches everyone again or
  // its answer is in.
  return GrowWanted() == 0 && ReadyJoiners() == 0 && !RejoinDue();
}

// No step finished within the hang timeout: find the stuck ranks (they do not answer, or
// compute while the others wait in a collective) and restart them; unblock the rest.
// Returns the ranks killed.
std::vector<size_t> Controller::HandleHang(const std::vector<ObjectRef<Metrics>>& refs) {
  std::vector<ObjectRef<std::vector<int64_t>>> pings;
  for (auto& m : members_) pings.push_back(m.trainer().Ping());
  // One bound for all of them together, not one per rank.
  Wait(pings, static_cast<int>(pings.size()), kTimeouts.hang_ping);
  std::vector<int> phase(members_.size(), -1);
  for (size_t r = 0; r < members_.size(); ++r) {
    if (!pings[r].Ready()) continue;
    auto p = Get(pings[r], absl::ZeroDuration());
    if (p.ok() && !p->empty()) phase[r] = static_cast<int>((*p)[0]);
  }
  bool someone_waits = std::count(phase.begin(), phase.end(), kCollective) > 0;
  std::vector<size_t> killed;
  for (size_t r = 0; r < members_.size(); ++r) {
    bool silent = phase[r] < 0;
    bool computing_alone = phase[r] == kComputing && someone_waits;
    if (refs[r].Ready() || !(silent || computing_alone)) continue;
    if (silent && CutOffFromHere(r)) continue;  // not stuck: unreachable from here
    KillHung(r,
             absl::StrCat("rank ", r, " made no progress for ", spec_.hang_timeout_s, " s (",
                          silent ? "does not answer" : "stuck computing", "); restarting it"),
             step_started_);
    killed.push_back(r);
  }
  std::string reason =
      killed.empty()
          ? absl::StrCat("the step made no progress for ", spec_.hang_timeout_s, " s")
          : absl::StrCat("rank(s) ", absl::StrJoin(killed, ", "), " made no progress for ",
                         spec_.hang_timeout_s, " s and were restarted");
  for (auto& m : members_) m.trainer().Abort(reason);
  return killed;
}

bool Controller::CutOffFromHere(size_t r) {
  std::string address = ActorState(members_[r].actor_id).worker_address();
  if (address.empty()) return false;
  return KnockTcp({address}, kTimeouts.probe_knock)[0] == Knock::kSilent;
}

void Controller::KillHung(size_t r, const std::string& what, absl::Time last_progress, bool event) {
  if (event) Event("hang", what);
  // Found now (a step failed before, as when a member froze as the epoch after it formed,
  // is not when this was found).
  OpenRecovery(members_[r].actor_id, rpc::FAULT_HANG, what, last_progress,
               static_cast<int>(members_.size()), absl::Now());
  hung_.insert(members_[r].actor_id);
  Kill(members_[r].handle).IgnoreError();
}

double Controller::TypicalCallStepMs() const { return TypicalStepMs(recent_step_ms_); }

absl::Duration Controller::ProbeAfter(int64_t count) const {
  return std::max(kTimeouts.probe_after,
                  absl::Milliseconds(kTimeouts.probe_factor * TypicalCallStepMs() * count));
}

void Controller::LivenessProbe::EndConfirms() {
  for (auto& [rank, c] : confirms) {
    if (c.client) c.client->Close();
  }
  confirms.clear();
}

std::vector<Controller::Frozen> Controller::Probe(LivenessProbe* probe,
                                                  const std::vector<bool>& answered,
                                                  absl::Duration again) {
  absl::Time now = absl::Now();
  if (probe->pings.empty()) {
    if (now < probe->at) return {};
    for (auto& m : members_) probe->pings.push_back(m.trainer().Ping());
    probe->probed = now;
    probe->EndConfirms();
    // The first look comes soon (probe_first_look): a rank silent by then whose host is up
    // gets its fresh Ping (FrozenRanks), whose silence is the verdict's.
    probe->check_at =
        now + std::min(kTimeouts.probe_first_look, absl::Seconds(spec_.hang_silent_s) / 2);
    return {};
  }
  if (now < probe->check_at) return {};
  probe->check_at = now + kTimeouts.probe_check;
  std::vector<size_t> silent;
  for (size_t r = 0; r < answered.size() && r < probe->pings.size(); ++r) {
    if (!answered[r] && !probe->pings[r].Ready()) silent.push_back(r);
  }
  if (silent.empty()) {  // every rank is alive: a slow call; probe it again later
    probe->pings.clear();
    probe->EndConfirms();
    probe->at = now + again;
    return {};
  }
  return FrozenRanks(silent, probe);
}

std::vector<Controller::Frozen> Controller::FrozenRanks(const std::vector<size_t>& silent,
                                                        LivenessProbe* probe) {
  auto nodes = gcs_->GetAllNodes(true);
  if (!nodes.ok()) return {};
  // A node's heartbeat age, as the GCS has it, and its node manager's address.
  absl::flat_hash_map<std::string, absl::Duration> age;
  absl::flat_hash_map<std::string, std::string> address;
  // The nodes that say which of their workers cannot run, and those workers' states.
  absl::flat_hash_set<std::string> reports_stopped;
  absl::flat_hash_map<std::string, std::string> stopped_state;  // by actor id
  for (const auto& n : *nodes) {
    if (n.heartbeat_age_ms() >= 0) age[n.node_id()] = absl::Milliseconds(n.heartbeat_age_ms());
    if (!n.address().empty()) address[n.node_id()] = n.address();
    if (n.reports_stopped()) reports_stopped.insert(n.node_id());
    for (const auto& w : n.stopped_workers()) stopped_state[w.actor_id()] = w.state();
  }
  auto heard_now = [&](const std::string& node) {
    auto a = age.find(node);
    return a != age.end() && a->second <= kTimeouts.probe_heartbeat_gap;
  };
  const absl::Duration silence = absl::Seconds(spec_.hang_silent_s);
  absl::Time now = absl::Now();
  for (auto it = probe->confirms.begin(); it != probe->confirms.end();) {
    const std::string& node = members_[it->first].node_id;
    // A fresh Ping that failed (its connection could not be made), or one whose host went
    // silent while it waited, proves nothing: another goes once the host is seen up again.
    bool failed = it->second.ping.Ready() && !Get(it->second.ping, absl::ZeroDuration()).ok();
    if (!it->second.ping.Ready() && !heard_now(node)) it->second.disturbed = true;
    if (failed || (it->second.disturbed && now >= it->second.sent + silence)) {
      it->second.client->Close();
      it = probe->confirms.erase(it);
    } else {
      ++it;
    }
  }
  // Which silent ranks need their host seen up now: those without a fresh Ping (it goes
  // now if so), and those whose fresh Ping's silence is over (they are frozen if so).
  std::vector<size_t> due;
  for (size_t r : silent) {
    auto c = probe->confirms.find(r);
    if (c == probe->confirms.end() ||
        (!c->second.ping.Ready() && now >= c->second.sent + silence)) {
      due.push_back(r);
    }
  }
  if (due.empty()) return {};
  // Their nodes' node managers, knocked on all at once: a handshake answered now comes from a
  // host that is up and reachable now, with no wait for the node's next heartbeat.
  std::vector<std::string> to_knock;
  for (size_t r : due) {
    auto a = address.find(members_[r].node_id);
    if (a != address.end() &&
        std::find(to_knock.begin(), to_knock.end(), a->second) == to_knock.end()) {
      to_knock.push_back(a->second);
    }
  }
  absl::flat_hash_set<std::string> answered;
  if (!to_knock.empty()) {
    std::vector<Knock> answers = KnockTcp(to_knock, kTimeouts.probe_knock);
    for (size_t i = 0; i < to_knock.size(); ++i) {
      if (answers[i] == Knock::kAccepted) answered.insert(to_knock[i]);
    }
  }
  now = absl::Now();
  std::vector<Frozen> frozen;
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  for (size_t r : due) {
    const std::string& node = members_[r].node_id;
    auto a = address.find(node);
    const char* proof = a != address.end() && answered.contains(a->second)
                            ? "its node manager's port answers"
                        : heard_now(node) ? "its node still heartbeats"
                                          : nullptr;
    if (proof == nullptr) continue;  // not seen up: the network's, or the node timeout's
    auto c = probe->confirms.find(r);
    if (c == probe->confirms.end()) {
      // Its host is up now: ping it on a connection made now, which a link that was down
      // while the first Ping went does not hold back.
      if (cw == nullptr) continue;
      auto client = cw->FreshClient(members_[r].actor_id);
      if (!client.ok()) continue;  // the GCS is away: again at the next check
      LivenessProbe::Confirm confirm;
      confirm.sent = now;
      confirm.client = *client;
      confirm.ping = internal::RefAccess::Make<std::vector<int64_t>>(
          confirm.client->Submit(trainer_method::kPing, internal::PackArgs()), "Ping");
      probe->confirms.emplace(r, std::move(confirm));
      continue;
    }
    // Slow or stopped? Its node says: a busy machine delays a Ping, but never stops a process.
    std::string stopped;
    if (reports_stopped.contains(node)) {
      auto st = stopped_state.find(members_[r].actor_id);
      if (st == stopped_state.end()) {
        if (!c->second.told_runs) {
          spdlog::warn(
              "job {}: rank {} has not answered a Ping for {:.1f} s, but its node says "
              "its process can run: a busy machine, not a frozen rank; the hang "
              "timeout ({} s) bounds it",
              job_id_, r, absl::ToDoubleSeconds(now - c->second.sent), spec_.hang_timeout_s);
          c->second.told_runs = true;
        }
        continue;
      }
      stopped = absl::StrCat("; its node says its process cannot run (state ", st->second, ")");
    }
    // Its host heartbeats to the GCS, but not even a handshake from here gets an answer: the
    // path between the two is cut, and the rank may be well (a data-plane partition).
    if (CutOffFromHere(r)) continue;
    frozen.push_back(
        {r, absl::StrFormat("%s; a Ping on a fresh connection, made %.1f s ago while its host "
                            "was up, got no answer either%s",
                            proof, absl::ToDoubleSeconds(now - c->second.sent), stopped)});
  }
  return frozen;
}

void Controller::StepAgreed(const std::vector<Metrics>& results) {
  absl::Time now = absl::Now();
  int world = static_cast<int>(members_.size());
  size_t open_before = 0;
  for (const auto& r : timeline_.recoveries()) open_before += r.full_strength_ms() == 0 ? 1 : 0;
  timeline_.StepAgreed(now, world);
  size_t open_after = 0;
  bool resumed_now = false;
  for (const auto& r : timeline_.recoveries()) {
    open_after += r.full_strength_ms() == 0 ? 1 : 0;
    resumed_now |= r.resumed_ms() == absl::ToUnixMillis(now);
  }
  step_failed_ = absl::InfiniteFuture();
  step_times_.clear();
  std::vector<double> compute;
  for (size_t r = 0; r < results.size() && r < members_.size(); ++r) {
    auto step_ms = results[r].find(step_metric::kStepMs);
    auto compute_ms = results[r].find(step_metric::kComputeMs);
    if (step_ms == results[r].end() || compute_ms == results[r].end()) continue;
    rpc::RankStepTime t;
    t.set_rank(static_cast<int>(r));
    t.set_node_id(members_[r].node_id);
    t.set_step_ms(step_ms->second);
    t.set_compute_ms(compute_ms->second);
    step_times_.push_back(t);
    compute.push_back(compute_ms->second);
  }
  double slowest = 0;
  for (const auto& t : step_times_) slowest = std::max(slowest, t.step_ms());
  if (slowest > 0) {
    recent_step_ms_.push_back(slowest);
    if (recent_step_ms_.size() > kStepHistory) recent_step_ms_.pop_front();
  }
  if (!compute.empty()) {
    std::sort(compute.begin(), compute.end());
    double median = compute[compute.size() / 2];
    step_skew_ = median > 0 ? compute.back() / median : 1;
  }
  // A recovery that moved on is published at once (the dashboard and the metrics show it);
  // otherwise every tenth step.
  if (open_after != open_before || resumed_now) PublishStatus();
}

bool Controller::CheckpointDueAt(int64_t step) const {
  if (step <= 0) return false;
  if (spec_.checkpoint_interval > 0 && step % spec_.checkpoint_interval == 0) return true;
  if (spec_.checkpoint_interval == kAutoCheckpointInterval && step > last_checkpoint_ &&
      absl::Now() - last_checkpoint_sent_ >= AutoCheckpointInterval()) {
    return true;
  }
  // checkpoint.atEnd: the final state, once the trainer's loop returned or the last step is
  // agreed (an interval's checkpoint at that step is the same file).
  return spec_.checkpoint_at_end && step == agreed_ &&
         (trainer_done_ || (spec_.TotalSteps() > 0 && step >= spec_.TotalSteps()));
}

absl::Duration Controller::AutoCheckpointInterval() const {
  // Before the first save is measured: one right away (a job's first minutes are worth
  // keeping too, and the save's cost is then known).
  if (last_checkpoint_sent_ == absl::InfinitePast()) return absl::ZeroDuration();
  constexpr double kPriorFaultsPerHour = 1;
  double elapsed_s = absl::ToDoubleSeconds(absl::Now() - run_start_);
  double mtbf_s = (3600 / kPriorFaultsPerHour + elapsed_s) / (1 + restarts_);
  double save_s = std::max(checkpoint_save_s_, 0.001);
  return absl::Seconds(std::sqrt(2 * save_s * mtbf_s));
}

void Controller::CheckpointIfDue() {
  CollectCheckpoint(/*wait=*/false);
  if (members_.empty() || !CheckpointDueAt(agreed_)) return;
  const bool final_state = spec_.checkpoint_at_end && agreed_ == spec_.TotalSteps();
  if (checkpoint_in_flight_) {
    // One at a time. The final state waits for the one before; an interval's is skipped (the
    // next one comes at the next interval).
    if (!final_state && !trainer_done_) {
      spdlog::info(
          "job {}: the checkpoint of step {} is still being written: step {}'s is "
          "skipped",
          job_id_, checkpoint_in_flight_->step, agreed_);
      return;
    }
    CollectCheckpoint(/*wait=*/true);
  }
  std::string path = absl::StrCat(spec_.checkpoint_dir, "/", spec_.name, "-step", agreed_, ".ckpt");
  // Rank 0 copies its committed state's pointer and writes the file on a lane of its own: the
  // steps that follow are sent at once, and run while it writes.
  checkpoint_in_flight_ = CheckpointInFlight{members_[0].trainer().SaveCheckpoint(path, agreed_),
                                             path, agreed_, absl::Now()};
  last_checkpoint_sent_ = absl::Now();
  // The final state is the job's result: the job ends once it is on disk.
  if (final_state || trainer_done_) CollectCheckpoint(/*wait=*/true);
}

void Controller::CollectCheckpoint(bool wait) {
  if (!checkpoint_in_flight_) return;
  CheckpointInFlight& c = *checkpoint_in_flight_;
  const absl::Duration bound = absl::Seconds(spec_.checkpoint_timeout_s);
  const absl::Duration age = absl::Now() - c.sent;
  if (!wait && !c.call.Ready() && age < bound) return;
  auto saved = Get(c.call, std::max(bound - age, absl::ZeroDuration()));
  CheckpointInFlight done = std::move(c);
  checkpoint_in_flight_.reset();
  if (!saved.ok()) {
    const bool too_long = absl::Now() - done.sent >= bound;
    Event("checkpoint_failed",
          absl::StrCat("the checkpoint of step ", done.step, " (", done.path, "): ",
                       too_long ? absl::StrCat("not written within phases.checkpointSeconds (",
                                               spec_.checkpoint_timeout_s, " s); ")
                                : "",
                       saved.status().message()));
    return;
  }
  // The step the file holds, which the job's status and a restart report.
  if (*saved != done.step) {
    spdlog::warn("job {}: {} holds step {}, not {} (rank 0 no longer held it)", job_id_, done.path,
                 *saved, done.step);
  }
  checkpoint_save_s_ = absl::ToDoubleSeconds(absl::Now() - done.sent);
  last_checkpoint_ = std::max(last_checkpoint_, *saved);
  recorder_.RecordCheckpoint({*saved, done.path});
  if (spec_.checkpoint_keep > 0) {
    // checkpoint.numToKeep: the newest files of the job's own name stay (the rank 0 that wrote
    // them may be gone; the controller reads the directory, which every rank shares).
    const std::string prefix = absl::StrCat(spec_.name, "-step");
    std::vector<std::pair<int64_t, std::string>> files;
    for (const std::string& f : ListDir(spec_.checkpoint_dir)) {
      int64_t step = 0;
      absl::string_view name = f;
      if (!absl::ConsumePrefix(&name, prefix) || !absl::ConsumeSuffix(&name, ".ckpt") ||
          !absl::SimpleAtoi(name, &step)) {
        continue;
      }
      files.emplace_back(step, absl::StrCat(spec_.checkpoint_dir, "/", f));
    }
    std::sort(files.rbegin(), files.rend());
    for (size_t i = static_cast<size_t>(spec_.checkpoint_keep); i < files.size(); ++i) {
      if (files[i].first != *saved) ::unlink(files[i].second.c_str());
    }
  }
}

// No rank holds the state (the start, or every rank holding it was lost): rank 0 loads the
// last checkpoint, if any, and the others get it when the epoch forms.
bool Controller::RestartFromCheckpoint(const std::string& lost) {
  auto pointer = ReadCheckpointPointer(*gcs_, job_id_);
  // Memory first: a node's snapshot (no disk read), as new as the checkpoint or newer.
  if (had_members_ || !lost.empty()) {
    switch (RestoreFromSnapshot(lost, pointer ? pointer->step : 0)) {
      case Restored::kRestored:
        return true;
      case Restored::kRankLost:
        return false;
      case Restored::kNone:
        break;
    }
  }
  int64_t step = 0;
  if (pointer) {
    auto loaded = Rank0Answer(
        members_[0].trainer().LoadCheckpoint(pointer->path),
        absl::StrCat("while it loaded the checkpoint of step ", pointer->step),
        CheckpointPhase(absl::StrCat("loading the checkpoint of step ", pointer->step)));
    if (!loaded.ok() && !worker::IsTaskError(loaded.status())) {
      // Rank 0 died or hung on the way: the checkpoint is not to blame. It is kept for the
      // next rank 0 to load.
      spdlog::warn("job {}: rank 0 did not load {}: {}", job_id_, pointer->path,
                   loaded.status().message());
      return false;
    }
    if (loaded.ok() && *loaded >= 0) {
      step = *loaded;
    } else {
      // Unreadable: say so, and forget it (a later checkpoint must not yield to it).
      Event("checkpoint_unreadable",
            absl::StrCat(pointer->path, ": ",
                         loaded.ok() ? "missing" : std::string(loaded.status().message())));
      gcs_->KvDelete(keys::kNamespace, keys::Checkpoint(job_id_)).status().IgnoreError();
    }
  }
  if (had_members_ || !lost.empty()) {
    timeline_.NoteRestored(step > 0 ? absl::StrCat("step ", step, " from disk")
                                    : "step 0: no snapshot or checkpoint");
  }
  if (!lost.empty() || step > 0) {
    Event("restart_from_checkpoint",
          absl::StrCat(lost.empty() ? "" : absl::StrCat(lost, ": "), "starting from step ", step,
                       step > 0 ? " (checkpoint)" : " (no checkpoint)"));
  }
  agreed_ = step;
  return true;
}

}  // namespace phalanx::elastic
