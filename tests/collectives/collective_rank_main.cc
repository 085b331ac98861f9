// collective_rank: one rank of a collective-group test, run as its own process.
//
//   collective_rank --gcs HOST:PORT --token T --group G --scenario S [--plan E:W:R,...]
//                   [--host IP]   (this rank's address for other machines; 127.0.0.1)
//
// Scenarios:
//   ops       form each epoch of --plan and check every op and dtype against local results
//   plan      form each epoch of --plan and check one allreduce (prints "epoch E OK")
//   loop      form the first epoch, then allreduce big buffers until one fails; then form the
//             remaining epochs of --plan (prints "failed at <unix ms>: <message>"). With
//             $TEST_ABORT_FILE set, another thread calls Abort() as soon as that file exists,
//             and the rank prints "abort ended the call in <ms> ms".
//   netcheck  form the first epoch and run the network check (prints the report)
//   nccl      form each epoch of --plan on the GPU (--cuda-device) and check an allreduce
//   nccl1     world size 1 on the GPU: allreduce and broadcast of device buffers, then Abort()
//             fails the next call at once (prints "abort ended the next call in <ms> ms")
// Exit codes: 0 success, 1 a check failed, 3 refused (stale epoch).
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collectives/collective_group.h"
#include "collectives/environment.h"
#include "collectives/half.h"
#include "elastic/network_check.h"

#ifdef PHALANX_WITH_NCCL
#include "collectives/nccl_api.h"  // the CUDA runtime, loaded as the backend loads it
#endif

namespace phalanx::collective {
namespace {

struct Step {
  int64_t epoch;
  int world;
  int rank;
};

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("MISMATCH %s\n", what.c_str());
  }
}

// Values as doubles, stored in a buffer of `dtype`.
std::vector<uint8_t> Pack(const std::vector<double>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    double v = values[i];
    switch (dtype) {
      case DType::kFloat32:
        reinterpret_cast<float*>(out.data())[i] = static_cast<float>(v);
        break;
      case DType::kFloat64:
        reinterpret_cast<double*>(out.data())[i] = v;
        break;
      case DType::kInt32:
        reinterpret_cast<int32_t*>(out.data())[i] = static_cast<int32_t>(v);
        break;
      case DType::kInt64:
        reinterpret_cast<int64_t*>(out.data())[i] = static_cast<int64_t>(v);
        break;
      case DType::kFloat16:
        reinterpret_cast<uint16_t*>(out.data())[i] = FloatToHalf(static_cast<float>(v));
        break;
      case DType::kBFloat16:
        reinterpret_cast<uint16_t*>(out.data())[i] = FloatToBf16(static_cast<float>(v));
        break;
    }
  }
  return out;
}

double At(const std::vector<uint8_t>& buf, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return reinterpret_cast<const float*>(buf.data())[i];
    case DType::kFloat64:
      return reinterpret_cast<const double*>(buf.data())[i];
    case DType::kInt32:
      return reinterpret_cast<const int32_t*>(buf.data())[i];
    case DType::kInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(buf.data())[i]);
    case DType::kFloat16:
      return HalfToFloat(reinterpret_cast<const uint16_t*>(buf.data())[i]);
    case DType::kBFloat16:
      return Bf16ToFloat(reinterpret_cast<const uint16_t*>(buf.data())[i]);
  }
  return 0;
}

