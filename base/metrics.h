// Prometheus metrics: a latency histogram that many threads observe into, and a writer of
// Prometheus's text exposition format (version 0.0.4) for a /metrics page. Names are
// prefixed `phalanx_` by the callers; label values are escaped here.
//
// Thread safety: Histogram and HistogramFamily are thread-safe; a MetricsWriter is used by
// one thread to write one page.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Upper bounds, in seconds, for the latency of an RPC or a Redis write: 100 µs … 10 s.
const std::vector<double>& LatencyBuckets();
// Upper bounds, in seconds, for the phases of a recovery: 10 ms … 10 min.
const std::vector<double>& RecoveryBuckets();

// Counts and sums of observations in cumulative buckets (as Prometheus reads them).
struct HistogramData {
  std::vector<double> bounds;     // upper bounds, increasing; +Inf is implied
  std::vector<uint64_t> buckets;  // observations <= bounds[i] (not cumulative); size + 1
  double sum = 0;
  uint64_t count = 0;

  explicit HistogramData(std::vector<double> upper_bounds = {});
  void Observe(double value);
};

class Histogram {
 public:
  explicit Histogram(const std::vector<double>& bounds) : data_(bounds) {}
  void Observe(double value);
  void Observe(absl::Duration d) { Observe(absl::ToDoubleSeconds(d)); }
  HistogramData Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  HistogramData data_ ABSL_GUARDED_BY(mu_);
};

// Histograms keyed by one label's value (an RPC method, a Redis command).
class HistogramFamily {
 public:
  explicit HistogramFamily(std::vector<double> bounds) : bounds_(std::move(bounds)) {}
  void Observe(const std::string& key, double value);
  std::map<std::string, HistogramData> Snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::map<std::string, HistogramData> by_key_ ABSL_GUARDED_BY(mu_);
};

// Writes one /metrics page. Each family is opened once (HELP and TYPE), then its samples
// follow: write a family's samples together.
class MetricsWriter {
 public:
  void Gauge(const std::string& name, const std::string& help);
  void Counter(const std::string& name, const std::string& help);
  void HistogramFamily(const std::string& name, const std::string& help);
  // A sample of the family opened last.
  void Sample(const Labels& labels, double value);
  // A histogram of the family opened last: its _bucket, _sum and _count lines.
  void Histogram(const Labels& labels, const HistogramData& data);

  const std::string& text() const { return out_; }

 private:
  void Open(const std::string& name, const std::string& type, const std::string& help);
  void Line(const std::string& name, const Labels& labels, double value);

  std::string family_;
  std::string out_;
};

// "Gloo \"x\"\n" → the form a label value takes between quotes.
std::string EscapeLabelValue(const std::string& value);

}  // namespace phalanx::metrics
