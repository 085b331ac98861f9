// RedisStore: one Redis hash per table ("phx:<cluster>:<table>"), writes pipelined by one
// writer thread so that concurrent writers share round trips (group commit) while the order
// of writes is kept.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/logging.h"
#include "gcs/store.h"

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

std::string Where(const std::string& host, int port) { return absl::StrCat(host, ":", port); }

// "Redis at HOST:PORT", for messages about a live connection.
std::string Where(const redisContext* ctx) {
  return absl::StrCat("Redis at ", ctx->tcp.host ? ctx->tcp.host : "?", ":", ctx->tcp.port);
}

// Connects to a Redis server or sentinel (`what`: "Redis" or "sentinel"), authenticates and
// PINGs it. `password_flag` is the flag a user passes the password with.
absl::StatusOr<Context> ConnectTo(const std::string& host, int port, const std::string& password,
                                  absl::Duration timeout, const std::string& what,
                                  const std::string& password_flag) {
  timeval tv{};
  tv.tv_sec = absl::ToInt64Seconds(timeout);
  tv.tv_usec = absl::ToInt64Microseconds(timeout) % 1000000;
  Context ctx(redisConnectWithTimeout(host.c_str(), port, tv));
  std::string where = absl::StrCat(what, " at ", host, ":", port);
  if (!ctx) return absl::UnavailableError(absl::StrCat("cannot reach ", where));
  if (ctx->err) {
    return absl::UnavailableError(absl::StrCat("cannot reach ", where, ": ", ctx->errstr));
  }
  // Commands must not block forever on a Redis that stopped answering.
  timeval cmd_tv{10, 0};
  redisSetTimeout(ctx.get(), cmd_tv);
  if (!password.empty()) {
    Reply r(static_cast<redisReply*>(
        redisCommand(ctx.get(), "AUTH %b", password.data(), password.size())));
    if (!r) return absl::UnavailableError(absl::StrCat(where, ": ", ctx->errstr));
    if (r->type == REDIS_REPLY_ERROR) {
      return absl::PermissionDeniedError(absl::StrCat(where, " refused the password (", r->str,
                                                      "); pass the right ", password_flag));
    }
  }
  Reply r(static_cast<redisReply*>(redisCommand(ctx.get(), "PING")));
  if (!r) return absl::UnavailableError(absl::StrCat(where, ": ", ctx->errstr));
  if (r->type == REDIS_REPLY_ERROR) {
    std::string err = r->str;
    if (err.find("NOAUTH") != std::string::npos) {
      return absl::PermissionDeniedError(
          absl::StrCat(where, " needs a password: pass ", password_flag));
    }
    return absl::UnavailableError(absl::StrCat(where, ": ", err));
  }
  return ctx;
}

std::string SentinelList(const RedisOptions& o) {
  std::vector<std::string> parts;
  for (const auto& [host, port] : o.sentinels) parts.push_back(Where(host, port));
  return absl::StrJoin(parts, ",");
}

// Sentinels answer at once or not at all: one that does not answer within this is skipped.
constexpr absl::Duration kSentinelTimeout = absl::Seconds(1);

absl::StatusOr<Context> ConnectSentinel(const RedisOptions& o, const std::string& host, int port) {
  return ConnectTo(host, port, o.sentinel_password, std::min(o.connect_timeout, kSentinelTimeout),
                   "sentinel", "--redis-sentinel-password");
}

