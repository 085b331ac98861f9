// Acknowledged means persisted, with a real Redis that refuses writes (min-replicas-to-write
// with no replica: NOREPLICAS) or stops answering (SIGSTOP): the GCS replies OK only for what
// Redis took, publishes nothing else, leaves its memory as it was, and still ends within its
// bound on SIGTERM.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "client/gcs_client.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx::gcs {
namespace {

using testing::GcsProcess;
using testing::RedisServer;
using testing::WaitFor;

// `redis-cli CONFIG SET min-replicas-to-write N`: with N = 1 and no replica, Redis refuses
// every write with NOREPLICAS.
void RequireReplicas(const RedisServer& redis, int n) {
  auto r = testing::RunCommand({"redis-cli", "-p", std::to_string(redis.port()), "CONFIG", "SET",
                                "min-replicas-to-write", std::to_string(n)},
                               {}, absl::Seconds(10));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

struct KvSeen {
  absl::Mutex mu;
  std::vector<std::string> values;  // "key=value" as published
  void Add(const rpc::PubMessage& m) {
    if (!m.has_kv()) return;
    absl::MutexLock lock(&mu);
    values.push_back(m.kv().key() + "=" + m.kv().value());
  }
  bool Has(const std::string& kv) {
    absl::MutexLock lock(&mu);
    return std::find(values.begin(), values.end(), kv) != values.end();
  }
};

// Writers that put KV entries (namespace "acked", keys w<writer>-<i>) through the GCS without
// pause, each keeping what was acknowledged and counting what was refused, until Stop().
class AckedWriters {
 public:
  AckedWriters(const GcsProcess& gcs, int writers, std::function<std::string(int)> value_of) {
    for (int w = 0; w < writers; ++w) {
      threads_.emplace_back([this, &gcs, w, value_of] {
        auto client = GcsClient::Connect({gcs.address(), gcs.token()});
        ASSERT_TRUE(client.ok()) << client.status();
        for (int i = 0; !stop_; ++i) {
          std::string key = absl::StrCat("w", w, "-", i), value = value_of(i);
          bool ok = (*client)->KvPut("acked", key, value).ok();
          absl::MutexLock lock(&mu_);
          if (ok) {
            acknowledged_[key] = value;
          } else {
            ++refused_;
          }
        }
      });
    }
  }
  ~AckedWriters() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  size_t acknowledged() {
    absl::MutexLock lock(&mu_);
    return acknowledged_.size();
  }
  int refused() {
    absl::MutexLock lock(&mu_);
    return refused_;
  }
  // How many acknowledged writes a GCS started afresh from Redis (kill -9, then again) does
  // not hold as they were written; *first names the first such key.
  int LostAfterGcsRestart(GcsProcess& gcs, std::string* first) {
    gcs.Kill9();
    gcs.Restart();
    auto client = GcsClient::Connect({gcs.address(), gcs.token()});
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return -1;
    auto stored = (*client)->KvList("acked");
    EXPECT_TRUE(stored.ok()) << stored.status();
    if (!stored.ok()) return -1;
    std::map<std::string, std::string> found;
    for (const auto& e : *stored) found[e.key()] = e.value();
    absl::MutexLock lock(&mu_);
    int lost = 0;
    for (const auto& [key, value] : acknowledged_) {
      auto it = found.find(key);
      if (it != found.end() && it->second == value) continue;
      if (lost++ == 0 && first != nullptr) *first = key;
    }
    return lost;
  }

 private:
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::map<std::string, std::string> acknowledged_ ABSL_GUARDED_BY(mu_);
  int refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

TEST(Durability, AWriteRedisRefusesIsNeitherAcknowledgedNorPublishedAndLeavesMemoryAsItWas) {
  RedisServer redis;
  GcsProcess gcs(redis);
  auto node = testing::StartNode(gcs, "node-a");
  auto client = *GcsClient::Connect({gcs.address(), gcs.token()});
  KvSeen seen;
  auto sub = client->Subscribe({rpc::KV}, [&](const rpc::PubMessage& m) { seen.Add(m); });
  ASSERT_TRUE(client->KvPut("ns", "a", "1").ok());
  ASSERT_TRUE(WaitFor([&] { return seen.Has("a=1"); }, absl::Seconds(10)));

  RequireReplicas(redis, 1);
  auto overwrite = client->KvPut("ns", "a", "2");
  ASSERT_FALSE(overwrite.ok());
  EXPECT_NE(overwrite.status().message().find("Redis"), std::string::npos) << overwrite.status();
  EXPECT_NE(overwrite.status().message().find("NOREPLICAS"), std::string::npos)
      << overwrite.status();
  EXPECT_NE(overwrite.status().message().find("/a"), std::string::npos) << overwrite.status();
  EXPECT_EQ(client->KvGet("ns", "a")->value_or(""), "1");
  EXPECT_FALSE(client->KvPut("ns", "b", "x").ok());
  EXPECT_FALSE(client->KvGet("ns", "b")->has_value());

  // A placement group and an actor: refused, and not in the tables.
  rpc::PlacementGroupInfo pg;
  (*pg.add_bundles()->mutable_resources()->mutable_amounts())["CPU"] = 1;
  pg.set_strategy("PACK");
  auto created = client->CreatePlacementGroup(pg);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("NOREPLICAS"), std::string::npos) << created.status();
  EXPECT_TRUE(client->ListPlacementGroups()->empty());
  rpc::ActorInfo actor;
  actor.set_class_name("Counter");
  actor.set_code_path("/bin/true");
  auto made = client->CreateActor(actor);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("NOREPLICAS"), std::string::npos) << made.status();
  EXPECT_TRUE(client->ListActors("")->empty());

  // Redis takes writes again: so does the GCS, and subscribers see only what was persisted.
  RequireReplicas(redis, 0);
  ASSERT_TRUE(client->KvPut("ns", "a", "3").ok());
  ASSERT_TRUE(WaitFor([&] { return seen.Has("a=3"); }, absl::Seconds(10)));
  EXPECT_FALSE(seen.Has("a=2"));
  EXPECT_FALSE(seen.Has("b=x"));
  auto log = ReadFile(gcs.dir() + "/gcs.log");
  ASSERT_TRUE(log.ok());
  EXPECT_NE(log->find("Redis refused HSET of kv:ns/a"), std::string::npos) << *log;
}

TEST(Durability, SigtermEndsTheGcsWithinItsBoundWhileRedisIsStopped) {
  RedisServer redis;
  GcsProcess gcs(redis);
  auto client = *GcsClient::Connect({gcs.address(), gcs.token()});
  ASSERT_TRUE(client->KvPut("ns", "before", "1").ok());
  redis.Signal(SIGSTOP);
  // A write that Redis will never answer, in flight when the GCS is told to stop.
  auto hurried = *GcsClient::Connect({gcs.address(), gcs.token(), absl::Seconds(3)});
  std::thread writer([&] { hurried->KvPut("ns", "during", "1").IgnoreError(); });
  absl::SleepFor(absl::Milliseconds(300));
  absl::Time sent = absl::Now();
  gcs.Signal(SIGTERM);
  // The bound is the GCS's --shutdown-timeout-s (5 s by default); 5 s of slack for a loaded
  // machine. This checks that the GCS ends, not how fast.
  int status = gcs.WaitExit(absl::Seconds(10));
  absl::Duration took = absl::Now() - sent;
  redis.Signal(SIGCONT);
  writer.join();
  ASSERT_NE(status, -1) << "the GCS was still running 10 s after SIGTERM";
  auto log = ReadFile(gcs.dir() + "/gcs.log");
  ASSERT_TRUE(log.ok());
  EXPECT_NE(log->find("not persisted"), std::string::npos) << *log;
  std::printf("GCS ended %s after SIGTERM (Redis stopped)\n", absl::FormatDuration(took).c_str());
}

// Writers put KV entries through the GCS without pause; the GCS is kill -9ed and restarted,
// then Redis (AOF, appendfsync always) is kill -9ed and restarted. Every write the GCS
// acknowledged is there afterwards, read back from a GCS started fresh from Redis.
TEST(Durability, NoAcknowledgedWriteIsLostAcrossKill9OfTheGcsAndOfRedis) {
  RedisServer redis("pw", /*aof=*/true, "always");
  GcsProcess gcs(redis);
  AckedWriters writers(gcs, 4, [](int i) { return absl::StrCat(i * 7919); });
  ASSERT_TRUE(WaitFor([&] { return writers.acknowledged() >= 200; }, absl::Seconds(20)));
  size_t before_gcs_kill = writers.acknowledged();
  gcs.Kill9();
  gcs.Restart();
  ASSERT_TRUE(
      WaitFor([&] { return writers.acknowledged() >= before_gcs_kill + 200; }, absl::Seconds(30)));
  size_t before_redis_kill = writers.acknowledged();
  redis.Restart();  // kill -9, then the same port and data dir
  ASSERT_TRUE(WaitFor([&] { return writers.acknowledged() >= before_redis_kill + 200; },
                      absl::Seconds(30)));
  writers.Stop();

  // What Redis has, as a GCS started from it sees it.
  int lost = writers.LostAfterGcsRestart(gcs, nullptr);
  std::cout << "# " << writers.acknowledged() << " writes acknowledged (" << before_gcs_kill
            << " before the GCS kill -9, " << before_redis_kill << " before the Redis kill -9), "
            << writers.refused() << " refused, " << lost << " lost\n";
  EXPECT_EQ(lost, 0);
}

// A tmpfs of `size` mounted on a fresh directory, unmounted (lazily) on destruction. Needs
// root; error() says why there is none.
class SmallDisk {
 public:
  explicit SmallDisk(const std::string& size) {
    auto r = testing::RunCommand({"mount", "-t", "tmpfs", "-o",
                                  absl::StrCat("size=", size, ",mode=0700"), "tmpfs", dir_.path()},
                                 {}, absl::Seconds(10));
    if (r.exit_code == 0) {
      mounted_ = true;
    } else {
      error_ = r.output;
    }
  }
  ~SmallDisk() {
    if (mounted_) testing::RunCommand({"umount", "-l", dir_.path()}, {}, absl::Seconds(10));
  }
  const std::string& path() const { return dir_.path(); }
  const std::string& error() const { return error_; }
  bool mounted() const { return mounted_; }

