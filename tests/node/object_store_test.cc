// The node's object store on disk (node/object_store.h): a store kept in a directory
// of its own (--object-store-dir) behind a link in /dev/shm, removed with that directory; and
// its cache of other nodes' values.
#include "node/object_store.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
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
    if (fs::is_symlink(fs::symlink_status(anchor_, ec))) {
      fs::remove(anchor_, ec);  // the link, never what it names
    } else {
      fs::remove_all(anchor_, ec);
    }
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

// This process as an owner or reader names it: "<pid>-<start time>".
std::string Self() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ', absl::SkipEmpty());
  return absl::StrCat(::getpid(), "-", fields[19]);
}

void Write(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << bytes;
}

TEST_F(ObjectStoreTest, TheCacheListsCopiesAndRemovesWhatDeadReadersLeft) {
  const std::string spill = root_ + "/spill";
  ASSERT_TRUE(CreateObjectStore(anchor_, spill, 1 << 20).ok());
  const std::string owner_dir = absl::StrCat(anchor_, "/", kObjectCacheDir, "/nodeA/1-2");
  Write(owner_dir + "/obj1", std::string(100, 'x'));
  Write(owner_dir + "/obj2", std::string(50, 'y'));
  Write(owner_dir + "/.obj3.123-456", "partial");  // its reader (pid 123) is not alive
  Write(owner_dir + "/.obj3.lock", "123-456");
  Write(owner_dir + "/.obj4." + Self(), "partial");  // a live reader's
  Write(owner_dir + "/.obj4.lock", Self());
  Write(owner_dir + "/.obj5.lock", "");  // being written this moment

  std::vector<CachedObject> cache = ListObjectCache(anchor_);
  ASSERT_EQ(cache.size(), 2u);
  for (const CachedObject& c : cache) {
    EXPECT_EQ(c.node, "nodeA");
    EXPECT_EQ(c.owner, "1-2");
    EXPECT_EQ(c.bytes, c.object_id == "obj1" ? 100 : 50);
  }
  EXPECT_FALSE(fs::exists(owner_dir + "/.obj3.123-456"));
  EXPECT_FALSE(fs::exists(owner_dir + "/.obj3.lock"));
  EXPECT_TRUE(fs::exists(owner_dir + "/.obj4." + Self()));
  EXPECT_TRUE(fs::exists(owner_dir + "/.obj4.lock"));
  EXPECT_TRUE(fs::exists(owner_dir + "/.obj5.lock"));

  rpc::ObjectStoreUsage usage = MeasureObjectStore(anchor_, spill, 1 << 20);
  EXPECT_EQ(usage.cached_bytes(), 150);
  EXPECT_EQ(usage.used_bytes(), 150);  // the cache is in the store's memory
  EXPECT_EQ(usage.objects(), 0);       // copies, not values of this node
}

TEST_F(ObjectStoreTest, AKeptFileIsUsedMemoryButNotAnObject) {
  const std::string store = root_ + "/store", spill = root_ + "/spill";
  const std::string mine = absl::StrCat(store, "/", Self());
  Write(mine + "/value", std::string(100, 'x'));
  Write(absl::StrCat(mine, "/", kObjectPoolPrefix, "freed"), std::string(40, 'y'));
  rpc::ObjectStoreUsage usage = MeasureObjectStore(store, spill, 1 << 20);
  EXPECT_EQ(usage.used_bytes(), 140);
  EXPECT_EQ(usage.objects(), 1);
}

