// The network check above the transport: its pairings and judgement as pure functions, and
// whole checks over real collective groups (threads of this process, TCP and shared memory)
// meeting in a map store, with a slowed rank and a rank that never comes.
#include "elastic/network_check.h"

#include <unistd.h>

#include <memory>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/map_store.h"

namespace phalanx::elastic {
namespace {

using phalanx::testing::MapStore;

RankLine Line(double matmul_ms, double exchange_ms, bool ok1 = true, bool ok2 = true) {
  RankLine line;
  line.matmul_ms = matmul_ms;
  line.round_ok[0] = ok1;
  line.round_ok[1] = ok2;
  line.round_ms[0] = line.round_ms[1] = exchange_ms;
  return line;
}

// Every rank is paired at most once a round, both sides agree, and across the two rounds
// every rank of a group of two or more has a partner at least once.
TEST(NetworkCheckTest, PairingsAreMutualAndCoverEveryRank) {
  for (int n = 1; n <= 9; ++n) {
    std::set<int> paired;
    for (int round = 1; round <= 2; ++round) {
      for (int r = 0; r < n; ++r) {
        int p = NetworkCheckPartner(round, r, n);
        if (p < 0) continue;
        EXPECT_NE(p, r);
        EXPECT_LT(p, n);
        EXPECT_EQ(NetworkCheckPartner(round, p, n), r) << "n=" << n << " round " << round;
        paired.insert(r);
      }
    }
    EXPECT_EQ(static_cast<int>(paired.size()), n > 1 ? n : 0) << "n=" << n;
  }
}

TEST(NetworkCheckTest, ALineRoundTrips) {
  RankLine line = Line(3.5, 7.25, true, false);
  auto back = RankLine::Decode(line.Encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_DOUBLE_EQ(back->matmul_ms, 3.5);
  EXPECT_TRUE(back->round_ok[0]);
  EXPECT_FALSE(back->round_ok[1]);
  EXPECT_DOUBLE_EQ(back->round_ms[1], 7.25);
  EXPECT_FALSE(RankLine::Decode("1,2,3").has_value());
  EXPECT_FALSE(RankLine::Decode("a,1,2,1,2").has_value());
}

// Slower than the factor × the median: a straggler. No line, or both rounds failed: faulty.
// One failed round is its partner's failure as much as its own: neither.
TEST(NetworkCheckTest, TheJudgementNamesStragglersAndFaultyRanks) {
  std::vector<std::optional<RankLine>> lines = {Line(10, 10),
                                                Line(10, 12),
                                                Line(60, 10),
                                                std::nullopt,
                                                Line(10, 10, false, false),
                                                Line(11, 10, false, true)};
  NetworkCheckReport report = JudgeNetworkCheck(4, lines, 2.0);
  EXPECT_EQ(report.epoch, 4);
  EXPECT_DOUBLE_EQ(report.median_ms, 21);  // of 20, 22, 70, 20, 21
  EXPECT_EQ(report.stragglers, std::vector<int>({2}));
  EXPECT_EQ(report.faulty, std::vector<int>({3, 4}));
  EXPECT_FALSE(report.ranks[5].faulty);
  EXPECT_NEAR(report.Skew(), 70.0 / 21, 1e-9);
  // Four times the median but under kStragglerMinGapMs slower (a wobble of sub-millisecond
  // timings, as a CI run saw): no straggler.
  NetworkCheckReport wobble = JudgeNetworkCheck(1, {Line(0, 0.1), Line(0, 0.4), Line(0, 0.1)}, 2.0);
  EXPECT_TRUE(wobble.stragglers.empty()) << wobble.ToString();
  EXPECT_NE(report.ToString().find("rank 2: matmul 60.0 ms, exchange 10.0 ms  STRAGGLER"),
            std::string::npos)
      << report.ToString();
  // No line at all: every rank faulty, no median, no skew.
  NetworkCheckReport none = JudgeNetworkCheck(1, {std::nullopt, std::nullopt}, 2.0);
  EXPECT_EQ(none.faulty, std::vector<int>({0, 1}));
  EXPECT_EQ(none.Skew(), 0);
}

// Runs `world` ranks as threads, each forming epoch 1 of one group over `store` and running
// the check (a rank in `absent` forms the epoch, then leaves without checking; one in `failed`
// has its group fail before it checks). Shared memory with every rank well, else TCP.
std::vector<absl::StatusOr<NetworkCheckReport>> RunChecks(int world,
                                                          const std::shared_ptr<MapStore>& store,
                                                          const std::string& name,
                                                          const std::vector<absl::Duration>& delays,
                                                          std::set<int> absent = {},
                                                          std::set<int> failed = {}) {
  std::vector<absl::StatusOr<NetworkCheckReport>> reports(world, absl::UnknownError("unrun"));
  std::vector<std::unique_ptr<collective::CollectiveGroup>> groups(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      collective::GroupOptions options;
      options.name = name;
      options.rendezvous = store;
      options.timeout = absl::Seconds(60);
      // With a rank leaving, TCP between every pair: its closed sockets tell its partners at
      // once (threads share a process, so shared memory cannot see one of them go).
      options.shared_memory = absent.empty() && failed.empty();
      auto group = collective::CollectiveGroup::Create(options);
      if (!group.ok()) {
        reports[r] = group.status();
        return;
      }
      groups[r] = std::move(*group);
      if (auto s = groups[r]->Reconfigure(1, r, world); !s.ok()) {
        reports[r] = s;
        return;
      }
      if (absent.count(r)) {
        groups[r].reset();  // its connections close: its partners' rounds fail
        return;
      }
      // Its group fails before the check (its connections are shut down too).
      if (failed.count(r)) groups[r]->Abort("the test failed this rank's group");
      NetworkCheckOptions options_check;
      options_check.matmul_size = 32;
      options_check.exchange_bytes = 64 << 10;
      options_check.matmul_delay = delays[r];
      // With a rank leaving: its partners' exchanges with it wait this long (round 2's
      // meeting 3× it), and every survivor waits 6× it for its line.
      options_check.timeout = absl::Seconds(absent.empty() && failed.empty() ? 60 : 2);
      reports[r] = RunNetworkCheck(*groups[r], *store, options_check);
    });
  }
  for (auto& t : ranks) t.join();
  return reports;
}

// A rank whose compute is slowed well past twice the others' (a 1.5 s delay against a few
// milliseconds of matmul: load on this machine cannot close that gap) is the one straggler,
// and every rank's report says so.
TEST(NetworkCheckTest, EveryRankFindsTheSlowedRankOverRealGroups) {
  auto store = std::make_shared<MapStore>();
  std::string name = absl::StrCat("netcheck-slow-", getpid());
  std::vector<absl::Duration> delays(4, absl::ZeroDuration());
  delays[2] = absl::Milliseconds(1500);
  auto reports = RunChecks(4, store, name, delays);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
    EXPECT_EQ(reports[r]->stragglers, std::vector<int>({2})) << reports[r]->ToString();
    EXPECT_TRUE(reports[r]->faulty.empty()) << reports[r]->ToString();
  }
  // The lines live beside the group's keys.
  auto lines = store->List(name + "/netcheck/e1/0/");
  ASSERT_TRUE(lines.ok());
  EXPECT_EQ(lines->size(), 4u);
}

