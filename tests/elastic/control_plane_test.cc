// Elastic training when the control plane fails: the GCS killed and restarted, the
// controller killed or stopped (its lease runs out; a successor adopts the live ranks), a node
// manager stopped (fenced, its ranks replaced), a finished job's controller. Same checks as
// elastic_test.cc: healed, no committed step lost, nothing left behind.
#include "tests/elastic/elastic_fixture.h"

namespace phalanx::elastic::test {
namespace {

TEST_F(ElasticTest, TrainingGoesOnThroughAGcsRestart) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  auto baseline = Baseline(spec);
  bool restarted = false;
  int64_t step_at_kill = 0;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (!restarted && now.step >= 20) {
      step_at_kill = now.step;
      gcs_->Kill9();
      absl::SleepFor(absl::Milliseconds(500));  // the ranks keep stepping meanwhile
      gcs_->Restart();
      restarted = true;
    }
  });
  ASSERT_TRUE(restarted);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_EQ(s.restarts, 0) << FormatStatus(s);
}

TEST_F(ElasticTest, AKilledControllerComesBackAndAdoptsTheLiveRanks) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  auto baseline = Baseline(spec);
  int64_t killed_at = -1;
  std::set<ActorId> ranks_before;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (killed_at >= 0 || now.step < 40 || now.world_size != 3) return;
    auto job = client_->GetJob(now.job_id.str());
    ASSERT_TRUE(job.ok()) << job.status();
    auto controller = client_->GetActor(job->controller_actor_id());
    ASSERT_TRUE(controller.ok() && controller->pid() > 0) << controller.status();
    for (const auto& r : now.ranks) ranks_before.insert(r.actor_id);
    ::kill(controller->pid(), SIGKILL);
    killed_at = now.step;
  });
  ASSERT_GE(killed_at, 40);
  ExpectHealed(s, spec, baseline, 3);
  // The same three ranks finished the job: adopted, not restarted from a checkpoint.
  EXPECT_TRUE(HasEvent(s, "controller_restarted", "adopted its 3 live ranks")) << FormatStatus(s);
  EXPECT_FALSE(HasEvent(s, "restart_from_checkpoint")) << FormatStatus(s);
  std::set<ActorId> ranks_after;
  for (const auto& r : s.ranks) ranks_after.insert(r.actor_id);
  EXPECT_EQ(ranks_after, ranks_before);
  EXPECT_EQ(s.restarts, 0) << FormatStatus(s);
}

TEST_F(ElasticTest, AFinishedJobsControllerEndsForGood) {
  // Left alive, it was started again when its host died, and a controller started again
  // made a new reservation for its long-finished job (which held hosts for no one).
  AddNode("node-a", 4);
  JobSpec spec = Spec(2, 1, 2);
  JobStatus s = Run(spec);
  ASSERT_EQ(s.state, "SUCCEEDED") << FormatStatus(s);
  auto job = client_->GetJob(s.job_id.str());
  ASSERT_TRUE(job.ok()) << job.status();
  rpc::ActorInfo controller;
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        auto info = client_->GetActor(job->controller_actor_id());
        if (info.ok()) controller = *info;
        return info.ok() && info->state() == rpc::ACTOR_DEAD;
      },
      absl::Seconds(10)))
      << rpc::DescribeActor(controller) << " is " << rpc::ActorState_Name(controller.state());
  EXPECT_EQ(controller.death_cause().kind(), rpc::DeathCause::KILLED_BY_USER);
  EXPECT_EQ(controller.num_restarts(), 0);
}

