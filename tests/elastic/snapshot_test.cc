// Snapshots in node memory (node/snapshot_store.h, elastic/snapshot_writer.h): a job that loses
// every rank at once, with no checkpoint on disk, goes on from the newest step a node holds in
// memory, as if nothing had happened (the weights of an uninterrupted run, every sample seen
// once per pass); with the controller killed too, and through a GCS restart; and the memory is
// given back when the job ends.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "node/object_store.h"
#include "node/snapshot_store.h"
#include "tests/elastic/elastic_fixture.h"

namespace phalanx::elastic::test {
namespace {

// The step a restore_from_snapshot event names ("restored step N from ..."), and the agreed
// step it says the controller knew ("the last agreed step was A"); -1 when absent.
std::pair<int64_t, int64_t> Restored(const JobStatus& s) {
  int64_t step = -1, agreed = -1;
  for (const auto& e : s.events) {
    if (e.kind != "restore_from_snapshot") continue;
    size_t at = e.message.find("restored step ");
    if (at != std::string::npos) step = std::atoll(e.message.c_str() + at + 14);
    at = e.message.find("the last agreed step was ");
    if (at != std::string::npos) agreed = std::atoll(e.message.c_str() + at + 25);
  }
  return {step, agreed};
}

// A node id of this test process alone: a node's store is /dev/shm/phalanx-objects-<id>, and
// tests that run at once must not share one.
std::string Node(const std::string& name) { return absl::StrCat(name, "-", ::getpid()); }

void KillRanks(const JobStatus& now, const std::function<int(const JobStatus&, int)>& pid_of) {
  for (int r = 0; r < static_cast<int>(now.ranks.size()); ++r) {
    int pid = pid_of(now, r);
    if (pid > 0) ::kill(pid, SIGKILL);
  }
}

TEST_F(ElasticTest, EveryRankSigkilledAtOnceResumesFromNodeMemoryWithNoStepLost) {
  AddNode(Node("node-a"), 4);
  JobSpec spec = Spec(3, 1, 3);  // no checkpoint.dir: nothing on disk
  auto baseline = Baseline(spec);
  int64_t killed_at = -1;
  std::string job_id;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (killed_at >= 0 || now.step < 40 || now.world_size != 3) return;
    job_id = now.job_id.str();
    KillRanks(now, [&](const JobStatus& st, int r) { return PidOfRank(st, r); });
    killed_at = now.step;
  });
  ASSERT_GE(killed_at, 40);
  PrintEvents(s, "restore_from_snapshot");
  ExpectHealed(s, spec, baseline, 3);
  auto [step, agreed] = Restored(s);
  // From this node's memory, the step the controller had agreed on (or one past it that every
  // rank had finished): no committed step lost, and no disk read (there is no checkpoint).
  EXPECT_TRUE(HasEvent(s, "restore_from_snapshot", "from node memory on")) << FormatStatus(s);
  // The fault's recovery record names it too, as `phalanx job status` shows it.
  bool named = false;
  for (const auto& r : s.recoveries) {
    named = named ||
            absl::StrContains(r.restored_from, absl::StrCat("step ", step, " from node memory on"));
  }
  EXPECT_TRUE(named) << FormatStatus(s);
  EXPECT_THAT(FormatStatus(s), ::testing::HasSubstr("; restored step ")) << FormatStatus(s);
  EXPECT_GE(step, killed_at) << FormatStatus(s);
  EXPECT_GE(step, agreed) << FormatStatus(s);
  EXPECT_FALSE(HasEvent(s, "restart_from_checkpoint")) << FormatStatus(s);
  // The job ended: its snapshots are gone from the node's store.
  const std::string store = node::ObjectStoreDir(Node("node-a"));
  EXPECT_TRUE(testing::WaitFor([&] { return node::ListSnapshots(store, job_id).empty(); },
                               absl::Seconds(10)))
      << "the snapshots of a finished job are still in " << store;
}

TEST_F(ElasticTest, EveryRankAndTheControllerKilledThroughAGcsRestartResumeFromNodeMemory) {
  AddNode(Node("node-a"), 4);
  JobSpec spec = Spec(3, 1, 3);
  auto baseline = Baseline(spec);
  int64_t killed_at = -1;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (killed_at >= 0 || now.step < 40 || now.world_size != 3) return;
    auto job = client_->GetJob(now.job_id.str());
    ASSERT_TRUE(job.ok()) << job.status();
    auto controller = client_->GetActor(job->controller_actor_id());
    ASSERT_TRUE(controller.ok() && controller->pid() > 0) << controller.status();
    KillRanks(now, [&](const JobStatus& st, int r) { return PidOfRank(st, r); });
    ::kill(controller->pid(), SIGKILL);
    // And the GCS, while nothing of the job runs.
    gcs_->Kill9();
    absl::SleepFor(absl::Milliseconds(300));
    gcs_->Restart();
    killed_at = now.step;
  });
  ASSERT_GE(killed_at, 40);
  PrintEvents(s, "restore_from_snapshot");
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "restore_from_snapshot", "from node memory on")) << FormatStatus(s);
  EXPECT_GE(Restored(s).first, killed_at) << FormatStatus(s);
  EXPECT_FALSE(HasEvent(s, "restart_from_checkpoint")) << FormatStatus(s);
}