bool Close(double got, double want, DType dtype) {
  double tol = dtype == DType::kFloat16 ? 1e-2 : dtype == DType::kBFloat16 ? 2e-2 : 1e-9;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

double Value(int rank, size_t i) { return (rank + 1) + static_cast<double>(i % 3); }

void CheckOps(CollectiveGroup& g) {
  const int n = g.world_size(), me = g.rank();
  const DType dtypes[] = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                          DType::kBFloat16, DType::kInt32,   DType::kInt64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kAvg};
  for (DType dt : dtypes) {
    for (size_t count : {size_t{1000}, size_t{1} << 17}) {
      std::vector<double> mine(count);
      for (size_t i = 0; i < count; ++i) mine[i] = Value(me, i);
      for (ReduceOp op : ops) {
        if (op == ReduceOp::kProd && count > 1000) continue;
        auto buf = Pack(mine, dt);
        auto s = g.Allreduce(buf.data(), count, dt, op);
        std::string what = std::string("allreduce ") + ReduceOpName(op) + " " + DTypeName(dt);
        if (!s.ok()) {
          Check(false, what + ": " + std::string(s.message()));
          continue;
        }
        for (size_t i = 0; i < count; ++i) {
          double want = Value(0, i);
          for (int r = 1; r < n; ++r) {
            double v = Value(r, i);
            switch (op) {
              case ReduceOp::kSum:
              case ReduceOp::kAvg:
                want += v;
                break;
              case ReduceOp::kProd:
                want *= v;
                break;
              case ReduceOp::kMin:
                want = std::min(want, v);
                break;
              case ReduceOp::kMax:
                want = std::max(want, v);
                break;
            }
          }
          if (op == ReduceOp::kAvg) {
            want = (dt == DType::kInt32 || dt == DType::kInt64) ? std::floor(want / n) : want / n;
          }
          if (!Close(At(buf, dt, i), want, dt)) {
            Check(false, what + " element " + std::to_string(i) + " got " +
                             std::to_string(At(buf, dt, i)) + " want " + std::to_string(want));
            break;
          }
        }
      }
      // allgather
      auto in = Pack(mine, dt);
      std::vector<uint8_t> out(in.size() * n);
      auto s = g.Allgather(in.data(), out.data(), count, dt);
      Check(s.ok(), std::string("allgather ") + DTypeName(dt) + " " + std::string(s.message()));
      for (int r = 0; s.ok() && r < n; ++r) {
        for (size_t i = 0; i < count; i += 97) {
          if (!Close(At(out, dt, r * count + i), Value(r, i), dt)) {
            Check(false, std::string("allgather ") + DTypeName(dt));
            r = n;
            break;
          }
        }
      }
      // broadcast from the last rank and from the first
      for (int root : {n - 1, 0}) {
        auto bc = Pack(mine, dt);
        s = g.Broadcast(bc.data(), count, dt, root);
        Check(s.ok(), std::string("broadcast ") + std::string(s.message()));
        for (size_t i = 0; s.ok() && i < count; i += 97) {
          if (!Close(At(bc, dt, i), Value(root, i), dt)) {
            Check(false,
                  std::string("broadcast from ") + std::to_string(root) + " " + DTypeName(dt));
            break;
          }
        }
      }
      // reduce-scatter (sum): rank r contributes Value(r, j) at position j of n×count
      std::vector<double> whole(count * n);
      for (size_t j = 0; j < whole.size(); ++j) whole[j] = Value(me, j);
      auto rs_in = Pack(whole, dt);
      std::vector<uint8_t> rs_out(count * DTypeSize(dt));
      s = g.ReduceScatter(rs_in.data(), rs_out.data(), count, dt, ReduceOp::kSum);
      Check(s.ok(), std::string("reduce-scatter ") + std::string(s.message()));
      for (size_t i = 0; s.ok() && i < count; i += 97) {
        double want = 0;
        for (int r = 0; r < n; ++r) want += Value(r, me * count + i);
        if (!Close(At(rs_out, dt, i), want, dt)) {
          Check(false, std::string("reduce-scatter ") + DTypeName(dt));
          break;
        }
      }
    }
  }
  // Buffers of several pipeline pieces (4 MiB), not a multiple of one.
  for (DType dt : {DType::kFloat32, DType::kInt64, DType::kBFloat16}) {
    size_t count = (9 << 20) / DTypeSize(dt) + 3;
    std::vector<double> mine(count);
    for (size_t i = 0; i < count; ++i) mine[i] = Value(me, i);
    auto buf = Pack(mine, dt);
    auto s = g.Allreduce(buf.data(), count, dt, ReduceOp::kSum);
    Check(s.ok(), std::string("big allreduce ") + DTypeName(dt) + " " + std::string(s.message()));
    std::vector<size_t> probes;  // every 4099th element and the last
    for (size_t i = 0; i < count; i += 4099) probes.push_back(i);
    probes.push_back(count - 1);
    // Cleared rather than looped over as `s.ok() ? probes : {}`, which trips GCC 12's
    // -Wfree-nonheap-object (a false positive).
    if (!s.ok()) probes.clear();
    for (size_t i : probes) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += Value(r, i);
      if (!Close(At(buf, dt, i), want, dt)) {
        Check(false,
              std::string("big allreduce ") + DTypeName(dt) + " element " + std::to_string(i));
        break;
      }
    }
  }
  auto s = g.Barrier();
  Check(s.ok(), "barrier " + std::string(s.message()));
  if (n > 1) {
    // A ring of send/recv: even ranks send first, odd ranks receive first.
    std::vector<int64_t> out(4096, me), in(4096, -1);
    int next = (me + 1) % n, prev = (me - 1 + n) % n;
    absl::Status a, b;
    if (me % 2 == 0) {
      a = g.Send(out.data(), out.size(), DType::kInt64, next);
      b = g.Recv(in.data(), in.size(), DType::kInt64, prev);
    } else {
      b = g.Recv(in.data(), in.size(), DType::kInt64, prev);
      a = g.Send(out.data(), out.size(), DType::kInt64, next);
    }
    Check(a.ok() && b.ok(), "send/recv " + std::string(a.message()) + std::string(b.message()));
    Check(in[0] == prev && in[4095] == prev, "send/recv payload");
    // The async forms run in order, and a blocking call made while they are queued runs
    // after them (not on this thread at once, as it does when none is queued).
    std::vector<float> x(100, 1.0f);
    auto w1 = g.AllreduceAsync(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum);
    auto w2 = g.AllreduceAsync(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum);
    auto s3 = g.Allreduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum);
    Check(w1.Done() && w2.Done(), "the blocking allreduce returned before the queued ones ran");
    Check(w1.Wait().ok() && w2.Wait().ok() && s3.ok(), "async allreduce");
    Check(x[0] == static_cast<float>(n * n * n), "async allreduce order");
  }
}

