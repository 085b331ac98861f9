// JobKind: a kind of job the job manager launches other than a driver (gcs/job_manager.h).
//
// The GCS knows no kind by itself: the program that runs it (cli/gcs_main.cc) hands it the
// kinds it supports in GcsServerOptions::job_kinds. A submission names its kind
// (SubmitJobRequest.kind). The job manager then:
//
//   Prepare(request, job id) -> Launch      the kind checks the spec and says what to start
//   records launch.job, creates launch.actor (a controller that owns the job from then on)
//   RequestStop / RequestScale              the kind passes the request on to its controller
//
// The elastic training kind lives in elastic/job_kind.h.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/proto/gcs.pb.h"

namespace phalanx::gcs {

class GcsKvManager;

class JobKind {
 public:
  virtual ~JobKind() = default;

  // What a submission starts: the job's first record (state PENDING) and the actor that runs
  // the job (detached, restarted when its process dies).
  struct Launch {
    rpc::JobInfo job;
    rpc::ActorInfo actor;
  };

  // The name submissions use (SubmitJobRequest.kind).
  virtual std::string Name() const = 0;

  // Checks the submission's spec (errors name the field and the fix) and says what to start.
  // `job_id` empty: the kind picks one.
  virtual absl::StatusOr<Launch> Prepare(const rpc::SubmitJobRequest& request,
                                         const std::string& job_id) const = 0;

  // Passes a stop request on to the job's actor. The job's record says when it stopped.
  virtual absl::Status RequestStop(const rpc::JobInfo& job, GcsKvManager& kv) const = 0;

  // Passes a scale request on (ScaleJobRequest); Unimplemented for a kind that cannot scale.
  virtual absl::Status RequestScale(const rpc::JobInfo& job, const rpc::ScaleJobRequest& request,
                                    GcsKvManager& kv) const = 0;
};

}  // namespace phalanx::gcs
