#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/describe.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/system.h"
#include "base/worker_env.h"
#include "elastic/controller_internal.h"
#include "elastic/fault.h"

namespace phalanx::elastic {
namespace {

// The API's node ids of the GCS's.
std::vector<NodeId> NodeIds(const std::vector<std::string>& hexes) {
  std::vector<NodeId> out;
  out.reserve(hexes.size());
  for (const auto& hex : hexes) out.emplace_back(hex);
  return out;
}

}  // namespace

// Copies the controller's view into the record; the recorder's writer saves it.
void Controller::PublishStatus() {
  {
    absl::MutexLock lock(&mu_);
    live_members_.clear();
    for (const auto& m : members_) live_members_.emplace(m.actor_id, m.handle);
    for (auto it = announced_dead_.begin(); it != announced_dead_.end();) {
      it = live_members_.count(*it) ? std::next(it) : announced_dead_.erase(it);
    }
  }
  // Deaths of those no longer members are over (their ranks were removed).
  std::erase_if(dead_, [&](const std::string& id) { return !IsMember(id); });
  std::erase_if(detected_at_, [&](const auto& entry) { return !IsMember(entry.first); });
  recorder_.Update([&](rpc::JobInfo* job) {
    auto* el = job->mutable_elastic();
    el->set_world_size(static_cast<int>(members_.size()));
    el->set_epoch(epoch_);
    el->set_step(agreed_);
    el->set_total_steps(spec_.TotalSteps());
    el->set_loss(last_loss_);
    el->set_restarts(restarts_);
    el->set_min_replicas(spec_.min_replicas);
    el->set_max_replicas(spec_.max_replicas);
    el->set_target_replicas(target_);
    el->set_data_epoch(data_epoch_);
    el->set_last_checkpoint_step(last_checkpoint_);
    el->set_steps_per_second(steps_per_second_);
    el->set_steps_per_call(steps_per_call_);
    el->clear_members();
    for (size_t r = 0; r < members_.size(); ++r) {
      auto* m = el->add_members();
      m->set_rank(static_cast<int>(r));
      m->set_actor_id(members_[r].actor_id);
      m->set_node_id(members_[r].node_id);
      m->set_memory_bytes(members_[r].memory);
      m->set_bundle(members_[r].bundle);
    }
    el->set_placement_group_id(pg_.id().Hex());
    el->clear_allowed_nodes();
    for (const auto& n : allowed_nodes_) el->add_allowed_nodes(n);
    el->clear_step_times();
    for (const auto& t : step_times_) *el->add_step_times() = t;
    el->set_step_skew(step_skew_);
    el->set_network_check_skew(network_check_skew_);
    el->clear_restarts_by_cause();
    for (const auto& [cause, n] : restarts_by_cause_) (*el->mutable_restarts_by_cause())[cause] = n;
    timeline_.CopyTo(el);
    job->set_world_size(static_cast<int>(members_.size()));
    job->set_epoch(epoch_);
  });
}

void Controller::OpenRecovery(const std::string& actor_id, rpc::FaultKind kind,
                              const std::string& message, absl::Time fault, int world_before,
                              absl::Time detected) {
  if (!recovery_opened_.emplace(actor_id, kind).second) return;
  if (detected == absl::InfinitePast()) detected = DetectedAt(actor_id);
  timeline_.Open(kind, message, fault, detected, world_before, world_before);
}

absl::Time Controller::DetectedAt(const std::string& actor_id) {
  TakeInbox();
  absl::Time detected = std::min(absl::Now(), step_failed_);
  if (auto it = detected_at_.find(actor_id); it != detected_at_.end()) {
    detected = std::min(detected, it->second);
  }
  return detected;
}

void Controller::TakeInbox() {
  for (Signal& signal : inbox_.Take()) {
    switch (signal.kind) {
      case Signal::Kind::kRankDied:
        // A death the subscription thread saw among the members it knew: one still a member.
        if (!IsMember(signal.actor_id)) break;
        dead_.insert(signal.actor_id);
        detected_at_.emplace(signal.actor_id, signal.at);
        break;
      case Signal::Kind::kNodeAdded:
        node_added_ = true;
        resource_event_ = true;
        break;
      case Signal::Kind::kResourcesChanged:
        resource_event_ = true;
        break;
      case Signal::Kind::kScaleRequested:
        scale_request_ = std::move(signal.value);  // the newest request wins
        break;
      case Signal::Kind::kStopRequested:
        stop_requested_ = true;
        break;
    }
  }
}

bool Controller::IsMember(const std::string& actor_id) const {
  return std::any_of(members_.begin(), members_.end(),
                     [&](const Member& m) { return m.actor_id == actor_id; });
}

std::set<std::string> Controller::DeadMembers() {
  TakeInbox();
  return dead_;
}

bool Controller::StopRequested() {
  TakeInbox();
  return stop_requested_;
}

// Starts a trainer actor; it joins at a step boundary once ready.
Member Controller::Spawn(int bundle, double memory, const std::vector<std::string>& avoid,
                         const std::string& why) {
  Member m;
  m.bundle = bundle;
  m.memory = memory;
  m.why = why;
  auto resources = spec_.resources;
  if (memory > 0) resources["memory"] = memory;
  auto creator = ActorOf(spec_.trainer)
                     .SetResources(resources)
                     .SetMaxRestarts(0)
                     // The job's, not this controller's: a restarted controller adopts them,
                     // and the job's end kills them (they would die with their owner).
                     .SetDetached(true)
                     .SetEnv("PHALANX_JOB_ID", job_id_);
  if (!spec_.code_path.empty()) creator.SetCodePath(spec_.code_path);
  auto language = ParseLanguage(spec_.language, "language");  // checked by job_spec.cc
  if (!language.ok()) {
    Event("spawn_failed", absl::StrCat("cannot start a rank: ", language.status().message()));
    return m;
  }
  creator.SetLanguage(*language);
  if (!spec_.preimports.empty()) {
    creator.SetEnv(kWorkerImportsEnv, absl::StrJoin(spec_.preimports, ","));
  }
  if (!allowed_nodes_.empty()) {
    auto nodes = gcs_->GetAllNodes(true);
    std::vector<std::string> allowed =
        nodes.ok() ? AllowedNodeIds(*nodes) : std::vector<std::string>{};
    if (allowed.empty()) {
      Event("spawn_waiting",
            absl::StrCat("no node the job may use is alive (", absl::StrJoin(allowed_nodes_, ","),
                         "); a rank starts once one joins"));
      return m;
    }
    // Outside the placement group: its bundles may be on other nodes. A bundle the rank
    // would have taken is given back.
    if (bundle >= 0 && !pg_.id().IsNil()) ReleaseBundle(pg_, bundle).IgnoreError();
    m.bundle = -1;
    creator.SetAllowedNodes(NodeIds(allowed));
    if (!avoid.empty()) creator.SetAvoidNodes(NodeIds(avoid));
  } else if (bundle >= 0) {
    creator.SetPlacementGroup(pg_, bundle);
  } else if (!avoid.empty()) {
    creator.SetAvoidNodes(NodeIds(avoid));
  }
  auto handle = creator.Remote();
  if (!handle.ok()) {
    Event("spawn_failed", absl::StrCat("cannot start a rank: ", handle.status().message()));
    return m;
  }
  m.handle = *handle;
  m.actor_id = handle->id().Hex();
  m.setup = m.trainer().Setup(job_id_, spec_yaml_);
  m.spawned = absl::Now();
  return m;
}

std::vector<std::string> Controller::AllowedNodeIds(const std::vector<rpc::NodeInfo>& nodes) const {
  std::vector<std::string> ids;
  for (const auto& n : nodes) {
    if (n.state() != rpc::NODE_ALIVE) continue;
    std::string ip = n.address().substr(0, n.address().rfind(':'));
    ip = std::string(absl::StripPrefix(absl::StripSuffix(ip, "]"), "["));
    bool named = allowed_nodes_.empty();
    for (const auto& a : allowed_nodes_) {
      named = named || a == n.node_id() || a == n.hostname() || a == ip ||
              (a.size() >= 8 && absl::StartsWith(n.node_id(), a));
    }
    if (named) ids.push_back(n.node_id());
  }
  return ids;
}

void Controller::SetAllowedNodes(const std::vector<std::string>& names) {
  allowed_nodes_ = names;
  if (names.empty()) {
    Event("nodes", "the ranks may use any node");
    return;
  }
  auto nodes = gcs_->GetAllNodes(true);
  if (!nodes.ok()) {
    spdlog::warn("job {}: cannot read the nodes: {}", job_id_, nodes.status());
    return;
  }
  std::vector<std::string> ids = AllowedNodeIds(*nodes);
  std::set<std::string> allowed(ids.begin(), ids.end());
  // Ranks elsewhere leave at the next step boundary, down to minReplicas; the rest are
  // displaced: they train on until ranks on the allowed nodes have joined and received the
  // state, then leave (Boundary).
  std::vector<int> leaving, displaced;
  displaced_.clear();
  int can_leave = static_cast<int>(members_.size()) - std::max(1, spec_.min_replicas);
  for (size_t r = 0; r < members_.size(); ++r) {
    const Member& m = members_[r];
    if (m.node_id.empty() || allowed.count(m.node_id)) continue;
    bool named = std::find(scale_in_ranks_.begin(), scale_in_ranks_.end(), static_cast<int>(r)) !=
                 scale_in_ranks_.end();
    if (named || can_leave > 0) {
      if (!named) scale_in_ranks_.push_back(static_cast<int>(r));
      leaving.push_back(static_cast<int>(r));
      --can_leave;
    } else {
      displaced_.insert(m.actor_id);
      displaced.push_back(static_cast<int>(r));
    }
  }
  for (auto it = joining_.begin(); it != joining_.end();) {
    if (!it->node_id.empty() && !allowed.count(it->node_id)) {
      Kill(it->handle).IgnoreError();
      it = joining_.erase(it);
    } else {
      ++it;
    }
  }
  Event("nodes",
        absl::StrCat(
            "the ranks may use ", absl::StrJoin(names, ","), " (", ids.size(), " live node(s))",
            leaving.empty()
                ? ""
                : absl::StrCat("; ranks ", absl::StrJoin(leaving, ","), " leave their nodes"),
            displaced.empty() ? ""
                              : absl::StrCat("; ranks ", absl::StrJoin(displaced, ","),
                                             " stay until ranks there hold the state")));
}

rpc::ActorInfo Controller::ActorState(const std::string& actor_id) {
  auto info = gcs_->GetActor(actor_id);
  return info.ok() ? *info : rpc::ActorInfo();
}

// Until every call in `refs` answered. In an epoch's formation, a member that dies meanwhile
// (or was dead already, its death not yet known when it was counted in), or whose call
// failed, would leave the others waiting in a collective (the rendezvous, the state's
// broadcast) for the group's timeout (up to a minute): once its death is published or its
// call failed, the epoch cannot form, and those still waiting are told to abort. A member
// that froze (SIGSTOP: no death to publish) is found by the liveness probe, as in a step,
// and restarted as hung; so is a rank 0 that froze while it saved or loaded a checkpoint
// (else the controller waited phases.checkpointSeconds for it).
absl::Time Controller::AwaitCalls(const std::vector<ObjectRef<int64_t>>& refs,
                                  const std::vector<size_t>& ranks, const std::string& when,
                                  const Phase& phase) {
  absl::Time began = absl::Now();
  absl::Time deadline = phase.Deadline(began);
  LivenessProbe probe(spec_.hang_silent_s > 0 ? began + kTimeouts.probe_after
                                              : absl::InfiniteFuture());
  bool aborted = false;
  std::string reason;  // why the others are aborted (their collectives' errors say it)
  while (!aborted) {
    if (Wait(refs, static_cast<int>(refs.size()), kTimeouts.step_wait_slice).not_ready.empty()) {
      return deadline;
    }
    if (absl::Now() >= deadline) {
      PhaseTimedOut(refs, ranks, phase, began);
      return absl::Now() + kTimeouts.aborted_step_grace;
    }
    if (StopRequested()) {
      reason = "the job is being stopped";
      aborted = true;
      break;
    }
    std::set<std::string> dead = DeadMembers();
    std::vector<bool> answered(members_.size(), true);  // the ranks not called count as answered
    for (size_t i = 0; i < refs.size(); ++i) {
      answered[ranks[i]] = refs[i].Ready();
      aborted |= dead.count(members_[ranks[i]].actor_id) > 0 || AnsweredWithError(refs[i]);
    }
    if (!aborted) {
      for (const Frozen& f : Probe(&probe, answered, kTimeouts.probe_after)) {
        reason = absl::StrFormat(
            "rank %d does not answer (silent for %.1f s while its host is "
            "up: %s) %s; restarting it",
            f.rank, absl::ToDoubleSeconds(absl::Now() - probe.probed), f.proof, when);
        KillHung(f.rank, reason, began);
        aborted = true;
      }
    }
    if (!aborted) continue;
    if (reason.empty()) reason = AbortReason(refs, ranks, members_, dead, when);
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!refs[i].Ready()) members_[ranks[i]].trainer().Abort(reason);
  }
  // Those in a collective end at once; one stuck in work of its own is not waited for.
  return std::min(deadline, absl::Now() + kTimeouts.aborted_step_grace);
}

