// The controller's inbox: signals from any thread come out once, in the order they were
// posted, stamped when posted; a wait ends when one comes.
#include "elastic/inbox.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace phalanx::elastic {
namespace {

Signal Died(const std::string& id) {
  Signal s;
  s.kind = Signal::Kind::kRankDied;
  s.actor_id = id;
  return s;
}

TEST(InboxTest, SignalsComeOutOnceInPostOrderStampedWhenPosted) {
  Inbox inbox;
  EXPECT_TRUE(inbox.Empty());
  EXPECT_TRUE(inbox.Take().empty());
  absl::Time before = absl::Now();
  inbox.Post(Died("a"));
  Signal stop;
  stop.kind = Signal::Kind::kStopRequested;
  stop.at = absl::FromUnixSeconds(7);  // a time the poster gave is kept
  inbox.Post(stop);
  inbox.Post(Died("b"));
  std::vector<Signal> taken = inbox.Take();
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_EQ(taken[0].actor_id, "a");
  EXPECT_GE(taken[0].at, before);
  EXPECT_EQ(taken[1].kind, Signal::Kind::kStopRequested);
  EXPECT_EQ(taken[1].at, absl::FromUnixSeconds(7));
  EXPECT_EQ(taken[2].actor_id, "b");
  EXPECT_TRUE(inbox.Empty());
  EXPECT_STREQ(SignalName(Signal::Kind::kScaleRequested), "ScaleRequested");
}

// Many threads post at once: every signal comes out exactly once, each thread's in its order.
TEST(InboxTest, PostsFromManyThreadsAllArriveEachThreadsInOrder) {
  Inbox inbox;
  constexpr int kThreads = 4, kEach = 500;
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) inbox.Post(Died(absl::StrCat(t, ":", i)));
    });
  }
  std::vector<int> next(kThreads, 0);
  int got = 0;
  while (got < kThreads * kEach) {
    ASSERT_TRUE(inbox.Await(absl::Seconds(60)));
    for (const Signal& s : inbox.Take()) {
      int t = s.actor_id[0] - '0';
      EXPECT_EQ(s.actor_id, absl::StrCat(t, ":", next[t])) << "out of order";
      ++next[t];
      ++got;
    }
  }
  for (auto& p : posters) p.join();
  EXPECT_TRUE(inbox.Empty());
}

// A wait ends as a signal comes (from another thread), and at its bound when none does.
TEST(InboxTest, AWaitEndsWhenASignalComesOrAtItsBound) {
  Inbox inbox;
  EXPECT_FALSE(inbox.Await(absl::Milliseconds(10)));
  std::thread poster([&] {
    absl::SleepFor(absl::Milliseconds(50));
    inbox.Post(Died("late"));
  });
  EXPECT_TRUE(inbox.Await(absl::Seconds(60)));  // generous: a slow machine cannot fail it
  poster.join();
  EXPECT_EQ(inbox.Take().size(), 1u);
}

}  // namespace
}  // namespace phalanx::elastic
