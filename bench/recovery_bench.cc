// recovery_bench: how fast an elastic job heals after kill -9 of one of its 4 ranks, against
// torchrun's elastic restart (the peer script bench/peers/torchrun_recovery.sh, Debian's
// python3-torch) in the same run.
//
//   build/bin/recovery_bench [runs, default 5] [path to torchrun_recovery.sh]
//
// Both sides time a step where torchrun's peer trainer (bench/peers/train_elastic.py) logs it:
// when its update is applied, before the step is padded to its 66 ms (the trainer's
// stepPad: "after").
//
// Phalanx: a 4-rank job (steps of 66 ms, as the peer's); rank 1 is SIGKILLed at a random point
// of the step after the 55th committed one (the controller's per-step log is watched every
// millisecond, so the kill lands in that step).
//   recovery      kill → the survivors' next step (the first update a rank of the 3 applies)
//   full strength kill → the first step with 4 ranks again (the first update applied at 4)
//   committed     the same two, at the controller's commit of those steps (after their
//                 padding); the job's recovery timeline is checked against these
//   steps lost    read from the ranks' state, not from the controller's counter: the trainer
//                 counts the updates applied to its weights (rolled back with them); the
//                 survivors' first step after the kill starts from a state holding H updates,
//                 and the job had committed C before the kill: C - H were lost. H is also
//                 checked against the step number (they are equal when nothing is lost).
// torchrun (the peer, at its best documented settings): torchrun --monitor_interval=0.1, 4
// workers, the same step time, kill -9 of rank 1 at a random point of the step after step 55 →
// the first step after the restart (which is also its full strength); steps lost since the
// last checkpoint (every 10 steps), read from the checkpoint it resumed from.
//
// Last line: RESULT phalanx_recovery_s=... phalanx_full_strength_s=... torchrun_recovery_s=...
//            ratio=... phalanx_steps_lost=... torchrun_steps_lost=...
//            phalanx_committed_recovery_s=...
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <regex>

#include "absl/strings/str_cat.h"
#include "actors/api.h"
#include "base/files.h"
#include "bench/bench_util.h"
#include "client/gcs_client.h"
#include "elastic/elastic.h"
#include "examples/cpp/regression_trainer.h"
#include "tests/testing/test_util.h"
#include "worker/worker_host.h"

using phalanx::examples::RegressionTrainer;
PHALANX_TRAINER(RegressionTrainer);