void Controller::PhaseTimedOut(const std::vector<ObjectRef<int64_t>>& refs,
                               const std::vector<size_t>& ranks, const Phase& phase,
                               absl::Time began) {
  std::vector<size_t> waited;  // indexes into refs
  std::vector<ObjectRef<std::vector<int64_t>>> pings;
  for (size_t i = 0; i < refs.size(); ++i) {
    if (refs[i].Ready()) continue;
    waited.push_back(i);
    pings.push_back(members_[ranks[i]].trainer().Ping());
  }
  if (waited.empty()) return;
  Wait(pings, static_cast<int>(pings.size()), kTimeouts.hang_ping);
  // Those that are done do not wait for the rest in a collective any more: the rest are stuck
  // in work of their own (a lone rank 0's checkpoint, a rollback that never ends). When none
  // is done, a live rank may only be waiting for another (a rendezvous across a cut link).
  bool others_done = waited.size() < refs.size() || refs.size() == 1;
  std::vector<size_t> restart, silent, answering;
  for (size_t k = 0; k < waited.size(); ++k) {
    size_t r = ranks[waited[k]];
    bool answers = pings[k].Ready() && Get(pings[k], absl::ZeroDuration()).ok();
    (answers ? answering : silent).push_back(r);
    if (!answers && CutOffFromHere(r)) continue;  // unreachable from here, not stuck
    if (!answers || others_done) restart.push_back(r);
  }
  auto names = [](const std::vector<size_t>& rs) {
    return absl::StrCat(rs.size() == 1 ? "rank " : "ranks ", absl::StrJoin(rs, ", "));
  };
  std::vector<std::string> parts;
  if (!silent.empty())
    parts.push_back(absl::StrCat(names(silent), " (silent: no answer to a Ping)"));
  if (!answering.empty())
    parts.push_back(absl::StrCat(names(answering), " (alive: answers Pings)"));
  std::string what = absl::StrFormat("%s did not end within %.1f s (%s: %g): waited for %s; %s",
                                     phase.name, absl::ToDoubleSeconds(absl::Now() - began),
                                     phase.setting, phase.seconds, absl::StrJoin(parts, "; "),
                                     restart.empty() ? "aborting the phase to try it again"
                                                     : absl::StrCat("restarting ", names(restart)));
  Event("phase_timeout", what);
  last_phase_timeout_ = what;
  for (size_t r : restart) KillHung(r, what, began, /*event=*/false);
  for (size_t i : waited) members_[ranks[i]].trainer().Abort(what);
}

