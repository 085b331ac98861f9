#include "worker/actor_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/describe.h"
#include "base/logging.h"
#include "base/proto/worker.grpc.pb.h"
#include "base/rpc.h"
#include "worker/errors.h"
#include "worker/worker_host.h"

namespace phalanx::worker {

struct ActorClient::Connection {
  int attempt = 0;
  std::string address;
  grpc::ClientContext context;
  std::unique_ptr<rpc::WorkerService::Stub> stub;
  std::unique_ptr<grpc::ClientReaderWriter<rpc::CallBatch, rpc::ResultBatch>> stream;
  bool header_sent = false;  // guarded by the client's mu_
  // A result came back on it: the connection is up, and a write goes out at once. Until
  // then a write may wait for the connection (rpc::kConnectTimeout), so it is the writer
  // thread's, never a caller's (guarded by the client's mu_).
  bool established = false;
};

namespace {

int StateRank(rpc::ActorState s) {
  switch (s) {
    case rpc::ACTOR_PENDING:
      return 0;
    case rpc::ACTOR_RESTARTING:
      return 0;
    case rpc::ACTOR_CREATING:
      return 1;
    case rpc::ACTOR_ALIVE:
      return 2;
    case rpc::ACTOR_DEAD:
      return 3;
    default:
      return 0;
  }
}

}  // namespace

ActorClient::ActorClient(std::string caller_id, std::string token, rpc::ActorInfo info)
    : caller_id_(std::move(caller_id)),
      token_(std::move(token)),
      actor_id_(info.actor_id()),
      info_(std::move(info)) {}

ActorClient::~ActorClient() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

rpc::ActorInfo ActorClient::info() const {
  absl::MutexLock lock(&mu_);
  return info_;
}

absl::Status ActorClient::DeadStatusLocked() const {
  return MakeError(absl::StatusCode::kAborted, error_kind::kActorDied,
                   absl::StrCat(rpc::DescribeActor(info_), " is DEAD (",
                                rpc::DescribeCause(info_.death_cause()), ")"));
}

std::shared_ptr<ObjectState> ActorClient::Submit(const std::string& method, std::string args,
                                                 int encoding,
                                                 const std::string& concurrency_group) {
  return Enqueue(method, std::move(args), encoding, concurrency_group, /*reserved=*/false).first;
}

std::pair<std::shared_ptr<ObjectState>, uint64_t> ActorClient::Reserve(
    const std::string& method, int encoding, const std::string& concurrency_group) {
  return Enqueue(method, "", encoding, concurrency_group, /*reserved=*/true);
}

std::pair<std::shared_ptr<ObjectState>, uint64_t> ActorClient::Enqueue(
    const std::string& method, std::string args, int encoding, const std::string& concurrency_group,
    bool reserved) {
  auto state = std::make_shared<ObjectState>();
  absl::MutexLock lock(&mu_);
  if (closed_) {
    state->Set(MakeError(absl::StatusCode::kCancelled, error_kind::kActorUnavailable,
                         "phalanx was shut down in this process"));
    return {state, 0};
  }
  if (info_.state() == rpc::ACTOR_DEAD) {
    state->Set(DeadStatusLocked());
    return {state, 0};
  }
  Call call{
      next_seq_++, method, std::move(args), encoding, concurrency_group, info_.max_task_retries(),
      state};
  call.reserved = reserved;
  if (info_.state() == rpc::ACTOR_RESTARTING) {
    if (call.retries_left == 0) {
      state->Set(MakeError(absl::StatusCode::kAborted, error_kind::kActorDied,
                           absl::StrCat(rpc::DescribeActor(info_), " is RESTARTING after ",
                                        rpc::DescribeCause(info_.death_cause()),
                                        "; the call is not retried (max_task_retries = 0)")));
      return {state, 0};
    }
    if (call.retries_left > 0) --call.retries_left;
  }
  const uint64_t seq = call.seq;
  queue_.push_back(std::move(call));
  FlushLocked();
  return {state, seq};
}

void ActorClient::Fill(uint64_t seq, const absl::Status& status, std::string value) {
  std::shared_ptr<ObjectState> failed;
  {
    absl::MutexLock lock(&mu_);
    auto it =
        std::find_if(queue_.begin(), queue_.end(), [seq](const Call& c) { return c.seq == seq; });
    if (it == queue_.end() || !it->reserved) return;  // failed or cancelled meanwhile
    if (status.ok()) {
      it->reserved = false;
      it->args = std::move(value);
    } else {
      failed = it->result;
      queue_.erase(it);  // never sent: its number is skipped, as a worker allows
    }
    FlushLocked();
  }
  if (failed != nullptr) failed->Set(status, std::move(value));
}

bool ActorClient::Cancel(const std::shared_ptr<ObjectState>& result) {
  if (result->done()) return false;
  std::string method;
  uint64_t sent = 0;
  {
    absl::MutexLock lock(&mu_);
    for (Call& call : queue_) {
      if (call.result != result) continue;
      // Not sent yet: it goes as a no-op, which keeps the sequence numbers whole.
      method = call.method;
      call.method = kCancelMethod;
      call.args.clear();
      if (call.reserved) {
        call.reserved = false;
        FlushLocked();
      }
      break;
    }
    for (auto* calls : {&inflight_, &orphans_}) {
      for (auto& [seq, call] : *calls) {
        if (call.result == result) {
          method = call.method;
          sent = seq;
        }
      }
    }
  }
  if (method.empty()) return false;
  result->Set(MakeError(absl::StatusCode::kCancelled, error_kind::kTaskCancelled,
                        absl::StrCat("the call of ", method, " on ", actor_id_, " was cancelled",
                                     sent == 0 ? " before it was sent" : "")));
  if (sent != 0) Submit(kCancelMethod, absl::StrCat(sent));
  return true;
}

void ActorClient::ConnectLocked() {
  auto conn = std::make_shared<Connection>();
  conn->attempt = info_.num_restarts();
  conn->address = info_.worker_address();
  conn->stub = rpc::WorkerService::NewStub(rpc::MakeChannel(conn->address));
  if (!token_.empty()) conn->context.AddMetadata(rpc::kTokenHeader, token_);
  conn->context.set_wait_for_ready(false);
  // The stream's headers go with its first batch: opening it does not wait for the
  // connection (which may take up to rpc::kConnectTimeout while a busy peer handshakes), so
  // nothing waits on it under mu_.
  conn->context.set_initial_metadata_corked(true);
  conn->stream = conn->stub->PushCalls(&conn->context);
  connection_ = conn;
  lost_attempt_ = -1;
  std::thread([self = shared_from_this(), conn] { self->ReadLoop(conn); }).detach();
}

void ActorClient::FlushLocked() {
  if (connection_ == nullptr || writing_ || !SendableLocked()) return;
  if (inflight_.empty() && queue_.size() == 1 && connection_->established) {
    WriteQueuedLocked();
    return;
  }
  if (!writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
  flush_wanted_ = true;
}

void ActorClient::WriterLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](ActorClient* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
          return c->closed_ || (c->flush_wanted_ && !c->writing_);
        },
        this));
    if (closed_) return;
    flush_wanted_ = false;
    WriteQueuedLocked();
  }
}

