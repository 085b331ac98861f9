#include "gcs/actor_manager.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/describe.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/system.h"
#include "gcs/availability.h"

namespace phalanx::gcs {
namespace {

// The resource a blocked or idle task worker lends (LendActorResources).
constexpr char kCpuResource[] = "CPU";

bool Placed(const rpc::ActorInfo& a) {
  return !a.node_id().empty() &&
         (a.state() == rpc::ACTOR_CREATING || a.state() == rpc::ACTOR_ALIVE);
}

// An actor whose process ended before it was created this many times in a row is not started
// again: its program exits at once or does not host the class (CREATION_FAILED).
constexpr int kExitsBeforeCreated = 3;
// The wait before the first try again of an actor whose process ended before it was
// created; it doubles with each such end in a row (0.25 s, then 0.5 s, before the third).
constexpr absl::Duration kCreationRetryBackoff = absl::Milliseconds(250);

bool RestartsLeft(const rpc::ActorInfo& a) {
  return a.max_restarts() == -1 || a.num_restarts() < a.max_restarts();
}

placement::ActorRequest RequestFor(const rpc::ActorInfo& a) {
  placement::ActorRequest r;
  r.scheduling.resources = rpc::FromProto(a.resources());
  r.scheduling.strategy =
      placement::ParseStrategy(a.scheduling_strategy()).value_or(placement::Strategy::kDefault);
  r.scheduling.affinity_node_id = a.affinity_node_id();
  r.scheduling.affinity_soft = a.affinity_soft();
  r.scheduling.avoid_node_ids.assign(a.avoid_node_ids().begin(), a.avoid_node_ids().end());
  r.scheduling.allowed_node_ids.assign(a.allowed_node_ids().begin(), a.allowed_node_ids().end());
  r.placement_group_id = a.placement_group_id();
  r.bundle_index = a.placement_group_id().empty() ? -1 : a.bundle_index();
  return r;
}

}  // namespace

absl::Status ValidateActorSpec(const rpc::ActorInfo& spec) {
  if (spec.class_name().empty()) {
    return absl::InvalidArgumentError("actor: class_name is empty; name a registered class");
  }
  std::map<std::string, double> amounts(spec.resources().amounts().begin(),
                                        spec.resources().amounts().end());
  if (auto r = Resources::FromMap(amounts, absl::StrCat("actor ", spec.class_name())); !r.ok()) {
    return r.status();
  }
  if (spec.max_restarts() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor ", spec.class_name(), ": max_restarts is ", spec.max_restarts(),
                     "; use -1 (forever), 0 (never) or a positive count"));
  }
  if (spec.max_task_retries() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor ", spec.class_name(), ": max_task_retries is ", spec.max_task_retries(),
                     "; use -1 (forever), 0 (never) or a positive count"));
  }
  if (spec.max_concurrency() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", spec.class_name(),
                                                   ": max_concurrency is ", spec.max_concurrency(),
                                                   "; use 1 or more"));
  }
  auto strategy = placement::ParseStrategy(spec.scheduling_strategy());
  if (!strategy.ok()) return strategy.status();
  if (*strategy == placement::Strategy::kNodeAffinity && spec.affinity_node_id().empty()) {
    return absl::InvalidArgumentError(
        "actor: NODE_AFFINITY needs affinity_node_id (a node id from `phalanx status`)");
  }
  return absl::OkStatus();
}

GcsActorManager::GcsActorManager(Store* store, GcsPublisher* publisher, GcsNodeManager* nodes,
                                 NodeClientPool* node_clients,
                                 placement::ResourceScheduler* scheduler)
    : publisher_(publisher),
      nodes_(nodes),
      node_clients_(node_clients),
      scheduler_(scheduler),
      actors_(store, "actors") {
  publisher_->SetSnapshotProvider(rpc::ACTOR, [this](const auto& consume) {
    absl::MutexLock lock(&mu_);
    std::vector<rpc::PubMessage> out;
    for (const auto& [id, actor] : actors_.entries()) {
      rpc::PubMessage m;
      m.set_key(id);
      *m.mutable_actor() = actor;
      out.push_back(std::move(m));
    }
    consume(std::move(out));
  });
}

void GcsActorManager::SetPlacementGroupCheck(
    std::function<absl::Status(const std::string&, int, const Resources&)> check) {
  pg_check_ = std::move(check);
}

GcsActorManager::~GcsActorManager() = default;

