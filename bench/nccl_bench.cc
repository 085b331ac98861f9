// nccl_bench: allreduce of device buffers through Phalanx's collective group (NCCL backend),
// side by side with its peer, a bare ncclAllReduce loop, in the same run on the same GPUs (and,
// for the record, the same loop on a non-blocking communicator, as the group's).
// One rank per GPU of this machine (a thread each; NCCL refuses two ranks on one device), so a
// one-GPU machine measures world size 1: what the group's bookkeeping costs over NCCL's own.
//
//   build/bin/nccl_bench [--iters 20]
//
// Method (both sides): float32 sum in place, 5 warm-up iterations, then each iteration timed
// between barriers of the rank threads; the median is reported. The bare loop issues
// ncclAllReduce on its own stream and waits by polling cudaStreamQuery, as nccl-tests does and
// as the group does (which also checks the communicator's asynchronous error and a deadline).
// algbw = bytes / time.
//
// Last line: RESULT gpus=... phalanx_algbw_256MiB=... nccl_algbw_256MiB=... ratio_256MiB=...
//            ratio_1MiB=...   (ratio: Phalanx's bandwidth over the bare loop's)
// Where no GPU or no NCCL is found: RESULT skipped=1 (with the reason on the line before).
#include <barrier>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "collectives/collective_group.h"
#include "tests/testing/test_util.h"

#ifdef PHALANX_WITH_NCCL
#include "collectives/nccl_api.h"
#endif

namespace phalanx {
namespace {

#ifdef PHALANX_WITH_NCCL
using collective::NcclApi;

constexpr int kWarmup = 5;
constexpr size_t kSizes[] = {1 << 20, 16 << 20, 256 << 20};  // bytes

std::string SizeName(size_t bytes) { return absl::StrCat(bytes >> 20, "MiB"); }

// Waits for `stream`, as nccl-tests does: poll, yield.
bool WaitStream(const NcclApi& api, cudaStream_t stream) {
  while (true) {
    cudaError_t e = api.StreamQuery(stream);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return false;
    std::this_thread::yield();
  }
}

// Runs `gpus` rank threads; each calls op(rank, buffer, count) once per iteration. Returns the
// median iteration time in microseconds per size (rank 0's clock, between barriers), or empty
// where a rank failed.
template <typename Setup, typename Op>
std::vector<double> Timed(int gpus, int iters, const NcclApi& api, Setup setup, Op op) {
  std::vector<double> medians(std::size(kSizes), -1);
  std::barrier sync(gpus);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      api.SetDevice(r);
      if (!setup(r)) failed = true;
      sync.arrive_and_wait();
      void* buffer = nullptr;
      if (api.Malloc(&buffer, kSizes[std::size(kSizes) - 1]) != cudaSuccess) failed = true;
      for (size_t s = 0; s < std::size(kSizes); ++s) {
        size_t count = kSizes[s] / sizeof(float);
        std::vector<double> times;
        for (int i = 0; i < kWarmup + iters; ++i) {
          sync.arrive_and_wait();
          absl::Time t0 = absl::Now();
          if (!failed && !op(r, buffer, count)) failed = true;
          sync.arrive_and_wait();
          if (i >= kWarmup) times.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
        }
        if (r == 0) medians[s] = bench::Percentile(times, 0.5);
      }
      if (buffer != nullptr) api.Free(buffer);
    });
  }
  for (auto& t : threads) t.join();
  if (failed) return {};
  return medians;
}

