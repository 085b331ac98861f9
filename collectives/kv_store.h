// KvStore: a group's rendezvous keys in its RendezvousStore (collective_group.h), under a
// prefix (group name and epoch). Gets wait (polling) until the key appears. Thread-safe.
// GcsRendezvous: the GCS's key-value store (namespace "collective") as a RendezvousStore.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/gcs_client.h"
#include "collectives/collective_group.h"

namespace phalanx::collective {

inline constexpr char kKvNamespace[] = "collective";

class GcsRendezvous final : public RendezvousStore {
 public:
  explicit GcsRendezvous(std::unique_ptr<gcs::GcsClient> gcs) : gcs_(std::move(gcs)) {}
  absl::Status Put(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(
      const std::string& prefix) override;
  absl::Status DeletePrefix(const std::string& prefix) override;

 private:
  const std::unique_ptr<gcs::GcsClient> gcs_;
};

class KvStore {
 public:
  // `cancelled`, when given, is asked at each poll of a Get: once it says true, the Get gives
  // up (Aborted). A group aborted while it forms so stops waiting for a member that is gone.
  KvStore(RendezvousStore* store, std::string prefix, std::function<bool()> cancelled = nullptr)
      : store_(store), prefix_(std::move(prefix)), cancelled_(std::move(cancelled)) {}

  absl::Status Set(const std::string& key, const std::string& value);
  // Waits until `key` exists (or `timeout`: DeadlineExceeded naming the key; or cancelled:
  // Aborted naming it).
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout);
  // nullopt when absent.
  absl::StatusOr<std::optional<std::string>> TryGet(const std::string& key);
  // Keys (without the prefix) under prefix + `sub`.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(const std::string& sub);
  absl::Status DeletePrefix(const std::string& sub);

  // The keys under prefix + `sub`, with this store's cancel check.
  KvStore Child(const std::string& sub) const { return KvStore(store_, prefix_ + sub, cancelled_); }

  const std::string& prefix() const { return prefix_; }

 private:
  RendezvousStore* const store_;
  const std::string prefix_;
  const std::function<bool()> cancelled_;
};

}  // namespace phalanx::collective
