// RecordTable<Message>: a thread-safe, published table of records keyed by id: every change
// is written through to the store and, once the store has it, published on one channel; a
// subscriber that must resync gets a snapshot of it. A change the store refused is undone in
// memory and its error returned. The actor, job and placement-group managers keep their
// records in one.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/proto/gcs.pb.h"
#include "gcs/publisher.h"
#include "gcs/table.h"

namespace phalanx::gcs {

template <typename Message>
class RecordTable {
 public:
  // Puts a record into a message's body (e.g. *m->mutable_actor() = record).
  using SetBody = void (*)(rpc::PubMessage* m, const Message& record);

  RecordTable(Store* store, GcsPublisher* publisher, std::string name, rpc::Channel channel,
              SetBody set_body)
      : publisher_(publisher), channel_(channel), set_body_(set_body), table_(store, name) {
    publisher_->SetSnapshotProvider(channel_, [this](const auto& consume) {
      absl::MutexLock lock(&mu_);
      std::vector<rpc::PubMessage> out;
      for (const auto& [key, record] : table_.entries()) out.push_back(MessageFor(key, record));
      consume(std::move(out));
    });
  }

  absl::Status Load() {
    absl::MutexLock lock(&mu_);
    return table_.Load();
  }

  // Stores and publishes `record` under `key`; returns once it is durable.
  absl::Status Put(const std::string& key, const Message& record) {
    PendingWrite write;
    {
      absl::MutexLock lock(&mu_);
      write = PutLocked(key, record);
    }
    return write.WaitOrUndo(&mu_);
  }

  // Runs `mutate` on the record under `key` (nullptr when absent) while holding the lock;
  // when it returns true the record is stored and published. Returns the store's status,
  // or NotFound when `mutate` declined a missing record.
  absl::Status Update(const std::string& key, const std::function<bool(Message*, bool)>& mutate) {
    PendingWrite write;
    {
      absl::MutexLock lock(&mu_);
      const Message* existing = table_.Find(key);
      Message record = existing ? *existing : Message();
      if (!mutate(&record, existing != nullptr)) return absl::OkStatus();
      write = PutLocked(key, record);
    }
    return write.WaitOrUndo(&mu_);
  }

  absl::Status Erase(const std::string& key) {
    PendingWrite write;
    {
      absl::MutexLock lock(&mu_);
      write = table_.Erase(key);
    }
    return write.WaitOrUndo(&mu_);
  }

  std::optional<Message> Get(const std::string& key) const {
    absl::MutexLock lock(&mu_);
    const Message* record = table_.Find(key);
    if (record == nullptr) return std::nullopt;
    return *record;
  }

  // Records for which `keep` is true (all when null).
  std::vector<Message> List(const std::function<bool(const Message&)>& keep = nullptr) const {
    absl::MutexLock lock(&mu_);
    std::vector<Message> out;
    for (const auto& [key, record] : table_.entries()) {
      if (!keep || keep(record)) out.push_back(record);
    }
    return out;
  }

 private:
  rpc::PubMessage MessageFor(const std::string& key, const Message& record) const {
    rpc::PubMessage m;
    m.set_channel(channel_);
    m.set_key(key);
    set_body_(&m, record);
    return m;
  }

  PendingWrite PutLocked(const std::string& key, const Message& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return table_.Put(key, record, [this, m = MessageFor(key, record)] { publisher_->Publish(m); });
  }

  GcsPublisher* const publisher_;
  const rpc::Channel channel_;
  const SetBody set_body_;
  mutable absl::Mutex mu_;
  Table<Message> table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::gcs
