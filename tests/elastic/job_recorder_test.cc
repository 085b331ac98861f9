// The controller's record keeper takes scale and stop requests as they are written: a KV
// message of its subscription, not only its writer's periodic read.
#include "elastic/job_recorder.h"

#include <memory>
#include <string>

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

TEST(JobRecorderTest, TakesOnlyItsOwnJobsRequestsAndEachScaleOnce) {
  JobRecorder recorder("job-a", absl::Hours(1), absl::Seconds(1));
  EXPECT_FALSE(recorder.RequestWaiting());
  recorder.OnRequest(Entry(keys::Scale("job-b"), "x:3:"));  // another job's
  recorder.OnRequest(Entry(keys::Stop("job-b"), "1"));
  rpc::KvEntry other_namespace = Entry(keys::Scale("job-a"), "x:3:");
  other_namespace.set_namespace_("collective");
  recorder.OnRequest(other_namespace);
  recorder.OnRequest(Entry(keys::Stop("job-a"), "", /*deleted=*/true));  // a cleanup
  EXPECT_FALSE(recorder.RequestWaiting());
  EXPECT_FALSE(recorder.StopAsked());

  recorder.OnRequest(Entry(keys::Scale("job-a"), "r1:3:"));
  EXPECT_TRUE(recorder.RequestWaiting());
  EXPECT_EQ(recorder.TakeScaleRequest(), "r1:3:");
  recorder.OnRequest(Entry(keys::Scale("job-a"), "r1:3:"));  // the same request again
  EXPECT_EQ(recorder.TakeScaleRequest(), "");
  recorder.OnRequest(Entry(keys::Stop("job-a"), "1"));
  EXPECT_TRUE(recorder.StopAsked());
}

// Against a real GCS, with a writer that reads the keys once an hour: only the subscription
// can bring the requests in. The bound is generous: a slow machine cannot fail it.
TEST(JobRecorderTest, ARequestWrittenToTheGcsArrivesThroughTheSubscription) {
  testing::RedisServer redis;
  testing::GcsProcess gcs_process(redis);
  auto gcs = gcs::GcsClient::Connect({gcs_process.address(), gcs_process.token()});
  ASSERT_TRUE(gcs.ok()) << gcs.status();
  JobRecorder recorder("job-push", absl::Hours(1), absl::Seconds(5));
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
  std::string taken;
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        if (taken.empty()) taken = recorder.TakeScaleRequest();
        return !taken.empty();
      },
      absl::Seconds(60)));
  EXPECT_EQ(taken, "r7:2:");
  ASSERT_TRUE((*gcs)->KvPut(keys::kNamespace, keys::Stop("job-push"), "1", true).ok());
  EXPECT_TRUE(testing::WaitFor([&] { return recorder.StopAsked(); }, absl::Seconds(60)));
  subscription.reset();
  recorder.Finish();
}

}  // namespace
}  // namespace phalanx::elastic