int Run(int iters) {
  auto loaded = collective::LoadNccl();
  int gpus = 0;
  if (!loaded.ok() || (*loaded)->GetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("# nccl_bench: skipped, %s\n",
                loaded.ok() ? "no GPU here" : std::string(loaded.status().message()).c_str());
    std::printf("RESULT skipped=1\n");
    return 0;
  }
  const NcclApi& api = **loaded;
  testing::RedisServer redis;
  testing::GcsProcess gcs(redis);
  std::printf(
      "# nccl_bench: %d GPU(s), one rank each, NCCL %d, float32 sum in place, median of "
      "%d iterations\n",
      gpus, api.version, iters);

  // Phalanx: the collective group's NCCL backend.
  std::vector<std::unique_ptr<collective::CollectiveGroup>> groups(gpus);
  auto ours = Timed(
      gpus, iters, api,
      [&](int r) {
        collective::GroupOptions o;
        o.name = "nccl-bench";
        o.backend = collective::Backend::kNccl;
        o.gcs_address = gcs.address();
        o.token = gcs.token();
        o.cuda_device = r;
        auto g = collective::CollectiveGroup::Create(o);
        if (!g.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", r, g.status().ToString().c_str());
          return false;
        }
        groups[r] = std::move(*g);
        auto s = groups[r]->Reconfigure(1, r, gpus);
        if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", r, s.ToString().c_str());
        return s.ok();
      },
      [&](int r, void* buffer, size_t count) {
        return groups[r]
            ->Allreduce(buffer, count, collective::DType::kFloat32, collective::ReduceOp::kSum)
            .ok();
      });
  groups.clear();

  // The peer: a bare ncclAllReduce loop on communicators of its own, at NCCL's defaults
  // (blocking); and the same loop on non-blocking communicators, which the group uses so that
  // ncclCommAbort can end a call (a call there may return ncclInProgress until it is issued).
  auto bare_loop = [&](bool blocking) {
    ncclUniqueId id;
    api.GetUniqueId(&id);
    std::vector<ncclComm_t> comms(gpus, nullptr);
    std::vector<cudaStream_t> streams(gpus, nullptr);
    auto issued = [&](int r, ncclResult_t res) {
      while (res == ncclInProgress) api.CommGetAsyncError(comms[r], &res);
      return res == ncclSuccess;
    };
    auto times = Timed(
        gpus, iters, api,
        [&](int r) {
          ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
          config.blocking = blocking ? 1 : 0;
          if (!issued(r, api.CommInitRankConfig(&comms[r], gpus, id, r, &config))) return false;
          return api.StreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) == cudaSuccess;
        },
        [&](int r, void* buffer, size_t count) {
          return issued(r, api.AllReduce(buffer, buffer, count, ncclFloat32, ncclSum, comms[r],
                                         streams[r])) &&
                 WaitStream(api, streams[r]);
        });
    for (int r = 0; r < gpus; ++r) {
      if (comms[r] != nullptr) api.CommDestroy(comms[r]);
      if (streams[r] != nullptr) api.StreamDestroy(streams[r]);
    }
    return times;
  };
  auto bare = bare_loop(true);
  auto bare_nonblocking = bare_loop(false);
  if (ours.empty() || bare.empty() || bare_nonblocking.empty()) {
    std::printf("a side failed (phalanx %s, bare %s, bare non-blocking %s)\n",
                ours.empty() ? "failed" : "ok", bare.empty() ? "failed" : "ok",
                bare_nonblocking.empty() ? "failed" : "ok");
    return 1;
  }
  std::printf("%-8s %12s %12s %15s %14s %14s %7s\n", "size", "phalanx_us", "nccl_us",
              "nccl_nonblk_us", "phalanx_GB/s", "nccl_GB/s", "ratio");
  std::vector<double> ratio(std::size(kSizes));
  for (size_t s = 0; s < std::size(kSizes); ++s) {
    double a = kSizes[s] / ours[s] / 1e3, b = kSizes[s] / bare[s] / 1e3;  // GB/s
    ratio[s] = a / b;
    std::printf("%-8s %12.1f %12.1f %15.1f %14.2f %14.2f %7.3f\n", SizeName(kSizes[s]).c_str(),
                ours[s], bare[s], bare_nonblocking[s], a, b, ratio[s]);
  }
  size_t last = std::size(kSizes) - 1;
  std::printf(
      "RESULT gpus=%d phalanx_algbw_256MiB=%.2f nccl_algbw_256MiB=%.2f ratio_256MiB=%.3f "
      "ratio_1MiB=%.3f\n",
      gpus, kSizes[last] / ours[last] / 1e3, kSizes[last] / bare[last] / 1e3, ratio[last],
      ratio[0]);
  return 0;
}
#else
int Run(int) {
  std::printf("# nccl_bench: skipped, this build has no NCCL backend\n");
  std::printf("RESULT skipped=1\n");
  return 0;
}
#endif

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) {
  int iters = 20;
  CLI::App app{"nccl_bench"};
  app.add_option("--iters", iters)->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);
  return phalanx::Run(iters);
}
