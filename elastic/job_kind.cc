#include "elastic/job_kind.h"

#include <filesystem>
#include <msgpack.hpp>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/system.h"
#include "elastic/job_keys.h"
#include "elastic/job_spec.h"
#include "gcs/kv_manager.h"

namespace phalanx::elastic {

absl::StatusOr<gcs::JobKind::Launch> ElasticJobKind::Prepare(const rpc::SubmitJobRequest& request,
                                                             const std::string& job_id) const {
  auto spec = ParseJobSpec(request.spec_yaml());
  if (!spec.ok()) return spec.status();
  const bool python = spec->language == "python";
  if (!python && spec->code_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("codePath: empty: set it to the program that registers trainer '",
                     spec->trainer, "' with PHALANX_TRAINER (the same path on every node)"));
  }
  // A relative codePath is relative to the spec's directory (the client's).
  if (!python && spec->code_path[0] != '/') {
    if (request.spec_dir().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("codePath: '", spec->code_path,
                       "' is relative and the submission has no spec directory; give the "
                       "absolute path (the same on every node)"));
    }
    spec->code_path =
        (std::filesystem::path(request.spec_dir()) / spec->code_path).lexically_normal().string();
  }
  if (!python && !PathExists(spec->code_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("codePath: '", spec->code_path,
                     "' does not exist on the head node; build it there (same path on every "
                     "node) or fix the path"));
  }
  Launch launch;
  rpc::JobInfo& job = launch.job;
  job.set_job_id(job_id.empty() ? absl::StrCat(spec->name, "-", RandomHex(3)) : job_id);
  job.set_name(spec->name);
  std::string yaml = JobSpecToYaml(*spec);
  job.set_spec_yaml(yaml);
  job.mutable_elastic()->set_min_replicas(spec->min_replicas);
  job.mutable_elastic()->set_max_replicas(spec->max_replicas);
  job.mutable_elastic()->set_total_steps(spec->TotalSteps());
  auto* c = job.add_conditions();
  c->set_type("Pending");
  c->set_time_ms(NowMs());
  c->set_reason("Submitted");
  c->set_message(absl::StrCat(spec->replicas, " replicas (min ", spec->min_replicas, ", max ",
                              spec->max_replicas, ")"));

  // The controller (elastic/controller.h), built with (job id, spec YAML).
  msgpack::sbuffer args;
  msgpack::packer<msgpack::sbuffer> packer(args);
  packer.pack_array(2);
  packer.pack(job.job_id());
  packer.pack(yaml);
  rpc::ActorInfo& controller = launch.actor;
  controller.set_class_name("ElasticController");
  // A Python job's controller runs in a Python worker (the phalanx module holds the class).
  controller.set_language(python ? "python" : "cpp");
  if (!python) controller.set_code_path(spec->code_path);
  controller.set_name(absl::StrCat("elastic-controller-", job.job_id()));
  controller.set_max_concurrency(1);
  controller.set_init_args(std::string(args.data(), args.size()));
  return launch;
}

absl::Status ElasticJobKind::RequestStop(const rpc::JobInfo& job, gcs::GcsKvManager& kv) const {
  return kv.Put(keys::kNamespace, keys::Stop(job.job_id()), "1", true).status();
}

absl::Status ElasticJobKind::RequestScale(const rpc::JobInfo& job,
                                          const rpc::ScaleJobRequest& request,
                                          gcs::GcsKvManager& kv) const {
  auto spec = ParseJobSpec(job.spec_yaml());
  if (!spec.ok()) return spec.status();
  int replicas = request.replicas();
  std::vector<int> ranks(request.ranks().begin(), request.ranks().end());
  if (ranks.empty() && (replicas < spec->min_replicas || replicas > spec->max_replicas)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas ", replicas, " is outside the job's minReplicas..maxReplicas (",
                     spec->min_replicas, "..", spec->max_replicas, ")"));
  }
  for (int r : ranks) {
    if (r < 0 || r >= job.elastic().world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " is not a rank of job ",
                                                     job.job_id(), " (world size ",
                                                     job.elastic().world_size(), ")"));
    }
  }
  std::optional<std::vector<std::string>> nodes;
  if (request.set_nodes()) {
    nodes.emplace(request.nodes().begin(), request.nodes().end());
    if (auto s = CheckNodeNames(*nodes, "--nodes"); !s.ok()) return s;
  }
  return kv
      .Put(keys::kNamespace, keys::Scale(job.job_id()), keys::ScaleValue(replicas, ranks, nodes),
           true)
      .status();
}

}  // namespace phalanx::elastic
