// RedisStore against a real redis-server.
#include <atomic>
#include <cstdio>
#include <map>
#include <thread>

#include "gcs/store.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx::gcs {
namespace {

RedisOptions Options(const testing::RedisServer& redis, const std::string& cluster = "c1") {
  RedisOptions o;
  o.port = redis.port();
  o.password = redis.password();
  o.cluster_id = cluster;
  o.connect_timeout = absl::Seconds(2);
  return o;
}

TEST(RedisStore, RoundTrips) {
  testing::RedisServer redis("pw");
  auto store = ConnectRedisStore(Options(redis));
  ASSERT_TRUE(store.ok()) << store.status();
  Store& s = **store;
  ASSERT_TRUE(s.PutSync("nodes", "a", std::string("\0bin\xff", 5)).ok());
  ASSERT_TRUE(s.PutSync("nodes", "b", "2").ok());
  ASSERT_TRUE(s.PutSync("kv:ns1", "k", "v").ok());
  auto a = s.Get("nodes", "a");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ(**a, std::string("\0bin\xff", 5));
  EXPECT_FALSE(s.Get("nodes", "zzz")->has_value());
  auto all = s.GetAll("nodes");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  ASSERT_TRUE(s.DeleteSync("nodes", "a").ok());
  EXPECT_FALSE(s.Get("nodes", "a")->has_value());
  auto tables = s.ListTables("kv:");
  ASSERT_TRUE(tables.ok());
  ASSERT_EQ(tables->size(), 1u);
  EXPECT_EQ((*tables)[0], "kv:ns1");
}

TEST(RedisStore, ClustersAreNamespaced) {
  testing::RedisServer redis;
  auto one = ConnectRedisStore(Options(redis, "one"));
  auto two = ConnectRedisStore(Options(redis, "two"));
  ASSERT_TRUE(one.ok() && two.ok());
  ASSERT_TRUE((*one)->PutSync("nodes", "k", "from-one").ok());
  EXPECT_FALSE((*two)->Get("nodes", "k")->has_value());
  EXPECT_EQ(*(*one)->Get("nodes", "k").value(), "from-one");
}

TEST(RedisStore, WrongPasswordAndDeadAddressAreClearErrors) {
  testing::RedisServer redis("right");
  RedisOptions wrong = Options(redis);
  wrong.password = "wrong";
  auto s1 = ConnectRedisStore(wrong);
  EXPECT_FALSE(s1.ok());
  EXPECT_NE(s1.status().message().find("refused the password"), std::string::npos) << s1.status();
  RedisOptions none = Options(redis);
  none.password = "";
  auto s2 = ConnectRedisStore(none);
  EXPECT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("needs a password"), std::string::npos) << s2.status();
  RedisOptions dead = Options(redis);
  dead.port = 1;
  auto s3 = ConnectRedisStore(dead);
  EXPECT_FALSE(s3.ok());
  EXPECT_NE(s3.status().message().find("cannot reach Redis at 127.0.0.1:1"), std::string::npos)
      << s3.status();
}

TEST(RedisStore, ConcurrentWritesKeepPerWriterOrderAndAllLand) {
  testing::RedisServer redis;
  auto store = ConnectRedisStore(Options(redis));
  ASSERT_TRUE(store.ok());
  constexpr int kThreads = 8, kWrites = 500;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        // Same key per thread, increasing values: the last write must win.
        if (!(*store)->PutSync("t", absl::StrCat("k", t), absl::StrCat(i)).ok()) ++failures;
        (*store)->Put("u", absl::StrCat("k", t, "-", i), "x", nullptr);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(*(*store)->Get("t", absl::StrCat("k", t)).value(), absl::StrCat(kWrites - 1));
  }
  ASSERT_TRUE((*store)->PutSync("u", "last", "x").ok());  // flushes the async ones before it
  EXPECT_EQ((*store)->GetAll("u")->size(), static_cast<size_t>(kThreads * kWrites + 1));
}

TEST(RedisStore, WritesWaitForARestartedRedis) {
  testing::RedisServer redis("pw", /*aof=*/true);
  auto store = ConnectRedisStore(Options(redis));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->PutSync("t", "before", "1").ok());
  redis.Kill();
  // Issued while Redis is down: retried until it is back. (Redis is restarted from this
  // thread: a child started with PDEATHSIG dies with the thread that started it.)
  std::atomic<bool> ok{false};
  std::thread writer([&] { ok = (*store)->PutSync("t", "during", "2").ok(); });
  absl::SleepFor(absl::Milliseconds(300));
  redis.Restart();
  writer.join();
  EXPECT_TRUE(ok);
  EXPECT_EQ(*(*store)->Get("t", "during").value(), "2");
}

