// Internal to elastic/: the ElasticController actor's class (controller.h says what it
// does). Its work is split over three files along its seams:
//   controller.cc   the lifecycle: start, lease, adoption of a dead controller's ranks, the
//                   main loop, the end
//   membership.cc   ranks joining and leaving: spawning, epochs, deaths and their policies,
//                   scaling, the status it publishes
//   steps.cc        one step on every rank, hangs, checkpoints
// The record it keeps is a JobRecorder's (job_recorder.h); what it decides on a death is the
// policies' (policy.h); what it calls on the ranks is a TrainerClient (trainer_protocol.h).
//
// Threads: the step loop (Main, and everything it calls) owns the members and the counters.
// What other threads learn reaches it on one queue, the inbox (inbox.h): the subscription
// thread (OnMessage) posts deaths and resource changes, the recorder's writer and the KV
// subscription post scale and stop requests, and the loop takes them (TakeInbox) where it
// looks up. Besides posting, the subscription thread reads only what mu_ guards (to abort the
// survivors of a death at once), and the lease thread only stopping_.
#pragma once

#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actors/api.h"
#include "base/ids.h"
#include "elastic/inbox.h"
#include "elastic/job_recorder.h"
#include "elastic/job_spec.h"
#include "elastic/lifecycle.h"
#include "elastic/policy.h"
#include "elastic/recovery.h"
#include "elastic/trainer_protocol.h"
#include "worker/actor_client.h"
#include "worker/worker_host.h"

namespace phalanx::elastic {

using Handle = ActorHandle<AnyActor>;
using Metrics = StepMetrics;

// A call failed because its actor is gone: it died, or the connection to it broke (while the
// GCS may still call it alive: a frozen process). Its rank counts as lost.
inline bool LostTheActor(const absl::Status& s) {
  return worker::IsActorDied(s) || worker::ErrorKind(s) == worker::error_kind::kActorUnavailable;
}

// The call answered, with an error (a rank that will not reach the collectives the others
// wait in).
template <typename T>
bool AnsweredWithError(const ObjectRef<T>& call) {
  return call.Ready() && !Get(call, absl::ZeroDuration()).ok();
}

// Why the controller aborts the other ranks' collectives, naming the rank that forced it:
// the first of `ranks` (whose calls are `refs`) that is dead, or whose call answered with an
// error. `when` ends the sentence ("in step 40", "as epoch 3 formed"). The aborted
// collectives' errors carry it to the user's code (torch.distributed's included).
template <typename T, typename Members>
std::string AbortReason(const std::vector<ObjectRef<T>>& refs, const std::vector<size_t>& ranks,
                        const Members& members, const std::set<std::string>& dead,
                        const std::string& when) {
  for (size_t i = 0; i < refs.size(); ++i) {
    const std::string& id = members[ranks[i]].actor_id;
    if (dead.count(id))
      return absl::StrCat("rank ", ranks[i], " (actor ", ShortId(id), ") died ", when);
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    if (AnsweredWithError(refs[i])) {
      return absl::StrCat("rank ", ranks[i], "'s call failed ", when, ": ",
                          Get(refs[i], absl::ZeroDuration()).status().message());
    }
  }
  return absl::StrCat("a rank was lost ", when);
}

// Every bound the controller waits with, named in one place. The job's own bounds (the hang
// timeout, the controller lease, the below-min timeout, the scale-out debounce, each phase's
// bound: JobSpec `phases`) are spec settings; these are the controller's.
struct Timeouts {
  // How often the step loop looks up from waiting for a step (to notice a member's death).
  absl::Duration step_wait_slice = absl::Milliseconds(20);
  // After a member died and the survivors were told to abort, how long their answers may take.
  absl::Duration aborted_step_grace = absl::Seconds(2);
  // After the hang timeout, how long the members have to answer a Ping (answered on a lane of
  // its own, not the step's: a live rank answers in milliseconds even mid-collective). A rank
  // that does not answer within it is taken for stopped or deadlocked and restarted.
  absl::Duration hang_ping = absl::Milliseconds(500);
  // The liveness probe (spec hang.silentSeconds): a call is probed with a Ping to every rank
  // once it has run probe_factor times the last call's time, and at least probe_after; while
  // a rank has not answered, the GCS's view of its node is read every probe_check. A probe
  // costs one Ping per rank, so it may start early; the silence it waits for is the bound.
  double probe_factor = 4;
  absl::Duration probe_after = absl::Milliseconds(100);
  absl::Duration probe_check = absl::Milliseconds(100);
  // A rank whose probe has not answered within this (or half the silence, if shorter) gets a
  // fresh Ping, once its host is seen up; the rank is frozen when that one goes unanswered
  // for the whole silence. Early costs only a Ping and a knock: a live rank answers in
  // milliseconds, and the verdict still waits out the silence.
  absl::Duration probe_first_look = absl::Milliseconds(250);
  // A silent rank's node manager's port is knocked on (a TCP handshake) and waited for this
  // long: a host that answers is up and reachable now. One that does not is left to its
  // heartbeats and the node timeout.
  absl::Duration probe_knock = absl::Milliseconds(100);
  // While the job waits for room or for its ranks to start: how often a stop request is seen.
  absl::Duration stop_check = absl::Milliseconds(200);
  // A node whose heartbeat the GCS heard within this is up now; one silent for longer while a
  // rank's fresh Ping waits may have lost its link meanwhile (the Ping may be held in TCP
  // retransmission), so that Ping proves nothing and another goes once the host is back.
  absl::Duration probe_heartbeat_gap = absl::Seconds(1);
  // Fetching a step's answer once it is ready.
  absl::Duration step_result = absl::Seconds(30);
  // A new rank not yet ready: how often the GCS is asked whether it was placed (its start is
  // timed by phases.startSeconds from then).
  absl::Duration joiner_look = absl::Seconds(1);
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
  // The members' answers to which hosts they reach (each knocks for kReachTimeoutMs).
  absl::Duration reach = absl::Seconds(1);
  // How often ranks left out by a partition are asked whether they reach everyone again.
  absl::Duration rejoin_check = absl::Seconds(2);
  // Each node's answer to which snapshots of the job it holds (asked of all at once, when no
  // rank holds the state). A node that does not answer within it is left out.
  absl::Duration snapshot_list = absl::Seconds(1);
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
  // A rank to be: when it was asked for, when it was first seen placed on a node (its start
  // is bounded from then by phases.startSeconds), and when the GCS was last asked.
  absl::Time spawned = absl::InfinitePast();
  absl::Time placed = absl::InfiniteFuture();
  absl::Time looked = absl::InfinitePast();

