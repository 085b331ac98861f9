// _phalanx: the native half of the `phalanx` Python package. The Python layer (python/phalanx)
// does the user-facing API, pickling and error classes; this module talks to the runtime:
// the driver side (actors, calls, placement groups, KV, jobs), the Python worker (hosting
// pickled Python classes, and the C++ classes of this module: the elastic controller and the
// PythonTrainer host), and collective groups on numpy arrays and torch tensors without
// copies. Every call that may block releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "actors/api.h"
#include "actors/elastic/controller.h"
#include "collectives/collective_group.h"
#include "gcs/gcs_client.h"
#include "google/protobuf/util/json_util.h"
#include "python/src/py_trainer.h"
#include "runtime/rpc/describe.h"
#include "runtime/worker/actor_registry.h"
#include "runtime/worker/core_worker.h"
#include "runtime/worker/errors.h"
#include "runtime/worker/object_state.h"
#include "runtime/worker/worker_host.h"

namespace py = pybind11;

namespace phalanx::python {
namespace {

[[noreturn]] void Throw(const absl::Status& status) {
  throw std::runtime_error(std::string(status.message()));
}

CoreWorker& Worker() {
  CoreWorker* cw = CoreWorker::Get();
  if (cw == nullptr) {
    throw std::runtime_error("phalanx is not initialized: call phalanx.init() first");
  }
  return *cw;
}

absl::Duration Timeout(double seconds) {
  return seconds < 0 ? absl::InfiniteDuration() : absl::Seconds(seconds);
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

// ---- driver side -----------------------------------------------------------------------

// The result slot of one call, as Python sees it.
struct PyObjectRef {
  std::shared_ptr<ObjectState> state;
  std::string actor_id;
  std::string method;
};

// (ok, value, error kind, message) of a finished call.
py::tuple Outcome(const PyObjectRef& ref) {
  const absl::Status& s = ref.state->status();
  if (s.ok()) return py::make_tuple(true, py::bytes(ref.state->value()), "", "");
  std::string kind = ErrorKind(s);
  if (kind.empty()) kind = "Error";
  return py::make_tuple(false, py::bytes(""), kind, std::string(s.message()));
}

std::string CreateActor(const std::string& class_name, const std::string& language,
                        py::bytes init_args, const py::dict& o) {
  rpc::ActorInfo spec;
  spec.set_class_name(class_name);
  spec.set_language(language);
  spec.set_init_args(std::string(init_args));
  auto get = [&](const char* key) -> py::object {
    return o.contains(key) ? py::reinterpret_borrow<py::object>(o[key]) : py::none();
  };
  if (auto v = get("resources"); !v.is_none()) {
    for (auto [k, amount] : v.cast<py::dict>()) {
      (*spec.mutable_resources()->mutable_amounts())[k.cast<std::string>()] = amount.cast<double>();
    }
  }
  if (auto v = get("name"); !v.is_none()) spec.set_name(v.cast<std::string>());
  if (auto v = get("namespace"); !v.is_none()) spec.set_namespace_(v.cast<std::string>());
  spec.set_max_restarts(get("max_restarts").is_none() ? 0 : get("max_restarts").cast<int>());
  spec.set_max_task_retries(
      get("max_task_retries").is_none() ? 0 : get("max_task_retries").cast<int>());
  spec.set_max_concurrency(get("max_concurrency").is_none() ? 1
                                                            : get("max_concurrency").cast<int>());
  if (auto v = get("detached"); !v.is_none()) spec.set_detached(v.cast<bool>());
  if (auto v = get("code_path"); !v.is_none()) spec.set_code_path(v.cast<std::string>());
  if (auto v = get("env"); !v.is_none()) {
    for (auto [k, value] : v.cast<py::dict>()) {
      (*spec.mutable_env())[k.cast<std::string>()] = value.cast<std::string>();
    }
  }
  if (auto v = get("placement_group_id"); !v.is_none()) {
    spec.set_placement_group_id(v.cast<std::string>());
  }
  spec.set_bundle_index(get("bundle_index").is_none() ? -1 : get("bundle_index").cast<int>());
  if (auto v = get("scheduling_strategy"); !v.is_none()) {
    spec.set_scheduling_strategy(v.cast<std::string>());
  }
  if (auto v = get("node_id"); !v.is_none()) spec.set_affinity_node_id(v.cast<std::string>());
  if (auto v = get("soft"); !v.is_none()) spec.set_affinity_soft(v.cast<bool>());
  absl::StatusOr<rpc::ActorInfo> created;
  {
    py::gil_scoped_release release;
    created = Worker().CreateActor(std::move(spec));
  }
  if (!created.ok()) Throw(created.status());
  return created->actor_id();
}

PyObjectRef Submit(const std::string& actor_id, const std::string& method, py::bytes args) {
  std::string packed(args);
  py::gil_scoped_release release;
  return {internal::SubmitCall(actor_id, method, std::move(packed)), actor_id, method};
}

// Waits for every ref (up to `timeout_s` in all); a ref still pending at the deadline comes
// back as a GetTimeout error.
std::vector<py::tuple> GetMany(const std::vector<PyObjectRef>& refs, double timeout_s) {
  absl::Time deadline =
      timeout_s < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Seconds(timeout_s);
  std::vector<bool> done(refs.size(), false);
  {
    py::gil_scoped_release release;
    for (size_t i = 0; i < refs.size(); ++i) {
      // Wait in slices so that Ctrl-C reaches Python within a second.
      while (true) {
        absl::Duration left = deadline - absl::Now();
        if (left <= absl::ZeroDuration()) break;
        if (refs[i].state->Wait(std::min(left, absl::Seconds(1)))) {
          done[i] = true;
          break;
        }
        py::gil_scoped_acquire acquire;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      }
      if (!done[i]) done[i] = refs[i].state->done();
    }
  }
  std::vector<py::tuple> out;
  for (size_t i = 0; i < refs.size(); ++i) {
    if (done[i]) {
      out.push_back(Outcome(refs[i]));
    } else {
      out.push_back(py::make_tuple(
          false, py::bytes(""), error_kind::kGetTimeout,
          absl::StrCat("get timed out after ", timeout_s, " s waiting for ", refs[i].method,
                       " on actor ", refs[i].actor_id.substr(0, 8))));
    }
  }
  return out;
}

std::vector<bool> WaitRefs(const std::vector<PyObjectRef>& refs, int num_returns,
                           double timeout_s) {
  std::vector<std::shared_ptr<ObjectState>> states;
  for (const auto& r : refs) states.push_back(r.state);
  py::gil_scoped_release release;
  return WaitAny(states, num_returns, Timeout(timeout_s));
}

py::dict ActorSummary(const rpc::ActorInfo& a) {
  py::dict d;
  d["actor_id"] = a.actor_id();
  d["class_name"] = a.class_name();
  d["language"] = a.language();
  d["name"] = a.name();
  d["state"] = rpc::StateName(a.state());
  d["pid"] = a.pid();
  d["node_id"] = a.node_id();
  d["num_restarts"] = a.num_restarts();
  d["death_cause"] = a.death_cause().kind() == rpc::DeathCause::NONE
                         ? std::string()
                         : rpc::DescribeCause(a.death_cause());
  d["json"] = ToJson(a);
  return d;
}

py::dict GetActorInfo(const std::string& actor_id) {
  absl::StatusOr<rpc::ActorInfo> info;
  {
    py::gil_scoped_release release;
    info = Worker().gcs().GetActor(actor_id);
  }
  if (!info.ok()) Throw(info.status());
  return ActorSummary(*info);
}

py::dict GetNamedActor(const std::string& name, const std::string& ns) {
  absl::StatusOr<std::shared_ptr<ActorClient>> client;
  {
    py::gil_scoped_release release;
    client = Worker().NamedClient(name, ns);
  }
  if (!client.ok()) Throw(client.status());
  return ActorSummary((*client)->info());
}

void KillActor(const std::string& actor_id, bool no_restart) {
  absl::Status s;
  {
    py::gil_scoped_release release;
    s = Worker().Kill(actor_id, no_restart);
  }
  if (!s.ok()) Throw(s);
}

// ---- the Python worker ----------------------------------------------------------------

// A Python actor object, called through phalanx._worker.call(obj, method, args).
class PyActorInstance final : public ActorInstance {
 public:
  explicit PyActorInstance(py::object obj) : obj_(std::move(obj)) {}
  ~PyActorInstance() override {
    py::gil_scoped_acquire acquire;
    obj_ = py::object();
  }

  CallOutcome Call(const std::string& method, const std::string& args) override {
    py::gil_scoped_acquire acquire;
    try {
      py::tuple r = py::module_::import("phalanx._worker")
                        .attr("call")(obj_, method, py::bytes(args))
                        .cast<py::tuple>();
      if (r[0].cast<bool>()) return {absl::OkStatus(), r[1].cast<std::string>()};
      std::string kind = r[2].cast<std::string>();
      auto code = kind == error_kind::kInvalidCall ? absl::StatusCode::kInvalidArgument
                                                   : absl::StatusCode::kUnknown;
      return {MakeError(code, kind, r[3].cast<std::string>()), ""};
    } catch (const std::exception& e) {
      return {MakeError(absl::StatusCode::kInternal, error_kind::kTaskError, e.what()), ""};
    }
  }

 private:
  py::object obj_;
};

int RunPythonWorker() {
  ActorClass python;
  python.name = "python";
  python.threaded = true;
  python.create = [](const std::string& args) -> absl::StatusOr<std::unique_ptr<ActorInstance>> {
    py::gil_scoped_acquire acquire;
    try {
      py::object obj = py::module_::import("phalanx._worker").attr("create")(py::bytes(args));
      return std::unique_ptr<ActorInstance>(new PyActorInstance(std::move(obj)));
    } catch (const std::exception& e) {
      return absl::InternalError(e.what());
    }
  };
  ActorRegistry::Global().SetFallback(std::move(python));
  py::gil_scoped_release release;
  return RunWorker();
}

// ---- collectives ------------------------------------------------------------------------

// A numpy array or torch tensor, seen as a buffer: no copy.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  collective::DType dtype = collective::DType::kFloat32;
};

collective::DType FromTorchDtype(const std::string& name) {
  if (name == "torch.float32") return collective::DType::kFloat32;
  if (name == "torch.float64") return collective::DType::kFloat64;
  if (name == "torch.float16") return collective::DType::kFloat16;
  if (name == "torch.bfloat16") return collective::DType::kBFloat16;
  if (name == "torch.int32") return collective::DType::kInt32;
  if (name == "torch.int64") return collective::DType::kInt64;
  throw py::type_error(absl::StrCat("dtype ", name,
                                    " is not supported by collectives: use float32, float64, "
                                    "float16, bfloat16, int32 or int64"));
}

Buffer ToBuffer(const py::object& obj, bool writable) {
  Buffer b;
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "numel")) {  // a torch tensor
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      throw py::value_error("the tensor is not contiguous: call .contiguous() first");
    }
    std::string device = py::str(obj.attr("device").attr("type"));
    if (device != "cpu" && device != "cuda") {
      throw py::value_error(absl::StrCat("tensors on ", device, " are not supported"));
    }
    b.data = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
    b.count = obj.attr("numel")().cast<size_t>();
    b.dtype = FromTorchDtype(py::str(obj.attr("dtype")));
    return b;
  }
  py::buffer buffer = py::reinterpret_borrow<py::buffer>(obj);
  py::buffer_info info = buffer.request(writable);
  if (info.ndim > 0) {
    ssize_t expected = info.itemsize;
    for (ssize_t d = info.ndim - 1; d >= 0; --d) {
      if (info.shape[d] > 1 && info.strides[d] != expected) {
        throw py::value_error("the array is not C-contiguous: use numpy.ascontiguousarray");
      }
      expected *= info.shape[d];
    }
  }
  b.data = info.ptr;
  b.count = static_cast<size_t>(info.size);
  char kind = info.format.empty() ? '?' : info.format.back();
  if (kind == 'f' && info.itemsize == 4) {
    b.dtype = collective::DType::kFloat32;
  } else if (kind == 'd' && info.itemsize == 8) {
    b.dtype = collective::DType::kFloat64;
  } else if (kind == 'e' && info.itemsize == 2) {
    b.dtype = collective::DType::kFloat16;
  } else if ((kind == 'i' || kind == 'l' || kind == 'q') && info.itemsize == 4) {
    b.dtype = collective::DType::kInt32;
  } else if ((kind == 'i' || kind == 'l' || kind == 'q') && info.itemsize == 8) {
    b.dtype = collective::DType::kInt64;
  } else {
    throw py::type_error(absl::StrCat("arrays of format '", info.format, "' (", info.itemsize,
                                      " bytes) are not supported by collectives: use float32, "
                                      "float64, float16, int32 or int64"));
  }
  return b;
}

