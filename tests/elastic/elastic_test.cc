// Elastic training under real faults: SIGKILL, OOM, exit codes, node-manager death, a node
// joining, a slowed rank, a SIGSTOPped rank, GCS kill -9, scale requests. Each test checks
// that the job heals, the world size after healing, that no committed step was lost (the
// final weights equal those of an uninterrupted run within 1e-5, after all steps), that each
// sample was used exactly once per pass, and that no process is left behind.
#include "actors/elastic/elastic.h"

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "actors/api.h"
#include "actors/elastic/trainer_host.h"
#include "examples/cpp/regression_trainer.h"
#include "gcs/gcs_client.h"
#include "gtest/gtest.h"
#include "runtime/common/files.h"
#include "runtime/common/process.h"
#include "runtime/rpc/describe.h"
#include "tests/testing/cluster_test.h"
#include "tests/testing/test_util.h"

using phalanx::examples::RegressionTrainer;
PHALANX_TRAINER(RegressionTrainer);

namespace phalanx::elastic {
namespace {

std::vector<double> Weights(const JobStatus& s) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(s.results, ';')) {
    if (!absl::StartsWith(part, "weights=")) continue;
    for (absl::string_view w : absl::StrSplit(part.substr(8), ',', absl::SkipEmpty())) {
      double v = 0;
      EXPECT_TRUE(absl::SimpleAtod(w, &v));
      out.push_back(v);
    }
  }
  return out;
}

// "min,max" of per-sample visits.
std::pair<int, int> Visits(const JobStatus& s) {
  for (absl::string_view part : absl::StrSplit(s.results, ';')) {
    if (!absl::StartsWith(part, "visits=")) continue;
    std::vector<std::string> f = absl::StrSplit(part.substr(7), ',');
    int lo = -1, hi = -1;
    if (f.size() == 2 && absl::SimpleAtoi(f[0], &lo) && absl::SimpleAtoi(f[1], &hi)) {
      return {lo, hi};
    }
  }
  return {-1, -1};
}

bool HasEvent(const JobStatus& s, const std::string& kind, const std::string& text = "") {
  for (const auto& e : s.events) {
    if (e.kind == kind && e.message.find(text) != std::string::npos) return true;
  }
  return false;
}