  TrainerClient trainer() const { return TrainerClient(handle); }
};

class Controller {
 public:
  // Starts at once: a controller restarted by the runtime carries on by itself.
  Controller(std::string job_id, std::string spec_yaml);
  ~Controller();

  bool Start();
  std::string Describe() { return recorder_.Describe(); }

 private:
  void Condition(const std::string& type, const std::string& reason, const std::string& message) {
    recorder_.Condition(type, reason, message);
  }
  void Event(const std::string& kind, const std::string& message) {
    recorder_.Event(kind, message, static_cast<int>(members_.size()), epoch_);
  }
  void Fail(const std::string& message) {
    failed_ = true;
    failure_ = message;
  }
  // Moves the training loop's state machine (lifecycle.h) with `event` and carries out the
  // transition: its condition, its event, its failure.
  void Apply(const LoopEvent& event);
  // The name of the job's placement group and of its ranks' collective group.
  std::string GroupName() const { return absl::StrCat("elastic-", job_id_); }

  // ---- lifecycle (controller.cc) -----------------------------------------------------------

  // Renews this controller's lease through the GCS for as long as the actor lives (also after
  // the job ended: an expired lease would start a controller again). Each renewal takes the
  // controller's lock, so a controller deadlocked on it stops renewing too. A renewal that
  // says this attempt was replaced (a controller on a host that came back) ends the process:
  // two controllers must never drive one job.
  void LeaseLoop(worker::HostedActor me, absl::Duration lease, absl::Duration running);

  void OnMessage(const rpc::PubMessage& m);

