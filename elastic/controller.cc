#include "elastic/controller.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/describe.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/system.h"
#include "elastic/controller_internal.h"
#include "worker/core_worker.h"

namespace phalanx::elastic {

// Starts at once: a controller restarted by the runtime carries on by itself.
Controller::Controller(std::string job_id, std::string spec_yaml)
    : job_id_(std::move(job_id)),
      spec_yaml_(std::move(spec_yaml)),
      recorder_(job_id_, kTimeouts.writer_period, kTimeouts.record_finish, &inbox_) {
  Start();
}

Controller::~Controller() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (lease_thread_.joinable()) lease_thread_.join();
}

bool Controller::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return true;
  started_ = true;
  thread_ = std::thread([this] { Main(); });
  return true;
}

// Renews this controller's lease through the GCS for as long as the actor lives (also after
// the job ended: an expired lease would start a controller again). Each renewal takes the
// controller's lock, so a controller deadlocked on it stops renewing too; the GCS kills a
// stopped one after `lease`, and one whose process can run (slow, or deadlocked) after
// `running`. A renewal that says this attempt was replaced (a controller on a host that came
// back) ends the process: two controllers must never drive one job.
void Controller::LeaseLoop(worker::HostedActor me, absl::Duration lease, absl::Duration running) {
  absl::Duration period = lease / 4;
  absl::Time last_ok = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) return;
    }
    auto stale = gcs_->RenewActorLease(me.actor_id, me.attempt, lease, running);
    if (stale.ok() && *stale) {
      spdlog::error("job {}: this controller (attempt {}) was replaced; exiting", job_id_,
                    me.attempt);
      spdlog::default_logger()->flush();
      ::kill(::getpid(), SIGKILL);
    }
    if (stale.ok()) {
      last_ok = absl::Now();
    } else if (absl::Now() - last_ok > lease) {
      spdlog::warn("job {}: cannot renew the controller's lease for {}: {}", job_id_,
                   absl::FormatDuration(absl::Now() - last_ok), stale.status());
    }
  }
}

// A member's actor died (its process, or its node): the survivors' step in flight cannot
// finish, and on a host that vanished their collective would wait for its timeout. Abort
// it now; the step loop then removes the dead and forms the next epoch.
void Controller::OnActorMessage(const rpc::ActorInfo& actor) {
  if (actor.state() != rpc::ACTOR_DEAD) return;
  std::vector<Handle> survivors;
  {
    absl::MutexLock lock(&mu_);
    if (!live_members_.count(actor.actor_id()) ||
        !announced_dead_.insert(actor.actor_id()).second) {
      return;
    }
    for (const auto& [id, handle] : live_members_) {
      if (!announced_dead_.count(id)) survivors.push_back(handle);
    }
  }
  Signal died;
  died.kind = Signal::Kind::kRankDied;
  died.actor_id = actor.actor_id();
  inbox_.Post(std::move(died));
  std::string reason = absl::StrCat("rank actor ", ShortId(actor.actor_id()), " died (",
                                    rpc::DescribeCause(actor.death_cause()), ")");
  spdlog::info("job {}: {}: aborting the step on {} survivor(s)", job_id_, reason,
               survivors.size());
  for (auto& h : survivors) TrainerClient(h).Abort(reason);
}

void Controller::OnMessage(const rpc::PubMessage& m) {
  if (m.has_actor()) {
    OnActorMessage(m.actor());
    return;
  }
  if (m.has_resource()) {
    auto kind = m.resource().kind();
    if (kind == rpc::ResourceEvent::NODE_ADDED || kind == rpc::ResourceEvent::RESOURCES_CHANGED) {
      Signal changed;
      changed.kind = kind == rpc::ResourceEvent::NODE_ADDED ? Signal::Kind::kNodeAdded
                                                            : Signal::Kind::kResourcesChanged;
      inbox_.Post(std::move(changed));
    }
  }
}