Controller::Phase Controller::FormPhase(int64_t epoch) const {
  return {absl::StrCat("forming epoch ", epoch), "phases.formSeconds", spec_.form_timeout_s};
}

Controller::Phase Controller::SyncPhase(int64_t epoch) const {
  return {absl::StrCat("sending rank 0's state in epoch ", epoch), "phases.syncSeconds",
          spec_.sync_timeout_s};
}

Controller::Phase Controller::CheckpointPhase(const std::string& what) const {
  return {what, "phases.checkpointSeconds", spec_.checkpoint_timeout_s};
}

absl::StatusOr<int64_t> Controller::EpochAnswer(const std::vector<ObjectRef<int64_t>>& refs, int r,
                                                absl::Time deadline) {
  auto held = Get(refs[r], std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!held.ok() && LostTheActor(held.status())) unreachable_.insert(members_[r].actor_id);
  return held;
}

absl::StatusOr<int64_t> Controller::Rank0Answer(const ObjectRef<int64_t>& call,
                                                const std::string& when, const Phase& phase) {
  absl::Time deadline = AwaitCalls({call}, {0}, when, phase);
  return Get(call, std::max(deadline - absl::Now(), absl::ZeroDuration()));
}

// Forms epoch `epoch_ + 1` with `members_` (in rank order) and rolls everyone back to the
// agreed state; newcomers then receive it from rank 0. Returns false if it failed.
bool Controller::FormEpoch(const std::string& why) {
  int64_t epoch = ++epoch_;
  int world = static_cast<int>(members_.size());
  std::vector<ObjectRef<int64_t>> refs;
  for (int r = 0; r < world; ++r) {
    refs.push_back(members_[r].trainer().Reconfigure(GroupName(), epoch, r, world, agreed_));
  }
  std::vector<size_t> all(world);
  std::iota(all.begin(), all.end(), 0);
  absl::Time deadline =
      AwaitCalls(refs, all, absl::StrCat("as epoch ", epoch, " formed"), FormPhase(epoch));
  bool ok = true;
  bool behind = false;
  int holders = 0;  // ranks that hold the agreed state
  std::vector<std::string> failures;
  unreachable_.clear();
  for (int r = 0; r < world; ++r) {
    auto held = EpochAnswer(refs, r, deadline);
    if (!held.ok()) {
      spdlog::warn("job {}: rank {} failed to form epoch {}: {}", job_id_, r, epoch, held.status());
      std::string why_not(held.status().message());
      failures.push_back(absl::StrCat("rank ", r, ": ", why_not.substr(0, why_not.find('\n'))));
      ok = false;
    } else if (*held != agreed_) {
      behind = true;
    } else {
      ++holders;
    }
  }
  if (!failures.empty()) {
    constexpr size_t kNamed = 3;  // the event names this many ranks' errors
    size_t more = failures.size() > kNamed ? failures.size() - kNamed : 0;
    failures.resize(failures.size() - more);
    Event("epoch_failed", absl::StrCat("epoch ", epoch, " (world size ", world,
                                       ") did not form: ", absl::StrJoin(failures, "; "),
                                       more > 0 ? absl::StrCat("; and ", more, " more") : ""));
  }
  if (ok && holders == 0 && agreed_ > 0) {
    // Every rank that held the agreed state died after newcomers had joined (all told to end
    // at once while their replacements came, or the last holder lost as an epoch formed):
    // the state is only in the last checkpoint or dying gasp, as when every rank is lost.
    // Rank 0 loads it; the epoch is formed again around it (once: rank 0 then holds it).
    if (!RestartFromCheckpoint(absl::StrCat("every rank holding step ", agreed_, " was lost"))) {
      return false;
    }
    return FormEpoch(why);
  }
  if (ok && behind) {
    // Newcomers (or a whole set restarting from a checkpoint) get rank 0's state.
    std::vector<ObjectRef<int64_t>> syncs;
    for (int r = 0; r < world; ++r) syncs.push_back(members_[r].trainer().SyncState(0));
    deadline = AwaitCalls(syncs, all, absl::StrCat("as epoch ", epoch, " sent rank 0's state"),
                          SyncPhase(epoch));
    for (int r = 0; r < world; ++r) {
      auto held = EpochAnswer(syncs, r, deadline);
      if (!held.ok() || *held != agreed_) {
        spdlog::warn(
            "job {}: rank {} failed to receive the state: {}", job_id_, r,
            held.ok() ? absl::StrCat("holds ", *held) : std::string(held.status().message()));
        ok = false;
      }
    }
  }
  for (auto& m : members_) m.node_id = ActorState(m.actor_id).node_id();
  PublishStatus();
  if (ok) Event("epoch", absl::StrCat("epoch ", epoch, ": world size ", world, " (", why, ")"));
  if (ok && spec_.straggler_check && world > 1) CheckNetwork();
  return ok;
}

