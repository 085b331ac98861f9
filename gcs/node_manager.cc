#include "gcs/node_manager.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/system.h"

namespace phalanx::gcs {

GcsNodeManager::GcsNodeManager(Store* store, GcsPublisher* publisher, Options options)
    : publisher_(publisher),
      options_(options),
      nodes_(store, "nodes"),
      members_version_(absl::ToUnixNanos(absl::Now())) {
  publisher_->SetSnapshotProvider(rpc::NODE, [this](const auto& consume) {
    absl::MutexLock lock(&mu_);
    std::vector<rpc::PubMessage> out;
    for (const auto& [id, node] : nodes_.entries()) {
      rpc::PubMessage m;
      m.set_key(id);
      *m.mutable_node() = node;
      out.push_back(std::move(m));
    }
    consume(std::move(out));
  });
  publisher_->SetSnapshotProvider(rpc::RESOURCES, [this](const auto& consume) {
    absl::MutexLock lock(&mu_);
    std::vector<rpc::PubMessage> out;
    for (const auto& [id, node] : nodes_.entries()) {
      if (node.state() != rpc::NODE_ALIVE) continue;
      rpc::PubMessage m;
      m.set_key(id);
      auto* event = m.mutable_resource();
      event->set_kind(rpc::ResourceEvent::NODE_ADDED);
      event->set_node_id(id);
      *event->mutable_total() = node.total();
      *event->mutable_available() = node.available();
      out.push_back(std::move(m));
    }
    consume(std::move(out));
  });
}

absl::Status GcsNodeManager::Load() {
  absl::MutexLock lock(&mu_);
  if (auto s = nodes_.Load(); !s.ok()) return s;
  absl::Time deadline = absl::Now() + std::max(options_.restart_grace, options_.node_timeout);
  int alive = 0;
  for (const auto& [id, node] : nodes_.entries()) {
    if (node.state() == rpc::NODE_ALIVE) {
      deadline_[id] = deadline;
      ++alive;
    }
  }
  spdlog::info("loaded {} nodes ({} alive, given {} s to heartbeat)", nodes_.size(), alive,
               absl::ToDoubleSeconds(options_.restart_grace));
  return absl::OkStatus();
}

namespace {

void MakeNodeMessages(const rpc::NodeInfo& node, rpc::ResourceEvent::Kind kind,
                      rpc::PubMessage* changed, rpc::PubMessage* resources) {
  changed->set_channel(rpc::NODE);
  changed->set_key(node.node_id());
  *changed->mutable_node() = node;
  resources->set_channel(rpc::RESOURCES);
  resources->set_key(node.node_id());
  auto* event = resources->mutable_resource();
  event->set_kind(kind);
  event->set_node_id(node.node_id());
  *event->mutable_total() = node.total();
  *event->mutable_available() = node.available();
}

// Whether `a` and `b` name the same amounts. Cheaper than MessageDifferencer, which walks
// them by reflection: availability is compared on every placement, and is often unchanged
// (a placement group's round updates the same nodes twice).
bool SameAmounts(const rpc::ResourceSet& a, const rpc::ResourceSet& b) {
  if (a.amounts_size() != b.amounts_size()) return false;
  for (const auto& [name, amount] : a.amounts()) {
    auto it = b.amounts().find(name);
    if (it == b.amounts().end() || it->second != amount) return false;
  }
  return true;
}

}  // namespace

PendingWrite GcsNodeManager::SaveLocked(const rpc::NodeInfo& node, rpc::ResourceEvent::Kind kind) {
  rpc::PubMessage changed, resources;
  MakeNodeMessages(node, kind, &changed, &resources);
  PendingWrite write = nodes_.Put(node.node_id(), node, [this, changed, resources] {
    publisher_->Publish(changed);
    publisher_->Publish(resources);
  });
  last_write_[node.node_id()] = write;
  return write;
}

void GcsNodeManager::PublishLocked(const rpc::NodeInfo& node, rpc::ResourceEvent::Kind kind) {
  rpc::PubMessage changed, resources;
  MakeNodeMessages(node, kind, &changed, &resources);
  // Under the table's lock, as the snapshot providers hold it: no subscriber's snapshot can
  // fall between this change and its publication.
  publisher_->Publish(std::move(changed));
  publisher_->Publish(std::move(resources));
}

absl::Status GcsNodeManager::Register(rpc::NodeInfo node) {
  if (node.node_id().empty()) return absl::InvalidArgumentError("RegisterNode: node_id is empty");
  if (node.address().empty()) {
    return absl::InvalidArgumentError("RegisterNode: address is empty (want host:port)");
  }
  PendingWrite write;
  bool first_time = false;
  {
    absl::MutexLock lock(&mu_);
    const rpc::NodeInfo* existing = nodes_.Find(node.node_id());
    if (existing != nullptr && existing->state() == rpc::NODE_DEAD) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", node.node_id(), " was declared dead (", existing->death_reason(),
                       "); a node manager that comes back must register with a new id"));
    }
    first_time = existing == nullptr;
    node.set_state(rpc::NODE_ALIVE);
    if (existing != nullptr) {
      node.set_start_time_ms(existing->start_time_ms());
    } else if (node.start_time_ms() == 0) {
      node.set_start_time_ms(NowMs());
    }
    if (!node.has_available()) *node.mutable_available() = node.total();
    write = SaveLocked(
        node, first_time ? rpc::ResourceEvent::NODE_ADDED : rpc::ResourceEvent::RESOURCES_CHANGED);
    deadline_[node.node_id()] = absl::Now() + options_.node_timeout;
    heard_[node.node_id()] = absl::Now();
    ++members_version_;
  }
  if (auto s = write.WaitOrUndo(&mu_); !s.ok()) return s;
  spdlog::info("node {} {} at {} with {}", ShortId(node.node_id()),
               first_time ? "registered" : "re-registered", node.address(),
               node.total().DebugString());
  std::vector<std::function<void(const rpc::NodeInfo&)>> listeners;
  {
    absl::MutexLock lock(&mu_);
    listeners = registered_listeners_;
  }
  for (auto& l : listeners) l(node);
  return absl::OkStatus();
}

