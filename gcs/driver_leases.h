// Drivers' leases: what a driver created goes with it, however it ends.
//
// A driver (a program connected with phalanx::Init or phalanx.init) kills its non-detached
// actors when it shuts down. One that is SIGKILLed, or SIGTERMed by `timeout`, `scancel` or a
// pod stop, cannot: without a lease its actors stayed ALIVE and held their resources. A driver
// renews its lease (RenewDriverLease) every renew period; one silent for the node timeout has
// the port it listens on for this knocked on, and a refused connection proves its process
// gone: its actors (cause OWNER_DIED) and its job's placement groups are released at once. A
// stopped or starved driver's port still accepts (its kernel answers), and a cut-off host's
// does not answer: those are released only after the lease timeout, so a live driver on a
// busy machine keeps what it made. A driver that shuts down ends its lease, and what it made
// is released then (its placement groups, unless detached, as Ray removes a job's).
//
// The leases are in the store too (table "driver_leases", written when a lease begins or its
// driver's address changes, not at each renewal): a GCS that restarts loads them as renewed
// at its start, so a driver that died while the GCS was down is still found gone (its port
// refuses the knock once the node timeout passed) and what it made is released.
#pragma once

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/gcs.pb.h"
#include "gcs/store.h"

namespace phalanx::gcs {

inline constexpr char kDriverLeaseTable[] = "driver_leases";

struct DriverLeaseOptions {
  // A driver silent this long has its port knocked on (the GCS's node timeout).
  absl::Duration node_timeout = absl::Seconds(3);
  // A driver silent this long is released even though its port still accepts or does not
  // answer (stopped, starved, or cut off with its host).
  absl::Duration lease_timeout = absl::Seconds(60);
  absl::Duration knock_timeout = absl::Milliseconds(200);
  // A silent driver's port is knocked on at most this often (a stopped one's answers until
  // its accept queue fills; a cut-off one's costs knock_timeout each time).
  absl::Duration knock_every = absl::Seconds(1);
};

class DriverLeases {
 public:
  // Called outside the lock for each driver found gone: its owner id, job id, and why.
  using Release = std::function<void(const std::string& owner_id, const std::string& job_id,
                                     const std::string& why)>;
  // `store` (may be null: nothing is kept) outlives this.
  DriverLeases(DriverLeaseOptions options, Release release, Store* store = nullptr);

  // The leases a previous GCS kept, as renewed now.
  absl::Status Load();

  // Renews (or ends, with `release`) a driver's lease; returns how often to renew.
  absl::Duration Renew(const rpc::RenewDriverLeaseRequest& request);
  // Knocks on the ports of drivers silent for the node timeout (up to knock_timeout) and
  // releases the ones gone, and those silent for the lease timeout.
  void Check();
  // The GCS itself was stalled for `how_long`: renewals of that time may still be queued.
  void Stalled(absl::Duration how_long);
  size_t size() const;

 private:
  struct Lease {
    std::string job_id;
    std::string knock_address;
    std::string hostname;
    int pid = 0;
    absl::Time renewed;
    absl::Time knocked = absl::InfinitePast();
  };
  // Writes or forgets the stored lease of `owner` (the write goes on after this returns).
  void Keep(const std::string& owner, const Lease& lease);
  void Forget(const std::string& owner);

  const DriverLeaseOptions options_;
  const Release release_;
  Store* const store_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);  // by owner id
};

}  // namespace phalanx::gcs