void Controller::CheckNetwork() {
  std::vector<ObjectRef<std::vector<int>>> refs;
  for (auto& m : members_) refs.push_back(m.trainer().NetworkCheck(spec_.straggler_factor));
  auto report = Get(refs[0], kTimeouts.network_check);
  for (auto& r : refs) Get(r, kTimeouts.network_check).IgnoreError();
  if (!report.ok()) {
    Event("network_check_failed", std::string(report.status().message()));
    return;
  }
  auto skew =
      Get(members_[0].trainer().Query(trainer_query::kNetworkCheckSkew), kTimeouts.network_check);
  if (skew.ok() && absl::SimpleAtod(*skew, &network_check_skew_)) PublishStatus();
  bool faulty_part = false;
  for (int r : *report) {
    if (r < 0) {
      faulty_part = true;
      continue;
    }
    if (r >= static_cast<int>(members_.size())) continue;
    Member& m = members_[r];
    if (faulty_part) {
      std::string what = absl::StrCat("rank ", r, " failed both network-check rounds");
      Event("faulty", what);
      OpenRecovery(m.actor_id, rpc::FAULT_STRAGGLER, what, absl::Now(),
                   static_cast<int>(members_.size()));
      hung_.insert(m.actor_id);
      Kill(m.handle).IgnoreError();
      continue;
    }
    FaultPolicy policy = MatchPolicy(spec_, "straggler", 0, 0);
    std::string what =
        absl::StrCat("rank ", r, " on node ", ShortId(m.node_id), " is slower than ",
                     spec_.straggler_factor, "× the median; action: ", ActionName(policy.action));
    Event("straggler", what);
    if (ReplaceStraggler(policy, &budget_, absl::Now())) {
      ++restarts_;
      ++restarts_by_cause_[std::string(FaultName(rpc::FAULT_STRAGGLER))];
      OpenRecovery(m.actor_id, rpc::FAULT_STRAGGLER, what, absl::Now(),
                   static_cast<int>(members_.size()));
      Member replacement =
          Spawn(-1, m.memory, {m.node_id}, absl::StrCat("replaces straggler rank ", r));
      replacement.replaces = m.actor_id;
      if (!replacement.actor_id.empty()) joining_.push_back(std::move(replacement));
    }
  }
}

