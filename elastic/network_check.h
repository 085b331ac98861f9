// The network check: DLRover's straggler and faulty-node check, run by every rank of an
// elastic job's collective group when `straggler.check` is on. Each rank times a matmul and
// an exchange with two partners (two rounds, different pairings: CollectiveGroup::ProbeLinks),
// and writes a line to the group's rendezvous store; every rank reads all the lines and
// judges them the same way. A rank slower than `straggler_factor` × the median, and slower
// than it by at least kStragglerMinGapMs, is a straggler; a rank that failed both rounds, or never
// wrote its line, is faulty (a round fails for both of its partners, so the one failing twice is
// the common factor).
//
// The policy lives here, above the transport: the group only times links.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/collective_group.h"

namespace phalanx::elastic {

// How much slower than the median a rank must also be to be a straggler. The check's work
// takes a few milliseconds, so one preemption by the scheduler, or a sub-millisecond
// wobble of a 0.1 ms exchange, would otherwise make a rank "twice the median" (a test with a
// 32×32 matmul called a rank at 0.4 ms against a median of 0.1 ms a straggler).
inline constexpr double kStragglerMinGapMs = 5.0;

struct NetworkCheckOptions {
  int matmul_size = 128;
  int matmul_iterations = 5;
  size_t exchange_bytes = 1 << 20;
  double straggler_factor = 2.0;
  // Each exchange (ProbeLinks: round 2's meeting waits up to 3× it, as its partner may still
  // be in round 1 with a rank that is gone). Every rank's line is awaited up to 6× it after
  // this rank's rounds: the longest two rounds can take.
  absl::Duration timeout = absl::Seconds(5);
  // Added to this rank's matmul time, as if it were that much slower (a test's straggler).
  absl::Duration matmul_delay = absl::ZeroDuration();
};

// PHALANX_NETCHECK_DELAY_MS=N sets matmul_delay (a test's straggler; the trainer host and the
// test ranks read it, the check itself reads no environment).
void NetworkCheckOptionsFromEnvironment(NetworkCheckOptions* options);

// What one rank measured.
struct RankLine {
  double matmul_ms = 0;
  bool round_ok[2] = {true, true};
  double round_ms[2] = {0, 0};
  std::string Encode() const;
  static std::optional<RankLine> Decode(const std::string& text);
};

struct RankCheck {
  int rank = 0;
  double matmul_ms = -1;
  double exchange_ms = -1;  // the slower of its two rounds
  double total_ms = -1;
  bool round1_ok = false;
  bool round2_ok = false;
  bool reported = false;
  bool straggler = false;
  bool faulty = false;
};

struct NetworkCheckReport {
  int64_t epoch = 0;
  double median_ms = 0;
  std::vector<RankCheck> ranks;
  std::vector<int> stragglers;
  std::vector<int> faulty;
  // The slowest rank's total over the median (0 with no median).
  double Skew() const;
  std::string ToString() const;
};

// The partner of rank `r` of `n` in round 1 or 2, or -1 when it sits out: round 1 pairs
// (0,1),(2,3)…; round 2 pairs (1,2),(3,4)…(n-1,0).
int NetworkCheckPartner(int round, int r, int n);

// The judgement: `lines[r]` is rank r's line (nullopt: it wrote none in time).
NetworkCheckReport JudgeNetworkCheck(int64_t epoch,
                                     const std::vector<std::optional<RankLine>>& lines,
                                     double straggler_factor);

// Runs the check on this member of `group` (every member calls it, with the same options and
// `store`, the group's rendezvous store). Lines live under
// "<group>/netcheck/e<epoch>/<sequence>/": `sequence` counts the checks of an epoch (the
// same on every member); rank 0 deletes older epochs' lines. Errors: no epoch, the store. A
// failed round leaves the group failed (Reconfigure again), but the report still comes; in a
// group that had failed before, both of this rank's rounds count as failed.
absl::StatusOr<NetworkCheckReport> RunNetworkCheck(collective::CollectiveGroup& group,
                                                   collective::RendezvousStore& store,
                                                   const NetworkCheckOptions& options,
                                                   int sequence = 0);

}  // namespace phalanx::elastic
