// The trainer protocol (C++): what a rank of an elastic job implements. Horovod Elastic's
// commit/rollback, driven step by step by the job's controller.
//
//   class RegressionTrainer : public phalanx::elastic::Trainer {
//    public:
//     absl::Status Setup(const TrainerContext& ctx) override;      // build the model
//     absl::StatusOr<StepResult> Step(const StepInput& in) override;  // one step on in.indices,
//                                                                    // allreduce via in.group
//     std::string SaveState() const override;                      // model + optimizer bytes
//     absl::Status LoadState(const std::string& state) override;
//   };
//   PHALANX_TRAINER(RegressionTrainer);
//
// The runtime around it (TrainerHost) keeps the last committed state in memory: a step's
// result is committed once every rank finished that step. On a resize, survivors roll back
// to the committed state and form the collective group of the new epoch; new or respawned
// ranks receive the state by broadcast from a survivor. Only when every rank is lost does
// the job go back to its last checkpoint on disk.
//
// Data: Step gets the sample indices of this rank for that step. Each step covers the next
// globalBatch samples of a shuffled pass over the data, split among the ranks of the current
// epoch, so every sample is seen exactly once per pass whatever the resizes, and the global
// batch (hence the maths) does not depend on the world size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/internal/macros.h"
#include "collectives/collective_group.h"

namespace phalanx::elastic {

struct TrainerContext {
  std::string job_id;
  std::map<std::string, std::string> config;  // the spec's `config`
  int64_t num_samples = 0;
  int64_t global_batch = 0;
  int64_t seed = 0;
};

struct StepInput {
  int64_t step = 0;              // 0-based
  int64_t data_epoch = 0;        // which pass over the data
  std::vector<int64_t> indices;  // this rank's samples
  int64_t global_batch = 0;      // samples in this step over all ranks (divide sums by it)
  int rank = 0;
  int world_size = 1;
  int64_t epoch = 0;  // collective-group epoch
  collective::CollectiveGroup* group = nullptr;
  // The controller's call may cover several steps (the spec's stepCallMs); only the state at
  // its end is kept (SaveState is called once, after its last step). This is the step count
  // after that last step: a trainer may skip preparing what only the call's end needs.
  int64_t call_end = 0;
};

struct StepResult {
  double loss = 0;
  std::map<std::string, double> metrics;
  // The steps this Step ran: 1, or more for a trainer that runs the rest of the controller's
  // call at once (at most StepInput::call_end - step; the Python loop does, so that its
  // thread and the host's meet once per call, not per step).
  int64_t steps = 1;
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  // Called once per actor, before anything else.
  virtual absl::Status Setup(const TrainerContext& context) {
    (void)context;
    return absl::OkStatus();
  }
  // One training step. A failed collective fails the step (return its status): the runtime
  // rolls back and re-runs it with the new membership.
  virtual absl::StatusOr<StepResult> Step(const StepInput& input) = 0;
  // The whole training state (weights, optimizer, counters) as bytes, and back.
  virtual std::string SaveState() const = 0;
  virtual absl::Status LoadState(const std::string& state) = 0;
  // Called from another thread while a Step may be running: make that Step fail soon (its
  // collectives over `group` are aborted by the runtime; a trainer with collectives of its
  // own aborts those). `reason` names the lost rank and how it was lost.
  virtual void Abort(const std::string& reason) { (void)reason; }
  // Free-form questions from drivers and tests (e.g. "weights"); "" if unknown.
  virtual std::string Query(const std::string& key) const {
    (void)key;
    return "";
  }
};

// The indices of `rank` for global step `step` (see above).
std::vector<int64_t> StepIndices(int64_t num_samples, int64_t global_batch, int64_t seed,
                                 int64_t step, int rank, int world_size, int64_t* data_epoch,
                                 int64_t* step_samples);

// Registers trainer class `name` (hosted by trainer_host.cc); PHALANX_TRAINER calls it.
void RegisterTrainer(const std::string& name, std::function<std::unique_ptr<Trainer>()> make);

template <typename T>
struct TrainerRegistrar {
  explicit TrainerRegistrar(const char* name) {
    RegisterTrainer(name, [] { return std::unique_ptr<Trainer>(std::make_unique<T>()); });
  }
};

}  // namespace phalanx::elastic

// PHALANX_TRAINER(Class): registers a Trainer subclass (default-constructible) as the trainer
// class named "Class", for job specs (`trainer: Class`).
#define PHALANX_TRAINER(Class)                                             \
  static ::phalanx::elastic::TrainerRegistrar<Class> PHALANX_INTERNAL_CAT( \
      phalanx_trainer_registrar_, __LINE__)(#Class)