void Controller::Main() {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) {
    spdlog::error("the controller has no runtime");
    return;
  }
  gcs_ = &cw->gcs();
  auto spec = ParseJobSpec(spec_yaml_);
  auto existing = gcs_->GetJob(job_id_);
  if (existing.ok() &&
      (existing->state() == rpc::JOB_SUCCEEDED || existing->state() == rpc::JOB_FAILED ||
       existing->state() == rpc::JOB_STOPPED)) {
    // Started again after its job ended (its host died before it could go): nothing to do,
    // and nothing to start -- a reservation made now would hold a host for no one.
    spdlog::info("job {} ended already ({}): its restarted controller leaves", job_id_,
                 rpc::JobState_Name(existing->state()));
    Leave();
    return;
  }
  rpc::JobInfo job = existing.ok() ? *existing : rpc::JobInfo();
  // A previous incarnation of this controller died: Train() adopts the ranks it left. The
  // attempt number says so even when it died before it could record the job as running.
  auto me = worker::CurrentHostedActor();
  restarted_ = job.state() == rpc::JOB_RUNNING || (me && me->attempt > 0);
  previous_ = job.elastic();
  job.set_job_id(job_id_);
  job.set_kind("elastic");
  job.set_spec_yaml(spec_yaml_);
  if (job.start_time_ms() == 0) job.set_start_time_ms(NowMs());
  job.set_state(rpc::JOB_RUNNING);
  recorder_.Start(gcs_, std::move(job));
  if (!spec.ok()) {
    Condition("Failed", "InvalidSpec", std::string(spec.status().message()));
    recorder_.SetState(rpc::JOB_FAILED, std::string(spec.status().message()), 1);
    recorder_.Finish();
    return;
  }
  spec_ = *spec;
  budget_ = RestartBudget(spec_.restart_limit, absl::Seconds(spec_.restart_time_limit_s));
  recorder_.Update([&](rpc::JobInfo* job) { job->set_name(spec_.name); });
  if (auto log = spec_.config.find("controllerStepLog"); log != spec_.config.end()) {
    step_log_ = std::make_unique<std::ofstream>(log->second, std::ios::app);
  }
  target_ = spec_.max_replicas;
  allowed_nodes_ = spec_.nodes;
  if (auto me = worker::CurrentHostedActor()) {
    absl::Duration lease = absl::Seconds(spec_.ControllerLeaseSeconds());
    absl::Duration running = absl::Seconds(spec_.ControllerRunningLeaseSeconds());
    lease_thread_ =
        std::thread([this, me = *me, lease, running] { LeaseLoop(me, lease, running); });
  }
  auto subscription = gcs_->Subscribe({rpc::RESOURCES, rpc::ACTOR},
                                      [this](const rpc::PubMessage& m) { OnMessage(m); });
  // Scale and stop requests arrive as they are written (the writer's poll is the fallback).
  auto requests =
      gcs_->SubscribeKeys({rpc::KV}, recorder_.RequestKeys(), [this](const rpc::PubMessage& m) {
        if (m.has_kv()) recorder_.OnRequest(m.kv());
      });
  Train();
  requests.reset();
  subscription.reset();
  // The ranks and their reservation go with the job.
  for (auto& m : members_) Kill(m.handle).IgnoreError();
  for (auto& m : joining_) Kill(m.handle).IgnoreError();
  for (auto& m : cut_off_) Kill(m.handle).IgnoreError();
  if (!pg_.id().IsNil()) RemovePlacementGroup(pg_).IgnoreError();
  PublishStatus();
  recorder_.Finish();
  Leave();
}

// The job is over (its record says how): this controller's actor ends for good, so that it
// is not started again when its host dies.
void Controller::Leave() {
  if (auto me = worker::CurrentHostedActor()) {
    absl::Status killed = gcs_->KillActor(me->actor_id, /*no_restart=*/true);
    if (!killed.ok()) spdlog::warn("job {}: the controller cannot end: {}", job_id_, killed);
  }
}

