// The elastic tests' fixture (elastic_test.cc, control_plane_test.cc): a real control plane,
// nodes started on demand, and a regression job whose final weights are known, so that a
// healed job can be told from a merely finished one.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "actors/api.h"
#include "base/describe.h"
#include "base/files.h"
#include "base/process.h"
#include "client/gcs_client.h"
#include "elastic/elastic.h"
#include "examples/cpp/regression_trainer.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_test.h"
#include "tests/testing/test_util.h"

namespace phalanx::elastic::test {

inline std::vector<double> Weights(const JobStatus& s) {
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
inline std::pair<int, int> Visits(const JobStatus& s) {
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

inline bool HasEvent(const JobStatus& s, const std::string& kind, const std::string& text = "") {
  for (const auto& e : s.events) {
    if (e.kind == kind && e.message.find(text) != std::string::npos) return true;
  }
  return false;
}

// Prints the events of `kind` (the figures a test's log shows).
inline void PrintEvents(const JobStatus& s, const std::string& kind) {
  for (const auto& e : s.events) {
    if (e.kind == kind) std::printf("%s: %s\n", kind.c_str(), e.message.c_str());
  }
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
               std::vector<std::pair<std::string, std::string>> env = {},
               int64_t object_store_bytes = 0) {
    testing::NodeOptions options;
    options.num_cpus = cpus;
    options.object_store_bytes = object_store_bytes;
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

  // A phase ran past its bound (`phase` and `setting` in its event), the stuck rank was
  // restarted, and the job healed to `world`.
  void ExpectPhaseTimedOutAndHealed(const JobStatus& s, const JobSpec& spec,
                                    const std::vector<double>& baseline, int world,
                                    const std::string& phase, const std::string& setting) {
    PrintEvents(s, "phase_timeout");
    ExpectHealed(s, spec, baseline, world);
    EXPECT_TRUE(HasEvent(s, "phase_timeout", phase)) << FormatStatus(s);
    EXPECT_TRUE(HasEvent(s, "phase_timeout", setting)) << FormatStatus(s);
    EXPECT_GE(s.restarts, 1) << FormatStatus(s);
  }

  // Checkpoints every 10 steps into <test dir>/ckpt, and RegressionTrainer's exitTrigger (a
  // rank exits when it next loads a state once <prefix>.<rank> or <prefix>.any exists): returns
  // the prefix.
  std::string CheckpointsAndExitTrigger(JobSpec* spec) {
    spec->checkpoint_dir = dir_.path() + "/ckpt";
    spec->checkpoint_interval = 10;
    spec->config["exitTrigger"] = dir_.path() + "/exit";
    return spec->config["exitTrigger"];
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
    auto a = client_->GetActor(s.ranks[rank].actor_id.Hex());
    return a.ok() ? a->pid() : -1;
  }

  // Runs `spec` (after its fault-free baseline), SIGSTOPs rank 1 once the job is at step 20
  // with 3 ranks, and checks that the job healed and that its one recovery is the hang (not
  // the kill that ended it), closed at full strength. Returns the final status, and in
  // `*detected_ms` how long after the stuck step's start the hang was found.
  JobStatus RunWithRank1Stopped(const JobSpec& spec, int64_t* detected_ms) {
    auto baseline = Baseline(spec);
    bool stopped = false;
    JobStatus s = Run(spec, [&](const JobStatus& now) {
      if (!stopped && now.step >= 20 && now.world_size == 3) {
        int pid = PidOfRank(now, 1);
        if (pid > 0) stopped = ::kill(pid, SIGSTOP) == 0;
      }
    });
    *detected_ms = -1;
    EXPECT_TRUE(stopped);
    ExpectHealed(s, spec, baseline, 3);
    EXPECT_EQ(s.recoveries.size(), 1u) << FormatStatus(s);
    if (s.recoveries.size() != 1) return s;
    EXPECT_EQ(s.recoveries[0].kind, "hang");
    EXPECT_GT(s.recoveries[0].full_strength_ms, 0) << FormatStatus(s);
    *detected_ms = s.recoveries[0].detected_ms - s.recoveries[0].fault_ms;
    return s;
  }

  // Runs `spec` with a hang timeout of 60 s (so a group timeout of 60 s: min(60 s, the hang
  // timeout)), after its fault-free baseline, on one node with room for 4 ranks. Once the job
  // is at step 30 with 3 ranks, rank 1 stops (SIGSTOP), then rank 2 dies (SIGKILL): the step
  // fails, and the next epoch forms with rank 1 in it, never answering. `then(status, rank 1's
  // pid)`, if given, is called right after. Checks that the job healed to 3 ranks.
  JobStatus RunStoppingRank1AsRank2Dies(
      JobSpec spec, const std::function<void(const JobStatus&, int)>& then = nullptr) {
    spec.hang_timeout_s = 60;
    AddNode("node-a", 4);
    auto baseline = Baseline(spec);
    bool done = false;
    JobStatus s = Run(spec, [&](const JobStatus& now) {
      if (done || now.step < 30 || now.world_size != 3) return;
      done = true;
      int stopped = PidOfRank(now, 1), killed = PidOfRank(now, 2);
      ASSERT_GT(stopped, 0);
      ASSERT_GT(killed, 0);
      ::kill(stopped, SIGSTOP);
      ::kill(killed, SIGKILL);
      if (then) then(now, stopped);
    });
    EXPECT_TRUE(done);
    ExpectHealed(s, spec, baseline, 3);
    return s;
  }

  std::map<std::string, testing::ChildProcess> nodes_;
  testing::TempDir dir_;
};

}  // namespace phalanx::elastic::test
