// The job manager's logic over the in-memory store, with a job kind of the test's own (what
// the elastic kind is to the GCS): submissions and their bad input, stop and scale through
// the kind, a controller's record updates, a controller that dies for good, and the logs of a
// kind's job. No GCS, no processes: the actor manager has no nodes, so controllers stay
// PENDING. (Driver jobs, which start a runner process, are tested end to end in job_test.)
#include "gcs/job_manager.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gcs/actor_manager.h"
#include "gcs/kv_manager.h"
#include "gcs/node_client_pool.h"
#include "gcs/node_manager.h"
#include "gcs/record_table.h"
#include "gtest/gtest.h"
#include "placement/resource_scheduler.h"
#include "tests/testing/test_util.h"

namespace phalanx::gcs {
namespace {

void SetJobBody(rpc::PubMessage* m, const rpc::JobInfo& j) { *m->mutable_job() = j; }

// A kind that checks one spec field and records the stop and scale requests it is given.
class TestKind final : public JobKind {
 public:
  std::string Name() const override { return "test"; }
  absl::StatusOr<Launch> Prepare(const rpc::SubmitJobRequest& request,
                                 const std::string& job_id) const override {
    if (!absl::StartsWith(request.spec_yaml(), "replicas:")) {
      return absl::InvalidArgumentError("replicas: missing; add `replicas: N` to the spec");
    }
    Launch launch;
    launch.job.set_job_id(job_id.empty() ? "test-job" : job_id);
    launch.job.set_spec_yaml(request.spec_yaml());
    launch.actor.set_class_name("TestController");
    return launch;
  }
  absl::Status RequestStop(const rpc::JobInfo& job, GcsKvManager&) const override {
    absl::MutexLock lock(&mu_);
    stops_.push_back(job.job_id());
    return absl::OkStatus();
  }
  absl::Status RequestScale(const rpc::JobInfo& job, const rpc::ScaleJobRequest& request,
                            GcsKvManager&) const override {
    absl::MutexLock lock(&mu_);
    scales_.push_back(absl::StrCat(job.job_id(), "=", request.replicas()));
    return absl::OkStatus();
  }
  std::vector<std::string> stops() const {
    absl::MutexLock lock(&mu_);
    return stops_;
  }
  std::vector<std::string> scales() const {
    absl::MutexLock lock(&mu_);
    return scales_;
  }

 private:
  mutable absl::Mutex mu_;
  mutable std::vector<std::string> stops_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<std::string> scales_ ABSL_GUARDED_BY(mu_);
};

class JobManagerTest : public ::testing::Test {
 protected:
  JobManagerTest() {
    kind_ = std::make_shared<TestKind>();
    JobManagerOptions options;
    options.session_dir = dir_.path();
    options.kinds = {kind_};
    manager_ = std::make_unique<GcsJobManager>(&jobs_, &actors_, &kv_, options);
  }
  ~JobManagerTest() override { clients_.Shutdown(); }

  rpc::SubmitJobRequest KindRequest(const std::string& id = "") {
    rpc::SubmitJobRequest request;
    request.set_kind("test");
    request.set_spec_yaml("replicas: 2\n");
    request.set_submission_id(id);
    (*request.mutable_env())["WANDB_MODE"] = "offline";
    return request;
  }

