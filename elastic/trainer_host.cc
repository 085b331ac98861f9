#include "elastic/trainer_host.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/system.h"
#include "client/gcs_client.h"
#include "collectives/environment.h"
#include "elastic/controller.h"
#include "elastic/job_recorder.h"
#include "elastic/network_check.h"
#include "elastic/trainer_protocol.h"
#include "node/object_store.h"
#include "node/snapshot_store.h"
#include "worker/actor_registry.h"
#include "worker/core_worker.h"

namespace phalanx::elastic {

std::vector<int64_t> StepIndices(int64_t num_samples, int64_t global_batch, int64_t seed,
                                 int64_t step, int rank, int world_size, int64_t* data_epoch,
                                 int64_t* step_samples) {
  if (num_samples <= 0 || global_batch <= 0) {  // the trainer brings its own data
    if (data_epoch) *data_epoch = 0;
    if (step_samples) *step_samples = 0;
    return {};
  }
  int64_t steps_per_pass = (num_samples + global_batch - 1) / global_batch;
  int64_t pass = step / steps_per_pass;
  int64_t begin = (step % steps_per_pass) * global_batch;
  int64_t end = std::min(num_samples, begin + global_batch);
  // The pass's order: a deterministic shuffle of 0..N-1 seeded by (seed, pass).
  std::vector<int64_t> order(num_samples);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(static_cast<uint64_t>(seed) * 1000003ull + static_cast<uint64_t>(pass));
  for (int64_t i = num_samples - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i);
    std::swap(order[i], order[pick(rng)]);
  }
  int64_t n = end - begin;
  int64_t from = begin + n * rank / world_size, to = begin + n * (rank + 1) / world_size;
  if (data_epoch) *data_epoch = pass;
  if (step_samples) *step_samples = n;
  return std::vector<int64_t>(order.begin() + from, order.begin() + to);
}

bool TrainerHostBase::Setup(std::string job_id, std::string spec_yaml) {
  auto spec = ParseJobSpec(spec_yaml);
  if (!spec.ok()) throw std::runtime_error(std::string(spec.status().message()));
  absl::MutexLock lock(&mu_);
  spec_ = *spec;
  job_id_ = job_id;
  TrainerContext context{job_id, spec_.config, spec_.num_samples, spec_.global_batch, spec_.seed};
  if (auto s = trainer_->Setup(context); !s.ok()) {
    throw std::runtime_error(absl::StrCat("Setup: ", s.message()));
  }
  if (const char* node = std::getenv("PHALANX_NODE_ID");
      spec_.snapshot_enabled && node != nullptr && PathExists(node::ObjectStoreDir(node))) {
    SnapshotWriterOptions options;
    options.job_id = job_id_;
    options.node_id = node;
    options.store_dir = node::ObjectStoreDir(node);
    options.peer_copy = spec_.snapshot_peer_copy;
    options.peer_bytes_per_s = spec_.snapshot_peer_mbps * 1e6;
    if (worker::CoreWorker* cw = worker::CoreWorker::Get()) options.token = cw->options().token;
    spdlog::info("job {}: each state this rank holds is kept in {} too", job_id_,
                 options.store_dir);
    snapshots_ = std::make_unique<SnapshotWriter>(std::move(options));
  } else {
    spdlog::info("job {}: no snapshots in node memory ({})", job_id_,
                 !spec_.snapshot_enabled ? "snapshot.enabled is false"
                 : node == nullptr       ? "not on a node"
                                         : "the node has no object store");
  }
  SetCommitted(trainer_->SaveState(), 0);
  if (DumpOnDeath(spec_)) {
    absl::MutexLock gasp(&gasp_mu_);
    gasp_dir_ = spec_.checkpoint_dir;
    gasp_file_ = absl::StrCat(spec_.name, "-dying-rank");
    gasp_job_ = job_id_;
    static std::atomic<bool> added{false};
    if (!added.exchange(true)) {
      worker::AddDyingGaspHook([this](const std::string& why) { DyingGasp(why); });
    }
  }
  return true;
}

void TrainerHostBase::SetCommitted(std::string state, int64_t step) {
  committed_ = std::make_shared<const std::string>(std::move(state));
  committed_step_ = step;
  GaspHeld();
}

void TrainerHostBase::GaspHeld() {
  int64_t held = Held();
  std::shared_ptr<const std::string> state =
      held > committed_step_ ? pending_.rbegin()->second : committed_;
  // The newest state out of the process too (a copy by another thread; this only hands it on).
  if (snapshots_ && held > 0) snapshots_->Offer(state, held, epoch_);
  absl::MutexLock lock(&gasp_mu_);
  gasp_state_ = std::move(state);
  gasp_step_ = held;
  gasp_rank_ = rank_;
}

