#include "gcs/publisher.h"

#include "gtest/gtest.h"

namespace phalanx::gcs {
namespace {

rpc::PubMessage NodeMessage(const std::string& id) {
  rpc::PubMessage m;
  m.set_channel(rpc::NODE);
  m.set_key(id);
  m.mutable_node()->set_node_id(id);
  return m;
}

std::vector<rpc::PubMessage> Drain(GcsPublisher::Subscriber& sub) {
  std::vector<rpc::PubMessage> out;
  while (auto m = sub.Next(absl::Milliseconds(20))) out.push_back(*m);
  return out;
}

rpc::SubscribeRequest Request(const std::string& incarnation, uint64_t last_seq) {
  rpc::SubscribeRequest r;
  r.add_channels(rpc::NODE);
  r.set_incarnation(incarnation);
  (*r.mutable_last_seq())[rpc::NODE] = last_seq;
  return r;
}

TEST(Publisher, DeliversInOrderWithSequenceNumbers) {
  GcsPublisher publisher("inc1");
  rpc::SubscribeRequest request;
  request.add_channels(rpc::NODE);
  auto sub = publisher.Subscribe(request);
  auto first = Drain(*sub);  // a fresh subscriber gets an (empty) snapshot first
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(first[0].snapshot_done());
  for (int i = 0; i < 100; ++i) publisher.Publish(NodeMessage(absl::StrCat("n", i)));
  rpc::PubMessage other;
  other.set_channel(rpc::JOB);
  publisher.Publish(other);  // not subscribed
  auto got = Drain(*sub);
  ASSERT_EQ(got.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(got[i].seq(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(got[i].key(), absl::StrCat("n", i));
    EXPECT_EQ(got[i].incarnation(), "inc1");
  }
}

TEST(Publisher, ReconnectingSubscriberGetsWhatItMissed) {
  GcsPublisher publisher("inc1", /*replay_limit=*/50);
  for (int i = 0; i < 10; ++i) publisher.Publish(NodeMessage(absl::StrCat("n", i)));
  auto sub = publisher.Subscribe(Request("inc1", 4));
  auto got = Drain(*sub);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got.front().seq(), 5u);
  EXPECT_FALSE(got.front().snapshot());
  EXPECT_EQ(got.back().seq(), 10u);
}

TEST(Publisher, TooOldAGapOrANewIncarnationGetsASnapshot) {
  GcsPublisher publisher("inc2", /*replay_limit=*/5);
  std::vector<std::string> table;
  publisher.SetSnapshotProvider(rpc::NODE, [&](const auto& consume) {
    std::vector<rpc::PubMessage> out;
    for (const auto& id : table) out.push_back(NodeMessage(id));
    consume(out);
  });
  for (int i = 0; i < 20; ++i) {
    table.push_back(absl::StrCat("n", i));
    publisher.Publish(NodeMessage(table.back()));
  }
  for (auto request : {Request("inc2", 3), Request("inc1", 19)}) {
    auto sub = publisher.Subscribe(request);
    auto got = Drain(*sub);
    ASSERT_EQ(got.size(), 21u);
    for (int i = 0; i < 20; ++i) EXPECT_TRUE(got[i].snapshot());
    EXPECT_TRUE(got.back().snapshot_done());
    EXPECT_EQ(got.back().seq(), 20u);
    publisher.Unsubscribe(sub);
  }
}

TEST(Publisher, SlowSubscriberIsClosedNotBlocking) {
  GcsPublisher publisher("inc", 10, /*subscriber_queue_limit=*/100);
  rpc::SubscribeRequest request;
  request.add_channels(rpc::NODE);
  auto sub = publisher.Subscribe(request);
  for (int i = 0; i < 500; ++i) publisher.Publish(NodeMessage("n"));
  EXPECT_TRUE(sub->closed());
}

TEST(Publisher, LogLinesAreBestEffortNeitherKeptNorClosingASlowSubscriber) {
  GcsPublisher publisher("inc1");
  rpc::SubscribeRequest request;
  request.add_channels(rpc::LOGS);
  auto sub = publisher.Subscribe(request);
  ASSERT_EQ(Drain(*sub).size(), 1u);  // the (empty) snapshot's end
  rpc::PubMessage log;
  log.set_channel(rpc::LOGS);
  log.mutable_log()->add_lines("hello");
  for (size_t i = 0; i < GcsPublisher::kLogQueueLimit + 10; ++i) publisher.Publish(log);
  EXPECT_FALSE(sub->closed());  // a slow reader misses lines, and keeps its stream
  EXPECT_EQ(Drain(*sub).size(), GcsPublisher::kLogQueueLimit);
  publisher.Publish(log);
  EXPECT_EQ(Drain(*sub).size(), 1u);
  // None is kept to replay: a subscriber that resumes gets the (empty) snapshot instead.
  rpc::SubscribeRequest resume = request;
  resume.set_incarnation("inc1");
  (*resume.mutable_last_seq())[rpc::LOGS] = 5;
  auto again = Drain(*publisher.Subscribe(resume));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].snapshot_done());
}

// A driver subscribes to its own job's LOGS: the others' lines never reach its stream.
TEST(Publisher, ASubscriberWithKeysGetsOnlyTheirMessages) {
  GcsPublisher publisher("inc1");
  rpc::SubscribeRequest request;
  request.add_channels(rpc::LOGS);
  request.add_keys("job-a");
  auto mine = publisher.Subscribe(request);
  request.clear_keys();
  auto all = publisher.Subscribe(request);
  ASSERT_EQ(Drain(*mine).size(), 1u);  // the (empty) snapshot's end passes the filter
  ASSERT_EQ(Drain(*all).size(), 1u);
  for (const char* job : {"job-a", "job-b", "job-a", "job-c"}) {
    rpc::PubMessage log;
    log.set_channel(rpc::LOGS);
    log.set_key(job);
    log.mutable_log()->set_job_id(job);
    publisher.Publish(log);
  }
  auto got = Drain(*mine);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& m : got) EXPECT_EQ(m.key(), "job-a");
  EXPECT_EQ(Drain(*all).size(), 4u);
}

}  // namespace
}  // namespace phalanx::gcs
