// KvStore: rendezvous keys in the GCS key-value store (namespace "collective"), under a
// prefix (group name and epoch). Gets wait (polling) until the key appears. Thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gcs/gcs_client.h"

namespace phalanx::collective {

inline constexpr char kKvNamespace[] = "collective";

class KvStore {
 public:
  KvStore(gcs::GcsClient* gcs, std::string prefix) : gcs_(gcs), prefix_(std::move(prefix)) {}

  absl::Status Set(const std::string& key, const std::string& value);
  // Waits until `key` exists (or `timeout`: DeadlineExceeded naming the key).
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout);
  // nullopt when absent.
  absl::StatusOr<std::optional<std::string>> TryGet(const std::string& key);
  // Keys (without the prefix) under prefix + `sub`.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(const std::string& sub);
  absl::Status DeletePrefix(const std::string& sub);

  const std::string& prefix() const { return prefix_; }
  gcs::GcsClient* gcs() const { return gcs_; }

 private:
  gcs::GcsClient* const gcs_;
  const std::string prefix_;
};

}  // namespace phalanx::collective
