#include "elastic/elastic.h"

#include <unistd.h>

#include <climits>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "actors/api.h"
#include "base/ids.h"
#include "base/system.h"
#include "client/gcs_client.h"
#include "worker/core_worker.h"

namespace phalanx::elastic {
namespace {

absl::StatusOr<gcs::GcsClient*> Gcs() {
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) {
    return absl::FailedPreconditionError("phalanx is not initialized: call phalanx::Init() first");
  }
  return &cw->gcs();
}

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

}  // namespace

absl::StatusOr<JobId> Submit(JobSpec spec) {
  if (auto s = ValidateJobSpec(spec); !s.ok()) return s;
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  if (spec.code_path.empty()) {
    worker::CoreWorker* cw = worker::CoreWorker::Get();
    spec.code_path = cw->options().code_path.empty() ? SelfExe() : cw->options().code_path;
  }
  // The job manager records the job and starts its controller (as for `phalanx job submit -f`).
  rpc::SubmitJobRequest request;
  request.set_kind("elastic");
  request.set_spec_yaml(JobSpecToYaml(spec));
  request.set_spec_dir(std::filesystem::current_path().string());
  auto job = (*gcs)->SubmitJob(request);
  if (!job.ok()) return job.status();
  return JobId(job->job_id());
}

absl::StatusOr<JobId> SubmitYaml(const std::string& yaml) {
  auto spec = ParseJobSpec(yaml);
  if (!spec.ok()) return spec.status();
  return Submit(*spec);
}

absl::StatusOr<JobStatus> Status(const JobId& job_id) {
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  auto job = (*gcs)->GetJob(job_id.str());
  if (!job.ok()) return job.status();
  return ToStatus(*job);
}

absl::Status Scale(const JobId& job_id, int replicas, const std::vector<int>& ranks) {
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  return (*gcs)->ScaleJob(job_id.str(), replicas, ranks).status();
}

absl::Status Scale(const JobId& job_id, int replicas, const std::vector<int>& ranks,
                   const std::vector<std::string>& nodes) {
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  rpc::ScaleJobRequest request;
  request.set_job_id(job_id.str());
  request.set_replicas(replicas);
  for (int r : ranks) request.add_ranks(r);
  request.set_set_nodes(true);
  for (const auto& n : nodes) request.add_nodes(n);
  return (*gcs)->ScaleJob(request).status();
}

absl::Status Stop(const JobId& job_id) {
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  return (*gcs)->StopJob(job_id.str(), 0).status();
}

absl::StatusOr<JobStatus> Wait(const JobId& job_id, absl::Duration timeout,
                               const std::function<void(const JobStatus&)>& on_change) {
  absl::Time deadline = absl::Now() + timeout;
  size_t conditions = 0, events = 0;
  int world = -1;
  while (true) {
    auto status = Status(job_id);
    if (!status.ok()) return status.status();
    if (on_change && (status->conditions.size() != conditions || status->events.size() != events ||
                      status->world_size != world)) {
      on_change(*status);
    }
    conditions = status->conditions.size();
    events = status->events.size();
    world = status->world_size;
    if (status->Done()) return status;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("job ", job_id.str(), " did not finish within ",
                       absl::FormatDuration(timeout), ": ", FormatStatus(*status, false)));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace phalanx::elastic