void ActorClient::WriteQueuedLocked() {
  if (connection_ == nullptr || writing_) return;
  writing_ = true;
  while (SendableLocked() && connection_ != nullptr) {
    std::shared_ptr<Connection> conn = connection_;
    rpc::CallBatch batch;
    if (!conn->header_sent) {
      batch.set_caller_id(caller_id_);
      batch.set_actor_id(actor_id_);
      batch.set_attempt(conn->attempt);
      conn->header_sent = true;
    }
    while (SendableLocked()) {  // up to the first call that waits for its arguments
      Call& call = queue_.front();
      rpc::ActorCall* c = batch.add_calls();
      c->set_seq(call.seq);
      c->set_method(call.method);
      c->set_args(call.args);
      c->set_encoding(call.encoding);
      c->set_concurrency_group(call.concurrency_group);
      call.sent = true;
      inflight_.emplace(call.seq, std::move(call));
      queue_.pop_front();
    }
    // Every call below the lowest one still unanswered has its answer: the worker may forget
    // those results.
    uint64_t lowest = inflight_.empty() ? next_seq_ : inflight_.begin()->first;
    if (!orphans_.empty()) lowest = std::min(lowest, orphans_.begin()->first);
    for (const Call& call : queue_) lowest = std::min(lowest, call.seq);
    batch.set_acked_through(lowest - 1);
    mu_.Unlock();
    bool ok = conn->stream->Write(batch);
    mu_.Lock();
    if (!ok) break;  // the reader sees the stream end and settles the calls
    // It went out: the worker is reachable again (a call sent again may run long before it
    // answers).
    if (conn == connection_) lost_since_ = absl::InfiniteFuture();
  }
  writing_ = false;
}