  // A member's actor died (its process, or its node): the survivors' step in flight cannot
  // finish, and on a host that vanished their collective would wait for its timeout. Abort
  // it now; the step loop then removes the dead and forms the next epoch.
  void OnActorMessage(const rpc::ActorInfo& actor);

  void Main();

  // The job's loop, turn by turn, until it ends (Finish) or stops.
  void Train();
  // What a part of a turn of Train says: go on to the turn's next part, start the next turn,
  // end the job (Finish), or stop (a stop request, the controller shutting down).
  enum class Turn { kOn, kNextTurn, kEnd, kStop };
  // Adopts the ranks a previous controller left, or places and starts new ones; false when
  // the job ended there.
  bool Begin();
  Turn TakeSignals();
  Turn StartFromNothing();
  Turn KeepMinReplicas();
  Turn EnsureEpoch();
  // Runs one step call; a failed one removes the dead and asks for a new epoch.
  Turn StepOnce();
  void Finish();

  // The job's first start: reserves the ranks' resources (one placement group) and starts
  // them. False (and the job Failed) when they cannot be placed or started.
  bool PlaceAndStart();
  // Its placement group, reserved and placed; false (the job Failed or Stopped) when not.
  bool Reserve(const std::vector<std::map<std::string, double>>& bundles);
  // `phalanx job stop` came before the first step: the job ends STOPPED, saying in `phase`.
  void StoppedWhile(const std::string& phase);

  // A previous incarnation of this controller died (its process was killed, or its node):
  // the ranks it left still hold their state in memory. The live ones are adopted, the lost
  // ones replaced, and the job goes on from the newest step they hold, without a checkpoint.
  // False when no rank is left to adopt (the job then restarts from its last checkpoint).
  bool Adopt(const rpc::ElasticStatus& previous);

  void RemoveReservationsNamed(const std::string& name);

  // Kills this job's trainer actors that are not in `keep`: those a dead controller was
  // starting or retiring (they are not in its record).
  void KillStrays(const std::set<std::string>& keep);

  // The job is over (its record says how): this controller's actor ends for good, so that it
  // is not started again when its host dies.
  void Leave();

  // ---- membership (membership.cc) ----------------------------------------------------------

  // Copies the controller's view into the record; the recorder's writer saves it.
  void PublishStatus();

  // Takes what the inbox holds into the loop's view, in arrival order: deaths of members
  // (dead_, detected_at_), resource changes, scale and stop requests.
  void TakeInbox();
  // Whether `actor_id` is a member's actor (not a joiner's, a retiring or a cut-off rank's).
  bool IsMember(const std::string& actor_id) const;
  // The members the GCS has called dead since the membership was last published.
  std::set<std::string> DeadMembers();
  // Whether `phalanx job stop` was asked.
  bool StopRequested();

  // Starts a trainer actor; it joins at a step boundary once ready.
  Member Spawn(int bundle, double memory, const std::vector<std::string>& avoid,
               const std::string& why);

  rpc::ActorInfo ActorState(const std::string& actor_id);
  // The ids of the live nodes in `nodes` that allowed_nodes_ names (by node id, a node id's
  // first 8 or more characters, hostname or IP address); every live node when it names none.
  std::vector<std::string> AllowedNodeIds(const std::vector<rpc::NodeInfo>& nodes) const;
  // Sets the nodes the ranks may use (a scale request's): ranks on other nodes leave at the
  // next membership change and joiners there are dropped.
  void SetAllowedNodes(const std::vector<std::string>& names);
  // The members that count toward the target: those not displaced.
  int Placed() const;

