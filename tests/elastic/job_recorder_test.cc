// The controller's record keeper takes scale and stop requests as they are written (a KV
// message of its subscription, not only its writer's periodic read) and posts each to the
// controller's inbox once.
#include "elastic/job_recorder.h"

#include <memory>
#include <string>
#include <vector>

#include "client/gcs_client.h"
#include "elastic/job_keys.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx::elastic {
namespace {

rpc::KvEntry Entry(const std::string& key, const std::string& value, bool deleted = false) {
  rpc::KvEntry e;
  e.set_namespace_(keys::kNamespace);
  e.set_key(key);
  e.set_value(value);
  e.set_deleted(deleted);
  return e;
}

// The kinds and values of what `inbox` holds now, taken: "ScaleRequested r1:3:", "StopRequested".
std::vector<std::string> Taken(Inbox& inbox) {
  std::vector<std::string> out;
  for (const Signal& s : inbox.Take()) {
    out.push_back(s.value.empty() ? SignalName(s.kind)
                                  : std::string(SignalName(s.kind)) + " " + s.value);
  }
  return out;
}

TEST(JobRecorderTest, PostsOnlyItsOwnJobsRequestsAndEachOnce) {
  Inbox inbox;
  JobRecorder recorder("job-a", absl::Hours(1), absl::Seconds(1), &inbox);
  recorder.OnRequest(Entry(keys::Scale("job-b"), "x:3:"));  // another job's
  recorder.OnRequest(Entry(keys::Stop("job-b"), "1"));
  rpc::KvEntry other_namespace = Entry(keys::Scale("job-a"), "x:3:");
  other_namespace.set_namespace_("collective");
  recorder.OnRequest(other_namespace);
  recorder.OnRequest(Entry(keys::Stop("job-a"), "", /*deleted=*/true));  // a cleanup
  EXPECT_TRUE(inbox.Empty());

  recorder.OnRequest(Entry(keys::Scale("job-a"), "r1:3:"));
  recorder.OnRequest(Entry(keys::Scale("job-a"), "r1:3:"));  // the same request again
  recorder.OnRequest(Entry(keys::Stop("job-a"), "1"));
  recorder.OnRequest(Entry(keys::Stop("job-a"), "1"));
  recorder.OnRequest(Entry(keys::Scale("job-a"), "r2:4:"));
  EXPECT_EQ(Taken(inbox), std::vector<std::string>(
                              {"ScaleRequested r1:3:", "StopRequested", "ScaleRequested r2:4:"}));
  EXPECT_TRUE(inbox.Empty());
}

// Against a real GCS, with a writer that reads the keys once an hour: only the subscription
// can bring the requests in. The bound is generous: a slow machine cannot fail it.
TEST(JobRecorderTest, ARequestWrittenToTheGcsArrivesThroughTheSubscription) {
  testing::RedisServer redis;
  testing::GcsProcess gcs_process(redis);
  auto gcs = gcs::GcsClient::Connect({gcs_process.address(), gcs_process.token()});
  ASSERT_TRUE(gcs.ok()) << gcs.status();
  Inbox inbox;
  JobRecorder recorder("job-push", absl::Hours(1), absl::Seconds(5), &inbox);
  rpc::JobInfo record;
  record.set_job_id("job-push");
  recorder.Start(gcs->get(), record);
  auto subscription =
      (*gcs)->SubscribeKeys({rpc::KV}, recorder.RequestKeys(), [&](const rpc::PubMessage& m) {
        if (m.has_kv()) recorder.OnRequest(m.kv());
      });
  // The writer's first turn (a read of the keys, then the record saved) is over before the
  // requests are written: the record is in the GCS.
  ASSERT_TRUE(testing::WaitFor([&] { return (*gcs)->GetJob("job-push").ok(); }, absl::Seconds(60)));
  ASSERT_TRUE((*gcs)->KvPut(keys::kNamespace, keys::Scale("job-push"), "r7:2:", true).ok());
  std::vector<std::string> taken;
  auto take = [&] {
    for (auto& t : Taken(inbox)) taken.push_back(t);
  };
  EXPECT_TRUE(inbox.Await(absl::Seconds(60)));
  take();
  EXPECT_EQ(taken, std::vector<std::string>({"ScaleRequested r7:2:"}));
  ASSERT_TRUE((*gcs)->KvPut(keys::kNamespace, keys::Stop("job-push"), "1", true).ok());
  EXPECT_TRUE(inbox.Await(absl::Seconds(60)));
  take();
  EXPECT_EQ(taken, std::vector<std::string>({"ScaleRequested r7:2:", "StopRequested"}));
  subscription.reset();
  recorder.Finish();
}

}  // namespace
}  // namespace phalanx::elastic
