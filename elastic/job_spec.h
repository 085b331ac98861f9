// The elastic training job spec: a YAML file (or the same struct in C++), with the fields
// users of Kubernetes training operators know.
//
//   name: regression
//   trainer: RegressionTrainer          # a class registered with PHALANX_TRAINER
//   codePath: /opt/app/regression       # the program that registers it (default: submitter)
//   replicas: 3                          # ranks at start
//   minReplicas: 1                       # below this the job waits for replacements, then fails
//   maxReplicas: 4                       # grows toward this when resources appear
//   resources: {CPU: 1, memory: 1Gi}     # per rank
//   data: {numSamples: 4096, globalBatch: 64, seed: 7}
//   steps: 300                           # or dataEpochs: 5
//   preimports: [torch]                  # language python: modules the node's prestarted
//                                        # workers import ahead, so a replacement is warm
//   faultTolerantPolicy:
//     - exitCodes: "129,101"             # EXITED(code), or 128+signal for SIGNALED
//       action: restart                  # restart | reschedule | respawnLarger | shrink | failJob
//     - event: oom                       # oom | nodeDied | straggler | hang | exited
//       action: respawnLarger
//       memoryGrowth: 2                  # defaults follow DLRover: ×2, ≤ +8Gi a step, ≤ 64Gi
//       maxMemoryStep: 8Gi
//       memoryCap: 64Gi
//   restartLimit: 10                     # respawns allowed within restartTimeLimit seconds
//   restartTimeLimit: 3600
//   failPolicy: {belowMinTimeoutSeconds: 60}
//   checkpoint: {dir: /tmp/ckpt, intervalSteps: 50, atEnd: true, numToKeep: 3}
//                                        # atEnd: the final state too; intervalSteps: auto
//                                        # (Young/Daly from the save time and fault rate)
//   snapshot: {enabled: true, peerCopy: true, peerMBps: 200}   # each rank's newest state in its
//                                        # node's memory and a copy on a peer node: a job that
//                                        # loses every rank restores from there, not from disk
//   straggler: {check: true, factor: 2.0}   # network check at start and each membership change
//   hang: {timeoutSeconds: 120, controllerLeaseSeconds: 10, silentSeconds: 1}
//                                          # no step for this long, or silent on a live host
//                                        # the stuck rank; a controller silent for the lease
//                                        # is replaced (default: half the timeout, ≤ 10 s,
//                                        # ≤ 1.5 × silentSeconds when that is on: 1.5 s)
//   scaleOutDebounceSeconds: 2           # growth waits this long after a node joins; the
//                                        # first epoch, this long past minReplicas ready
//                                        # for the other placed ranks (torchrun's last call)
//   stepCallMs: 50                       # each call to a rank covers this much training
//                                        # (several short steps; 0: one step per call)
//   config: {lr: "0.05"}                 # passed to the trainer's Setup
//
// A malformed spec is refused before anything starts, with the field, the value and the fix.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace phalanx::elastic {

enum class Action { kRestart, kReschedule, kRespawnLarger, kShrink, kFailJob };
const char* ActionName(Action action);

struct FaultPolicy {
  std::vector<int> exit_codes;  // matched against EXITED(code) and 128 + signal
  std::string event;            // "", "oom", "nodeDied", "straggler", "hang", "exited"
  Action action = Action::kRestart;
  double memory_growth = 2.0;
  int64_t max_memory_step = 8ll << 30;
  int64_t memory_cap = 64ll << 30;
  // MindCluster's dump: a rank that is dying but can still run (SIGTERM, or its node warns
  // that it nears its memory limit) first writes its committed state to checkpoint.dir, so a
  // job that loses every rank resumes from there rather than from an older checkpoint.
  bool dump = false;
};

// The most steps one call to a rank covers (JobSpec::step_call_ms): each rank keeps the state
// of its last two calls' ends, whatever their length, so this bounds only how long a
// membership change may wait for the call in flight, and the work a failed call throws away.
inline constexpr int64_t kMaxStepsPerCall = 16;

// checkpoint.intervalSteps: auto.
inline constexpr int64_t kAutoCheckpointInterval = -1;