  // Forms epoch `epoch_ + 1` with `members_` (in rank order) and rolls everyone back to the
  // agreed state; newcomers then receive it from rank 0. Returns false if it failed.
  bool FormEpoch(const std::string& why);
  // After a step or an epoch failed with every member alive: asks each member which members'
  // hosts it reaches (trainer_query::kReachPrefix). When some pair cannot reach each other
  // (both ways checked), the members of the largest set that all reach each other stay, and
  // the others leave the group for cut_off_ (alive; they rejoin once their paths heal). True
  // when some left.
  bool LeaveOutTheCutOff();
  // Which of `ranks` reach which of `targets`' hosts: reach[i][j]. A rank that does not
  // answer in time (or is null: not asked) reaches nothing.
  std::vector<std::vector<bool>> Reach(const std::vector<Member*>& ranks,
                                       const std::vector<std::string>& targets);
  // Cut-off ranks whose paths to every member healed join again (at a boundary). The question
  // goes out every kTimeouts.rejoin_check and its answers are read at a later boundary: the
  // steps do not wait for knocks that a partition leaves unanswered.
  void RejoinHealed(std::vector<Member>* ready);
  // Whether RejoinHealed has something to do at the next boundary.
  bool RejoinDue() const;
  // Whether this controller's host cannot open a TCP connection to member r's host at all
  // (a handshake with its worker's port gets no answer within probe_knock): a rank that does
  // not answer for that reason is cut off from here, not frozen or stuck, and is not
  // restarted for it (LeaveOutTheCutOff finds it when the step fails).
  bool CutOffFromHere(size_t r);

  void CheckNetwork();

  // A rank is gone: the policies decide (elastic/policy.h); this carries it out.
  // `world_before`: the world size before it left (its recovery is timed from here); -1 for
  // a rank that had not joined yet.
  void HandleDeath(const Member& m, const rpc::ActorInfo& info, int world_before);

  // Opens the recovery timeline of a fault on `actor_id`'s rank (once per rank), found at
  // `detected` (infinite past: when the controller first knew, DetectedAt).
  void OpenRecovery(const std::string& actor_id, rpc::FaultKind kind, const std::string& message,
                    absl::Time fault, int world_before, absl::Time detected = absl::InfinitePast());
  // When the controller first knew `actor_id` was dead.
  absl::Time DetectedAt(const std::string& actor_id);
  // A step was agreed: the recoveries and the ranks' step times move on.
  void StepAgreed(const std::vector<Metrics>& results);

  // A member's death in the policies' terms.
  RankDeath ToRankDeath(const Member& m, const rpc::DeathCause& cause) const;

  // Waits (bounded) until the GCS says each member in `candidates` is dead or alive.
  std::vector<size_t> ConfirmDeaths(const std::vector<size_t>& candidates);
  // Polls the GCS (every kTimeouts.poll) until it calls `actor_id` DEAD or `bound` passed;
  // returns its last record.
  rpc::ActorInfo AwaitDead(const std::string& actor_id, absl::Duration bound);
  // `m` failed a call: unless it `answered` (with an error, so it lives), waits up to
  // kTimeouts.confirm_death for the GCS to call it dead; kills it if it is still called
  // alive, and returns its record once DEAD (or after kTimeouts.death_record).
  rpc::ActorInfo MakeSureDead(const Member& m, bool answered);

  // A phase of the job and its bound: "forming epoch 4", "phases.formSeconds", 120.
  struct Phase {
    std::string name;
    const char* setting;
    double seconds;
    absl::Time Deadline(absl::Time began) const { return began + absl::Seconds(seconds); }
  };
  Phase FormPhase(int64_t epoch) const;
  Phase SyncPhase(int64_t epoch) const;
  Phase CheckpointPhase(const std::string& what) const;