TEST_F(ObjectStoreTest, TrimmingDropsTheLeastRecentlyReadCopiesFirst) {
  const std::string dir = root_ + "/cache";
  std::vector<CachedObject> cache;
  const absl::Time now = absl::Now();
  for (int i = 0; i < 4; ++i) {
    const std::string path = absl::StrCat(dir, "/obj", i);
    Write(path, std::string(10, 'x'));
    // obj2 read longest ago, then obj0, obj3, obj1.
    const int order[] = {1, 3, 0, 2};
    cache.push_back(
        {"n", "1-2", absl::StrCat("obj", i), path, 10, now - absl::Seconds(10 * (4 - order[i]))});
  }
  EXPECT_EQ(TrimObjectCache(cache, 100, 1000), 0);  // fits: nothing goes
  EXPECT_EQ(TrimObjectCache(cache, 100, 85), 20);   // 15 over: two copies go
  EXPECT_FALSE(fs::exists(dir + "/obj2"));
  EXPECT_FALSE(fs::exists(dir + "/obj0"));
  EXPECT_TRUE(fs::exists(dir + "/obj3"));
  EXPECT_TRUE(fs::exists(dir + "/obj1"));
}

TEST_F(ObjectStoreTest, SpillingMovesTheOldestValuesToDiskUntilTheStoreIsUnderTheTarget) {
  const std::string store = root_ + "/store", spill = root_ + "/spill";
  const std::string mine = absl::StrCat(store, "/", Self());
  for (const char* name : {"a", "b", "c"}) Write(absl::StrCat(mine, "/", name), "0123456789");
  Write(store + "/123-456/dead", "0123456789");  // a dead owner's: swept, never moved
  Write(mine + "/.tmp-being-written", "0123456789");
  Write(mine + "/fetch-abc-12345678", "0123456789");  // a reader's private copy
  Write(absl::StrCat(mine, "/", kObjectPoolPrefix, "old"), "0123456789");  // a kept file
  // b was made first, then c, then a.
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(mine + "/b", now - std::chrono::seconds(30));
  fs::last_write_time(mine + "/c", now - std::chrono::seconds(20));
  fs::last_write_time(mine + "/a", now - std::chrono::seconds(10));
  fs::last_write_time(mine + "/fetch-abc-12345678", now - std::chrono::seconds(60));

  EXPECT_EQ(SpillOldestObjects(store, spill, 30, 40), 0);  // under the target: nothing moves
  EXPECT_EQ(SpillOldestObjects(store, spill, 30, 15), 20);
  const std::string moved = absl::StrCat(spill, "/", Self());
  EXPECT_TRUE(fs::exists(moved + "/b") && fs::exists(moved + "/c"));
  EXPECT_FALSE(fs::exists(mine + "/b") || fs::exists(mine + "/c"));
  EXPECT_TRUE(fs::exists(mine + "/a"));
  std::ifstream in(moved + "/b");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, "0123456789");
  EXPECT_TRUE(fs::exists(store + "/123-456/dead"));
  EXPECT_TRUE(fs::exists(mine + "/.tmp-being-written"));
  EXPECT_TRUE(fs::exists(mine + "/fetch-abc-12345678"));
  EXPECT_TRUE(fs::exists(absl::StrCat(mine, "/", kObjectPoolPrefix, "old")));
  for (const auto& e : fs::directory_iterator(moved)) {
    EXPECT_EQ(e.path().filename().string().find(".spilling"), std::string::npos);
  }
}

TEST_F(ObjectStoreTest, AValueIsHeldWhileItsFileIsThereAndItsOwnerLives) {
  Write(absl::StrCat(root_, "/store/", Self(), "/obj"), "bytes");
  Write(root_ + "/spill/123-456/gone", "bytes");  // owner pid 123 is not alive
  const std::vector<std::string> dirs = {root_ + "/store", root_ + "/spill"};
  EXPECT_TRUE(ObjectHeld(dirs, Self(), "obj"));
  EXPECT_FALSE(ObjectHeld(dirs, Self(), "freed"));
  EXPECT_FALSE(ObjectHeld(dirs, "123-456", "gone"));
  EXPECT_FALSE(ObjectHeld(dirs, Self(), "../obj"));  // a path, not a name
}

}  // namespace
}  // namespace phalanx::node
