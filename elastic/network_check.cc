#include "elastic/network_check.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "collectives/kv_store.h"

namespace phalanx::elastic {
namespace {

// The median of `iterations` timings of an n×n float matmul, in ms.
double TimeMatmulMs(int n, int iterations) {
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), b(a.size(), 0.5f), c(a.size());
  std::vector<double> times;
  for (int it = 0; it < std::max(iterations, 1); ++it) {
    absl::Time t0 = absl::Now();
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < n; ++k) {
        float aik = a[static_cast<size_t>(i) * n + k];
        for (int j = 0; j < n; ++j)
          c[static_cast<size_t>(i) * n + j] += aik * b[static_cast<size_t>(k) * n + j];
      }
    }
    times.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  std::sort(times.begin(), times.end());
  volatile float sink = c.empty() ? 0 : c[0];
  (void)sink;
  return times[times.size() / 2];
}

std::string ChecksPrefix(const collective::CollectiveGroup& group) {
  return absl::StrCat(group.name(), "/netcheck/");
}

// Rank 0 drops the lines of epochs before `epoch` (a check's lines outlive it until then: a
// slow member may still be reading them).
void DropOlderLines(collective::RendezvousStore& store, const std::string& prefix, int64_t epoch) {
  auto keys = store.List(prefix);
  if (!keys.ok()) return;
  std::vector<int64_t> old;
  for (const auto& [key, value] : *keys) {
    std::vector<std::string> parts = absl::StrSplit(key.substr(prefix.size()), '/');
    int64_t e = 0;
    if (!parts.empty() && parts[0].size() > 1 && absl::SimpleAtoi(parts[0].substr(1), &e) &&
        e < epoch && std::find(old.begin(), old.end(), e) == old.end()) {
      old.push_back(e);
    }
  }
  for (int64_t e : old) store.DeletePrefix(absl::StrCat(prefix, "e", e, "/")).IgnoreError();
}

}  // namespace

void NetworkCheckOptionsFromEnvironment(NetworkCheckOptions* options) {
  int ms = 0;
  const char* value = std::getenv("PHALANX_NETCHECK_DELAY_MS");
  if (value != nullptr && absl::SimpleAtoi(value, &ms) && ms > 0) {
    options->matmul_delay = absl::Milliseconds(ms);
  }
}

std::string RankLine::Encode() const {
  return absl::StrFormat("%f,%d,%f,%d,%f", matmul_ms, round_ok[0], round_ms[0], round_ok[1],
                         round_ms[1]);
}

std::optional<RankLine> RankLine::Decode(const std::string& text) {
  std::vector<std::string> f = absl::StrSplit(text, ',');
  RankLine line;
  int ok1 = 0, ok2 = 0;
  if (f.size() != 5 || !absl::SimpleAtod(f[0], &line.matmul_ms) || !absl::SimpleAtoi(f[1], &ok1) ||
      !absl::SimpleAtod(f[2], &line.round_ms[0]) || !absl::SimpleAtoi(f[3], &ok2) ||
      !absl::SimpleAtod(f[4], &line.round_ms[1])) {
    return std::nullopt;
  }
  line.round_ok[0] = ok1 != 0;
  line.round_ok[1] = ok2 != 0;
  return line;
}

double NetworkCheckReport::Skew() const {
  double slowest = 0;
  for (const auto& r : ranks) slowest = std::max(slowest, r.total_ms);
  return median_ms > 0 ? slowest / median_ms : 0;
}

std::string NetworkCheckReport::ToString() const {
  std::string out = absl::StrFormat("network check, epoch %d, median %.1f ms:", epoch, median_ms);
  for (const auto& r : ranks) {
    absl::StrAppendFormat(&out, "\n  rank %d: matmul %.1f ms, exchange %.1f ms%s%s", r.rank,
                          r.matmul_ms, r.exchange_ms, r.straggler ? "  STRAGGLER" : "",
                          r.faulty ? "  FAULTY" : "");
  }
  return out;
}