  // Waits for every answer to `refs` (refs[i] a call to rank ranks[i]: an epoch's Reconfigure
  // or SyncState, rank 0's checkpoint), within `phase`'s bound. Once one of those ranks died,
  // its call failed, or it froze (found by the liveness probe and killed as hung, "<...>
  // `when`"), it stops waiting, and the ranks whose calls are still out are told to abort;
  // so they are when the job is asked to stop. Past the bound: PhaseTimedOut. Returns until
  // when the answers are worth waiting for (the phase's deadline; after an abort,
  // kTimeouts.aborted_step_grace: a rank stuck in work of its own does not end with it).
  absl::Time AwaitCalls(const std::vector<ObjectRef<int64_t>>& refs,
                        const std::vector<size_t>& ranks, const std::string& when,
                        const Phase& phase);
  // `phase` ran past its bound with the calls in `refs` unanswered: a `phase_timeout` event
  // names the phase and those ranks. Each is Pinged; one that does not answer within
  // kTimeouts.hang_ping is restarted as hung, and so is one that answers but has not finished
  // while the others have (a rollback that never ends; rank 0's checkpoint stuck on its disk:
  // the others hold the state). When none finished, the live ones may only be waiting for
  // each other (a rendezvous across a cut link): they are told to abort, so that the phase
  // fails and is tried again (an epoch that cannot form five times in a row fails the job,
  // naming this).
  void PhaseTimedOut(const std::vector<ObjectRef<int64_t>>& refs, const std::vector<size_t>& ranks,
                     const Phase& phase, absl::Time began);
  // phases.startSeconds: a new rank whose setup has not answered that long after it was seen
  // placed is restarted as hung, its policy deciding (a rank waiting for room is not timed:
  // that is the job's below-min wait).
  void ExpireJoiners();
  // New ranks whose setup failed (or whose call broke): each is handled as a death (its
  // policy starts another, or fails the job).
  void DropFailedJoiners();
  // Rank 0's answer to `call` (a checkpoint's save or load), within `phase`'s bound, waited for
  // through AwaitCalls (a frozen rank 0 is killed as hung, "<...> `when`").
  absl::StatusOr<int64_t> Rank0Answer(const ObjectRef<int64_t>& call, const std::string& when,
                                      const Phase& phase);
  // Rank r's answer in `refs`; a rank whose call lost its actor (died, or the connection broke)
  // goes into unreachable_.
  absl::StatusOr<int64_t> EpochAnswer(const std::vector<ObjectRef<int64_t>>& refs, int r,
                                      absl::Time deadline);

  // Finds which members are dead (those in `suspects`, plus any the GCS reports dead),
  // removes them, and applies the policies. With `only_confirmed` (after an epoch failed to
  // form), a suspect goes only when the GCS calls it dead, it was killed for hanging, or its
  // Reconfigure lost the actor (unreachable_, confirmed); otherwise every suspect's death is
  // confirmed (ConfirmDeaths).
  void RemoveDead(const std::vector<size_t>& suspects, bool only_confirmed);

  // Between steps: joiners that are ready, scale requests, growth. Returns false when the
  // membership change failed (the caller retries via the failure path).
  enum class Change { kNone, kFormed, kFailed };

  Change Boundary();
  // Boundary's parts. The joiners whose setup is done, taken out of joining_.
  std::vector<Member> TakeReady();
  // Ranks on nodes the job may no longer use leave, once a rank that holds the state stays.
  void RetireDisplaced(std::vector<std::string>* changes);
  // Ready joiners join up to the target (a straggler's replacement takes its place); the
  // rest stay warm in joining_.
  void Admit(std::vector<Member> ready, std::vector<std::string>* changes);
  // Ranks named by a scale request, then the highest, leave down to the target.
  void ScaleIn(std::vector<std::string>* changes);

  // Grows toward the target when some node has room for a rank (after a debounce since the
  // last resource event), keeping the new ranks warm until they join.
  void MaybeGrow();
  // The ranks MaybeGrow would start now toward the target (0 before the debounce ends).
  int GrowWanted() const;

  // Applies a scale request taken from the inbox (elastic/job_keys.h).
  void TakeRequests();

  void WaitForJoiners(int want, absl::Duration timeout);
  // Whether the members and the new ranks placed (ready, or setting up within
  // phases.startSeconds) make minReplicas: then the job waits for them past
  // belowMinTimeoutSeconds, which bounds only the wait for room.
  bool StartingEnough();
  // How long to wait for joiners toward a below-min `deadline`: what is left of it, or (past
  // it, while StartingEnough) one look more.
  absl::Duration BelowMinWait(absl::Time deadline);

  int ReadyJoiners();
  // The members and the new ranks placed on a node (ready, or setting up).
  int MembersAndPlacedJoiners();

  // ---- the step loop (steps.cc) ------------------------------------------------------------

