#include "gcs/placement_group_manager.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "base/describe.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/system.h"
#include "gcs/availability.h"

namespace phalanx::gcs {
namespace {

std::vector<Resources> BundleResources(const rpc::PlacementGroupInfo& pg) {
  std::vector<Resources> out;
  for (const auto& b : pg.bundles()) out.push_back(rpc::FromProto(b.resources()));
  return out;
}

placement::BundleStrategy StrategyOf(const rpc::PlacementGroupInfo& pg) {
  return placement::ParseBundleStrategy(pg.strategy()).value_or(placement::BundleStrategy::kPack);
}

// Stands in the plan for a released bundle: a node no bundle is placed on, so the planner
// leaves it be.
constexpr char kReleased[] = "(released)";

std::string Describe(const rpc::PlacementGroupInfo& pg) {
  std::string out = absl::StrCat("placement group ", ShortId(pg.placement_group_id()));
  if (!pg.name().empty()) absl::StrAppend(&out, " '", pg.name(), "'");
  return out;
}

}  // namespace

GcsPlacementGroupManager::GcsPlacementGroupManager(Store* store, GcsPublisher* publisher,
                                                   GcsNodeManager* nodes,
                                                   NodeClientPool* node_clients,
                                                   placement::ResourceScheduler* scheduler,
                                                   GcsActorManager* actors)
    : publisher_(publisher),
      nodes_(nodes),
      node_clients_(node_clients),
      scheduler_(scheduler),
      actors_(actors),
      groups_(store, "placement_groups") {
  publisher_->SetSnapshotProvider(rpc::PLACEMENT_GROUP, [this](const auto& consume) {
    absl::MutexLock lock(&mu_);
    std::vector<rpc::PubMessage> out;
    for (const auto& [id, pg] : groups_.entries()) {
      rpc::PubMessage m;
      m.set_key(id);
      *m.mutable_placement_group() = pg;
      out.push_back(std::move(m));
    }
    consume(std::move(out));
  });
}

void GcsPlacementGroupManager::SaveLocked(const rpc::PlacementGroupInfo& pg) {
  rpc::PubMessage m;
  m.set_channel(rpc::PLACEMENT_GROUP);
  m.set_key(pg.placement_group_id());
  *m.mutable_placement_group() = pg;
  last_write_[pg.placement_group_id()] = groups_.Put(
      pg.placement_group_id(), pg, [this, m = std::move(m)] { publisher_->Publish(m); });
}

PendingWrite GcsPlacementGroupManager::LastWriteLocked(const std::string& pg_id) const {
  auto it = last_write_.find(pg_id);
  return it == last_write_.end() ? PendingWrite() : it->second;
}

std::string GcsPlacementGroupManager::AddressOf(const std::string& node_id) const {
  auto node = nodes_->Get(node_id);
  return node ? node->address() : "";
}

absl::Status GcsPlacementGroupManager::Load() {
  std::vector<std::pair<rpc::PlacementGroupInfo, std::vector<int>>> starts;
  {
    absl::MutexLock lock(&mu_);
    if (auto s = groups_.Load(); !s.ok()) return s;
    std::vector<rpc::PlacementGroupInfo> all;
    for (const auto& [id, pg] : groups_.entries()) all.push_back(pg);
    std::sort(all.begin(), all.end(),
              [](const auto& a, const auto& b) { return a.create_time_ms() < b.create_time_ms(); });
    for (auto pg : all) {
      if (pg.state() == rpc::PG_REMOVED) continue;
      bool lost = false;
      for (int i = 0; i < pg.bundles_size(); ++i) {
        auto* b = pg.mutable_bundles(i);
        if (b->node_id().empty()) continue;
        if (!scheduler_->ReserveBundleAt(pg.placement_group_id(), i, b->node_id(),
                                         rpc::FromProto(b->resources()))) {
          b->clear_node_id();
          lost = true;
        }
      }
      if (pg.state() == rpc::PG_CREATED && !lost) continue;
      if (pg.state() == rpc::PG_CREATED) {
        pg.set_state(rpc::PG_RESCHEDULING);
        SaveLocked(pg);
      }
      queue_.push_back(pg.placement_group_id());
    }
    spdlog::info("loaded {} placement groups ({} to place)", groups_.size(), queue_.size());
    ScheduleLocked(&starts);
  }
  Run(std::move(starts));
  return absl::OkStatus();
}

absl::StatusOr<rpc::PlacementGroupInfo> GcsPlacementGroupManager::Create(
    rpc::PlacementGroupInfo spec) {
  std::vector<std::map<std::string, double>> bundles;
  for (const auto& b : spec.bundles()) {
    bundles.emplace_back(b.resources().amounts().begin(), b.resources().amounts().end());
  }
  if (auto s = placement::ValidateBundles(bundles); !s.ok()) return s;
  auto strategy = placement::ParseBundleStrategy(spec.strategy());
  if (!strategy.ok()) return strategy.status();
  spec.set_strategy(placement::BundleStrategyName(*strategy));
  placement::BundlePlan probe = scheduler_->ProbeBundles(*strategy, BundleResources(spec));
  if (probe.infeasible && !spec.pend_if_infeasible()) {
    return absl::FailedPreconditionError(
        absl::StrCat("placement group cannot be placed: ", probe.reason,
                     ". Ask for less, or add a node that has it"));
  }
  std::vector<std::pair<rpc::PlacementGroupInfo, std::vector<int>>> starts;
  PendingWrite write;
  {
    absl::MutexLock lock(&mu_);
    if (spec.placement_group_id().empty()) spec.set_placement_group_id(NewId());
    if (groups_.Find(spec.placement_group_id()) != nullptr) {
      return absl::AlreadyExistsError(
          absl::StrCat("placement group id ", spec.placement_group_id(), " is taken"));
    }
    if (!spec.name().empty()) {
      for (const auto& [id, pg] : groups_.entries()) {
        if (pg.name() == spec.name() && pg.state() != rpc::PG_REMOVED) {
          return absl::AlreadyExistsError(absl::StrCat("a placement group named '", spec.name(),
                                                       "' already exists (", Describe(pg),
                                                       "); pick another name or remove it first"));
        }
      }
    }
    spec.set_state(rpc::PG_PENDING);
    spec.set_create_time_ms(NowMs());
    for (auto& b : *spec.mutable_bundles()) b.clear_node_id();
    SaveLocked(spec);
    write = LastWriteLocked(spec.placement_group_id());
  }
  // Acknowledged means persisted: the group is scheduled once its record is durable; a record
  // Redis refused is taken out of memory again.
  if (auto s = write.WaitOrUndo(&mu_); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(spec.placement_group_id());
    ScheduleLocked(&starts);
  }
  Run(std::move(starts));
  auto stored = Get(spec.placement_group_id());
  return stored ? *stored : spec;
}

void GcsPlacementGroupManager::ScheduleLocked(
    std::vector<std::pair<rpc::PlacementGroupInfo, std::vector<int>>>* starts) {
  std::deque<std::string> waiting;
  while (!queue_.empty()) {
    std::string id = queue_.front();
    queue_.pop_front();
    const rpc::PlacementGroupInfo* found = groups_.Find(id);
    if (found == nullptr || found->state() == rpc::PG_REMOVED ||
        found->state() == rpc::PG_CREATED || reserving_.count(id)) {
      continue;
    }
    rpc::PlacementGroupInfo pg = *found;
    std::vector<std::string> fixed;
    for (const auto& b : pg.bundles()) fixed.push_back(b.released() ? kReleased : b.node_id());
    placement::BundlePlan plan =
        scheduler_->ReserveBundles(id, StrategyOf(pg), BundleResources(pg), fixed);
    if (!plan.placed) {
      std::string reason =
          plan.infeasible ? absl::StrCat("INFEASIBLE: ", plan.reason) : plan.reason;
      if (pg.pending_reason() != reason) {
        pg.set_pending_reason(reason);
        SaveLocked(pg);
      }
      waiting.push_back(id);
      continue;
    }
    std::vector<int> indices;
    for (int i = 0; i < pg.bundles_size(); ++i) {
      if (fixed[i].empty()) {
        indices.push_back(i);
        pg.mutable_bundles(i)->set_node_id(plan.nodes[i]);  // planned; recorded once reserved
      }
    }
    reserving_[id] = next_round_++;
    starts->emplace_back(pg, indices);
  }
  queue_ = std::move(waiting);
}

void GcsPlacementGroupManager::Run(
    std::vector<std::pair<rpc::PlacementGroupInfo, std::vector<int>>> starts) {
  std::vector<std::string> touched;
  for (auto& [pg, indices] : starts) {
    for (int i : indices) touched.push_back(pg.bundles(i).node_id());
    ReserveRound(std::move(pg), std::move(indices));
  }
  for (const auto& node_id : touched) {
    SyncAvailable(*scheduler_, nodes_, node_id);
  }
}

void GcsPlacementGroupManager::ReserveRound(rpc::PlacementGroupInfo pg, std::vector<int> indices) {
  int64_t round;
  {
    absl::MutexLock lock(&mu_);
    round = reserving_[pg.placement_group_id()];
  }
  struct State {
    rpc::PlacementGroupInfo pg;
    std::vector<int> indices;
    int64_t round;
    absl::Mutex mu;
    std::vector<std::string> addresses;  // where each bundle's reserve goes (empty: node gone)
    int replies ABSL_GUARDED_BY(mu) = 0;
    absl::Status failure ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  state->pg = std::move(pg);
  state->indices = std::move(indices);
  state->round = round;
  for (int i : state->indices)
    state->addresses.push_back(AddressOf(state->pg.bundles(i).node_id()));
  auto on_reserved = [this, state](absl::Status s) {
    absl::Status outcome;
    {
      absl::MutexLock lock(&state->mu);
      if (!s.ok() && state->failure.ok()) state->failure = s;
      if (++state->replies < static_cast<int>(state->indices.size())) return;
      outcome = state->failure;
    }
    std::vector<std::string> nodes;
    for (int i : state->indices) nodes.push_back(state->pg.bundles(i).node_id());
    FinishRound(state->pg.placement_group_id(), state->round, state->indices, outcome, nodes,
                state->addresses);
  };
  for (size_t k = 0; k < state->indices.size(); ++k) {
    int i = state->indices[k];
    const std::string& address = state->addresses[k];
    if (address.empty()) {
      on_reserved(absl::UnavailableError(
          absl::StrCat("node ", ShortId(state->pg.bundles(i).node_id()), " is gone")));
      continue;
    }
    rpc::BundleRequest r;
    r.set_placement_group_id(state->pg.placement_group_id());
    r.set_bundle_index(i);
    *r.mutable_resources() = state->pg.bundles(i).resources();
    node_clients_->ReserveBundle(address, r, on_reserved);
  }
}

void GcsPlacementGroupManager::FinishRound(const std::string& pg_id, int64_t round,
                                           const std::vector<int>& indices, absl::Status outcome,
                                           const std::vector<std::string>& nodes,
                                           const std::vector<std::string>& addresses) {
  bool created = false, retry = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = reserving_.find(pg_id);
    if (it == reserving_.end() || it->second != round) return;
    reserving_.erase(it);
    const rpc::PlacementGroupInfo* found = groups_.Find(pg_id);
    if (found == nullptr) return;
    rpc::PlacementGroupInfo pg = *found;
    bool still_reserved = std::all_of(indices.begin(), indices.end(), [&](int i) {
      return !scheduler_->BundleNode(pg_id, i).empty();
    });
    if (pg.state() != rpc::PG_REMOVED && outcome.ok() && still_reserved) {
      for (size_t k = 0; k < indices.size(); ++k) {
        pg.mutable_bundles(indices[k])->set_node_id(nodes[k]);
      }
      pg.set_state(rpc::PG_CREATED);
      pg.clear_pending_reason();
      SaveLocked(pg);
      created = true;
      spdlog::info("{} created ({} bundles, {})", Describe(pg), pg.bundles_size(), pg.strategy());
    } else {
      // Every node of the round gives back what it may hold (a node that refused, or did not
      // answer, may hold it too). Sent before the group can be tried again, so that no cancel
      // overtakes the next round's reservation of the same bundle on the same node.
      for (size_t k = 0; k < indices.size(); ++k) {
        if (!addresses[k].empty()) SendCancel(pg_id, indices[k], nodes[k], addresses[k], 1);
      }
      scheduler_->ReleaseBundles(pg_id, indices);
      if (pg.state() != rpc::PG_REMOVED) {
        if (outcome.ok()) {
          outcome = absl::UnavailableError("a node of the plan died before the round finished");
        }
        pg.set_pending_reason(
            absl::StrCat("reservation rolled back (", outcome.message(), "); retrying"));
        for (int i : indices) pg.mutable_bundles(i)->clear_node_id();
        SaveLocked(pg);
        queue_.push_front(pg_id);
        retry = true;
        spdlog::warn("{}: {}", Describe(pg), pg.pending_reason());
      }
    }
  }
  for (const auto& node_id : nodes) {
    SyncAvailable(*scheduler_, nodes_, node_id);
  }
  if (created) actors_->ScheduleNow();
  if (retry) timers_.RunAfter(kRetryAfterRollback, [this] { ScheduleNow(); });
}

void GcsPlacementGroupManager::SendCancel(const std::string& pg_id, int index,
                                          const std::string& node_id, const std::string& address,
                                          int attempt) {
  rpc::BundleRequest r;
  r.set_placement_group_id(pg_id);
  r.set_bundle_index(index);
  node_clients_->CancelBundle(address, r, [this, pg_id, index, node_id, attempt](absl::Status s) {
    // Cancelled: the GCS is shutting down. Otherwise the node did not answer in time.
    if (s.ok() || absl::IsCancelled(s) || attempt >= kCancelAttempts) {
      if (!s.ok() && !absl::IsCancelled(s)) {
        spdlog::warn(
            "bundle {} of placement group {} may still be held by node {}: {} cancels "
            "failed ({}); it is cancelled when the node registers again",
            index, ShortId(pg_id), ShortId(node_id), attempt, s);
      }
      return;
    }
    timers_.RunAfter(kCancelRetryDelay, [this, pg_id, index, node_id, attempt] {
      std::string now_at = AddressOf(node_id);
      if (now_at.empty()) return;  // the node is gone, and its ledger with it
      absl::MutexLock lock(&mu_);
      // Reserved there again meanwhile: the node should hold it.
      if (scheduler_->BundleNode(pg_id, index) == node_id) return;
      SendCancel(pg_id, index, node_id, now_at, attempt + 1);
    });
  });
}

void GcsPlacementGroupManager::ReconcileNode(const std::string& node_id, const std::string& address,
                                             const std::vector<rpc::HeldBundle>& held) {
  int dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const rpc::HeldBundle& b : held) {
      if (scheduler_->BundleNode(b.placement_group_id(), b.bundle_index()) == node_id) continue;
      SendCancel(b.placement_group_id(), b.bundle_index(), node_id, address, 1);
      ++dropped;
    }
  }
  if (dropped > 0) {
    spdlog::warn(
        "node {} held {} placement-group bundle(s) that the GCS does not place there "
        "(left by a reservation round cut short); cancelled them",
        ShortId(node_id), dropped);
  }
}