// The job's first start: reserves the ranks' resources (one placement group) and starts
// them. False (and the job Failed) when they cannot be placed or started.
bool Controller::PlaceAndStart() {
  Condition("Pending", "Placing", absl::StrCat(spec_.replicas, " ranks with ", [&] {
              std::vector<std::string> r;
              for (const auto& [k, v] : spec_.resources)
                r.push_back(absl::StrCat(k, " ", FormatAmount(k, v)));
              return absl::StrJoin(r, ", ");
            }()));
  std::vector<std::map<std::string, double>> bundles(spec_.replicas, spec_.resources);
  // A job limited to some nodes places its ranks one by one on them (Spawn): a placement
  // group's bundles could land anywhere.
  bool use_pg = !spec_.resources.empty() && allowed_nodes_.empty();
  if (use_pg && !Reserve(bundles)) return false;
  Condition("Creating", "StartingRanks", absl::StrCat(spec_.replicas, " ranks"));
  double memory = spec_.resources.count("memory") ? spec_.resources.at("memory") : 0;
  for (int r = 0; r < spec_.replicas; ++r) {
    Member m = Spawn(use_pg ? r : -1, memory, {}, "initial");
    if (m.actor_id.empty()) {
      Condition("Failed", "CannotStart", "a rank could not be created");
      recorder_.SetState(rpc::JOB_FAILED, "a rank could not be created", 1);
      return false;
    }
    joining_.push_back(std::move(m));
  }
  // Wait until the initial ranks are up (or enough of them).
  WaitForJoiners(spec_.replicas, absl::Seconds(spec_.below_min_timeout_s));
  if (StopRequested()) {
    StoppedWhile("starting its ranks");
    return false;
  }
  target_ = spec_.replicas;  // grow beyond only when resources appear
  return true;
}

// Reserves the ranks' bundles in one placement group and waits until it is placed; false
// (the job Failed or Stopped) when it cannot be, within phases.placeSeconds.
bool Controller::Reserve(const std::vector<std::map<std::string, double>>& bundles) {
  // The spec's placementStrategy was checked by job_spec.cc; an error here names it too.
  auto strategy = ParsePlacementStrategy(spec_.placement_strategy, "placementStrategy");
  auto pg = strategy.ok() ? CreatePlacementGroup(bundles, *strategy, GroupName())
                          : absl::StatusOr<PlacementGroup>(strategy.status());
  // A job that ran before (its ranks were lost with their nodes) waits for nodes to come
  // back, up to phases.placeSeconds (failPolicy.belowMinTimeoutSeconds by default), instead
  // of failing because the nodes left are too small; a new job is told at once.
  absl::Time began = absl::Now();
  absl::Time deadline = began + absl::Seconds(spec_.PlaceSeconds());
  bool waiting = false;
  while (had_members_ && strategy.ok() && !pg.ok() && absl::IsFailedPrecondition(pg.status()) &&
         absl::Now() < deadline) {
    if (!waiting) {
      Condition("Pending", "WaitingForNodes",
                absl::StrFormat("%s; waiting up to %g s (phases.placeSeconds) for nodes to "
                                "come back",
                                pg.status().message(), spec_.PlaceSeconds()));
      waiting = true;
    }
    // Asked again each second; a stop is seen within stop_check.
    for (absl::Time next = absl::Now() + absl::Seconds(1); absl::Now() < next;) {
      absl::SleepFor(kTimeouts.stop_check);
      if (StopRequested()) {
        StoppedWhile("waiting for nodes to place its ranks");
        return false;
      }
    }
    pg = CreatePlacementGroup(bundles, *strategy, GroupName());
  }
  if (!pg.ok()) {
    Condition("Failed", "Unplaceable", std::string(pg.status().message()));
    recorder_.SetState(rpc::JOB_FAILED, std::string(pg.status().message()), 1);
    return false;
  }
  pg_ = *pg;
  PublishStatus();  // the record names the reservation (a restarted controller frees it)
  // In slices, so that `phalanx job stop` ends a job still waiting for room.
  absl::Status ready = absl::DeadlineExceededError("");
  while (true) {
    absl::Duration left = deadline - absl::Now();
    ready = pg_.Wait(std::max(std::min(left, kTimeouts.stop_check), absl::ZeroDuration()));
    if (ready.ok() || !absl::IsDeadlineExceeded(ready) || left <= kTimeouts.stop_check) break;
    if (StopRequested()) {
      StoppedWhile("placing its ranks");
      return false;
    }
  }
  if (!ready.ok()) {
    std::string why(ready.message());
    if (absl::IsDeadlineExceeded(ready)) {
      auto group = gcs_->GetPlacementGroup(pg_.id().Hex());
      why = absl::StrFormat(
          "placing the ranks did not end within %.1f s (phases.placeSeconds: %g): placement "
          "group %s is %s",
          absl::ToDoubleSeconds(absl::Now() - began), spec_.PlaceSeconds(), ShortId(pg_.id().Hex()),
          group.ok() && !group->pending_reason().empty() ? group->pending_reason() : "pending");
      Event("phase_timeout", why);
    }
    Condition("Failed", "Unplaceable", why);
    recorder_.SetState(rpc::JOB_FAILED, why, 1);
    return false;
  }
  return true;
}