absl::Status GcsNodeManager::Heartbeat(const rpc::HeartbeatRequest& request, bool* unknown,
                                       bool* declared_dead, rpc::HeartbeatReply* reply) {
  *unknown = false;
  *declared_dead = false;
  PendingWrite write;
  {
    absl::MutexLock lock(&mu_);
    const rpc::NodeInfo* node = nodes_.Find(request.node_id());
    if (node == nullptr) {
      *unknown = true;
      return absl::OkStatus();
    }
    if (node->state() == rpc::NODE_DEAD) {
      *declared_dead = true;
      return absl::OkStatus();
    }
    deadline_[request.node_id()] = absl::Now() + options_.node_timeout;
    heard_[request.node_id()] = absl::Now();
    if (request.has_object_store()) object_stores_[request.node_id()] = request.object_store();
    if (request.reports_stopped()) {
      stopped_[request.node_id()].assign(request.stopped_workers().begin(),
                                         request.stopped_workers().end());
    }
    if (reply != nullptr) {
      reply->set_members_version(members_version_);
      // Only when they changed (every change bumps the version): the count walks the nodes.
      if (request.members_version() != members_version_) {
        reply->set_voters(static_cast<int32_t>(VotersLocked()));
        for (const auto& [id, d] : deadline_) {
          if (const rpc::NodeInfo* member = nodes_.Find(id)) reply->add_members(member->address());
        }
      }
    }
    if (request.has_available() && !SameAmounts(request.available(), node->available())) {
      rpc::NodeInfo updated = *node;
      *updated.mutable_available() = request.available();
      write = SaveLocked(updated, rpc::ResourceEvent::RESOURCES_CHANGED);
    }
  }
  return write.WaitOrUndo(&mu_);
}

absl::Status GcsNodeManager::UpdateAvailable(const std::string& node_id,
                                             const rpc::ResourceSet& available) {
  {
    absl::MutexLock lock(&mu_);
    const rpc::NodeInfo* node = nodes_.Find(node_id);
    if (node == nullptr || node->state() != rpc::NODE_ALIVE) {
      return absl::NotFoundError(absl::StrCat("node ", node_id, " is not alive"));
    }
    if (SameAmounts(available, node->available())) return absl::OkStatus();
    rpc::NodeInfo updated = *node;
    *updated.mutable_available() = available;
    auto last = last_write_.find(node_id);
    if (last == last_write_.end() || last->second.Done()) {
      // Every earlier state of the node is published (a write's publication runs before it
      // is done).
      nodes_.SetInMemory(node_id, std::move(updated));
      PublishLocked(*nodes_.Find(node_id), rpc::ResourceEvent::RESOURCES_CHANGED);
    } else {
      SaveLocked(updated, rpc::ResourceEvent::RESOURCES_CHANGED);
    }
  }
  // Nobody waits for a write that carries only availability: it is derived state.
  return absl::OkStatus();
}