void TrainerHostBase::DyingGasp(const std::string& why) {
  // Not under mu_: a running step holds it (it may be the step that is using the memory).
  std::shared_ptr<const std::string> state;
  int64_t step;
  std::string dir, path, job;
  {
    absl::MutexLock lock(&gasp_mu_);
    state = gasp_state_;
    step = gasp_step_;
    dir = gasp_dir_;
    job = gasp_job_;
    path = absl::StrCat(dir, "/", gasp_file_, gasp_rank_, "-step", step, ".ckpt");
  }
  if (step <= 0 || dir.empty() || !state) return;
  if (!MakeDirs(dir).ok() || !WriteFile(path, absl::StrCat(step, "\n", *state), 0644).ok()) {
    spdlog::warn("dying gasp ({}): cannot write {}", why, path);
    return;
  }
  spdlog::warn("dying gasp ({}): the committed state of {} steps is in {}", why, step, path);
  worker::CoreWorker* cw = worker::CoreWorker::Get();
  if (cw == nullptr) return;
  // The job's checkpoint pointer moves to this state unless it points at a newer one.
  PointCheckpointIfNewer(cw->gcs(), job, {step, path}).status().IgnoreError();
}

void TrainerHostBase::Commit(int64_t agreed) {
  auto it = pending_.find(agreed);
  if (it != pending_.end() && agreed > committed_step_) {
    committed_ = it->second;
    committed_step_ = agreed;
  }
  pending_.erase(pending_.begin(), pending_.upper_bound(agreed));
  GaspHeld();
}

int64_t TrainerHostBase::Held() const {
  return pending_.empty() ? committed_step_ : std::max(committed_step_, pending_.rbegin()->first);
}

std::map<std::string, double> TrainerHostBase::Step(int64_t step, int64_t agreed, int64_t epoch,
                                                    int64_t count) {
  absl::MutexLock lock(&mu_);
  if (!group_) throw std::runtime_error("no collective group yet: Reconfigure first");
  if (count < 1) throw std::runtime_error(absl::StrCat("asked to run ", count, " steps"));
  // A call sent ahead that no longer fits: it must not touch the state or the group.
  if (epoch != epoch_) {
    throw std::runtime_error(absl::StrCat("rank ", rank_, " is in epoch ", epoch_,
                                          ", asked to run a step of epoch ", epoch));
  }
  if (step_failed_ || aborted_) {
    throw std::runtime_error(absl::StrCat("rank ", rank_, ": a step ",
                                          step_failed_ ? "failed" : "was aborted",
                                          " since the epoch formed; Reconfigure first"));
  }
  if (Held() != step) {
    throw std::runtime_error(absl::StrCat("rank ", rank_, " holds the state of ", Held(),
                                          " steps, asked to run step ", step));
  }
  Commit(agreed);
  step_failed_ = true;  // until every step returns well (a throw from the trainer counts too)
  std::map<std::string, double> out;
  absl::Duration took, computed;
  double samples = 0;
  int64_t ran = 0;
  while (ran < count) {
    // An Abort between two steps of the call ends it as one during a step would.
    if (aborted_) throw std::runtime_error(absl::StrCat("rank ", rank_, ": aborted"));
    StepInput in;
    in.step = step + ran;
    in.rank = rank_;
    in.world_size = world_;
    in.epoch = epoch_;
    in.group = group_.get();
    in.call_end = step + count;
    in.indices = StepIndices(spec_.num_samples, spec_.global_batch, spec_.seed, in.step, rank_,
                             world_, &in.data_epoch, &in.global_batch);
    running_step_ = in.step;
    phase_ = kComputing;
    absl::Time start = absl::Now();
    absl::Duration waited_before = group_->TimeInCollectives();
    absl::StatusOr<StepResult> result = trainer_->Step(in);
    absl::Duration step_took = absl::Now() - start;
    absl::Duration waited = group_->TimeInCollectives() - waited_before;
    phase_ = kIdle;
    running_step_ = -1;
    if (!result.ok()) {
      // The live state may be half-updated: the next Reconfigure restores the committed one.
      throw std::runtime_error(std::string(result.status().message()));
    }
    ran += std::clamp<int64_t>(result->steps, 1, count - ran);
    took += step_took;
    computed += std::max(step_took - waited, absl::ZeroDuration());
    samples += static_cast<double>(in.indices.size());  // the trainer's own data: 0
    out = result->metrics;
    out["loss"] = result->loss;
    out["data_epoch"] = static_cast<double>(in.data_epoch);
    auto done = out.find("done");
    if (done != out.end() && done->second != 0) break;  // a trainer-driven loop returned
  }
  step_failed_ = false;
  pending_[step + ran] = std::make_shared<const std::string>(trainer_->SaveState());
  GaspHeld();
  out["samples"] = samples;
  out[step_metric::kSteps] = static_cast<double>(ran);
  // For the job's metrics: a step's wall time and the part of it outside collectives.
  out[step_metric::kStepMs] = absl::ToDoubleMilliseconds(took) / static_cast<double>(ran);
  out[step_metric::kComputeMs] = absl::ToDoubleMilliseconds(computed) / static_cast<double>(ran);
  return out;
}

