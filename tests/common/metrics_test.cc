// The Prometheus text the /metrics pages are made of: families opened once, labels escaped,
// histograms cumulative with +Inf, _sum and _count.
#include "base/metrics.h"

#include "gtest/gtest.h"

namespace phalanx::metrics {
namespace {

TEST(MetricsTest, AHistogramIsWrittenCumulativeWithInfSumAndCount) {
  HistogramData h({0.1, 1});
  h.Observe(0.05);
  h.Observe(0.1);  // on a bound: counted in it (le = less or equal)
  h.Observe(0.5);
  h.Observe(7);
  MetricsWriter w;
  w.HistogramFamily("phalanx_x_seconds", "X.");
  w.Histogram({{"kind", "signal"}}, h);
  EXPECT_EQ(w.text(),
            "# HELP phalanx_x_seconds X.\n"
            "# TYPE phalanx_x_seconds histogram\n"
            "phalanx_x_seconds_bucket{kind=\"signal\",le=\"0.1\"} 2\n"
            "phalanx_x_seconds_bucket{kind=\"signal\",le=\"1\"} 3\n"
            "phalanx_x_seconds_bucket{kind=\"signal\",le=\"+Inf\"} 4\n"
            "phalanx_x_seconds_sum{kind=\"signal\"} 7.65\n"
            "phalanx_x_seconds_count{kind=\"signal\"} 4\n");
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  MetricsWriter w;
  w.Gauge("phalanx_g", "line one\nline \\two");
  w.Sample({{"class", "a\"b\\c\nd"}}, 2.5);
  EXPECT_EQ(w.text(),
            "# HELP phalanx_g line one\\nline \\\\two\n"
            "# TYPE phalanx_g gauge\n"
            "phalanx_g{class=\"a\\\"b\\\\c\\nd\"} 2.5\n");
}

TEST(MetricsTest, AFamilyKeysHistogramsByOneLabel) {
  HistogramFamily f({0.001, 0.01});
  f.Observe("CreateActor", 0.0005);
  f.Observe("CreateActor", 0.005);
  f.Observe("GetActor", 0.5);
  auto s = f.Snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s["CreateActor"].count, 2u);
  EXPECT_EQ(s["CreateActor"].buckets, (std::vector<uint64_t>{1, 1, 0}));
  EXPECT_EQ(s["GetActor"].buckets, (std::vector<uint64_t>{0, 0, 1}));
}

}  // namespace
}  // namespace phalanx::metrics