int NetworkCheckPartner(int round, int r, int n) {
  int p;
  if (round == 1) {
    p = r ^ 1;
  } else if (r == 0) {
    p = n % 2 == 0 ? n - 1 : -1;
  } else {
    p = r % 2 == 1 ? r + 1 : r - 1;
    if (p == n) p = n % 2 == 0 ? 0 : -1;
  }
  return (p >= 0 && p < n && p != r) ? p : -1;
}

NetworkCheckReport JudgeNetworkCheck(int64_t epoch,
                                     const std::vector<std::optional<RankLine>>& lines,
                                     double straggler_factor) {
  NetworkCheckReport report;
  report.epoch = epoch;
  std::vector<double> totals;
  for (size_t r = 0; r < lines.size(); ++r) {
    RankCheck check;
    check.rank = static_cast<int>(r);
    if (const auto& line = lines[r]) {
      check.reported = true;
      check.matmul_ms = line->matmul_ms;
      check.round1_ok = line->round_ok[0];
      check.round2_ok = line->round_ok[1];
      check.exchange_ms = std::max(line->round_ms[0], line->round_ms[1]);
      check.total_ms = check.matmul_ms + check.exchange_ms;
      totals.push_back(check.total_ms);
    }
    report.ranks.push_back(check);
  }
  std::sort(totals.begin(), totals.end());
  report.median_ms = totals.empty() ? 0 : totals[(totals.size() - 1) / 2];
  for (auto& check : report.ranks) {
    check.faulty = !check.reported || (!check.round1_ok && !check.round2_ok);
    check.straggler = check.reported && !check.faulty &&
                      check.total_ms > straggler_factor * report.median_ms &&
                      check.total_ms - report.median_ms >= kStragglerMinGapMs;
    if (check.faulty) report.faulty.push_back(check.rank);
    if (check.straggler) report.stragglers.push_back(check.rank);
  }
  return report;
}

absl::StatusOr<NetworkCheckReport> RunNetworkCheck(collective::CollectiveGroup& group,
                                                   collective::RendezvousStore& store,
                                                   const NetworkCheckOptions& options,
                                                   int sequence) {
  const int rank = group.rank(), world = group.world_size();
  const int64_t epoch = group.epoch();
  if (epoch == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "network check: collective group '", group.name(), "' has no epoch: call Reconfigure"));
  }
  RankLine mine;
  mine.matmul_ms = TimeMatmulMs(options.matmul_size, options.matmul_iterations);
  if (options.matmul_delay > absl::ZeroDuration()) {
    absl::SleepFor(options.matmul_delay);
    mine.matmul_ms += absl::ToDoubleMilliseconds(options.matmul_delay);
  }
  // The rounds in order; a rank sitting one out keeps it ok in 0 ms.
  std::vector<int> peers, rounds;
  for (int round = 1; round <= 2; ++round) {
    int p = NetworkCheckPartner(round, rank, world);
    if (p < 0) continue;
    peers.push_back(p);
    rounds.push_back(round - 1);
  }
  // A group that failed before the check (ProbeLinks refuses) fails both rounds: the line
  // still goes out at once, so that the others need not wait it out to name this rank.
  auto probes = group.ProbeLinks(peers, options.exchange_bytes, options.timeout);
  for (size_t i = 0; i < rounds.size(); ++i) {
    mine.round_ok[rounds[i]] = probes.ok() && (*probes)[i].status.ok();
    mine.round_ms[rounds[i]] = probes.ok() ? absl::ToDoubleMilliseconds((*probes)[i].took) : 0;
  }

  const std::string prefix = ChecksPrefix(group);
  if (rank == 0) DropOlderLines(store, prefix, epoch);
  collective::KvStore lines_store(&store, absl::StrCat(prefix, "e", epoch, "/", sequence, "/"));
  if (auto s = lines_store.Set(absl::StrCat(rank), mine.Encode()); !s.ok()) return s;
  std::vector<std::optional<RankLine>> lines(world);
  absl::Time deadline = absl::Now() + 6 * options.timeout;
  for (int r = 0; r < world; ++r) {
    absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    auto value = lines_store.Get(absl::StrCat(r), left);
    if (value.ok()) lines[r] = RankLine::Decode(*value);
  }
  return JudgeNetworkCheck(epoch, lines, options.straggler_factor);
}

}  // namespace phalanx::elastic