int GcsPlacementGroupManager::RemoveJob(const std::string& job_id) {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, pg] : groups_.entries()) {
      if (pg.job_id() == job_id && pg.state() != rpc::PG_REMOVED) ids.push_back(id);
    }
  }
  int removed = 0;
  for (const auto& id : ids) removed += Remove(id).ok() ? 1 : 0;
  return removed;
}

absl::Status GcsPlacementGroupManager::Remove(const std::string& pg_id) {
  std::vector<std::pair<std::string, int>> placed;
  PendingWrite write;
  {
    absl::MutexLock lock(&mu_);
    const rpc::PlacementGroupInfo* found = groups_.Find(pg_id);
    if (found == nullptr) {
      return absl::NotFoundError(absl::StrCat("no placement group ", pg_id));
    }
    if (found->state() == rpc::PG_REMOVED) return absl::OkStatus();
    rpc::PlacementGroupInfo pg = *found;
    for (int i = 0; i < pg.bundles_size(); ++i) {
      if (!pg.bundles(i).node_id().empty()) placed.emplace_back(pg.bundles(i).node_id(), i);
    }
    pg.set_state(rpc::PG_REMOVED);
    pg.clear_pending_reason();
    SaveLocked(pg);
    write = LastWriteLocked(pg_id);
    queue_.erase(std::remove(queue_.begin(), queue_.end(), pg_id), queue_.end());
  }
  // Removed is final: the group's actors and bundles go whatever the store said, and its
  // error (logged by the store) is returned.
  absl::Status persisted = write.Wait();
  actors_->KillGroup(pg_id);
  scheduler_->ReleaseBundles(pg_id);
  for (const auto& [node_id, index] : placed) {
    // No lock needed to order it: a removed group is never reserved again.
    if (std::string address = AddressOf(node_id); !address.empty()) {
      SendCancel(pg_id, index, node_id, address, 1);
    }
    SyncAvailable(*scheduler_, nodes_, node_id);
  }
  spdlog::info("placement group {} removed", ShortId(pg_id));
  actors_->ScheduleNow();
  ScheduleNow();
  return persisted;
}