class ElasticTest : public testing::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    if (HasFatalFailure()) return;
  }

  void TearDown() override {
    // Every worker that ever ran must be gone once the nodes stop.
    std::vector<int> pids;
    auto actors = client_->ListActors();
    if (actors.ok()) {
      for (const auto& a : *actors) {
        if (a.pid() > 0) pids.push_back(a.pid());
      }
    }
    ClusterTest::TearDown();
    for (auto& [id, n] : nodes_) n.Terminate();
    for (int pid : pids) {
      EXPECT_TRUE(testing::WaitFor([&] { return !ProcessAlive(pid); }, absl::Seconds(5)))
          << "worker " << pid << " outlived its node";
    }
  }

  void AddNode(const std::string& id, double cpus,
               std::vector<std::pair<std::string, std::string>> env = {}) {
    testing::NodeOptions options;
    options.num_cpus = cpus;
    options.memory = 16.0 * (1 << 30);
    nodes_[id] = testing::StartNode(*gcs_, id, options, std::move(env));
  }

  JobSpec Spec(int replicas, int min, int max) {
    JobSpec spec;
    spec.name = "reg";
    spec.trainer = "RegressionTrainer";
    spec.replicas = replicas;
    spec.min_replicas = min;
    spec.max_replicas = max;
    spec.num_samples = 512;
    spec.global_batch = 32;
    spec.seed = 3;
    spec.data_epochs = 8;  // 128 steps
    spec.resources = {{"CPU", 1}};
    spec.hang_timeout_s = 5;
    spec.below_min_timeout_s = 20;
    spec.scale_out_debounce_s = 0.5;
    spec.config = {{"stepMs", "15"}, {"dims", "8"}, {"lr", "0.3"}};
    return spec;
  }

  // Runs `spec` to the end; `chaos` is called with each status while it runs.
  JobStatus Run(const JobSpec& spec, const std::function<void(const JobStatus&)>& chaos = nullptr) {
    auto job = Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    JobStatus last;
    absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (absl::Now() < deadline) {
      auto s = Status(*job);
      if (s.ok()) {
        last = *s;
        if (last.Done()) break;
        if (chaos) chaos(last);
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_TRUE(last.Done()) << FormatStatus(last);
    return last;
  }

  // The uninterrupted run every faulty run is compared with.
  std::vector<double> Baseline(const JobSpec& spec) {
    JobSpec quiet = spec;
    quiet.name = "baseline";
    quiet.config.erase("oomAtStep");
    quiet.config.erase("exitAtStep");
    JobStatus s = Run(quiet);
    EXPECT_EQ(s.state, "SUCCEEDED") << FormatStatus(s);
    return Weights(s);
  }

  // The checks every healed run passes.
  void ExpectHealed(const JobStatus& s, const JobSpec& spec, const std::vector<double>& baseline,
                    int world) {
    EXPECT_EQ(s.state, "SUCCEEDED") << FormatStatus(s);
    EXPECT_EQ(s.step, spec.TotalSteps()) << FormatStatus(s);
    EXPECT_EQ(s.world_size, world) << FormatStatus(s);
    std::vector<double> w = Weights(s);
    ASSERT_EQ(w.size(), baseline.size()) << s.results;
    for (size_t j = 0; j < w.size(); ++j) EXPECT_NEAR(w[j], baseline[j], 1e-5) << "weight " << j;
    auto [lo, hi] = Visits(s);
    EXPECT_EQ(lo, spec.data_epochs) << "a sample was used fewer times than there were passes";
    EXPECT_EQ(hi, spec.data_epochs) << "a sample was used more than once in a pass";
  }

  // `event` → `action` with a dying gasp, into <test dir>/ckpt; no periodic checkpoints (so
  // that any checkpoint there is a gasp).
  void DumpOn(JobSpec* spec, const std::string& event, Action action) {
    spec->checkpoint_dir = dir_.path() + "/ckpt";
    spec->checkpoint_interval = 0;
    FaultPolicy policy;
    policy.event = event;
    policy.action = action;
    policy.dump = true;
    spec->policies = {policy};
  }

  int PidOfRank(const JobStatus& s, int rank) {
    if (rank >= static_cast<int>(s.ranks.size())) return -1;
    auto a = client_->GetActor(s.ranks[rank].actor_id);
    return a.ok() ? a->pid() : -1;
  }

  std::map<std::string, testing::ChildProcess> nodes_;
  testing::TempDir dir_;
};

TEST_F(ElasticTest, SigkilledRankSurvivorsGoOnAndTheRespawnJoins) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  auto baseline = Baseline(spec);
  bool killed = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (!killed && now.step >= 30 && now.world_size == 3) {
      int pid = PidOfRank(now, 1);
      if (pid > 0) killed = ::kill(pid, SIGKILL) == 0;
    }
  });
  ASSERT_TRUE(killed);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "rank_died", "SIGNALED(9")) << FormatStatus(s);
  // The survivors formed an epoch of two before the replacement joined (epoch of three).
  bool shrank = false, restored = false;
  for (const auto& e : s.events) {
    if (e.kind == "epoch" && e.world_size == 2) shrank = true;
    if (e.kind == "epoch" && shrank && e.world_size == 3) restored = true;
  }
  EXPECT_TRUE(shrank && restored) << FormatStatus(s);
  EXPECT_EQ(s.restarts, 1);
}

TEST_F(ElasticTest, DyingRanksWithDumpLeaveTheCheckpointTheJobResumesFrom) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  DumpOn(&spec, "exited", Action::kRestart);
  auto baseline = Baseline(spec);
  int64_t stopped_at = -1;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (stopped_at < 0 && now.step >= 40 && now.world_size == 3) {
      // Every rank told to end at once (as a node drain would): each writes its last words.
      for (int r = 0; r < 3; ++r) {
        int pid = PidOfRank(now, r);
        if (pid > 0) ::kill(pid, SIGTERM);
      }
      stopped_at = now.step;
    }
  });
  ASSERT_GE(stopped_at, 40);
  ExpectHealed(s, spec, baseline, 3);
  // Every rank was lost, and the job went on from the dying gasp, not from step 0.
  int64_t resumed = -1;
  for (const auto& e : s.events) {
    if (e.kind != "restart_from_checkpoint") continue;
    size_t at = e.message.find("starting from step ");
    if (at != std::string::npos) resumed = std::atoll(e.message.c_str() + at + 19);
  }
  EXPECT_GE(resumed, stopped_at) << FormatStatus(s);
  bool gasp_file = false;
  for (const auto& f : ListDir(spec.checkpoint_dir))
    gasp_file |= f.find("-dying-rank") != std::string::npos;
  EXPECT_TRUE(gasp_file);
}

