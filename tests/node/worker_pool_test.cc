// The worker pool's rules without processes: the memory monitor's judgement over made-up
// samples and a made-up clock, and why a worker ended from its record and wait status. (The
// pool with real workers, their OOM kills and restarts, is tested end to end in
// tests/actors and python/tests.)
#include "node/worker_pool.h"

#include <sys/wait.h>

#include <csignal>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace phalanx::node {
namespace {

constexpr int64_t kMiB = 1 << 20;

WorkerRecord Worker(pid_t pid, int64_t limit, absl::Time started, bool idle = false) {
  WorkerRecord w;
  w.pid = pid;
  w.actor_id = absl::StrCat("actor-", pid);
  w.memory_limit = limit;
  w.started = started;
  w.idle = idle;
  return w;
}

class MemoryPolicyTest : public ::testing::Test {
 protected:
  // A round at `now` with these samples; the node's use is node_used_ (counted when read).
  MemoryRound Round(const std::vector<std::pair<pid_t, int64_t>>& rss, absl::Time now) {
    return JudgeMemory(
        workers_, rss,
        [this] {
          ++node_reads_;
          return node_used_;
        },
        policy_, now, last_node_kill_);
  }
  void Add(const WorkerRecord& w) { workers_[w.pid] = w; }

  const absl::Time t0_ = absl::FromUnixSeconds(1'800'000'000);
  std::map<pid_t, WorkerRecord> workers_;
  MemoryPolicy policy_;
  int64_t node_used_ = 0;
  int node_reads_ = 0;
  absl::Time last_node_kill_ = absl::InfinitePast();
};

// Past 90% of its limit a worker is warned, once; past the limit, with no cgroup to enforce
// it, it is killed as OOM with its limit and peak, once. Peaks and last samples follow.
TEST_F(MemoryPolicyTest, AWorkerIsWarnedNearItsLimitAndKilledPastIt) {
  Add(Worker(10, 100 * kMiB, t0_));
  MemoryRound r = Round({{10, 80 * kMiB}}, t0_);
  EXPECT_TRUE(r.warn.empty() && r.kill.empty());
  r = Round({{10, 95 * kMiB}}, t0_ + absl::Milliseconds(50));
  EXPECT_EQ(r.warn, std::vector<pid_t>({10}));
  EXPECT_TRUE(r.kill.empty());
  r = Round({{10, 96 * kMiB}}, t0_ + absl::Milliseconds(100));
  EXPECT_TRUE(r.warn.empty()) << "warned twice";
  r = Round({{10, 120 * kMiB}}, t0_ + absl::Milliseconds(150));
  ASSERT_EQ(r.kill.size(), 1u);
  EXPECT_EQ(r.kill[0].first, 10);
  EXPECT_EQ(r.kill[0].second.kind(), rpc::DeathCause::OOM_KILLED);
  EXPECT_EQ(r.kill[0].second.limit_bytes(), 100 * kMiB);
  EXPECT_EQ(r.kill[0].second.peak_bytes(), 120 * kMiB);
  r = Round({{10, 130 * kMiB}}, t0_ + absl::Milliseconds(200));
  EXPECT_TRUE(r.kill.empty()) << "killed twice";
  EXPECT_EQ(workers_[10].peak_rss, 130 * kMiB);
  // A failed read (the process is gone) and an unknown pid change nothing.
  r = Round({{10, -1}, {99, 500 * kMiB}}, t0_ + absl::Milliseconds(250));
  EXPECT_EQ(workers_[10].last_rss, 130 * kMiB);
  EXPECT_EQ(workers_.count(99), 0u);
  EXPECT_EQ(node_reads_, 0) << "no node-wide rule without the node's total";
}

// A worker in a cgroup is the kernel's to kill (memory.max): warned, never killed here. An
// idle (prestarted) worker is not warned; one with no limit is neither.
TEST_F(MemoryPolicyTest, ACgroupIdleOrUnlimitedWorkerIsNotKilledForItsRss) {
  WorkerRecord in_cgroup = Worker(10, 100 * kMiB, t0_);
  in_cgroup.cgroup = "/sys/fs/cgroup/phalanx/w10";
  Add(in_cgroup);
  Add(Worker(11, 100 * kMiB, t0_, /*idle=*/true));
  Add(Worker(12, 0, t0_));
  MemoryRound r = Round({{10, 200 * kMiB}, {11, 200 * kMiB}, {12, 900 * kMiB}}, t0_);
  EXPECT_EQ(r.warn, std::vector<pid_t>({10}));
  ASSERT_EQ(r.kill.size(), 1u);  // the idle one, above its limit without a cgroup
  EXPECT_EQ(r.kill[0].first, 11);
}

// Past the node's threshold the newest worker not on its way out is killed, and no other
// until it is gone and 500 ms passed; idle workers are spared.
TEST_F(MemoryPolicyTest, PastTheNodeThresholdTheNewestWorkerGoesOneAtATime) {
  policy_.node_total = 1000 * kMiB;
  policy_.node_threshold = 0.9;
  Add(Worker(10, 0, t0_));
  Add(Worker(11, 0, t0_ + absl::Seconds(1)));
  Add(Worker(12, 0, t0_ + absl::Seconds(2), /*idle=*/true));
  node_used_ = 850 * kMiB;
  absl::Time now = t0_ + absl::Seconds(10);
  EXPECT_TRUE(Round({}, now).kill.empty());
  node_used_ = 950 * kMiB;
  MemoryRound r = Round({}, now);
  ASSERT_EQ(r.kill.size(), 1u);
  EXPECT_EQ(r.kill[0].first, 11);
  EXPECT_EQ(r.kill[0].second.limit_bytes(), 900 * kMiB);
  EXPECT_NE(r.kill[0].second.message().find("95% passed the 90% threshold"), std::string::npos)
      << r.kill[0].second.message();
  // The victim has not ended: no second kill, however long.
  EXPECT_TRUE(Round({}, now + absl::Seconds(5)).kill.empty());
  workers_.erase(11);
  // It ended; the next kill waits until 500 ms after the last (`now + 5 s` is long past it,
  // so a victim that outlived the wait is followed at once).
  r = Round({}, now + absl::Seconds(5));
  ASSERT_EQ(r.kill.size(), 1u);
  EXPECT_EQ(r.kill[0].first, 10);
  workers_.erase(10);
  Add(Worker(13, 0, t0_ + absl::Seconds(3)));
  EXPECT_TRUE(Round({}, now + absl::Seconds(5) + absl::Milliseconds(400)).kill.empty());
  r = Round({}, now + absl::Seconds(5) + absl::Milliseconds(600));
  ASSERT_EQ(r.kill.size(), 1u);
  EXPECT_EQ(r.kill[0].first, 13);
  // Threshold off (>= 1): the node's use is not even read.
  policy_.node_threshold = 1.0;
  workers_.clear();
  node_reads_ = 0;
  Round({}, now + absl::Seconds(60));
  EXPECT_EQ(node_reads_, 0);
}

TEST(ExitCauseTest, TheCgroupsOomThenTheNodesKillThenTheConstructorThenTheStatus) {
  WorkerRecord w = Worker(10, 100 * kMiB, absl::Now());
  w.peak_rss = 90 * kMiB;
  int exited_3 = 3 << 8;  // a wait status: exited with code 3
  ASSERT_TRUE(WIFEXITED(exited_3));

  rpc::DeathCause c = ExitCause(w, exited_3, CgroupEnd{true, 120 * kMiB}, "node-a", 42);
  EXPECT_EQ(c.kind(), rpc::DeathCause::OOM_KILLED);
  EXPECT_EQ(c.peak_bytes(), 120 * kMiB);
  EXPECT_EQ(c.limit_bytes(), 100 * kMiB);
  EXPECT_EQ(c.node_id(), "node-a");
  EXPECT_EQ(c.time_ms(), 42);

  w.kill_cause.set_kind(rpc::DeathCause::KILLED_BY_USER);
  w.kill_cause.set_message("ray.kill");
  w.creation_error = "constructor raised";
  c = ExitCause(w, SIGKILL, CgroupEnd{}, "node-a", 43);
  EXPECT_EQ(c.kind(), rpc::DeathCause::KILLED_BY_USER);
  EXPECT_EQ(c.message(), "ray.kill");
  EXPECT_EQ(c.time_ms(), 43);

  w.kill_cause.Clear();
  c = ExitCause(w, exited_3, CgroupEnd{}, "node-a", 44);
  EXPECT_EQ(c.kind(), rpc::DeathCause::CREATION_FAILED);
  EXPECT_EQ(c.message(), "constructor raised");

  w.creation_error.clear();
  c = ExitCause(w, exited_3, CgroupEnd{}, "node-a", 45);
  EXPECT_EQ(c.kind(), rpc::DeathCause::EXITED);
  EXPECT_EQ(c.exit_code(), 3);
  c = ExitCause(w, SIGSEGV, CgroupEnd{}, "node-a", 46);  // a wait status: killed by SIGSEGV
  EXPECT_EQ(c.kind(), rpc::DeathCause::SIGNALED);
  EXPECT_EQ(c.signal(), SIGSEGV);
}

}  // namespace
}  // namespace phalanx::node