absl::StatusOr<const rpc::PlacementGroupInfo*> GcsPlacementGroupManager::FindBundleLocked(
    const std::string& pg_id, int index, bool any_ok, absl::string_view who,
    absl::string_view fix_if_removed) const {
  const rpc::PlacementGroupInfo* pg = groups_.Find(pg_id);
  if (pg == nullptr) return absl::NotFoundError(absl::StrCat(who, "no placement group ", pg_id));
  if (pg->state() == rpc::PG_REMOVED) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, Describe(*pg), " was removed; ", fix_if_removed));
  }
  if (index < (any_ok ? -1 : 0) || index >= pg->bundles_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "bundle index ", index, " is out of range: ", Describe(*pg), " has ",
                     pg->bundles_size(), " bundles (0..", pg->bundles_size() - 1, ")",
                     any_ok ? ", or use -1 for any" : ""));
  }
  return pg;
}

absl::Status GcsPlacementGroupManager::ReleaseBundle(const std::string& pg_id, int index) {
  std::string node_id;
  PendingWrite write;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<const rpc::PlacementGroupInfo*> found =
        FindBundleLocked(pg_id, index, /*any_ok=*/false, "", "its bundles are free already");
    if (!found.ok()) return found.status();
    const rpc::PlacementGroupInfo& current = **found;
    if (current.bundles(index).released()) return absl::OkStatus();
    if (reserving_.count(pg_id)) {
      // Its reservation round would place (or record) the bundle again: ask after it.
      return absl::UnavailableError(absl::StrCat(
          Describe(current), " is being placed; release bundle ", index, " once it is"));
    }
    rpc::PlacementGroupInfo pg = current;
    auto* bundle = pg.mutable_bundles(index);
    node_id = bundle->node_id();
    bundle->clear_node_id();
    bundle->set_released(true);
    bool all_placed = std::all_of(pg.bundles().begin(), pg.bundles().end(), [](const auto& b) {
      return b.released() || !b.node_id().empty();
    });
    if (all_placed && pg.state() == rpc::PG_RESCHEDULING) pg.set_state(rpc::PG_CREATED);
    SaveLocked(pg);
    write = LastWriteLocked(pg_id);
  }
  absl::Status persisted = write.Wait();  // released for good, as with Remove
  actors_->KillGroup(pg_id, index);
  if (!node_id.empty()) {
    scheduler_->ReleaseBundles(pg_id, {index});
    if (std::string address = AddressOf(node_id); !address.empty()) {
      SendCancel(pg_id, index, node_id, address, 1);  // a released bundle is never placed again
    }
    SyncAvailable(*scheduler_, nodes_, node_id);
  }
  spdlog::info("placement group {}: bundle {} released", ShortId(pg_id), index);
  actors_->ScheduleNow();
  ScheduleNow();
  return persisted;
}