// A rank is gone: the policies decide (elastic/policy.h); this carries it out.
void Controller::HandleDeath(const Member& m, const rpc::ActorInfo& info, int world_before) {
  const rpc::DeathCause& cause = info.death_cause();
  // A rank killed for hanging or for failing the network check is that fault, opened when
  // it was found; any other death is a fault of its own kind.
  auto opened = recovery_opened_.find(m.actor_id);
  rpc::FaultKind kind = opened != recovery_opened_.end() ? opened->second
                        : hung_.count(m.actor_id) > 0    ? rpc::FAULT_HANG
                                                         : FaultOf(cause);
  if (cause.kind() == rpc::DeathCause::CREATION_FAILED) {
    LoopEvent e(LoopEvent::Kind::kDeathFailsJob);
    e.error = absl::StrCat("a rank could not be created: ", rpc::DescribeCause(cause));
    Apply(e);
    return;
  }
  DeathDecision d = DecideOnDeath(spec_, ToRankDeath(m, cause), &budget_, absl::Now());
  std::string what = absl::StrCat(rpc::DescribeActor(info), " on node ", ShortId(m.node_id),
                                  " died: ", rpc::DescribeCause(cause));
  if (d.kind == DeathDecision::Kind::kReplace) {
    ++restarts_;
    ++restarts_by_cause_[std::string(FaultName(kind))];
  }
  Event("rank_died", absl::StrCat(what, "; ", d.summary));
  if (world_before > 0) {
    // The node's time of death where it has one (waitpid's moment); else when we knew.
    absl::Time detected = DetectedAt(m.actor_id);
    absl::Time fault = cause.time_ms() > 0 ? absl::FromUnixMillis(cause.time_ms()) : detected;
    OpenRecovery(m.actor_id, kind, what, fault, world_before);
  }
  switch (d.kind) {
    case DeathDecision::Kind::kFailJob: {
      LoopEvent e(LoopEvent::Kind::kDeathFailsJob);
      e.error = absl::StrCat("policy failJob: ", what);
      Apply(e);
      return;
    }
    case DeathDecision::Kind::kShrink:
      // Below minReplicas too: the resources the dead rank freed must not bring it back by
      // way of a scale out (that would be the respawn its budget refused). A new node lifts
      // the ceiling; failPolicy.belowMinTimeoutSeconds bounds the wait for one.
      target_ = std::max(1, target_ - 1);
      ceiling_ = target_;
      return;
    case DeathDecision::Kind::kReplace:
      break;
  }
  if (d.release_bundle && !pg_.id().IsNil()) {
    absl::Status released = ReleaseBundle(pg_, m.bundle);
    if (!released.ok()) {
      spdlog::warn("job {}: cannot release bundle {}: {}", job_id_, m.bundle, released);
    }
  }
  Member replacement =
      Spawn(d.bundle, d.memory, d.avoid_nodes, absl::StrCat("replaces ", ShortId(m.actor_id)));
  if (!replacement.actor_id.empty()) joining_.push_back(std::move(replacement));
}

// A member's death in the policies' terms.
RankDeath Controller::ToRankDeath(const Member& m, const rpc::DeathCause& cause) const {
  RankDeath death;
  death.memory = m.memory;
  death.bundle = m.bundle;
  death.node_id = m.node_id;
  death.fault = FaultOf(cause);
  death.exit_code = cause.exit_code();
  death.signal = cause.signal();
  // Killed by the controller for hanging: the policies' `hang` (not a straggler's kill).
  if (cause.kind() == rpc::DeathCause::KILLED_BY_USER && hung_.count(m.actor_id) > 0) {
    death.fault = rpc::FAULT_HANG;
  }
  return death;
}

rpc::ActorInfo Controller::AwaitDead(const std::string& actor_id, absl::Duration bound) {
  absl::Time until = absl::Now() + bound;
  rpc::ActorInfo info = ActorState(actor_id);
  while (info.state() != rpc::ACTOR_DEAD && absl::Now() < until) {
    absl::SleepFor(kTimeouts.poll);
    info = ActorState(actor_id);
  }
  return info;
}

rpc::ActorInfo Controller::MakeSureDead(const Member& m, bool answered) {
  rpc::ActorInfo info =
      AwaitDead(m.actor_id, answered ? absl::ZeroDuration() : kTimeouts.confirm_death);
  if (info.state() == rpc::ACTOR_DEAD) return info;
  Kill(m.handle).IgnoreError();
  return AwaitDead(m.actor_id, kTimeouts.death_record);
}

// Waits (bounded) until the GCS says each member in `candidates` is dead or alive.
std::vector<size_t> Controller::ConfirmDeaths(const std::vector<size_t>& candidates) {
  std::vector<size_t> dead;
  for (size_t r : candidates) {
    if (AwaitDead(members_[r].actor_id, kTimeouts.confirm_death).state() != rpc::ACTOR_DEAD) {
      // Its connection broke but the GCS calls it alive: make it so.
      Kill(members_[r].handle).IgnoreError();
    }
    dead.push_back(r);
  }
  return dead;
}

void Controller::ExpireJoiners() {
  absl::Time now = absl::Now();
  for (auto it = joining_.begin(); it != joining_.end();) {
    Member& j = *it;
    if (j.setup.Ready() || now - j.looked < kTimeouts.joiner_look) {
      ++it;
      continue;
    }
    if (j.placed == absl::InfiniteFuture()) {
      j.looked = now;
      rpc::ActorInfo info = ActorState(j.actor_id);
      if (info.state() == rpc::ACTOR_PENDING || info.node_id().empty()) {
        ++it;
        continue;
      }
      j.node_id = info.node_id();
      // Placed since it was last looked at (or since it was asked for).
      j.placed = std::max(j.spawned, now - kTimeouts.joiner_look);
    }
    double waited = absl::ToDoubleSeconds(now - j.placed);
    if (waited < spec_.start_timeout_s) {
      ++it;
      continue;
    }
    std::string what = absl::StrFormat(
        "starting a rank did not end within %.1f s (phases.startSeconds: %g): waited for the new "
        "rank %s on node %s (%s), whose setup has not answered; restarting it",
        waited, spec_.start_timeout_s, ShortId(j.actor_id), ShortId(j.node_id), j.why);
    Event("phase_timeout", what);
    last_phase_timeout_ = what;
    Member stuck = std::move(j);
    it = joining_.erase(it);
    hung_.insert(stuck.actor_id);
    Kill(stuck.handle).IgnoreError();
    HandleDeath(stuck, AwaitDead(stuck.actor_id, kTimeouts.death_record), /*world_before=*/-1);
  }
}

