#include "collectives/kv_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phalanx::collective {

absl::Status GcsRendezvous::Put(const std::string& key, const std::string& value) {
  return gcs_->KvPut(kKvNamespace, key, value, /*overwrite=*/true).status();
}

absl::StatusOr<std::optional<std::string>> GcsRendezvous::Get(const std::string& key) {
  return gcs_->KvGet(kKvNamespace, key);
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GcsRendezvous::List(
    const std::string& prefix) {
  auto entries = gcs_->KvList(kKvNamespace, prefix);
  if (!entries.ok()) return entries.status();
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : *entries) out.emplace_back(e.key(), e.value());
  return out;
}

absl::Status GcsRendezvous::DeletePrefix(const std::string& prefix) {
  return gcs_->KvDelete(kKvNamespace, prefix, /*by_prefix=*/true).status();
}

absl::Status KvStore::Set(const std::string& key, const std::string& value) {
  return store_->Put(prefix_ + key, value);
}

absl::StatusOr<std::optional<std::string>> KvStore::TryGet(const std::string& key) {
  return store_->Get(prefix_ + key);
}

absl::StatusOr<std::string> KvStore::Get(const std::string& key, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Microseconds(500);
  while (true) {
    auto value = store_->Get(prefix_ + key);
    if (!value.ok()) return value.status();
    if (value->has_value()) return **value;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("rendezvous: '", prefix_ + key,
                                                      "' did not appear within ",
                                                      absl::FormatDuration(timeout)));
    }
    if (cancelled_ && cancelled_()) {
      return absl::AbortedError(absl::StrCat("rendezvous: stopped waiting for '", prefix_ + key,
                                             "': the group was aborted while it formed"));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(2));
  }
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KvStore::List(
    const std::string& sub) {
  auto entries = store_->List(prefix_ + sub);
  if (!entries.ok()) return entries.status();
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [key, value] : *entries) {
    if (key.size() >= prefix_.size())
      out.emplace_back(key.substr(prefix_.size()), std::move(value));
  }
  return out;
}

absl::Status KvStore::DeletePrefix(const std::string& sub) {
  return store_->DeletePrefix(prefix_ + sub);
}

}  // namespace phalanx::collective
