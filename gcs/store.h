// The GCS's durable storage: named tables of key → bytes. Two implementations: RedisStore
// (one Redis hash per table, the real one) and InMemoryStore (unit tests of the table
// managers only).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/metrics.h"

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

// Passes every call to `inner`: the base of a store that changes some of them (the timed
// store below times the writes; a test's store holds them back).
class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}
  void Put(const std::string& table, const std::string& key, std::string value,
           Done done) override {
    inner_->Put(table, key, std::move(value), std::move(done));
  }
  void Delete(const std::string& table, const std::string& key, Done done) override {
    inner_->Delete(table, key, std::move(done));
  }
  absl::StatusOr<std::optional<std::string>> Get(const std::string& table,
                                                 const std::string& key) override {
    return inner_->Get(table, key);
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GetAll(
      const std::string& table) override {
    return inner_->GetAll(table);
  }
  absl::StatusOr<std::vector<std::string>> ListTables(const std::string& prefix) override {
    return inner_->ListTables(prefix);
  }
  int64_t FailedWrites() const override { return inner_->FailedWrites(); }
  int64_t QueuedWrites() override { return inner_->QueuedWrites(); }
  void Close(absl::Duration timeout) override { inner_->Close(timeout); }

 protected:
  Store* inner() const { return inner_.get(); }

 private:
  std::unique_ptr<Store> inner_;
};

// Keeps everything in process memory; writes complete at once, on the caller's thread.
std::unique_ptr<Store> NewInMemoryStore();

// What the GCS's /metrics says about its writes to the store.
struct StoreMetrics {
  metrics::Histogram write_latency{metrics::LatencyBuckets()};  // issued → durable (or failed)
  std::atomic<int64_t> write_errors{0};
};

// `store`, with each write's latency and failure counted in `metrics` (which must outlive
// it).
std::unique_ptr<Store> NewTimedStore(std::unique_ptr<Store> store, StoreMetrics* metrics);

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

  // Sentinel mode (`sentinels` not empty; host and port are then unused). The primary of
  // `master_name` is asked of the sentinels, each in turn, and must answer ROLE as master.
  // When the connection breaks or Redis answers READONLY or LOADING, the store asks again and
  // sends the unfinished writes to the new primary, in order (every write is idempotent).
  //
  // A write is acknowledged once the primary has it and WAIT says a replica has it too, or
  // when the sentinels know no replica that a failover could promote (then there is nothing
  // to fail over to; the store logs that writes have one copy, and waits for a replica again
  // as soon as the primary has one). So a failover never loses an acknowledged write.
  std::vector<std::pair<std::string, int>> sentinels = {};  // (host, port)
  std::string master_name = "";                             // as in `sentinel monitor NAME ...`
  std::string sentinel_password = "";                       // empty: the sentinels need no AUTH
  // How long writes wait while there is no primary (a failover under way, or a replica
  // that does not acknowledge) before they fail with an error naming the sentinels and the
  // master. Used instead of write_retry_timeout in sentinel mode.
  absl::Duration failover_timeout = absl::Seconds(30);
  // How long one batch of writes waits for a replica's acknowledgement (WAIT) before the
  // store asks the sentinels whether a failover could promote a replica without it.
  absl::Duration replica_ack_timeout = absl::Seconds(1);
};

// Parses a sentinel list "HOST:PORT[,HOST:PORT...]"; an error names `flag` and the fix.
absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseSentinels(const std::string& list,
                                                                        const std::string& flag);

// Connects to Redis (checks AUTH and PING; in sentinel mode finds the primary first) and
// returns a store, or an error that says what failed: unreachable address, wrong password,
// no primary known to the sentinels.
absl::StatusOr<std::unique_ptr<Store>> ConnectRedisStore(const RedisOptions& options);

}  // namespace phalanx::gcs
