// GcsPublisher: fans every table change out to the subscribers of its channel. Each message
// gets the next sequence number of its channel; a reconnecting subscriber that names the last
// number it saw gets what it missed replayed (from a bounded buffer), or a snapshot of the
// channel's table when the gap is too old or the GCS restarted since. Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/gcs.pb.h"

namespace phalanx::gcs {

class GcsPublisher {
 public:
  // A subscriber of LOGS gets a batch of lines only while fewer than this many messages wait
  // in its queue; LOGS messages are never kept for replay. The node reads at most
  // kLogReadLimit (64 KiB) of a worker per batch: at most 16 MiB wait per subscriber.
  static constexpr size_t kLogQueueLimit = 256;

  // One subscriber's queue. Next() is called by the stream that serves it.
  class Subscriber {
   public:
    // The next message, or nullopt after `timeout` or once closed.
    std::optional<rpc::PubMessage> Next(absl::Duration timeout);
    // True once closed: by the publisher's shutdown, or because it fell too far behind (the
    // client then reconnects and resyncs).
    bool closed() const;

   private:
    friend class GcsPublisher;
    // False when this push dropped it (it fell `limit` messages behind).
    bool Push(const rpc::PubMessage& message, size_t limit);
    // Queues it only while fewer than `limit` wait (the LOGS channel's best effort).
    void Offer(const rpc::PubMessage& message, size_t limit);
    void Close();

    // Whether it takes `message`: every one, or only those of its keys (and the snapshots'
    // end markers).
    bool Wants(const rpc::PubMessage& message) const {
      return keys_.empty() || message.snapshot_done() || keys_.contains(message.key());
    }

    mutable absl::Mutex mu_;
    std::deque<rpc::PubMessage> queue_ ABSL_GUARDED_BY(mu_);
    bool closed_ ABSL_GUARDED_BY(mu_) = false;
    std::vector<rpc::Channel> channels_;
    absl::flat_hash_set<std::string> keys_;  // SubscribeRequest.keys, set before it is shared
  };

  // Produces the channel's current state as messages (body set, key set) while the table's
  // owner holds its lock, and passes them to `consume` before releasing it, so that no change
  // can be published between the snapshot and the registration that `consume` performs.
  using SnapshotProvider =
      std::function<void(const std::function<void(std::vector<rpc::PubMessage>)>& consume)>;

  GcsPublisher(std::string incarnation, size_t replay_limit = 10000,
               size_t subscriber_queue_limit = 100000);

  const std::string& incarnation() const { return incarnation_; }

  void SetSnapshotProvider(rpc::Channel channel, SnapshotProvider provider);

  // Stamps `message` with its channel's next sequence number and this incarnation, and
  // queues it to every subscriber of the channel. Tables publish a change once the store has
  // it, from the store's one writer thread (gcs/table.h), so the order of messages is the
  // order of changes.
  void Publish(rpc::PubMessage message);

  // Registers a subscriber. Its queue starts with what it missed since `request`'s resume
  // point: a replay, or a snapshot (then a snapshot_done marker) per channel.
  std::shared_ptr<Subscriber> Subscribe(const rpc::SubscribeRequest& request);
  void Unsubscribe(const std::shared_ptr<Subscriber>& subscriber);

  // Closes every subscriber (their streams end; clients reconnect to the next GCS).
  void Shutdown();

  uint64_t LastSeq(rpc::Channel channel) const;

  struct Stats {
    size_t subscribers = 0;  // streams subscribed now
    uint64_t dropped = 0;    // closed for falling too far behind, since the start
    uint64_t published = 0;  // messages, since the start
  };
  Stats GetStats() const;

 private:
  struct ChannelState {
    uint64_t seq = 0;
    std::deque<rpc::PubMessage> recent;  // the last replay_limit_ messages
    std::vector<std::shared_ptr<Subscriber>> subscribers;
    SnapshotProvider snapshot;
  };

  // Adds `subscriber` to `channel`, queueing `backlog` first.
  void AttachLocked(rpc::Channel channel, const std::shared_ptr<Subscriber>& subscriber,
                    std::vector<rpc::PubMessage> backlog, bool is_snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string incarnation_;
  const size_t replay_limit_;
  const size_t queue_limit_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, ChannelState> channels_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t published_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace phalanx::gcs