TEST(RedisStore, ABadSentinelListNamesTheFlagAndTheFix) {
  auto none = ParseSentinels("", "--redis-sentinel");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--redis-sentinel is empty"), std::string::npos);
  auto bad = ParseSentinels("127.0.0.1:26379,host-without-port", "--redis-sentinel");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'host-without-port' is not HOST:PORT"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(ParseSentinels("h:0", "--redis-sentinel").ok());
  EXPECT_FALSE(ParseSentinels("h:99999", "--redis-sentinel").ok());
  auto good = ParseSentinels("a:1, b:2,c:3", "--redis-sentinel");
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ(good->size(), 3u);
  EXPECT_EQ((*good)[1], std::make_pair(std::string("b"), 2));

  RedisOptions no_name;
  no_name.cluster_id = "c1";
  no_name.sentinels = *good;
  auto store = ConnectRedisStore(no_name);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("--redis-master-name is empty"), std::string::npos);
}

RedisOptions SentinelOptions(const testing::SentinelRedis& redis) {
  RedisOptions o;
  o.password = redis.password();
  o.cluster_id = "c1";
  o.sentinels = redis.sentinel_list();
  o.master_name = redis.master_name();
  o.connect_timeout = absl::Seconds(1);
  return o;
}

TEST(RedisStore, SentinelModeFollowsAFailoverAndLosesNoAcknowledgedWrite) {
  if (!testing::SentinelRedis::Available()) GTEST_SKIP() << "redis-server is not installed";
  testing::SentinelRedis redis;
  auto store = ConnectRedisStore(SentinelOptions(redis));
  ASSERT_TRUE(store.ok()) << store.status();
  int old_primary = redis.PrimaryPort();

  // One writer acknowledges key after key while the primary is killed under it.
  std::atomic<bool> stop{false};
  std::atomic<int> acknowledged{0}, failed{0};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      if ((*store)->PutSync("t", absl::StrCat("k", i), absl::StrCat("v", i)).ok()) {
        acknowledged = i + 1;
      } else {
        ++failed;
        return;
      }
    }
  });
  ASSERT_TRUE(testing::WaitFor([&] { return acknowledged > 200; }, absl::Seconds(10)));
  int before_kill = acknowledged;
  redis.KillPrimary();
  absl::Time killed = absl::Now();
  int new_primary = redis.WaitFailover(old_primary, absl::Seconds(20));
  ASSERT_GT(new_primary, 0) << "no failover";
  std::printf("# failover: new primary after %s\n",
              absl::FormatDuration(absl::Now() - killed).c_str());
  // Writes go on on the new primary.
  int at_failover = acknowledged;
  ASSERT_TRUE(testing::WaitFor([&] { return acknowledged > at_failover + 200 || failed > 0; },
                               absl::Seconds(20)));
  stop = true;
  writer.join();
  EXPECT_EQ(failed.load(), 0);
  std::printf("# %d writes acknowledged before the kill, %d in all\n", before_kill,
              acknowledged.load());

  // Every acknowledged write is on the new primary, which says it is the master.
  EXPECT_EQ(redis.Command(new_primary, {"ROLE"}).at(0), "master");
  auto all = redis.Command(new_primary, {"HGETALL", "phx:c1:t"});
  std::map<std::string, std::string> on_primary;
  for (size_t i = 0; i + 1 < all.size(); i += 2) on_primary[all[i]] = all[i + 1];
  int missing = 0;
  for (int i = 0; i < acknowledged; ++i) {
    auto it = on_primary.find(absl::StrCat("k", i));
    if (it == on_primary.end() || it->second != absl::StrCat("v", i)) ++missing;
  }
  EXPECT_EQ(missing, 0) << "of " << acknowledged << " acknowledged writes";
  // Reads follow too.
  auto read = (*store)->Get("t", "k0");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->value_or(""), "v0");
}

TEST(RedisStore, SentinelModeWithNoPrimaryFailsWritesNamingTheSentinelsAndMaster) {
  if (!testing::SentinelRedis::Available()) GTEST_SKIP() << "redis-server is not installed";
  testing::SentinelRedis redis;
  RedisOptions options = SentinelOptions(redis);
  options.failover_timeout = absl::Seconds(2);
  auto store = ConnectRedisStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutSync("t", "a", "1").ok());
  redis.KillAll();
  absl::Time start = absl::Now();
  absl::Status s = (*store)->PutSync("t", "b", "2");
  absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(absl::StrCat("no Redis primary for master '", redis.master_name(),
                                          "' from the sentinels ", redis.sentinels())),
            std::string::npos)
      << s;
  EXPECT_GE(took, absl::Seconds(2));
  EXPECT_LT(took, absl::Seconds(6));

  // A master name the sentinels do not monitor: the start-up error says so.
  RedisOptions unknown = SentinelOptions(redis);
  unknown.master_name = "nope";
  unknown.startup_timeout = absl::Milliseconds(300);
  auto none = ConnectRedisStore(unknown);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("does not monitor a master named 'nope'"),
            std::string::npos)
      << none.status();
}

}  // namespace
}  // namespace phalanx::gcs