void GcsActorManager::SaveLocked(const rpc::ActorInfo& actor, Effects* effects) {
  rpc::PubMessage m;
  m.set_channel(rpc::ACTOR);
  m.set_key(actor.actor_id());
  *m.mutable_actor() = actor;
  effects->writes.push_back(
      actors_.Put(actor.actor_id(), actor, [this, m = std::move(m)] { publisher_->Publish(m); }));
}

absl::Status GcsActorManager::Load() {
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    if (auto s = actors_.Load(); !s.ok()) return s;
    std::vector<rpc::ActorInfo> all;
    for (const auto& [id, actor] : actors_.entries()) all.push_back(actor);
    std::sort(all.begin(), all.end(),
              [](const auto& a, const auto& b) { return a.create_time_ms() < b.create_time_ms(); });
    for (const auto& actor : all) {
      if (actor.state() == rpc::ACTOR_DEAD) continue;
      if (Placed(actor)) {
        if (AllocateOnLoadLocked(actor)) {
          effects.availability_changed.push_back(actor.node_id());
          if (actor.state() == rpc::ACTOR_CREATING) {
            auto node = nodes_->Get(actor.node_id());
            Dispatch d{node ? node->address() : "", {}};
            *d.start.mutable_actor() = actor;
            d.start.set_attempt(actor.num_restarts());
            if (!d.node_address.empty()) effects.starts.push_back(std::move(d));
          }
          continue;
        }
        // Its node is gone (or cannot hold it any more): that node died with it.
        rpc::DeathCause cause;
        cause.set_kind(rpc::DeathCause::NODE_DIED);
        cause.set_node_id(actor.node_id());
        cause.set_message(absl::StrCat("node ", ShortId(actor.node_id()), " is gone"));
        cause.set_time_ms(NowMs());
        HandleDeathLocked(actor, cause, &effects);
        continue;
      }
      pending_.push_back(actor.actor_id());
    }
    spdlog::info("loaded {} actors ({} waiting for a node)", actors_.size(), pending_.size());
    ScheduleLocked(&effects);
  }
  return Apply(std::move(effects));
}

bool GcsActorManager::AllocateOnLoadLocked(const rpc::ActorInfo& actor) {
  Resources all = rpc::FromProto(actor.resources());
  if (scheduler_->AllocateActor(actor.node_id(), actor.placement_group_id(), actor.placed_bundle(),
                                all)) {
    return true;
  }
  // The last GCS had lent CPUs (lent_ lives in memory) and placed other actors on them: this
  // one runs on without its CPU, owed as a resumed waiter's is, rather than being killed.
  Resources cpu;
  cpu.SetFixed(kCpuResource, all.GetFixed(kCpuResource));
  if (cpu.Empty() || !scheduler_->HasNode(actor.node_id())) return false;
  Resources rest = all;
  rest -= cpu;
  if (!scheduler_->AllocateActor(actor.node_id(), actor.placement_group_id(), actor.placed_bundle(),
                                 rest)) {
    return false;
  }
  lent_[actor.actor_id()] = Lent{cpu, /*owed=*/true};
  return true;
}

bool GcsActorManager::NodeJoiningFor(const placement::ActorRequest& request) const {
  const placement::SchedulingRequest& r = request.scheduling;
  if (r.strategy == placement::Strategy::kNodeAffinity && !r.affinity_soft) {
    auto node = nodes_->Get(r.affinity_node_id);
    return node.has_value() && node->state() == rpc::NODE_ALIVE &&
           !scheduler_->HasNode(r.affinity_node_id);
  }
  for (const auto& node : nodes_->GetAll(/*alive_only=*/true)) {
    if (!scheduler_->HasNode(node.node_id())) return true;
  }
  return false;
}