int64_t TrainerHostBase::Reconfigure(std::string group, int64_t epoch, int rank, int world,
                                     int64_t agreed) {
  absl::MutexLock lock(&mu_);
  // An Abort from here on is for the new epoch.
  aborted_ = false;
  step_failed_ = false;
  const int64_t aborts = aborts_.load();
  if (!group_ || group_->name() != group) {
    collective::GroupOptions options;
    options.name = group;
    if (const char* node = std::getenv("PHALANX_NODE_ADDRESS")) {
      std::string address = node;
      options.host = address.substr(0, address.rfind(':'));
    }
    options.timeout = absl::Seconds(std::min(60.0, spec_.hang_timeout_s));
    collective::GroupOptionsFromEnvironment(&options);
    // The group's store is kept: the network check's lines live beside its keys.
    auto rendezvous = collective::ConnectClusterRendezvous("");
    if (!rendezvous.ok()) throw std::runtime_error(std::string(rendezvous.status().message()));
    options.rendezvous = rendezvous->store;
    options.token = rendezvous->token;
    rendezvous_ = rendezvous->store;
    auto made = collective::CollectiveGroup::Create(options);
    if (!made.ok()) throw std::runtime_error(std::string(made.status().message()));
    live_group_ = nullptr;
    group_ = std::move(*made);
  }
  live_group_ = group_.get();
  // Aborted while the group was made (a new rank's first epoch: no group for Abort to reach
  // yet): the controller gave up on this epoch, and its other members have left it, so it is
  // not formed (its rendezvous would wait out the group's timeout for them).
  if (aborts_.load() != aborts) {
    throw std::runtime_error(absl::StrCat("epoch ", epoch, " (rank ", rank, " of ", world,
                                          "): aborted as this rank joined it"));
  }
  if (auto s = group_->Reconfigure(epoch, rank, world); !s.ok()) {
    throw std::runtime_error(std::string(s.message()));
  }
  rank_ = rank;
  world_ = world;
  epoch_ = epoch;
  {
    absl::MutexLock gasp(&gasp_mu_);
    gasp_rank_ = rank;
  }
  // Steps finished past the agreed one go (the live state rolls back to it), and so do their
  // snapshots on this node: those steps run again.
  pending_.erase(pending_.upper_bound(agreed), pending_.end());
  if (snapshots_) snapshots_->RolledBack(agreed);
  Commit(agreed);
  // Back to the committed state: a failed step may have changed the live one.
  if (auto s = trainer_->LoadState(*committed_); !s.ok()) {
    throw std::runtime_error(absl::StrCat("LoadState: ", s.message()));
  }
  return committed_step_;
}

int64_t TrainerHostBase::SyncState(int root) {
  absl::MutexLock lock(&mu_);
  if (!group_) throw std::runtime_error("no collective group yet: Reconfigure first");
  phase_ = kCollective;
  int64_t header[2] = {static_cast<int64_t>(committed_->size()), committed_step_};
  auto s = group_->Broadcast(header, 2, collective::DType::kInt64, root);
  std::string bytes = rank_ == root ? *committed_ : std::string(header[0], '\0');
  if (s.ok() && header[0] > 0) {
    // Broadcast in int64 words; pad to a multiple of 8 bytes.
    size_t words = (bytes.size() + 7) / 8;
    std::vector<int64_t> buffer(words, 0);
    std::memcpy(buffer.data(), bytes.data(), bytes.size());
    s = group_->Broadcast(buffer.data(), words, collective::DType::kInt64, root);
    std::memcpy(bytes.data(), buffer.data(), bytes.size());
  }
  phase_ = kIdle;
  if (!s.ok()) throw std::runtime_error(std::string(s.message()));
  if (rank_ != root) {
    if (auto l = trainer_->LoadState(bytes); !l.ok()) {
      throw std::runtime_error(absl::StrCat("LoadState: ", l.message()));
    }
    pending_.clear();
    SetCommitted(std::move(bytes), header[1]);
  }
  return committed_step_;
}

