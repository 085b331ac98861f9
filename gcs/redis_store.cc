// RedisStore: one Redis hash per table ("phx:<cluster>:<table>"), writes pipelined by one
// writer thread so that concurrent writers share round trips (group commit) while the order
// of writes is kept.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gcs/store.h"
#include "runtime/common/logging.h"

namespace phalanx::gcs {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* c) const {
    if (c) redisFree(c);
  }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

absl::StatusOr<Context> Connect(const RedisOptions& o) {
  timeval tv{};
  tv.tv_sec = absl::ToInt64Seconds(o.connect_timeout);
  tv.tv_usec = absl::ToInt64Microseconds(o.connect_timeout) % 1000000;
  Context ctx(redisConnectWithTimeout(o.host.c_str(), o.port, tv));
  std::string where = absl::StrCat("Redis at ", o.host, ":", o.port);
  if (!ctx) return absl::UnavailableError(absl::StrCat("cannot reach ", where));
  if (ctx->err) {
    return absl::UnavailableError(absl::StrCat("cannot reach ", where, ": ", ctx->errstr));
  }
  // Commands must not block forever on a Redis that stopped answering.
  timeval cmd_tv{10, 0};
  redisSetTimeout(ctx.get(), cmd_tv);
  if (!o.password.empty()) {
    Reply r(static_cast<redisReply*>(
        redisCommand(ctx.get(), "AUTH %b", o.password.data(), o.password.size())));
    if (!r) return absl::UnavailableError(absl::StrCat(where, ": ", ctx->errstr));
    if (r->type == REDIS_REPLY_ERROR) {
      return absl::PermissionDeniedError(absl::StrCat(where, " refused the password (", r->str,
                                                      "); pass the right --redis-password"));
    }
  }
  Reply r(static_cast<redisReply*>(redisCommand(ctx.get(), "PING")));
  if (!r) return absl::UnavailableError(absl::StrCat(where, ": ", ctx->errstr));
  if (r->type == REDIS_REPLY_ERROR) {
    std::string err = r->str;
    if (err.find("NOAUTH") != std::string::npos) {
      return absl::PermissionDeniedError(
          absl::StrCat(where, " needs a password: pass --redis-password"));
    }
    return absl::UnavailableError(absl::StrCat(where, ": ", err));
  }
  return ctx;
}

class RedisStore : public Store {
 public:
  RedisStore(RedisOptions options, Context reader)
      : options_(std::move(options)),
        prefix_(absl::StrCat("phx:", options_.cluster_id, ":")),
        reader_(std::move(reader)) {
    writer_thread_ = std::thread([this] { WriterLoop(); });
  }

  ~RedisStore() override {
    Close(options_.shutdown_timeout);
    writer_thread_.join();
    if (int64_t lost = failed_writes_.load(); lost > 0) {
      spdlog::warn("Redis store closed: {} writes were not persisted since the GCS started", lost);
    }
  }

  void Close(absl::Duration timeout) override {
    absl::MutexLock lock(&queue_mu_);
    if (stopping_) return;
    stopping_ = true;
    close_deadline_ = absl::Now() + timeout;
  }

  void Put(const std::string& table, const std::string& key, std::string value,
           Done done) override {
    Enqueue(Op{true, prefix_ + table, key, std::move(value), std::move(done)});
  }

  void Delete(const std::string& table, const std::string& key, Done done) override {
    Enqueue(Op{false, prefix_ + table, key, "", std::move(done)});
  }

  int64_t FailedWrites() const override { return failed_writes_.load(); }
  int64_t QueuedWrites() override {
    absl::MutexLock lock(&queue_mu_);
    return static_cast<int64_t>(queue_.size());
  }

