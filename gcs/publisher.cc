#include "gcs/publisher.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "base/logging.h"

namespace phalanx::gcs {

std::optional<rpc::PubMessage> GcsPublisher::Subscriber::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closed_ || !queue_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (queue_.empty()) return std::nullopt;
  rpc::PubMessage m = std::move(queue_.front());
  queue_.pop_front();
  return m;
}

bool GcsPublisher::Subscriber::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_ && queue_.empty();
}

bool GcsPublisher::Subscriber::Push(const rpc::PubMessage& message, size_t limit) {
  if (!Wants(message)) return true;
  absl::MutexLock lock(&mu_);
  if (closed_) return true;
  if (queue_.size() >= limit) {
    // Too slow: drop it. It reconnects with its last sequence numbers and resyncs.
    spdlog::warn("subscriber fell {} messages behind; closing its stream", queue_.size());
    queue_.clear();
    closed_ = true;
    return false;
  }
  queue_.push_back(message);
  return true;
}

void GcsPublisher::Subscriber::Offer(const rpc::PubMessage& message, size_t limit) {
  if (!Wants(message)) return;
  absl::MutexLock lock(&mu_);
  if (!closed_ && queue_.size() < limit) queue_.push_back(message);
}

void GcsPublisher::Subscriber::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

GcsPublisher::GcsPublisher(std::string incarnation, size_t replay_limit,
                           size_t subscriber_queue_limit)
    : incarnation_(std::move(incarnation)),
      replay_limit_(replay_limit),
      queue_limit_(subscriber_queue_limit) {}

void GcsPublisher::SetSnapshotProvider(rpc::Channel channel, SnapshotProvider provider) {
  absl::MutexLock lock(&mu_);
  channels_[channel].snapshot = std::move(provider);
}

void GcsPublisher::Publish(rpc::PubMessage message) {
  absl::MutexLock lock(&mu_);
  ChannelState& ch = channels_[message.channel()];
  message.set_seq(++ch.seq);
  message.set_incarnation(incarnation_);
  ++published_;
  if (message.channel() == rpc::LOGS) {
    // Best effort: a subscriber that is behind misses lines rather than holding them (or
    // losing its stream), and none are kept to replay.
    for (const auto& sub : ch.subscribers) sub->Offer(message, kLogQueueLimit);
    return;
  }
  for (const auto& sub : ch.subscribers) dropped_ += sub->Push(message, queue_limit_) ? 0 : 1;
  ch.recent.push_back(std::move(message));
  if (ch.recent.size() > replay_limit_) ch.recent.pop_front();
}

void GcsPublisher::AttachLocked(rpc::Channel channel, const std::shared_ptr<Subscriber>& subscriber,
                                std::vector<rpc::PubMessage> backlog, bool is_snapshot) {
  ChannelState& ch = channels_[channel];
  for (auto& m : backlog) {
    m.set_channel(channel);
    m.set_incarnation(incarnation_);
    if (is_snapshot) {
      m.set_snapshot(true);
      m.set_seq(ch.seq);
    }
    subscriber->Push(m, queue_limit_ + backlog.size());
  }
  if (is_snapshot) {
    rpc::PubMessage done;
    done.set_channel(channel);
    done.set_incarnation(incarnation_);
    done.set_seq(ch.seq);
    done.set_snapshot_done(true);
    subscriber->Push(done, queue_limit_ + backlog.size() + 1);
  }
  ch.subscribers.push_back(subscriber);
}

std::shared_ptr<GcsPublisher::Subscriber> GcsPublisher::Subscribe(
    const rpc::SubscribeRequest& request) {
  auto subscriber = std::make_shared<Subscriber>();
  subscriber->keys_.insert(request.keys().begin(), request.keys().end());
  for (int c : request.channels()) {
    auto channel = static_cast<rpc::Channel>(c);
    if (std::find(subscriber->channels_.begin(), subscriber->channels_.end(), channel) !=
        subscriber->channels_.end()) {
      continue;
    }
    subscriber->channels_.push_back(channel);
    bool resumable = false;
    SnapshotProvider provider;
    {
      absl::MutexLock lock(&mu_);
      ChannelState& ch = channels_[channel];
      auto it = request.last_seq().find(c);
      if (request.incarnation() == incarnation_ && it != request.last_seq().end()) {
        uint64_t last = it->second;
        uint64_t oldest = ch.recent.empty() ? ch.seq + 1 : ch.recent.front().seq();
        if (last <= ch.seq && last + 1 >= oldest) {
          std::vector<rpc::PubMessage> replay;
          for (const auto& m : ch.recent) {
            if (m.seq() > last) replay.push_back(m);
          }
          AttachLocked(channel, subscriber, std::move(replay), /*is_snapshot=*/false);
          resumable = true;
        }
      }
      provider = ch.snapshot;
    }
    if (resumable) continue;
    if (provider) {
      // The provider holds the table owner's lock while calling us; we then take ours (the
      // same order as Publish: owner's lock, then the publisher's).
      provider([&](std::vector<rpc::PubMessage> snapshot) {
        absl::MutexLock lock(&mu_);
        AttachLocked(channel, subscriber, std::move(snapshot), /*is_snapshot=*/true);
      });
    } else {
      absl::MutexLock lock(&mu_);
      AttachLocked(channel, subscriber, {}, /*is_snapshot=*/true);
    }
  }
  return subscriber;
}

void GcsPublisher::Unsubscribe(const std::shared_ptr<Subscriber>& subscriber) {
  absl::MutexLock lock(&mu_);
  for (rpc::Channel c : subscriber->channels_) {
    auto& subs = channels_[c].subscribers;
    subs.erase(std::remove(subs.begin(), subs.end(), subscriber), subs.end());
  }
  subscriber->Close();
}

void GcsPublisher::Shutdown() {
  absl::MutexLock lock(&mu_);
  for (auto& [c, ch] : channels_) {
    for (auto& sub : ch.subscribers) sub->Close();
    ch.subscribers.clear();
  }
}

uint64_t GcsPublisher::LastSeq(rpc::Channel channel) const {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(channel);
  return it == channels_.end() ? 0 : it->second.seq;
}

GcsPublisher::Stats GcsPublisher::GetStats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  absl::flat_hash_set<const Subscriber*> seen;
  for (const auto& [channel, ch] : channels_) {
    for (const auto& sub : ch.subscribers) {
      if (!sub->closed()) seen.insert(sub.get());
    }
  }
  stats.subscribers = seen.size();
  stats.dropped = dropped_;
  stats.published = published_;
  return stats;
}

}  // namespace phalanx::gcs
