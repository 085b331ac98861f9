// An elastic job's protocol in the GCS KV (namespace "elastic"): the one place its keys and
// values are spelled. Writers: the job kind in the GCS (scale and stop requests), the
// controller and a dying rank (the checkpoint pointer). Reader of all three: the controller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace phalanx::elastic::keys {

inline constexpr char kNamespace[] = "elastic";

// "<job>/scale": "<request id>:<replicas>[:<rank>,<rank>…[:=<node>,<node>…]]" (a new id
// per request, so the same size asked twice is two requests; "=" and the nodes, possibly
// none, set the nodes the ranks may use); parsed by ParseScaleRequest (policy.h).
std::string Scale(const std::string& job_id);
std::string ScaleValue(int replicas, const std::vector<int>& leaving_ranks,
                       const std::optional<std::vector<std::string>>& nodes = std::nullopt);

// "<job>/stop": exists once a stop was asked.
std::string Stop(const std::string& job_id);

// "<job>/checkpoint": the newest saved state, step and path in one value, so that a reader
// never pairs one writer's path with another's step.
std::string Checkpoint(const std::string& job_id);

struct CheckpointPointer {
  int64_t step = 0;
  std::string path;
};
std::string Encode(const CheckpointPointer& pointer);  // "<step> <path>"
// Nullopt when `value` is not a pointer Encode wrote.
std::optional<CheckpointPointer> DecodeCheckpoint(absl::string_view value);

}  // namespace phalanx::elastic::keys
