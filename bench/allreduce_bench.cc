// allreduce_bench: collective bandwidth (nccl-tests' busbw) of Phalanx's host backends with 2
// ranks, side by side with torch.distributed's Gloo (the peer script
// bench/peers/allreduce_gloo_torch.py, Debian's python3-torch) in the same run; the
// hierarchical path with 2 "machines" × 2 ranks (PHALANX_MACHINE_ID on this one machine:
// shared memory inside each, one loopback TCP stream between the two leaders) against torch's
// Gloo with the same 4 ranks; and the time to reconfigure a 4-rank group to a new epoch.
//
//   build/bin/allreduce_bench [path to allreduce_gloo_torch.py]
//   build/bin/allreduce_bench --mode bandwidth --gcs H:P --token T --rank R --world N
//                             [--host IP] [--group NAME]   (one rank, e.g. on a host of its
//                             own: what bench/crosshost_allreduce.py runs)
//
// Method (the same as the peer's): each iteration is timed between barriers, the time of an
// iteration is the max over ranks, the median is reported; busbw = algbw × 2(n-1)/n for
// allreduce, × (n-1)/n for allgather, × 1 for broadcast.
//
// Last line, each comparison like for like (16 MiB allreduce):
//   RESULT shm_busbw_16MiB=... tcp_busbw_16MiB=... torch_gloo_busbw_16MiB=...
//          shm_ratio=...  (Phalanx's shared memory, one machine, vs torch's Gloo over TCP)
//          tcp_ratio=...  (Phalanx over loopback TCP, as between machines, vs the same)
//          hier_busbw_16MiB=... torch_gloo_4_busbw_16MiB=... hier_ratio=... (2 "machines" x 2)
//          reconfigure_ms=...
// Across real hosts (network namespaces), the same comparison is bench/crosshost_allreduce.py.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/files.h"
#include "bench/bench_util.h"
#include "collectives/collective_group.h"
#include "collectives/environment.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

using collective::CollectiveGroup;
using collective::DType;
using collective::ReduceOp;

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

struct PlanItem {
  const char* op;
  size_t bytes;
};
const PlanItem kPlan[] = {
    {"allreduce", 4 * KiB},  {"allreduce", 64 * KiB}, {"allreduce", 1 * MiB},
    {"allreduce", 16 * MiB}, {"allreduce", 64 * MiB}, {"allgather", 1 * MiB},
    {"allgather", 16 * MiB}, {"broadcast", 1 * MiB},  {"broadcast", 16 * MiB}};

int Iterations(size_t bytes) {
  return bytes <= 64 * KiB ? 500 : bytes <= MiB ? 100 : bytes <= 16 * MiB ? 40 : 20;
}

std::string SizeName(size_t bytes) {
  return bytes >= MiB ? absl::StrCat(bytes / MiB, "MiB") : absl::StrCat(bytes / KiB, "KiB");
}