void Controller::StoppedWhile(const std::string& phase) {
  std::string why = absl::StrCat("stopped on request while ", phase);
  Condition("Failed", "Stopped", why);
  recorder_.SetState(rpc::JOB_STOPPED, why, 1);
}

// A previous incarnation of this controller died (its process was killed, or its node):
// the ranks it left still hold their state in memory. The live ones are adopted, the lost
// ones replaced, and the job goes on from the newest step they hold, without a checkpoint.
// False when no rank is left to adopt (the job then restarts from its last checkpoint).
bool Controller::Adopt(const rpc::ElasticStatus& previous) {
  pg_ = PlacementGroup(PlacementGroupId(previous.placement_group_id()));
  if (previous.allowed_nodes_size() > 0) {  // a scale request's, or the spec's
    allowed_nodes_.assign(previous.allowed_nodes().begin(), previous.allowed_nodes().end());
  }
  std::vector<Member> alive, lost;
  std::set<std::string> known;
  for (const auto& pm : previous.members()) {
    Member m;
    m.actor_id = pm.actor_id();
    m.handle = Handle(ActorId(pm.actor_id()), spec_.trainer);
    m.node_id = pm.node_id();
    m.memory = pm.memory_bytes();
    m.bundle = pm.bundle();
    known.insert(m.actor_id);
    (ActorState(m.actor_id).state() == rpc::ACTOR_ALIVE ? alive : lost).push_back(m);
  }
  KillStrays(known);
  // The steps the dead controller left running end (their collectives abort), then each
  // rank says the newest step it holds.
  for (auto& m : alive)
    m.trainer().Abort("the job's controller was restarted and adopts the ranks");
  std::vector<ObjectRef<std::string>> held_refs;
  for (auto& m : alive) {
    held_refs.push_back(m.trainer().Query(trainer_query::kHeldStep));
  }
  std::vector<std::pair<int64_t, Member>> held;
  for (size_t i = 0; i < alive.size(); ++i) {
    auto h = Get(held_refs[i], absl::Seconds(spec_.hang_timeout_s) + kTimeouts.adopt_beyond_hang);
    int64_t step = -1;
    if (h.ok() && absl::SimpleAtoi(*h, &step) && step >= 0) {
      held.emplace_back(step, alive[i]);
    } else {
      Kill(alive[i].handle).IgnoreError();
      lost.push_back(alive[i]);
    }
  }
  if (held.empty()) {
    Event("controller_restarted",
          absl::StrCat("the previous controller died and none of its ", lost.size(),
                       " ranks is left: the job resumes from its last checkpoint"));
    for (auto& m : lost) Kill(m.handle).IgnoreError();
    had_members_ = true;
    return false;
  }
  // Rank 0 holds the newest step: the others catch up from it when the epoch forms.
  std::stable_sort(held.begin(), held.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (auto& [step, m] : held) members_.push_back(std::move(m));
  agreed_ = held.front().first;
  // Epochs the dead controller began but never recorded are skipped.
  epoch_ = previous.epoch() + 10;
  restarts_ = previous.restarts();
  restarts_by_cause_ = {previous.restarts_by_cause().begin(), previous.restarts_by_cause().end()};
  timeline_.Restore(previous);
  last_checkpoint_ = previous.last_checkpoint_step();
  data_epoch_ = previous.data_epoch();
  target_ = std::max(previous.target_replicas(), spec_.min_replicas);
  for (const auto& m : lost) {
    Member replacement =
        Spawn(m.bundle, m.memory, {},
              absl::StrCat("replaces ", ShortId(m.actor_id), ", lost with the controller"));
    if (!replacement.actor_id.empty()) joining_.push_back(std::move(replacement));
  }
  Event("controller_restarted",
        absl::StrCat("the previous controller died; adopted its ", members_.size(),
                     " live ranks at step ", agreed_,
                     lost.empty() ? "" : absl::StrCat(", replacing ", lost.size())));
  return true;
}

void Controller::RemoveReservationsNamed(const std::string& name) {
  auto groups = gcs_->ListPlacementGroups();
  if (!groups.ok()) return;
  for (const auto& g : *groups) {
    if (g.name() == name && g.state() != rpc::PG_REMOVED) {
      RemovePlacementGroup(PlacementGroup(PlacementGroupId(g.placement_group_id()))).IgnoreError();
    }
  }
}

// Kills this job's trainer actors that are not in `keep`: those a dead controller was
// starting or retiring (they are not in its record).
void Controller::KillStrays(const std::set<std::string>& keep) {
  auto actors = gcs_->ListActors(job_id_);
  if (!actors.ok()) return;
  for (const auto& a : *actors) {
    if (a.class_name() == spec_.trainer && a.state() != rpc::ACTOR_DEAD &&
        !keep.count(a.actor_id())) {
      gcs_->KillActor(a.actor_id(), true).IgnoreError();
    }
  }
}

void Controller::Train() {
  if (!Begin()) return;
  // Ranks starting, or adopted ones (which form an epoch first).
  phase_ = members_.empty() ? JobPhase::kStarting : JobPhase::kForming;
  run_start_ = absl::Now();
  run_start_step_ = 0;
  need_epoch_ = true;
  grow_after_ = absl::InfiniteFuture();
  // Each turn: take signals, start ranks when there are none, keep at least minReplicas,
  // form an epoch when needed, then run a step; a part may end the turn early.
  while (!failed_) {
    Turn turn = TakeSignals();
    if (turn == Turn::kOn && members_.empty()) turn = StartFromNothing();
    if (turn == Turn::kOn) turn = KeepMinReplicas();
    if (turn == Turn::kOn) turn = EnsureEpoch();
    if (turn == Turn::kOn) turn = StepOnce();
    if (turn == Turn::kStop) return;
    if (turn == Turn::kEnd) break;
  }
  Finish();
}

void Controller::Apply(const LoopEvent& event) {
  Transition t = Next(spec_, phase_, event);
  const JobPhase before = phase_;
  phase_ = t.next;
  if (t.next != before) {
    spdlog::info("job {}: {} --{}--> {}", job_id_, JobPhaseName(before), LoopEventName(event.kind),
                 JobPhaseName(t.next));
  }
  if (!t.event_kind.empty()) Event(t.event_kind, t.event_message);
  if (!t.condition_type.empty()) {
    Condition(t.condition_type, t.condition_reason, t.condition_message);
  }
  // Only the transition into Failed says why (a final phase's own transitions say nothing).
  if (t.next == JobPhase::kFailed && before != JobPhase::kFailed) Fail(t.failure);
}

bool Controller::Begin() {
  bool adopted = false;
  if (!previous_.members().empty()) {
    adopted = Adopt(previous_);
  } else {
    KillStrays({});  // none on a first start
    if (restarted_) {
      Event("controller_restarted",
            "the previous controller died before the first step: starting the ranks again");
    }
  }
  if (!adopted) {
    // A reservation a dead controller made and did not fill: ours replaces it. It may have
    // died before recording it, so every live one of the job's name goes.
    if (!previous_.placement_group_id().empty()) {
      RemovePlacementGroup(PlacementGroup(PlacementGroupId(previous_.placement_group_id())))
          .IgnoreError();
    }
    if (restarted_) RemoveReservationsNamed(GroupName());
    pg_ = PlacementGroup();
    if (!PlaceAndStart()) return false;
  }
  return true;
}

// A resource change (a node joined: growth may follow) and a stop request.
Controller::Turn Controller::TakeSignals() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return Turn::kStop;
  }
  TakeInbox();
  if (resource_event_) {
    resource_event_ = false;
    // A new node lifts a ceiling left by a shrink; freed resources alone do not (the
    // resources a shrunk rank freed are not a reason to bring it back).
    if (node_added_) ceiling_ = spec_.max_replicas;
    node_added_ = false;
    // Grow toward maxReplicas (or the requested size) once things settle.
    target_ = std::min(requested_ > 0 ? requested_ : spec_.max_replicas, ceiling_);
    target_ = std::max(target_, static_cast<int>(members_.size()));
    grow_after_ = absl::Now() + absl::Seconds(spec_.scale_out_debounce_s);
  }
  if (stop_requested_) {
    Apply(LoopEvent(LoopEvent::Kind::kStopRequested));
    recorder_.SetState(rpc::JOB_STOPPED, "stopped on request", 1);
    return Turn::kStop;
  }
  return Turn::kOn;
}

