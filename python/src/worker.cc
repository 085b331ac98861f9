// The Python worker side of phalanx._native: `python3 -m phalanx._worker` hosts one actor. Pickled
// Python classes are created and called through phalanx._worker (create, call); C++ classes
// registered in this module (the elastic controller, the PythonTrainer host) are hosted as
// in any C++ worker.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "python/src/bindings.h"
#include "spdlog/spdlog.h"
#include "worker/actor_registry.h"
#include "worker/errors.h"
#include "worker/worker_host.h"

namespace phalanx::python {
namespace {

// The calls of an actor's async methods waiting for its event loop to start them
// (phalanx._worker.attach_call_queue): queued without the GIL, with one write to `fd` (an
// eventfd the loop watches) per batch; the loop takes the batch, under the GIL, on its thread.
struct LoopQueue {
  struct Queued {
    std::string method, args, key;
    std::shared_ptr<std::function<void(worker::CallOutcome)>> done;
  };
  int fd = -1;
  absl::Mutex mu;
  std::vector<Queued> calls ABSL_GUARDED_BY(mu);
  bool drain_due ABSL_GUARDED_BY(mu) = false;
};

// A Python actor object, called through phalanx._worker.call(obj, method, args).
class PyActorInstance final : public worker::ActorInstance {
 public:
  explicit PyActorInstance(py::object obj) : obj_(std::move(obj)) {}
  ~PyActorInstance() override {
    py::gil_scoped_acquire acquire;
    obj_ = py::object();
  }

  worker::CallOutcome Call(const std::string& method, const std::string& args) override {
    py::gil_scoped_acquire acquire;
    try {
      return Outcome(py::module_::import("phalanx._worker")
                         .attr("call")(obj_, method, py::bytes(args))
                         .cast<py::tuple>());
    } catch (const std::exception& e) {
      return Failed(e);
    }
  }

  // An async method's coroutine goes to the actor's event loop and this thread returns at
  // once: `done` is called from the loop's thread when the coroutine ends. Once the method is
  // known to be one (its first call learns it, under the GIL), its calls go to the loop's
  // queue without the GIL. Other methods finish here.
  void CallAsync(const std::string& method, const std::string& args,
                 std::function<void(worker::CallOutcome)> done) override {
    auto shared = std::make_shared<std::function<void(worker::CallOutcome)>>(std::move(done));
    if (Queue(method, args, shared)) return;
    worker::CallOutcome outcome;
    {
      py::gil_scoped_acquire acquire;
      try {
        LearnMethod(method);
        py::cpp_function later([shared](py::tuple r) {
          worker::CallOutcome outcome = Outcome(r);
          py::gil_scoped_release release;
          (*shared)(std::move(outcome));
        });
        py::object r = py::module_::import("phalanx._worker")
                           .attr("call")(obj_, method, py::bytes(args), later);
        if (r.is_none()) return;  // `later` will be called
        outcome = Outcome(r.cast<py::tuple>());
      } catch (const std::exception& e) {
        outcome = Failed(e);
      }
    }
    (*shared)(std::move(outcome));
  }

  void End() override {
    py::gil_scoped_acquire acquire;
    try {
      py::module_::import("phalanx._worker").attr("end_actor")();
    } catch (const std::exception& e) {
      spdlog::warn("ending the actor failed: {}", e.what());
    }
  }

  bool Interrupt() override {
    py::gil_scoped_acquire acquire;
    try {
      return py::module_::import("phalanx._worker").attr("interrupt")(obj_).cast<bool>();
    } catch (const std::exception& e) {
      spdlog::warn("interrupting the running call failed: {}", e.what());
      return false;
    }
  }

  // The groups of the actor's options and of its methods' @phalanx.method marks
  // (phalanx._worker.concurrency_groups).
  void ConcurrencyGroups(std::map<std::string, int>* group_concurrency,
                         std::map<std::string, std::string>* method_group) override {
    py::gil_scoped_acquire acquire;
    try {
      auto r =
          py::module_::import("phalanx._worker")
              .attr("concurrency_groups")(obj_)
              .cast<std::pair<std::map<std::string, int>, std::map<std::string, std::string>>>();
      for (const auto& [group, n] : r.first) (*group_concurrency)[group] = n;
      for (const auto& [method, group] : r.second) (*method_group)[method] = group;
    } catch (const std::exception& e) {
      spdlog::warn("reading the actor's concurrency groups failed: {}", e.what());
    }
  }

  void Cancel(const std::string& call) override {
    py::gil_scoped_acquire acquire;
    try {
      py::module_::import("phalanx._worker").attr("cancel")(call);
    } catch (const std::exception& e) {
      spdlog::warn("cancelling the call {} failed: {}", call, e.what());
    }
  }