 private:
  testing::TempDir dir_;
  bool mounted_ = false;
  std::string error_;
};

// Writes `path` until the disk is full (ENOSPC); false if it never filled (> 1 GiB).
bool FillDisk(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::string block(64 << 10, 'x');
  bool full = false;
  for (int i = 0; i < (1 << 14) && !full; ++i) {
    ssize_t n = ::write(fd, block.data(), block.size());
    if (n < static_cast<ssize_t>(block.size())) full = true;
  }
  ::close(fd);
  return full;
}

// Redis's disk fills (its dir on a small disk). Redis then fails to append a write to its
// AOF, logs "Short write while writing to the AOF file", yet replies +OK to it (the writes
// after it get MISCONF), so an acknowledged write would be lost by a Redis killed before the
// space came back. The GCS therefore asks Redis, after each batch,
// whether its AOF append failed (aof_last_write_status) and acknowledges nothing it did not
// persist: after a kill -9 of Redis on the full disk, then space freed and Redis restarted, no
// acknowledged write is missing.
TEST(Durability, NoAcknowledgedWriteIsLostWhenRedissDiskFillsAndRedisIsKilled) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small disk (tmpfs)";
  SmallDisk disk("8m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << disk.error();
  RedisServer redis("pw", /*aof=*/true, "everysec", disk.path());
  GcsProcess gcs(redis);
  AckedWriters writers(gcs, 3, [](int i) { return absl::StrCat(i, "-", std::string(2048, 'v')); });
  ASSERT_TRUE(WaitFor([&] { return writers.acknowledged() >= 100; }, absl::Seconds(20)));
  ASSERT_TRUE(FillDisk(disk.path() + "/filler")) << "the disk did not fill";
  // Writes go on against the full disk until some are refused (and a while after).
  ASSERT_TRUE(WaitFor([&] { return writers.refused() >= 20; }, absl::Seconds(30)))
      << "no write was refused on a full disk";
  absl::SleepFor(absl::Milliseconds(500));
  redis.Kill();  // kill -9 while the disk is full
  writers.Stop();
  ::unlink((disk.path() + "/filler").c_str());
  redis.Restart();  // same port and data dir, space back

  // What Redis has, as a GCS started from it sees it.
  std::string first_lost;
  int lost = writers.LostAfterGcsRestart(gcs, &first_lost);
  std::cout << "# disk full, then Redis kill -9: " << writers.acknowledged()
            << " writes acknowledged, " << writers.refused() << " refused, " << lost
            << " acknowledged writes lost" << (lost > 0 ? " (first: " + first_lost + ")" : "")
            << "\n";
  EXPECT_EQ(lost, 0);
}

}  // namespace
}  // namespace phalanx::gcs