PendingWrite GcsNodeManager::MarkDeadLocked(const std::string& node_id, const std::string& reason,
                                            rpc::NodeInfo* dead) {
  const rpc::NodeInfo* node = nodes_.Find(node_id);
  if (node == nullptr || node->state() == rpc::NODE_DEAD) return PendingWrite();
  rpc::NodeInfo updated = *node;
  updated.set_state(rpc::NODE_DEAD);
  updated.set_death_reason(reason);
  updated.set_end_time_ms(NowMs());
  updated.clear_available();
  deadline_.erase(node_id);
  heard_.erase(node_id);
  object_stores_.erase(node_id);
  stopped_.erase(node_id);
  knocked_.erase(node_id);
  ++members_version_;
  PendingWrite write = SaveLocked(updated, rpc::ResourceEvent::NODE_REMOVED);
  *dead = updated;
  return write;
}

absl::Status GcsNodeManager::MarkDead(const std::string& node_id, const std::string& reason) {
  return MarkAllDead({node_id}, reason);
}

absl::Status GcsNodeManager::MarkAllDead(const std::vector<std::string>& node_ids,
                                         const std::string& reason) {
  std::vector<rpc::NodeInfo> dead;
  std::vector<PendingWrite> writes;
  std::vector<std::function<void(const std::vector<rpc::NodeInfo>&)>> listeners;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& id : node_ids) {
      rpc::NodeInfo updated;
      PendingWrite write = MarkDeadLocked(id, reason, &updated);
      if (updated.node_id().empty()) continue;
      dead.push_back(std::move(updated));
      writes.push_back(std::move(write));
    }
    listeners = dead_listeners_;
  }
  // All the writes are in flight before the first wait: the store sends them together.
  absl::Status first;
  for (size_t i = 0; i < dead.size(); ++i) {
    absl::Status s = writes[i].Wait();
    if (!s.ok()) {
      spdlog::error("cannot record node {} as dead: {}", dead[i].node_id(), s.ToString());
      if (first.ok()) first = s;
    }
    spdlog::warn("node {} at {} is dead: {}", ShortId(dead[i].node_id()), dead[i].address(),
                 reason);
  }
  if (dead.empty()) return first;
  std::sort(dead.begin(), dead.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.start_time_ms(), a.node_id()) <
           std::make_tuple(b.start_time_ms(), b.node_id());
  });
  for (auto& l : listeners) l(dead);
  return first;
}

void GcsNodeManager::Stalled(absl::Duration how_long) {
  spdlog::warn("the GCS was stalled for {}: node heartbeat deadlines move by as much",
               absl::FormatDuration(how_long));
  absl::MutexLock lock(&mu_);
  for (auto& [id, deadline] : deadline_) deadline += how_long;
}

void GcsNodeManager::CheckHeartbeats() {
  std::vector<std::string> expired, overdue;
  size_t alive = 0, silent = 0;
  bool majority = false;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = absl::Now();
    alive = VotersLocked();
    for (const auto& [id, deadline] : deadline_) {
      // Silent: unheard for half the node timeout. Nodes cut off together expire a heartbeat
      // period or so apart; counted by expiry alone, the first would be a minority. The head
      // node shares this GCS's host: its silence is its own, never a partition's.
      const rpc::NodeInfo* node = nodes_.Find(id);
      bool head = node != nullptr && node->is_head();
      if (!head && now > deadline - options_.node_timeout / 2) ++silent;
      if (now <= deadline) continue;
      expired.push_back(id);
      if (now > deadline + options_.partition_timeout) overdue.push_back(id);
    }
    // A silent majority: this GCS (with whichever nodes still heartbeat) is more likely the
    // side that is cut off than most of the cluster dead at once. Ties go to this side, so
    // that a head and one other node can still declare that node dead.
    majority = !expired.empty() && silent * 2 > alive;
    if (majority && !holding_majority_) {
      spdlog::warn(
          "{} of the cluster's {} votes (its alive nodes) are silent at once: this GCS may be "
          "the one cut off; they are declared dead only after {} more without heartbeats "
          "(partition timeout), unless their hosts refuse connections",
          silent, alive, absl::FormatDuration(options_.partition_timeout));
    } else if (!majority && holding_majority_) {
      // The partition healed for some: those still silent were cut off as long, and their
      // heartbeats may be a moment behind. Each gets a node timeout from now, as after a
      // restart of this GCS.
      for (const auto& id : expired) deadline_[id] = now + options_.node_timeout;
      spdlog::info("most nodes heartbeat again; the {} still silent get {} to do so too",
                   expired.size(), absl::FormatDuration(options_.node_timeout));
      expired.clear();
    }
    holding_majority_ = majority;
    if (majority) expired.swap(overdue);
  }
  if (expired.empty()) return;
  // One batch, however many expired: a storm of failures costs one pass of the listeners
  // (one scan of the actor table, one round of scheduling), not one per node.
  MarkAllDead(
      expired,
      !majority
          ? absl::StrCat("missed heartbeats for ", absl::FormatDuration(options_.node_timeout))
          : absl::StrCat("missed heartbeats for ",
                         absl::FormatDuration(options_.node_timeout + options_.partition_timeout),
                         " while most nodes were silent (node timeout + partition "
                         "timeout)"))
      .IgnoreError();  // logged per node
}

