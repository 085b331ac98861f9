#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/mutex_check.h"
#include "base/node_lease.h"
#include "base/process.h"
#include "base/resources.h"
#include "base/sha256.h"
#include "base/timer.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(std::string(1000, 'a')),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

std::string Hex(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += {kHex[c >> 4], kHex[c & 15]};
  return out;
}

// RFC 4231 test cases 1, 2 and 6 (a key longer than the block).
TEST(HmacSha256, Rfc4231Vectors) {
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Resources, FractionalAmountsAddUpExactly) {
  Resources total;
  Resources tenth;
  tenth.Set("CPU", 0.1);
  for (int i = 0; i < 30; ++i) total += tenth;
  EXPECT_EQ(total.Get("CPU"), 3.0);
  Resources three;
  three.Set("CPU", 3);
  EXPECT_TRUE(total == three);
  for (int i = 0; i < 30; ++i) total -= tenth;
  EXPECT_TRUE(total.Empty());
}

TEST(Resources, ParseJsonNamesTheBadField) {
  auto ok = Resources::ParseJson(R"({"accel": 2, "CPU": 0.5})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->Get("accel"), 2);
  EXPECT_EQ(ok->Get("CPU"), 0.5);

  auto not_object = Resources::ParseJson("[1,2]");
  EXPECT_FALSE(not_object.ok());
  EXPECT_NE(not_object.status().message().find("not a JSON object"), std::string::npos);

  auto negative = Resources::ParseJson(R"({"accel": -1})");
  EXPECT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("'accel'"), std::string::npos);

  auto text = Resources::ParseJson(R"({"accel": "two"})");
  EXPECT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("must be a number"), std::string::npos);

  auto bad_name = Resources::ParseJson(R"({"a b": 1})");
  EXPECT_FALSE(bad_name.ok());
}

