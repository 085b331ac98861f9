#include "python/src/py_trainer.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "absl/strings/str_cat.h"
#include "elastic/trainer.h"
#include "elastic/trainer_host.h"
#include "elastic/trainer_protocol.h"

namespace py = pybind11;

namespace phalanx::python {
namespace {

py::object Runtime() { return py::module_::import("phalanx.train._runtime"); }

absl::Status FromPython(const char* what, const std::exception& e) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

class PythonTrainer final : public elastic::Trainer {
 public:
  absl::Status Setup(const elastic::TrainerContext& context) override {
    py::gil_scoped_acquire acquire;
    try {
      Runtime().attr("setup")(context.job_id, context.config);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromPython("setup", e);
    }
  }

  absl::StatusOr<elastic::StepResult> Step(const elastic::StepInput& in) override {
    py::gil_scoped_acquire acquire;
    try {
      auto metrics = Runtime()
                         .attr("step")(in.step, in.rank, in.world_size, in.epoch, in.call_end)
                         .cast<std::map<std::string, double>>();
      elastic::StepResult result;
      auto loss = metrics.find("loss");
      if (loss != metrics.end()) result.loss = loss->second;
      // The loop runs the rest of the call at once; the answer says how many steps it ran.
      auto steps = metrics.find(elastic::step_metric::kSteps);
      if (steps != metrics.end()) result.steps = static_cast<int64_t>(steps->second);
      result.metrics = std::move(metrics);
      return result;
    } catch (const std::exception& e) {
      return FromPython("step", e);
    }
  }

  std::string SaveState() const override {
    py::gil_scoped_acquire acquire;
    return Runtime().attr("save_state")().cast<std::string>();
  }

  absl::Status LoadState(const std::string& state) override {
    py::gil_scoped_acquire acquire;
    try {
      Runtime().attr("load_state")(py::bytes(state));
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromPython("load_state", e);
    }
  }

  void Abort(const std::string& reason) override {
    py::gil_scoped_acquire acquire;
    try {
      Runtime().attr("abort")(reason);
    } catch (const std::exception&) {
    }
  }

  std::string Query(const std::string& key) const override {
    py::gil_scoped_acquire acquire;
    try {
      return Runtime().attr("query")(key).cast<std::string>();
    } catch (const std::exception& e) {
      return absl::StrCat("error: ", e.what());
    }
  }
};

}  // namespace

void RegisterPythonTrainer() {
  static elastic::TrainerRegistrar<PythonTrainer> registrar("PythonTrainer");
}

}  // namespace phalanx::python