  testing::TempDir dir_;
  std::unique_ptr<Store> store_ = NewInMemoryStore();
  GcsPublisher publisher_{"inc"};
  GcsNodeManager nodes_{store_.get(), &publisher_,
                        GcsNodeManager::Options{absl::Seconds(5), absl::Seconds(10)}};
  placement::ResourceScheduler scheduler_;
  NodeClientPool clients_{"token", absl::Milliseconds(200)};
  GcsActorManager actors_{store_.get(), &publisher_, &nodes_, &clients_, &scheduler_};
  GcsKvManager kv_{store_.get(), &publisher_};
  RecordTable<rpc::JobInfo> jobs_{store_.get(), &publisher_, "jobs", rpc::JOB, &SetJobBody};
  std::shared_ptr<TestKind> kind_;
  std::unique_ptr<GcsJobManager> manager_;
};

// A kind's submission records the kind's job (PENDING) and creates its controller: detached,
// restarted forever, in the job, with the job's id and the submission's env. The record is
// in the store, not only in memory.
TEST_F(JobManagerTest, AKindsSubmissionRecordsItsJobAndCreatesADetachedController) {
  auto job = manager_->Submit(KindRequest("train-1"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job_id(), "train-1");
  EXPECT_EQ(job->kind(), "test");
  EXPECT_EQ(job->state(), rpc::JOB_PENDING);
  EXPECT_GT(job->submit_time_ms(), 0);
  ASSERT_FALSE(job->controller_actor_id().empty());
  auto controller = actors_.Get(job->controller_actor_id());
  ASSERT_TRUE(controller.has_value());
  EXPECT_EQ(controller->class_name(), "TestController");
  EXPECT_TRUE(controller->detached());
  EXPECT_EQ(controller->max_restarts(), -1);
  EXPECT_EQ(controller->job_id(), "train-1");
  EXPECT_EQ(controller->env().at("PHALANX_JOB_ID"), "train-1");
  EXPECT_EQ(controller->env().at("WANDB_MODE"), "offline");
  auto stored = store_->Get("jobs", "train-1");
  ASSERT_TRUE(stored.ok() && stored->has_value());
}

// Bad input: each error names the field and the fix, and nothing is recorded.
TEST_F(JobManagerTest, BadSubmissionsAreRefusedNamingTheFieldAndRecordNothing) {
  auto expect_refused = [&](rpc::SubmitJobRequest request, absl::StatusCode code,
                            const std::string& says) {
    auto job = manager_->Submit(request);
    ASSERT_FALSE(job.ok()) << says;
    EXPECT_EQ(job.status().code(), code) << job.status();
    EXPECT_TRUE(absl::StrContains(job.status().message(), says)) << job.status();
  };
  rpc::SubmitJobRequest unknown = KindRequest();
  unknown.set_kind("tpu-pod");
  expect_refused(unknown, absl::StatusCode::kInvalidArgument, "use one of driver, test");
  rpc::SubmitJobRequest with_upload = KindRequest();
  with_upload.set_upload_id("up-1");
  expect_refused(with_upload, absl::StatusCode::kInvalidArgument, "upload_id: only driver jobs");
  rpc::SubmitJobRequest bad_spec = KindRequest();
  bad_spec.set_spec_yaml("world: 2\n");
  expect_refused(bad_spec, absl::StatusCode::kInvalidArgument, "replicas: missing");
  expect_refused(KindRequest("../etc"), absl::StatusCode::kInvalidArgument,
                 "may only hold letters");
  rpc::SubmitJobRequest no_entrypoint;
  expect_refused(no_entrypoint, absl::StatusCode::kInvalidArgument, "entrypoint: empty");
  EXPECT_TRUE(jobs_.List().empty());
  EXPECT_TRUE(actors_.List("").empty());

  ASSERT_TRUE(manager_->Submit(KindRequest("taken")).ok());
  expect_refused(KindRequest("taken"), absl::StatusCode::kAlreadyExists,
                 "is taken by a job that is PENDING");
  EXPECT_EQ(jobs_.List().size(), 1u);
}

// A stop goes to the kind (its controller takes it); a controller that is not running
// cannot, so the job ends STOPPED here and its actors are killed. Stopping it again changes
// nothing.
TEST_F(JobManagerTest, AStopGoesThroughTheKindAndEndsAJobWhoseControllerDoesNotRun) {
  auto job = manager_->Submit(KindRequest("train-1"));
  ASSERT_TRUE(job.ok()) << job.status();
  auto stopped = manager_->Stop("train-1", 0);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(kind_->stops(), std::vector<std::string>({"train-1"}));
  EXPECT_EQ(stopped->state(), rpc::JOB_STOPPED);
  EXPECT_TRUE(absl::StrContains(stopped->message(), "its controller was PENDING"))
      << stopped->message();
  EXPECT_EQ(actors_.Get(job->controller_actor_id())->state(), rpc::ACTOR_DEAD);
  auto again = manager_->Stop("train-1", 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state(), rpc::JOB_STOPPED);
  EXPECT_EQ(kind_->stops().size(), 1u);
  auto unknown = manager_->Stop("nope", 0);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
}

// A scale request goes to the kind while the job runs; a job of no kind, or one that ended,
// is refused naming why.
TEST_F(JobManagerTest, AScaleGoesToTheKindOnlyForAKindsJobThatHasNotEnded) {
  ASSERT_TRUE(manager_->Submit(KindRequest("train-1")).ok());
  rpc::ScaleJobRequest scale;
  scale.set_job_id("train-1");
  scale.set_replicas(4);
  ASSERT_TRUE(manager_->Scale(scale).ok());
  EXPECT_EQ(kind_->scales(), std::vector<std::string>({"train-1=4"}));

  rpc::JobInfo driver;
  driver.set_job_id("driver-1");
  driver.set_kind("driver");
  driver.set_state(rpc::JOB_RUNNING);
  ASSERT_TRUE(jobs_.Put("driver-1", driver).ok());
  scale.set_job_id("driver-1");
  auto refused = manager_->Scale(scale);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "cannot scale")) << refused.status();

