#include "gcs/kv_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/logging.h"

namespace phalanx::gcs {
namespace {
constexpr char kTablePrefix[] = "kv:";
}

absl::Status ValidateKvKey(const std::string& ns, const std::string& key) {
  if (ns.empty()) return absl::InvalidArgumentError("KV: namespace is empty; name one");
  if (ns.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV: namespace '", ns, "' contains ':'; use another separator"));
  }
  if (key.empty()) return absl::InvalidArgumentError("KV: key is empty");
  return absl::OkStatus();
}

GcsKvManager::GcsKvManager(Store* store, GcsPublisher* publisher)
    : store_(store), publisher_(publisher) {
  publisher_->SetSnapshotProvider(rpc::KV, [this](const auto& consume) {
    absl::MutexLock lock(&mu_);
    std::vector<rpc::PubMessage> out;
    for (const auto& [ns, table] : tables_) {
      for (const auto& [key, entry] : table->entries()) {
        rpc::PubMessage m;
        m.set_key(absl::StrCat(ns, "/", key));
        *m.mutable_kv() = entry;
        out.push_back(std::move(m));
      }
    }
    consume(std::move(out));
  });
}

absl::Status GcsKvManager::Load() {
  auto names = store_->ListTables(kTablePrefix);
  if (!names.ok()) return names.status();
  absl::MutexLock lock(&mu_);
  tables_.clear();
  size_t total = 0;
  for (const auto& name : *names) {
    std::string ns = name.substr(sizeof(kTablePrefix) - 1);
    auto& table = TableLocked(ns);
    if (auto s = table.Load(); !s.ok()) return s;
    total += table.size();
  }
  spdlog::info("loaded {} KV entries in {} namespaces", total, tables_.size());
  return absl::OkStatus();
}

Table<rpc::KvEntry>& GcsKvManager::TableLocked(const std::string& ns) {
  auto& slot = tables_[ns];
  if (!slot) slot = std::make_unique<Table<rpc::KvEntry>>(store_, kTablePrefix + ns);
  return *slot;
}

std::function<void()> GcsKvManager::Publication(const rpc::KvEntry& entry) {
  rpc::PubMessage m;
  m.set_channel(rpc::KV);
  m.set_key(absl::StrCat(entry.namespace_(), "/", entry.key()));
  *m.mutable_kv() = entry;
  return [this, m = std::move(m)] { publisher_->Publish(m); };
}

absl::StatusOr<bool> GcsKvManager::Put(const std::string& ns, const std::string& key,
                                       std::string value, bool overwrite) {
  if (auto s = ValidateKvKey(ns, key); !s.ok()) return s;
  PendingWrite write;
  bool added;
  {
    absl::MutexLock lock(&mu_);
    auto& table = TableLocked(ns);
    added = table.Find(key) == nullptr;
    if (!added && !overwrite) return false;
    rpc::KvEntry entry;
    entry.set_namespace_(ns);
    entry.set_key(key);
    entry.set_value(std::move(value));
    write = table.Put(key, entry, Publication(entry));
  }
  if (auto s = write.WaitOrUndo(&mu_); !s.ok()) return s;
  return added;
}

std::optional<std::string> GcsKvManager::Get(const std::string& ns, const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto t = tables_.find(ns);
  if (t == tables_.end()) return std::nullopt;
  const rpc::KvEntry* entry = t->second->Find(key);
  if (entry == nullptr) return std::nullopt;
  return entry->value();
}

absl::StatusOr<int> GcsKvManager::Delete(const std::string& ns, const std::string& key,
                                         bool by_prefix) {
  if (ns.empty()) return absl::InvalidArgumentError("KV: namespace is empty; name one");
  if (key.empty() && !by_prefix) return absl::InvalidArgumentError("KV: key is empty");
  std::vector<PendingWrite> writes;
  {
    absl::MutexLock lock(&mu_);
    auto t = tables_.find(ns);
    if (t == tables_.end()) return 0;
    std::vector<std::string> doomed;
    if (by_prefix) {
      for (const auto& [k, e] : t->second->entries()) {
        if (k.rfind(key, 0) == 0) doomed.push_back(k);
      }
    } else if (t->second->Find(key) != nullptr) {
      doomed.push_back(key);
    }
    for (const auto& k : doomed) {
      rpc::KvEntry gone;
      gone.set_namespace_(ns);
      gone.set_key(k);
      gone.set_deleted(true);
      writes.push_back(t->second->Erase(k, Publication(gone)));
    }
  }
  if (auto s = WaitAll(writes); !s.ok()) {
    absl::MutexLock lock(&mu_);
    for (const auto& w : writes) {
      if (!w.Wait().ok()) w.Undo();  // the deletions the store refused
    }
    return s;
  }
  return static_cast<int>(writes.size());
}

std::vector<rpc::KvEntry> GcsKvManager::List(const std::string& ns,
                                             const std::string& prefix) const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::KvEntry> out;
  auto t = tables_.find(ns);
  if (t == tables_.end()) return out;
  for (const auto& [k, e] : t->second->entries()) {
    if (k.rfind(prefix, 0) == 0) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key() < b.key(); });
  return out;
}

}  // namespace phalanx::gcs
