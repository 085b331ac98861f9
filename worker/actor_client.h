// ActorClient: a process's connection to one actor. Calls are sent in order on one gRPC
// stream to the actor's worker (batched while a write is in flight). When the stream breaks
// while the GCS still calls the worker alive (a reset under load, a link that blipped), the
// client connects to the same worker again and sends the unanswered calls again with their
// sequence numbers: the worker runs none twice (worker/call_ledger.h), whatever
// max_task_retries says, for up to kCallResendWindow. When the worker dies the client follows
// the actor's state from the GCS: calls wait while it restarts and are resent to the new
// worker while their max_task_retries allow, then fail with ActorUnavailable; once the actor
// is DEAD every call fails with ActorDied carrying the cause. Thread-safe.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/common.pb.h"
#include "worker/object_state.h"

namespace phalanx::worker {

// A stream to a worker broke while the GCS still calls the worker alive: the client connects
// again after kCallResendPause, and keeps trying for kCallResendWindow from the first break
// before the calls still out fail with ActorUnavailable. The worker keeps their results
// longer (kCallResultKeep).
inline constexpr absl::Duration kCallResendPause = absl::Milliseconds(200);
inline constexpr absl::Duration kCallResendWindow = absl::Seconds(30);

class ActorClient : public std::enable_shared_from_this<ActorClient> {
 public:
  ActorClient(std::string caller_id, std::string token, rpc::ActorInfo info);
  ~ActorClient();

  const std::string& actor_id() const { return actor_id_; }
  rpc::ActorInfo info() const;

  // Queues a call; the returned state completes with its result.
  // `concurrency_group` names the worker's group to run it in ("": its method's).
  std::shared_ptr<ObjectState> Submit(const std::string& method, std::string args, int encoding = 0,
                                      const std::string& concurrency_group = "");

  // Queues a call whose arguments are not known yet (they wait for other calls' results, as
  // Ray resolves an actor task's arguments before it sends the task): it keeps its place,
  // and this caller's later calls go after it. `Fill` gives its arguments (OK `status`,
  // `value` the packed arguments) or the error that fails it (`value` its detail; the call
  // is then never sent). Returns its result and its sequence number (0 when the result is
  // set already: a dead actor, a closed client).
  std::pair<std::shared_ptr<ObjectState>, uint64_t> Reserve(
      const std::string& method, int encoding = 0, const std::string& concurrency_group = "");
  void Fill(uint64_t seq, const absl::Status& status, std::string value);

  // Cancels the call whose result is `result`, as Ray's cancel of an actor task: its result
  // becomes a TaskCancelled error at once. One not sent yet goes as a no-op; one sent is
  // named to the worker (kCancelMethod), which does not start it, or has the actor cancel
  // it where it can. False when it is not a call of this client, or has its result.
  bool Cancel(const std::shared_ptr<ObjectState>& result);

  // A newer state of the actor (from the GCS subscription or a lookup).
  void OnActorUpdate(const rpc::ActorInfo& info);

  // Fails every queued and in-flight call and stops (the process is shutting down).
  void Close();

 private:
  struct Call {
    uint64_t seq;
    std::string method;
    std::string args;
    int encoding;
    std::string concurrency_group;
    int retries_left;  // -1: forever
    std::shared_ptr<ObjectState> result;
    // Sent to a worker before (queued again to go to the same worker on a new connection):
    // if that worker is replaced first, it counts as a retry.
    bool sent = false;
    // Reserved and not yet filled: it and the calls after it wait in the queue.
    bool reserved = false;
  };
  struct Connection;

  std::pair<std::shared_ptr<ObjectState>, uint64_t> Enqueue(const std::string& method,
                                                            std::string args, int encoding,
                                                            const std::string& concurrency_group,
                                                            bool reserved);
  // Whether the queue's first call may go (it is not waiting for its arguments).
  bool SendableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() && !queue_.front().reserved;
  }
  void ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends queued calls: inline when this is the only call on an established connection (a
  // synchronous caller pays no thread hop), else by the writer thread, which batches what
  // queues up meanwhile and waits for a connection still being made.
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriterLoop();
  void ReadLoop(std::shared_ptr<Connection> connection);
  void OnConnectionLost(const std::shared_ptr<Connection>& connection, const std::string& why);
  // Decides about calls that were in flight on a lost connection, given the actor's state.
  void SettleOrphansLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before a new connection to the same worker: the calls in flight on the lost one go again
  // (or fail, once kCallResendWindow has passed).
  void ResendOrphansLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailAllLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeadStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string caller_id_;
  const std::string token_;
  const std::string actor_id_;

  mutable absl::Mutex mu_;
  rpc::ActorInfo info_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Connection> connection_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Call> queue_ ABSL_GUARDED_BY(mu_);             // not yet sent
  std::map<uint64_t, Call> inflight_ ABSL_GUARDED_BY(mu_);  // sent, unanswered
  std::map<uint64_t, Call> orphans_ ABSL_GUARDED_BY(mu_);   // sent on a lost connection
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_wanted_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int lost_attempt_ ABSL_GUARDED_BY(mu_) = -1;  // attempt whose connection broke
  // When the connection to the current worker broke, until a new one answers.
  absl::Time lost_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

}  // namespace phalanx::worker