void GcsNodeManager::KnockOnSilentNodes() {
  if (options_.knock_after <= absl::ZeroDuration()) return;
  std::vector<std::string> ids, addresses;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = absl::Now();
    for (const auto& [id, deadline] : deadline_) {
      // The deadline is node_timeout after the last heartbeat (moved on by GCS stalls, and
      // past the restart grace after a reload): the silence is measured the same way.
      absl::Time last_heard = deadline - options_.node_timeout;
      if (now - last_heard < options_.knock_after) continue;
      // Once per knock_after while the silence lasts.
      auto k = knocked_.find(id);
      if (k != knocked_.end() && k->second > last_heard && now - k->second < options_.knock_after) {
        continue;
      }
      const rpc::NodeInfo* node = nodes_.Find(id);
      if (node == nullptr) continue;
      knocked_[id] = now;
      ids.push_back(id);
      addresses.push_back(node->address());
    }
  }
  if (ids.empty()) return;
  std::vector<Knock> answers = KnockTcp(addresses, options_.knock_timeout);
  std::vector<std::string> gone;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (answers[i] != Knock::kRefused) continue;
      // A heartbeat that came in during the knock speaks louder than it.
      auto d = deadline_.find(ids[i]), k = knocked_.find(ids[i]);
      if (d == deadline_.end() || k == knocked_.end()) continue;
      if (d->second - options_.node_timeout > k->second) continue;
      gone.push_back(ids[i]);
    }
  }
  if (gone.empty()) return;
  MarkAllDead(gone,
              "its node manager is gone: it stopped heartbeating and its host refuses "
              "connections to its port")
      .IgnoreError();  // logged per node
}

std::optional<std::string> GcsNodeManager::StoppedState(const std::string& node_id,
                                                        const std::string& actor_id,
                                                        int attempt) const {
  absl::MutexLock lock(&mu_);
  auto it = stopped_.find(node_id);
  if (it == stopped_.end()) return std::nullopt;
  for (const auto& w : it->second) {
    if (w.actor_id() == actor_id && w.attempt() == attempt) return w.state();
  }
  return "";
}

std::vector<rpc::NodeInfo> GcsNodeManager::GetAll(bool alive_only) const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::NodeInfo> out;
  absl::Time now = absl::Now();
  for (const auto& [id, node] : nodes_.entries()) {
    if (alive_only && node.state() != rpc::NODE_ALIVE) continue;
    out.push_back(node);
    auto h = heard_.find(id);
    out.back().set_heartbeat_age_ms(
        h == heard_.end() ? -1 : std::max<int64_t>(0, absl::ToInt64Milliseconds(now - h->second)));
    if (auto st = object_stores_.find(id); st != object_stores_.end()) {
      *out.back().mutable_object_store() = st->second;
    }
    if (auto st = stopped_.find(id); st != stopped_.end()) {
      out.back().set_reports_stopped(true);
      for (const auto& w : st->second) *out.back().add_stopped_workers() = w;
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.start_time_ms(), a.node_id()) <
           std::make_tuple(b.start_time_ms(), b.node_id());
  });
  return out;
}

size_t GcsNodeManager::VotersLocked() const {
  bool head = false;
  for (const auto& [id, d] : deadline_) {
    const rpc::NodeInfo* node = nodes_.Find(id);
    if (node != nullptr && node->is_head()) head = true;
  }
  return deadline_.size() + (head ? 0 : 1);
}

absl::Duration GcsNodeManager::SilentFor(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  auto h = heard_.find(node_id);
  return h == heard_.end() ? absl::ZeroDuration() : absl::Now() - h->second;
}

std::optional<rpc::NodeInfo> GcsNodeManager::Get(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  const rpc::NodeInfo* node = nodes_.Find(node_id);
  if (node == nullptr) return std::nullopt;
  return *node;
}

void GcsNodeManager::AddDeadListener(
    std::function<void(const std::vector<rpc::NodeInfo>&)> listener) {
  absl::MutexLock lock(&mu_);
  dead_listeners_.push_back(std::move(listener));
}

void GcsNodeManager::AddRegisteredListener(std::function<void(const rpc::NodeInfo&)> listener) {
  absl::MutexLock lock(&mu_);
  registered_listeners_.push_back(std::move(listener));
}

}  // namespace phalanx::gcs