absl::StatusOr<rpc::ActorInfo> GcsActorManager::Create(rpc::ActorInfo spec) {
  if (auto s = ValidateActorSpec(spec); !s.ok()) return s;
  if (spec.placement_group_id().empty()) {
    spec.set_bundle_index(-1);
  } else if (pg_check_) {
    if (auto s = pg_check_(spec.placement_group_id(), spec.bundle_index(),
                           rpc::FromProto(spec.resources()));
        !s.ok()) {
      return s;
    }
  }
  Effects effects;
  PendingWrite created;
  {
    absl::MutexLock lock(&mu_);
    if (spec.actor_id().empty()) spec.set_actor_id(NewId());
    if (actors_.Find(spec.actor_id()) != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat("actor id ", spec.actor_id(), " is taken"));
    }
    if (!spec.name().empty()) {
      for (const auto& [id, a] : actors_.entries()) {
        if (a.state() != rpc::ACTOR_DEAD && a.name() == spec.name() &&
            a.namespace_() == spec.namespace_()) {
          return absl::AlreadyExistsError(absl::StrCat(
              "an actor named '", spec.name(), "' already exists (", rpc::DescribeActor(a), ", ",
              rpc::StateName(a.state()), "); pick another name or look it up with GetActor"));
        }
      }
    }
    const placement::ActorRequest request = RequestFor(spec);
    placement::Placement probe = scheduler_->Probe(request).placement;
    // A node is listed ALIVE once saved, and reaches the scheduler when its registration's
    // listeners run, just after. A request that only such a node may hold waits for it
    // (OnNodeRegistered places it), as it would for any node it has room on.
    if (probe.infeasible && NodeJoiningFor(request)) probe.infeasible = false;
    if (probe.infeasible) {
      return absl::FailedPreconditionError(
          absl::StrCat("actor ", spec.class_name(), " cannot be scheduled: ", probe.reason));
    }
    spec.set_state(rpc::ACTOR_PENDING);
    spec.set_num_restarts(0);
    spec.clear_node_id();
    spec.clear_worker_address();
    spec.clear_death_cause();
    spec.clear_history();
    if (spec.max_concurrency() == 0) spec.set_max_concurrency(1);
    spec.set_create_time_ms(NowMs());
    SaveLocked(spec, &effects);
    created = effects.writes.back();
  }
  // Acknowledged means persisted: the actor is scheduled once its record is durable; a record
  // Redis refused is taken out of memory again.
  if (auto s = Apply(std::move(effects)); !s.ok()) {
    absl::MutexLock lock(&mu_);
    created.Undo();
    return s;
  }
  Effects scheduled;
  {
    absl::MutexLock lock(&mu_);
    pending_.push_back(spec.actor_id());
    ScheduleLocked(&scheduled);
  }
  Apply(std::move(scheduled)).IgnoreError();  // the store logged it; the actor exists
  auto stored = Get(spec.actor_id());
  return stored ? *stored : spec;
}

void GcsActorManager::RepayLocked(Effects* effects) {
  for (auto it = lent_.begin(); it != lent_.end();) {
    const rpc::ActorInfo* actor = it->second.owed ? actors_.Find(it->first) : nullptr;
    if (actor != nullptr && Placed(*actor) &&
        scheduler_->AllocateActor(actor->node_id(), actor->placement_group_id(),
                                  actor->placed_bundle(), it->second.cpu)) {
      effects->availability_changed.push_back(actor->node_id());
      it = lent_.erase(it);  // held again
    } else {
      ++it;
    }
  }
}

absl::StatusOr<bool> GcsActorManager::Lend(const std::string& actor_id, int attempt,
                                           rpc::LendActorResourcesRequest::Action action) {
  Effects effects;
  bool held = true;
  {
    absl::MutexLock lock(&mu_);
    const rpc::ActorInfo* found = actors_.Find(actor_id);
    if (found == nullptr) {
      return absl::NotFoundError(absl::StrCat("LendActorResources: no actor ", actor_id));
    }
    const rpc::ActorInfo& actor = *found;
    if ((attempt >= 0 && attempt != actor.num_restarts()) || actor.state() != rpc::ACTOR_ALIVE ||
        !Placed(actor)) {
      return true;
    }
    auto it = lent_.find(actor_id);
    if (action == rpc::LendActorResourcesRequest::LEND) {
      if (it != lent_.end()) {
        it->second.owed = false;  // it blocks again, or went idle, before it was repaid
        return false;
      }
      Resources cpu;
      cpu.SetFixed(kCpuResource, rpc::FromProto(actor.resources()).GetFixed(kCpuResource));
      if (cpu.Empty()) return true;  // it holds no CPU: nothing to lend
      scheduler_->ReleaseActor(actor.node_id(), actor.placement_group_id(), actor.placed_bundle(),
                               cpu);
      lent_[actor_id] = Lent{cpu, false};
      effects.availability_changed.push_back(actor.node_id());
      effects.freed = true;
      ScheduleLocked(&effects);
      held = false;
    } else {
      if (it == lent_.end()) return true;
      if (scheduler_->AllocateActor(actor.node_id(), actor.placement_group_id(),
                                    actor.placed_bundle(), it->second.cpu)) {
        lent_.erase(it);
        effects.availability_changed.push_back(actor.node_id());
      } else {
        held = false;
        if (action == rpc::LendActorResourcesRequest::RECLAIM) it->second.owed = true;
      }
    }
  }
  Apply(std::move(effects)).IgnoreError();  // the store logged it; the lending stands
  return held;
}

