// The worker's side of a call that outlives its connection. A caller whose stream to this
// worker broke while the worker lives (a connection reset under load, a link that blipped)
// opens a new stream and sends its unanswered calls again, with their original sequence
// numbers (worker/actor_client.h). The ledger makes that safe: per caller it knows
// the highest sequence number that arrived, the calls still running, and the results the
// caller has not acknowledged yet. A call sent again is never run twice: its kept result is
// sent at once, or, while it still runs, its result goes to the caller's newest stream.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/worker.grpc.pb.h"

namespace phalanx::worker {

// A caller's results are kept until it acknowledges them (CallBatch.acked_through), or for
// this long after they were sent: longer than a caller tries to reconnect
// (kCallResendWindow, actor_client.h).
inline constexpr absl::Duration kCallResultKeep = absl::Seconds(60);
// A result larger than this is not kept (its copy would double a large state's memory): sent
// again, its call is answered ActorUnavailable ("its result was lost with the connection").
inline constexpr size_t kMaxKeptResultBytes = 16u << 20;

// Writes results to one stream, batching those that arrive while a write is in flight, and
// lets the stream's handler wait until every call that came on it has answered, or a newer
// stream of the same caller took its calls over. After Close nothing is written.
class ResultSink {
 public:
  using Stream = grpc::ServerReaderWriter<rpc::ResultBatch, rpc::CallBatch>;
  explicit ResultSink(Stream* stream) : stream_(stream) {}

  // The calls of a batch that came on this stream: each is answered on it once.
  void Expect(const rpc::CallBatch& batch);
  // Writes those of `results` this stream expects (the others, and any once it is closed or
  // broken, the caller gets from the ledger if it sends their calls again).
  void PushMany(std::vector<rpc::CallResult> results);
  // A newer stream of the caller answers the calls still out.
  void Supersede();
  // Until every expected call answered, or Supersede.
  void WaitAllAnswered();
  // The handler returns: nothing is written any more.
  void Close();

 private:
  Stream* const stream_;
  absl::Mutex mu_;
  std::vector<rpc::CallResult> queue_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> expected_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool superseded_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

class CallLedger {
 public:
  // The caller's newest stream: its results go to `sink` from now on, and an older stream's
  // sink is superseded.
  void Attach(const std::string& caller, const std::shared_ptr<ResultSink>& sink);
  // `sink`'s handler returns (if it is still the caller's newest stream, none is left).
  void Detach(const std::string& caller, const std::shared_ptr<ResultSink>& sink);
  // A batch from `caller`: drops the results it acknowledged, answers the calls it sent again
  // (a kept result at once; one still running when it ends; one whose result is gone with an
  // error), and returns the calls to run, in order.
  std::vector<rpc::ActorCall> Admit(const std::string& caller, rpc::CallBatch* batch);
  // Calls of `caller` ended: their results go to its newest stream and are kept until
  // acknowledged.
  void Done(const std::string& caller, std::vector<rpc::CallResult> results);

 private:
  struct Kept {
    rpc::CallResult result;  // empty value when it was too large to keep
    bool too_large = false;
    absl::Time at;
  };
  struct Caller {
    std::shared_ptr<ResultSink> sink;
    uint64_t max_seq = 0;
    std::set<uint64_t> running;
    std::map<uint64_t, Kept> kept;
    absl::Time last_seen;
  };
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<std::string, Caller> callers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::worker
