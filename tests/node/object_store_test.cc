// The node's object store on disk (runtime/node/object_store.h): a store kept in a directory
// of its own (--object-store-dir) behind a link in /dev/shm, removed with that directory.
#include "runtime/node/object_store.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace phalanx::node {
namespace {

namespace fs = std::filesystem;

class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phalanx-store-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    node_ = absl::StrCat("test-", ::getpid(), "-", fs::path(root_).filename().string().substr(24));
    anchor_ = ObjectStoreDir(node_);
    data_ = ObjectStoreDataDir(root_, node_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove(anchor_, ec);  // the link, never what it names
    fs::remove_all(root_, ec);
  }

  std::string root_, node_, anchor_, data_;
};

TEST_F(ObjectStoreTest, ALinkedStoreLivesInItsDirectoryAndGoesWithIt) {
  const std::string spill = root_ + "/spill";
  ASSERT_TRUE(CreateObjectStore(anchor_, spill, 1 << 20, data_).ok());
  EXPECT_TRUE(fs::is_symlink(anchor_));
  EXPECT_EQ(fs::read_symlink(anchor_).string(), data_);
  EXPECT_TRUE(fs::exists(data_ + "/.capacity"));  // written through the link
  // A value written by its owner through the store's path lands in the directory.
  fs::create_directories(anchor_ + "/123-456");
  std::ofstream(anchor_ + "/123-456/obj") << "bytes";
  EXPECT_TRUE(fs::exists(data_ + "/123-456/obj"));
  // Made again (a node restarted with the same id): the link stays right.
  ASSERT_TRUE(CreateObjectStore(anchor_, spill, 1 << 20, data_).ok());
  EXPECT_EQ(fs::read_symlink(anchor_).string(), data_);

  EXPECT_EQ(SweepObjectStore(anchor_), 1);  // pid 123 started at tick 456: not alive
  for (const char* file : {"/.capacity", "/.spill", "/.node"}) ::unlink((anchor_ + file).c_str());
  RemoveObjectStoreDir(anchor_);
  EXPECT_FALSE(fs::exists(fs::symlink_status(anchor_)));
  EXPECT_FALSE(fs::exists(data_));
}

TEST_F(ObjectStoreTest, AStaleLinkedStoreIsRemovedWithWhatItNames) {
  ASSERT_TRUE(CreateObjectStore(anchor_, root_ + "/spill", 1 << 20, data_).ok());
  std::ofstream(data_ + "/.node", std::ios::trunc) << "999999999-1";  // a node manager gone
  EXPECT_GE(RemoveStaleObjectStores(""), 1);
  EXPECT_FALSE(fs::exists(fs::symlink_status(anchor_)));
  EXPECT_FALSE(fs::exists(data_));
}

TEST_F(ObjectStoreTest, ALiveNodesLinkedStoreIsLeftAlone) {
  ASSERT_TRUE(CreateObjectStore(anchor_, root_ + "/spill", 1 << 20, data_).ok());
  RemoveStaleObjectStores("");  // its .node names this process, which runs
  EXPECT_TRUE(fs::is_symlink(anchor_));
  EXPECT_TRUE(fs::exists(data_ + "/.capacity"));
}

TEST_F(ObjectStoreTest, TheDefaultCapacityIsBoundedByTheDirectorysRoom) {
  struct statvfs room {};
  ASSERT_EQ(::statvfs(root_.c_str(), &room), 0);
  const int64_t free_bytes = static_cast<int64_t>(room.f_bavail) * room.f_frsize;
  EXPECT_GT(DefaultObjectStoreBytes(root_), 0);
  EXPECT_LE(DefaultObjectStoreBytes(root_), free_bytes);
}

}  // namespace
}  // namespace phalanx::node