TEST_F(ElasticTest, AnUnreadableCheckpointIsReportedAndTheJobStartsOver) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  spec.checkpoint_dir = dir_.path() + "/ckpt";
  spec.checkpoint_interval = 20;
  auto baseline = Baseline(spec);
  bool lost = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (lost || now.last_checkpoint_step < 40 || now.world_size != 3) return;
    // The checkpoints are gone (a wiped disk), and then every rank.
    for (const auto& f : ListDir(spec.checkpoint_dir)) {
      ::unlink((spec.checkpoint_dir + "/" + f).c_str());
    }
    for (int r = 0; r < 3; ++r) {
      int pid = PidOfRank(now, r);
      if (pid > 0) ::kill(pid, SIGKILL);
    }
    lost = true;
  });
  ASSERT_TRUE(lost);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "checkpoint_unreadable")) << FormatStatus(s);
  EXPECT_TRUE(HasEvent(s, "restart_from_checkpoint", "starting from step 0")) << FormatStatus(s);
}

TEST_F(ElasticTest, ExhaustedRestartBudgetShrinksThenBelowMinFails) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 2, 3);
  spec.restart_limit = 0;
  auto baseline = Baseline(spec);
  bool killed = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (!killed && now.step >= 20 && now.world_size == 3) {
      int pid = PidOfRank(now, 2);
      if (pid > 0) killed = ::kill(pid, SIGKILL) == 0;
    }
  });
  ASSERT_TRUE(killed);
  ExpectHealed(s, spec, baseline, 2);  // shrunk to 2, never respawned
  EXPECT_TRUE(HasEvent(s, "rank_died", "restart budget exhausted")) << FormatStatus(s);
  EXPECT_EQ(s.restarts, 0);

  // Two ranks, two needed, no respawns allowed: losing one fails the job.
  JobSpec strict = Spec(2, 2, 2);
  strict.restart_limit = 0;
  strict.below_min_timeout_s = 3;
  killed = false;
  JobStatus f = Run(strict, [&](const JobStatus& now) {
    if (!killed && now.step >= 10 && now.world_size == 2) {
      int pid = PidOfRank(now, 1);
      if (pid > 0) killed = ::kill(pid, SIGKILL) == 0;
    }
  });
  EXPECT_EQ(f.state, "FAILED") << FormatStatus(f);
  EXPECT_NE(f.message.find("minReplicas"), std::string::npos) << f.message;
}

TEST_F(ElasticTest, ExitCodePolicyPicksTheAction) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  auto baseline = Baseline(spec);
  spec.config["exitAtStep"] = "25";
  spec.config["exitCode"] = "101";
  spec.config["faultRank"] = "1";
  spec.config["faultMarker"] = dir_.path() + "/exit-marker";
  FaultPolicy shrink;
  shrink.exit_codes = {129, 101};
  shrink.action = Action::kShrink;
  spec.policies = {shrink};
  JobStatus s = Run(spec);
  ExpectHealed(s, spec, baseline, 2);
  EXPECT_TRUE(HasEvent(s, "rank_died", "EXITED(101); policy: shrink")) << FormatStatus(s);
  EXPECT_EQ(s.restarts, 0);

  // failJob on that code fails the job at once.
  JobSpec fatal = Spec(2, 1, 2);
  fatal.config["exitAtStep"] = "10";
  fatal.config["exitCode"] = "129";
  FaultPolicy fail;
  fail.exit_codes = {129};
  fail.action = Action::kFailJob;
  fatal.policies = {fail};
  JobStatus f = Run(fatal);
  EXPECT_EQ(f.state, "FAILED") << FormatStatus(f);
  EXPECT_NE(f.message.find("EXITED(129)"), std::string::npos) << f.message;
}