void GcsActorManager::ScheduleLocked(Effects* effects) {
  RepayLocked(effects);
  std::deque<std::string> still_pending;
  absl::Time now = absl::Now(), next_try = absl::InfiniteFuture();
  while (!pending_.empty()) {
    std::string id = pending_.front();
    pending_.pop_front();
    const rpc::ActorInfo* found = actors_.Find(id);
    if (found == nullptr || found->state() == rpc::ACTOR_DEAD || Placed(*found)) {
      not_before_.erase(id);
      continue;
    }
    if (auto wait = not_before_.find(id); wait != not_before_.end()) {
      if (wait->second > now) {
        next_try = std::min(next_try, wait->second);
        still_pending.push_back(id);
        continue;
      }
      not_before_.erase(wait);
    }
    rpc::ActorInfo actor = *found;
    placement::ActorPlacement placed = scheduler_->PlaceActor(RequestFor(actor));
    const placement::Placement& placement = placed.placement;
    if (placement.node_id.empty()) {
      // Even when no node left could hold it (it was admitted, so one could), it stays
      // pending: a node like the lost ones may come back.
      if (actor.pending_reason() != placement.reason) {
        actor.set_pending_reason(placement.reason);
        SaveLocked(actor, effects);
      }
      still_pending.push_back(id);
      continue;
    }
    effects->availability_changed.push_back(placement.node_id);
    actor.set_placed_bundle(placed.bundle_index);
    auto node = nodes_->Get(placement.node_id);
    actor.set_state(rpc::ACTOR_CREATING);
    actor.set_node_id(placement.node_id);
    actor.clear_pending_reason();
    actor.clear_worker_address();
    actor.set_pid(0);
    SaveLocked(actor, effects);
    Dispatch d{node ? node->address() : "", {}};
    *d.start.mutable_actor() = actor;
    d.start.set_attempt(actor.num_restarts());
    effects->starts.push_back(std::move(d));
  }
  pending_ = std::move(still_pending);
  if (next_try != absl::InfiniteFuture()) {
    timers_.RunAfter(next_try - now, [this] { ScheduleNow(); });
  }
}

void GcsActorManager::ReleaseLocked(const rpc::ActorInfo& actor, Effects* effects) {
  if (!Placed(actor)) return;
  Resources held = rpc::FromProto(actor.resources());
  if (auto it = lent_.find(actor.actor_id()); it != lent_.end()) {
    held -= it->second.cpu;  // given back already
    lent_.erase(it);
  }
  scheduler_->ReleaseActor(actor.node_id(), actor.placement_group_id(), actor.placed_bundle(),
                           held);
  effects->availability_changed.push_back(actor.node_id());
  effects->freed = true;
}

