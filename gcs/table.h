// Table<Message>: a write-through cache of one GCS table. Every entry lives in memory; every
// change is written to the Store in the order made. Not thread-safe: the owning manager
// holds its lock around every call, and waits for durability (PendingWrite::Wait) after
// releasing it.
#pragma once

#include <future>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gcs/store.h"

namespace phalanx::gcs {

// The outcome of one write, known once the store acknowledged it.
class PendingWrite {
 public:
  PendingWrite() = default;
  explicit PendingWrite(std::shared_future<absl::Status> f) : future_(std::move(f)) {}
  // Blocks until the write is durable; returns its status. A default PendingWrite is OK.
  absl::Status Wait() const { return future_.valid() ? future_.get() : absl::OkStatus(); }

 private:
  std::shared_future<absl::Status> future_;
};

template <typename Message>
class Table {
 public:
  Table(Store* store, std::string name) : store_(store), name_(std::move(name)) {}

  // Loads every entry from the store, replacing the cache.
  absl::Status Load() {
    auto all = store_->GetAll(name_);
    if (!all.ok()) return all.status();
    entries_.clear();
    for (auto& [key, bytes] : *all) {
      Message m;
      if (!m.ParseFromString(bytes)) {
        return absl::DataLossError(
            absl::StrCat("table ", name_, ": entry ", key, " in the store cannot be parsed"));
      }
      entries_.emplace(key, std::move(m));
    }
    return absl::OkStatus();
  }

  const Message* Find(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  PendingWrite Put(const std::string& key, const Message& value) {
    entries_[key] = value;
    return Write(key, value.SerializeAsString());
  }

  PendingWrite Erase(const std::string& key) {
    entries_.erase(key);
    auto promise = std::make_shared<std::promise<absl::Status>>();
    PendingWrite pending(promise->get_future().share());
    store_->Delete(name_, key, [promise](absl::Status s) { promise->set_value(s); });
    return pending;
  }

  const absl::flat_hash_map<std::string, Message>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  const std::string& name() const { return name_; }

 private:
  PendingWrite Write(const std::string& key, std::string bytes) {
    auto promise = std::make_shared<std::promise<absl::Status>>();
    PendingWrite pending(promise->get_future().share());
    store_->Put(name_, key, std::move(bytes), [promise](absl::Status s) { promise->set_value(s); });
    return pending;
  }

  Store* store_;
  std::string name_;
  absl::flat_hash_map<std::string, Message> entries_;
};

}  // namespace phalanx::gcs