int64_t TrainerHostBase::SaveCheckpoint(std::string path, int64_t agreed) {
  // The committed state is shared, not copied, and written without the state lock: the steps
  // run meanwhile (this runs on a lane of its own).
  std::shared_ptr<const std::string> state;
  int64_t step;
  {
    absl::MutexLock lock(&mu_);
    Commit(agreed);
    state = committed_;
    step = committed_step_;
  }
  auto dir = path.substr(0, path.rfind('/'));
  if (auto s = MakeDirs(dir); !s.ok()) throw std::runtime_error(std::string(s.message()));
  // "<step>\n<state>", whole or not at all, without a copy of the state.
  const std::string header = absl::StrCat(step, "\n");
  if (auto s = WriteFileParts(path, {header, *state}, 0644); !s.ok()) {
    throw std::runtime_error(std::string(s.message()));
  }
  return step;
}

int64_t TrainerHostBase::LoadCheckpoint(std::string path) {
  absl::MutexLock lock(&mu_);
  auto content = ReadFile(path);
  if (!content.ok()) return -1;
  size_t nl = content->find('\n');
  int64_t step = std::stoll(content->substr(0, nl));
  std::string state = content->substr(nl + 1);
  if (auto s = trainer_->LoadState(state); !s.ok()) {
    throw std::runtime_error(absl::StrCat("checkpoint ", path, ": ", s.message()));
  }
  pending_.clear();
  SetCommitted(std::move(state), step);
  return step;
}

int64_t TrainerHostBase::LoadSnapshot(std::string node_address, int64_t step) {
  std::string job;
  absl::Duration bound;
  {
    absl::MutexLock lock(&mu_);
    job = job_id_;
    bound = absl::Seconds(spec_.checkpoint_timeout_s);
  }
  const char* own_node = std::getenv("PHALANX_NODE_ID");
  const char* own_address = std::getenv("PHALANX_NODE_ADDRESS");
  std::string state;
  if (own_node != nullptr && own_address != nullptr && node_address == own_address) {
    // This node's memory: read in place.
    std::vector<node::Snapshot> held = node::ListSnapshots(node::ObjectStoreDir(own_node), job);
    auto it = std::find_if(held.begin(), held.end(),
                           [&](const node::Snapshot& s) { return s.step == step; });
    if (it == held.end()) return -1;
    auto read = node::ReadSnapshot(it->path);
    if (!read.ok()) return -1;
    state = std::move(read->second);
  } else {
    worker::CoreWorker* cw = worker::CoreWorker::Get();
    auto read =
        FetchSnapshot(node_address, cw != nullptr ? cw->options().token : "", job, step, bound);
    if (absl::IsNotFound(read.status())) return -1;
    if (!read.ok()) {
      throw std::runtime_error(absl::StrCat("snapshot of step ", step, " on ", node_address, ": ",
                                            read.status().message()));
    }
    state = std::move(*read);
  }
  absl::MutexLock lock(&mu_);
  if (auto s = trainer_->LoadState(state); !s.ok()) {
    throw std::runtime_error(absl::StrCat("snapshot of step ", step, ": ", s.message()));
  }
  pending_.clear();
  SetCommitted(std::move(state), step);
  return step;
}

std::vector<int> TrainerHostBase::NetworkCheck(double factor) {
  absl::MutexLock lock(&mu_);
  if (!group_) throw std::runtime_error("no collective group yet");
  NetworkCheckOptions options;
  options.straggler_factor = factor;
  NetworkCheckOptionsFromEnvironment(&options);
  // Every member counts the checks of an epoch alike (the controller asks them all).
  if (network_checks_epoch_ != epoch_) network_checks_ = 0;
  network_checks_epoch_ = epoch_;
  phase_ = kCollective;
  auto report = RunNetworkCheck(*group_, *rendezvous_, options, network_checks_++);
  phase_ = kIdle;
  if (!report.ok()) throw std::runtime_error(std::string(report.status().message()));
  network_check_skew_ = report->Skew();
  std::vector<int> out = report->stragglers;
  out.push_back(-1);
  out.insert(out.end(), report->faulty.begin(), report->faulty.end());
  return out;
}

std::vector<int64_t> TrainerHostBase::Ping() { return {phase_.load(), -1, running_step_.load()}; }

bool TrainerHostBase::Abort(std::string reason) {
  aborts_.fetch_add(1);  // before live_group_ is read: Reconfigure sees one or the other
  aborted_ = true;
  if (reason.empty()) reason = "the job's controller aborted the step";
  if (collective::CollectiveGroup* g = live_group_.load()) g->Abort(reason);
  trainer_->Abort(reason);
  return true;
}