namespace phalanx {
namespace {

constexpr int kStepMs = 66;     // the peer's step time
constexpr int kKillAfter = 55;  // rank 1 dies during the step after this many committed ones
constexpr int kRanks = 4;       // both sides

struct Outcome {
  // At the update applied (where the peer logs its steps).
  double recovery_s = -1;
  double full_strength_s = -1;
  // At the controller's commit of the same steps.
  double committed_recovery_s = -1;
  double committed_full_strength_s = -1;
  int64_t steps_lost = -1;
  int64_t kill_after = -1;          // steps committed before the kill
  bool state_matches_step = false;  // the survivors' update count equals their step
  // The same two spans as the job's own recovery timeline records them (the node's time of
  // death → the controller's resumed and full-strength steps), for the dashboard's and the
  // metrics' figures to be checked against this benchmark's committed ones.
  double timeline_recovery_s = -1;
  double timeline_full_strength_s = -1;
};

// The lines of `path` from byte `*offset` on that are complete; *offset moves past them.
std::vector<std::string> NewLines(const std::string& path, std::streamoff* offset) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  if (!in) return lines;
  in.seekg(*offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: a line being written
    *offset += static_cast<std::streamoff>(line.size()) + 1;
    lines.push_back(line);
  }
  return lines;
}

Outcome OneRun(gcs::GcsClient& gcs, const std::string& dir, int run) {
  std::string log = absl::StrCat(dir, "/steps-", run, ".log");
  std::string updates = absl::StrCat(dir, "/updates-", run, ".log");
  elastic::JobSpec spec;
  spec.name = absl::StrCat("recovery", run);
  spec.trainer = "RegressionTrainer";
  spec.replicas = kRanks;
  spec.min_replicas = 1;
  spec.max_replicas = kRanks;
  spec.num_samples = 4096;
  spec.global_batch = 64;
  spec.steps = 110;
  spec.resources = {{"CPU", 1}};
  spec.config = {{"stepMs", absl::StrCat(kStepMs)},
                 {"stepPad", "after"},
                 {"trackSamples", "0"},
                 {"controllerStepLog", log},
                 {"updateLog", updates}};
  auto job = elastic::Submit(spec);
  Outcome out;
  if (!job.ok()) {
    std::fprintf(stderr, "submit: %s\n", std::string(job.status().message()).c_str());
    return out;
  }
  int64_t kill_ms = 0;
  std::mt19937 rng(static_cast<unsigned>(run));
  std::uniform_int_distribution<int> jitter(0, kStepMs - 1);
  std::streamoff read = 0;
  absl::Time status_at = absl::InfinitePast();
  while (true) {
    // The kill lands in step kKillAfter + 1: the controller's step log (a line per agreed step)
    // is watched every millisecond, not its status (published every 10 steps).
    if (kill_ms == 0) {
      for (const auto& line : NewLines(log, &read)) {
        int64_t step = 0, world = 0;
        if (std::sscanf(line.c_str(), "%ld %*s %ld", &step, &world) != 2) continue;
        if (step < kKillAfter || world != kRanks) continue;
        auto s = elastic::Status(*job);
        if (!s.ok() || s->ranks.size() < 2) break;
        auto actor = gcs.GetActor(s->ranks[1].actor_id.Hex());
        if (!actor.ok() || actor->pid() <= 0) break;
        // A fault strikes at a random point of a step, not right after its start.
        absl::SleepFor(absl::Milliseconds(jitter(rng)));
        kill_ms = absl::ToUnixMillis(absl::Now());
        ::kill(actor->pid(), SIGKILL);
        break;
      }
    }
    if (absl::Now() - status_at > absl::Milliseconds(100)) {
      status_at = absl::Now();
      auto s = elastic::Status(*job);
      if (!s.ok()) break;
      if (s->Done()) {
        for (const auto& r : s->recoveries) {
          if (r.kind != "signal" || r.resumed_ms == 0) continue;
          out.timeline_recovery_s = static_cast<double>(r.resumed_ms - r.fault_ms) / 1000;
          if (r.full_strength_ms > 0) {
            out.timeline_full_strength_s =
                static_cast<double>(r.full_strength_ms - r.fault_ms) / 1000;
          }
        }
        break;
      }
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  // The controller's log, a line per agreed step: agreed steps, unix ms, world size.
  std::ifstream in(log);
  int64_t step, ms, world;
  int64_t committed = 0;  // steps committed before the kill
  bool shrunk = false;
  while (in >> step >> ms >> world) {
    if (ms <= kill_ms) {
      committed = step;
      continue;
    }
    if (out.committed_recovery_s < 0) {
      out.committed_recovery_s = static_cast<double>(ms - kill_ms) / 1000;
    }
    if (world < kRanks) shrunk = true;
    if (shrunk && world == kRanks && out.committed_full_strength_s < 0) {
      out.committed_full_strength_s = static_cast<double>(ms - kill_ms) / 1000;
    }
  }
  // The ranks' own log, a line per applied update: pid, step, updates in the state before it,
  // unix ms, world size. The survivors' first step with fewer ranks starts from the state the
  // recovery left them: the committed updates it lacks were lost. The first update applied
  // with all ranks again after it is full strength.
  std::ifstream ranks(updates);
  int64_t pid, update_step, before_updates, held = -1, at_step = -1;
  while (ranks >> pid >> update_step >> before_updates >> ms >> world) {
    if (ms <= kill_ms) continue;
    if (held < 0 && world < kRanks) {
      held = before_updates;
      at_step = update_step;
      out.recovery_s = static_cast<double>(ms - kill_ms) / 1000;
    } else if (held >= 0 && world == kRanks) {
      out.full_strength_s = static_cast<double>(ms - kill_ms) / 1000;
      break;
    }
  }
  if (held >= 0) out.steps_lost = committed - held;
  out.kill_after = committed;
  out.state_matches_step = held == at_step;
  std::printf(
      "run %d: killed after step %ld (aimed at %d); survivors' next step after %.3f s (world 3), "
      "full strength after %.3f s (committed after %.3f s and %.3f s); their state held %ld "
      "updates for step %ld: committed steps lost %ld; the job's recovery timeline says %.3f s "
      "and %.3f s\n",
      run, committed, kKillAfter, out.recovery_s, out.full_strength_s, out.committed_recovery_s,
      out.committed_full_strength_s, held, at_step, out.steps_lost, out.timeline_recovery_s,
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
  bench::OneNodeCluster cluster(8);
  const testing::GcsProcess& gcs = cluster.gcs;
  testing::TempDir dir;
  InitOptions init;
  init.address = gcs.address();
  init.token = gcs.token();
  if (!Init(init).ok()) return 1;
  auto client = *gcs::GcsClient::Connect({gcs.address(), gcs.token()});
  std::printf(
      "# recovery_bench: %d runs, %d ranks, %d ms steps, kill -9 of rank 1 during the step after "
      "%d committed ones, cluster transport %s ($PHALANX_BENCH_TLS)\n",
      runs, kRanks, kStepMs, kKillAfter, bench::TransportName().c_str());
  std::vector<double> recovery, full, committed_recovery;
  std::vector<double> lost;
  // Per run: the timeline's span over this benchmark's (1: they agree).
  std::vector<double> agree_recovery, agree_full;
  int exact_kills = 0, state_checks = 0;
  for (int run = 1; run <= runs; ++run) {
    Outcome o = OneRun(*client, dir.path(), run);
    exact_kills += o.kill_after == kKillAfter;
    state_checks += o.state_matches_step;
    if (o.committed_recovery_s > 0 && o.timeline_recovery_s >= 0) {
      agree_recovery.push_back(o.timeline_recovery_s / o.committed_recovery_s);
    }
    if (o.committed_full_strength_s > 0 && o.timeline_full_strength_s >= 0) {
      agree_full.push_back(o.timeline_full_strength_s / o.committed_full_strength_s);
    }
    if (o.committed_recovery_s >= 0) committed_recovery.push_back(o.committed_recovery_s);
    if (o.recovery_s >= 0) recovery.push_back(o.recovery_s);
    if (o.full_strength_s >= 0) full.push_back(o.full_strength_s);
    if (o.steps_lost >= 0) lost.push_back(static_cast<double>(o.steps_lost));
  }
  Shutdown();
  // The peer at its best documented settings: the agent checks its workers every 0.1 s (the
  // default is 5 s), with as many workers, the same step time and the same kill.
  std::string peer_env =
      absl::StrCat("STEPS=80 NPROC=", kRanks, " KILL_AT=", kKillAfter,
                   " STEP_TIME=", kStepMs / 1000.0, " KILL_JITTER=", kStepMs / 1000.0);
  std::printf("## torchrun (%s %s c10d %d --monitor_interval=0.1)\n", peer_env.c_str(),
              peer.c_str(), runs);
  std::fflush(stdout);
  std::string theirs = bench::Shell(absl::StrCat(peer_env, " timeout 900 bash ", peer, " c10d ",
                                                 runs, " --monitor_interval=0.1 2>&1"));
  std::printf("%s", theirs.c_str());
  auto summary = [&](const std::string& key) {
    std::smatch m;
    std::regex re(key + R"(: n=\d+ min=[\d.]+ median=([\d.]+))");
    return std::regex_search(theirs, m, re) ? std::stod(m[1].str()) : -1.0;
  };
  double torch_recovery = summary("kill_to_first_step_s");
  double torch_lost = summary("lost_steps");
  double ours = bench::Percentile(recovery, 0.5);
  double most_lost = lost.empty() ? -1 : *std::max_element(lost.begin(), lost.end());
  std::printf(
      "phalanx: recovery median %.3f s (n=%zu), full strength median %.3f s (at the "
      "controller's commit, after the step's padding: %.3f s); committed steps lost, read from "
      "the ranks' state: at most %.0f; killed in the aimed step in %d of %d runs; the survivors' "
      "update count equalled their step in %d of %d\n",
      ours, recovery.size(), bench::Percentile(full, 0.5),
      bench::Percentile(committed_recovery, 0.5), most_lost, exact_kills, runs, state_checks, runs);
  auto worst = [](const std::vector<double>& ratios) {
    double w = 0;
    for (double r : ratios) w = std::max(w, std::abs(r - 1));
    return ratios.empty() ? -1.0 : w;
  };
  std::printf(
      "recovery timeline vs this benchmark's committed figures (timeline / measured, per run): "
      "survivors' next step "
      "median %.3f (worst off by %.1f%%), full strength median %.3f (worst off by %.1f%%); "
      "goal: within 10%%\n",
      bench::Percentile(agree_recovery, 0.5), 100 * worst(agree_recovery),
      bench::Percentile(agree_full, 0.5), 100 * worst(agree_full));
  std::printf(
      "RESULT phalanx_recovery_s=%.3f phalanx_full_strength_s=%.3f torchrun_recovery_s=%.2f "
      "ratio=%.3f phalanx_steps_lost=%.0f torchrun_steps_lost=%.0f "
      "phalanx_committed_recovery_s=%.3f\n",
      ours, bench::Percentile(full, 0.5), torch_recovery,
      torch_recovery > 0 ? ours / torch_recovery : 0, most_lost, torch_lost,
      bench::Percentile(committed_recovery, 0.5));
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) {
  if (phalanx::worker::InWorkerMode()) phalanx::Init().IgnoreError();
  return phalanx::Main(argc, argv);
}