  absl::StatusOr<std::optional<std::string>> Get(const std::string& table,
                                                 const std::string& key) override {
    std::string hash = prefix_ + table;
    auto reply = ReadCommand([&](redisContext* c) {
      return redisCommand(c, "HGET %b %b", hash.data(), hash.size(), key.data(), key.size());
    });
    if (!reply.ok()) return reply.status();
    if ((*reply)->type == REDIS_REPLY_NIL) return std::nullopt;
    return std::string((*reply)->str, (*reply)->len);
  }

  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GetAll(
      const std::string& table) override {
    std::string hash = prefix_ + table;
    auto reply = ReadCommand(
        [&](redisContext* c) { return redisCommand(c, "HGETALL %b", hash.data(), hash.size()); });
    if (!reply.ok()) return reply.status();
    std::vector<std::pair<std::string, std::string>> out;
    redisReply* r = reply->get();
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
      out.emplace_back(std::string(r->element[i]->str, r->element[i]->len),
                       std::string(r->element[i + 1]->str, r->element[i + 1]->len));
    }
    return out;
  }

  absl::StatusOr<std::vector<std::string>> ListTables(const std::string& prefix) override {
    std::string pattern = absl::StrCat(prefix_, prefix, "*");
    std::vector<std::string> out;
    std::string cursor = "0";
    do {
      auto reply = ReadCommand([&](redisContext* c) {
        return redisCommand(c, "SCAN %s MATCH %b COUNT 1000", cursor.c_str(), pattern.data(),
                            pattern.size());
      });
      if (!reply.ok()) return reply.status();
      redisReply* r = reply->get();
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        return absl::InternalError("unexpected SCAN reply from Redis");
      }
      cursor.assign(r->element[0]->str, r->element[0]->len);
      for (size_t i = 0; i < r->element[1]->elements; ++i) {
        redisReply* k = r->element[1]->element[i];
        out.emplace_back(std::string(k->str, k->len).substr(prefix_.size()));
      }
    } while (cursor != "0");
    return out;
  }

 private:
  struct Op {
    bool put;
    std::string hash;
    std::string key;
    std::string value;
    Done done;
  };

  void Enqueue(Op op) {
    absl::MutexLock lock(&queue_mu_);
    queue_.push_back(std::move(op));
  }

  // Runs one read command, reconnecting once if the connection broke.
  absl::StatusOr<Reply> ReadCommand(const std::function<void*(redisContext*)>& command) {
    absl::MutexLock lock(&reader_mu_);
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!reader_ || reader_->err) {
        auto ctx = Connect(options_);
        if (!ctx.ok()) return ctx.status();
        reader_ = std::move(*ctx);
      }
      Reply reply(static_cast<redisReply*>(command(reader_.get())));
      if (!reply) {
        reader_.reset();
        continue;
      }
      if (reply->type == REDIS_REPLY_ERROR) {
        return absl::InternalError(absl::StrCat("Redis: ", reply->str));
      }
      return reply;
    }
    return absl::UnavailableError(
        absl::StrCat("lost the connection to Redis at ", options_.host, ":", options_.port));
  }

  // Sends `batch` as one pipeline; returns per-op results, or an error if the connection
  // broke (then nothing is known about which ops were applied; all are idempotent).
  absl::StatusOr<std::vector<absl::Status>> SendBatch(redisContext* ctx,
                                                      const std::vector<Op>& batch) {
    for (const Op& op : batch) {
      if (op.put) {
        redisAppendCommand(ctx, "HSET %b %b %b", op.hash.data(), op.hash.size(), op.key.data(),
                           op.key.size(), op.value.data(), op.value.size());
      } else {
        redisAppendCommand(ctx, "HDEL %b %b", op.hash.data(), op.hash.size(), op.key.data(),
                           op.key.size());
      }
    }
    std::vector<absl::Status> results;
    results.reserve(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(ctx, &raw) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat("Redis: ", ctx->errstr));
      }
      Reply reply(static_cast<redisReply*>(raw));
      if (reply->type == REDIS_REPLY_ERROR) {
        // MISCONF (a failed save), OOM (maxmemory), READONLY (a replica), NOREPLICAS...: the
        // write did not happen. Its caller gets the error; the log names what was lost.
        const Op& op = batch[i];
        std::string table = TableOf(op);
        spdlog::error("Redis refused {} of {}/{}: {}", op.put ? "HSET" : "HDEL", table, op.key,
                      reply->str);
        failed_writes_.fetch_add(1, std::memory_order_relaxed);
        // Not Unavailable: retrying cannot help until Redis is fixed (disk, memory, replicas).
        results.push_back(absl::FailedPreconditionError(
            absl::StrCat("Redis at ", options_.host, ":", options_.port, " refused the write of ",
                         table, "/", op.key, ": ", reply->str)));
      } else {
        results.push_back(absl::OkStatus());
      }
    }
    return results;
  }

  void WriterLoop() {
    Context writer;
    while (true) {
      std::vector<Op> batch;
      {
        absl::MutexLock lock(&queue_mu_);
        queue_mu_.Await(absl::Condition(
            +[](RedisStore* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->queue_mu_) {
              return s->stopping_ || !s->queue_.empty();
            },
            this));
        if (queue_.empty() && stopping_) return;
        size_t n = std::min<size_t>(queue_.size(), 4096);
        batch.reserve(n);
        for (size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      std::vector<absl::Status> results =
          PastCloseDeadline()
              // Shutting down, and the writes' time is up: no more attempts (a connect or a
              // command to a Redis that stopped answering could take its own timeout each).
              ? GiveUp(batch, absl::UnavailableError(
                                  "not persisted: the GCS shut down before Redis took the write"))
              : SendWithRetries(writer, batch);
      for (size_t i = 0; i < batch.size(); ++i) {
        if (batch[i].done) batch[i].done(results[i]);
      }
    }
  }

  // Sends `batch`, reconnecting and retrying while Redis is unreachable, until
  // write_retry_timeout or the close deadline; returns each write's status.
  std::vector<absl::Status> SendWithRetries(Context& writer, const std::vector<Op>& batch) {
    absl::Time give_up = absl::Now() + options_.write_retry_timeout;
    absl::Duration backoff = absl::Milliseconds(50);
    while (true) {
      absl::Status failure;
      if (!writer || writer->err) {
        auto ctx = Connect(options_);
        if (ctx.ok()) {
          writer = std::move(*ctx);
        } else {
          failure = ctx.status();
        }
      }
      if (writer && failure.ok()) {
        auto sent = SendBatch(writer.get(), batch);
        if (sent.ok()) return std::move(*sent);
        failure = sent.status();
        writer.reset();
      }
      if (absl::Now() >= give_up || PastCloseDeadline()) {
        spdlog::error("giving up on {} writes (first: {}/{}): {}", batch.size(),
                      TableOf(batch.front()), batch.front().key, failure.ToString());
        return GiveUp(batch, failure);
      }
      spdlog::warn("Redis write failed ({}); retrying", failure.ToString());
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(1));
    }
  }

  // Every write of `batch` fails with `why`; counted in FailedWrites.
  std::vector<absl::Status> GiveUp(const std::vector<Op>& batch, const absl::Status& why) {
    failed_writes_.fetch_add(static_cast<int64_t>(batch.size()), std::memory_order_relaxed);
    return std::vector<absl::Status>(batch.size(), why);
  }

  // The table an op writes ("kv:ns"), for messages: its hash without the cluster's prefix.
  std::string TableOf(const Op& op) const {
    return op.hash.substr(std::min(prefix_.size(), op.hash.size()));
  }

  // The GCS is shutting down and the writes' time is up: the rest fail at once.
  bool PastCloseDeadline() {
    absl::MutexLock lock(&queue_mu_);
    return stopping_ && absl::Now() >= close_deadline_;
  }

  const RedisOptions options_;
  const std::string prefix_;
  std::atomic<int64_t> failed_writes_{0};

  absl::Mutex reader_mu_;
  Context reader_ ABSL_GUARDED_BY(reader_mu_);

  absl::Mutex queue_mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  absl::Time close_deadline_ ABSL_GUARDED_BY(queue_mu_) = absl::InfiniteFuture();
  std::thread writer_thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> ConnectRedisStore(const RedisOptions& options) {
  if (options.cluster_id.empty()) {
    return absl::InvalidArgumentError("ConnectRedisStore: cluster_id must not be empty");
  }
  // Redis may still be starting (a GCS and its Redis started together, or Redis loading its
  // AOF): an unreachable one is tried again until `startup_timeout`; a refused password is not.
  absl::Time give_up = absl::Now() + options.startup_timeout;
  auto ctx = Connect(options);
  while (!ctx.ok() && absl::IsUnavailable(ctx.status()) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
    ctx = Connect(options);
  }
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<Store>(new RedisStore(options, std::move(*ctx)));
}

}  // namespace phalanx::gcs
