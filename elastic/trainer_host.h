// TrainerHostBase: the actor that hosts a Trainer as a rank of an elastic job (internal: the
// controller calls these methods; users register with PHALANX_TRAINER). Step runs on the
// actor's default lane; the rest on lanes of their own, so that a controller can ping a rank
// or abort its collective while a step runs.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "actors/api.h"
#include "elastic/job_spec.h"
#include "elastic/snapshot_writer.h"
#include "elastic/trainer.h"

namespace phalanx::elastic {

// Phases a rank reports to Ping.
enum Phase : int { kIdle = 0, kComputing = 1, kCollective = 2 };

class TrainerHostBase {
 public:
  explicit TrainerHostBase(std::unique_ptr<Trainer> trainer) : trainer_(std::move(trainer)) {}
  virtual ~TrainerHostBase() = default;

  // Builds the trainer for job `job_id` from its spec.
  bool Setup(std::string job_id, std::string spec_yaml);
  // Runs steps `step` .. `step + count - 1` of epoch `epoch` once `agreed` steps are committed
  // everywhere; returns the last step's {loss, metrics…} and step_metric's (the steps run: fewer
  // than `count` only when a trainer-driven loop said it is done). Only the state after the
  // last step is kept: the controller agrees whole calls. The controller may send it while
  // the call before still runs (one call ahead): it waits its turn on the actor's lane, and
  // refuses to run when it no longer fits (another epoch, a failed or aborted step since the
  // last Reconfigure, another step held).
  std::map<std::string, double> Step(int64_t step, int64_t agreed, int64_t epoch, int64_t count);
  // Forms the group's epoch and rolls back to the state of `agreed` steps; returns the number
  // of steps this rank's state holds (a newcomer's may differ: SyncState fixes it).
  int64_t Reconfigure(std::string group, int64_t epoch, int rank, int world, int64_t agreed);
  // Every member calls it: `root` broadcasts its committed state; returns the steps it holds.
  int64_t SyncState(int root);
  // Writes the state of `agreed` steps to `path` and answers that step count. The controller
  // checkpoints a step every rank finished, so it is committed here first: the calls sent
  // ahead carried an older agreed step, and the committed state would lag it by them. A rank
  // that no longer holds that step's state (a trainer-driven loop that ran fewer steps) writes
  // its committed state, and the answer says which step that is. Runs on a lane of its own
  // and writes without the state lock: the steps go on while the file is written.
  int64_t SaveCheckpoint(std::string path, int64_t agreed);
  // Loads a checkpoint; returns its step count (-1: none at `path`).
  int64_t LoadCheckpoint(std::string path);
  // Loads the snapshot of step `step` of this job (node/snapshot_store.h) from the store of the
  // node at `node_address`: read in place when that is this rank's node, else streamed from
  // it. Returns its step count (-1: that node no longer holds it).
  int64_t LoadSnapshot(std::string node_address, int64_t step);
  // {straggler ranks…} then -1 then {faulty ranks…}.
  std::vector<int> NetworkCheck(double factor);
  // {phase, committed steps, step in progress}.
  std::vector<int64_t> Ping();
  bool Abort(std::string reason);
  std::string Query(std::string key);

 private:
  // The state of `agreed` steps is committed everywhere: it becomes the committed one, and
  // older finished steps are dropped (newer ones are kept: a step ahead may have run).
  void Commit(int64_t agreed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The newest step whose state this rank holds (committed, or finished and not yet).
  int64_t Held() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetCommitted(std::string state, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The dying gasp's state follows the newest one held (Held()).
  void GaspHeld() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `dump: true`: writes the committed state to checkpoint.dir and points the job at it when
  // it is newer than the job's last checkpoint (the process is dying, or warned).
  void DyingGasp(const std::string& why);

  std::unique_ptr<Trainer> trainer_;
  absl::Mutex mu_;  // the state: Step vs Reconfigure/SyncState/checkpoints
  JobSpec spec_ ABSL_GUARDED_BY(mu_);
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<collective::CollectiveGroup> group_ ABSL_GUARDED_BY(mu_);
  // group_'s rendezvous store, which the network check's lines share.
  std::shared_ptr<collective::RendezvousStore> rendezvous_ ABSL_GUARDED_BY(mu_);
  // The network checks run in epoch network_checks_epoch_ (each has its own keys).
  int network_checks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t network_checks_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const std::string> committed_ ABSL_GUARDED_BY(mu_);
  int64_t committed_step_ ABSL_GUARDED_BY(mu_) = 0;
  double network_check_skew_ ABSL_GUARDED_BY(mu_) = 0;  // trainer_query::kNetworkCheckSkew
  // Finished calls not yet known to be committed everywhere, by the step count after their
  // last step: at most two (the one the controller is looking at, and the one run ahead of
  // its answer).
  std::map<int64_t, std::shared_ptr<const std::string>> pending_ ABSL_GUARDED_BY(mu_);
  // A step failed here since the last Reconfigure: the live state may be half-updated and the
  // group broken, so no step runs until the next Reconfigure.
  bool step_failed_ ABSL_GUARDED_BY(mu_) = false;
  // Abort was called since the last Reconfigure (without mu_: a stuck step holds it).
  std::atomic<bool> aborted_{false};
  // Abort calls so far: one that comes while a Reconfigure makes its group (before the group's
  // own formation can see it) ends that Reconfigure.
  std::atomic<int64_t> aborts_{0};
  int rank_ ABSL_GUARDED_BY(mu_) = 0;
  int world_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int> phase_{kIdle};
  std::atomic<int64_t> running_step_{-1};
  // What a dying gasp writes, apart from mu_ (a running step holds that): the newest state held
  // (shared, not copied; a finished step not yet committed counts, as for kHeldStep), its
  // step, this rank, and where it goes.
  absl::Mutex gasp_mu_;
  std::shared_ptr<const std::string> gasp_state_ ABSL_GUARDED_BY(gasp_mu_);
  int64_t gasp_step_ ABSL_GUARDED_BY(gasp_mu_) = 0;
  int gasp_rank_ ABSL_GUARDED_BY(gasp_mu_) = 0;
  std::string gasp_dir_ ABSL_GUARDED_BY(gasp_mu_);
  std::string gasp_file_ ABSL_GUARDED_BY(gasp_mu_);  // "<job name>-dying-rank"
  std::string gasp_job_ ABSL_GUARDED_BY(gasp_mu_);
  // Copies each state this rank comes to hold into its node's memory and a peer's (the spec's
  // snapshot section); null when off, or when the rank runs outside a node.
  std::unique_ptr<SnapshotWriter> snapshots_ ABSL_GUARDED_BY(mu_);
  // Lets Abort reach the group without the state lock (a stuck step holds it).
  std::atomic<collective::CollectiveGroup*> live_group_{nullptr};
};

// Registers the host of a trainer class under `name` (with its methods and lanes).
void RegisterTrainerHost(const std::string& name,
                         std::function<std::unique_ptr<TrainerHostBase>()> make);

}  // namespace phalanx::elastic
