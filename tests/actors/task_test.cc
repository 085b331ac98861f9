// Remote functions (tasks) end to end: real GCS, a real node manager, real pooled worker
// processes (this binary, hosting its PHALANX_FUNCTIONs), and a real SIGKILL of a worker.
#include <signal.h>
#include <unistd.h>

#include <set>
#include <stdexcept>

#include "absl/strings/match.h"
#include "actors/api.h"
#include "actors/internal/task_pool.h"
#include "base/files.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_test.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

int Square(int x) { return x * x; }
int Add(int a, int b) { return a + b; }
int Pid() { return static_cast<int>(::getpid()); }
int Fail(int) { throw std::runtime_error("no such thing"); }

// Dies (SIGKILL) the first time it runs for `marker`, then returns its pid.
int DieOnce(std::string marker) {
  if (!PathExists(marker)) {
    WriteFile(marker, "x").IgnoreError();
    ::kill(::getpid(), SIGKILL);
  }
  return Pid();
}

// Throws the first time it runs for `marker`.
int ThrowOnce(std::string marker) {
  if (!PathExists(marker)) {
    WriteFile(marker, "x").IgnoreError();
    throw std::runtime_error("transient");
  }
  return 7;
}

// Writes `dir`/started, then runs until it sees IsCanceled() (writing `dir`/saw-cancel) or
// 120 s pass. Returns whether it saw it.
int RunUntilCanceled(std::string dir) {
  WriteFile(dir + "/started", "x").IgnoreError();
  for (int i = 0; i < 12000; ++i) {
    if (IsCanceled()) {
      WriteFile(dir + "/saw-cancel", "x").IgnoreError();
      return 1;
    }
    ::usleep(10000);
  }
  return 0;
}

int NotRegistered(int x) { return x; }

PHALANX_FUNCTION(Square);
PHALANX_FUNCTION(Add);
PHALANX_FUNCTION(Pid);
PHALANX_FUNCTION(Fail);
PHALANX_FUNCTION(DieOnce);
PHALANX_FUNCTION(ThrowOnce);
PHALANX_FUNCTION(RunUntilCanceled);

class TaskTest : public testing::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    if (HasFatalFailure()) return;
    testing::NodeOptions node;
    node.num_cpus = 2;
    node_ = testing::StartNode(*gcs_, "node-a", node);
    dir_ = tmp_.path();
  }

  void TearDown() override {
    ClusterTest::TearDown();
    node_.Terminate();
  }

  internal::TaskPoolStats Stats() {
    auto all = internal::GetTaskPoolStats();
    return all.empty() ? internal::TaskPoolStats{} : all.front();
  }

  testing::ChildProcess node_;
  testing::TempDir tmp_;
  std::string dir_;
};

constexpr absl::Duration kTaskTimeout = absl::Seconds(30);

TEST_F(TaskTest, ResultsComeBackAndRefsAreResolvedFirst) {
  std::vector<ObjectRef<int>> squares;
  for (int i = 0; i < 40; ++i) squares.push_back(Task(&Square).Remote(i));
  auto values = Get(squares, kTaskTimeout);
  ASSERT_TRUE(values.ok()) << values.status();
  for (int i = 0; i < 40; ++i) EXPECT_EQ((*values)[i], i * i);
  // A ref as an argument: its value goes, by value, once it is there.
  ObjectRef<int> four = Task(&Square).Remote(2);
  EXPECT_EQ(*Get(Task(&Square).Remote(four), kTaskTimeout), 16);
  EXPECT_EQ(*Get(Task(&Add).Remote(four, 3), kTaskTimeout), 7);
  EXPECT_EQ(*Get(Task(&Add).Remote(Task(&Square).Remote(3), four), kTaskTimeout), 13);
  // Ray's Put: a value this process holds, passed like any ref.
  ObjectRef<int> five = Put(5);
  EXPECT_EQ(*Get(five), 5);
  EXPECT_EQ(*Get(Task(&Square).Remote(five), kTaskTimeout), 25);
  EXPECT_EQ(*Get(Task(&Add).Remote(five, Task(&Square).Remote(five)), kTaskTimeout), 30);
}

TEST_F(TaskTest, TasksRunOnPooledWorkersNotOneProcessEach) {
  std::set<int> pids;
  for (int i = 0; i < 30; ++i) pids.insert(*Get(Task(&Pid).Remote(), kTaskTimeout));
  // Called one after another: one worker serves them all.
  EXPECT_EQ(pids.size(), 1u);
  EXPECT_NE(*pids.begin(), Pid());
  auto stats = Stats();
  EXPECT_EQ(stats.workers_leased, 1);
  EXPECT_EQ(stats.tasks_done, 30);
  // In parallel: at most as many workers as the node has CPUs for them (1 CPU per task).
  std::vector<ObjectRef<int>> refs;
  for (int i = 0; i < 40; ++i) refs.push_back(Task(&Pid).Remote());
  auto many = Get(refs, kTaskTimeout);
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_LE(std::set<int>(many->begin(), many->end()).size(), 2u);
  EXPECT_LE(Stats().workers_leased, 2);
}

