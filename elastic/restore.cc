// The controller's restore from memory: when no rank holds the job's state (every rank was
// lost), the newest snapshot that a node still holds (node/snapshot_store.h: one its ranks
// wrote, or a peer's copy) is loaded by the rank nearest to it, before any checkpoint on disk.
#include <algorithm>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "base/system.h"
#include "elastic/controller_internal.h"
#include "elastic/snapshot_writer.h"
#include "worker/core_worker.h"

namespace phalanx::elastic {

Controller::Restored Controller::RestoreFromSnapshot(const std::string& lost, int64_t disk_step) {
  if (!spec_.snapshot_enabled || members_.empty()) return Restored::kNone;
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  const std::string token = cw != nullptr ? cw->options().token : "";
  auto nodes = gcs_->GetAllNodes(/*alive_only=*/true);
  if (!nodes.ok()) return Restored::kNone;
  // Every node is asked at once; one that does not answer in time is left out.
  std::vector<std::future<absl::StatusOr<std::vector<node::Snapshot>>>> asked;
  for (const rpc::NodeInfo& n : *nodes) {
    asked.push_back(std::async(std::launch::async, [address = n.address(), &token, this] {
      return ListNodeSnapshots(address, token, job_id_, kTimeouts.snapshot_list);
    }));
  }
  struct Found {
    node::Snapshot snapshot;
    const rpc::NodeInfo* node;
  };
  std::vector<Found> found;
  for (size_t i = 0; i < asked.size(); ++i) {
    auto held = asked[i].get();
    if (!held.ok()) continue;
    for (node::Snapshot& s : *held) {
      // Past the last agreed step, only a step of the last epoch counts: every rank took part
      // in its collectives, so it is the same wherever it was finished (as Adopt takes it).
      // One of an earlier epoch was rolled back. A restarted controller knows no agreed step,
      // and takes the newest, as Adopt does.
      if (agreed_ > 0 && s.step > agreed_ && s.epoch < epoch_) continue;
      if (s.step < disk_step || s.step <= 0) continue;
      found.push_back({std::move(s), &(*nodes)[i]});
    }
  }
  if (found.empty()) return Restored::kNone;
  // The newest step (of its newest epoch: an older epoch's copy of a step was rolled back).
  auto newer = [](const node::Snapshot& a, const node::Snapshot& b) {
    return a.step != b.step ? a.step > b.step : a.epoch > b.epoch;
  };
  std::stable_sort(found.begin(), found.end(),
                   [&](const Found& a, const Found& b) { return newer(a.snapshot, b.snapshot); });
  const int64_t step = found.front().snapshot.step;
  const int64_t epoch = found.front().snapshot.epoch;
  // The nearest copy: on a member's node (read in place), its own rank's before a peer's.
  std::vector<std::string> member_nodes;
  for (const Member& m : members_) {
    member_nodes.push_back(m.node_id.empty() ? ActorState(m.actor_id).node_id() : m.node_id);
  }
  const Found* pick = nullptr;
  size_t loader = 0;
  int best = -1;
  for (const Found& f : found) {
    if (f.snapshot.step != step || f.snapshot.epoch != epoch) break;
    auto on = std::find(member_nodes.begin(), member_nodes.end(), f.node->node_id());
    int score = (on != member_nodes.end() ? 2 : 0) + (f.snapshot.from_node.empty() ? 1 : 0);
    if (score > best) {
      best = score;
      pick = &f;
      loader = on != member_nodes.end() ? static_cast<size_t>(on - member_nodes.begin()) : 0;
    }
  }
  const bool local = member_nodes[loader] == pick->node->node_id();
  std::string where = absl::StrCat(
      "node memory on ", ShortId(pick->node->node_id()),
      pick->snapshot.from_node.empty()
          ? ""
          : absl::StrCat(" (a copy from ", ShortId(pick->snapshot.from_node), ")"),
      local ? ""
            : absl::StrCat(", read over the network by a rank on ", ShortId(member_nodes[loader])));
  // The loader becomes rank 0: the others receive its state when the epoch forms.
  std::swap(members_[0], members_[loader]);
  const absl::Time load_start = absl::Now();
  auto loaded = Rank0Answer(
      members_[0].trainer().LoadSnapshot(pick->node->address(), step),
      absl::StrCat("while it loaded the snapshot of step ", step),
      CheckpointPhase(absl::StrCat("loading the snapshot of step ", step, " from ", where)));
  if (!loaded.ok()) {
    spdlog::warn("job {}: rank 0 did not load the snapshot of step {} from {}: {}", job_id_, step,
                 where, loaded.status().message());
    // A snapshot that cannot be loaded (a task error) is not tried again: disk next.
    return worker::IsTaskError(loaded.status()) ? Restored::kNone : Restored::kRankLost;
  }
  if (*loaded < 0) return Restored::kNone;  // pruned or freed before it was read
  Event("restore_from_snapshot",
        absl::StrCat(lost.empty() ? "" : absl::StrCat(lost, ": "), "restored step ", step, " from ",
                     where, " (", pick->snapshot.bytes, " bytes in ",
                     absl::StrFormat("%.3f", absl::ToDoubleSeconds(absl::Now() - load_start)),
                     " s, no disk read",
                     agreed_ > 0 ? absl::StrCat("; the last agreed step was ", agreed_) : "", ")"));
  timeline_.NoteRestored(absl::StrCat("step ", step, " from ", where));
  agreed_ = step;
  return Restored::kRestored;
}

}  // namespace phalanx::elastic