collective::ReduceOp Op(const std::string& op) {
  if (op == "sum") return collective::ReduceOp::kSum;
  if (op == "prod" || op == "product") return collective::ReduceOp::kProd;
  if (op == "min") return collective::ReduceOp::kMin;
  if (op == "max") return collective::ReduceOp::kMax;
  if (op == "avg" || op == "mean") return collective::ReduceOp::kAvg;
  throw py::value_error(absl::StrCat("op '", op, "': use sum, prod, min, max or avg"));
}

class PyCollectiveGroup {
 public:
  PyCollectiveGroup(const std::string& name, const std::string& backend,
                    const std::string& gcs_address, const std::string& token,
                    const std::string& host, double timeout_s, bool shared_memory) {
    collective::GroupOptions options;
    options.name = name;
    if (backend == "nccl") {
      options.backend = collective::Backend::kNccl;
    } else if (backend != "gloo") {
      throw py::value_error(absl::StrCat("backend '", backend, "': use gloo or nccl"));
    }
    options.gcs_address = gcs_address;
    options.token = token;
    if (options.gcs_address.empty()) {
      if (CoreWorker* cw = CoreWorker::Get()) {
        options.gcs_address = cw->options().address;
        options.token = cw->options().token;
      }
    }
    if (!host.empty()) options.host = host;
    options.timeout = absl::Seconds(timeout_s);
    options.shared_memory = shared_memory;
    absl::StatusOr<std::unique_ptr<collective::CollectiveGroup>> made;
    {
      py::gil_scoped_release release;
      made = collective::CollectiveGroup::Create(options);
    }
    if (!made.ok()) Throw(made.status());
    group_ = std::move(*made);
  }

