// Elastic jobs in phalanx._native: the job spec and the job status are the C++ ones
// (elastic/job_spec.h, client/job_status.h), so phalanx.train, the CLI and C++ drivers
// share one parser and one reading of the GCS's job record.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "client/gcs_client.h"
#include "client/job_status.h"
#include "elastic/elastic.h"
#include "elastic/job_spec.h"
#include "google/protobuf/util/json_util.h"
#include "python/src/bindings.h"
#include "worker/core_worker.h"

namespace phalanx::python {
namespace {

using elastic::JobSpec;
using elastic::JobStatus;
using elastic::RecoveryStatus;

void BindSpec(py::module_& m) {
  py::class_<elastic::FaultPolicy>(m, "FaultPolicy")
      .def_readonly("exit_codes", &elastic::FaultPolicy::exit_codes)
      .def_readonly("event", &elastic::FaultPolicy::event)
      .def_property_readonly(
          "action", [](const elastic::FaultPolicy& p) { return elastic::ActionName(p.action); })
      .def_readonly("memory_growth", &elastic::FaultPolicy::memory_growth)
      .def_readonly("max_memory_step", &elastic::FaultPolicy::max_memory_step)
      .def_readonly("memory_cap", &elastic::FaultPolicy::memory_cap)
      .def_readonly("dump", &elastic::FaultPolicy::dump);

  py::class_<JobSpec>(m, "JobSpec", "an elastic job spec, as parse_job_spec reads it")
      .def_readonly("name", &JobSpec::name)
      .def_readonly("trainer", &JobSpec::trainer)
      .def_readonly("code_path", &JobSpec::code_path)
      .def_readonly("language", &JobSpec::language)
      .def_readonly("replicas", &JobSpec::replicas)
      .def_readonly("min_replicas", &JobSpec::min_replicas)
      .def_readonly("max_replicas", &JobSpec::max_replicas)
      .def_readonly("resources", &JobSpec::resources)
      .def_readonly("policies", &JobSpec::policies)
      .def_readonly("restart_limit", &JobSpec::restart_limit)
      .def_readonly("restart_time_limit_s", &JobSpec::restart_time_limit_s)
      .def_readonly("below_min_timeout_s", &JobSpec::below_min_timeout_s)
      .def_readonly("checkpoint_dir", &JobSpec::checkpoint_dir)
      .def_readonly("checkpoint_interval", &JobSpec::checkpoint_interval)
      .def_readonly("straggler_check", &JobSpec::straggler_check)
      .def_readonly("straggler_factor", &JobSpec::straggler_factor)
      .def_readonly("hang_timeout_s", &JobSpec::hang_timeout_s)
      .def_readonly("controller_lease_s", &JobSpec::controller_lease_s)
      .def_readonly("num_samples", &JobSpec::num_samples)
      .def_readonly("global_batch", &JobSpec::global_batch)
      .def_readonly("seed", &JobSpec::seed)
      .def_readonly("steps", &JobSpec::steps)
      .def_readonly("data_epochs", &JobSpec::data_epochs)
      .def_readonly("config", &JobSpec::config)
      .def_readonly("placement_strategy", &JobSpec::placement_strategy)
      .def_readonly("preimports", &JobSpec::preimports)
      .def_readonly("step_call_ms", &JobSpec::step_call_ms)
      .def_readonly("scale_out_debounce_s", &JobSpec::scale_out_debounce_s)
      .def("total_steps", &JobSpec::TotalSteps)
      .def("to_yaml", [](const JobSpec& spec) { return elastic::JobSpecToYaml(spec); });

  // YAML (or JSON) → a validated JobSpec; InvalidArgumentError naming the field and the fix.
  m.def("parse_job_spec", [](const std::string& yaml) {
    return CallBlocking([&] { return elastic::ParseJobSpec(yaml); });
  });
}

void BindStatus(py::module_& m) {
  py::class_<elastic::JobCondition>(m, "JobCondition")
      .def_readonly("type", &elastic::JobCondition::type)
      .def_readonly("time_ms", &elastic::JobCondition::time_ms)
      .def_readonly("reason", &elastic::JobCondition::reason)
      .def_readonly("message", &elastic::JobCondition::message);
  py::class_<elastic::JobEvent>(m, "JobEvent")
      .def_readonly("time_ms", &elastic::JobEvent::time_ms)
      .def_readonly("kind", &elastic::JobEvent::kind)
      .def_readonly("message", &elastic::JobEvent::message)
      .def_readonly("world_size", &elastic::JobEvent::world_size)
      .def_readonly("epoch", &elastic::JobEvent::epoch);
  py::class_<elastic::RankStatus>(m, "RankStatus")
      .def_readonly("rank", &elastic::RankStatus::rank)
      .def_property_readonly("actor_id",
                             [](const elastic::RankStatus& r) { return r.actor_id.Hex(); })
      .def_property_readonly("node_id",
                             [](const elastic::RankStatus& r) { return r.node_id.Hex(); })
      .def_readonly("memory_bytes", &elastic::RankStatus::memory_bytes);
  py::class_<RecoveryStatus>(m, "RecoveryStatus",
                             "one fault and how the job healed (unix ms; 0: not reached yet)")
      .def_readonly("id", &RecoveryStatus::id)
      .def_readonly("kind", &RecoveryStatus::kind)
      .def_readonly("message", &RecoveryStatus::message)
      .def_readonly("fault_ms", &RecoveryStatus::fault_ms)
      .def_readonly("detected_ms", &RecoveryStatus::detected_ms)
      .def_readonly("resumed_ms", &RecoveryStatus::resumed_ms)
      .def_readonly("full_strength_ms", &RecoveryStatus::full_strength_ms)
      .def_readonly("world_before", &RecoveryStatus::world_before)
      .def_readonly("world_during", &RecoveryStatus::world_during)
      .def_readonly("restored_from", &RecoveryStatus::restored_from);
  py::class_<JobStatus>(m, "JobStatus", "an elastic job's status, as `phalanx job status` shows")
      .def_property_readonly("job_id", [](const JobStatus& s) { return s.job_id.str(); })
      .def_readonly("name", &JobStatus::name)
      .def_readonly("state", &JobStatus::state)
      .def_readonly("message", &JobStatus::message)
      .def_readonly("world_size", &JobStatus::world_size)
      .def_readonly("epoch", &JobStatus::epoch)
      .def_readonly("step", &JobStatus::step)
      .def_readonly("total_steps", &JobStatus::total_steps)
      .def_readonly("loss", &JobStatus::loss)
      .def_readonly("restarts", &JobStatus::restarts)
      .def_readonly("last_checkpoint_step", &JobStatus::last_checkpoint_step)
      .def_readonly("steps_per_second", &JobStatus::steps_per_second)
      .def_readonly("steps_per_call", &JobStatus::steps_per_call)
      .def_readonly("results", &JobStatus::results)
      .def_property_readonly("controller_actor_id",
                             [](const JobStatus& s) { return s.controller_actor_id.Hex(); })
      .def_readonly("ranks", &JobStatus::ranks)
      .def_readonly("conditions", &JobStatus::conditions)
      .def_readonly("events", &JobStatus::events)
      .def_readonly("recoveries", &JobStatus::recoveries)
      .def_readonly("restarts_by_cause", &JobStatus::restarts_by_cause)
      .def_readonly("fault_seconds", &JobStatus::fault_seconds)
      .def_readonly("step_skew", &JobStatus::step_skew)
      .def_readonly("network_check_skew", &JobStatus::network_check_skew)
      .def("done", &JobStatus::Done)
      .def("format", &FormatStatus, py::arg("with_events") = true);
}

}  // namespace

void BindJobs(py::module_& m) {
  BindSpec(m);
  BindStatus(m);

  // Records the job and starts its controller (as `phalanx job submit -f`); the job id.
  m.def("submit_job", [](const JobSpec& spec) {
    rpc::SubmitJobRequest request;
    request.set_kind("elastic");
    request.set_spec_yaml(elastic::JobSpecToYaml(spec));
    request.set_spec_dir(std::filesystem::current_path().string());
    return CallBlocking([&] { return Worker().gcs().SubmitJob(request); }).job_id();
  });
  m.def("job_status", [](const std::string& job_id) {
    rpc::JobInfo job = CallBlocking([&] { return Worker().gcs().GetJob(job_id); });
    return ToStatus(job);
  });
  // The job's record as the GCS keeps it, as JSON (for tests and tools that want all of it).
  m.def("get_job", [](const std::string& job_id) {
    rpc::JobInfo job = CallBlocking([&] { return Worker().gcs().GetJob(job_id); });
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(job, &out, options);
    return out;
  });
  // Resizes an elastic job (as `phalanx job scale`): `replicas` ranks, taking `remove_ranks`
  // out gracefully.
  m.def(
      "scale_job",
      [](const std::string& job_id, int replicas, const std::vector<int>& remove_ranks,
         const std::optional<std::vector<std::string>>& nodes) {
        rpc::ScaleJobRequest request;
        request.set_job_id(job_id);
        request.set_replicas(replicas);
        for (int r : remove_ranks) request.add_ranks(r);
        if (nodes) {  // the nodes the ranks may use from now on ([]: any)
          request.set_set_nodes(true);
          for (const auto& n : *nodes) request.add_nodes(n);
        }
        CallBlocking([&] { return Worker().gcs().ScaleJob(request); });
      },
      py::arg("job_id"), py::arg("replicas"), py::arg("remove_ranks") = std::vector<int>{},
      py::arg("nodes") = std::nullopt);
  // The cluster's nodes as the GCS knows them, dead ones included (Ray's `ray.nodes()`).
  m.def("nodes", [] {
    auto nodes = CallBlocking([] { return Worker().gcs().GetAllNodes(); });
    py::list out;
    for (const rpc::NodeInfo& n : nodes) {
      py::dict d;
      d["node_id"] = n.node_id();
      d["address"] = n.address();
      d["hostname"] = n.hostname();
      d["alive"] = n.state() == rpc::NODE_ALIVE;
      d["is_head"] = n.is_head();
      d["session_dir"] = n.session_dir();
      std::map<std::string, double> total(n.total().amounts().begin(), n.total().amounts().end());
      std::map<std::string, double> available(n.available().amounts().begin(),
                                              n.available().amounts().end());
      d["resources"] = total;
      d["available"] = available;
      const rpc::ObjectStoreUsage& o = n.object_store();
      py::dict store;
      store["capacity_bytes"] = o.capacity_bytes();
      store["used_bytes"] = o.used_bytes();
      store["cached_bytes"] = o.cached_bytes();
      store["spilled_bytes"] = o.spilled_bytes();
      store["sent_bytes"] = o.sent_bytes();
      store["objects"] = o.objects();
      d["object_store"] = store;
      out.append(d);
    }
    return out;
  });
  m.def("stop_job", [](const std::string& job_id) {
    CallBlocking([&] { return Worker().gcs().StopJob(job_id, 0).status(); });
  });
  // An elastic job's workers' output (phalanx.train forwards its ranks' prints).
  m.def("append_job_log", [](const std::string& job_id, const py::bytes& data) {
    std::string bytes = data;
    CallBlocking([&] { return Worker().gcs().AppendJobLog(job_id, bytes); });
  });
  // The job's log from `offset` as it is now: (bytes, the offset after them). A job with no
  // log yet gives nothing.
  m.def("job_log", [](const std::string& job_id, int64_t offset) {
    std::string out;
    int64_t end = offset;
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = Worker().gcs().JobLogs(job_id, offset, /*follow=*/false,
                                 [&](const rpc::JobLogsChunk& chunk) {
                                   out.append(chunk.data());
                                   end = chunk.offset() + static_cast<int64_t>(chunk.data().size());
                                   return true;
                                 });
    }
    if (!s.ok() && !absl::IsFailedPrecondition(s)) RaiseStatus(s);
    return py::make_tuple(py::bytes(out), end);
  });
}

}  // namespace phalanx::python