void Controller::DropFailedJoiners() {
  for (auto it = joining_.begin(); it != joining_.end();) {
    absl::Status s = it->setup.Ready() ? Get(it->setup).status() : absl::OkStatus();
    if (s.ok()) {
      ++it;
      continue;
    }
    // Its Setup failed, or its death has not reached the GCS yet, or its connection broke
    // while it lives on: it goes, and its policy starts another (else the job would stay
    // below its target with nothing to bring it back). One that could not be created (its
    // class is not in the program) fails the job.
    Event("spawn_failed", absl::StrCat("a new rank failed to start: ", s.message()));
    Member failed = std::move(*it);
    it = joining_.erase(it);
    bool answered = s.code() != absl::StatusCode::kUnavailable;
    HandleDeath(failed, MakeSureDead(failed, answered), /*world_before=*/-1);
  }
}

Controller::Change Controller::Boundary() {
  TakeRequests();
  ExpireJoiners();
  DropFailedJoiners();
  std::vector<Member> ready = TakeReady();
  RejoinHealed(&ready);
  std::vector<std::string> changes;
  RetireDisplaced(&changes);
  Admit(std::move(ready), &changes);
  ScaleIn(&changes);
  MaybeGrow();
  if (changes.empty()) return Change::kNone;
  bool ok = !members_.empty() && FormEpoch(absl::StrJoin(changes, ", "));
  // Retired ranks finished their last step with the others; now they go.
  for (auto& m : retiring_) {
    Kill(m.handle).IgnoreError();
    Event("scaled_in",
          absl::StrCat("rank ", ShortId(m.actor_id), " on node ", ShortId(m.node_id), " left"));
  }
  retiring_.clear();
  if (members_.empty()) return Change::kNone;
  return ok ? Change::kFormed : Change::kFailed;
}

std::vector<Member> Controller::TakeReady() {
  std::vector<Member> ready;
  for (auto it = joining_.begin(); it != joining_.end();) {
    if (!it->setup.Ready()) {
      ++it;
      continue;
    }
    ready.push_back(std::move(*it));
    it = joining_.erase(it);
  }
  return ready;
}

void Controller::RetireDisplaced(std::vector<std::string>* changes) {
  // Ranks on nodes the job may no longer use leave once a rank that holds the state stays
  // (one that is neither displaced nor named to leave now). Named ranks' indices follow.
  auto named = [&](int r) {
    return std::find(scale_in_ranks_.begin(), scale_in_ranks_.end(), r) != scale_in_ranks_.end();
  };
  int holders = 0;
  for (size_t r = 0; r < members_.size(); ++r) {
    holders += !displaced_.count(members_[r].actor_id) && !named(static_cast<int>(r)) ? 1 : 0;
  }
  for (size_t r = members_.size(); holders > 0 && r-- > 0;) {
    if (!displaced_.count(members_[r].actor_id)) continue;
    displaced_.erase(members_[r].actor_id);
    retiring_.push_back(members_[r]);
    changes->push_back(absl::StrCat("-rank ", r, " (its node is not one the job may use)"));
    members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(r));
    std::vector<int> shifted;
    for (int k : scale_in_ranks_) {
      if (k != static_cast<int>(r)) shifted.push_back(k > static_cast<int>(r) ? k - 1 : k);
    }
    scale_in_ranks_ = std::move(shifted);
  }
}

void Controller::Admit(std::vector<Member> ready, std::vector<std::string>* changes) {
  // Stragglers leave when their replacement is ready.
  for (auto& r : ready) {
    if (r.replaces.empty()) continue;
    auto gone = std::find_if(members_.begin(), members_.end(),
                             [&](const Member& m) { return m.actor_id == r.replaces; });
    if (gone != members_.end()) {
      changes->push_back(absl::StrCat("rank on ", ShortId(gone->node_id), " replaced"));
      retiring_.push_back(*gone);
      members_.erase(gone);
    }
  }
  int room = target_ - Placed();
  for (auto& r : ready) {
    if (room <= 0 && r.replaces.empty()) {
      joining_.push_back(std::move(r));  // not needed now; keep it warm
      continue;
    }
    changes->push_back(absl::StrCat("+", ShortId(r.actor_id), " (", r.why, ")"));
    members_.push_back(std::move(r));
    --room;
  }
}

void Controller::ScaleIn(std::vector<std::string>* changes) {
  // Scale in, gracefully: the leaving ranks finished the last step with the others; they
  // leave the group here and their actors go after the new epoch formed. Named ranks first,
  // then the highest.
  std::sort(scale_in_ranks_.rbegin(), scale_in_ranks_.rend());
  scale_in_ranks_.erase(std::unique(scale_in_ranks_.begin(), scale_in_ranks_.end()),
                        scale_in_ranks_.end());
  for (int r : scale_in_ranks_) {
    if (r >= static_cast<int>(members_.size()) ||
        static_cast<int>(members_.size()) <= spec_.min_replicas) {
      continue;
    }
    retiring_.push_back(members_[r]);
    changes->push_back(absl::StrCat("-rank ", r, " (scale in)"));
    members_.erase(members_.begin() + r);
  }
  scale_in_ranks_.clear();
  while (Placed() > target_ && members_.size() > 1) {
    retiring_.push_back(members_.back());
    changes->push_back(absl::StrCat("-rank ", members_.size() - 1, " (scale in)"));
    members_.pop_back();
  }
}

int Controller::Placed() const {
  int placed = 0;
  for (const auto& m : members_) placed += displaced_.count(m.actor_id) ? 0 : 1;
  return placed;
}

// Grows toward the target when some node has room for a rank (after a debounce since the
// last resource event), keeping the new ranks warm until they join.
int Controller::GrowWanted() const {
  // A rank cut off by a partition holds its room: it rejoins when its paths heal.
  int want = target_ - Placed() - static_cast<int>(joining_.size() + cut_off_.size());
  return want > 0 && absl::Now() >= grow_after_ ? want : 0;
}