TEST_F(ElasticTest, OomKilledRankComesBackWithTwiceTheMemoryOnAFullNode) {
  // The three bundles of one CPU fill the node: the larger rank no longer fits its bundle,
  // which is given back so that it fits beside the others.
  AddNode("node-a", 3);
  JobSpec spec = Spec(3, 1, 3);
  spec.resources["memory"] = 256.0 * (1 << 20);
  auto baseline = Baseline(spec);
  spec.config["oomAtStep"] = "20";
  spec.config["faultRank"] = "2";
  spec.config["faultMarker"] = dir_.path() + "/oom-marker";
  JobStatus s = Run(spec);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "rank_died", "OOM_KILLED")) << FormatStatus(s);
  EXPECT_TRUE(HasEvent(s, "rank_died", "respawnLarger: memory 256.0 MiB → 512.0 MiB"))
      << FormatStatus(s);
  int larger = 0;
  for (const auto& r : s.ranks) larger += r.memory_bytes == 512.0 * (1 << 20) ? 1 : 0;
  EXPECT_EQ(larger, 1) << FormatStatus(s);
}

TEST_F(ElasticTest, AnOomWarnedRankWithDumpWritesItsStateBeforeTheKill) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  spec.resources["memory"] = 512.0 * (1 << 20);
  DumpOn(&spec, "oom", Action::kRespawnLarger);
  auto baseline = Baseline(spec);
  spec.config["oomAtStep"] = "20";
  spec.config["faultRank"] = "2";
  spec.config["faultMarker"] = dir_.path() + "/oom-marker";
  // Past 90% of the limit, below it: the node's warning (SIGUSR1) comes while it pauses.
  spec.config["oomHoldAtBytes"] = std::to_string(455 << 20);
  spec.config["oomHoldMs"] = "400";
  JobStatus s = Run(spec);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "rank_died", "OOM_KILLED")) << FormatStatus(s);
  // It was warned in step 20 (holding the state of 20 steps) and wrote that state first,
  // though the step that used the memory held the state lock.
  std::string gasp = spec.checkpoint_dir + "/reg-dying-rank2-step20.ckpt";
  auto content = ReadFile(gasp);
  ASSERT_TRUE(content.ok()) << gasp << " is missing; there: "
                            << absl::StrJoin(ListDir(spec.checkpoint_dir), ", ");
  EXPECT_TRUE(absl::StartsWith(*content, "20\n"));
}

TEST_F(ElasticTest, NodeManagerDeathRespawnsItsRanksElsewhere) {
  AddNode("node-a", 4);
  AddNode("node-b", 1);
  JobSpec spec = Spec(3, 1, 3);
  auto baseline = Baseline(spec);
  bool killed = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (!killed && now.step >= 20) {
      bool on_b = false;
      for (const auto& r : now.ranks) on_b |= r.node_id == "node-b";
      if (on_b) {
        nodes_["node-b"].KillAndWait();
        killed = true;
      }
    }
  });
  ASSERT_TRUE(killed);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "rank_died", "NODE_DIED")) << FormatStatus(s);
  for (const auto& r : s.ranks) EXPECT_EQ(r.node_id, "node-a") << FormatStatus(s);
}

TEST_F(ElasticTest, ANodeJoiningGrowsTheJobTowardMax) {
  AddNode("node-a", 2);
  JobSpec spec = Spec(2, 1, 3);
  auto baseline = Baseline(spec);
  bool added = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (!added && now.step >= 15) {
      AddNode("node-b", 1);
      added = true;
    }
  });
  ASSERT_TRUE(added);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "scaling_out")) << FormatStatus(s);
}

TEST_F(ElasticTest, AStragglerFoundByTheNetworkCheckIsReplaced) {
  AddNode("node-a", 4);
  AddNode("node-slow", 1, {{"PHALANX_NETCHECK_DELAY_MS", "300"}});
  JobSpec spec = Spec(3, 1, 3);
  spec.straggler_check = true;
  auto baseline = Baseline(spec);
  JobStatus s = Run(spec);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "straggler", "node-slo")) << FormatStatus(s);
  for (const auto& r : s.ranks) EXPECT_NE(r.node_id, "node-slow") << FormatStatus(s);
}

TEST_F(ElasticTest, AStoppedRankIsFoundByTheHangTimeoutAndRestarted) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  spec.hang_timeout_s = 2;
  auto baseline = Baseline(spec);
  bool stopped = false;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (!stopped && now.step >= 20 && now.world_size == 3) {
      int pid = PidOfRank(now, 1);
      if (pid > 0) stopped = ::kill(pid, SIGSTOP) == 0;
    }
  });
  ASSERT_TRUE(stopped);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "hang", "does not answer")) << FormatStatus(s);
}

