#include "gcs/driver_leases.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/common/logging.h"
#include "runtime/common/system.h"

namespace phalanx::gcs {

DriverLeases::DriverLeases(DriverLeaseOptions options, Release release)
    : options_(options), release_(std::move(release)) {}

absl::Duration DriverLeases::Renew(const rpc::RenewDriverLeaseRequest& request) {
  absl::MutexLock lock(&mu_);
  if (request.release()) {
    leases_.erase(request.owner_id());
  } else {
    Lease& lease = leases_[request.owner_id()];
    lease.job_id = request.job_id();
    lease.knock_address = request.knock_address();
    lease.hostname = request.hostname();
    lease.pid = request.pid();
    lease.renewed = absl::Now();
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
