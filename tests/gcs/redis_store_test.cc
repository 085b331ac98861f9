// RedisStore against a real redis-server.
#include <atomic>
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

}  // namespace
}  // namespace phalanx::gcs
