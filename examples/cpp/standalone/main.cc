// standalone: an actor class, a remote function and an elastic trainer, in a program of its
// own built against the installed Phalanx SDK (see CMakeLists.txt).
//
//   phalanx start --head
//   ./standalone                 # actor calls and tasks, then a 2-rank elastic job
//
// As with every Phalanx program, this binary is also what the cluster's workers run to host
// its actors, tasks and trainers: phalanx::Init() comes first in main().
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "actors/api.h"
#include "elastic/elastic.h"
#include "elastic/trainer.h"

// An actor.
class Accumulator {
 public:
  explicit Accumulator(double start) : total_(start) {}
  double Add(double x) { return total_ += x; }
  double Total() const { return total_; }

 private:
  double total_;
};
PHALANX_ACTOR(Accumulator, double);
PHALANX_METHODS(Accumulator, Add, Total);

// A remote function.
double Cube(double x) { return x * x * x; }
PHALANX_FUNCTION(Cube);

// A trainer: every rank holds one weight, pulls it toward 3 with the average gradient over
// the ranks (an allreduce), and commits it each step.
class MeanTrainer : public phalanx::elastic::Trainer {
 public:
  absl::Status Setup(const phalanx::elastic::TrainerContext&) override { return absl::OkStatus(); }
  absl::StatusOr<phalanx::elastic::StepResult> Step(
      const phalanx::elastic::StepInput& in) override {
    std::vector<double> grad = {weight_ - 3.0};
    if (auto s = in.group->Allreduce(grad.data(), grad.size(), phalanx::collective::DType::kFloat64,
                                     phalanx::collective::ReduceOp::kSum);
        !s.ok()) {
      return s;
    }
    weight_ -= 0.5 * grad[0] / in.world_size;
    phalanx::elastic::StepResult result;
    result.loss = (weight_ - 3.0) * (weight_ - 3.0);
    return result;
  }
  std::string SaveState() const override { return std::to_string(weight_); }
  absl::Status LoadState(const std::string& state) override {
    weight_ = std::stod(state);
    return absl::OkStatus();
  }

 private:
  double weight_ = 0;
};
PHALANX_TRAINER(MeanTrainer);

int main() {
  if (absl::Status s = phalanx::Init(); !s.ok()) {
    std::fprintf(stderr, "cannot connect to a cluster: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto acc = phalanx::Actor<Accumulator>().SetResources({{"CPU", 0.5}}).Remote(1.0);
  if (!acc.ok()) {
    std::fprintf(stderr, "%s\n", std::string(acc.status().message()).c_str());
    return 1;
  }
  // A task's ref is an argument of the next task (resolved first); an actor takes values.
  phalanx::ObjectRef<double> eight = phalanx::Task(&Cube).Remote(2.0);
  auto cubed = phalanx::Get(phalanx::Task(&Cube).Remote(eight));
  auto total =
      cubed.ok() ? phalanx::Get(acc->Task(&Accumulator::Add).Remote(*cubed)) : cubed.status();
  if (!total.ok()) {
    std::fprintf(stderr, "%s\n", std::string(total.status().message()).c_str());
    return 1;
  }
  std::printf("actor + tasks: 1 + cube(cube(2)) = %g\n", *total);

  phalanx::elastic::JobSpec spec;
  spec.name = "standalone";
  spec.trainer = "MeanTrainer";
  spec.replicas = 2;
  spec.min_replicas = 1;
  spec.max_replicas = 2;
  spec.num_samples = 64;
  spec.global_batch = 8;
  spec.steps = 60;
  spec.resources = {{"CPU", 0.5}};
  auto job = phalanx::elastic::Submit(spec);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  auto done = phalanx::elastic::Wait(*job, absl::Seconds(120));
  if (!done.ok()) {
    std::fprintf(stderr, "%s\n", std::string(done.status().message()).c_str());
    return 1;
  }
  std::printf("elastic job %s: %s after %ld steps on %d ranks, loss %.3g\n", job->str().c_str(),
              done->state.c_str(), static_cast<long>(done->step), done->world_size, done->loss);
  return done->state == "SUCCEEDED" && *total == 513.0 ? 0 : 1;
}
