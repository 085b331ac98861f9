// The GCS's durable storage: named tables of key → bytes. Two implementations: RedisStore
// (one Redis hash per table, the real one) and InMemoryStore (unit tests of the table
// managers only).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::gcs {

// Thread-safe. Writes are applied in the order they are issued, whichever thread issues them.
class Store {
 public:
  // Called once the write is durable in the store (or failed), possibly on another thread;
  // callbacks run in the order the writes were issued.
  using Done = std::function<void(absl::Status)>;

  virtual ~Store() = default;

  virtual void Put(const std::string& table, const std::string& key, std::string value,
                   Done done) = 0;
  virtual void Delete(const std::string& table, const std::string& key, Done done) = 0;

  // Reads go straight to the store (the GCS reads at start-up; it serves reads from memory).
  virtual absl::StatusOr<std::optional<std::string>> Get(const std::string& table,
                                                         const std::string& key) = 0;
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GetAll(
      const std::string& table) = 0;
  // Names of the non-empty tables whose name starts with `prefix`.
  virtual absl::StatusOr<std::vector<std::string>> ListTables(const std::string& prefix) = 0;

  // Writes the store refused or gave up on since it started (each one was logged with its
  // table and key, and its caller got the error).
  virtual int64_t FailedWrites() const { return 0; }
  // Writes issued and not yet sent to the store.
  virtual int64_t QueuedWrites() { return 0; }

  // Stops taking new work once the queued writes are done or `timeout` passed; writes still
  // queued then fail at once (counted in FailedWrites). The GCS's shutdown bound.
  virtual void Close(absl::Duration /*timeout*/) {}

  // Blocking forms of Put and Delete.
  absl::Status PutSync(const std::string& table, const std::string& key, std::string value);
  absl::Status DeleteSync(const std::string& table, const std::string& key);
};

// Keeps everything in process memory; writes complete at once, on the caller's thread.
std::unique_ptr<Store> NewInMemoryStore();

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;    // empty: no AUTH
  std::string cluster_id;  // tables live in hashes named "phx:<cluster_id>:<table>"
  absl::Duration connect_timeout = absl::Seconds(5);
  // At the GCS's start: how long an unreachable Redis (still starting, or loading its AOF)
  // is tried again before the GCS gives up.
  absl::Duration startup_timeout = absl::Seconds(10);
  // How long a write keeps retrying while Redis is unreachable before it fails.
  absl::Duration write_retry_timeout = absl::Seconds(60);
  // At shutdown: how long queued writes still have to reach Redis before they fail.
  absl::Duration shutdown_timeout = absl::Seconds(4);
};

// Connects to Redis (checks AUTH and PING) and returns a store, or an error that says what
// failed: unreachable address, wrong password.
absl::StatusOr<std::unique_ptr<Store>> ConnectRedisStore(const RedisOptions& options);

}  // namespace phalanx::gcs