// No rank left (or none yet): wait for ranks; once they are up, start from the last
// checkpoint (or from the start).
Controller::Turn Controller::StartFromNothing() {
  // The wait is timed from when the job had no rank (a replacement that failed to start
  // ends one wait early; the next waits for the rest of the time).
  if (below_min_since_ == absl::InfiniteFuture()) below_min_since_ = absl::Now();
  absl::Time waited_from = below_min_since_;
  absl::Duration bound = absl::Seconds(spec_.below_min_timeout_s);
  WaitForJoiners(spec_.min_replicas, BelowMinWait(waited_from + bound));
  if (StopRequested()) return Turn::kNextTurn;  // the next turn ends it
  // Those that failed to start go (their policy starts others, or fails the job).
  DropFailedJoiners();
  if (failed_) return Turn::kEnd;
  if (ReadyJoiners() < spec_.min_replicas && !joining_.empty() &&
      (absl::Now() - waited_from < bound || StartingEnough())) {
    return Turn::kNextTurn;  // replacements are coming
  }
  if (ReadyJoiners() < spec_.min_replicas) {
    LoopEvent e(LoopEvent::Kind::kRanksShort, ReadyJoiners());
    e.waited_s = absl::ToDoubleSeconds(absl::Now() - waited_from);
    Apply(e);
    return Turn::kEnd;
  }
  // A last call (torchrun's): the other ranks already placed get scaleOutDebounceSeconds
  // more to be ready, so that the first epoch has them. Admitted later, each would cost a
  // re-form, which waits for the first step: on a busy machine, for the others' whole setup
  // (the program's imports, its data), and then its own.
  WaitForJoiners(std::min(target_, MembersAndPlacedJoiners()),
                 absl::Seconds(spec_.scale_out_debounce_s));
  if (StopRequested()) return Turn::kNextTurn;
  DropFailedJoiners();
  if (failed_) return Turn::kEnd;
  for (auto it = joining_.begin();
       it != joining_.end() && static_cast<int>(members_.size()) < target_;) {
    if (it->setup.Ready() && Get(it->setup).ok()) {
      members_.push_back(std::move(*it));
      it = joining_.erase(it);
    } else {
      ++it;
    }
  }
  if (members_.empty()) return Turn::kNextTurn;
  // If rank 0 dies loading it, the epoch below fails without it and the next rank 0 loads.
  RestartFromCheckpoint(had_members_ ? "every rank was lost" : "");
  need_epoch_ = true;
  Apply(LoopEvent(LoopEvent::Kind::kRanksUp, static_cast<int>(members_.size())));
  return Turn::kOn;
}

