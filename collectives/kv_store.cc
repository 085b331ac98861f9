#include "collectives/kv_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phalanx::collective {

absl::Status KvStore::Set(const std::string& key, const std::string& value) {
  return gcs_->KvPut(kKvNamespace, prefix_ + key, value, /*overwrite=*/true).status();
}

absl::StatusOr<std::optional<std::string>> KvStore::TryGet(const std::string& key) {
  return gcs_->KvGet(kKvNamespace, prefix_ + key);
}

absl::StatusOr<std::string> KvStore::Get(const std::string& key, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Microseconds(500);
  while (true) {
    auto value = gcs_->KvGet(kKvNamespace, prefix_ + key);
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
  auto entries = gcs_->KvList(kKvNamespace, prefix_ + sub);
  if (!entries.ok()) return entries.status();
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : *entries) out.emplace_back(e.key().substr(prefix_.size()), e.value());
  return out;
}

absl::Status KvStore::DeletePrefix(const std::string& sub) {
  return gcs_->KvDelete(kKvNamespace, prefix_ + sub, /*by_prefix=*/true).status();
}

}  // namespace phalanx::collective