void GcsActorManager::HandleDeathLocked(rpc::ActorInfo actor, rpc::DeathCause cause,
                                        Effects* effects) {
  ReleaseLocked(actor, effects);
  effects->owners_gone.push_back(actor.actor_id());
  if (cause.time_ms() == 0) cause.set_time_ms(NowMs());
  bool final_cause = cause.kind() == rpc::DeathCause::CREATION_FAILED ||
                     cause.kind() == rpc::DeathCause::OWNER_DIED ||
                     (cause.kind() == rpc::DeathCause::KILLED_BY_USER && actor.kill_no_restart());
  if (actor.state() == rpc::ACTOR_CREATING &&
      (cause.kind() == rpc::DeathCause::EXITED || cause.kind() == rpc::DeathCause::SIGNALED)) {
    cause.set_before_created(true);
    int in_a_row = 1;
    for (auto it = actor.history().rbegin(); it != actor.history().rend() && it->before_created();
         ++it) {
      ++in_a_row;
    }
    if (!final_cause && in_a_row >= kExitsBeforeCreated) {
      rpc::DeathCause failed;
      failed.set_kind(rpc::DeathCause::CREATION_FAILED);
      failed.set_time_ms(cause.time_ms());
      failed.set_node_id(cause.node_id());
      failed.set_before_created(true);
      failed.set_message(absl::StrCat(
          "its process ended before the actor was created, ", in_a_row,
          " times in a row (last: ", rpc::DescribeCause(cause), "): ",
          actor.code_path().empty()
              ? absl::StrCat("does the worker register ", actor.class_name(), "?")
              : absl::StrCat(actor.code_path(), " is not a Phalanx program that registers ",
                             actor.class_name(), " (PHALANX_ACTOR), or it exits before it can")));
      *actor.add_history() = cause;
      cause = std::move(failed);
      final_cause = true;
    }
  }
  if (!final_cause && RestartsLeft(actor)) {
    *actor.add_history() = cause;
    *actor.mutable_death_cause() = cause;
    actor.set_num_restarts(actor.num_restarts() + 1);
    actor.set_state(rpc::ACTOR_RESTARTING);
    actor.clear_node_id();
    actor.clear_worker_address();
    actor.set_pid(0);
    absl::Duration backoff;
    if (cause.before_created()) {
      int in_a_row = 0;
      for (auto it = actor.history().rbegin(); it != actor.history().rend() && it->before_created();
           ++it) {
        ++in_a_row;
      }
      backoff = kCreationRetryBackoff * (1 << std::min(in_a_row - 1, 6));
      not_before_[actor.actor_id()] = absl::Now() + backoff;
    }
    spdlog::info("{} died ({}); restarting ({} of {}){}", rpc::DescribeActor(actor),
                 rpc::DescribeCause(cause), actor.num_restarts(),
                 actor.max_restarts() == -1 ? std::string("unlimited")
                                            : std::to_string(actor.max_restarts()),
                 backoff > absl::ZeroDuration()
                     ? absl::StrCat(" in ", absl::FormatDuration(backoff),
                                    ": its process ended before it was created")
                     : "");
    SaveLocked(actor, effects);
    pending_.push_back(actor.actor_id());
    return;
  }
  actor.set_state(rpc::ACTOR_DEAD);
  *actor.mutable_death_cause() = cause;
  actor.set_end_time_ms(NowMs());
  actor.clear_worker_address();
  spdlog::info("{} is dead: {}", rpc::DescribeActor(actor), rpc::DescribeCause(cause));
  SaveLocked(actor, effects);
  effects->dead.push_back(actor);
}

absl::Status GcsActorManager::ReportState(const rpc::ReportActorStateRequest& report, bool* stale) {
  *stale = false;
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    const rpc::ActorInfo* found = actors_.Find(report.actor_id());
    if (found == nullptr) {
      *stale = true;
      return absl::OkStatus();
    }
    rpc::ActorInfo actor = *found;
    bool current = report.attempt() == actor.num_restarts() && report.node_id() == actor.node_id();
    if (report.state() == rpc::ACTOR_ALIVE) {
      if (!current || actor.state() != rpc::ACTOR_CREATING) {
        *stale = !(current && actor.state() == rpc::ACTOR_ALIVE);
        return absl::OkStatus();
      }
      actor.set_state(rpc::ACTOR_ALIVE);
      actor.set_worker_address(report.worker_address());
      actor.set_pid(report.pid());
      actor.set_alive_time_ms(NowMs());
      SaveLocked(actor, &effects);
    } else if (report.state() == rpc::ACTOR_DEAD) {
      if (!current || !Placed(actor)) return absl::OkStatus();  // an older attempt's news
      HandleDeathLocked(actor, report.cause(), &effects);
      ScheduleLocked(&effects);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("ReportActorState: state ",
                                                     rpc::StateName(report.state()),
                                                     " cannot be reported; report ALIVE or DEAD"));
    }
  }
  return Apply(std::move(effects));
}

absl::Status GcsActorManager::Kill(const std::string& actor_id, bool no_restart) {
  rpc::DeathCause cause;
  cause.set_kind(rpc::DeathCause::KILLED_BY_USER);
  return KillWithCause(actor_id, no_restart, std::move(cause));
}

int GcsActorManager::KillOwnedBy(const std::string& owner_id, const std::string& why) {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, a] : actors_.entries()) {
      if (!owner_id.empty() && a.owner_address() == owner_id && !a.detached() &&
          a.state() != rpc::ACTOR_DEAD) {
        ids.push_back(id);
      }
    }
  }
  int killed = 0;
  for (const auto& id : ids) {
    rpc::DeathCause cause;
    cause.set_kind(rpc::DeathCause::OWNER_DIED);
    cause.set_message(why);
    killed += KillWithCause(id, /*no_restart=*/true, std::move(cause)).ok() ? 1 : 0;
  }
  return killed;
}