void Controller::MaybeGrow() {
  int want = GrowWanted();
  if (want <= 0) return;
  grow_after_ = absl::InfiniteFuture();  // until the next resource event
  auto nodes = gcs_->GetAllNodes(true);
  if (!nodes.ok()) return;
  int fits = 0;
  std::vector<std::string> allowed = AllowedNodeIds(*nodes);
  for (const auto& n : *nodes) {
    if (std::find(allowed.begin(), allowed.end(), n.node_id()) == allowed.end()) continue;
    Resources available = rpc::FromProto(n.available());
    Resources need;
    for (const auto& [k, v] : spec_.resources) need.Set(k, v);
    while (fits < want && available.Contains(need) && !need.Empty()) {
      available -= need;
      ++fits;
    }
  }
  for (int i = 0; i < fits; ++i) {
    Member m = Spawn(-1, spec_.resources.count("memory") ? spec_.resources.at("memory") : 0, {},
                     "scale out");
    if (!m.actor_id.empty()) joining_.push_back(std::move(m));
  }
  if (fits > 0) Event("scaling_out", absl::StrCat("starting ", fits, " rank(s) toward ", target_));
}

// Applies a scale request taken from the inbox (elastic/job_keys.h says its form).
void Controller::TakeRequests() {
  TakeInbox();
  std::string request;
  request.swap(scale_request_);
  if (request.empty()) return;
  auto parsed = ParseScaleRequest(request, static_cast<int>(members_.size()), spec_);
  if (!parsed.ok()) {
    spdlog::warn("job {}: {}", job_id_, parsed.status().message());
    return;
  }
  scale_in_ranks_ = parsed->leaving;
  if (parsed->nodes) SetAllowedNodes(*parsed->nodes);
  int clamped = parsed->replicas;
  LoopEvent scaling(LoopEvent::Kind::kScaleRequested, static_cast<int>(members_.size()));
  scaling.asked = parsed->asked;
  scaling.replicas = clamped;
  scaling.leaving = scale_in_ranks_;
  Apply(scaling);
  timeline_.Supersede(rpc::FAULT_SCALE);
  timeline_.Open(rpc::FAULT_SCALE,
                 absl::StrCat("scale to ", clamped, " from ", members_.size(), " ranks"),
                 absl::Now(), absl::Now(), static_cast<int>(members_.size()), clamped);
  requested_ = clamped;
  target_ = clamped;
  ceiling_ = std::max(clamped, ceiling_);
  grow_after_ = absl::Now();
}

void Controller::WaitForJoiners(int want, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (static_cast<int>(members_.size()) + ReadyJoiners() < want && absl::Now() < deadline &&
         !failed_ && !StopRequested()) {
    absl::SleepFor(kTimeouts.poll);
    ExpireJoiners();
    if (joining_.empty()) break;
  }
}

int Controller::ReadyJoiners() {
  int n = 0;
  for (auto& j : joining_) n += j.setup.Ready() ? 1 : 0;
  return n;
}

// Finds which members are dead (those in `suspects`, plus any the GCS reports dead),
// removes them, and applies the policies.
void Controller::RemoveDead(const std::vector<size_t>& suspects, bool only_confirmed) {
  std::set<size_t> check(suspects.begin(), suspects.end());
  std::set<size_t> called_dead;  // by the GCS, read once here
  for (size_t r = 0; r < members_.size(); ++r) {
    if (ActorState(members_[r].actor_id).state() == rpc::ACTOR_DEAD) called_dead.insert(r);
  }
  check.insert(called_dead.begin(), called_dead.end());
  std::vector<size_t> dead;
  if (only_confirmed) {
    // Also a rank killed for hanging (its death may not have reached the GCS yet), and one
    // whose Reconfigure lost its connection, confirmed as after a failed step (a frozen
    // process: the GCS calls it alive, and each try to form the epoch would fail on it).
    std::vector<size_t> unreachable;
    for (size_t r : check) {
      const std::string& id = members_[r].actor_id;
      if (hung_.count(id) > 0 || called_dead.count(r) > 0) {
        dead.push_back(r);
      } else if (unreachable_.count(id) > 0) {
        unreachable.push_back(r);
      }
    }
    for (size_t r : ConfirmDeaths(unreachable)) dead.push_back(r);
    std::sort(dead.begin(), dead.end());
  } else {
    dead = ConfirmDeaths(std::vector<size_t>(check.begin(), check.end()));
  }
  int world_before = static_cast<int>(members_.size());
  std::vector<Member> gone;
  for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
    gone.push_back(members_[*it]);
    members_.erase(members_.begin() + static_cast<long>(*it));
  }
  for (const auto& m : gone)
    HandleDeath(m, AwaitDead(m.actor_id, kTimeouts.death_record), world_before);
  PublishStatus();
}

namespace {

// A rank's answer to TrainerClient::Reach about `n` addresses, waiting up to `wait` for it:
// '0' for every address when it did not answer (in time) or answered something else.
std::string ReachAnswer(const ObjectRef<std::string>& ref, size_t n, absl::Duration wait) {
  auto answer = Get(ref, std::max(wait, absl::ZeroDuration()));
  return answer.ok() && answer->size() == n ? *answer : std::string(n, '0');
}

}  // namespace

std::vector<std::vector<bool>> Controller::Reach(const std::vector<Member*>& ranks,
                                                 const std::vector<std::string>& targets) {
  std::vector<ObjectRef<std::string>> refs;
  for (Member* m : ranks) {
    refs.push_back(m != nullptr ? m->trainer().Reach(targets) : ObjectRef<std::string>());
  }
  absl::Time deadline = absl::Now() + kTimeouts.reach;
  std::vector<std::vector<bool>> out(ranks.size(), std::vector<bool>(targets.size(), false));
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == nullptr) continue;
    std::string answer = ReachAnswer(refs[i], targets.size(), deadline - absl::Now());
    for (size_t j = 0; j < targets.size(); ++j) out[i][j] = answer[j] == '1';
  }
  return out;
}