TEST_F(ElasticTest, AStoppedControllerLosesItsLeaseAndItsSuccessorAdoptsTheRanks) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  spec.controller_lease_s = 1;  // within the 5 s hang timeout
  auto baseline = Baseline(spec);
  int stopped_pid = -1;
  std::string controller_id;
  std::set<ActorId> ranks_before;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (stopped_pid > 0 || now.step < 40 || now.world_size != 3) return;
    auto job = client_->GetJob(now.job_id.str());
    ASSERT_TRUE(job.ok()) << job.status();
    auto controller = client_->GetActor(job->controller_actor_id());
    ASSERT_TRUE(controller.ok() && controller->pid() > 0) << controller.status();
    for (const auto& r : now.ranks) ranks_before.insert(r.actor_id);
    controller_id = controller->actor_id();
    stopped_pid = controller->pid();
    ::kill(stopped_pid, SIGSTOP);
  });
  if (stopped_pid > 0) {  // it was SIGKILLed when its lease ran out; make sure
    ::kill(stopped_pid, SIGCONT);
    ::kill(stopped_pid, SIGKILL);
  }
  ASSERT_GT(stopped_pid, 0);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "controller_restarted", "adopted its 3 live ranks")) << FormatStatus(s);
  std::set<ActorId> ranks_after;
  for (const auto& r : s.ranks) ranks_after.insert(r.actor_id);
  EXPECT_EQ(ranks_after, ranks_before);
  auto controller = client_->GetActor(controller_id);
  ASSERT_TRUE(controller.ok()) << controller.status();
  bool lease_expired = false;
  for (const auto& cause : controller->history()) {
    lease_expired |= cause.kind() == rpc::DeathCause::LEASE_EXPIRED;
  }
  EXPECT_TRUE(lease_expired) << controller->DebugString();
}

TEST_F(ElasticTest, AStoppedNodeManagerIsFencedItsRanksReplacedAndItRegistersAgain) {
  AddNode("node-a", 4);
  AddNode("node-b", 1);
  JobSpec spec = Spec(3, 1, 3);
  spec.data_epochs = 12;
  spec.config["stepMs"] = "30";
  auto baseline = Baseline(spec);
  int stopped_rank_pid = -1;
  bool resumed = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (stopped_rank_pid < 0 && now.step >= 20 && now.world_size == 3) {
      for (size_t r = 0; r < now.ranks.size(); ++r) {
        if (now.ranks[r].node_id.Hex() == "node-b") stopped_rank_pid = PidOfRank(now, r);
      }
      if (stopped_rank_pid > 0) nodes_["node-b"].Kill(SIGSTOP);
      return;
    }
    // Its rank fences itself (its node manager cannot): gone while node-b is still stopped.
    if (stopped_rank_pid > 0 && !resumed && !ProcessAlive(stopped_rank_pid)) {
      nodes_["node-b"].Kill(SIGCONT);
      resumed = true;
    }
  });
  ASSERT_GT(stopped_rank_pid, 0);
  if (!resumed) {  // the job ended first: node-b is still stopped
    resumed = testing::WaitFor([&] { return !ProcessAlive(stopped_rank_pid); }, absl::Seconds(5));
  }
  nodes_["node-b"].Kill(SIGCONT);
  EXPECT_TRUE(resumed) << "the stopped node's rank (pid " << stopped_rank_pid << ") outlived it";
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "rank_died", "NODE_DIED")) << FormatStatus(s);
  // node-b's daemon came back as a new node: two alive nodes again, one of them not "node-b".
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        auto nodes = client_->GetAllNodes(true);
        if (!nodes.ok() || nodes->size() != 2) return false;
        for (const auto& n : *nodes) {
          if (n.node_id() == "node-b") return false;
        }
        return true;
      },
      absl::Seconds(10)))
      << "node-b did not register again as a new node";
}

TEST_F(ElasticTest, AControllerKilledWhileStartingTheJobStartsItAgain) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  auto baseline = Baseline(spec);
  bool killed = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (killed) return;
    // As soon as it runs: it is placing or starting the ranks, or forming the first epoch.
    auto job = client_->GetJob(now.job_id.str());
    if (!job.ok() || job->controller_actor_id().empty()) return;
    auto controller = client_->GetActor(job->controller_actor_id());
    if (!controller.ok() || controller->pid() <= 0) return;
    ::kill(controller->pid(), SIGKILL);
    killed = true;
  });
  ASSERT_TRUE(killed);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "controller_restarted")) << FormatStatus(s);
  // Nothing the first controller started is left once the job ended.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        auto now = client_->ListActors(s.job_id.str());
        if (!now.ok()) return false;
        for (const auto& a : *now) {
          if (a.class_name() == "RegressionTrainer" && a.state() != rpc::ACTOR_DEAD) return false;
        }
        return true;
      },
      absl::Seconds(10)))
      << "a trainer outlived its job";
}

}  // namespace
}  // namespace phalanx::elastic::test