// One rank of the bandwidth run (a child process).
int RunBandwidthRank(CollectiveGroup& g) {
  const int n = g.world_size();
  for (const auto& item : kPlan) {
    size_t count = item.bytes / 4;
    std::vector<float> data(count, 1.0f), out(count);
    auto run = [&]() -> absl::Status {
      std::string op = item.op;
      if (op == "allreduce")
        return g.Allreduce(data.data(), count, DType::kFloat32, ReduceOp::kSum);
      if (op == "allgather") {
        return g.Allgather(data.data(), out.data(), count / n, DType::kFloat32);
      }
      return g.Broadcast(data.data(), count, DType::kFloat32, 0);
    };
    for (int i = 0; i < 5; ++i) {
      if (auto s = run(); !s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
    int iters = Iterations(item.bytes);
    std::vector<double> times(iters);
    for (int i = 0; i < iters; ++i) {
      if (!g.Barrier().ok()) return 1;
      absl::Time t0 = absl::Now();
      if (!run().ok()) return 1;
      times[i] = absl::ToDoubleSeconds(absl::Now() - t0);
    }
    if (!g.Allreduce(times.data(), times.size(), DType::kFloat64, ReduceOp::kMax).ok()) return 1;
    if (g.rank() == 0) {
      std::sort(times.begin(), times.end());
      double med = times[times.size() / 2];
      double algbw = static_cast<double>(item.bytes) / med / 1e9;
      std::string op = item.op;
      double factor = op == "allreduce"   ? 2.0 * (n - 1) / n
                      : op == "allgather" ? (n - 1.0) / n
                                          : 1.0;
      std::printf("%-10s %8s %5d %10.1f %10.3f %10.3f\n", item.op, SizeName(item.bytes).c_str(),
                  iters, med * 1e6, algbw, algbw * factor);
    }
  }
  return 0;
}

// One rank of the reconfigure run: forms epochs 2..6 right after a barrier; reports the
// slowest rank's time per epoch change.
int RunReconfigureRank(CollectiveGroup& g, int world) {
  std::vector<double> ms;
  for (int64_t epoch = 2; epoch <= 6; ++epoch) {
    if (!g.Barrier().ok()) return 1;
    absl::Time t0 = absl::Now();
    if (auto s = g.Reconfigure(epoch, g.rank(), world); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
    double took = absl::ToDoubleMilliseconds(absl::Now() - t0);
    if (!g.Allreduce(&took, 1, DType::kFloat64, ReduceOp::kMax).ok()) return 1;
    ms.push_back(took);
  }
  if (g.rank() == 0) {
    std::sort(ms.begin(), ms.end());
    std::printf("reconfigure %d ranks to a new epoch: median %.1f ms (min %.1f, max %.1f)\n", world,
                ms[ms.size() / 2], ms.front(), ms.back());
  }
  return 0;
}

int RunRank(const std::string& mode, const std::string& gcs, const std::string& token,
            const std::string& host, const std::string& group_name, int rank, int world) {
  collective::GroupOptions options;
  // One group per run: a later run must not meet the epochs of an earlier one.
  const char* shm = std::getenv("PHALANX_COLLECTIVE_SHM");
  options.name = !group_name.empty()
                     ? group_name
                     : absl::StrCat("bench-", mode, "-shm", shm ? shm : "",
                                    std::getenv("PHALANX_MACHINE_ID") ? "-hier" : "");
  options.gcs_address = gcs;
  options.token = token;
  options.host = host;
  collective::GroupOptionsFromEnvironment(&options);
  auto group = CollectiveGroup::Create(options);
  if (!group.ok() || !(*group)->Reconfigure(1, rank, world).ok()) return 1;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return mode == "bandwidth" ? RunBandwidthRank(**group) : RunReconfigureRank(**group, world);
}

double Busbw(const std::string& text, const std::string& op, const std::string& size) {
  std::regex line(op + R"(\s+)" + size +
                  R"(\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+(\s+[\d.]+)?(\s+[\d.]+)?(\s+[\d.]+)?)");
  std::smatch m;
  if (!std::regex_search(text, m, line)) return 0;
  std::vector<std::string> fields;
  std::istringstream in(m[0].str());
  for (std::string f; in >> f;) fields.push_back(f);
  return std::stod(fields.back());
}

int Main(int argc, char** argv) {
  std::string peer = PHALANX_SOURCE_DIR "/bench/peers/allreduce_gloo_torch.py";
  std::string mode, gcs_address, token, host = "127.0.0.1", group_name;
  int rank = -1, world = 0;
  CLI::App app{"allreduce_bench"};
  app.add_option("peer", peer, "the torch peer script");
  app.add_option("--mode", mode);
  app.add_option("--gcs", gcs_address);
  app.add_option("--token", token);
  app.add_option("--rank", rank);
  app.add_option("--world", world);
  app.add_option("--host", host, "one rank: the IPv4 address other machines reach it at");
  app.add_option("--group", group_name, "one rank: the group's name (one per run)");
  std::string only;
  app.add_option("--only", only, "run one part: 'hier' (the 4-rank comparison)");
  CLI11_PARSE(app, argc, argv);
  if (rank >= 0) return RunRank(mode, gcs_address, token, host, group_name, rank, world);
  if (::access(peer.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "the peer %s is missing: give its path as the first argument\n",
                 peer.c_str());
    return 2;
  }

  testing::RedisServer redis;
  testing::GcsProcess gcs(redis);
  testing::TempDir dir;
  std::string self = testing::BinDir() + "/allreduce_bench";
  // `machines` > 1: the ranks play that many machines (consecutive ranks on each).
  auto run_ranks = [&](const std::string& what, int n, const std::string& shm, int machines = 1) {
    std::vector<testing::ChildProcess> ranks;
    std::string tag = absl::StrCat(what, shm, "m", machines, "-");
    for (int r = 0; r < n; ++r) {
      std::vector<std::pair<std::string, std::string>> env = {{"PHALANX_COLLECTIVE_SHM", shm}};
      if (machines > 1) env.emplace_back("PHALANX_MACHINE_ID", absl::StrCat("h", r * machines / n));
      ranks.emplace_back(std::vector<std::string>{self, "--mode", what, "--gcs", gcs.address(),
                                                  "--token", gcs.token(), "--rank",
                                                  std::to_string(r), "--world", std::to_string(n)},
                         absl::StrCat(dir.path(), "/", tag, r, ".log"), env);
    }
    for (auto& p : ranks) p.WaitExit(absl::Minutes(5));
    return ReadFile(absl::StrCat(dir.path(), "/", tag, "0.log")).value_or("");
  };

  std::printf(
      "# allreduce_bench: 2 ranks on loopback (4 for the hierarchical path), float32, GB/s = "
      "1e9 B/s\n");
  const char* header = "%-10s %8s %5s %10s %10s %10s\n";
  // --only hier: the 4-rank comparison alone (a shorter run).
  const bool all = only != "hier";
  std::string ours, tcp, theirs, reconfigure, reconfigure_tcp;
  if (all) {
    std::printf("## Phalanx, host backend, ranks on one machine: shared memory\n");
    std::printf(header, "op", "size", "iters", "median_us", "algbw", "busbw");
    ours = run_ranks("bandwidth", 2, "1");
    std::printf("%s", ours.c_str());
    std::printf("## Phalanx, host backend over loopback TCP (PHALANX_COLLECTIVE_SHM=0)\n");
    std::printf(header, "op", "size", "iters", "median_us", "algbw", "busbw");
    tcp = run_ranks("bandwidth", 2, "0");
    std::printf("%s", tcp.c_str());
    std::printf("## torch.distributed Gloo (%s)\n", peer.c_str());
    theirs = bench::Shell(absl::StrCat("GLOO_SOCKET_IFNAME=lo timeout 600 /usr/bin/python3 ", peer,
                                       " --nproc 2 2>&1"));
    std::printf("%s", theirs.c_str());
  }
  std::printf(
      "## Phalanx, hierarchical: 4 ranks as 2 machines x 2 (PHALANX_MACHINE_ID), shared memory "
      "inside, one loopback TCP stream between the leaders\n");
  std::printf(header, "op", "size", "iters", "median_us", "algbw", "busbw");
  std::string hier = run_ranks("bandwidth", 4, "1", 2);
  std::printf("%s", hier.c_str());
  std::printf("## torch.distributed Gloo, 4 ranks\n");
  std::string theirs4 = bench::Shell(
      absl::StrCat("GLOO_SOCKET_IFNAME=lo timeout 600 /usr/bin/python3 ", peer, " --nproc 4 2>&1"));
  std::printf("%s", theirs4.c_str());
  if (all) {
    reconfigure = run_ranks("reconfigure", 4, "1");
    std::printf("shared memory: %s", reconfigure.c_str());
    reconfigure_tcp = run_ranks("reconfigure", 4, "0");
    std::printf("TCP between every rank (as across machines): %s", reconfigure_tcp.c_str());
  }

  for (const char* size : {"1MiB", "16MiB", "64MiB"}) {
    double a = Busbw(ours, "allreduce", size), t = Busbw(tcp, "allreduce", size),
           b = Busbw(theirs, "allreduce", size);
    std::printf(
        "allreduce %-6s busbw: phalanx %.3f GB/s (TCP %.3f), torch gloo %.3f GB/s, ratio %.2f "
        "(TCP %.2f)\n",
        size, a, t, b, b > 0 ? a / b : 0, b > 0 ? t / b : 0);
  }
  for (const char* size : {"1MiB", "16MiB", "64MiB"}) {
    double h = Busbw(hier, "allreduce", size), t4 = Busbw(theirs4, "allreduce", size);
    std::printf(
        "allreduce %-6s busbw, 4 ranks: phalanx hierarchical (2 machines x 2) %.3f GB/s, torch "
        "gloo %.3f GB/s, ratio %.2f\n",
        size, h, t4, t4 > 0 ? h / t4 : 0);
  }
  double ours16 = Busbw(ours, "allreduce", "16MiB"), theirs16 = Busbw(theirs, "allreduce", "16MiB");
  double tcp16 = Busbw(tcp, "allreduce", "16MiB");
  double hier16 = Busbw(hier, "allreduce", "16MiB"),
         theirs4_16 = Busbw(theirs4, "allreduce", "16MiB");
  std::smatch m;
  double reconf = 0;
  if (std::regex_search(reconfigure, m, std::regex(R"(median ([\d.]+) ms)"))) {
    reconf = std::stod(m[1].str());
  }
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  std::printf(
      "RESULT shm_busbw_16MiB=%.3f tcp_busbw_16MiB=%.3f torch_gloo_busbw_16MiB=%.3f "
      "shm_ratio=%.3f tcp_ratio=%.3f hier_busbw_16MiB=%.3f torch_gloo_4_busbw_16MiB=%.3f "
      "hier_ratio=%.3f reconfigure_ms=%.1f\n",
      ours16, tcp16, theirs16, ratio(ours16, theirs16), ratio(tcp16, theirs16), hier16, theirs4_16,
      ratio(hier16, theirs4_16), reconf);
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) { return phalanx::Main(argc, argv); }
