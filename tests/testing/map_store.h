// MapStore: a caller's own rendezvous store for collective groups, a map in this process
// (what a launcher's store or a shared file system would be to a group). Thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "collectives/collective_group.h"

namespace phalanx::testing {

class MapStore final : public collective::RendezvousStore {
 public:
  absl::Status Put(const std::string& key, const std::string& value) override {
    absl::MutexLock lock(&mu_);
    map_[key] = value;
    ++puts_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) override {
    absl::MutexLock lock(&mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(
      const std::string& prefix) override {
    absl::MutexLock lock(&mu_);
    std::vector<std::pair<std::string, std::string>> out;
    for (auto it = map_.lower_bound(prefix); it != map_.end() && it->first.rfind(prefix, 0) == 0;
         ++it) {
      out.emplace_back(it->first, it->second);
    }
    return out;
  }
  absl::Status DeletePrefix(const std::string& prefix) override {
    absl::MutexLock lock(&mu_);
    for (auto it = map_.lower_bound(prefix); it != map_.end() && it->first.rfind(prefix, 0) == 0;) {
      it = map_.erase(it);
    }
    return absl::OkStatus();
  }
  int puts() {
    absl::MutexLock lock(&mu_);
    return puts_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
  int puts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace phalanx::testing
