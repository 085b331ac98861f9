#include "gcs/driver_leases.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "base/system.h"

namespace phalanx::gcs {

DriverLeases::DriverLeases(DriverLeaseOptions options, Release release, Store* store)
    : options_(options), release_(std::move(release)), store_(store) {}

absl::Status DriverLeases::Load() {
  if (store_ == nullptr) return absl::OkStatus();
  auto rows = store_->GetAll(kDriverLeaseTable);
  if (!rows.ok()) return rows.status();
  absl::MutexLock lock(&mu_);
  absl::Time now = absl::Now();
  for (const auto& [owner, value] : *rows) {
    rpc::RenewDriverLeaseRequest r;
    if (!r.ParseFromString(value)) {
      spdlog::warn("driver lease {}: unreadable record; dropped", owner);
      continue;
    }
    Lease& lease = leases_[owner];
    lease.job_id = r.job_id();
    lease.knock_address = r.knock_address();
    lease.hostname = r.hostname();
    lease.pid = r.pid();
    lease.renewed = now;
  }
  if (!rows->empty()) spdlog::info("loaded {} driver lease(s)", rows->size());
  return absl::OkStatus();
}

void DriverLeases::Keep(const std::string& owner, const Lease& lease) {
  if (store_ == nullptr) return;
  rpc::RenewDriverLeaseRequest r;
  r.set_owner_id(owner);
  r.set_job_id(lease.job_id);
  r.set_knock_address(lease.knock_address);
  r.set_hostname(lease.hostname);
  r.set_pid(lease.pid);
  store_->Put(kDriverLeaseTable, owner, r.SerializeAsString(), [owner](absl::Status s) {
    if (!s.ok()) spdlog::warn("driver lease {}: not stored: {}", owner, s);
  });
}

void DriverLeases::Forget(const std::string& owner) {
  if (store_ == nullptr) return;
  store_->Delete(kDriverLeaseTable, owner, [](absl::Status) {});
}

absl::Duration DriverLeases::Renew(const rpc::RenewDriverLeaseRequest& request) {
  if (request.release()) {
    // A driver that ends (shutdown, or its exit) leaves what a gone one leaves: its
    // actors, already killed by itself, and its job's placement groups unless detached.
    std::string job_id;
    {
      absl::MutexLock lock(&mu_);
      auto it = leases_.find(request.owner_id());
      if (it == leases_.end()) return options_.node_timeout / 4;
      job_id = it->second.job_id;
      leases_.erase(it);
      Forget(request.owner_id());
    }
    release_(request.owner_id(), job_id, "it ended");
    return options_.node_timeout / 4;
  }
  absl::MutexLock lock(&mu_);
  {
    auto [it, fresh] = leases_.try_emplace(request.owner_id());
    Lease& lease = it->second;
    bool changed = fresh || lease.job_id != request.job_id() ||
                   lease.knock_address != request.knock_address() || lease.pid != request.pid() ||
                   lease.hostname != request.hostname();
    lease.job_id = request.job_id();
    lease.knock_address = request.knock_address();
    lease.hostname = request.hostname();
    lease.pid = request.pid();
    lease.renewed = absl::Now();
    if (changed) Keep(request.owner_id(), lease);
  }
  return options_.node_timeout / 4;
}

void DriverLeases::Check() {
  struct Silent {
    std::string owner;
    Lease lease;
  };
  std::vector<Silent> silent;
  absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    for (auto& [owner, lease] : leases_) {
      if (now - lease.renewed <= options_.node_timeout) continue;
      if (now - lease.knocked < options_.knock_every &&
          now - lease.renewed <= options_.lease_timeout) {
        continue;  // knocked on lately: again later (the lease timeout is checked regardless)
      }
      lease.knocked = now;
      silent.push_back({owner, lease});
    }
  }
  if (silent.empty()) return;
  std::vector<std::string> addresses;
  std::vector<size_t> knocked;  // indices into silent
  for (size_t i = 0; i < silent.size(); ++i) {
    if (!silent[i].lease.knock_address.empty()) {
      addresses.push_back(silent[i].lease.knock_address);
      knocked.push_back(i);
    }
  }
  std::vector<Knock> answers;
  if (!addresses.empty()) answers = KnockTcp(addresses, options_.knock_timeout);
  std::vector<Knock> knock_of(silent.size(), Knock::kSilent);
  for (size_t k = 0; k < knocked.size(); ++k) knock_of[knocked[k]] = answers[k];
  std::vector<std::pair<Silent, std::string>> gone;
  {
    absl::MutexLock lock(&mu_);
    now = absl::Now();
    for (size_t i = 0; i < silent.size(); ++i) {
      auto it = leases_.find(silent[i].owner);
      // Renewed meanwhile (or released): it lives.
      if (it == leases_.end() || it->second.renewed != silent[i].lease.renewed) continue;
      const Lease& lease = it->second;
      std::string who = absl::StrCat("its driver (pid ", lease.pid, " on ", lease.hostname, ")");
      std::string quiet = absl::StrFormat("no lease renewal for %.1f s",
                                          absl::ToDoubleSeconds(now - lease.renewed));
      std::string why;
      if (knock_of[i] == Knock::kRefused) {
        why = absl::StrCat(who, " exited: ", quiet, ", and its port refuses connections");
      } else if (now - lease.renewed > options_.lease_timeout) {
        why = absl::StrCat(who, " is gone or cut off: ", quiet, " (the driver lease timeout is ",
                           absl::FormatDuration(options_.lease_timeout), ")");
      } else {
        continue;  // stopped, starved or cut off for now: the lease timeout decides
      }
      gone.push_back({silent[i], why});
      leases_.erase(it);
      Forget(silent[i].owner);
    }
  }
  for (const auto& [s, why] : gone) {
    spdlog::warn("driver {} of job {}: {}; releasing its actors and placement groups", s.owner,
                 s.lease.job_id, why);
    release_(s.owner, s.lease.job_id, why);
  }
}

void DriverLeases::Stalled(absl::Duration how_long) {
  absl::MutexLock lock(&mu_);
  for (auto& [owner, lease] : leases_) lease.renewed += how_long;
}

size_t DriverLeases::size() const {
  absl::MutexLock lock(&mu_);
  return leases_.size();
}

}  // namespace phalanx::gcs