void ActorClient::ReadLoop(std::shared_ptr<Connection> conn) {
  rpc::ResultBatch batch;
  while (conn->stream->Read(&batch)) {
    if (!conn->established) {
      absl::MutexLock lock(&mu_);
      conn->established = true;
      if (connection_ == conn) lost_since_ = absl::InfiniteFuture();
    }
    for (auto& r : *batch.mutable_results()) {
      std::shared_ptr<ObjectState> state;
      {
        absl::MutexLock lock(&mu_);
        auto it = inflight_.find(r.seq());
        if (it == inflight_.end()) continue;
        state = std::move(it->second.result);
        inflight_.erase(it);
      }
      if (r.code() == 0) {
        state->Set(absl::OkStatus(), std::move(*r.mutable_value()));
      } else {
        state->Set(MakeError(static_cast<absl::StatusCode>(r.code()), r.error_kind(), r.error()),
                   std::move(*r.mutable_value()));
      }
    }
  }
  grpc::Status status = conn->stream->Finish();
  OnConnectionLost(conn, status.error_message());
}

void ActorClient::OnConnectionLost(const std::shared_ptr<Connection>& conn,
                                   const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (connection_ != conn) {
    // An older connection: anything still in flight on it is an orphan too.
  } else {
    connection_ = nullptr;
    lost_attempt_ = conn->attempt;
  }
  for (auto& [seq, call] : inflight_) orphans_.emplace(seq, std::move(call));
  inflight_.clear();
  if (closed_) {
    FailAllLocked(MakeError(absl::StatusCode::kCancelled, error_kind::kActorUnavailable,
                            "phalanx was shut down in this process"));
    return;
  }
  spdlog::debug("connection to {} (attempt {}) lost: {}", rpc::DescribeActor(info_), conn->attempt,
                why);
  SettleOrphansLocked();
  if (info_.state() == rpc::ACTOR_ALIVE && connection_ == nullptr &&
      info_.num_restarts() > conn->attempt) {
    ConnectLocked();
    FlushLocked();
  } else if (info_.state() == rpc::ACTOR_ALIVE && info_.num_restarts() == conn->attempt) {
    // The GCS still calls this attempt alive: either its death is on the way, or the
    // connection broke while the worker lives. The same worker is tried again shortly, and
    // the calls in flight are sent again with their sequence numbers: the worker's ledger
    // runs none twice (worker/call_ledger.h).
    if (lost_since_ == absl::InfiniteFuture()) lost_since_ = absl::Now();
    std::thread([self = shared_from_this(), attempt = conn->attempt] {
      absl::SleepFor(kCallResendPause);
      absl::MutexLock lock(&self->mu_);
      if (self->closed_ || self->connection_ != nullptr ||
          self->info_.state() != rpc::ACTOR_ALIVE || self->info_.num_restarts() != attempt) {
        return;
      }
      self->ResendOrphansLocked();
      self->ConnectLocked();
      self->FlushLocked();
    }).detach();
  }
}

