#include "gcs/store.h"

#include <future>
#include <map>

#include "absl/synchronization/mutex.h"

namespace phalanx::gcs {

absl::Status Store::PutSync(const std::string& table, const std::string& key, std::string value) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  auto future = promise->get_future();
  Put(table, key, std::move(value), [promise](absl::Status s) { promise->set_value(s); });
  return future.get();
}

absl::Status Store::DeleteSync(const std::string& table, const std::string& key) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  auto future = promise->get_future();
  Delete(table, key, [promise](absl::Status s) { promise->set_value(s); });
  return future.get();
}

namespace {

class InMemoryStore : public Store {
 public:
  void Put(const std::string& table, const std::string& key, std::string value,
           Done done) override {
    {
      absl::MutexLock lock(&mu_);
      tables_[table][key] = std::move(value);
    }
    if (done) done(absl::OkStatus());
  }

  void Delete(const std::string& table, const std::string& key, Done done) override {
    {
      absl::MutexLock lock(&mu_);
      auto it = tables_.find(table);
      if (it != tables_.end()) {
        it->second.erase(key);
        if (it->second.empty()) tables_.erase(it);
      }
    }
    if (done) done(absl::OkStatus());
  }

  absl::StatusOr<std::optional<std::string>> Get(const std::string& table,
                                                 const std::string& key) override {
    absl::MutexLock lock(&mu_);
    auto t = tables_.find(table);
    if (t == tables_.end()) return std::nullopt;
    auto it = t->second.find(key);
    if (it == t->second.end()) return std::nullopt;
    return it->second;
  }

  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GetAll(
      const std::string& table) override {
    absl::MutexLock lock(&mu_);
    std::vector<std::pair<std::string, std::string>> out;
    auto t = tables_.find(table);
    if (t != tables_.end()) out.assign(t->second.begin(), t->second.end());
    return out;
  }

  absl::StatusOr<std::vector<std::string>> ListTables(const std::string& prefix) override {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& [name, entries] : tables_) {
      if (name.rfind(prefix, 0) == 0) out.push_back(name);
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Store> NewInMemoryStore() { return std::make_unique<InMemoryStore>(); }

namespace {

class TimedStore final : public ForwardingStore {
 public:
  TimedStore(std::unique_ptr<Store> inner, StoreMetrics* metrics)
      : ForwardingStore(std::move(inner)), metrics_(metrics) {}

  void Put(const std::string& table, const std::string& key, std::string value,
           Done done) override {
    inner()->Put(table, key, std::move(value), Timed(std::move(done)));
  }
  void Delete(const std::string& table, const std::string& key, Done done) override {
    inner()->Delete(table, key, Timed(std::move(done)));
  }

 private:
  Done Timed(Done done) {
    return [metrics = metrics_, start = absl::Now(), done = std::move(done)](absl::Status s) {
      metrics->write_latency.Observe(absl::Now() - start);
      if (!s.ok()) metrics->write_errors.fetch_add(1, std::memory_order_relaxed);
      if (done) done(std::move(s));
    };
  }

  StoreMetrics* const metrics_;
};

}  // namespace

std::unique_ptr<Store> NewTimedStore(std::unique_ptr<Store> store, StoreMetrics* metrics) {
  return std::make_unique<TimedStore>(std::move(store), metrics);
}

}  // namespace phalanx::gcs
