// recovery_bench: how fast an elastic job heals after kill -9 of one of its 4 ranks, against
// torchrun's elastic restart (the peer script bench/peers/torchrun_recovery.sh, Debian's
// python3-torch) in the same run.
//
//   build/bin/recovery_bench [runs, default 5] [path to torchrun_recovery.sh]
//
// Phalanx: a 4-rank job (steps of 66 ms, as the peer's), rank 1 SIGKILLed at step 55 (at a
// random point of the step).
//   recovery      kill → the survivors' next agreed step
//   full strength kill → the first agreed step with 4 ranks again
//   steps lost    committed steps that had to be redone (the step in flight is not counted:
//                 it was never committed)
// torchrun: kill -9 of one of 2 workers → first step after the restart; steps lost since the
// last checkpoint (every 10 steps).
//
// Last line: RESULT phalanx_recovery_s=... phalanx_full_strength_s=... torchrun_recovery_s=...
//            ratio=... phalanx_steps_lost=... torchrun_steps_lost=...
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <regex>

#include "absl/strings/str_cat.h"
#include "actors/api.h"
#include "actors/elastic/elastic.h"
#include "bench/bench_util.h"
#include "examples/cpp/regression_trainer.h"
#include "gcs/gcs_client.h"
#include "runtime/common/files.h"
#include "runtime/worker/worker_host.h"
#include "tests/testing/test_util.h"

using phalanx::examples::RegressionTrainer;
PHALANX_TRAINER(RegressionTrainer);