  ASSERT_TRUE(manager_->Stop("train-1", 0).ok());
  scale.set_job_id("train-1");
  refused = manager_->Scale(scale);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "has ended (STOPPED)"))
      << refused.status();
  EXPECT_EQ(kind_->scales().size(), 1u);
  scale.set_job_id("nope");
  EXPECT_EQ(manager_->Scale(scale).status().code(), absl::StatusCode::kNotFound);
}

// A controller writes its job's state, message and status; what the GCS decided (the kind,
// the spec, the controller, the log, the processes) is never taken from it.
TEST_F(JobManagerTest, AControllersUpdateKeepsWhatTheGcsDecided) {
  auto job = manager_->Submit(KindRequest("train-1"));
  ASSERT_TRUE(job.ok()) << job.status();
  rpc::JobInfo update;
  update.set_job_id("train-1");
  update.set_state(rpc::JOB_RUNNING);
  update.set_message("epoch 1: world size 2");
  update.set_kind("driver");
  update.set_spec_yaml("replicas: 64\n");
  update.set_controller_actor_id("someone-else");
  update.set_log_path("/etc/passwd");
  update.set_runner_pid(1);
  ASSERT_TRUE(manager_->Update(update).ok());
  auto stored = jobs_.Get("train-1");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->state(), rpc::JOB_RUNNING);
  EXPECT_EQ(stored->message(), "epoch 1: world size 2");
  EXPECT_EQ(stored->kind(), "test");
  EXPECT_EQ(stored->spec_yaml(), "replicas: 2\n");
  EXPECT_EQ(stored->controller_actor_id(), job->controller_actor_id());
  EXPECT_EQ(stored->log_path(), "");
  EXPECT_EQ(stored->runner_pid(), 0);
  update.set_job_id("bad/id");
  auto bad = manager_->Update(update);
  EXPECT_TRUE(absl::StrContains(bad.message(), "UpdateJob: job_id")) << bad;
}

// A controller that died for good fails its job with the cause, and its ranks are killed;
// another actor of the job dying does not end it.
TEST_F(JobManagerTest, AControllerThatDiedForGoodFailsItsJobAndNoOtherActorDoes) {
  auto job = manager_->Submit(KindRequest("train-1"));
  ASSERT_TRUE(job.ok()) << job.status();
  rpc::ActorInfo rank;
  rank.set_class_name("Rank");
  rank.set_job_id("train-1");
  auto made = actors_.Create(rank);
  ASSERT_TRUE(made.ok()) << made.status();
  rpc::ActorInfo other = *made;
  other.set_state(rpc::ACTOR_DEAD);
  manager_->OnActorDead(other);
  EXPECT_EQ(jobs_.Get("train-1")->state(), rpc::JOB_PENDING);

  rpc::ActorInfo controller = *actors_.Get(job->controller_actor_id());
  controller.set_state(rpc::ACTOR_DEAD);
  controller.mutable_death_cause()->set_kind(rpc::DeathCause::CREATION_FAILED);
  controller.mutable_death_cause()->set_message("no module named 'torch'");
  manager_->OnActorDead(controller);
  auto failed = jobs_.Get("train-1");
  EXPECT_EQ(failed->state(), rpc::JOB_FAILED);
  EXPECT_TRUE(absl::StrContains(failed->message(), "no module named 'torch'")) << failed->message();
  EXPECT_GT(failed->end_time_ms(), 0);
  EXPECT_EQ(actors_.Get(made->actor_id())->state(), rpc::ACTOR_DEAD);
}

// A kind's job has no runner: its ranks' output is appended to a log the first append
// makes in the job's own dir; a driver job's log is its runner's.
TEST_F(JobManagerTest, AKindsJobsLogIsMadeByItsFirstAppendInItsOwnDir) {
  ASSERT_TRUE(manager_->Submit(KindRequest("train-1")).ok());
  auto none = manager_->LogPath("train-1");
  EXPECT_TRUE(absl::StrContains(none.status().message(), "no output yet")) << none.status();
  ASSERT_TRUE(manager_->AppendLog("train-1", "rank 0: step 1\n").ok());
  ASSERT_TRUE(manager_->AppendLog("train-1", "rank 1: step 1\n").ok());
  auto path = manager_->LogPath("train-1");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir_.path() + "/jobs/train-1/output.log");
  auto tail = manager_->TailLog("train-1", 15);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_EQ(tail->first, "rank 1: step 1\n");
  EXPECT_EQ(tail->second, 30);

  rpc::JobInfo driver;
  driver.set_job_id("driver-1");
  driver.set_kind("driver");
  ASSERT_TRUE(jobs_.Put("driver-1", driver).ok());
  EXPECT_EQ(manager_->AppendLog("driver-1", "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->AppendLog("nope", "x").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace phalanx::gcs
