// elastic_regression: an elastic data-parallel training job (SGD on a synthetic linear
// regression with known weights, gradients allreduced) on a Phalanx cluster.
//
//   phalanx start --head
//   build/bin/elastic_regression --replicas 3 --min 1 --max 4 --steps 400 --kill-at-step 150
//
// It submits the job, prints the job's conditions and world size as they change, optionally
// SIGKILLs one rank midway (it must run on the same machine as that rank), and at the end
// compares the learned weights with the known ones. The program is also the trainers' and
// the controller's host: nodes run this binary (same path on every node) to host them.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "actors/api.h"
#include "elastic/elastic.h"
#include "examples/cpp/regression_trainer.h"

using phalanx::examples::RegressionTrainer;
PHALANX_TRAINER(RegressionTrainer);

int main(int argc, char** argv) {
  // First thing: in a worker process this hosts a trainer (or the controller).
  if (absl::Status s = phalanx::Init(); !s.ok()) {
    std::fprintf(stderr, "cannot connect to a cluster: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  CLI::App app{"elastic_regression: elastic SGD on a synthetic linear regression"};
  phalanx::elastic::JobSpec spec;
  spec.name = "regression";
  spec.trainer = "RegressionTrainer";
  spec.replicas = 3;
  spec.min_replicas = 1;
  spec.max_replicas = 4;
  spec.num_samples = 2048;
  spec.global_batch = 64;
  spec.seed = 7;
  spec.steps = 400;
  spec.resources = {{"CPU", 0.5}, {"memory", 512.0 * (1 << 20)}};
  spec.scale_out_debounce_s = 1;
  spec.config = {{"stepMs", "10"}};
  std::string yaml_file;
  int64_t kill_at = -1;
  app.add_option("--spec", yaml_file, "a YAML job spec (instead of the flags below)");
  app.add_option("--replicas", spec.replicas);
  app.add_option("--min", spec.min_replicas);
  app.add_option("--max", spec.max_replicas);
  app.add_option("--steps", spec.steps);
  app.add_option("--kill-at-step", kill_at, "SIGKILL rank 1's process at this step");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<phalanx::JobId> job;
  if (!yaml_file.empty()) {
    std::ifstream in(yaml_file);
    std::stringstream text;
    text << in.rdbuf();
    job = phalanx::elastic::SubmitYaml(text.str());
  } else {
    job = phalanx::elastic::Submit(spec);
  }
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  std::printf("submitted elastic job %s\n", job->str().c_str());
  size_t shown_conditions = 0, shown_events = 0;
  bool killed = false;
  auto on_change = [&](const phalanx::elastic::JobStatus& s) {
    for (; shown_conditions < s.conditions.size(); ++shown_conditions) {
      const auto& c = s.conditions[shown_conditions];
      std::printf("[condition] %-10s %-16s %s\n", c.type.c_str(), c.reason.c_str(),
                  c.message.c_str());
    }
    for (; shown_events < s.events.size(); ++shown_events) {
      const auto& e = s.events[shown_events];
      std::printf("[event]     %-14s %s (world size %d)\n", e.kind.c_str(), e.message.c_str(),
                  e.world_size);
    }
    std::fflush(stdout);
  };
  phalanx::elastic::JobStatus last;
  while (true) {
    auto status = phalanx::elastic::Wait(*job, absl::Seconds(1), on_change);
    if (status.ok()) {
      last = *status;
      break;
    }
    if (!absl::IsDeadlineExceeded(status.status())) {
      std::fprintf(stderr, "%s\n", std::string(status.status().message()).c_str());
      return 1;
    }
    auto now = phalanx::elastic::Status(*job);
    if (now.ok()) {
      std::printf("[progress]  step %ld, world size %d, loss %.3g\n", now->step, now->world_size,
                  now->loss);
      if (kill_at >= 0 && !killed && now->step >= kill_at && now->ranks.size() > 1) {
        auto actor = phalanx::GetActorInfo(phalanx::ActorId(now->ranks[1].actor_id));
        if (actor.ok() && actor->pid > 0) {
          std::printf("[chaos]     kill -9 of rank 1 (pid %d) at step %ld\n", actor->pid,
                      now->step);
          ::kill(actor->pid, SIGKILL);
          killed = true;
        }
      }
    }
  }
  std::printf("\n%s\n", phalanx::elastic::FormatStatus(last, false).c_str());
  if (last.state != "SUCCEEDED") return 1;
  // The results: learned vs known weights.
  RegressionTrainer reference;
  phalanx::elastic::TrainerContext ctx;
  ctx.config = {{"dims", "8"}};
  reference.Setup(ctx).IgnoreError();
  std::string weights;
  for (absl::string_view part : absl::StrSplit(last.results, ';')) {
    if (absl::StartsWith(part, "weights=")) weights = std::string(part.substr(8));
  }
  double worst = 0;
  int j = 0;
  for (absl::string_view w : absl::StrSplit(weights, ',', absl::SkipEmpty())) {
    double v = 0;
    (void)absl::SimpleAtod(w, &v);
    worst = std::max(worst, std::fabs(v - reference.TrueWeight(j++)));
  }
  std::printf("learned weights: %s\nlargest difference from the known weights: %.2e\n",
              weights.c_str(), worst);
  phalanx::Shutdown();
  return worst < 1e-3 ? 0 : 1;
}
