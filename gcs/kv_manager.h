// GcsKvManager: a namespaced key-value store (rendezvous, job metadata, user data). One
// table per namespace ("kv:<namespace>", a Redis hash). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/proto/gcs.pb.h"
#include "gcs/publisher.h"
#include "gcs/table.h"

namespace phalanx::gcs {

class GcsKvManager {
 public:
  GcsKvManager(Store* store, GcsPublisher* publisher);

  absl::Status Load();

  // Stores `value`; with overwrite = false an existing value is kept. Returns whether the
  // key was added (it did not exist before).
  absl::StatusOr<bool> Put(const std::string& ns, const std::string& key, std::string value,
                           bool overwrite);
  std::optional<std::string> Get(const std::string& ns, const std::string& key) const;
  // Deletes `key`, or every key starting with it when by_prefix. Returns how many went.
  absl::StatusOr<int> Delete(const std::string& ns, const std::string& key, bool by_prefix);
  std::vector<rpc::KvEntry> List(const std::string& ns, const std::string& prefix) const;

 private:
  Table<rpc::KvEntry>& TableLocked(const std::string& ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes the change `entry` describes; run once the store has it.
  std::function<void()> Publication(const rpc::KvEntry& entry);

  Store* const store_;
  GcsPublisher* const publisher_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Table<rpc::KvEntry>>> tables_
      ABSL_GUARDED_BY(mu_);
};

// Checks a namespace and key for the KV calls; the error names the field.
absl::Status ValidateKvKey(const std::string& ns, const std::string& key);

}  // namespace phalanx::gcs