absl::Status GcsActorManager::KillWithCause(const std::string& actor_id, bool no_restart,
                                            rpc::DeathCause cause) {
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    const rpc::ActorInfo* found = actors_.Find(actor_id);
    if (found == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("no actor ", actor_id, "; `phalanx list actors` shows the known ones"));
    }
    rpc::ActorInfo actor = *found;
    if (actor.state() == rpc::ACTOR_DEAD) return absl::OkStatus();
    if (no_restart) {
      actor.set_kill_no_restart(true);
      SaveLocked(actor, &effects);
    }
    cause.set_time_ms(NowMs());
    if (!Placed(actor)) {
      // Not running anywhere: decide here.
      if (no_restart) HandleDeathLocked(actor, cause, &effects);
    } else {
      auto node = nodes_->Get(actor.node_id());
      rpc::KillActorRequest kill;
      kill.set_actor_id(actor_id);
      kill.set_attempt(actor.num_restarts());
      *kill.mutable_cause() = cause;
      if (node) effects.kills.emplace_back(node->address(), kill);
    }
  }
  return Apply(std::move(effects));
}

void GcsActorManager::OnNodeRegistered(const rpc::NodeInfo& node) {
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    effects.availability_changed.push_back(node.node_id());
    ScheduleLocked(&effects);
  }
  Apply(std::move(effects)).IgnoreError();  // the store logged it
}

void GcsActorManager::OnNodesDead(const std::vector<rpc::NodeInfo>& nodes) {
  if (nodes.empty()) return;
  absl::flat_hash_map<std::string, const rpc::NodeInfo*> dead;
  for (const auto& node : nodes) dead[node.node_id()] = &node;
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    // One scan of the table for the whole batch.
    std::vector<std::pair<rpc::ActorInfo, const rpc::NodeInfo*>> victims;
    for (const auto& [id, actor] : actors_.entries()) {
      if (!Placed(actor)) continue;
      auto it = dead.find(actor.node_id());
      if (it != dead.end()) victims.emplace_back(actor, it->second);
    }
    std::sort(victims.begin(), victims.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(a.first.create_time_ms(), a.first.actor_id()) <
             std::make_tuple(b.first.create_time_ms(), b.first.actor_id());
    });
    for (const auto& [actor, node] : victims) {
      rpc::DeathCause cause;
      cause.set_kind(rpc::DeathCause::NODE_DIED);
      cause.set_node_id(node->node_id());
      cause.set_message(absl::StrCat("node ", ShortId(node->node_id()), " at ", node->address(),
                                     " died: ", node->death_reason()));
      HandleDeathLocked(actor, cause, &effects);
    }
    // The dead nodes are gone from the scheduler: they have no availability to publish.
    effects.availability_changed.erase(
        std::remove_if(effects.availability_changed.begin(), effects.availability_changed.end(),
                       [&](const std::string& id) { return dead.contains(id); }),
        effects.availability_changed.end());
    ScheduleLocked(&effects);
  }
  Apply(std::move(effects)).IgnoreError();  // the store logged it
}

void GcsActorManager::SendStart(Dispatch dispatch) {
  node_clients_->StartActor(
      dispatch.node_address, dispatch.start, [this, dispatch](absl::Status s) {
        if (s.ok()) return;
        spdlog::warn("starting {} on node {} failed: {}; retrying",
                     rpc::DescribeActor(dispatch.start.actor()),
                     ShortId(dispatch.start.actor().node_id()), s);
        // Retry while the actor still wants this node: either the node comes back or it is
        // declared dead (then the actor is rescheduled elsewhere).
        timers_.RunAfter(absl::Milliseconds(500), [this, dispatch] {
          {
            absl::MutexLock lock(&mu_);
            const rpc::ActorInfo* a = actors_.Find(dispatch.start.actor().actor_id());
            if (a == nullptr || a->state() != rpc::ACTOR_CREATING ||
                a->num_restarts() != dispatch.start.attempt() ||
                a->node_id() != dispatch.start.actor().node_id()) {
              return;
            }
          }
          SendStart(dispatch);
        });
      });
}

absl::Status GcsActorManager::Apply(Effects effects) {
  absl::Status persisted = WaitAll(effects.writes);
  for (auto& d : effects.starts) {
    if (d.node_address.empty()) continue;
    SendStart(std::move(d));
  }
  for (auto& [address, kill] : effects.kills) {
    node_clients_->KillActor(address, kill, [id = kill.actor_id()](absl::Status s) {
      if (!s.ok()) spdlog::warn("killing actor {} failed: {}", ShortId(id), s);
    });
  }
  std::sort(effects.availability_changed.begin(), effects.availability_changed.end());
  effects.availability_changed.erase(
      std::unique(effects.availability_changed.begin(), effects.availability_changed.end()),
      effects.availability_changed.end());
  for (const auto& node_id : effects.availability_changed) {
    SyncAvailable(*scheduler_, nodes_, node_id);
  }
  if (effects.freed && on_freed_) on_freed_();
  if (on_dead_) {
    for (const auto& a : effects.dead) on_dead_(a);
  }
  // Ray's ownership: what an actor created (not detached) dies with its process.
  for (const auto& owner : effects.owners_gone) {
    int killed = KillOwnedBy(owner, absl::StrCat("its owner, actor ", ShortId(owner), ", died"));
    if (killed > 0)
      spdlog::info("actor {} died: killed the {} actor(s) it owned", ShortId(owner), killed);
  }
  return persisted;
}