std::optional<rpc::PlacementGroupInfo> GcsPlacementGroupManager::Get(
    const std::string& pg_id) const {
  absl::MutexLock lock(&mu_);
  const rpc::PlacementGroupInfo* pg = groups_.Find(pg_id);
  if (pg == nullptr) return std::nullopt;
  return *pg;
}

std::optional<rpc::PlacementGroupInfo> GcsPlacementGroupManager::GetByName(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, pg] : groups_.entries()) {
    if (pg.name() == name && pg.state() != rpc::PG_REMOVED) return pg;
  }
  return std::nullopt;
}

std::vector<rpc::PlacementGroupInfo> GcsPlacementGroupManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::PlacementGroupInfo> out;
  for (const auto& [id, pg] : groups_.entries()) out.push_back(pg);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.create_time_ms(), a.placement_group_id()) <
           std::make_tuple(b.create_time_ms(), b.placement_group_id());
  });
  return out;
}

absl::StatusOr<rpc::PlacementGroupInfo> GcsPlacementGroupManager::WaitReady(
    const std::string& pg_id, absl::Duration timeout) {
  rpc::PlacementGroupInfo out;
  PendingWrite write;
  {
    absl::MutexLock lock(&mu_);
    auto settled = [this, &pg_id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> bool {
      const rpc::PlacementGroupInfo* pg = groups_.Find(pg_id);
      return pg == nullptr || pg->state() == rpc::PG_CREATED || pg->state() == rpc::PG_REMOVED;
    };
    mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
    const rpc::PlacementGroupInfo* pg = groups_.Find(pg_id);
    if (pg == nullptr) return absl::NotFoundError(absl::StrCat("no placement group ", pg_id));
    out = *pg;
    write = LastWriteLocked(pg_id);
  }
  // Ready means persisted: the caller hears CREATED only once the store has it.
  if (auto s = write.Wait(); !s.ok()) return s;
  return out;
}

absl::Status GcsPlacementGroupManager::CheckActorBundle(const std::string& pg_id, int bundle_index,
                                                        const Resources& request) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<const rpc::PlacementGroupInfo*> found = FindBundleLocked(
      pg_id, bundle_index, /*any_ok=*/true, "actor: ", "create the actor elsewhere");
  if (!found.ok()) return found.status();
  const rpc::PlacementGroupInfo* pg = *found;
  if (bundle_index >= 0 && pg->bundles(bundle_index).released()) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor: bundle ", bundle_index, " of ", Describe(*pg),
                     " was released; create the actor outside the group or in another bundle"));
  }
  for (int i = 0; i < pg->bundles_size(); ++i) {
    if (bundle_index >= 0 && i != bundle_index) continue;
    if (pg->bundles(i).released()) continue;
    if (rpc::FromProto(pg->bundles(i).resources()).Contains(request)) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "actor: needs ", request.ToString(), ", more than ",
      bundle_index >= 0 ? absl::StrCat("bundle ", bundle_index, " of ") : "any bundle of ",
      Describe(*pg), " holds"));
}