  // Runs steps from `agreed_` on every member, as many as one call covers (StepsPerCall).
  // Returns true when every rank answered, with the steps they ran in `*ran`; otherwise the
  // members that died (their actors) are in `lost`.
  // `results`: each rank's answer, in rank order, when every rank answered.
  // Unless the boundary after it has work to do (MayRunAhead), the next call is sent at once,
  // before this one's answers: each rank starts it as soon as it finished this one, and the
  // controller's round trip is off the ranks' path. A call sent ahead commits only what was
  // agreed when it was sent, so "0 committed steps lost" holds as in lock-step.
  bool RunStep(int64_t* ran, std::vector<size_t>* lost, std::string* error,
               std::vector<Metrics>* results);
  // How many steps a call from step `first` covers: what fits in spec_.step_call_ms at the
  // typical pace of the last calls (TypicalStepMs over recent_step_ms_), at least 1 and at
  // most kMaxStepsPerCall, never past the last step or a step a checkpoint is due at.
  int64_t StepsPerCall(int64_t first) const;
  // TypicalStepMs of the last kStepHistory agreed calls; 0: none agreed yet.
  double TypicalCallStepMs() const;
  // Whether a call from step `next` may be sent before the call before it is answered:
  // nothing waits for the boundary between them (joiners, requests, resources, a checkpoint,
  // the end).
  bool MayRunAhead(int64_t next);

  // No step finished within the hang timeout: find the stuck ranks (they do not answer, or
  // compute while the others wait in a collective) and restart them; unblock the rest.
  // Returns the ranks killed.
  std::vector<size_t> HandleHang(const std::vector<ObjectRef<Metrics>>& refs);
  // How long a call of `count` steps runs before it is probed (kTimeouts.probe_*).
  absl::Duration ProbeAfter(int64_t count) const;
  // A rank of a call that is taken for frozen, and what showed that its host is up.
  struct Frozen {
    size_t rank;
    std::string proof;
  };
  // The liveness probe (hang.silentSeconds) over a call out to every rank (a step, or a
  // Reconfigure): a Ping to every rank once the call ran a while (answered on the ranks' ping
  // lane, whatever the call does), and a look at the silent ranks' hosts.
  struct LivenessProbe {
    explicit LivenessProbe(absl::Time first) : at(first) {}
    ~LivenessProbe() { EndConfirms(); }
    LivenessProbe(const LivenessProbe&) = delete;
    LivenessProbe& operator=(const LivenessProbe&) = delete;
    void EndConfirms();
    absl::Time at;  // when the Pings go (infinite: no probe)
    std::vector<ObjectRef<std::vector<int64_t>>> pings;
    absl::Time probed = absl::InfinitePast();  // when they went
    absl::Time check_at = absl::InfiniteFuture();
    // A silent rank whose host was seen up is pinged once more, on a connection of its own
    // made then (its first Ping may have gone out while the host's link was down, and wait
    // in TCP retransmission long after the link is back).
    struct Confirm {
      std::shared_ptr<worker::ActorClient> client;
      ObjectRef<std::vector<int64_t>> ping;
      absl::Time sent;
      bool disturbed = false;  // its host's heartbeats stopped for a while since it went
      bool told_runs = false;  // logged that its process runs while its Ping waits
    };
    std::map<size_t, Confirm> confirms;  // by rank
  };
  // Moves `probe` on, given which ranks answered the call; returns the ranks found frozen
  // (none, most times). Once every rank answered the call or the Ping, it probes again
  // `again` later.
  std::vector<Frozen> Probe(LivenessProbe* probe, const std::vector<bool>& answered,
                            absl::Duration again);
  // Which of the `silent` ranks (they answered neither the call nor the Pings sent at the
  // probe's start) are frozen: on evidence that outlives the network, not on a Ping that may
  // have gone out while their host's link was down. Once a silent rank's host is seen up
  // (its node manager's port answers a knock, kTimeouts.probe_knock, or the GCS heard its
  // node's heartbeat within kTimeouts.probe_heartbeat_gap), the rank is pinged again on a
  // fresh connection;
  // it is frozen when that Ping too goes unanswered for hang.silentSeconds (and the first
  // for as long), and its host is seen up after that. A host cut off answers no knock and
  // stops its heartbeats, and is left to the node timeout; a link that comes back lets the
  // fresh Ping through.
  // A busy machine delays a Ping without end, but stops no process: a rank is frozen only
  // when its node's latest heartbeat also lists its process among those that cannot run
  // (NodeInfo.stopped_workers: stopped by SIGSTOP or a tracer, or exited). One whose process
  // can run is slow, and left to the hang timeout (a node that does not report: the silence
  // alone).
  std::vector<Frozen> FrozenRanks(const std::vector<size_t>& silent, LivenessProbe* probe);
  // Kills rank r as hung (an event saying `what`, its recovery opened at `last_progress`: the
  // step's start, or the formation's).
  // `event` false: the caller's event said it already.
  void KillHung(size_t r, const std::string& what, absl::Time last_progress, bool event = true);

