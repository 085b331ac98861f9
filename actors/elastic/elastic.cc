#include "actors/elastic/elastic.h"

#include <unistd.h>

#include <climits>

#include "absl/strings/str_cat.h"
#include "actors/api.h"
#include "actors/elastic/job_record.h"
#include "runtime/common/ids.h"
#include "runtime/common/system.h"
#include "runtime/worker/core_worker.h"

namespace phalanx::elastic {
namespace {

absl::StatusOr<gcs::GcsClient*> Gcs() {
  CoreWorker* cw = CoreWorker::Get();
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

absl::StatusOr<std::string> Submit(JobSpec spec) {
  if (auto s = ValidateJobSpec(spec); !s.ok()) return s;
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  if (spec.code_path.empty()) {
    CoreWorker* cw = CoreWorker::Get();
    spec.code_path = cw->options().code_path.empty() ? SelfExe() : cw->options().code_path;
  }
  std::string job_id = absl::StrCat(spec.name, "-", RandomHex(3));
  std::string yaml = JobSpecToYaml(spec);
  rpc::JobInfo job;
  job.set_job_id(job_id);
  job.set_name(spec.name);
  job.set_kind("elastic");
  job.set_state(rpc::JOB_PENDING);
  job.set_spec_yaml(yaml);
  job.set_submit_time_ms(NowMs());
  auto* c = job.add_conditions();
  c->set_type("Pending");
  c->set_time_ms(NowMs());
  c->set_reason("Submitted");
  c->set_message(absl::StrCat(spec.replicas, " replicas (min ", spec.min_replicas, ", max ",
                              spec.max_replicas, ")"));
  if (auto s = (*gcs)->UpdateJob(job); !s.ok()) return s;
  // The controller: detached (the job outlives this driver), restarted if its process dies.
  auto controller = ActorOf("ElasticController")
                        .SetCodePath(spec.code_path)
                        .SetName(absl::StrCat("elastic-controller-", job_id))
                        .SetDetached()
                        .SetMaxRestarts(-1)
                        .SetEnv("PHALANX_JOB_ID", job_id)
                        .Remote(job_id, yaml);
  if (!controller.ok()) {
    job.set_state(rpc::JOB_FAILED);
    job.set_message(
        absl::StrCat("the controller could not start: ", controller.status().message()));
    (*gcs)->UpdateJob(job).IgnoreError();
    return controller.status();
  }
  return job_id;
}

absl::StatusOr<std::string> SubmitYaml(const std::string& yaml) {
  auto spec = ParseJobSpec(yaml);
  if (!spec.ok()) return spec.status();
  return Submit(*spec);
}

absl::StatusOr<JobStatus> Status(const std::string& job_id) {
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  return ReadStatus(**gcs, job_id);
}

absl::Status Scale(const std::string& job_id, int replicas, const std::vector<int>& ranks) {
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  return RequestScale(**gcs, job_id, replicas, ranks);
}

absl::Status Stop(const std::string& job_id) {
  auto gcs = Gcs();
  if (!gcs.ok()) return gcs.status();
  return RequestStop(**gcs, job_id);
}

absl::StatusOr<JobStatus> Wait(const std::string& job_id, absl::Duration timeout,
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
      return absl::DeadlineExceededError(absl::StrCat("job ", job_id, " did not finish within ",
                                                      absl::FormatDuration(timeout), ": ",
                                                      FormatStatus(*status, false)));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace phalanx::elastic