struct JobSpec {
  std::string name;
  std::string trainer;
  std::string code_path;
  // "cpp": the trainer is a C++ class in code_path, stepped by the controller over the spec's
  // data. "python": a phalanx.train loop (trainer PythonTrainer) that runs until it returns,
  // with its own data; steps are its state.commit() calls.
  std::string language = "cpp";
  // Python: modules every rank's worker imports before it takes its rank; the nodes keep
  // prestarted workers that have imported them (base/worker_env.h), so a replacement
  // rank starts without paying for them.
  std::vector<std::string> preimports;
  int replicas = 1;
  int min_replicas = 1;
  int max_replicas = 1;
  std::map<std::string, double> resources;
  std::vector<FaultPolicy> policies;  // the user's, then the defaults (first match wins)
  int restart_limit = 10;
  double restart_time_limit_s = 3600;
  // How long the job may stay below min_replicas (or not reach it at start) for want of
  // room; ranks placed on a node and still setting up keep it waiting past this, each bounded
  // by start_timeout_s (phases.startSeconds).
  double below_min_timeout_s = 60;
  std::string checkpoint_dir;
  // Steps between checkpoints; 0: none; kAutoCheckpointInterval (`intervalSteps: auto`): the
  // controller picks the interval from the measured save time and the job's fault rate
  // (Young/Daly). Checkpoints are written by rank 0 in the background (the steps go on).
  int64_t checkpoint_interval = 0;
  int checkpoint_keep = 0;         // checkpoint.numToKeep: the newest files kept (0: all)
  bool checkpoint_at_end = false;  // also the final state, when the loop or the steps end
  // Snapshots (node/snapshot_store.h): each rank's newest state is copied, off the step's path,
  // into its node's shared-memory store and (peerCopy) into a peer node's, at most peerMBps
  // megabytes a second; a job that loses every rank restores the newest one from there.
  bool snapshot_enabled = true;
  bool snapshot_peer_copy = true;
  double snapshot_peer_mbps = 200;
  bool straggler_check = false;
  double straggler_factor = 2.0;
  double hang_timeout_s = 300;
  // The controller renews a lease through the GCS at least this often; once it runs out the
  // GCS asks the controller's node about its process: a stopped one (SIGSTOP) is killed and
  // started again, and the new one adopts the live ranks; one that can run (slow on a busy
  // machine, or deadlocked) is killed only after hang_timeout_s without a renewal. A cut-off
  // controller waits for its node's verdict. 0: half the hang timeout, at most 10 s, and at
  // most 1.5 × hang_silent_s (but not under 1 s) while the liveness probe is on: 1.5 s by
  // default, about when a stopped rank is found.
  double controller_lease_s = 0;
  // A rank that has not answered the controller's probe (a Ping, answered on a lane of its own
  // in milliseconds by any live process) for this long while its host is up (its node
  // manager's port answers a knock, or its node's heartbeats still reach the GCS) is frozen
  // (SIGSTOP, a kernel hang) and restarted as hung, without waiting for hang_timeout_s. A call
  // is probed once it has run 4 times the last call's time, and at least 0.1 s
  // (kTimeouts.probe_*). 0: only the hang timeout finds hung ranks.
  double hang_silent_s = 1;
  // How long each phase of the job may take (the spec's `phases`). Past its bound a phase is
  // a `phase_timeout` event naming the phase and the ranks it waited for, and the controller
  // acts: a rank that does not answer is restarted as hung; the job fails only when the phase
  // cannot complete at all. Stepping is bounded by hang_timeout_s.
  double place_timeout_s = 0;         // placing the ranks' reservation (0: below_min_timeout_s)
  double start_timeout_s = 120;       // a new rank, from its placement until its setup answered
  double form_timeout_s = 120;        // every rank forming an epoch (the rendezvous, the rollback)
  double sync_timeout_s = 120;        // the ranks receiving rank 0's state
  double checkpoint_timeout_s = 120;  // rank 0 saving or loading a checkpoint
  int64_t num_samples = 0;
  int64_t global_batch = 0;
  int64_t seed = 0;
  int64_t steps = 0;        // stop after this many steps (0: use data_epochs)
  int64_t data_epochs = 0;  // or after this many passes over the data
  std::map<std::string, std::string> config;
  std::string placement_strategy = "SPREAD";
  // The nodes the ranks may use (`nodes`): node ids, hostnames or IP addresses; empty: any.
  // A scale request may change them while the job runs (ranks on other nodes then leave).
  // Ranks of a job that names nodes are placed one by one, not as a placement group.
  std::vector<std::string> nodes;
  double scale_out_debounce_s = 2.0;
  // How much training one call from the controller to each rank covers (`stepCallMs`): as
  // many steps as fit in this many milliseconds at the pace the last call measured (at least
  // one, at most kMaxStepsPerCall, and never more than a tenth of the hang timeout). Short
  // steps then pay for the controller's call, its answer and its commit once per few steps,
  // not per step. 0: one step per call.
  double step_call_ms = 50;

  // controller_lease_s, or its default.
  double ControllerLeaseSeconds() const;
  // How long the controller's lease may go unrenewed while its process is seen able to run
  // (a busy machine delays renewals; only a deadlock stops them): hang_timeout_s, the bound a
  // deadlocked rank gets. A stopped controller is found at the lease itself.
  double ControllerRunningLeaseSeconds() const;

  // place_timeout_s, or its default.
  double PlaceSeconds() const {
    return place_timeout_s > 0 ? place_timeout_s : below_min_timeout_s;
  }

  // The total number of steps the job runs (0: until the trainer says it is done).
  int64_t TotalSteps() const;
};

// The job id is the name, '-' and 6 hex digits, and ids are at most 64 characters.
inline constexpr size_t kMaxJobNameLength = 57;

// The most nodes a spec's `nodes` or a scale request may name.
inline constexpr size_t kMaxJobNodes = 4096;

// InvalidArgument naming `field` unless every entry is a node id, hostname or IPv4 address.
absl::Status CheckNodeNames(const std::vector<std::string>& nodes, const std::string& field);

// Parses and validates a YAML spec. Errors name the field, the value and the fix.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml);
absl::Status ValidateJobSpec(const JobSpec& spec);

// The spec as YAML (round-trips through ParseJobSpec).
std::string JobSpecToYaml(const JobSpec& spec);

// "1Gi", "512Mi", "2G", "1000" → bytes; InvalidArgument for anything else, a negative size or
// one of 2^63 bytes or more.
absl::StatusOr<int64_t> ParseBytes(const std::string& text);

// True when a policy asks for dying-gasp checkpoints (`dump: true`).
bool DumpOnDeath(const JobSpec& spec);

// The policy for a rank's death (first match of the spec's policies, then the defaults).
FaultPolicy MatchPolicy(const JobSpec& spec, const std::string& event, int exit_code, int signal);

}  // namespace phalanx::elastic