  // Sends rank 0 the checkpoint that is due, if any, without waiting for it (first taking in
  // the one before, if it answered).
  void CheckpointIfDue();
  // Takes in the checkpoint in flight once rank 0 answered (`wait`: waits for it, within
  // phases.checkpointSeconds): the job's pointer moves to it and older files beyond
  // checkpoint.numToKeep go. One that ran past phases.checkpointSeconds is given up (an event
  // says so; training is not held up for it).
  void CollectCheckpoint(bool wait);
  // Whether a checkpoint is taken once `step` steps are agreed.
  bool CheckpointDueAt(int64_t step) const;
  // intervalSteps: auto: the time between checkpoints, sqrt(2 × save time × mean time between
  // faults) (Young/Daly), the latter from the job's faults so far and a prior of one an hour.
  absl::Duration AutoCheckpointInterval() const;

  // No rank holds the state (the start, or every rank holding it was lost): rank 0 loads the
  // last checkpoint, if any, and the others get it when the epoch forms. `lost` says what was
  // lost, for the event ("" at the start). False if rank 0 died or hung before it answered:
  // nothing changed, and the next epoch's rank 0 tries again.
  bool RestartFromCheckpoint(const std::string& lost);
  // The newest snapshot of the job's state that any node holds in memory (node/snapshot_store.h),
  // newer than `disk_step` (the last checkpoint's) or as new, is loaded by a rank, the nearest
  // to it first (one on that node, which reads it in place), and moved to rank 0. kNone: no
  // such snapshot (or it went before it was read); kRankLost: the loading rank died or hung.
  enum class Restored { kNone, kRestored, kRankLost };
  Restored RestoreFromSnapshot(const std::string& lost, int64_t disk_step);

  // ---- state ------------------------------------------------------------------------------