// belowMinTimeoutSeconds is for ranks that find no room. Ranks placed on a node and still
// setting up (a busy machine may take minutes to start a process and import torch) are
// bounded by phases.startSeconds each (ExpireJoiners restarts one that overruns it), so the
// job waits for them past the deadline when they would bring it back to minReplicas.
bool Controller::StartingEnough() { return MembersAndPlacedJoiners() >= spec_.min_replicas; }

int Controller::MembersAndPlacedJoiners() {
  int n = static_cast<int>(members_.size());
  for (const auto& j : joining_) {
    n += j.setup.Ready() || j.placed != absl::InfiniteFuture() ? 1 : 0;
  }
  return n;
}

absl::Duration Controller::BelowMinWait(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration() && StartingEnough()) return kTimeouts.joiner_look;
  return left;
}

// The boundary of the step (what changed), and the wait for replacements below minReplicas.
Controller::Turn Controller::KeepMinReplicas() {
  // With a step out ahead, the boundary waits for the next one (MayRunAhead sent it only
  // because nothing waited; what came since is taken once it is answered).
  Change change = ahead_.empty() ? Boundary() : Change::kNone;
  if (change == Change::kFormed) need_epoch_ = false;
  if (change == Change::kFailed) {
    // A member may have died as the epoch formed: the next try goes without those the GCS
    // calls dead (else each try waits out the group's timeout for them again).
    std::vector<size_t> all(members_.size());
    std::iota(all.begin(), all.end(), 0);
    RemoveDead(all, /*only_confirmed=*/true);
    need_epoch_ = true;
    Apply(LoopEvent(LoopEvent::Kind::kEpochFailed, static_cast<int>(members_.size())));
  }
  if (static_cast<int>(members_.size()) < spec_.min_replicas) {
    absl::Time now = absl::Now();
    if (below_min_since_ == absl::InfiniteFuture()) {
      below_min_since_ = now;
      Apply(LoopEvent(LoopEvent::Kind::kBelowMin, static_cast<int>(members_.size())));
    }
    absl::Time deadline = below_min_since_ + absl::Seconds(spec_.below_min_timeout_s);
    WaitForJoiners(spec_.min_replicas, BelowMinWait(deadline));
    Boundary();
    if (static_cast<int>(members_.size()) < spec_.min_replicas) {
      // The timer runs from when the job went below, not from this wait: a replacement that
      // failed to start ends a wait early, and the next one (its policy's) is still coming.
      if ((absl::Now() < deadline || StartingEnough()) && !failed_) return Turn::kNextTurn;
      LoopEvent e(LoopEvent::Kind::kBelowMinTimedOut, static_cast<int>(members_.size()));
      e.waited_s = absl::ToDoubleSeconds(absl::Now() - below_min_since_);
      Apply(e);
      return Turn::kEnd;
    }
    need_epoch_ = false;
    Apply(LoopEvent(LoopEvent::Kind::kBackToMin, static_cast<int>(members_.size())));
  }
  below_min_since_ = absl::InfiniteFuture();
  return Turn::kOn;
}