// Asks each sentinel in turn for the primary of `o.master_name`, connects to it and checks
// that it says it is the master (a sentinel may not have seen a failover yet). Unavailable
// while there is none, naming the sentinels, the master and what each one said.
absl::StatusOr<Context> ConnectPrimary(const RedisOptions& o) {
  std::vector<std::string> why;
  for (const auto& [sentinel_host, sentinel_port] : o.sentinels) {
    std::string sentinel = Where(sentinel_host, sentinel_port);
    auto sctx = ConnectSentinel(o, sentinel_host, sentinel_port);
    if (!sctx.ok()) {
      if (absl::IsPermissionDenied(sctx.status())) return sctx.status();
      why.push_back(std::string(sctx.status().message()));
      continue;
    }
    Reply addr(
        static_cast<redisReply*>(redisCommand(sctx->get(), "SENTINEL get-master-addr-by-name %b",
                                              o.master_name.data(), o.master_name.size())));
    if (!addr) {
      why.push_back(absl::StrCat("sentinel ", sentinel, ": ", (*sctx)->errstr));
      continue;
    }
    if (addr->type != REDIS_REPLY_ARRAY || addr->elements != 2) {
      why.push_back(absl::StrCat(
          "sentinel ", sentinel, " does not monitor a master named '", o.master_name, "'",
          addr->type == REDIS_REPLY_ERROR ? absl::StrCat(" (", addr->str, ")") : ""));
      continue;
    }
    std::string host(addr->element[0]->str, addr->element[0]->len);
    int port = 0;
    if (!absl::SimpleAtoi(absl::string_view(addr->element[1]->str, addr->element[1]->len), &port)) {
      why.push_back(absl::StrCat("sentinel ", sentinel, " gave a bad port"));
      continue;
    }
    auto ctx = ConnectTo(host, port, o.password, o.connect_timeout, "Redis", "--redis-password");
    if (!ctx.ok()) {
      if (absl::IsPermissionDenied(ctx.status())) return ctx.status();
      why.push_back(absl::StrCat(ctx.status().message(), " (the primary they name)"));
      continue;
    }
    Reply role(static_cast<redisReply*>(redisCommand(ctx->get(), "ROLE")));
    if (!role || role->type != REDIS_REPLY_ARRAY || role->elements < 1 ||
        role->element[0]->type != REDIS_REPLY_STRING) {
      why.push_back(absl::StrCat("Redis at ", Where(host, port), " did not answer ROLE"));
      continue;
    }
    std::string r(role->element[0]->str, role->element[0]->len);
    if (r != "master") {
      why.push_back(absl::StrCat("Redis at ", Where(host, port), " (the primary they name) is a ",
                                 r, ": a failover is under way"));
      continue;
    }
    return ctx;
  }
  // The sentinels usually agree: say each reason once.
  std::vector<std::string> distinct;
  for (const std::string& w : why) {
    if (std::find(distinct.begin(), distinct.end(), w) == distinct.end()) distinct.push_back(w);
  }
  return absl::UnavailableError(absl::StrCat("no Redis primary for master '", o.master_name,
                                             "' from the sentinels ", SentinelList(o), ": ",
                                             absl::StrJoin(distinct, "; ")));
}

// The configured Redis, or in sentinel mode the current primary.
absl::StatusOr<Context> Connect(const RedisOptions& o) {
  if (!o.sentinels.empty()) return ConnectPrimary(o);
  return ConnectTo(o.host, o.port, o.password, o.connect_timeout, "Redis", "--redis-password");
}

// Whether the sentinels know a replica of `o.master_name` that a failover could promote
// (one that is not down or disconnected). Unknown (no sentinel answered) counts as yes.
bool PromotableReplicaKnown(const RedisOptions& o, std::string* which) {
  for (const auto& [sentinel_host, sentinel_port] : o.sentinels) {
    auto sctx = ConnectSentinel(o, sentinel_host, sentinel_port);
    if (!sctx.ok()) continue;
    Reply r(static_cast<redisReply*>(redisCommand(sctx->get(), "SENTINEL replicas %b",
                                                  o.master_name.data(), o.master_name.size())));
    if (!r || r->type != REDIS_REPLY_ARRAY) continue;
    for (size_t i = 0; i < r->elements; ++i) {
      // Each replica is a flat list of field, value, field, value...
      const redisReply* fields = r->element[i];
      std::string name, flags;
      for (size_t j = 0; j + 1 < fields->elements; j += 2) {
        std::string field(fields->element[j]->str, fields->element[j]->len);
        std::string value(fields->element[j + 1]->str, fields->element[j + 1]->len);
        if (field == "name") name = value;
        if (field == "flags") flags = value;
      }
      bool down = false;
      for (absl::string_view flag : absl::StrSplit(flags, ',')) {
        down |= flag == "s_down" || flag == "o_down" || flag == "disconnected";
      }
      if (!down) {
        *which = name;
        return true;
      }
    }
    return false;
  }
  *which = "unknown: no sentinel answered";
  return true;
}