  const std::string job_id_;
  const std::string spec_yaml_;
  Inbox inbox_;  // before recorder_, which posts to it until it finishes
  JobRecorder recorder_;
  JobSpec spec_;
  gcs::GcsClient* gcs_ = nullptr;
  PlacementGroup pg_;
  bool restarted_ = false;       // a previous incarnation of this controller died
  rpc::ElasticStatus previous_;  // what it left
  std::vector<Member> members_;  // rank order
  std::vector<Member> joining_;
  std::vector<Member> retiring_;
  // Members left out because they cannot reach others while the GCS sees them all (a
  // data-plane partition); alive, and asked again every kTimeouts.rejoin_check.
  std::vector<Member> cut_off_;
  absl::Time cut_off_checked_ = absl::InfinitePast();
  // RejoinHealed's question in flight: the cut-off ranks' answers about the members' hosts,
  // the members' about theirs, and who was asked (actor ids, in order).
  struct RejoinCheck {
    std::vector<ObjectRef<std::string>> out_in, in_out;
    std::vector<std::string> outside, inside;
    absl::Time asked = absl::InfinitePast();
  };
  std::optional<RejoinCheck> rejoin_;
  std::set<std::string> hung_;  // actors killed for hanging (their death is a "hang")
  // Members whose Reconfigure failed in the last epoch formed because the actor died or its
  // connection broke (RemoveDead confirms their deaths).
  std::set<std::string> unreachable_;
  std::vector<int> scale_in_ranks_;
  // The nodes the ranks may use, as named (spec_.nodes, then scale requests); empty: any.
  std::vector<std::string> allowed_nodes_;
  // Members on nodes the job may no longer use that stay until others hold the state.
  std::set<std::string> displaced_;
  RestartBudget budget_{0, absl::ZeroDuration()};  // set from the spec
  int64_t epoch_ = 0;
  int64_t agreed_ = 0;
  int64_t data_epoch_ = 0;
  int64_t last_checkpoint_ = 0;
  // The checkpoint rank 0 writes in the background (the steps go on meanwhile), taken in by
  // CollectCheckpoint once it answers; at most one at a time.
  struct CheckpointInFlight {
    ObjectRef<int64_t> call;
    std::string path;
    int64_t step = 0;
    absl::Time sent;
  };
  std::optional<CheckpointInFlight> checkpoint_in_flight_;
  // For intervalSteps: auto (Young/Daly): the last save's time, and when the last one began.
  double checkpoint_save_s_ = 0;
  absl::Time last_checkpoint_sent_ = absl::InfinitePast();
  double last_loss_ = 0;
  double steps_per_second_ = 0;
  int64_t steps_per_call_ = 0;  // of the last agreed call
  int restarts_ = 0;
  std::map<std::string, int> restarts_by_cause_;  // by fault kind (FaultName: fault.h)
  RecoveryTimeline timeline_;
  // Ranks whose fault already opened a recovery, and its kind (a rank killed for hanging
  // dies KILLED_BY_USER, but its fault is the hang).
  std::map<std::string, rpc::FaultKind> recovery_opened_;
  absl::Time step_started_ = absl::InfinitePast();
  // Step `ahead_step_` of epoch `ahead_epoch_`, sent to every member before the step before
  // it was answered (RunStep); empty when none is out.
  std::vector<ObjectRef<Metrics>> ahead_;
  int64_t ahead_step_ = -1;
  int64_t ahead_count_ = 0;  // the steps it covers
  int64_t ahead_epoch_ = -1;
  absl::Time step_failed_ = absl::InfiniteFuture();  // the running step failed here
  std::vector<rpc::RankStepTime> step_times_;        // of the last agreed call, per step
  std::deque<double> recent_step_ms_;  // each of the last kStepHistory calls' slowest step
  double step_skew_ = 1;
  double network_check_skew_ = 0;  // of the last network check (0: none yet)
  int target_ = 0;
  int requested_ = 0;      // a user's scale request (0: none)
  int ceiling_ = 1 << 30;  // after a shrink: no growth past this until a node joins
  int consecutive_failures_ = 0;
  std::string last_phase_timeout_;  // the last phase_timeout event, for a failure's message
  bool had_members_ = false;
  bool running_ = false;
  JobPhase phase_ = JobPhase::kStarting;  // the training loop's state (lifecycle.h)
  bool failed_ = false;
  // From the inbox: a stop, a scale request not yet applied, a resource change (and whether a
  // node joined) not yet acted on, the members the GCS called dead and when each was learned.
  bool stop_requested_ = false;
  std::string scale_request_;
  bool resource_event_ = false;
  bool node_added_ = false;
  std::set<std::string> dead_;
  std::map<std::string, absl::Time> detected_at_;
  std::string failure_;
  std::unique_ptr<std::ofstream> step_log_;
  absl::Time grow_after_ = absl::InfiniteFuture();
  // Train's: whether the next turn forms an epoch, and when and at which step it started
  // running (for steps_per_second_).
  bool need_epoch_ = true;
  absl::Time run_start_;
  int64_t run_start_step_ = 0;
  // When the job went below minReplicas (InfiniteFuture: it is not): failPolicy's
  // belowMinTimeoutSeconds counts from here, through every wait and replacement in between.
  absl::Time below_min_since_ = absl::InfiniteFuture();

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The members' actors (for the subscription thread), and those whose death it already
  // acted on (aborted the survivors, posted) since the membership was last published.
  std::map<std::string, Handle> live_members_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> announced_dead_ ABSL_GUARDED_BY(mu_);
  std::thread lease_thread_;
  bool trainer_done_ = false;  // rank 0's last step said its loop returned
  std::thread thread_;
};

}  // namespace phalanx::elastic