Controller::Turn Controller::EnsureEpoch() {
  if (need_epoch_) {
    if (!FormEpoch(epoch_ == 0 ? "start" : "recovery")) {
      std::vector<size_t> all(members_.size());
      std::iota(all.begin(), all.end(), 0);
      size_t alive = members_.size();
      RemoveDead(all, /*only_confirmed=*/true);
      // Every member alive, and still no epoch: some may not reach the others.
      if (members_.size() == alive && LeaveOutTheCutOff()) return Turn::kNextTurn;
      LoopEvent e(LoopEvent::Kind::kEpochFailed, static_cast<int>(members_.size()));
      e.failures_in_a_row = ++consecutive_failures_;
      e.error = last_phase_timeout_;
      Apply(e);
      return Turn::kNextTurn;
    }
    need_epoch_ = false;
  }
  return Turn::kOn;
}

Controller::Turn Controller::StepOnce() {
  had_members_ = true;
  if (!running_) {
    running_ = true;
    run_start_ = absl::Now();
    run_start_step_ = agreed_;
  }
  if ((spec_.TotalSteps() > 0 && agreed_ >= spec_.TotalSteps()) || trainer_done_) {
    Apply(LoopEvent(LoopEvent::Kind::kDone, static_cast<int>(members_.size())));
    return Turn::kEnd;
  }
  std::vector<size_t> lost;
  std::string error;
  std::vector<Metrics> results;
  int64_t ran = 0;
  if (RunStep(&ran, &lost, &error, &results)) {
    consecutive_failures_ = 0;
    last_phase_timeout_.clear();
    int64_t before = agreed_;
    agreed_ += ran;
    steps_per_call_ = ran;
    StepAgreed(results);
    if (step_log_) {
      // For benchmarks: when each step was agreed, and by how many ranks.
      int64_t now_ms = absl::ToUnixMillis(absl::Now());
      for (int64_t s = before + 1; s <= agreed_; ++s) {
        *step_log_ << s << " " << now_ms << " " << members_.size() << "\n";
      }
      step_log_->flush();
    }
    double elapsed = absl::ToDoubleSeconds(absl::Now() - run_start_);
    if (elapsed > 0) steps_per_second_ = static_cast<double>(agreed_ - run_start_step_) / elapsed;
    LoopEvent e(LoopEvent::Kind::kStepAgreed, static_cast<int>(members_.size()));
    e.step = agreed_;
    e.ran_before = before > 0;
    Apply(e);
    CheckpointIfDue();
    if (agreed_ / 10 != before / 10 || agreed_ == spec_.TotalSteps()) PublishStatus();
    return Turn::kNextTurn;
  }
  // The step failed: survivors go on without the dead at once (epoch + 1); the dead are
  // replaced by policy and join later.
  step_failed_ = std::min(step_failed_, absl::Now());
  size_t before = members_.size();
  RemoveDead(lost, /*only_confirmed=*/false);
  // Nobody died: the step may have failed because some members cannot reach others. The
  // largest set that reaches each other goes on; the others wait to rejoin.
  const bool partitioned = members_.size() == before && LeaveOutTheCutOff();
  const int lost_ranks = static_cast<int>(before - members_.size());
  // Nobody died and nobody is cut off, yet the step failed: counted (a bug fails the job).
  if (lost_ranks == 0 && !partitioned) ++consecutive_failures_;
  LoopEvent e(LoopEvent::Kind::kStepFailed, static_cast<int>(members_.size()));
  e.step = agreed_;
  e.lost = lost_ranks;
  e.cut_off = partitioned ? static_cast<int>(cut_off_.size()) : 0;
  e.failures_in_a_row = consecutive_failures_;
  e.error = error;
  Apply(e);
  need_epoch_ = true;
  return failed_ ? Turn::kEnd : Turn::kNextTurn;
}

