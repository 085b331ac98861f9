// The elastic training job kind (gcs/job_kind.h), run by the GCS: `phalanx job submit -f
// JOB.yaml`, elastic::Submit and phalanx.train all submit through it. It checks the spec and
// starts the job's ElasticController actor; stop and scale requests reach the controller
// through the KV (elastic/job_keys.h).
#pragma once

#include <string>
#include <vector>

#include "gcs/job_kind.h"

namespace phalanx::elastic {

class ElasticJobKind final : public gcs::JobKind {
 public:
  std::string Name() const override { return "elastic"; }
  absl::StatusOr<Launch> Prepare(const rpc::SubmitJobRequest& request,
                                 const std::string& job_id) const override;
  absl::Status RequestStop(const rpc::JobInfo& job, gcs::GcsKvManager& kv) const override;
  absl::Status RequestScale(const rpc::JobInfo& job, const rpc::ScaleJobRequest& request,
                            gcs::GcsKvManager& kv) const override;
};

}  // namespace phalanx::elastic