absl::Status GcsActorManager::RenewLease(const std::string& actor_id, int attempt,
                                         absl::Duration timeout, absl::Duration running_timeout,
                                         bool* stale) {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "RenewActorLease: timeout_ms must be > 0 (how long the lease lasts without a renewal)");
  }
  absl::MutexLock lock(&mu_);
  const rpc::ActorInfo* actor = actors_.Find(actor_id);
  *stale = actor == nullptr || actor->state() == rpc::ACTOR_DEAD ||
           actor->num_restarts() != attempt || !Placed(*actor);
  if (*stale) {
    auto it = leases_.find(actor_id);
    if (it != leases_.end() && it->second.attempt == attempt) leases_.erase(it);
    return absl::OkStatus();
  }
  Lease lease;
  lease.attempt = attempt;
  lease.timeout = timeout;
  lease.running_timeout = running_timeout > timeout ? running_timeout : absl::ZeroDuration();
  lease.renewed = absl::Now();
  lease.deadline = lease.renewed + timeout;
  leases_[actor_id] = lease;
  return absl::OkStatus();
}

void GcsActorManager::ExpireLocked(const std::string& id, const Lease& lease,
                                   const std::string& why, Effects* effects) {
  const rpc::ActorInfo* actor = actors_.Find(id);
  if (actor == nullptr || !Placed(*actor) || actor->num_restarts() != lease.attempt) return;
  auto node = nodes_->Get(actor->node_id());
  rpc::KillActorRequest kill;
  kill.set_actor_id(id);
  kill.set_attempt(lease.attempt);
  auto* cause = kill.mutable_cause();
  cause->set_kind(rpc::DeathCause::LEASE_EXPIRED);
  cause->set_time_ms(NowMs());
  cause->set_message(why);
  spdlog::warn("{}: lease expired ({}); killing it", rpc::DescribeActor(*actor), why);
  if (node) effects->kills.emplace_back(node->address(), kill);
}

void GcsActorManager::ExpireLeases() {
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = absl::Now();
    for (auto it = leases_.begin(); it != leases_.end();) {
      auto next = std::next(it);
      const std::string& id = it->first;
      Lease& lease = it->second;
      if (lease.deadline > now) {
        it = next;
        continue;
      }
      const rpc::ActorInfo* actor = actors_.Find(id);
      // The actor's node is silent too: a partition (or the node's death), not the actor's
      // fault. The node timeout and the partition timeout judge the node; the lease waits,
      // and runs again from when the node is heard.
      if (actor != nullptr && Placed(*actor) &&
          nodes_->SilentFor(actor->node_id()) > lease.timeout / 2) {
        lease.deadline = now + lease.timeout;
        lease.renewed = now;
        it = next;
        continue;
      }
      if (actor == nullptr || !Placed(*actor) || actor->num_restarts() != lease.attempt) {
        leases_.erase(it);
        it = next;
        continue;
      }
      absl::Duration unrenewed = now - lease.renewed;
      std::optional<std::string> state;
      if (lease.running_timeout > absl::ZeroDuration()) {
        state = nodes_->StoppedState(actor->node_id(), id, lease.attempt);
      }
      std::string why;
      if (!state) {  // no running_timeout, or a node that does not say
        why = absl::StrCat("no lease renewal for ", absl::FormatDuration(unrenewed),
                           " (stopped, deadlocked or cut off)");
      } else if (!state->empty()) {
        why = absl::StrCat("no lease renewal for ", absl::FormatDuration(unrenewed),
                           ", and its process cannot run (state ", *state, ": stopped, or exited)");
      } else if (unrenewed >= lease.running_timeout) {
        why = absl::StrCat("no lease renewal for ", absl::FormatDuration(unrenewed),
                           " while its process could run: deadlocked, or starved of CPU that "
                           "long");
      } else {
        // A busy machine delays renewals; it never stops a process.
        if (!lease.told_running) {
          lease.told_running = true;
          spdlog::warn(
              "{}: no lease renewal for {}, but its node says its process can run: a busy "
              "machine, not a stopped process; waiting up to {} for a renewal",
              rpc::DescribeActor(*actor), absl::FormatDuration(unrenewed),
              absl::FormatDuration(lease.running_timeout));
        }
        it = next;
        continue;
      }
      ExpireLocked(id, lease, why, &effects);
      leases_.erase(it);
      it = next;
    }
  }
  Apply(std::move(effects)).IgnoreError();  // the store logged it
}