std::string TrainerHostBase::Query(std::string key) {
  if (absl::StartsWith(key, trainer_query::kReachPrefix)) {
    std::vector<std::string> addresses = absl::StrSplit(
        key.substr(std::strlen(trainer_query::kReachPrefix)), ',', absl::SkipEmpty());
    std::string out;
    for (Knock k : KnockTcp(addresses, absl::Milliseconds(trainer_query::kReachTimeoutMs))) {
      out.push_back(k == Knock::kSilent ? '0' : '1');
    }
    return out;
  }
  absl::MutexLock lock(&mu_);
  if (key == "committed_step") return std::to_string(committed_step_);
  // The newest step this rank holds: a finished step not yet committed counts (every rank
  // took part in its collectives, so it is the same everywhere it was finished).
  if (key == trainer_query::kHeldStep) return std::to_string(Held());
  if (key == trainer_query::kNetworkCheckSkew) return absl::StrCat(network_check_skew_);
  return trainer_->Query(key);
}

namespace {

using Invoker = internal::Invoker<TrainerHostBase>;

std::map<std::string, Invoker>& HostMethods() {
  static auto* methods = [] {
    auto* m = new std::map<std::string, Invoker>();
    auto add = [&](const char* name, auto fn) {
      (*m)[name] = internal::MethodInvokerFor<TrainerHostBase>(absl::StrCat("Trainer.", name), fn);
    };
    namespace names = trainer_method;
    add(names::kSetup, &TrainerHostBase::Setup);
    add(names::kStep, &TrainerHostBase::Step);
    add(names::kReconfigure, &TrainerHostBase::Reconfigure);
    add(names::kSyncState, &TrainerHostBase::SyncState);
    add(names::kSaveCheckpoint, &TrainerHostBase::SaveCheckpoint);
    add(names::kLoadCheckpoint, &TrainerHostBase::LoadCheckpoint);
    add(names::kLoadSnapshot, &TrainerHostBase::LoadSnapshot);
    add(names::kNetworkCheck, &TrainerHostBase::NetworkCheck);
    add(names::kPing, &TrainerHostBase::Ping);
    add(names::kAbort, &TrainerHostBase::Abort);
    add(names::kQuery, &TrainerHostBase::Query);
    return m;
  }();
  return *methods;
}

class HostInstance final : public worker::ActorInstance {
 public:
  explicit HostInstance(std::unique_ptr<TrainerHostBase> host) : host_(std::move(host)) {}
  worker::CallOutcome Call(const std::string& method, const std::string& args) override {
    auto it = HostMethods().find(method);
    if (it == HostMethods().end()) {
      return {
          worker::MakeError(absl::StatusCode::kInvalidArgument, worker::error_kind::kInvalidCall,
                            absl::StrCat("a trainer has no method '", method, "'")),
          ""};
    }
    return it->second(host_.get(), args);
  }

 private:
  std::unique_ptr<TrainerHostBase> host_;
};

}  // namespace

void RegisterTrainerHost(const std::string& name,
                         std::function<std::unique_ptr<TrainerHostBase>()> make) {
  // The job's controller runs in a program that hosts its trainer (the spec's codePath).
  RegisterController();
  worker::ActorClass cls;
  cls.name = name;
  cls.create =
      [make](const std::string&) -> absl::StatusOr<std::unique_ptr<worker::ActorInstance>> {
    return std::unique_ptr<worker::ActorInstance>(new HostInstance(make()));
  };
  for (const auto& [method, fn] : HostMethods()) cls.methods.push_back(method);
  // Lanes: the controller talks to a rank while its step runs.
  namespace names = trainer_method;
  for (const char* m : {names::kReconfigure, names::kSyncState, names::kLoadCheckpoint,
                        names::kLoadSnapshot, names::kNetworkCheck}) {
    cls.method_group[m] = "control";
  }
  // A checkpoint is written on a lane of its own: neither the steps nor a recovery's
  // Reconfigure wait for a disk.
  cls.method_group[names::kSaveCheckpoint] = "persist";
  cls.group_concurrency["persist"] = 1;
  for (const char* m : {names::kPing, names::kAbort, names::kQuery}) cls.method_group[m] = "ping";
  cls.group_concurrency["control"] = 1;
  cls.group_concurrency["ping"] = 1;
  worker::ActorRegistry::Global().Register(std::move(cls));
}

void RegisterTrainer(const std::string& name, std::function<std::unique_ptr<Trainer>()> make) {
  RegisterTrainerHost(name, [make] { return std::make_unique<TrainerHostBase>(make()); });
}

}  // namespace phalanx::elastic
