// Table<Message>: a write-through cache of one GCS table. Every entry lives in memory; every
// change is written to the Store in the order made, except a derived field that the owner
// sets in memory alone (SetInMemory). Not thread-safe: the owning manager
// holds its lock around every call, and waits for durability (PendingWrite::Wait) after
// releasing it, before it replies or acts on the change.
//
// Acknowledged means persisted: a change's `on_persisted` (its publication) runs only once the
// store has it, and a write that failed can be undone (PendingWrite::Undo), leaving memory as
// it was unless a later write changed the key since.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gcs/store.h"

namespace phalanx::gcs {

// The outcome of one write, known once the store acknowledged it.
class PendingWrite {
 public:
  PendingWrite() = default;
  PendingWrite(std::shared_future<absl::Status> f, std::function<void()> undo)
      : future_(std::move(f)), undo_(std::move(undo)) {}
  // Blocks until the write is durable; returns its status. A default PendingWrite is OK.
  absl::Status Wait() const { return future_.valid() ? future_.get() : absl::OkStatus(); }
  // Whether the store has answered (a default PendingWrite has). Once it has, the write's
  // `on_persisted` has run.
  bool Done() const {
    return !future_.valid() ||
           future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  // After Wait() failed, with the table's owner's lock held: puts the entry back as it was
  // before this write, unless a later write changed it since.
  void Undo() const {
    if (undo_) undo_();
  }
  // Wait(), and a failed write is undone with `owner` (the lock of the table's owner) held.
  absl::Status WaitOrUndo(absl::Mutex* owner) const {
    absl::Status s = Wait();
    if (!s.ok()) {
      absl::MutexLock lock(owner);
      Undo();
    }
    return s;
  }

 private:
  std::shared_future<absl::Status> future_;
  std::function<void()> undo_;
};

// Waits for every write in `writes`; returns the first failure (all are waited for).
inline absl::Status WaitAll(const std::vector<PendingWrite>& writes) {
  absl::Status first;
  for (const auto& w : writes) {
    if (auto s = w.Wait(); !s.ok() && first.ok()) first = s;
  }
  return first;
}

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

  // Changes the entry in memory and writes it; `on_persisted` runs (on the store's thread, in
  // the order of writes) once the store has it, before Wait() returns.
  PendingWrite Put(const std::string& key, const Message& value,
                   std::function<void()> on_persisted = nullptr) {
    auto [it, inserted] = entries_.try_emplace(key);
    std::optional<Message> before;
    if (!inserted) {
      // The undo's copy of the entry: moved out, unless `value` is the entry itself.
      before = &it->second == &value ? value : std::move(it->second);
    }
    it->second = value;
    return Write(key, value.SerializeAsString(), /*put=*/true, std::move(before),
                 std::move(on_persisted));
  }

  // Changes the entry in memory only, not in the store: for a field derived from other
  // tables, which a restarted GCS computes again (a node's available resources). The next
  // Put of the key writes it with the rest. Call it only when no write of the key is in
  // flight: a failed write's undo would put back the entry from before it.
  void SetInMemory(const std::string& key, Message value) { entries_[key] = std::move(value); }
  PendingWrite Erase(const std::string& key, std::function<void()> on_persisted = nullptr) {
    std::optional<Message> before;
    if (auto it = entries_.find(key); it != entries_.end()) {
      before = std::move(it->second);
      entries_.erase(it);
    }
    return Write(key, "", /*put=*/false, std::move(before), std::move(on_persisted));
  }

  const absl::flat_hash_map<std::string, Message>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  const std::string& name() const { return name_; }

 private:
  // Issues the write, and returns it with an undo that restores the entry to `before` (as it
  // was before the write; none: absent).
  PendingWrite Write(const std::string& key, std::string bytes, bool put,
                     std::optional<Message> before, std::function<void()> on_persisted) {
    uint64_t version = ++versions_[key];
    auto promise = std::make_shared<std::promise<absl::Status>>();
    auto undo = [this, key, version, before = std::move(before)] {
      auto v = versions_.find(key);
      if (v == versions_.end() || v->second != version) return;  // changed again since
      if (before) {
        entries_[key] = *before;
      } else {
        entries_.erase(key);
      }
    };
    PendingWrite pending(promise->get_future().share(), std::move(undo));
    Store::Done done = [promise, on_persisted = std::move(on_persisted)](absl::Status s) {
      if (s.ok() && on_persisted) on_persisted();
      promise->set_value(s);
    };
    if (put) {
      store_->Put(name_, key, std::move(bytes), std::move(done));
    } else {
      store_->Delete(name_, key, std::move(done));
    }
    return pending;
  }

  Store* store_;
  std::string name_;
  absl::flat_hash_map<std::string, Message> entries_;
  absl::flat_hash_map<std::string, uint64_t> versions_;  // writes issued per key
};

}  // namespace phalanx::gcs