bool Controller::LeaveOutTheCutOff() {
  size_t n = members_.size();
  if (n < 2) return false;
  std::vector<Member*> ranks;
  std::vector<std::string> addresses;
  for (auto& m : members_) {
    ranks.push_back(&m);
    addresses.push_back(ActorState(m.actor_id).worker_address());
  }
  // Members this host cannot reach at all are not asked (their answers would not come).
  std::vector<Knock> knocks = KnockTcp(addresses, kTimeouts.probe_knock);
  std::vector<Member*> askable;
  for (size_t r = 0; r < n; ++r)
    askable.push_back(knocks[r] == Knock::kSilent ? nullptr : ranks[r]);
  auto reach = Reach(askable, addresses);
  // Both ways: a collective needs each pair's path to carry traffic both ways.
  auto pair = [&](size_t a, size_t b) { return reach[a][b] && reach[b][a]; };
  std::vector<std::string> cut_pairs;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      if (!pair(a, b)) cut_pairs.push_back(absl::StrCat(a, "-", b));
    }
  }
  if (cut_pairs.empty()) return false;
  // The largest set whose members all reach each other, found greedily: the member that
  // misses the most of the others leaves first, the highest rank of a tie (rank 0 holds the
  // state the others catch up from), until the rest reach each other.
  std::vector<size_t> keep(n);
  std::iota(keep.begin(), keep.end(), 0);
  while (keep.size() > 1) {
    size_t worst = n;
    int worst_missing = 0;
    for (size_t a : keep) {
      int missing = 0;
      for (size_t b : keep) missing += a != b && !pair(a, b) ? 1 : 0;
      if (missing > 0 && missing >= worst_missing) {
        worst = a;
        worst_missing = missing;
      }
    }
    if (worst == n) break;
    keep.erase(std::find(keep.begin(), keep.end(), worst));
  }
  std::vector<Member> staying;
  std::vector<std::string> left;
  for (size_t r = 0; r < n; ++r) {
    if (std::find(keep.begin(), keep.end(), r) != keep.end()) {
      staying.push_back(std::move(members_[r]));
      continue;
    }
    left.push_back(absl::StrCat(r, " (node ", ShortId(members_[r].node_id), ")"));
    cut_off_.push_back(std::move(members_[r]));
  }
  members_ = std::move(staying);
  cut_off_checked_ = absl::Now();
  Event("partition",
        absl::StrCat("ranks that cannot reach each other while the GCS sees them all (pairs ",
                     absl::StrJoin(cut_pairs, ", "), "): rank(s) ", absl::StrJoin(left, ", "),
                     " left out; the other ", members_.size(),
                     " go on, and the left-out rejoin once they reach every member"));
  return true;
}

bool Controller::RejoinDue() const {
  if (cut_off_.empty()) return false;
  if (!rejoin_) return absl::Now() - cut_off_checked_ >= kTimeouts.rejoin_check;
  if (absl::Now() - rejoin_->asked >= kTimeouts.reach) return true;
  for (const auto& r : rejoin_->out_in) {
    if (!r.Ready()) return false;
  }
  for (const auto& r : rejoin_->in_out) {
    if (!r.Ready()) return false;
  }
  return true;
}

void Controller::RejoinHealed(std::vector<Member>* ready) {
  if (cut_off_.empty() || members_.empty()) {
    rejoin_.reset();
    return;
  }
  std::vector<std::string> inside, outside;
  for (auto& m : members_) inside.push_back(m.actor_id);
  for (auto& m : cut_off_) outside.push_back(m.actor_id);
  if (!rejoin_) {
    if (absl::Now() - cut_off_checked_ < kTimeouts.rejoin_check) return;
    cut_off_checked_ = absl::Now();
    // A cut-off rank that died meanwhile is handled as any lost rank (its policy replaces it).
    std::vector<std::string> outside_at;
    for (auto it = cut_off_.begin(); it != cut_off_.end();) {
      rpc::ActorInfo info = ActorState(it->actor_id);
      if (info.state() != rpc::ACTOR_DEAD) {
        outside_at.push_back(info.worker_address());
        ++it;
        continue;
      }
      Member dead = std::move(*it);
      it = cut_off_.erase(it);
      HandleDeath(dead, info, /*world_before=*/-1);
    }
    if (cut_off_.empty()) return;
    outside.clear();
    for (auto& m : cut_off_) outside.push_back(m.actor_id);
    std::vector<std::string> inside_at;
    for (auto& m : members_) inside_at.push_back(ActorState(m.actor_id).worker_address());
    RejoinCheck check;
    for (auto& m : cut_off_) check.out_in.push_back(m.trainer().Reach(inside_at));
    for (auto& m : members_) check.in_out.push_back(m.trainer().Reach(outside_at));
    check.outside = outside;
    check.inside = inside;
    check.asked = absl::Now();
    rejoin_ = std::move(check);
    return;
  }
  if (!RejoinDue()) return;
  RejoinCheck check = std::move(*rejoin_);
  rejoin_.reset();
  if (check.inside != inside || check.outside != outside) return;  // asked of others: again
  // Ready ones only: the wait for the rest is over (RejoinDue).
  auto answers = [](const std::vector<ObjectRef<std::string>>& refs, size_t n) {
    std::vector<std::string> out;
    for (const auto& r : refs) {
      out.push_back(r.Ready() ? ReachAnswer(r, n, absl::ZeroDuration()) : std::string(n, '0'));
    }
    return out;
  };
  std::vector<std::string> out_in = answers(check.out_in, inside.size());
  std::vector<std::string> in_out = answers(check.in_out, outside.size());
  for (size_t c = cut_off_.size(); c-- > 0;) {
    bool healed = true;
    for (size_t m = 0; m < members_.size(); ++m) {
      healed &= out_in[c][m] == '1' && in_out[m][c] == '1';
    }
    if (!healed) continue;
    Member back = std::move(cut_off_[c]);
    cut_off_.erase(cut_off_.begin() + static_cast<std::ptrdiff_t>(c));
    Event("partition_healed",
          absl::StrCat("rank ", ShortId(back.actor_id), " on node ", ShortId(back.node_id),
                       " reaches every member again: it rejoins"));
    back.why = "its paths healed";
    ready->push_back(std::move(back));
  }
}

}  // namespace phalanx::elastic
