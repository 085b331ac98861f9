// Elastic jobs' snapshots in a node's store (node/snapshot_store.h): whole files or none, the
// newest steps kept (of a step, its newest epoch), rolled-back steps dropped, the store's
// capacity kept with a message that names the fix, and the bytes counted in the store's usage.
#include "node/snapshot_store.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "node/object_store.h"

namespace phalanx::node {
namespace {

namespace fs = std::filesystem;

class SnapshotStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phalanx-snapshot-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    store_ = tmpl;
    ASSERT_TRUE(CreateObjectStore(store_, store_ + "-spill", 64 << 20).ok());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(store_, ec);
    fs::remove_all(store_ + "-spill", ec);
  }
  std::vector<int64_t> Steps() {
    std::vector<int64_t> out;
    for (const Snapshot& s : ListSnapshots(store_, "job1")) out.push_back(s.step);
    return out;
  }

  std::string store_;
};

TEST_F(SnapshotStoreTest, AWrittenSnapshotReadsBackWithItsStep) {
  std::string state(3 << 20, 'x');
  state[12345] = 'y';
  ASSERT_TRUE(WriteSnapshot(store_, "job1", 412, 3, "", state).ok());
  auto listed = ListSnapshots(store_, "job1");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].step, 412);
  EXPECT_EQ(listed[0].epoch, 3);
  EXPECT_EQ(listed[0].bytes, static_cast<int64_t>(state.size()));
  EXPECT_TRUE(listed[0].from_node.empty());
  auto read = ReadSnapshot(listed[0].path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->first, 412);
  EXPECT_EQ(read->second, state);
  // Streamed in chunks, as a peer reads it: the same bytes, without the step line.
  std::string streamed;
  ASSERT_TRUE(StreamSnapshot(listed[0].path, 1 << 20, [&](absl::string_view chunk, int64_t size) {
                EXPECT_EQ(size, static_cast<int64_t>(state.size()));
                streamed.append(chunk.data(), chunk.size());
                return true;
              }).ok());
  EXPECT_EQ(streamed, state);
  // The same step and epoch again: already there.
  EXPECT_TRUE(absl::IsAlreadyExists(WriteSnapshot(store_, "job1", 412, 3, "", "z")));
  EXPECT_TRUE(HasSnapshot(store_, "job1", 412, 2));
  EXPECT_FALSE(HasSnapshot(store_, "job1", 412, 4));
}

TEST_F(SnapshotStoreTest, TheNewestThreeStepsAreKeptAndARollbackDropsTheStepsPastIt) {
  for (int64_t step = 1; step <= 6; ++step) {
    ASSERT_TRUE(WriteSnapshot(store_, "job1", step, 1, "", "state").ok());
  }
  EXPECT_EQ(Steps(), (std::vector<int64_t>{6, 5, 4}));
  // A peer's copy of a step this node holds already is refused (the same state); of a newer
  // step it is kept, named by its origin.
  EXPECT_TRUE(absl::IsAlreadyExists(WriteSnapshot(store_, "job1", 6, 1, "node-b", "state")));
  ASSERT_TRUE(WriteSnapshot(store_, "job1", 7, 1, "node-b", "state").ok());
  EXPECT_EQ(Steps(), (std::vector<int64_t>{7, 6, 5}));
  EXPECT_EQ(ListSnapshots(store_, "job1")[0].from_node, "node-b");
  // This node's own copy of step 7 sits beside the peer's (it counts as that step, not one
  // more), and is listed first.
  ASSERT_TRUE(WriteSnapshot(store_, "job1", 7, 2, "", "state").ok());
  // Step 7 ran again in epoch 2: its epoch-1 copy is out of date and went.
  auto listed = ListSnapshots(store_, "job1");
  EXPECT_EQ(Steps(), (std::vector<int64_t>{7, 6, 5}));
  EXPECT_EQ(listed[0].epoch, 2);
  EXPECT_TRUE(listed[0].from_node.empty());
  ASSERT_TRUE(WriteSnapshot(store_, "job1", 7, 2, "node-c", "state").code() ==
              absl::StatusCode::kAlreadyExists);
  // Every rank goes back to step 5: 6 and 7 will run again.
  PruneSnapshots(store_, "job1", kSnapshotsKept, 5);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{5}));
}

TEST_F(SnapshotStoreTest, ASnapshotThatDoesNotFitIsRefusedWithTheFixAndLeavesNoFile) {
  std::string big(80 << 20, 'x');
  absl::Status s = WriteSnapshot(store_, "job1", 7, 1, "", big);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("does not fit in the node's object store"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--object-store-memory"), std::string::npos) << s;
  EXPECT_NE(s.message().find("snapshot.enabled"), std::string::npos) << s;
  EXPECT_TRUE(ListSnapshots(store_, "job1").empty());
  EXPECT_EQ(SnapshotBytes(store_), 0);
}

TEST_F(SnapshotStoreTest, AWriterDestroyedBeforeCommitLeavesNothing) {
  {
    SnapshotFileWriter writer;
    ASSERT_TRUE(writer.Open(store_, "job1", 3, 1, "", 10).ok());
    ASSERT_TRUE(writer.Append("12345").ok());
    // Not committed: a rank killed mid-copy.
  }
  EXPECT_TRUE(ListSnapshots(store_, "job1").empty());
  EXPECT_EQ(SnapshotBytes(store_), 0);
  SnapshotFileWriter short_writer;
  ASSERT_TRUE(short_writer.Open(store_, "job1", 3, 1, "", 10).ok());
  ASSERT_TRUE(short_writer.Append("12345").ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(short_writer.Commit()));
  EXPECT_TRUE(ListSnapshots(store_, "job1").empty());
}

TEST_F(SnapshotStoreTest, SnapshotsCountInTheStoresUsageAndBadNamesAreRefused) {
  ASSERT_TRUE(WriteSnapshot(store_, "job1", 1, 1, "", std::string(1 << 20, 'x')).ok());
  rpc::ObjectStoreUsage usage = MeasureObjectStore(store_, store_ + "-spill", 64 << 20);
  EXPECT_GE(usage.snapshot_bytes(), 1 << 20);
  EXPECT_GE(usage.used_bytes(), usage.snapshot_bytes());
  EXPECT_EQ(SnapshotJobs(store_), std::vector<std::string>{"job1"});
  // The node's sweep of dead owners leaves snapshots alone (they outlive their writers).
  SweepObjectStore(store_);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1}));
  EXPECT_TRUE(absl::IsInvalidArgument(WriteSnapshot(store_, "../etc", 1, 1, "", "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(WriteSnapshot(store_, "job1", 1, 1, "a/b", "x")));
}

}  // namespace
}  // namespace phalanx::node
