#include "base/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace phalanx::metrics {

const std::vector<double>& LatencyBuckets() {
  static const auto* bounds =
      new std::vector<double>{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                              0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  return *bounds;
}

const std::vector<double>& RecoveryBuckets() {
  static const auto* bounds = new std::vector<double>{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,  2.5,
                                                      5,    10,    30,   60,  120,  300, 600};
  return *bounds;
}

HistogramData::HistogramData(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), buckets(bounds.size() + 1, 0) {}

void HistogramData::Observe(double value) {
  size_t i = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  ++buckets[i];
  sum += value;
  ++count;
}

void Histogram::Observe(double value) {
  absl::MutexLock lock(&mu_);
  data_.Observe(value);
}

HistogramData Histogram::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return data_;
}

void HistogramFamily::Observe(const std::string& key, double value) {
  absl::MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) it = by_key_.emplace(key, HistogramData(bounds_)).first;
  it->second.Observe(value);
}

std::map<std::string, HistogramData> HistogramFamily::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return by_key_;
}

namespace {

// Prometheus's escapes: backslash and newline always, the double quote in label values.
std::string Escape(const std::string& text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.15g", v);
}

std::string HelpText(const std::string& help) { return Escape(help, false); }

}  // namespace

std::string EscapeLabelValue(const std::string& value) { return Escape(value, true); }

void MetricsWriter::Open(const std::string& name, const std::string& type,
                         const std::string& help) {
  family_ = name;
  absl::StrAppend(&out_, "# HELP ", name, " ", HelpText(help), "\n# TYPE ", name, " ", type, "\n");
}

void MetricsWriter::Gauge(const std::string& name, const std::string& help) {
  Open(name, "gauge", help);
}
void MetricsWriter::Counter(const std::string& name, const std::string& help) {
  Open(name, "counter", help);
}
void MetricsWriter::HistogramFamily(const std::string& name, const std::string& help) {
  Open(name, "histogram", help);
}

void MetricsWriter::Line(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      absl::StrAppend(&out_, labels[i].first, "=\"", EscapeLabelValue(labels[i].second), "\"");
    }
    out_ += '}';
  }
  absl::StrAppend(&out_, " ", FormatValue(value), "\n");
}

void MetricsWriter::Sample(const Labels& labels, double value) { Line(family_, labels, value); }

void MetricsWriter::Histogram(const Labels& labels, const HistogramData& data) {
  uint64_t cumulative = 0;
  Labels with_le = labels;
  with_le.emplace_back("le", "");
  for (size_t i = 0; i <= data.bounds.size(); ++i) {
    cumulative += data.buckets[i];
    with_le.back().second = i < data.bounds.size() ? FormatValue(data.bounds[i]) : "+Inf";
    Line(family_ + "_bucket", with_le, static_cast<double>(cumulative));
  }
  Line(family_ + "_sum", labels, data.sum);
  Line(family_ + "_count", labels, static_cast<double>(data.count));
}

}  // namespace phalanx::metrics