void ActorClient::ResendOrphansLocked() {
  absl::Duration lost_for = absl::Now() - lost_since_;
  if (lost_for > kCallResendWindow) {
    // No new connection to a worker the GCS still calls alive: what was sent and what waits
    // fail, and the next calls get a window of their own.
    absl::Status status = MakeError(
        absl::StatusCode::kUnavailable, error_kind::kActorUnavailable,
        absl::StrCat("lost the connection to ", rpc::DescribeActor(info_), " and could not ",
                     "connect again within ", absl::FormatDuration(lost_for),
                     " (kCallResendWindow), while the GCS still calls it alive"));
    for (auto& [seq, call] : orphans_) call.result->Set(status);
    orphans_.clear();
    for (auto& call : queue_) call.result->Set(status);
    queue_.clear();
    lost_since_ = absl::Now();
    return;
  }
  for (auto& [seq, call] : orphans_) queue_.push_back(std::move(call));
  orphans_.clear();
  std::sort(queue_.begin(), queue_.end(),
            [](const Call& a, const Call& b) { return a.seq < b.seq; });
}

void ActorClient::SettleOrphansLocked() {
  if (info_.state() == rpc::ACTOR_DEAD) {
    FailAllLocked(DeadStatusLocked());
    return;
  }
  if (info_.num_restarts() <= lost_attempt_) return;
  // Calls queued to go again to the lost worker (a connection lost) are orphans of it too.
  for (auto it = queue_.begin(); lost_attempt_ >= 0 && it != queue_.end();) {
    if (!it->sent) {
      ++it;
      continue;
    }
    orphans_.emplace(it->seq, std::move(*it));
    it = queue_.erase(it);
  }
  if (orphans_.empty()) return;
  // The worker the orphans went to is gone and a newer attempt exists (or is coming).
  std::deque<Call> retry;
  for (auto& [seq, call] : orphans_) {
    if (call.retries_left == 0) {
      call.result->Set(MakeError(
          absl::StatusCode::kAborted, error_kind::kActorDied,
          absl::StrCat(rpc::DescribeActor(info_), " died during the call (",
                       rpc::DescribeCause(info_.death_cause()),
                       ") and restarted; the call is not retried (max_task_retries = 0)")));
      continue;
    }
    if (call.retries_left > 0) --call.retries_left;
    call.sent = false;  // not yet to the new worker
    retry.push_back(std::move(call));
  }
  orphans_.clear();
  for (auto& call : queue_) retry.push_back(std::move(call));
  queue_ = std::move(retry);
}

void ActorClient::FailAllLocked(const absl::Status& status) {
  for (auto& call : queue_) call.result->Set(status);
  queue_.clear();
  for (auto& [seq, call] : inflight_) call.result->Set(status);
  inflight_.clear();
  for (auto& [seq, call] : orphans_) call.result->Set(status);
  orphans_.clear();
}

void ActorClient::OnActorUpdate(const rpc::ActorInfo& info) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  if (info.num_restarts() < info_.num_restarts()) return;
  if (info.num_restarts() == info_.num_restarts() &&
      StateRank(info.state()) < StateRank(info_.state())) {
    return;
  }
  info_ = info;
  if (connection_ != nullptr &&
      (info_.state() == rpc::ACTOR_DEAD || connection_->attempt != info_.num_restarts())) {
    connection_->context.TryCancel();  // the reader settles its calls
  }
  SettleOrphansLocked();
  if (info_.state() == rpc::ACTOR_DEAD) return;
  if (info_.state() == rpc::ACTOR_ALIVE && connection_ == nullptr) {
    ConnectLocked();
    FlushLocked();
  }
}

void ActorClient::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  if (connection_ != nullptr) connection_->context.TryCancel();
  FailAllLocked(MakeError(absl::StatusCode::kCancelled, error_kind::kActorUnavailable,
                          "phalanx was shut down in this process"));
}

}  // namespace phalanx::worker