// A rank that left after the epoch formed fails both of its rounds on its partners' side and
// writes no line: every survivor names it faulty, and names no one else.
TEST(NetworkCheckTest, ARankThatLeftIsFaultyAndItsPartnersAreNot) {
  auto store = std::make_shared<MapStore>();
  std::string name = absl::StrCat("netcheck-gone-", getpid());
  std::vector<absl::Duration> delays(4, absl::ZeroDuration());
  auto reports = RunChecks(4, store, name, delays, {1});
  for (int r : {0, 2, 3}) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
    EXPECT_EQ(reports[r]->faulty, std::vector<int>({1})) << reports[r]->ToString();
  }
}

// A rank whose group had failed before the check still writes its line, both rounds failed,
// at once: every rank names it faulty, and only it.
TEST(NetworkCheckTest, ARankWhoseGroupHadFailedWritesItsLineAndIsFaulty) {
  auto store = std::make_shared<MapStore>();
  std::string name = absl::StrCat("netcheck-failed-", getpid());
  std::vector<absl::Duration> delays(4, absl::ZeroDuration());
  auto reports = RunChecks(4, store, name, delays, {}, {1});
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
    EXPECT_EQ(reports[r]->faulty, std::vector<int>({1})) << reports[r]->ToString();
    EXPECT_TRUE(reports[r]->ranks[1].reported) << reports[r]->ToString();
  }
}

}  // namespace
}  // namespace phalanx::elastic