void GcsPlacementGroupManager::OnBundlesLost(const std::vector<std::pair<std::string, int>>& lost) {
  if (lost.empty()) return;
  std::vector<std::pair<rpc::PlacementGroupInfo, std::vector<int>>> starts;
  {
    absl::MutexLock lock(&mu_);
    std::map<std::string, std::vector<int>> by_group;
    for (const auto& [pg_id, index] : lost) by_group[pg_id].push_back(index);
    for (const auto& [pg_id, indices] : by_group) {
      const rpc::PlacementGroupInfo* found = groups_.Find(pg_id);
      if (found == nullptr || found->state() == rpc::PG_REMOVED) continue;
      rpc::PlacementGroupInfo pg = *found;
      for (int i : indices) {
        if (i < pg.bundles_size()) pg.mutable_bundles(i)->clear_node_id();
      }
      if (pg.state() == rpc::PG_CREATED) pg.set_state(rpc::PG_RESCHEDULING);
      SaveLocked(pg);
      spdlog::warn("{}: {} bundle(s) lost with their node(s); rescheduling them", Describe(pg),
                   indices.size());
      // Ahead of the groups that were never placed.
      queue_.erase(std::remove(queue_.begin(), queue_.end(), pg_id), queue_.end());
      queue_.push_front(pg_id);
    }
    ScheduleLocked(&starts);
  }
  Run(std::move(starts));
}

void GcsPlacementGroupManager::ScheduleNow() {
  std::vector<std::pair<rpc::PlacementGroupInfo, std::vector<int>>> starts;
  {
    absl::MutexLock lock(&mu_);
    if (queue_.empty()) return;
    ScheduleLocked(&starts);
  }
  Run(std::move(starts));
}

}  // namespace phalanx::gcs