bool SumCheck(CollectiveGroup& g) {
  std::vector<float> x(1000, static_cast<float>(g.rank() + 1));
  auto s = g.Allreduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum);
  int n = g.world_size();
  return s.ok() && x[999] == static_cast<float>(n * (n + 1) / 2);
}

int Main(int argc, char** argv) {
  CLI::App app{"collective_rank"};
  GroupOptions options;
  std::string scenario, plan_text, backend = "gloo";
  int timeout_ms = 10000;
  app.add_option("--gcs", options.gcs_address)->required();
  app.add_option("--token", options.token)->required();
  app.add_option("--group", options.name)->required();
  app.add_option("--scenario", scenario)->required();
  app.add_option("--plan", plan_text, "epoch:world:rank,...");
  app.add_option("--timeout-ms", timeout_ms);
  app.add_option("--backend", backend, "gloo or nccl");
  app.add_option("--host", options.host, "the IPv4 address other machines reach this rank at");
  app.add_option("--cuda-device", options.cuda_device, "NCCL: this rank's GPU (-1: rank % GPUs)");
  CLI11_PARSE(app, argc, argv);
  options.backend = backend == "nccl" ? Backend::kNccl : Backend::kGloo;
  options.timeout = absl::Milliseconds(timeout_ms);
  GroupOptionsFromEnvironment(&options);
  std::vector<Step> plan;
  for (absl::string_view item : absl::StrSplit(plan_text, ',', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(item, ':');
    Step step{};
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &step.epoch) ||
        !absl::SimpleAtoi(f[1], &step.world) || !absl::SimpleAtoi(f[2], &step.rank)) {
      std::fprintf(stderr, "bad --plan item %s\n", std::string(item).c_str());
      return 2;
    }
    plan.push_back(step);
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // The network check keeps its lines in the group's store: given here, as the trainer host
  // gives it.
  std::shared_ptr<RendezvousStore> store;
  if (scenario == "netcheck") {
    auto cluster = ConnectClusterRendezvous(options.gcs_address, options.token);
    if (!cluster.ok()) {
      std::printf("rendezvous failed: %s\n", std::string(cluster.status().message()).c_str());
      return 1;
    }
    store = options.rendezvous = cluster->store;
  }
  auto group = CollectiveGroup::Create(options);
  if (!group.ok()) {
    std::printf("create failed: %s\n", std::string(group.status().message()).c_str());
    return 1;
  }
  CollectiveGroup& g = **group;
  size_t next_step = 0;
  auto form = [&](const Step& step) -> int {
    auto s = g.Reconfigure(step.epoch, step.rank, step.world);
    if (absl::IsFailedPrecondition(s)) {
      std::printf("refused: %s\n", std::string(s.message()).c_str());
      return 3;
    }
    if (!s.ok()) {
      std::printf("reconfigure failed: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    return 0;
  };

  if (scenario == "loop") {
    if (int rc = form(plan[next_step++]); rc != 0) return rc;
    // A controller's abort, played by a file appearing: Abort() from another thread.
    std::atomic<int64_t> aborted_at_us{0};
    std::atomic<bool> done{false};
    std::thread watcher;
    if (const char* file = std::getenv("TEST_ABORT_FILE")) {
      watcher = std::thread([&, path = std::string(file)] {
        while (!done.load() && ::access(path.c_str(), F_OK) != 0) {
          absl::SleepFor(absl::Milliseconds(1));
        }
        if (done.load()) return;
        aborted_at_us.store(absl::ToUnixMicros(absl::Now()));
        g.Abort("TEST_ABORT_FILE appeared");
      });
    }
    std::vector<float> big(4 << 20, 1.0f);
    for (int iter = 0;; ++iter) {
      auto s = g.Allreduce(big.data(), big.size(), DType::kFloat32, ReduceOp::kSum);
      if (!s.ok()) {
        int64_t now_us = absl::ToUnixMicros(absl::Now());
        std::printf("failed at %ld: %s\n", now_us / 1000, std::string(s.message()).c_str());
        if (aborted_at_us.load() > 0) {
          std::printf("abort ended the call in %.1f ms\n", (now_us - aborted_at_us.load()) / 1e3);
        }
        break;
      }
      std::fill(big.begin(), big.end(), 1.0f);
      std::printf("iter %d\n", iter);
    }
    done.store(true);
    if (watcher.joinable()) watcher.join();
  }
#ifdef PHALANX_WITH_NCCL
  // The CUDA runtime as the NCCL backend loads it (not linked: libnccl needs none of its own).
  const NcclApi* cuda = nullptr;
  if (scenario == "nccl" || scenario == "nccl1") {
    auto loaded = LoadNccl();
    if (!loaded.ok()) {
      std::printf("%s\n", std::string(loaded.status().message()).c_str());
      return 1;
    }
    cuda = *loaded;
    // This thread's buffers go on the rank's GPU (the group's calls run on it too).
    if (options.cuda_device >= 0) cuda->SetDevice(options.cuda_device);
  }
  if (scenario == "nccl") {
    // Device buffers: allreduce (sum, avg), allgather, broadcast and a failure-free epoch
    // change (a pure shrink when the plan drops members).
    for (; next_step < plan.size(); ++next_step) {
      if (int rc = form(plan[next_step]); rc != 0) return rc;
      int n = g.world_size(), me = g.rank();
      size_t count = 1 << 20;
      std::vector<float> host(count, static_cast<float>(me + 1));
      float* dev = nullptr;
      cuda->Malloc(reinterpret_cast<void**>(&dev), count * sizeof(float));
      cuda->Memcpy(dev, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
      auto s = g.Allreduce(dev, count, DType::kFloat32, ReduceOp::kSum);
      cuda->Memcpy(host.data(), dev, count * sizeof(float), cudaMemcpyDeviceToHost);
      cuda->Free(dev);
      if (!s.ok() || host[count - 1] != static_cast<float>(n * (n + 1) / 2)) {
        std::printf("nccl allreduce wrong: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      std::printf("epoch %ld OK\n", plan[next_step].epoch);
    }
    std::printf("DONE\n");
    return 0;
  }
  if (scenario == "nccl1") {
    if (int rc = form(Step{1, 1, 0}); rc != 0) return rc;
    size_t count = 1 << 20;
    std::vector<float> host(count, 3.0f);
    float* dev = nullptr;
    if (cuda->Malloc(reinterpret_cast<void**>(&dev), count * sizeof(float)) != cudaSuccess) {
      std::printf("cudaMalloc failed\n");
      return 1;
    }
    cuda->Memcpy(dev, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
    auto s = g.Allreduce(dev, count, DType::kFloat32, ReduceOp::kSum);
    if (s.ok()) s = g.Broadcast(dev, count, DType::kFloat32, 0);
    cuda->Memcpy(host.data(), dev, count * sizeof(float), cudaMemcpyDeviceToHost);
    if (!s.ok() || host[0] != 3.0f || host[count - 1] != 3.0f) {
      std::printf("nccl world-1 allreduce/broadcast wrong (%g): %s\n", host[0],
                  std::string(s.message()).c_str());
      cuda->Free(dev);
      return 1;
    }
    std::printf("allreduce and broadcast OK\n");
    g.Abort("the test aborts");
    absl::Time t0 = absl::Now();
    s = g.Allreduce(dev, count, DType::kFloat32, ReduceOp::kSum);
    double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    cuda->Free(dev);
    if (s.ok()) {
      std::printf("an allreduce after Abort() succeeded\n");
      return 1;
    }
    std::printf("abort ended the next call in %.1f ms: %s\n", ms, std::string(s.message()).c_str());
    std::printf("DONE\n");
    return 0;
  }
#endif
  if (scenario == "nccl" || scenario == "nccl1") {
    std::printf("this build has no NCCL\n");
    return 1;
  }
  if (scenario == "recvwait") {  // experiment: does a peer's exit wake a pending recv?
    if (int rc = form(plan[next_step++]); rc != 0) return rc;
    if (g.rank() == 1) {
      absl::SleepFor(absl::Milliseconds(500));
      std::printf("exiting\n");
      _exit(0);
    }
    std::vector<float> x(1000);
    absl::Time t0 = absl::Now();
    auto s = g.Recv(x.data(), x.size(), DType::kFloat32, 1);
    std::printf("recv returned after %.0f ms: %s\n", absl::ToDoubleMilliseconds(absl::Now() - t0),
                std::string(s.message()).c_str());
    return 0;
  }
  if (scenario == "netcheck") {
    if (int rc = form(plan[next_step++]); rc != 0) return rc;
    if (std::getenv("TEST_EXIT_BEFORE_NETCHECK")) _exit(0);  // plays a rank that is gone
    elastic::NetworkCheckOptions check;
    check.timeout = absl::Seconds(5);
    elastic::NetworkCheckOptionsFromEnvironment(&check);
    auto report = elastic::RunNetworkCheck(g, *store, check);
    if (!report.ok()) {
      std::printf("netcheck failed: %s\n", std::string(report.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", report->ToString().c_str());
    std::string stragglers;
    for (int r : report->stragglers) stragglers += std::to_string(r) + " ";
    std::printf("stragglers: %s\n", stragglers.c_str());
    std::string faulty;
    for (int r : report->faulty) faulty += std::to_string(r) + " ";
    std::printf("faulty: %s\n", faulty.c_str());
    return 0;
  }
  for (; next_step < plan.size(); ++next_step) {
    if (int rc = form(plan[next_step]); rc != 0) return rc;
    if (scenario == "ops") {
      CheckOps(g);
    } else if (!SumCheck(g)) {
      std::printf("epoch %ld allreduce wrong\n", plan[next_step].epoch);
      return 1;
    }
    std::printf("epoch %ld OK\n", plan[next_step].epoch);
  }
  if (failures > 0) return 1;
  std::printf("DONE\n");
  return 0;
}

}  // namespace
}  // namespace phalanx::collective

int main(int argc, char** argv) { return phalanx::collective::Main(argc, argv); }