// Errors after which the same request may succeed on the (new) primary: LOADING (Redis is
// loading its data) always; READONLY (this is a replica now) in sentinel mode, where the
// store can find the new primary.
bool Retryable(const RedisOptions& o, absl::string_view error) {
  return absl::StartsWith(error, "LOADING") ||
         (!o.sentinels.empty() && absl::StartsWith(error, "READONLY"));
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseSentinels(const std::string& list,
                                                                        const std::string& flag) {
  std::vector<std::pair<std::string, int>> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    size_t colon = part.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(part.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", list, "': '", part,
                       "' is not HOST:PORT; give the sentinels as HOST:PORT[,HOST:PORT...], "
                       "e.g. 10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379"));
    }
    out.emplace_back(std::string(part.substr(0, colon)), port);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " is empty; give the sentinels as HOST:PORT[,HOST:PORT...], e.g. 127.0.0.1:26379"));
  }
  return out;
}

namespace {

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

  // Runs one read command, reconnecting once if the connection broke (or Redis answered
  // LOADING, or in sentinel mode READONLY).
  absl::StatusOr<Reply> ReadCommand(const std::function<void*(redisContext*)>& command) {
    absl::MutexLock lock(&reader_mu_);
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!reader_ || reader_->err) {
        auto ctx = Connect(options_);
        if (!ctx.ok()) return ctx.status();
        reader_ = std::move(*ctx);
      }
      Reply reply(static_cast<redisReply*>(command(reader_.get())));
      if (!reply || (reply->type == REDIS_REPLY_ERROR && Retryable(options_, reply->str))) {
        reader_.reset();  // in sentinel mode, the next Connect finds the current primary
        continue;
      }
      if (reply->type == REDIS_REPLY_ERROR) {
        return absl::InternalError(absl::StrCat("Redis: ", reply->str));
      }
      return reply;
    }
    return absl::UnavailableError(
        absl::StrCat("lost the connection to ",
                     options_.sentinels.empty()
                         ? absl::StrCat("Redis at ", Where(options_.host, options_.port))
                         : absl::StrCat("the Redis primary of '", options_.master_name, "'")));
  }

  // Sends `batch` as one pipeline; returns per-op results, or an error if the connection
  // broke, Redis answered a retryable error, or (sentinel mode) no replica acknowledged the
  // batch while one could be promoted. Then nothing is known about which ops were applied;
  // all are idempotent, and the caller sends the whole batch again.
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
    // Sentinel mode: the batch is acknowledged once a replica has it (WAIT), so that a
    // failover cannot lose it; while there is no replica to wait for, ROLE says when one is
    // back. One round trip either way.
    const bool sentinel = !options_.sentinels.empty();
    const int64_t wait_ms = absl::ToInt64Milliseconds(options_.replica_ack_timeout);
    if (sentinel && expect_replica_) {
      redisAppendCommand(ctx, "WAIT 1 %lld", static_cast<long long>(wait_ms));
    } else if (sentinel) {
      redisAppendCommand(ctx, "ROLE");
    }
    std::vector<absl::Status> results;
    results.reserve(batch.size());
    int refused = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(ctx, &raw) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat(Where(ctx), ": ", ctx->errstr));
      }
      Reply reply(static_cast<redisReply*>(raw));
      const Op& op = batch[i];
      if (reply->type == REDIS_REPLY_ERROR && Retryable(options_, reply->str)) {
        return absl::UnavailableError(absl::StrCat(Where(ctx), " answered ", reply->str));
      }
      if (reply->type == REDIS_REPLY_ERROR) {
        // MISCONF (a failed save), OOM (maxmemory), READONLY (a replica), NOREPLICAS...: the
        // write did not happen. Its caller gets the error; the log names what was lost.
        std::string table = TableOf(op);
        spdlog::error("Redis refused {} of {}/{}: {}", op.put ? "HSET" : "HDEL", table, op.key,
                      reply->str);
        ++refused;
        // Not Unavailable: retrying cannot help until Redis is fixed (disk, memory, replicas).
        results.push_back(absl::FailedPreconditionError(absl::StrCat(
            Where(ctx), " refused the write of ", table, "/", op.key, ": ", reply->str)));
      } else {
        results.push_back(absl::OkStatus());
      }
    }
    if (sentinel) {
      void* raw = nullptr;
      if (redisGetReply(ctx, &raw) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat(Where(ctx), ": ", ctx->errstr));
      }
      Reply reply(static_cast<redisReply*>(raw));
      if (!expect_replica_ && ReplicasInRole(reply.get()) > 0) {
        // A replica is back: from this batch on, wait for it.
        spdlog::info("Redis primary {} has a replica again: writes wait for it (WAIT)", Where(ctx));
        expect_replica_ = true;
        reply.reset(static_cast<redisReply*>(
            redisCommand(ctx, "WAIT 1 %lld", static_cast<long long>(wait_ms))));
        if (!reply) return absl::UnavailableError(absl::StrCat(Where(ctx), ": ", ctx->errstr));
      }
      if (expect_replica_) {
        if (auto acked = CheckReplicaAck(ctx, reply.get()); !acked.ok()) return acked;
      }
    }
    if (refused < static_cast<int>(batch.size())) {
      if (auto s = CheckAofWritten(ctx); !s.ok()) {
        if (absl::IsUnavailable(s)) return s;
        // Applied in Redis's memory, not on its disk: not acknowledged. A later write is
        // refused (MISCONF) until Redis writes its log again.
        for (size_t i = 0; i < batch.size(); ++i) {
          if (!results[i].ok()) continue;
          spdlog::error("Redis took {} of {}/{} but could not append it to its log: {}",
                        batch[i].put ? "HSET" : "HDEL", TableOf(batch[i]), batch[i].key,
                        s.message());
          results[i] = absl::FailedPreconditionError(absl::StrCat(
              "not persisted: ", TableOf(batch[i]), "/", batch[i].key, ": ", s.message()));
          ++refused;
        }
      }
    }
    failed_writes_.fetch_add(refused, std::memory_order_relaxed);
    return results;
  }

  // Whether Redis wrote what it was sent to its append-only file. Redis appends a command's
  // effect to the file before it sends the command's reply, but when the append fails (a full
  // disk) it sends the reply all the same and only notes the failure (aof_last_write_status);
  // the writes after it are refused (MISCONF). So, once a batch's replies are in, a second
  // round trip asks: OK when the append went well (or the AOF is off), FailedPrecondition
  // naming the failure otherwise, Unavailable when the connection broke.
  absl::Status CheckAofWritten(redisContext* ctx) {
    Reply info(static_cast<redisReply*>(redisCommand(ctx, "INFO persistence")));
    if (!info) return absl::UnavailableError(absl::StrCat(Where(ctx), ": ", ctx->errstr));
    if (info->type != REDIS_REPLY_STRING) {
      return absl::OkStatus();  // INFO renamed or refused: nothing more to learn
    }
    absl::string_view text(info->str, info->len);
    if (!absl::StrContains(text, "aof_enabled:1")) return absl::OkStatus();
    if (!absl::StrContains(text, "aof_last_write_status:err")) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "Redis at ", Where(ctx),
        " could not write its append-only file (aof_last_write_status:err; is its disk full?), "
        "so a restart of Redis would lose the write; free space on the disk of Redis's dir"));
  }

  // The number of connected replicas in a primary's ROLE reply.
  static size_t ReplicasInRole(const redisReply* role) {
    if (role->type != REDIS_REPLY_ARRAY || role->elements < 3 ||
        role->element[2]->type != REDIS_REPLY_ARRAY) {
      return 0;
    }
    return role->element[2]->elements;
  }

  // `wait` is the reply to WAIT 1: OK if a replica has the batch, or if no replica could be
  // promoted by a failover (then this primary holds the only copy that matters, and the store
  // stops waiting for a replica until ROLE shows one again). Unavailable otherwise: the
  // batch is sent again.
  absl::Status CheckReplicaAck(redisContext* ctx, const redisReply* wait) {
    if (wait->type == REDIS_REPLY_INTEGER && wait->integer >= 1) return absl::OkStatus();
    if (wait->type == REDIS_REPLY_ERROR) {
      return absl::UnavailableError(absl::StrCat(Where(ctx), " answered WAIT with ", wait->str));
    }
    std::string replica;
    if (PromotableReplicaKnown(options_, &replica)) {
      return absl::UnavailableError(absl::StrCat(
          "not acknowledged: no replica of ", Where(ctx), " confirmed the writes within ",
          absl::FormatDuration(options_.replica_ack_timeout), " (WAIT 1), and a failover could ",
          "promote replica ", replica, " without them"));
    }
    spdlog::warn(
        "{}, the primary of '{}', has no replica a failover could promote: writes are "
        "acknowledged with one copy until a replica is back",
        Where(ctx), options_.master_name);
    expect_replica_ = false;
    return absl::OkStatus();
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

  // Sends `batch`, reconnecting and retrying while Redis is unreachable (in sentinel mode:
  // while there is no primary, or no replica acknowledged), until write_retry_timeout
  // (sentinel mode: failover_timeout) or the close deadline; returns each write's status.
  std::vector<absl::Status> SendWithRetries(Context& writer, const std::vector<Op>& batch) {
    const bool sentinel = !options_.sentinels.empty();
    absl::Time give_up =
        absl::Now() + (sentinel ? options_.failover_timeout : options_.write_retry_timeout);
    absl::Duration backoff = absl::Milliseconds(50);
    // A failover takes seconds; the new primary is found within this of its promotion.
    const absl::Duration max_backoff = sentinel ? absl::Milliseconds(200) : absl::Seconds(1);
    std::string last_logged;
    while (true) {
      absl::Status failure;
      if (!writer || writer->err) {
        auto ctx = Connect(options_);
        if (ctx.ok()) {
          writer = std::move(*ctx);
          NotePrimary(writer.get());
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
      // Once per reason, not once per attempt (every 200 ms during a failover).
      if (std::string text = failure.ToString(); text != last_logged) {
        spdlog::warn("Redis write failed ({}); retrying", text);
        last_logged = std::move(text);
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, max_backoff);
    }
  }

  // Logs the writer's Redis when it changes (a failover), and the first one.
  void NotePrimary(redisContext* ctx) {
    std::string where = Where(ctx);
    if (where == primary_) return;
    if (primary_.empty()) {
      spdlog::info("writing to {}", where);
    } else {
      spdlog::warn("writing to {} now (was {}): the Redis primary changed", where, primary_);
    }
    primary_ = where;
    expect_replica_ = true;
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

  // The writer thread's own: its Redis ("Redis at H:P"), and whether a batch waits for a
  // replica (sentinel mode).
  std::string primary_;
  bool expect_replica_ = true;

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
  if (!options.sentinels.empty() && options.master_name.empty()) {
    return absl::InvalidArgumentError(
        "--redis-master-name is empty: with --redis-sentinel, give the name the sentinels "
        "monitor (NAME in their `sentinel monitor NAME HOST PORT QUORUM`)");
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