// The job's end: failed, or succeeded with rank 0's results.
void Controller::Finish() {
  // A checkpoint rank 0 is still writing is part of the job's record (its final state, often).
  if (!failed_) CollectCheckpoint(/*wait=*/true);
  if (failed_) {
    Condition("Failed", "Failed", failure_);
    recorder_.SetState(rpc::JOB_FAILED, failure_, 1);
    return;
  }
  // What the trainer wants drivers to see (e.g. final weights), from rank 0.
  if (!members_.empty()) {
    auto results = Get(members_[0].trainer().Query(trainer_query::kResults), kTimeouts.results);
    if (results.ok()) {
      recorder_.Update([&](rpc::JobInfo* job) { job->mutable_elastic()->set_results(*results); });
    }
  }
  Condition(
      "Succeeded", "Completed",
      absl::StrCat(agreed_, " steps, final loss ", last_loss_, ", world size ", members_.size()));
  recorder_.SetState(rpc::JOB_SUCCEEDED, absl::StrCat("completed ", agreed_, " steps"), 0);
}

void RegisterController() {
  static internal::ActorRegistrar<Controller, std::string, std::string> registrar(
      "ElasticController");
  static internal::MethodRegistrar<Controller> start("ElasticController", "Start",
                                                     &Controller::Start);
  static internal::MethodRegistrar<Controller> describe("ElasticController", "Describe",
                                                        &Controller::Describe);
}

}  // namespace phalanx::elastic