TEST_F(ElasticTest, ASnapshotLostWithItsNodeIsRestoredFromThePeersCopy) {
  // Two nodes (two node managers of this machine, each with a store of its own): the ranks run
  // on node-a, whose rank copies each snapshot to node-b. node-a's store is then wiped, as if its
  // host had gone with its memory, and every rank is killed: the restore reads node-b's copy.
  AddNode(Node("node-a"), 4);
  AddNode(Node("node-b"), 4);
  JobSpec spec = Spec(2, 1, 2);
  spec.nodes = {Node("node-a")};
  auto baseline = Baseline(spec);
  int64_t killed_at = -1;
  std::string job_id;
  const std::string store_a = node::ObjectStoreDir(Node("node-a"));
  const std::string store_b = node::ObjectStoreDir(Node("node-b"));
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (killed_at >= 0 || now.step < 40 || now.world_size != 2) return;
    job_id = now.job_id.str();
    // node-b holds a copy (from node-a: a peer's) before the fault.
    auto copies = node::ListSnapshots(store_b, job_id);
    if (copies.empty()) return;
    EXPECT_EQ(copies[0].from_node, Node("node-a"));
    KillRanks(now, [&](const JobStatus& st, int r) { return PidOfRank(st, r); });
    RemoveAll(node::SnapshotJobDir(store_a, job_id)).IgnoreError();
    killed_at = now.step;
  });
  ASSERT_GE(killed_at, 40);
  PrintEvents(s, "restore_from_snapshot");
  ExpectHealed(s, spec, baseline, 2);
  EXPECT_TRUE(HasEvent(s, "restore_from_snapshot", "a copy from")) << FormatStatus(s);
  EXPECT_TRUE(HasEvent(s, "restore_from_snapshot", "read over the network")) << FormatStatus(s);
  EXPECT_GE(Restored(s).first, killed_at - 20) << FormatStatus(s);
}

TEST_F(ElasticTest, ASnapshotThatDoesNotFitIsSkippedWithAMessageAndTrainingGoesOn) {
  // An object store of 1 KiB: the regression's state (about 2 KiB) never fits.
  AddNode(Node("node-a"), 4, {}, 1024);
  JobSpec spec = Spec(3, 1, 3);
  auto baseline = Baseline(spec);
  JobStatus s = Run(spec);
  ExpectHealed(s, spec, baseline, 3);
  // The ranks' logs (and, on a cluster started with `phalanx start --head`, the job's log that
  // `phalanx job logs` and fit() show) say so once per rank that tried, not once a step, with
  // the sizes and the fix.
  std::string said;
  int times = 0;
  for (const std::string& f : ListDir(gcs_->dir() + "/logs")) {
    auto text = ReadFile(gcs_->dir() + "/logs/" + f);
    if (!text.ok()) continue;
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      if (!absl::StrContains(line, s.job_id.str()) ||
          !absl::StrContains(line, "was not kept in this node's memory")) {
        continue;
      }
      said = std::string(line);
      ++times;
    }
  }
  std::printf("%d time(s): %s\n", times, said.c_str());
  EXPECT_GE(times, 1);
  EXPECT_LE(times, 3);
  EXPECT_TRUE(absl::StrContains(said, "does not fit in the node's object store")) << said;
  EXPECT_TRUE(absl::StrContains(said, "--object-store-memory")) << said;
  EXPECT_TRUE(node::ListSnapshots(node::ObjectStoreDir(Node("node-a")), s.job_id.str()).empty());
}

TEST_F(ElasticTest, WithSnapshotsOffEveryRankLostRestartsFromTheCheckpoint) {
  AddNode(Node("node-a"), 4);
  JobSpec spec = Spec(3, 1, 3);
  spec.snapshot_enabled = false;
  spec.checkpoint_dir = dir_.path() + "/ckpt";
  spec.checkpoint_interval = 20;
  auto baseline = Baseline(spec);
  bool lost = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (lost || now.last_checkpoint_step < 40 || now.world_size != 3) return;
    KillRanks(now, [&](const JobStatus& st, int r) { return PidOfRank(st, r); });
    lost = true;
  });
  ASSERT_TRUE(lost);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_FALSE(HasEvent(s, "restore_from_snapshot")) << FormatStatus(s);
  EXPECT_TRUE(HasEvent(s, "restart_from_checkpoint", "(checkpoint)")) << FormatStatus(s);
  EXPECT_TRUE(node::ListSnapshots(node::ObjectStoreDir(Node("node-a")), s.job_id.str()).empty());
}

}  // namespace
}  // namespace phalanx::elastic::test