  void Reconfigure(int64_t epoch, int rank, int world, double timeout_s) {
    Run([&] {
      return group_->Reconfigure(epoch, rank, world,
                                 timeout_s < 0 ? absl::ZeroDuration() : absl::Seconds(timeout_s));
    });
  }
  void Allreduce(const py::object& t, const std::string& op, double timeout_s) {
    Buffer b = ToBuffer(t, true);
    Run([&] { return group_->Allreduce(b.data, b.count, b.dtype, Op(op), T(timeout_s)); });
  }
  void Allgather(const py::object& in, const py::object& out, double timeout_s) {
    Buffer i = ToBuffer(in, false), o = ToBuffer(out, true);
    if (o.count != i.count * static_cast<size_t>(group_->world_size()) || o.dtype != i.dtype) {
      throw py::value_error(absl::StrCat("allgather: out must hold world_size (",
                                         group_->world_size(), ") × ", i.count,
                                         " elements of the input's dtype; it holds ", o.count));
    }
    Run([&] { return group_->Allgather(i.data, o.data, i.count, i.dtype, T(timeout_s)); });
  }
  void ReduceScatter(const py::object& in, const py::object& out, const std::string& op,
                     double timeout_s) {
    Buffer i = ToBuffer(in, false), o = ToBuffer(out, true);
    if (i.count != o.count * static_cast<size_t>(group_->world_size()) || o.dtype != i.dtype) {
      throw py::value_error(absl::StrCat("reduce_scatter: in must hold world_size (",
                                         group_->world_size(), ") × ", o.count,
                                         " elements of the output's dtype; it holds ", i.count));
    }
    Run([&] {
      return group_->ReduceScatter(i.data, o.data, o.count, i.dtype, Op(op), T(timeout_s));
    });
  }
  void Broadcast(const py::object& t, int root, double timeout_s) {
    Buffer b = ToBuffer(t, true);
    Run([&] { return group_->Broadcast(b.data, b.count, b.dtype, root, T(timeout_s)); });
  }
  void Barrier(double timeout_s) {
    Run([&] { return group_->Barrier(T(timeout_s)); });
  }
  void Send(const py::object& t, int dst, double timeout_s) {
    Buffer b = ToBuffer(t, false);
    Run([&] { return group_->Send(b.data, b.count, b.dtype, dst, T(timeout_s)); });
  }
  void Recv(const py::object& t, int src, double timeout_s) {
    Buffer b = ToBuffer(t, true);
    Run([&] { return group_->Recv(b.data, b.count, b.dtype, src, T(timeout_s)); });
  }
  void Abort(const std::string& reason) { group_->Abort(reason); }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->world_size(); }
  int64_t epoch() const { return group_->epoch(); }
  std::string name() const { return group_->name(); }

 private:
  static absl::Duration T(double timeout_s) {
    return timeout_s < 0 ? absl::ZeroDuration() : absl::Seconds(timeout_s);
  }
  template <typename F>
  void Run(F&& f) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = f();
    }
    if (!s.ok()) throw CollectiveError(std::string(s.message()));
  }

 public:
  struct CollectiveError : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

 private:
  std::unique_ptr<collective::CollectiveGroup> group_;
};

}  // namespace
}  // namespace phalanx::python