namespace phalanx {
namespace {

struct Outcome {
  double recovery_s = -1;
  double full_strength_s = -1;
  int64_t steps_lost = -1;
  // The same two spans as the job's own recovery timeline records them (the node's time of
  // death → the controller's resumed and full-strength steps), for the dashboard's and the
  // metrics' figures to be checked against this benchmark's.
  double timeline_recovery_s = -1;
  double timeline_full_strength_s = -1;
};

Outcome OneRun(gcs::GcsClient& gcs, const std::string& dir, int run) {
  std::string log = absl::StrCat(dir, "/steps-", run, ".log");
  elastic::JobSpec spec;
  spec.name = absl::StrCat("recovery", run);
  spec.trainer = "RegressionTrainer";
  spec.replicas = 4;
  spec.min_replicas = 1;
  spec.max_replicas = 4;
  spec.num_samples = 4096;
  spec.global_batch = 64;
  spec.steps = 110;
  spec.resources = {{"CPU", 1}};
  spec.config = {{"stepMs", "66"}, {"trackSamples", "0"}, {"controllerStepLog", log}};
  auto job = elastic::Submit(spec);
  Outcome out;
  if (!job.ok()) {
    std::fprintf(stderr, "submit: %s\n", std::string(job.status().message()).c_str());
    return out;
  }
  int64_t kill_ms = 0;
  std::mt19937 rng(static_cast<unsigned>(run));
  std::uniform_int_distribution<int> jitter(0, 65);
  while (true) {
    auto s = elastic::Status(*job);
    if (s.ok() && s->Done()) {
      for (const auto& r : s->recoveries) {
        if (r.kind != "signal" || r.resumed_ms == 0) continue;
        out.timeline_recovery_s = static_cast<double>(r.resumed_ms - r.fault_ms) / 1000;
        if (r.full_strength_ms > 0) {
          out.timeline_full_strength_s =
              static_cast<double>(r.full_strength_ms - r.fault_ms) / 1000;
        }
      }
    }
    if (!s.ok() || s->Done()) break;
    if (kill_ms == 0 && s->step >= 55 && s->world_size == 4) {
      auto actor = gcs.GetActor(s->ranks[1].actor_id);
      if (actor.ok() && actor->pid() > 0) {
        // A fault strikes at a random point of a step, not right after its start.
        absl::SleepFor(absl::Milliseconds(jitter(rng)));
        kill_ms = absl::ToUnixMillis(absl::Now());
        ::kill(actor->pid(), SIGKILL);
      }
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  // Each line: agreed steps, unix ms, world size.
  std::ifstream in(log);
  int64_t step, ms, world;
  int64_t before = 0;
  bool shrunk = false;
  while (in >> step >> ms >> world) {
    if (ms <= kill_ms) {
      before = step;
      continue;
    }
    if (out.recovery_s < 0) {
      out.recovery_s = static_cast<double>(ms - kill_ms) / 1000;
      out.steps_lost = before - (step - 1);
    }
    if (world < 4) shrunk = true;
    if (shrunk && world == 4 && out.full_strength_s < 0) {
      out.full_strength_s = static_cast<double>(ms - kill_ms) / 1000;
    }
  }
  std::printf(
      "run %d: kill at step %ld; survivors' next step after %.3f s (world 3), full strength "
      "after %.3f s, committed steps lost %ld; the job's recovery timeline says %.3f s and "
      "%.3f s\n",
      run, before, out.recovery_s, out.full_strength_s, out.steps_lost, out.timeline_recovery_s,
      out.timeline_full_strength_s);
  std::fflush(stdout);
  return out;
}

int Main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  std::string peer = argc > 2 ? argv[2] : PHALANX_SOURCE_DIR "/bench/peers/torchrun_recovery.sh";
  if (::access(peer.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "the peer %s is missing: give its path as the second argument\n",
                 peer.c_str());
    return 2;
  }
  testing::RedisServer redis;
  testing::GcsProcess gcs(redis, bench::GcsOptions());
  bench::UseGcsTls(gcs);
  testing::NodeOptions node;
  node.num_cpus = 8;
  auto node_process = testing::StartNode(gcs, "bench-node", node);
  testing::TempDir dir;
  InitOptions init;
  init.address = gcs.address();
  init.token = gcs.token();
  if (!Init(init).ok()) return 1;
  auto client = *gcs::GcsClient::Connect({gcs.address(), gcs.token()});
  std::printf(
      "# recovery_bench: %d runs, 4 ranks, 66 ms steps, kill -9 of rank 1 at step 55, cluster "
      "transport %s ($PHALANX_BENCH_TLS)\n",
      runs, bench::TransportName().c_str());
  std::vector<double> recovery, full;
  std::vector<double> lost;
  // Per run: the timeline's span over this benchmark's (1: they agree).
  std::vector<double> agree_recovery, agree_full;
  for (int run = 1; run <= runs; ++run) {
    Outcome o = OneRun(*client, dir.path(), run);
    if (o.recovery_s > 0 && o.timeline_recovery_s >= 0) {
      agree_recovery.push_back(o.timeline_recovery_s / o.recovery_s);
    }
    if (o.full_strength_s > 0 && o.timeline_full_strength_s >= 0) {
      agree_full.push_back(o.timeline_full_strength_s / o.full_strength_s);
    }
    if (o.recovery_s >= 0) recovery.push_back(o.recovery_s);
    if (o.full_strength_s >= 0) full.push_back(o.full_strength_s);
    if (o.steps_lost >= 0) lost.push_back(static_cast<double>(o.steps_lost));
  }
  Shutdown();
  std::printf("## torchrun (%s c10d %d, STEPS=80)\n", peer.c_str(), runs);
  std::string theirs =
      bench::Shell(absl::StrCat("STEPS=80 timeout 900 bash ", peer, " c10d ", runs, " 2>&1"));
  std::printf("%s", theirs.c_str());
  auto summary = [&](const std::string& key) {
    std::smatch m;
    std::regex re(key + R"(: n=\d+ min=[\d.]+ median=([\d.]+))");
    return std::regex_search(theirs, m, re) ? std::stod(m[1].str()) : -1.0;
  };
  double torch_recovery = summary("kill_to_first_step_s");
  double torch_lost = summary("lost_steps");
  double ours = bench::Percentile(recovery, 0.5);
  std::printf(
      "phalanx: recovery median %.3f s (n=%zu), full strength median %.3f s, steps lost "
      "median %.0f\n",
      ours, recovery.size(), bench::Percentile(full, 0.5), bench::Percentile(lost, 0.5));
  auto worst = [](const std::vector<double>& ratios) {
    double w = 0;
    for (double r : ratios) w = std::max(w, std::abs(r - 1));
    return ratios.empty() ? -1.0 : w;
  };
  std::printf(
      "recovery timeline vs this benchmark (timeline / measured, per run): survivors' next step "
      "median %.3f (worst off by %.1f%%), full strength median %.3f (worst off by %.1f%%); "
      "goal: within 10%%\n",
      bench::Percentile(agree_recovery, 0.5), 100 * worst(agree_recovery),
      bench::Percentile(agree_full, 0.5), 100 * worst(agree_full));
  std::printf(
      "RESULT phalanx_recovery_s=%.3f phalanx_full_strength_s=%.3f torchrun_recovery_s=%.2f "
      "ratio=%.3f phalanx_steps_lost=%.0f torchrun_steps_lost=%.0f\n",
      ours, bench::Percentile(full, 0.5), torch_recovery,
      torch_recovery > 0 ? ours / torch_recovery : 0, bench::Percentile(lost, 0.5), torch_lost);
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) {
  if (phalanx::worker::InWorkerMode()) phalanx::Init().IgnoreError();
  return phalanx::Main(argc, argv);
}