void GcsActorManager::LeasesStalled(absl::Duration how_long) {
  absl::MutexLock lock(&mu_);
  for (auto& [id, lease] : leases_) {
    lease.deadline += how_long;
    lease.renewed += how_long;
  }
}

void GcsActorManager::SetResourcesFreedCallback(std::function<void()> callback) {
  on_freed_ = std::move(callback);
}

void GcsActorManager::SetDeathCallback(std::function<void(const rpc::ActorInfo&)> callback) {
  on_dead_ = std::move(callback);
}

void GcsActorManager::ScheduleNow() {
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    ScheduleLocked(&effects);
  }
  Apply(std::move(effects)).IgnoreError();  // the store logged it
}

void GcsActorManager::KillGroup(const std::string& pg_id, int bundle_index) {
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    std::vector<rpc::ActorInfo> members;
    for (const auto& [id, a] : actors_.entries()) {
      if (a.placement_group_id() != pg_id || a.state() == rpc::ACTOR_DEAD) continue;
      bool in_bundle = bundle_index < 0 || (Placed(a) ? a.placed_bundle() == bundle_index
                                                      : a.bundle_index() == bundle_index);
      if (in_bundle) members.push_back(a);
    }
    for (auto actor : members) {
      actor.set_kill_no_restart(true);
      rpc::DeathCause cause;
      cause.set_kind(rpc::DeathCause::KILLED_BY_USER);
      cause.set_message(bundle_index < 0
                            ? absl::StrCat("placement group ", ShortId(pg_id), " was removed")
                            : absl::StrCat("bundle ", bundle_index, " of placement group ",
                                           ShortId(pg_id), " was released"));
      cause.set_time_ms(NowMs());
      if (Placed(actor)) {
        auto node = nodes_->Get(actor.node_id());
        rpc::KillActorRequest kill;
        kill.set_actor_id(actor.actor_id());
        kill.set_attempt(actor.num_restarts());
        *kill.mutable_cause() = cause;
        if (node) effects.kills.emplace_back(node->address(), kill);
      }
      // Decided here: the group's resources are going away with it.
      HandleDeathLocked(actor, cause, &effects);
    }
  }
  Apply(std::move(effects)).IgnoreError();  // the store logged it
}

std::optional<rpc::ActorInfo> GcsActorManager::Get(const std::string& actor_id) const {
  absl::MutexLock lock(&mu_);
  const rpc::ActorInfo* a = actors_.Find(actor_id);
  if (a == nullptr) return std::nullopt;
  return *a;
}

std::optional<rpc::ActorInfo> GcsActorManager::GetByName(const std::string& name,
                                                         const std::string& ns) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, a] : actors_.entries()) {
    if (a.name() == name && a.namespace_() == ns && a.state() != rpc::ACTOR_DEAD) return a;
  }
  return std::nullopt;
}

std::map<std::pair<rpc::ActorState, std::string>, int> GcsActorManager::CountByStateAndClass()
    const {
  absl::MutexLock lock(&mu_);
  std::map<std::pair<rpc::ActorState, std::string>, int> counts;
  for (const auto& [id, a] : actors_.entries()) ++counts[{a.state(), a.class_name()}];
  return counts;
}

std::vector<rpc::ActorInfo> GcsActorManager::List(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::ActorInfo> out;
  for (const auto& [id, a] : actors_.entries()) {
    if (job_id.empty() || a.job_id() == job_id) out.push_back(a);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.create_time_ms(), a.actor_id()) <
           std::make_tuple(b.create_time_ms(), b.actor_id());
  });
  return out;
}

absl::Status GcsActorManager::Put(const rpc::ActorInfo& actor) {
  Effects effects;
  {
    absl::MutexLock lock(&mu_);
    SaveLocked(actor, &effects);
  }
  return effects.writes.front().WaitOrUndo(&mu_);
}

}  // namespace phalanx::gcs