PYBIND11_MODULE(_phalanx, m) {
  using namespace phalanx;
  using namespace phalanx::python;
  m.doc() = "the native half of the phalanx package";
  elastic::RegisterController();
  RegisterPythonTrainer();

  py::register_exception<PyCollectiveGroup::CollectiveError>(m, "CollectiveError",
                                                             PyExc_RuntimeError);

  m.attr("BIN_DIR") = PHALANX_BIN_DIR;
  m.def("in_worker_mode", &InWorkerMode);
  m.def("run_worker", &RunPythonWorker,
        "host the actor the node manager names; returns the "
        "process exit code");

  m.def(
      "init",
      [](const std::string& address, const std::string& token, const std::string& ns) {
        InitOptions options;
        options.address = address;
        options.token = token;
        options.namespace_ = ns;
        absl::Status s;
        {
          py::gil_scoped_release release;
          s = Init(options);
        }
        if (!s.ok()) Throw(s);
      },
      py::arg("address") = "", py::arg("token") = "", py::arg("namespace") = "");
  m.def("is_initialized", [] { return CoreWorker::Get() != nullptr; });
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    Shutdown();
  });
  m.def("cluster", [] {
    auto o = Worker().options();
    return py::make_tuple(o.address, o.token, o.job_id, o.namespace_);
  });

  py::class_<PyObjectRef>(m, "ObjectRef")
      .def("done", [](const PyObjectRef& r) { return r.state->done(); })
      .def_readonly("actor_id", &PyObjectRef::actor_id)
      .def_readonly("method", &PyObjectRef::method)
      .def("outcome", [](const PyObjectRef& r) {
        if (!r.state->done()) throw std::runtime_error("not done yet");
        return Outcome(r);
      });
  m.def("create_actor", &CreateActor);
  m.def("submit", &Submit);
  m.def("get", &GetMany);
  m.def("wait", &WaitRefs);
  m.def("kill", &KillActor);
  m.def("actor_info", &GetActorInfo);
  m.def("named_actor", &GetNamedActor);

  m.def("create_placement_group", [](const std::vector<std::map<std::string, double>>& bundles,
                                     const std::string& strategy, const std::string& name) {
    absl::StatusOr<PlacementGroup> pg;
    {
      py::gil_scoped_release release;
      pg = CreatePlacementGroup(bundles, strategy, name);
    }
    if (!pg.ok()) Throw(pg.status());
    return pg->id();
  });
  m.def("wait_placement_group", [](const std::string& id, double timeout_s) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = PlacementGroup(id).Wait(Timeout(timeout_s));
    }
    return py::make_tuple(s.ok(), std::string(s.message()));
  });
  m.def("remove_placement_group", [](const std::string& id) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = RemovePlacementGroup(PlacementGroup(id));
    }
    if (!s.ok()) Throw(s);
  });
  m.def("placement_group_state", [](const std::string& id) {
    absl::StatusOr<std::string> state;
    {
      py::gil_scoped_release release;
      state = PlacementGroup(id).State();
    }
    if (!state.ok()) Throw(state.status());
    return *state;
  });

  m.def("kv_put",
        [](const std::string& ns, const std::string& key, py::bytes value, bool overwrite) {
          std::string v(value);
          absl::StatusOr<bool> added;
          {
            py::gil_scoped_release release;
            added = Worker().gcs().KvPut(ns, key, v, overwrite);
          }
          if (!added.ok()) Throw(added.status());
          return *added;
        });
  m.def("kv_get", [](const std::string& ns, const std::string& key) -> py::object {
    absl::StatusOr<std::optional<std::string>> value;
    {
      py::gil_scoped_release release;
      value = Worker().gcs().KvGet(ns, key);
    }
    if (!value.ok()) Throw(value.status());
    if (!value->has_value()) return py::none();
    return py::bytes(**value);
  });
  m.def("kv_delete", [](const std::string& ns, const std::string& key, bool by_prefix) {
    absl::StatusOr<int> n;
    {
      py::gil_scoped_release release;
      n = Worker().gcs().KvDelete(ns, key, by_prefix);
    }
    if (!n.ok()) Throw(n.status());
    return *n;
  });

  m.def("submit_job", [](const std::string& spec_yaml) {
    rpc::SubmitJobRequest request;
    request.set_spec_yaml(spec_yaml);
    absl::StatusOr<rpc::JobInfo> job;
    {
      py::gil_scoped_release release;
      job = Worker().gcs().SubmitJob(request);
    }
    if (!job.ok()) Throw(job.status());
    return job->job_id();
  });
  m.def("get_job", [](const std::string& job_id) {
    absl::StatusOr<rpc::JobInfo> job;
    {
      py::gil_scoped_release release;
      job = Worker().gcs().GetJob(job_id);
    }
    if (!job.ok()) Throw(job.status());
    return ToJson(*job);
  });
  m.def("stop_job", [](const std::string& job_id) {
    absl::StatusOr<rpc::JobInfo> job;
    {
      py::gil_scoped_release release;
      job = Worker().gcs().StopJob(job_id, 0);
    }
    if (!job.ok()) Throw(job.status());
  });

  py::class_<PyCollectiveGroup>(m, "CollectiveGroup")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::string&, double, bool>(),
           py::arg("name"), py::arg("backend") = "gloo", py::arg("gcs_address") = "",
           py::arg("token") = "", py::arg("host") = "", py::arg("timeout_s") = 30.0,
           py::arg("shared_memory") = true)
      .def("reconfigure", &PyCollectiveGroup::Reconfigure, py::arg("epoch"), py::arg("rank"),
           py::arg("world_size"), py::arg("timeout_s") = -1.0)
      .def("allreduce", &PyCollectiveGroup::Allreduce, py::arg("tensor"), py::arg("op") = "sum",
           py::arg("timeout_s") = -1.0)
      .def("allgather", &PyCollectiveGroup::Allgather, py::arg("tensor"), py::arg("out"),
           py::arg("timeout_s") = -1.0)
      .def("reduce_scatter", &PyCollectiveGroup::ReduceScatter, py::arg("tensor"), py::arg("out"),
           py::arg("op") = "sum", py::arg("timeout_s") = -1.0)
      .def("broadcast", &PyCollectiveGroup::Broadcast, py::arg("tensor"), py::arg("root") = 0,
           py::arg("timeout_s") = -1.0)
      .def("barrier", &PyCollectiveGroup::Barrier, py::arg("timeout_s") = -1.0)
      .def("send", &PyCollectiveGroup::Send, py::arg("tensor"), py::arg("dst"),
           py::arg("timeout_s") = -1.0)
      .def("recv", &PyCollectiveGroup::Recv, py::arg("tensor"), py::arg("src"),
           py::arg("timeout_s") = -1.0)
      .def("abort", &PyCollectiveGroup::Abort, py::arg("reason") = "aborted")
      .def_property_readonly("rank", &PyCollectiveGroup::rank)
      .def_property_readonly("world_size", &PyCollectiveGroup::world_size)
      .def_property_readonly("epoch", &PyCollectiveGroup::epoch)
      .def_property_readonly("name", &PyCollectiveGroup::name);
}
