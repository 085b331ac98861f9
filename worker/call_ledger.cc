#include "worker/call_ledger.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/errors.h"

namespace phalanx::worker {

void ResultSink::Expect(const rpc::CallBatch& batch) {
  absl::MutexLock lock(&mu_);
  for (const auto& call : batch.calls()) expected_.insert(call.seq());
}

void ResultSink::PushMany(std::vector<rpc::CallResult> results) {
  absl::MutexLock lock(&mu_);
  for (auto& r : results) {
    if (closed_ || expected_.erase(r.seq()) == 0) continue;
    queue_.push_back(std::move(r));
  }
  if (writing_) return;
  writing_ = true;
  while (!queue_.empty()) {
    rpc::ResultBatch batch;
    for (auto& r : queue_) *batch.add_results() = std::move(r);
    queue_.clear();
    bool broken = broken_;
    mu_.Unlock();
    if (!broken) broken = !stream_->Write(batch);
    mu_.Lock();
    broken_ = broken_ || broken;
  }
  writing_ = false;
}

void ResultSink::Supersede() {
  absl::MutexLock lock(&mu_);
  superseded_ = true;
}

void ResultSink::WaitAllAnswered() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ResultSink* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return !s->writing_ && (s->expected_.empty() || s->superseded_);
      },
      this));
}

void ResultSink::Close() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ResultSink* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return !s->writing_; }, this));
  closed_ = true;
  queue_.clear();
}

void CallLedger::Attach(const std::string& caller, const std::shared_ptr<ResultSink>& sink) {
  std::shared_ptr<ResultSink> older;
  {
    absl::MutexLock lock(&mu_);
    Caller& c = callers_[caller];
    c.last_seen = absl::Now();
    if (c.sink != sink) older = std::exchange(c.sink, sink);
  }
  if (older != nullptr) older->Supersede();
}

void CallLedger::Detach(const std::string& caller, const std::shared_ptr<ResultSink>& sink) {
  absl::MutexLock lock(&mu_);
  auto it = callers_.find(caller);
  if (it != callers_.end() && it->second.sink == sink) it->second.sink = nullptr;
}

std::vector<rpc::ActorCall> CallLedger::Admit(const std::string& caller, rpc::CallBatch* batch) {
  std::vector<rpc::ActorCall> run;
  std::vector<rpc::CallResult> answers;  // calls sent again
  std::shared_ptr<ResultSink> sink;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = absl::Now();
    Caller& c = callers_[caller];
    c.last_seen = now;
    // The caller has every answer up to acked_through.
    c.kept.erase(c.kept.begin(), c.kept.upper_bound(batch->acked_through()));
    for (auto& call : *batch->mutable_calls()) {
      uint64_t seq = call.seq();
      if (seq > c.max_seq) {
        c.max_seq = seq;
        c.running.insert(seq);
        run.push_back(std::move(call));
        continue;
      }
      if (c.running.count(seq) > 0) continue;  // its result goes to the newest stream
      auto kept = c.kept.find(seq);
      if (kept != c.kept.end() && !kept->second.too_large) {
        answers.push_back(kept->second.result);
        continue;
      }
      rpc::CallResult lost;
      lost.set_seq(seq);
      lost.set_code(static_cast<int>(absl::StatusCode::kUnavailable));
      lost.set_error_kind(error_kind::kActorUnavailable);
      lost.set_error(absl::StrCat(
          "call ", seq, " (", call.method(), ") ran, but its result was lost with the connection ",
          kept != c.kept.end()
              ? absl::StrCat("(over ", kMaxKeptResultBytes >> 20, " MiB: not kept)")
              : "(no longer kept)"));
      answers.push_back(std::move(lost));
    }
    ExpireLocked(now);
    sink = c.sink;
  }
  if (sink != nullptr && !answers.empty()) sink->PushMany(std::move(answers));
  return run;
}

void CallLedger::Done(const std::string& caller, std::vector<rpc::CallResult> results) {
  std::shared_ptr<ResultSink> sink;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = absl::Now();
    Caller& c = callers_[caller];
    for (const auto& r : results) {
      c.running.erase(r.seq());
      Kept& k = c.kept[r.seq()];
      k.at = now;
      if (r.value().size() + r.error().size() > kMaxKeptResultBytes) {
        k.too_large = true;
      } else {
        k.result = r;
      }
    }
    sink = c.sink;
  }
  if (sink != nullptr) sink->PushMany(std::move(results));
}

void CallLedger::ExpireLocked(absl::Time now) {
  for (auto it = callers_.begin(); it != callers_.end();) {
    Caller& c = it->second;
    for (auto k = c.kept.begin(); k != c.kept.end();) {
      k = now - k->second.at > kCallResultKeep ? c.kept.erase(k) : std::next(k);
    }
    bool idle = c.sink == nullptr && c.running.empty() && c.kept.empty();
    it = idle && now - c.last_seen > kCallResultKeep ? callers_.erase(it) : std::next(it);
  }
}

}  // namespace phalanx::worker