TEST_F(TaskTest, AWorkerDeathIsRetriedElsewhereOrNamedInTheError) {
  std::string marker = dir_ + "/die-once";
  auto pid = Get(Task(&DieOnce).Remote(marker), kTaskTimeout);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_GE(Stats().retries, 1);
  // Without retries the error says the worker died, and how.
  auto lost = Get(Task(&DieOnce).SetMaxRetries(0).Remote(dir_ + "/die-again"), kTaskTimeout);
  ASSERT_FALSE(lost.ok());
  EXPECT_TRUE(IsActorDied(lost.status())) << lost.status();
  EXPECT_NE(lost.status().message().find("SIGNALED(9"), std::string::npos) << lost.status();
  EXPECT_NE(lost.status().message().find("task DieOnce"), std::string::npos) << lost.status();
}

TEST_F(TaskTest, ExceptionsFailTheTaskAndItsDependentsAndRetryOnlyWhenAsked) {
  auto failed = Get(Task(&Fail).Remote(1), kTaskTimeout);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(IsTaskError(failed.status())) << failed.status();
  EXPECT_NE(failed.status().message().find("no such thing"), std::string::npos);
  // A failed ref fails the task that takes it, with the same error.
  auto dependent = Get(Task(&Square).Remote(Task(&Fail).Remote(1)), kTaskTimeout);
  ASSERT_FALSE(dependent.ok());
  EXPECT_TRUE(IsTaskError(dependent.status())) << dependent.status();
  EXPECT_FALSE(Get(Task(&ThrowOnce).Remote(dir_ + "/t1"), kTaskTimeout).ok());
  auto retried = Get(Task(&ThrowOnce).SetRetryExceptions().Remote(dir_ + "/t2"), kTaskTimeout);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, 7);
}

// Ray's cancel, for C++: a running task cannot be interrupted, so it sees IsCanceled() and
// may stop; its ref fails with TaskCancelled at once. A task queued behind it never runs.
TEST_F(TaskTest, ACancelledTaskSeesIsCanceledAndItsRefFails) {
  EXPECT_FALSE(IsCanceled());  // the driver runs no task
  ObjectRef<int> running = Task(&RunUntilCanceled).Remote(dir_);
  ASSERT_TRUE(testing::WaitFor([&] { return PathExists(dir_ + "/started"); }, absl::Seconds(60)));
  ASSERT_TRUE(Cancel(running).ok());
  auto r = Get(running, kTaskTimeout);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorKind(r.status()), "TaskCancelled") << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "IsCanceled")) << r.status();
  EXPECT_TRUE(
      testing::WaitFor([&] { return PathExists(dir_ + "/saw-cancel"); }, absl::Seconds(60)));
  EXPECT_TRUE(Cancel(running).ok());  // finished: nothing to do
  ObjectRef<int> put = Put(1);
  EXPECT_TRUE(Cancel(put).ok());  // done already: it keeps its value
  EXPECT_EQ(*Get(put), 1);
  EXPECT_EQ(*Get(Task(&Square).Remote(4), kTaskTimeout), 16);  // the worker is free again
}

TEST_F(TaskTest, AnUnregisteredFunctionSaysHowToRegisterIt) {
  auto r = Get(Task(&NotRegistered).Remote(1), kTaskTimeout);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorKind(r.status()), worker::error_kind::kInvalidCall);
  EXPECT_NE(r.status().message().find("PHALANX_FUNCTION"), std::string::npos) << r.status();
}

TEST_F(TaskTest, AnIdleWorkerIsReturned) {
  ASSERT_TRUE(Get(Task(&Pid).Remote(), kTaskTimeout).ok());
  EXPECT_EQ(Stats().workers, 1);
  EXPECT_TRUE(testing::WaitFor([&] { return Stats().workers_returned == 1; },
                               internal::kTaskWorkerIdleTimeout + absl::Seconds(5)));
  EXPECT_EQ(Stats().workers, 0);
  // The next task leases again.
  EXPECT_TRUE(Get(Task(&Pid).Remote(), kTaskTimeout).ok());
  EXPECT_EQ(Stats().workers_leased, 2);
}

}  // namespace
}  // namespace phalanx