TEST(Files, WriteFileAppliesTheMode) {
  testing::TempDir dir;
  std::string path = dir.path() + "/secret";
  ASSERT_TRUE(WriteFile(path, "s3cret", 0600).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(*ReadFile(path), "s3cret");
  EXPECT_TRUE(absl::IsNotFound(ReadFile(dir.path() + "/missing").status()));
}

// Issue 49: a SIGKILLed node manager leaves its lease page in /dev/shm. The next node manager
// removes the pages whose process is gone and whose lease expired, and leaves the others.
TEST(NodeLease, StalePagesOfGoneNodeManagersAreRemoved) {
  testing::TempDir tmp;
  const std::string& dir = tmp.path();
  // A node manager that dies without removing its page (_exit: no destructor runs).
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lease =
        NodeLease::Create(absl::StrCat(dir, "/phalanx-node-deadbeef-", getpid(), "-abcd.lease"),
                          absl::Milliseconds(1));
    _exit(lease.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::string gone = absl::StrCat(dir, "/phalanx-node-deadbeef-", child, "-abcd.lease");
  // A live one (this process), expired or not, and a file that is not a lease page.
  auto live = NodeLease::Create(absl::StrCat(dir, "/phalanx-node-cafe-", getpid(), "-ef01.lease"),
                                absl::Milliseconds(1));
  ASSERT_TRUE(live.ok());
  ASSERT_TRUE(WriteFile(dir + "/phalanx-node-notes.txt", "x").ok());
  absl::SleepFor(absl::Milliseconds(5));
  struct stat st;
  ASSERT_EQ(::stat(gone.c_str(), &st), 0);
  EXPECT_EQ(RemoveStaleLeases(dir), 1);
  EXPECT_NE(::stat(gone.c_str(), &st), 0);
  EXPECT_EQ(::stat(absl::StrCat(dir, "/phalanx-node-cafe-", getpid(), "-ef01.lease").c_str(), &st),
            0);
  EXPECT_EQ(::stat((dir + "/phalanx-node-notes.txt").c_str(), &st), 0);
  EXPECT_EQ(RemoveStaleLeases(dir), 0);
}

TEST(Process, SpawnReportsExecFailures) {
  SpawnOptions options;
  options.argv = {"/nonexistent/program"};
  auto pid = Spawn(options);
  EXPECT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("/nonexistent/program"), std::string::npos);
}

TEST(Process, TerminateStopsAChild) {
  SpawnOptions options;
  options.argv = {"sleep", "30"};
  auto pid = Spawn(options);
  ASSERT_TRUE(pid.ok());
  EXPECT_TRUE(ProcessAlive(*pid));
  EXPECT_TRUE(TerminateProcess(*pid, absl::Seconds(2)));
  EXPECT_FALSE(ProcessAlive(*pid));
}

// A process is "ending" from the moment kill(SIGKILL) returns, before anyone reaps it, and a
// stopped one is not: what a child actor checks of its owner before it runs a call.
TEST(Process, EndingFromTheMomentItsSigkillIsSent) {
  SpawnOptions options;
  options.argv = {"sleep", "30"};
  auto pid = Spawn(options);
  ASSERT_TRUE(pid.ok());
  const std::string start = ProcessStartTime(*pid);
  ASSERT_FALSE(start.empty());
  EXPECT_FALSE(ProcessEnding(*pid, start));
  EXPECT_TRUE(ProcessEnding(*pid, "1"));  // another process that had this pid
  ::kill(*pid, SIGSTOP);
  EXPECT_FALSE(ProcessEnding(*pid, start));
  ::kill(*pid, SIGKILL);
  EXPECT_TRUE(ProcessEnding(*pid, start));
  EXPECT_TRUE(WaitProcessGone(*pid, absl::Seconds(10)));
  EXPECT_TRUE(ProcessEnding(*pid, start));
  EXPECT_EQ(ProcessStartTime(*pid), "");
}

// A callback added while the queue's thread sleeps (1 s on an empty queue, or until a later
// deadline) runs at its own time, and callbacks run in deadline order.
TEST(TimerQueue, RunsEachCallbackAtItsTimeWhateverTheThreadSleepsFor) {
  absl::Mutex mu;
  std::vector<std::pair<int, absl::Duration>> ran;
  absl::Time start = absl::Now();
  auto record = [&](int which) {
    return [&, which] {
      absl::MutexLock lock(&mu);
      ran.emplace_back(which, absl::Now() - start);
    };
  };
  TimerQueue timers;  // after what its callbacks use: its thread stops before they go
  absl::SleepFor(absl::Milliseconds(50));  // the thread now sleeps on an empty queue
  timers.RunAfter(absl::Milliseconds(900), record(2));
  timers.RunAfter(absl::Milliseconds(50), record(1));  // due before the thread wakes
  absl::MutexLock lock(&mu);
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                      +[](decltype(ran)* r) { return r->size() == 2; }, &ran),
                                  absl::Seconds(5)));
  EXPECT_EQ(ran[0].first, 1);
  EXPECT_LT(ran[0].second, absl::Milliseconds(500));
  EXPECT_EQ(ran[1].first, 2);
  EXPECT_GE(ran[1].second, absl::Milliseconds(900));
}

// Takes two locks in one order, then in the other: a cycle in the lock-order graph, a deadlock
// waiting for two threads to run it at once.
void TakeTwoLocksInBothOrders() {
  absl::Mutex a, b;
  {
    absl::MutexLock first(&a);
    absl::MutexLock second(&b);
  }
  {
    absl::MutexLock first(&b);
    absl::MutexLock second(&a);
  }
}

// Each case in a child process of its own, so that this one keeps the check it was started
// with (scripts/test.sh: abort).
TEST(MutexDeadlockCheck, AbortFromTheEnvironmentAbortsOnALockOrderCycle) {
  EXPECT_DEATH(
      {
        ::setenv(kMutexDeadlockCheckEnv, "abort", 1);
        ConfigureMutexDeadlockCheck();
        TakeTwoLocksInBothOrders();
      },
      "Potential Mutex deadlock");
}

TEST(MutexDeadlockCheck, OffByDefault) {
  EXPECT_EXIT(
      {
        ::unsetenv(kMutexDeadlockCheckEnv);
        ConfigureMutexDeadlockCheck();
        TakeTwoLocksInBothOrders();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(MutexDeadlockCheck, AnUnknownValueIsNamedAndLeavesTheCheckOff) {
  EXPECT_EXIT(
      {
        ::setenv(kMutexDeadlockCheckEnv, "sometimes", 1);
        ConfigureMutexDeadlockCheck();
        TakeTwoLocksInBothOrders();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "PHALANX_MUTEX_DEADLOCK_CHECK=sometimes is not one of off, report, abort");
}

}  // namespace
}  // namespace phalanx
