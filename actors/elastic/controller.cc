#include "actors/elastic/controller.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "actors/api.h"
#include "actors/elastic/job_keys.h"
#include "actors/elastic/job_recorder.h"
#include "actors/elastic/job_spec.h"
#include "actors/elastic/policy.h"
#include "actors/elastic/trainer_host.h"
#include "actors/elastic/trainer_protocol.h"
#include "runtime/common/ids.h"
#include "runtime/common/logging.h"
#include "runtime/common/system.h"
#include "runtime/rpc/describe.h"
#include "runtime/worker/core_worker.h"
#include "runtime/worker/worker_host.h"

namespace phalanx::elastic {
namespace {

using Handle = ActorHandle<AnyActor>;
using Metrics = StepMetrics;

// Every bound the controller waits with, named in one place. The job's own bounds (the hang
// timeout, the controller lease, the below-min timeout, the scale-out debounce) are spec
// settings; these are the controller's.
struct Timeouts {
  // How often the step loop looks up from waiting for a step (to notice a member's death).
  absl::Duration step_wait_slice = absl::Milliseconds(20);
  // After a member died and the survivors were told to abort, how long their answers may take.
  absl::Duration aborted_step_grace = absl::Seconds(2);
  // After the hang timeout, how long the members have to answer a Ping (answered on a lane of
  // its own, not the step's: a live rank answers in milliseconds even mid-collective). A rank
  // that does not answer within it is taken for stopped or deadlocked and restarted.
  absl::Duration hang_ping = absl::Milliseconds(500);
  // Fetching a step's answer once it is ready.
  absl::Duration step_result = absl::Seconds(30);
  // Every rank forming an epoch (Reconfigure), and newcomers receiving the state (SyncState).
  absl::Duration reconfigure = absl::Seconds(120);
  // Rank 0 saving or loading a checkpoint.
  absl::Duration checkpoint = absl::Seconds(120);
  // Every rank's part in the network check.
  absl::Duration network_check = absl::Seconds(60);
  // A member whose call broke: how long the GCS has to call it dead before it is killed.
  absl::Duration confirm_death = absl::Seconds(5);
  // A removed member's record reaching DEAD (with its cause) before its policy is applied.
  absl::Duration death_record = absl::Seconds(2);
  // Rank 0's results at the end of the job.
  absl::Duration results = absl::Seconds(30);
  // Adopting a rank: its held step may take the hang timeout plus this.
  absl::Duration adopt_beyond_hang = absl::Seconds(30);
  // The record writer's period when nothing changed (it also polls scale and stop requests).
  absl::Duration writer_period = absl::Milliseconds(200);
  // At the job's end, how long the writer keeps trying to save the last record.
  absl::Duration record_finish = absl::Seconds(30);
  // How often a wait for the GCS's view (a death, ready joiners) looks again.
  absl::Duration poll = absl::Milliseconds(20);
};
constexpr Timeouts kTimeouts;

// One rank (or a rank to be): its actor and what it was started with.
struct Member {
  std::string actor_id;
  Handle handle;
  std::string node_id;
  double memory = 0;
  int bundle = -1;  // its placement-group bundle, -1 outside the group
  ObjectRef<bool> setup;
  bool ready = false;
  std::string why;       // what it replaces, for the event log
  std::string replaces;  // actor id of a straggler it replaces (removed when it joins)

  TrainerClient trainer() const { return TrainerClient(handle); }
};

class Controller {
 public:
  // Starts at once: a controller restarted by the runtime carries on by itself.
  Controller(std::string job_id, std::string spec_yaml)
      : job_id_(std::move(job_id)),
        spec_yaml_(std::move(spec_yaml)),
        recorder_(job_id_, kTimeouts.writer_period, kTimeouts.record_finish) {
    Start();
  }

  ~Controller() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    if (lease_thread_.joinable()) lease_thread_.join();
  }

  bool Start() {
    absl::MutexLock lock(&mu_);
    if (started_) return true;
    started_ = true;
    thread_ = std::thread([this] { Main(); });
    return true;
  }

  std::string Describe() { return recorder_.Describe(); }

 private:
  // ---- job record -------------------------------------------------------------------

  void Condition(const std::string& type, const std::string& reason, const std::string& message) {
    recorder_.Condition(type, reason, message);
  }

  void Event(const std::string& kind, const std::string& message) {
    recorder_.Event(kind, message, static_cast<int>(members_.size()), epoch_);
  }

  // Copies the controller's view into the record; the recorder's writer saves it.
  void PublishStatus() {
    {
      absl::MutexLock lock(&mu_);
      live_members_.clear();
      for (const auto& m : members_) live_members_.emplace(m.actor_id, m.handle);
      for (auto it = dead_members_.begin(); it != dead_members_.end();) {
        it = live_members_.count(*it) ? std::next(it) : dead_members_.erase(it);
      }
    }
    recorder_.Update([&](rpc::JobInfo* job) {
      auto* el = job->mutable_elastic();
      el->set_world_size(static_cast<int>(members_.size()));
      el->set_epoch(epoch_);
      el->set_step(agreed_);
      el->set_total_steps(spec_.TotalSteps());
      el->set_loss(last_loss_);
      el->set_restarts(restarts_);
      el->set_min_replicas(spec_.min_replicas);
      el->set_max_replicas(spec_.max_replicas);
      el->set_target_replicas(target_);
      el->set_data_epoch(data_epoch_);
      el->set_last_checkpoint_step(last_checkpoint_);
      el->set_steps_per_second(steps_per_second_);
      el->clear_members();
      for (size_t r = 0; r < members_.size(); ++r) {
        auto* m = el->add_members();
        m->set_rank(static_cast<int>(r));
        m->set_actor_id(members_[r].actor_id);
        m->set_node_id(members_[r].node_id);
        m->set_memory_bytes(members_[r].memory);
        m->set_bundle(members_[r].bundle);
      }
      el->set_placement_group_id(pg_.id());
      job->set_world_size(static_cast<int>(members_.size()));
      job->set_epoch(epoch_);
    });
  }

  // ---- liveness --------------------------------------------------------------------

