#include "elastic/job_keys.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ids.h"

namespace phalanx::elastic::keys {

std::string Scale(const std::string& job_id) { return absl::StrCat(job_id, "/scale"); }

std::string ScaleValue(int replicas, const std::vector<int>& leaving_ranks,
                       const std::optional<std::vector<std::string>>& nodes) {
  std::string value =
      absl::StrCat(RandomHex(4), ":", replicas, ":", absl::StrJoin(leaving_ranks, ","));
  if (nodes) absl::StrAppend(&value, ":=", absl::StrJoin(*nodes, ","));
  return value;
}

std::string Stop(const std::string& job_id) { return absl::StrCat(job_id, "/stop"); }

std::string Checkpoint(const std::string& job_id) { return absl::StrCat(job_id, "/checkpoint"); }

std::string Encode(const CheckpointPointer& pointer) {
  return absl::StrCat(pointer.step, " ", pointer.path);
}

std::optional<CheckpointPointer> DecodeCheckpoint(absl::string_view value) {
  size_t space = value.find(' ');
  CheckpointPointer pointer;
  if (space == absl::string_view::npos || space + 1 >= value.size() ||
      !absl::SimpleAtoi(value.substr(0, space), &pointer.step) || pointer.step < 0) {
    return std::nullopt;
  }
  pointer.path = std::string(value.substr(space + 1));
  return pointer;
}

}  // namespace phalanx::elastic::keys
