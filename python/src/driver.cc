// The driver side of phalanx._native: connecting to a cluster, creating and calling actors, waiting
// for results, placement groups and the GCS's key-value store. Built on the C++ actor API
// (actors/api.h): no protobuf here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actors/api.h"
#include "actors/internal/task_pool.h"
#include "client/gcs_client.h"
#include "python/src/bindings.h"
#include "worker/core_worker.h"
#include "worker/errors.h"
#include "worker/object_state.h"
#include "worker/worker_host.h"

namespace phalanx::python {
namespace {

// The result slot of one call, as Python sees it.
struct PyObjectRef {
  std::shared_ptr<worker::ObjectState> state;
  std::string actor_id;
  std::string method;
};

// A name from Python as its enum; an unknown one raises the error naming `field` and the
// allowed names (ValueError).
template <typename E>
E ParseOrRaise(absl::StatusOr<E> parsed, ErrorDomain domain = ErrorDomain::kGeneral) {
  if (!parsed.ok()) RaiseStatus(parsed.status(), domain);
  return *parsed;
}

internal::ActorOptions ToActorOptions(const std::string& language, const py::dict& o) {
  internal::ActorOptions options;
  options.language = ParseOrRaise(ParseLanguage(language));
  auto get = [&](const char* key) -> py::object {
    return o.contains(key) ? py::reinterpret_borrow<py::object>(o[key]) : py::none();
  };
  auto set = [&](const char* key, auto* field) {
    if (auto v = get(key); !v.is_none()) *field = v.cast<std::decay_t<decltype(*field)>>();
  };
  set("resources", &options.resources);
  set("name", &options.name);
  set("namespace", &options.actor_namespace);
  set("max_restarts", &options.max_restarts);
  set("max_task_retries", &options.max_task_retries);
  set("max_concurrency", &options.max_concurrency);
  set("labels", &options.labels);
  set("detached", &options.detached);
  set("code_path", &options.code_path);
  set("env", &options.env);
  set("placement_group_id", &options.placement_group_id);
  set("bundle_index", &options.bundle_index);
  if (auto v = get("scheduling_strategy"); !v.is_none()) {
    options.scheduling_strategy = ParseOrRaise(ParseSchedulingStrategy(v.cast<std::string>()));
  }
  set("node_id", &options.affinity_node_id);
  set("soft", &options.affinity_soft);
  return options;
}

std::string CreateActor(const std::string& class_name, const std::string& language,
                        py::bytes init_args, const py::dict& options) {
  internal::ActorOptions o = ToActorOptions(language, options);
  std::string args(init_args);
  return CallBlocking([&] { return internal::CreateActor(class_name, o, std::move(args)); });
}

PyObjectRef Submit(const std::string& actor_id, const std::string& method, py::bytes args,
                   const std::string& concurrency_group) {
  std::string packed(args);
  auto state = CallBlocking(
      [&] { return internal::SubmitCall(actor_id, method, std::move(packed), concurrency_group); });
  return {std::move(state), actor_id, method};
}

// Raises the error `ref` failed with, with the actor's death cause for ActorDiedError and
// the remote exception's class for TaskError.
[[noreturn]] void RaiseCallError(const PyObjectRef& ref) {
  StatusError e;
  e.status = ref.state->status();
  e.actor_id = ref.actor_id;
  e.detail = ref.state->value();
  const std::string kind = worker::ErrorKind(e.status);
  if (kind == worker::error_kind::kActorDied || kind == worker::error_kind::kCreationFailed) {
    // Best effort: the message names the cause too.
    e.cause = CallBlocking([&] {
      auto info = GetActorInfo(ActorId(ref.actor_id));
      return info.ok() ? info->death_cause : std::string();
    });
    // A worker that refused the call as dead with its owner names the cause before the GCS
    // does (worker_host.cc's OwnerGone).
    if (e.cause.empty() && absl::StartsWith(e.detail, "OWNER_DIED: ")) e.cause = e.detail;
  }
  throw e;
}

// _native.Blocked: a worker::BlockedScope held from __enter__ to __exit__.
struct BlockedPy {
  std::optional<worker::BlockedScope> scope;
};

// The serialized results of `refs`, in order, once all are done (up to `timeout_s` in all);
// raises the first failed call's error, or GetTimeoutError for a ref still pending then.
std::vector<py::bytes> GetMany(const std::vector<PyObjectRef>& refs, double timeout_s) {
  absl::Time deadline =
      timeout_s < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Seconds(timeout_s);
  std::vector<bool> done = CallBlocking([&] {
    std::vector<bool> out(refs.size(), false);
    std::optional<worker::BlockedScope> blocked;  // a task worker lends its CPU while it waits
    for (size_t i = 0; i < refs.size(); ++i) {
      if (!blocked && !refs[i].state->done()) blocked.emplace();
      // Wait in slices so that Ctrl-C reaches Python within a second.
      while (true) {
        absl::Duration left = deadline - absl::Now();
        if (left <= absl::ZeroDuration()) break;
        if (refs[i].state->Wait(std::min(left, absl::Seconds(1)))) {
          out[i] = true;
          break;
        }
        py::gil_scoped_acquire acquire;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      }
      if (!out[i]) out[i] = refs[i].state->done();
    }
    return out;
  });
  std::vector<py::bytes> values;
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!done[i]) {
      RaiseStatus(worker::MakeError(
          absl::StatusCode::kDeadlineExceeded, worker::error_kind::kGetTimeout,
          absl::StrCat("get timed out after ", timeout_s, " s waiting for ", refs[i].method,
                       " on actor ", refs[i].actor_id.substr(0, 8))));
    }
    if (!refs[i].state->status().ok()) RaiseCallError(refs[i]);
    values.emplace_back(refs[i].state->value());
  }
  return values;
}