 private:
  // Queues a call of a method the loop starts itself (false: not one, or not known yet).
  bool Queue(const std::string& method, const std::string& args,
             const std::shared_ptr<std::function<void(worker::CallOutcome)>>& done) {
    std::shared_ptr<LoopQueue> queue;
    {
      absl::MutexLock lock(&methods_mu_);
      auto it = loop_methods_.find(method);
      if (it == loop_methods_.end() || !it->second) return false;
      queue = queue_;
    }
    bool wake = false;
    {
      absl::MutexLock lock(&queue->mu);
      queue->calls.push_back({method, args, worker::CurrentCall(), done});
      wake = !std::exchange(queue->drain_due, true);
    }
    if (wake) {
      uint64_t one = 1;
      ssize_t n = ::write(queue->fd, &one, sizeof(one));
      (void)n;  // an eventfd's counter: a write only fails past 2^64 - 2 unread
    }
    return true;
  }

  // (Under the GIL.) Whether `method` is one the loop starts itself; the first such method
  // attaches the loop's queue.
  void LearnMethod(const std::string& method) {
    bool attached = false;
    {
      absl::MutexLock lock(&methods_mu_);
      if (loop_methods_.count(method) > 0) return;
      attached = queue_ != nullptr;
    }
    bool yes =
        py::module_::import("phalanx._worker").attr("loop_method")(obj_, method).cast<bool>();
    if (yes && !attached) attached = AttachQueue();
    absl::MutexLock lock(&methods_mu_);
    loop_methods_[method] = yes && attached;
  }

  // (Under the GIL.) False when no eventfd could be made: the calls keep going through
  // phalanx._worker.call.
  bool AttachQueue() {
    auto queue = std::make_shared<LoopQueue>();
    queue->fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (queue->fd < 0) return false;
    py::cpp_function take([queue] {
      std::vector<LoopQueue::Queued> calls;
      {
        py::gil_scoped_release release;
        absl::MutexLock lock(&queue->mu);
        calls.swap(queue->calls);
        queue->drain_due = false;
      }
      py::list out;
      for (auto& c : calls) {
        py::cpp_function reply([done = c.done](py::tuple r) {
          worker::CallOutcome outcome = Outcome(r);
          py::gil_scoped_release release;
          (*done)(std::move(outcome));
        });
        out.append(py::make_tuple(c.method, py::bytes(c.args), c.key, reply));
      }
      return out;
    });
    py::module_::import("phalanx._worker").attr("attach_call_queue")(obj_, queue->fd, take);
    absl::MutexLock lock(&methods_mu_);
    if (queue_ == nullptr) queue_ = std::move(queue);  // else another thread's came first
    return true;
  }

  // (ok, value, error kind, message) from phalanx._worker.call; with an error, value is its
  // detail (the exception's class name of a TaskError), which travels to the caller.
  static worker::CallOutcome Outcome(const py::tuple& r) {
    if (r[0].cast<bool>()) return {absl::OkStatus(), r[1].cast<std::string>()};
    std::string kind = r[2].cast<std::string>();
    auto code = kind == worker::error_kind::kInvalidCall ? absl::StatusCode::kInvalidArgument
                                                         : absl::StatusCode::kUnknown;
    return {worker::MakeError(code, kind, r[3].cast<std::string>()), r[1].cast<std::string>()};
  }

  static worker::CallOutcome Failed(const std::exception& e) {
    return {
        worker::MakeError(absl::StatusCode::kInternal, worker::error_kind::kTaskError, e.what()),
        ""};
  }

  py::object obj_;
  absl::Mutex methods_mu_;
  // Methods seen, and whether the event loop starts their calls itself.
  std::map<std::string, bool> loop_methods_ ABSL_GUARDED_BY(methods_mu_);
  std::shared_ptr<LoopQueue> queue_ ABSL_GUARDED_BY(methods_mu_);  // set once
};

int RunPythonWorker() {
  worker::ActorClass python;
  python.name = "python";
  python.threaded = true;
  python.create =
      [](const std::string& args) -> absl::StatusOr<std::unique_ptr<worker::ActorInstance>> {
    py::gil_scoped_acquire acquire;
    try {
      py::object obj = py::module_::import("phalanx._worker").attr("create")(py::bytes(args));
      return std::unique_ptr<worker::ActorInstance>(new PyActorInstance(std::move(obj)));
    } catch (const std::exception& e) {
      return absl::InternalError(e.what());
    }
  };
  worker::ActorRegistry::Global().SetFallback(std::move(python));
  return CallBlocking([] { return worker::RunWorker(); });
}

}  // namespace

void BindWorker(py::module_& m) {
  m.def("in_worker_mode", &worker::InWorkerMode);
  // "<caller>/<seq>" of the actor call this thread runs ("" when none).
  m.def("current_call", [] { return worker::CurrentCall(); });
  m.def("run_worker", &RunPythonWorker,
        "host the actor the node manager names; returns the process exit code");
}

}  // namespace phalanx::python