  // Renews this controller's lease through the GCS for as long as the actor lives (also after
  // the job ended: an expired lease would start a controller again). Each renewal takes the
  // controller's lock, so a controller deadlocked on it stops renewing too. A renewal that
  // says this attempt was replaced (a controller on a host that came back) ends the process:
  // two controllers must never drive one job.
  void LeaseLoop(HostedActor me, absl::Duration lease) {
    absl::Duration period = lease / 4;
    absl::Time last_ok = absl::Now();
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) return;
      }
      auto stale = gcs_->RenewActorLease(me.actor_id, me.attempt, lease);
      if (stale.ok() && *stale) {
        spdlog::error("job {}: this controller (attempt {}) was replaced; exiting", job_id_,
                      me.attempt);
        spdlog::default_logger()->flush();
        ::kill(::getpid(), SIGKILL);
      }
      if (stale.ok()) {
        last_ok = absl::Now();
      } else if (absl::Now() - last_ok > lease) {
        spdlog::warn("job {}: cannot renew the controller's lease for {}: {}", job_id_,
                     absl::FormatDuration(absl::Now() - last_ok), stale.status());
      }
    }
  }

  // A member's actor died (its process, or its node): the survivors' step in flight cannot
  // finish, and on a host that vanished their collective would wait for its timeout. Abort
  // it now; the step loop then removes the dead and forms the next epoch.
  void OnActorMessage(const rpc::ActorInfo& actor) {
    if (actor.state() != rpc::ACTOR_DEAD) return;
    std::vector<Handle> survivors;
    {
      absl::MutexLock lock(&mu_);
      if (!live_members_.count(actor.actor_id()) ||
          !dead_members_.insert(actor.actor_id()).second) {
        return;
      }
      for (const auto& [id, handle] : live_members_) {
        if (!dead_members_.count(id)) survivors.push_back(handle);
      }
    }
    spdlog::info("job {}: rank actor {} died ({}): aborting the step on {} survivor(s)", job_id_,
                 ShortId(actor.actor_id()), rpc::DescribeCause(actor.death_cause()),
                 survivors.size());
    for (auto& h : survivors) TrainerClient(h).Abort();
  }

  std::set<std::string> DeadMembers() {
    absl::MutexLock lock(&mu_);
    return dead_members_;
  }

  // ---- trainers ----------------------------------------------------------------------

  // Starts a trainer actor; it joins at a step boundary once ready.
  Member Spawn(int bundle, double memory, const std::vector<std::string>& avoid,
               const std::string& why) {
    Member m;
    m.bundle = bundle;
    m.memory = memory;
    m.why = why;
    auto resources = spec_.resources;
    if (memory > 0) resources["memory"] = memory;
    auto creator = ActorOf(spec_.trainer)
                       .SetResources(resources)
                       .SetMaxRestarts(0)
                       .SetEnv("PHALANX_JOB_ID", job_id_);
    if (!spec_.code_path.empty()) creator.SetCodePath(spec_.code_path);
    creator.SetLanguage(spec_.language);
    if (bundle >= 0) {
      creator.SetPlacementGroup(pg_, bundle);
    } else if (!avoid.empty()) {
      creator.SetAvoidNodes(avoid);
    }
    auto handle = creator.Remote();
    if (!handle.ok()) {
      Event("spawn_failed", absl::StrCat("cannot start a rank: ", handle.status().message()));
      return m;
    }
    m.handle = *handle;
    m.actor_id = handle->id();
    m.setup = m.trainer().Setup(job_id_, spec_yaml_);
    return m;
  }

  rpc::ActorInfo ActorState(const std::string& actor_id) {
    auto info = gcs_->GetActor(actor_id);
    return info.ok() ? *info : rpc::ActorInfo();
  }

  // Forms epoch `epoch_ + 1` with `members_` (in rank order) and rolls everyone back to the
  // agreed state; newcomers then receive it from rank 0. Returns false if it failed.
  bool FormEpoch(const std::string& why) {
    int64_t epoch = ++epoch_;
    int world = static_cast<int>(members_.size());
    std::vector<ObjectRef<int64_t>> refs;
    for (int r = 0; r < world; ++r) {
      refs.push_back(members_[r].trainer().Reconfigure(group_name_, epoch, r, world, agreed_));
    }
    bool ok = true;
    bool behind = false;
    for (int r = 0; r < world; ++r) {
      auto held = Get(refs[r], kTimeouts.reconfigure);
      if (!held.ok()) {
        spdlog::warn("job {}: rank {} failed to form epoch {}: {}", job_id_, r, epoch,
                     held.status());
        ok = false;
      } else if (*held != agreed_) {
        behind = true;
      }
    }
    if (ok && behind) {
      // Newcomers (or a whole set restarting from a checkpoint) get rank 0's state.
      std::vector<ObjectRef<int64_t>> syncs;
      for (int r = 0; r < world; ++r) syncs.push_back(members_[r].trainer().SyncState(0));
      for (int r = 0; r < world; ++r) {
        auto held = Get(syncs[r], kTimeouts.reconfigure);
        if (!held.ok() || *held != agreed_) {
          spdlog::warn(
              "job {}: rank {} failed to receive the state: {}", job_id_, r,
              held.ok() ? absl::StrCat("holds ", *held) : std::string(held.status().message()));
          ok = false;
        }
      }
    }
    for (auto& m : members_) m.node_id = ActorState(m.actor_id).node_id();
    PublishStatus();
    if (ok) Event("epoch", absl::StrCat("epoch ", epoch, ": world size ", world, " (", why, ")"));
    if (ok && spec_.straggler_check && world > 1) CheckNetwork();
    return ok;
  }

  void CheckNetwork() {
    std::vector<ObjectRef<std::vector<int>>> refs;
    for (auto& m : members_) refs.push_back(m.trainer().NetworkCheck(spec_.straggler_factor));
    auto report = Get(refs[0], kTimeouts.network_check);
    for (auto& r : refs) Get(r, kTimeouts.network_check).IgnoreError();
    if (!report.ok()) {
      Event("network_check_failed", std::string(report.status().message()));
      return;
    }
    bool faulty_part = false;
    for (int r : *report) {
      if (r < 0) {
        faulty_part = true;
        continue;
      }
      if (r >= static_cast<int>(members_.size())) continue;
      Member& m = members_[r];
      if (faulty_part) {
        Event("faulty", absl::StrCat("rank ", r, " failed both network-check rounds"));
        hung_.insert(m.actor_id);
        Kill(m.handle).IgnoreError();
        continue;
      }
      FaultPolicy policy = MatchPolicy(spec_, "straggler", 0, 0);
      Event("straggler", absl::StrCat("rank ", r, " on node ", ShortId(m.node_id),
                                      " is slower than ", spec_.straggler_factor,
                                      "× the median; action: ", ActionName(policy.action)));
      if (ReplaceStraggler(policy, &budget_, absl::Now())) {
        ++restarts_;
        Member replacement =
            Spawn(-1, m.memory, {m.node_id}, absl::StrCat("replaces straggler rank ", r));
        replacement.replaces = m.actor_id;
        if (!replacement.actor_id.empty()) joining_.push_back(std::move(replacement));
      }
    }
  }

  // A rank is gone: the policies decide (actors/elastic/policy.h); this carries it out.
  void HandleDeath(const Member& m, const rpc::ActorInfo& info) {
    const rpc::DeathCause& cause = info.death_cause();
    if (cause.kind() == rpc::DeathCause::CREATION_FAILED) {
      Fail(absl::StrCat("a rank could not be created: ", rpc::DescribeCause(cause)));
      return;
    }
    DeathDecision d = DecideOnDeath(spec_, ToRankDeath(m, cause), &budget_, absl::Now());
    std::string what = absl::StrCat(rpc::DescribeActor(info), " on node ", ShortId(m.node_id),
                                    " died: ", rpc::DescribeCause(cause));
    if (d.kind == DeathDecision::Kind::kReplace) ++restarts_;
    Event("rank_died", absl::StrCat(what, "; ", d.summary));
    switch (d.kind) {
      case DeathDecision::Kind::kFailJob:
        Fail(absl::StrCat("policy failJob: ", what));
        return;
      case DeathDecision::Kind::kShrink:
        target_ = std::max(spec_.min_replicas, target_ - 1);
        ceiling_ = target_;
        return;
      case DeathDecision::Kind::kReplace:
        break;
    }
    if (d.release_bundle && !pg_.id().empty()) {
      absl::Status released = ReleaseBundle(pg_, m.bundle);
      if (!released.ok()) {
        spdlog::warn("job {}: cannot release bundle {}: {}", job_id_, m.bundle, released);
      }
    }
    Member replacement =
        Spawn(d.bundle, d.memory, d.avoid_nodes, absl::StrCat("replaces ", ShortId(m.actor_id)));
    if (!replacement.actor_id.empty()) joining_.push_back(std::move(replacement));
  }

  // A member's death in the policies' terms.
  RankDeath ToRankDeath(const Member& m, const rpc::DeathCause& cause) const {
    RankDeath death;
    death.memory = m.memory;
    death.bundle = m.bundle;
    death.node_id = m.node_id;
    switch (cause.kind()) {
      case rpc::DeathCause::OOM_KILLED:
        death.kind = RankDeath::Kind::kOom;
        break;
      case rpc::DeathCause::NODE_DIED:
        death.kind = RankDeath::Kind::kNodeDied;
        break;
      case rpc::DeathCause::EXITED:
        death.kind = RankDeath::Kind::kExited;
        death.exit_code = cause.exit_code();
        break;
      case rpc::DeathCause::SIGNALED:
        death.kind = RankDeath::Kind::kSignaled;
        death.signal = cause.signal();
        break;
      case rpc::DeathCause::KILLED_BY_USER:
        death.kind = RankDeath::Kind::kKilled;
        death.hung = hung_.count(m.actor_id) > 0;
        break;
      default:
        death.kind = RankDeath::Kind::kOther;
        break;
    }
    return death;
  }

  void Fail(const std::string& message) {
    failed_ = true;
    failure_ = message;
  }

  // ---- the step loop -----------------------------------------------------------------

  // Runs step `agreed_` on every member. Returns the members that died (their actors),
  // or an empty list with ok = true.
  bool RunStep(std::vector<size_t>* lost, std::string* error) {
    std::vector<ObjectRef<Metrics>> refs;
    for (auto& m : members_) refs.push_back(m.trainer().Step(agreed_, agreed_));
    // Until every rank answered, or one died (the survivors were told to abort: wait for
    // their answers only briefly), or the hang timeout.
    absl::Time hang_at = absl::Now() + absl::Seconds(spec_.hang_timeout_s);
    absl::Time death_grace = absl::InfiniteFuture();
    bool all_ready = false;
    while (absl::Now() < std::min(hang_at, death_grace)) {
      auto waited = Wait(refs, static_cast<int>(refs.size()), kTimeouts.step_wait_slice);
      if (waited.not_ready.empty()) {
        all_ready = true;
        break;
      }
      std::set<std::string> dead = DeadMembers();
      if (dead.empty()) continue;
      if (death_grace == absl::InfiniteFuture())
        death_grace = absl::Now() + kTimeouts.aborted_step_grace;
      bool survivors_answered = true;
      for (size_t r = 0; r < refs.size(); ++r) {
        survivors_answered &= dead.count(members_[r].actor_id) > 0 || refs[r].Ready();
      }
      if (survivors_answered) break;
    }
    // The ranks killed for hanging count as lost: the survivors go on without them at once.
    if (!all_ready && death_grace == absl::InfiniteFuture()) *lost = HandleHang(refs);
    bool all_ok = true;
    bool done = false;
    double loss = 0;
    for (size_t r = 0; r < refs.size(); ++r) {
      auto result = refs[r].Ready() || all_ready
                        ? Get(refs[r], kTimeouts.step_result)
                        : absl::StatusOr<Metrics>(absl::UnavailableError(
                              "no answer after a member died (its step was aborted)"));
      if (!result.ok()) {
        all_ok = false;
        if (error->empty()) *error = std::string(result.status().message());
        bool counted = std::find(lost->begin(), lost->end(), r) != lost->end();
        if (!counted && (IsActorDied(result.status()) ||
                         ErrorKind(result.status()) == error_kind::kActorUnavailable)) {
          lost->push_back(r);
        }
        continue;
      }
      if (r == 0) {
        loss = result->at("loss");
        data_epoch_ = static_cast<int64_t>(result->at("data_epoch"));
        // A trainer-driven loop (Python) ends when it returns.
        auto it = result->find("done");
        done = it != result->end() && it->second != 0;
      }
    }
    if (all_ok) last_loss_ = loss;
    trainer_done_ = all_ok && done;
    return all_ok;
  }

  // No step finished within the hang timeout: find the stuck ranks (they do not answer, or
  // compute while the others wait in a collective) and restart them; unblock the rest.
  // Returns the ranks killed.
  std::vector<size_t> HandleHang(const std::vector<ObjectRef<Metrics>>& refs) {
    std::vector<ObjectRef<std::vector<int64_t>>> pings;
    for (auto& m : members_) pings.push_back(m.trainer().Ping());
    // One bound for all of them together, not one per rank.
    Wait(pings, static_cast<int>(pings.size()), kTimeouts.hang_ping);
    std::vector<int> phase(members_.size(), -1);
    for (size_t r = 0; r < members_.size(); ++r) {
      if (!pings[r].Ready()) continue;
      auto p = Get(pings[r], absl::ZeroDuration());
      if (p.ok() && !p->empty()) phase[r] = static_cast<int>((*p)[0]);
    }
    bool someone_waits = std::count(phase.begin(), phase.end(), kCollective) > 0;
    std::vector<size_t> killed;
    for (size_t r = 0; r < members_.size(); ++r) {
      bool silent = phase[r] < 0;
      bool computing_alone = phase[r] == kComputing && someone_waits;
      if (refs[r].Ready() || !(silent || computing_alone)) continue;
      Event("hang",
            absl::StrCat("rank ", r, " made no progress for ", spec_.hang_timeout_s, " s (",
                         silent ? "does not answer" : "stuck computing", "); restarting it"));
      hung_.insert(members_[r].actor_id);
      Kill(members_[r].handle).IgnoreError();
      killed.push_back(r);
    }
    for (auto& m : members_) m.trainer().Abort();
    return killed;
  }

  // Waits (bounded) until the GCS says each member in `candidates` is dead or alive.
  std::vector<size_t> ConfirmDeaths(const std::vector<size_t>& candidates) {
    std::vector<size_t> dead;
    for (size_t r : candidates) {
      absl::Time until = absl::Now() + kTimeouts.confirm_death;
      rpc::ActorInfo info = ActorState(members_[r].actor_id);
      while (info.state() != rpc::ACTOR_DEAD && absl::Now() < until) {
        absl::SleepFor(kTimeouts.poll);
        info = ActorState(members_[r].actor_id);
      }
      if (info.state() != rpc::ACTOR_DEAD) {
        // Its connection broke but the GCS calls it alive: make it so.
        Kill(members_[r].handle).IgnoreError();
      }
      dead.push_back(r);
    }
    return dead;
  }

  // Between steps: joiners that are ready, scale requests, growth. Returns false when the
  // membership change failed (the caller retries via the failure path).
  enum class Change { kNone, kFormed, kFailed };

  Change Boundary() {
    TakeRequests();
    // Joiners: ready ones join (up to the target); dead ones are handled like deaths.
    std::vector<Member> ready;
    for (auto it = joining_.begin(); it != joining_.end();) {
      if (!it->setup.Ready()) {
        ++it;
        continue;
      }
      absl::Status s = Get(it->setup).status();
      if (!s.ok()) {
        rpc::ActorInfo info = ActorState(it->actor_id);
        Event("spawn_failed", absl::StrCat("a new rank failed to start: ", s.message()));
        if (info.state() == rpc::ACTOR_DEAD) HandleDeath(*it, info);
        it = joining_.erase(it);
        continue;
      }
      ready.push_back(std::move(*it));
      it = joining_.erase(it);
    }
    std::vector<std::string> changes;
    // Stragglers leave when their replacement is ready.
    for (auto& r : ready) {
      if (r.replaces.empty()) continue;
      auto gone = std::find_if(members_.begin(), members_.end(),
                               [&](const Member& m) { return m.actor_id == r.replaces; });
      if (gone != members_.end()) {
        changes.push_back(absl::StrCat("rank on ", ShortId(gone->node_id), " replaced"));
        retiring_.push_back(*gone);
        members_.erase(gone);
      }
    }
    int room = target_ - static_cast<int>(members_.size());
    for (auto& r : ready) {
      if (room <= 0 && r.replaces.empty()) {
        joining_.push_back(std::move(r));  // not needed now; keep it warm
        continue;
      }
      changes.push_back(absl::StrCat("+", ShortId(r.actor_id), " (", r.why, ")"));
      members_.push_back(std::move(r));
      --room;
    }
    // Scale in, gracefully: the leaving ranks finished the last step with the others; they
    // leave the group here and their actors go after the new epoch formed. Named ranks first,
    // then the highest.
    std::sort(scale_in_ranks_.rbegin(), scale_in_ranks_.rend());
    scale_in_ranks_.erase(std::unique(scale_in_ranks_.begin(), scale_in_ranks_.end()),
                          scale_in_ranks_.end());
    for (int r : scale_in_ranks_) {
      if (r >= static_cast<int>(members_.size()) ||
          static_cast<int>(members_.size()) <= spec_.min_replicas) {
        continue;
      }
      retiring_.push_back(members_[r]);
      changes.push_back(absl::StrCat("-rank ", r, " (scale in)"));
      members_.erase(members_.begin() + r);
    }
    scale_in_ranks_.clear();
    while (static_cast<int>(members_.size()) > target_ && members_.size() > 1) {
      retiring_.push_back(members_.back());
      changes.push_back(absl::StrCat("-rank ", members_.size() - 1, " (scale in)"));
      members_.pop_back();
    }
    MaybeGrow();
    if (changes.empty()) return Change::kNone;
    bool ok = !members_.empty() && FormEpoch(absl::StrJoin(changes, ", "));
    // Retired ranks finished their last step with the others; now they go.
    for (auto& m : retiring_) {
      Kill(m.handle).IgnoreError();
      Event("scaled_in",
            absl::StrCat("rank ", ShortId(m.actor_id), " on node ", ShortId(m.node_id), " left"));
    }
    retiring_.clear();
    if (members_.empty()) return Change::kNone;
    return ok ? Change::kFormed : Change::kFailed;
  }

  // Grows toward the target when some node has room for a rank (after a debounce since the
  // last resource event), keeping the new ranks warm until they join.
  void MaybeGrow() {
    int want = target_ - static_cast<int>(members_.size() + joining_.size());
    if (want <= 0 || absl::Now() < grow_after_) return;
    grow_after_ = absl::InfiniteFuture();  // until the next resource event
    auto nodes = gcs_->GetAllNodes(true);
    if (!nodes.ok()) return;
    int fits = 0;
    for (const auto& n : *nodes) {
      Resources available = rpc::FromProto(n.available());
      Resources need;
      for (const auto& [k, v] : spec_.resources) need.Set(k, v);
      while (fits < want && available.Contains(need) && !need.Empty()) {
        available -= need;
        ++fits;
      }
    }
    for (int i = 0; i < fits; ++i) {
      Member m = Spawn(-1, spec_.resources.count("memory") ? spec_.resources.at("memory") : 0, {},
                       "scale out");
      if (!m.actor_id.empty()) joining_.push_back(std::move(m));
    }
    if (fits > 0)
      Event("scaling_out", absl::StrCat("starting ", fits, " rank(s) toward ", target_));
  }

  // Applies a scale request the recorder read (actors/elastic/job_keys.h), and notes a stop.
  void TakeRequests() {
    std::string request = recorder_.TakeScaleRequest();
    if (recorder_.StopAsked()) stop_requested_ = true;
    if (request.empty()) return;
    auto parsed = ParseScaleRequest(request, static_cast<int>(members_.size()), spec_);
    if (!parsed.ok()) {
      spdlog::warn("job {}: {}", job_id_, parsed.status().message());
      return;
    }
    scale_in_ranks_ = parsed->leaving;
    int clamped = parsed->replicas;
    Condition("Scaling", "ScaleRequested",
              absl::StrCat(
                  "replicas ", parsed->asked,
                  clamped != parsed->asked
                      ? absl::StrCat(" (clamped to ", clamped, ": min ", spec_.min_replicas,
                                     ", max ", spec_.max_replicas, ")")
                      : "",
                  scale_in_ranks_.empty()
                      ? ""
                      : absl::StrCat(", ranks ", absl::StrJoin(scale_in_ranks_, ","), " leave")));
    requested_ = clamped;
    target_ = clamped;
    ceiling_ = std::max(clamped, ceiling_);
    grow_after_ = absl::Now();
  }

  void OnMessage(const rpc::PubMessage& m) {
    if (m.has_actor()) {
      OnActorMessage(m.actor());
      return;
    }
    if (m.has_resource()) {
      auto kind = m.resource().kind();
      if (kind == rpc::ResourceEvent::NODE_ADDED || kind == rpc::ResourceEvent::RESOURCES_CHANGED) {
        absl::MutexLock lock(&mu_);
        resource_event_ = true;
        node_added_ |= kind == rpc::ResourceEvent::NODE_ADDED;
      }
    }
  }

  void CheckpointIfDue() {
    if (spec_.checkpoint_interval <= 0 || agreed_ == 0 ||
        agreed_ % spec_.checkpoint_interval != 0) {
      return;
    }
    std::string path =
        absl::StrCat(spec_.checkpoint_dir, "/", spec_.name, "-step", agreed_, ".ckpt");
    auto saved = Get(members_[0].trainer().SaveCheckpoint(path), kTimeouts.checkpoint);
    if (!saved.ok()) {
      Event("checkpoint_failed", std::string(saved.status().message()));
      return;
    }
    last_checkpoint_ = agreed_;
    recorder_.RecordCheckpoint({agreed_, path});
  }

  // No rank holds the state (the start, or every rank was lost): rank 0 loads the last
  // checkpoint, if any, and the others get it when the epoch forms.
  void RestartFromCheckpoint(bool lost_everything) {
    auto pointer = ReadCheckpointPointer(*gcs_, job_id_);
    int64_t step = 0;
    if (pointer) {
      auto loaded = Get(members_[0].trainer().LoadCheckpoint(pointer->path), kTimeouts.checkpoint);
      if (loaded.ok() && *loaded >= 0) {
        step = *loaded;
      } else {
        // Unreadable: say so, and forget it (a later checkpoint must not yield to it).
        Event("checkpoint_unreadable",
              absl::StrCat(pointer->path, ": ",
                           loaded.ok() ? "missing" : std::string(loaded.status().message())));
        gcs_->KvDelete(keys::kNamespace, keys::Checkpoint(job_id_)).status().IgnoreError();
      }
    }
    if (lost_everything || step > 0) {
      Event("restart_from_checkpoint",
            absl::StrCat(lost_everything ? "every rank was lost: " : "", "starting from step ",
                         step, step > 0 ? " (checkpoint)" : " (no checkpoint)"));
    }
    agreed_ = step;
  }

  void WaitForJoiners(int want, absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (static_cast<int>(members_.size()) + ReadyJoiners() < want && absl::Now() < deadline &&
           !failed_) {
      absl::SleepFor(kTimeouts.poll);
      if (joining_.empty()) break;
    }
  }

  int ReadyJoiners() {
    int n = 0;
    for (auto& j : joining_) n += j.setup.Ready() ? 1 : 0;
    return n;
  }

  void Main() {
    CoreWorker* cw = CoreWorker::Get();
    if (cw == nullptr) {
      spdlog::error("the controller has no runtime");
      return;
    }
    gcs_ = &cw->gcs();
    auto spec = ParseJobSpec(spec_yaml_);
    auto existing = gcs_->GetJob(job_id_);
    if (existing.ok() &&
        (existing->state() == rpc::JOB_SUCCEEDED || existing->state() == rpc::JOB_FAILED ||
         existing->state() == rpc::JOB_STOPPED)) {
      // Started again after its job ended (its host died before it could go): nothing to do,
      // and nothing to start -- a reservation made now would hold a host for no one.
      spdlog::info("job {} ended already ({}): its restarted controller leaves", job_id_,
                   rpc::JobState_Name(existing->state()));
      Leave();
      return;
    }
    rpc::JobInfo job = existing.ok() ? *existing : rpc::JobInfo();
    // A previous incarnation of this controller died: Train() adopts the ranks it left. The
    // attempt number says so even when it died before it could record the job as running.
    auto me = CurrentHostedActor();
    restarted_ = job.state() == rpc::JOB_RUNNING || (me && me->attempt > 0);
    previous_ = job.elastic();
    job.set_job_id(job_id_);
    job.set_kind("elastic");
    job.set_spec_yaml(spec_yaml_);
    if (job.start_time_ms() == 0) job.set_start_time_ms(NowMs());
    job.set_state(rpc::JOB_RUNNING);
    recorder_.Start(gcs_, std::move(job));
    if (!spec.ok()) {
      Condition("Failed", "InvalidSpec", std::string(spec.status().message()));
      recorder_.SetState(rpc::JOB_FAILED, std::string(spec.status().message()), 1);
      recorder_.Finish();
      return;
    }
    spec_ = *spec;
    budget_ = RestartBudget(spec_.restart_limit, absl::Seconds(spec_.restart_time_limit_s));
    recorder_.Update([&](rpc::JobInfo* job) { job->set_name(spec_.name); });
    group_name_ = absl::StrCat("elastic-", job_id_);
    if (auto log = spec_.config.find("controllerStepLog"); log != spec_.config.end()) {
      step_log_ = std::make_unique<std::ofstream>(log->second, std::ios::app);
    }
    target_ = spec_.max_replicas;
    if (auto me = CurrentHostedActor()) {
      absl::Duration lease = absl::Seconds(spec_.ControllerLeaseSeconds());
      lease_thread_ = std::thread([this, me = *me, lease] { LeaseLoop(me, lease); });
    }
    auto subscription = gcs_->Subscribe({rpc::RESOURCES, rpc::ACTOR},
                                        [this](const rpc::PubMessage& m) { OnMessage(m); });
    Train();
    subscription.reset();
    // The ranks and their reservation go with the job.
    for (auto& m : members_) Kill(m.handle).IgnoreError();
    for (auto& m : joining_) Kill(m.handle).IgnoreError();
    if (!pg_.id().empty()) RemovePlacementGroup(pg_).IgnoreError();
    PublishStatus();
    recorder_.Finish();
    Leave();
  }

  // The job is over (its record says how): this controller's actor ends for good, so that it
  // is not started again when its host dies.
  void Leave() {
    if (auto me = CurrentHostedActor()) {
      absl::Status killed = gcs_->KillActor(me->actor_id, /*no_restart=*/true);
      if (!killed.ok()) spdlog::warn("job {}: the controller cannot end: {}", job_id_, killed);
    }
  }

  // The job's first start: reserves the ranks' resources (one placement group) and starts
  // them. False (and the job Failed) when they cannot be placed or started.
  bool PlaceAndStart() {
    Condition("Pending", "Placing", absl::StrCat(spec_.replicas, " ranks with ", [&] {
                std::vector<std::string> r;
                for (const auto& [k, v] : spec_.resources)
                  r.push_back(absl::StrCat(k, " ", FormatAmount(k, v)));
                return absl::StrJoin(r, ", ");
              }()));
    std::vector<std::map<std::string, double>> bundles(spec_.replicas, spec_.resources);
    bool use_pg = !spec_.resources.empty();
    if (use_pg) {
      auto pg = CreatePlacementGroup(bundles, spec_.placement_strategy, ReservationName());
      if (!pg.ok()) {
        Condition("Failed", "Unplaceable", std::string(pg.status().message()));
        recorder_.SetState(rpc::JOB_FAILED, std::string(pg.status().message()), 1);
        return false;
      }
      pg_ = *pg;
      PublishStatus();  // the record names the reservation (a restarted controller frees it)
      absl::Status ready = pg_.Wait(absl::Seconds(spec_.below_min_timeout_s));
      if (!ready.ok()) {
        Condition("Failed", "Unplaceable", std::string(ready.message()));
        recorder_.SetState(rpc::JOB_FAILED, std::string(ready.message()), 1);
        return false;
      }
    }
    Condition("Creating", "StartingRanks", absl::StrCat(spec_.replicas, " ranks"));
    double memory = spec_.resources.count("memory") ? spec_.resources.at("memory") : 0;
    for (int r = 0; r < spec_.replicas; ++r) {
      Member m = Spawn(use_pg ? r : -1, memory, {}, "initial");
      if (m.actor_id.empty()) {
        Condition("Failed", "CannotStart", "a rank could not be created");
        recorder_.SetState(rpc::JOB_FAILED, "a rank could not be created", 1);
        return false;
      }
      joining_.push_back(std::move(m));
    }
    // Wait until the initial ranks are up (or enough of them).
    WaitForJoiners(spec_.replicas, absl::Seconds(spec_.below_min_timeout_s));
    target_ = spec_.replicas;  // grow beyond only when resources appear
    return true;
  }

  // A previous incarnation of this controller died (its process was killed, or its node):
  // the ranks it left still hold their state in memory. The live ones are adopted, the lost
  // ones replaced, and the job goes on from the newest step they hold, without a checkpoint.
  // False when no rank is left to adopt (the job then restarts from its last checkpoint).
  bool Adopt(const rpc::ElasticStatus& previous) {
    pg_ = PlacementGroup(previous.placement_group_id());
    std::vector<Member> alive, lost;
    std::set<std::string> known;
    for (const auto& pm : previous.members()) {
      Member m;
      m.actor_id = pm.actor_id();
      m.handle = Handle(pm.actor_id(), spec_.trainer);
      m.node_id = pm.node_id();
      m.memory = pm.memory_bytes();
      m.bundle = pm.bundle();
      known.insert(m.actor_id);
      (ActorState(m.actor_id).state() == rpc::ACTOR_ALIVE ? alive : lost).push_back(m);
    }
    KillStrays(known);
    // The steps the dead controller left running end (their collectives abort), then each
    // rank says the newest step it holds.
    for (auto& m : alive) m.trainer().Abort();
    std::vector<ObjectRef<std::string>> held_refs;
    for (auto& m : alive) {
      held_refs.push_back(m.trainer().Query(trainer_query::kHeldStep));
    }
    std::vector<std::pair<int64_t, Member>> held;
    for (size_t i = 0; i < alive.size(); ++i) {
      auto h = Get(held_refs[i], absl::Seconds(spec_.hang_timeout_s) + kTimeouts.adopt_beyond_hang);
      int64_t step = -1;
      if (h.ok() && absl::SimpleAtoi(*h, &step) && step >= 0) {
        held.emplace_back(step, alive[i]);
      } else {
        Kill(alive[i].handle).IgnoreError();
        lost.push_back(alive[i]);
      }
    }
    if (held.empty()) {
      Event("controller_restarted",
            absl::StrCat("the previous controller died and none of its ", lost.size(),
                         " ranks is left: the job resumes from its last checkpoint"));
      for (auto& m : lost) Kill(m.handle).IgnoreError();
      had_members_ = true;
      return false;
    }
    // Rank 0 holds the newest step: the others catch up from it when the epoch forms.
    std::stable_sort(held.begin(), held.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    for (auto& [step, m] : held) members_.push_back(std::move(m));
    agreed_ = held.front().first;
    // Epochs the dead controller began but never recorded are skipped.
    epoch_ = previous.epoch() + 10;
    restarts_ = previous.restarts();
    last_checkpoint_ = previous.last_checkpoint_step();
    data_epoch_ = previous.data_epoch();
    target_ = std::max(previous.target_replicas(), spec_.min_replicas);
    for (const auto& m : lost) {
      Member replacement =
          Spawn(m.bundle, m.memory, {},
                absl::StrCat("replaces ", ShortId(m.actor_id), ", lost with the controller"));
      if (!replacement.actor_id.empty()) joining_.push_back(std::move(replacement));
    }
    Event("controller_restarted",
          absl::StrCat("the previous controller died; adopted its ", members_.size(),
                       " live ranks at step ", agreed_,
                       lost.empty() ? "" : absl::StrCat(", replacing ", lost.size())));
    return true;
  }

  // The name of the job's placement group.
  std::string ReservationName() const { return absl::StrCat("elastic-", job_id_); }

  void RemoveReservationsNamed(const std::string& name) {
    auto groups = gcs_->ListPlacementGroups();
    if (!groups.ok()) return;
    for (const auto& g : *groups) {
      if (g.name() == name && g.state() != rpc::PG_REMOVED) {
        RemovePlacementGroup(PlacementGroup(g.placement_group_id())).IgnoreError();
      }
    }
  }

  // Kills this job's trainer actors that are not in `keep`: those a dead controller was
  // starting or retiring (they are not in its record).
  void KillStrays(const std::set<std::string>& keep) {
    auto actors = gcs_->ListActors(job_id_);
    if (!actors.ok()) return;
    for (const auto& a : *actors) {
      if (a.class_name() == spec_.trainer && a.state() != rpc::ACTOR_DEAD &&
          !keep.count(a.actor_id())) {
        gcs_->KillActor(a.actor_id(), true).IgnoreError();
      }
    }
  }

  void Train() {
    bool adopted = false;
    if (!previous_.members().empty()) {
      adopted = Adopt(previous_);
    } else {
      KillStrays({});  // none on a first start
      if (restarted_) {
        Event("controller_restarted",
              "the previous controller died before the first step: starting the ranks again");
      }
    }
    if (!adopted) {
      // A reservation a dead controller made and did not fill: ours replaces it. It may have
      // died before recording it, so every live one of the job's name goes.
      if (!previous_.placement_group_id().empty()) {
        RemovePlacementGroup(PlacementGroup(previous_.placement_group_id())).IgnoreError();
      }
      if (restarted_) RemoveReservationsNamed(ReservationName());
      pg_ = PlacementGroup();
      if (!PlaceAndStart()) return;
    }
    absl::Time start = absl::Now();
    int64_t start_step = 0;
    bool need_epoch = true;
    grow_after_ = absl::InfiniteFuture();
    while (!failed_) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        if (resource_event_) {
          resource_event_ = false;
          // A new node lifts a ceiling left by a shrink; freed resources alone do not (the
          // resources a shrunk rank freed are not a reason to bring it back).
          if (node_added_) ceiling_ = spec_.max_replicas;
          node_added_ = false;
          // Grow toward maxReplicas (or the requested size) once things settle.
          target_ = std::min(requested_ > 0 ? requested_ : spec_.max_replicas, ceiling_);
          target_ = std::max(target_, static_cast<int>(members_.size()));
          grow_after_ = absl::Now() + absl::Seconds(spec_.scale_out_debounce_s);
        }
      }
      if (stop_requested_) {
        Condition("Failed", "Stopped", "stopped on request");
        recorder_.SetState(rpc::JOB_STOPPED, "stopped on request", 1);
        return;
      }
      if (members_.empty()) {
        // Nothing left (or nothing yet): wait for ranks; once they are up, start from the last
        // checkpoint (or from the start).
        WaitForJoiners(spec_.min_replicas, absl::Seconds(spec_.below_min_timeout_s));
        if (ReadyJoiners() < spec_.min_replicas) {
          Fail(absl::StrCat("fewer than minReplicas (", spec_.min_replicas,
                            ") ranks could be started within ", spec_.below_min_timeout_s, " s"));
          break;
        }
        for (auto it = joining_.begin();
             it != joining_.end() && static_cast<int>(members_.size()) < target_;) {
          if (it->setup.Ready() && Get(it->setup).ok()) {
            members_.push_back(std::move(*it));
            it = joining_.erase(it);
          } else {
            ++it;
          }
        }
        if (members_.empty()) continue;
        RestartFromCheckpoint(had_members_);
        need_epoch = true;
      }
      Change change = Boundary();
      if (change == Change::kFormed) need_epoch = false;
      if (change == Change::kFailed) need_epoch = true;
      if (static_cast<int>(members_.size()) < spec_.min_replicas) {
        Condition("Restarting", "BelowMinReplicas",
                  absl::StrCat(members_.size(), " ranks < minReplicas ", spec_.min_replicas,
                               ": waiting for replacements"));
        WaitForJoiners(spec_.min_replicas, absl::Seconds(spec_.below_min_timeout_s));
        Boundary();
        if (static_cast<int>(members_.size()) < spec_.min_replicas) {
          Fail(absl::StrCat("below minReplicas (", members_.size(), " < ", spec_.min_replicas,
                            ") for ", spec_.below_min_timeout_s, " s"));
          break;
        }
        need_epoch = false;
      }
      if (need_epoch) {
        if (!FormEpoch(epoch_ == 0 ? "start" : "recovery")) {
          std::vector<size_t> all(members_.size());
          std::iota(all.begin(), all.end(), 0);
          RemoveDead(all, /*only_confirmed=*/true);
          if (++consecutive_failures_ > 5)
            Fail("the group could not be formed five times in a row");
          continue;
        }
        need_epoch = false;
      }
      had_members_ = true;
      if (!running_) {
        running_ = true;
        Condition("Running", "Training", absl::StrCat("world size ", members_.size()));
        start = absl::Now();
        start_step = agreed_;
      }
      if (spec_.TotalSteps() > 0 && agreed_ >= spec_.TotalSteps()) break;
      if (trainer_done_) break;
      std::vector<size_t> lost;
      std::string error;
      if (RunStep(&lost, &error)) {
        consecutive_failures_ = 0;
        ++agreed_;
        if (step_log_) {
          // For benchmarks: when each step was agreed, and by how many ranks.
          *step_log_ << agreed_ << " " << absl::ToUnixMillis(absl::Now()) << " " << members_.size()
                     << std::endl;
        }
        double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
        if (elapsed > 0) steps_per_second_ = static_cast<double>(agreed_ - start_step) / elapsed;
        CheckpointIfDue();
        if (agreed_ % 10 == 0 || agreed_ == spec_.TotalSteps()) PublishStatus();
        continue;
      }
      // The step failed: survivors go on without the dead at once (epoch + 1); the dead are
      // replaced by policy and join later.
      size_t before = members_.size();
      RemoveDead(lost, /*only_confirmed=*/false);
      if (members_.size() == before && ++consecutive_failures_ >= 3) {
        // Nobody died, yet the step keeps failing: a bug, not a fault to heal.
        Fail(absl::StrCat("step ", agreed_, " failed three times without a rank dying: ", error));
        break;
      }
      if (members_.size() == before) {
        // Nobody died: say what failed (the first line of the error).
        Event("step_failed",
              absl::StrCat("step ", agreed_, ": ", error.substr(0, error.find('\n'))));
      }
      Condition("Restarting", members_.size() < before ? "RankLost" : "StepFailed",
                absl::StrCat("step ", agreed_, " failed; world size now ", members_.size()));
      need_epoch = true;
    }
    if (failed_) {
      Condition("Failed", "Failed", failure_);
      recorder_.SetState(rpc::JOB_FAILED, failure_, 1);
      return;
    }
    // What the trainer wants drivers to see (e.g. final weights), from rank 0.
    if (!members_.empty()) {
      auto results = Get(members_[0].trainer().Query(trainer_query::kResults), kTimeouts.results);
      if (results.ok()) {
        recorder_.Update([&](rpc::JobInfo* job) { job->mutable_elastic()->set_results(*results); });
      }
    }
    Condition(
        "Succeeded", "Completed",
        absl::StrCat(agreed_, " steps, final loss ", last_loss_, ", world size ", members_.size()));
    recorder_.SetState(rpc::JOB_SUCCEEDED, absl::StrCat("completed ", agreed_, " steps"), 0);
  }

  // Finds which members are dead (those in `suspects`, plus any the GCS reports dead),
  // removes them, and applies the policies.
  void RemoveDead(const std::vector<size_t>& suspects, bool only_confirmed) {
    std::set<size_t> check(suspects.begin(), suspects.end());
    for (size_t r = 0; r < members_.size(); ++r) {
      rpc::ActorInfo info = ActorState(members_[r].actor_id);
      if (info.state() == rpc::ACTOR_DEAD) check.insert(r);
    }
    std::vector<size_t> dead;
    if (only_confirmed) {
      for (size_t r : check) {
        if (ActorState(members_[r].actor_id).state() == rpc::ACTOR_DEAD) dead.push_back(r);
      }
    } else {
      dead = ConfirmDeaths(std::vector<size_t>(check.begin(), check.end()));
    }
    std::vector<Member> gone;
    for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
      gone.push_back(members_[*it]);
      members_.erase(members_.begin() + static_cast<long>(*it));
    }
    for (const auto& m : gone) {
      rpc::ActorInfo info = ActorState(m.actor_id);
      absl::Time until = absl::Now() + kTimeouts.death_record;
      while (info.state() != rpc::ACTOR_DEAD && absl::Now() < until) {
        absl::SleepFor(kTimeouts.poll);
        info = ActorState(m.actor_id);
      }
      HandleDeath(m, info);
    }
    PublishStatus();
  }

  const std::string job_id_;
  const std::string spec_yaml_;
  JobRecorder recorder_;
  JobSpec spec_;
  gcs::GcsClient* gcs_ = nullptr;
  std::string group_name_;
  PlacementGroup pg_;
  bool restarted_ = false;       // a previous incarnation of this controller died
  rpc::ElasticStatus previous_;  // what it left
  std::vector<Member> members_;  // rank order
  std::vector<Member> joining_;
  std::vector<Member> retiring_;
  std::set<std::string> hung_;  // actors killed for hanging (their death is a "hang")
  std::vector<int> scale_in_ranks_;
  RestartBudget budget_{0, absl::ZeroDuration()};  // set from the spec
  int64_t epoch_ = 0;
  int64_t agreed_ = 0;
  int64_t data_epoch_ = 0;
  int64_t last_checkpoint_ = 0;
  double last_loss_ = 0;
  double steps_per_second_ = 0;
  int restarts_ = 0;
  int target_ = 0;
  int requested_ = 0;      // a user's scale request (0: none)
  int ceiling_ = 1 << 30;  // after a shrink: no growth past this until a node joins
  int consecutive_failures_ = 0;
  bool had_members_ = false;
  bool running_ = false;
  bool failed_ = false;
  bool stop_requested_ = false;
  std::string failure_;
  std::unique_ptr<std::ofstream> step_log_;
  absl::Time grow_after_ = absl::InfiniteFuture();

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool resource_event_ ABSL_GUARDED_BY(mu_) = false;
  bool node_added_ ABSL_GUARDED_BY(mu_) = false;
  // The members' actors (for the subscription thread) and those of them reported dead since
  // the membership was last published.
  std::map<std::string, Handle> live_members_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dead_members_ ABSL_GUARDED_BY(mu_);
  std::thread lease_thread_;
  bool trainer_done_ = false;  // rank 0's last step said its loop returned
  std::thread thread_;
};

}  // namespace

void RegisterController() {
  static internal::ActorRegistrar<Controller, std::string, std::string> registrar(
      "ElasticController");
  static internal::MethodRegistrar<Controller> start("ElasticController", "Start",
                                                     &Controller::Start);
  static internal::MethodRegistrar<Controller> describe("ElasticController", "Describe",
                                                        &Controller::Describe);
}

}  // namespace phalanx::elastic