std::vector<bool> WaitRefs(const std::vector<PyObjectRef>& refs, int num_returns,
                           double timeout_s) {
  std::vector<std::shared_ptr<worker::ObjectState>> states;
  for (const auto& r : refs) states.push_back(r.state);
  return CallBlocking(
      [&] { return internal::WaitForResults(states, num_returns, Timeout(timeout_s)); });
}

// A Python task's call arguments: frames (u32 little-endian count, then each frame as a u32
// length and its bytes): the pickled call, then each dependency's serialized value.
std::string FrameTaskCall(const std::string& call, const std::vector<std::string>& dep_values) {
  std::string out;
  auto put32 = [&out](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put32(static_cast<uint32_t>(1 + dep_values.size()));
  put32(static_cast<uint32_t>(call.size()));
  out += call;
  for (const auto& v : dep_values) {
    put32(static_cast<uint32_t>(v.size()));
    out += v;
  }
  return out;
}

// A Python worker marks an exception that retry_exceptions names by this suffix on its detail.
constexpr char kRetryableMark[] = "\nretryable";

// Submits a Python task (phalanx._task): `call` is the pickled call, `deps` the refs among its
// arguments; the task worker is created from `worker_init_args` with `options`.
PyObjectRef SubmitTask(const std::string& function, const std::string& worker_class,
                       py::bytes worker_init_args, py::bytes ready_args, const py::dict& options,
                       const std::string& method, py::bytes call,
                       const std::vector<PyObjectRef>& deps, int max_retries, bool exclusive) {
  internal::TaskSubmission task;
  task.function = function;
  task.worker_class = worker_class;
  task.worker = ToActorOptions("python", options);
  task.worker_init_args = std::string(worker_init_args);
  task.ready_method = "ready";
  task.ready_args = std::string(ready_args);
  task.method = method;
  for (const auto& d : deps) task.deps.push_back(d.state);
  task.assemble = [call = std::string(call)](const std::vector<std::string>& values) {
    return FrameTaskCall(call, values);
  };
  task.max_retries = max_retries;
  task.exclusive = exclusive;
  task.retryable = [](const absl::Status&, std::string* detail) {
    if (!absl::EndsWith(*detail, kRetryableMark)) return false;
    detail->resize(detail->size() - std::strlen(kRetryableMark));
    return true;
  };
  auto state = CallBlocking([&] { return internal::SubmitTask(std::move(task)); });
  return {std::move(state), "", function};
}

py::dict ToDict(const ActorDescription& a) {
  py::dict d;
  d["actor_id"] = a.actor_id.Hex();
  d["class_name"] = a.class_name;
  d["language"] = std::string(ToString(a.language));
  d["name"] = a.name;
  d["state"] = std::string(ToString(a.state));
  d["pid"] = a.pid;
  d["node_id"] = a.node_id.Hex();
  d["num_restarts"] = a.num_restarts;
  d["death_cause"] = a.death_cause;
  d["labels"] = a.labels;
  return d;
}

void BindRuntime(py::module_& m) {
  m.def(
      "init",
      [](const std::string& address, const std::string& token, const std::string& ns,
         bool log_to_driver) {
        InitOptions options;
        options.address = address;
        options.token = token;
        options.actor_namespace = ns;
        options.log_to_driver = log_to_driver;
        CallBlocking([&] { return Init(options); });
      },
      py::arg("address") = "", py::arg("token") = "", py::arg("namespace") = "",
      py::arg("log_to_driver") = false);
  m.def("is_initialized", [] { return worker::CoreWorker::Get() != nullptr; });
  m.def("shutdown", [] { CallBlocking([] { Shutdown(); }); });
  // The actor this process hosts: (actor id, attempt, class name), or None in a driver.
  m.def("hosted_actor", []() -> py::object {
    auto hosted = worker::CurrentHostedActor();
    if (!hosted) return py::none();
    return py::make_tuple(hosted->actor_id, hosted->attempt, hosted->class_name);
  });
  m.def("cluster", [] {
    auto o = Worker().options();
    return py::make_tuple(o.address, o.token, o.job_id, o.namespace_);
  });
}

void BindActors(py::module_& m) {
  py::class_<PyObjectRef>(m, "ObjectRef")
      .def("done", [](const PyObjectRef& r) { return r.state->done(); })
      .def("cancel",
           [](const PyObjectRef& r, bool force) {
             if (!r.actor_id.empty()) {  // an actor call
               CallBlocking([&] { return internal::CancelActorCall(r.actor_id, r.state); });
               return;
             }
             CallBlocking([&] { return internal::CancelTask(r.state, force); });
           })
      .def_readonly("actor_id", &PyObjectRef::actor_id)
      .def_readonly("method", &PyObjectRef::method);
  m.def("create_actor", &CreateActor);
  m.def("submit", &Submit, py::arg("actor_id"), py::arg("method"), py::arg("args"),
        py::arg("concurrency_group") = "");
  m.def("submit_task", &SubmitTask);
  m.def("task_pool_stats", [] {
    py::list out;
    for (const auto& s : internal::GetTaskPoolStats()) {
      py::dict d;
      d["worker_class"] = s.worker_class;
      d["workers"] = s.workers;
      d["idle"] = s.idle;
      d["leases_in_flight"] = s.leases_in_flight;
      d["queued"] = s.queued;
      d["tasks_done"] = s.tasks_done;
      d["retries"] = s.retries;
      d["workers_leased"] = s.workers_leased;
      d["workers_returned"] = s.workers_returned;
      out.append(d);
    }
    return out;
  });
  m.def("get", &GetMany);
  // `with _native.Blocked():` around a wait of Python's own (a value of the store not written
  // yet): a task worker lends its CPU meanwhile, as in get.
  py::class_<BlockedPy>(m, "Blocked")
      .def(py::init<>())
      .def("__enter__",
           [](BlockedPy& self) {
             py::gil_scoped_release release;
             if (!self.scope) self.scope.emplace();
           })
      .def("__exit__", [](BlockedPy& self, const py::args&) {
        py::gil_scoped_release release;
        self.scope.reset();
      });
  m.def("wait", &WaitRefs);
  m.def("kill", [](const std::string& actor_id, bool no_restart) {
    CallBlocking([&] { return internal::KillActor(actor_id, no_restart); });
  });
  m.def("actor_info", [](const std::string& actor_id) {
    return ToDict(CallBlocking([&] { return GetActorInfo(ActorId(actor_id)); }));
  });
  m.def("named_actor", [](const std::string& name, const std::string& ns) {
    return ToDict(CallBlocking([&] { return internal::DescribeNamedActor(name, ns); }));
  });
}

void BindPlacementGroups(py::module_& m) {
  constexpr ErrorDomain kPg = ErrorDomain::kPlacementGroup;
  m.def(
      "create_placement_group",
      [](const std::vector<std::map<std::string, double>>& bundles, const std::string& strategy,
         const std::string& name, bool detached, bool pend_if_infeasible) {
        PlacementStrategy parsed = ParseOrRaise(ParsePlacementStrategy(strategy, "strategy"), kPg);
        return CallBlocking(
            [&] {
              return internal::CreatePlacementGroupWithReason(
                  bundles, std::string(ToString(parsed)), name, detached, pend_if_infeasible);
            },
            kPg);  // (id, pending reason)
      },
      py::arg("bundles"), py::arg("strategy"), py::arg("name"), py::arg("detached") = false,
      py::arg("pend_if_infeasible") = false);
  // Every group the GCS knows: dicts of id, name, strategy, state, bundles, job_id.
  m.def("list_placement_groups", [] {
    auto groups = CallBlocking([] { return Worker().gcs().ListPlacementGroups(); }, kPg);
    py::list out;
    for (const auto& g : groups) {
      py::dict d;
      d["placement_group_id"] = g.placement_group_id();
      d["name"] = g.name();
      d["strategy"] = g.strategy();
      d["state"] = std::string(rpc::PlacementGroupState_Name(g.state())).substr(3);
      d["job_id"] = g.job_id();
      d["pending_reason"] = g.pending_reason();
      py::list bundles, nodes;
      for (const auto& b : g.bundles()) {
        py::dict r;
        for (const auto& [k, v] : b.resources().amounts()) r[py::str(k)] = v;
        bundles.append(r);
        nodes.append(b.node_id());
      }
      d["bundles"] = bundles;
      d["bundle_nodes"] = nodes;
      out.append(d);
    }
    return out;
  });
  // Returns once every bundle is reserved; GetTimeoutError after `timeout_s`.
  m.def("wait_placement_group", [](const std::string& id, double timeout_s) {
    CallBlocking([&] { return PlacementGroup(PlacementGroupId(id)).Wait(Timeout(timeout_s)); },
                 kPg);
  });
  m.def("remove_placement_group", [](const std::string& id) {
    CallBlocking([&] { return RemovePlacementGroup(PlacementGroup(PlacementGroupId(id))); }, kPg);
  });
  m.def("placement_group_state", [](const std::string& id) {
    auto state = CallBlocking([&] { return PlacementGroup(PlacementGroupId(id)).State(); }, kPg);
    return std::string(ToString(state));
  });
}

void BindKv(py::module_& m) {
  m.def("kv_put",
        [](const std::string& ns, const std::string& key, py::bytes value, bool overwrite) {
          std::string v(value);
          return CallBlocking([&] { return Worker().gcs().KvPut(ns, key, v, overwrite); });
        });
  m.def("kv_get", [](const std::string& ns, const std::string& key) -> py::object {
    std::optional<std::string> value = CallBlocking([&] { return Worker().gcs().KvGet(ns, key); });
    if (!value.has_value()) return py::none();
    return py::bytes(*value);
  });
  m.def("kv_delete", [](const std::string& ns, const std::string& key, bool by_prefix) {
    return CallBlocking([&] { return Worker().gcs().KvDelete(ns, key, by_prefix); });
  });
  m.def("kv_list", [](const std::string& ns, const std::string& prefix) {
    std::vector<rpc::KvEntry> entries =
        CallBlocking([&] { return Worker().gcs().KvList(ns, prefix); });
    py::list keys;
    for (const rpc::KvEntry& e : entries) keys.append(py::str(e.key()));
    return keys;
  });
}

}  // namespace

void BindDriver(py::module_& m) {
  BindRuntime(m);
  BindActors(m);
  BindPlacementGroups(m);
  BindKv(m);
}

}  // namespace phalanx::python