TEST_F(ElasticTest, ScaleRequestsAreGraceful) {
  AddNode("node-a", 4);
  JobSpec spec = Spec(3, 1, 3);
  spec.data_epochs = 12;
  auto baseline = Baseline(spec);
  int phase = 0;
  std::string job;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    job = now.job_id;
    if (phase == 0 && now.step >= 15 && now.world_size == 3) {
      auto bad = Scale(job, 9);  // past maxReplicas: refused, nothing changes
      EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
      ASSERT_TRUE(Scale(job, 0, {0}).ok());  // rank 0 leaves by name
      phase = 1;
    } else if (phase == 1 && now.world_size == 2) {
      ASSERT_TRUE(Scale(job, 3).ok());
      phase = 2;
    }
  });
  EXPECT_EQ(phase, 2);
  ExpectHealed(s, spec, baseline, 3);
  EXPECT_TRUE(HasEvent(s, "scaled_in")) << FormatStatus(s);
  auto late = Scale(s.job_id, 3);  // the job has ended
  EXPECT_TRUE(absl::IsFailedPrecondition(late)) << late;
}

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
  std::set<std::string> ranks_before;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (killed_at >= 0 || now.step < 40 || now.world_size != 3) return;
    auto job = client_->GetJob(now.job_id);
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
  std::set<std::string> ranks_after;
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
  auto job = client_->GetJob(s.job_id);
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
  std::set<std::string> ranks_before;
  JobStatus s = Run(spec, [&](const JobStatus& now) {
    if (stopped_pid > 0 || now.step < 40 || now.world_size != 3) return;
    auto job = client_->GetJob(now.job_id);
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
  std::set<std::string> ranks_after;
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
        if (now.ranks[r].node_id == "node-b") stopped_rank_pid = PidOfRank(now, r);
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
    auto job = client_->GetJob(now.job_id);
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
        auto now = client_->ListActors(s.job_id);
        if (!now.ok()) return false;
        for (const auto& a : *now) {
          if (a.class_name() == "RegressionTrainer" && a.state() != rpc::ACTOR_DEAD) return false;
        }
        return true;
      },
      absl::Seconds(10)))
      << "a trainer outlived its job";
}

TEST_F(ElasticTest, MalformedSpecsAreRefusedBeforeAnythingStarts) {
  auto missing = ParseJobSpec("name: x\ntrainer: T\nreplicas: 2\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'data.numSamples'"), std::string::npos)
      << missing.status();
  auto range = ParseJobSpec(
      "name: x\ntrainer: T\nreplicas: 2\nminReplicas: 3\ndata: {numSamples: 10, globalBatch: 4}\n"
      "steps: 5\n");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("'minReplicas': 3"), std::string::npos) << range.status();
  auto action = ParseJobSpec(
      "name: x\ntrainer: T\nreplicas: 1\ndata: {numSamples: 10, globalBatch: 4}\nsteps: 5\n"
      "faultTolerantPolicy:\n  - event: oom\n    action: reboot\n");
  ASSERT_FALSE(action.ok());
  EXPECT_NE(action.status().message().find("'reboot' is not an action"), std::string::npos)
      << action.status();
  auto typo = ParseJobSpec("name: x\ntrainer: T\nrepliacs: 2\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("'repliacs': unknown field"), std::string::npos)
      << typo.status();
  auto memory = ParseJobSpec(
      "name: x\ntrainer: T\nreplicas: 1\nresources: {memory: lots}\n"
      "data: {numSamples: 10, globalBatch: 4}\nsteps: 5\n");
  ASSERT_FALSE(memory.ok());
  EXPECT_NE(memory.status().message().find("resources.memory"), std::string::npos)
      << memory.status();
  auto ok = ParseJobSpec(
      "name: x\ntrainer: T\nreplicas: 2\nminReplicas: 1\nmaxReplicas: 4\n"
      "resources: {CPU: 1, memory: 1Gi}\ndata: {numSamples: 100, globalBatch: 10}\n"
      "dataEpochs: 2\nfaultTolerantPolicy:\n  - exitCodes: \"129,101\"\n    action: shrink\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->resources.at("memory"), 1073741824.0);
  EXPECT_EQ(ok->TotalSteps(), 20);
  EXPECT_EQ(MatchPolicy(*ok, "exited", 101, 0).action, Action::kShrink);
  EXPECT_EQ(MatchPolicy(*ok, "oom", 0, 0).action, Action::kRespawnLarger);
  // Nothing ran: no job was recorded.
  EXPECT_TRUE(client_->ListJobs()->empty());
}

}  // namespace
}  // namespace phalanx::elastic
