// The NCCL transport: GPU memory, communicators created non-blocking (config.blocking = 0) so
// that a stuck or failed communicator can always be aborted (ncclCommAbort) within the
// timeout instead of hanging. A new epoch that only drops members shrinks the previous
// communicator (ncclCommShrink); any other change forms a new one from a unique id passed
// through the rendezvous store. NCCL and the CUDA runtime are loaded, not linked
// (nccl_api.h).
#include <atomic>
#include <cstring>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "collectives/backend.h"
#include "collectives/nccl_api.h"

namespace phalanx::collective {
namespace {

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

absl::Status NcclError(const NcclApi& nccl, ncclResult_t r, const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", nccl.GetErrorString(r)));
}

// Polls a non-blocking communicator until its pending work is issued (not ncclInProgress).
absl::Status AwaitIssued(const NcclApi& nccl, ncclComm_t comm, ncclResult_t r, absl::Time deadline,
                         const std::string& what) {
  while (r == ncclInProgress) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    }
    std::this_thread::yield();
    nccl.CommGetAsyncError(comm, &r);
  }
  return r == ncclSuccess ? absl::OkStatus() : NcclError(nccl, r, what);
}

class NcclBackend final : public CommBackend {
 public:
  NcclBackend(const NcclApi& nccl, ncclComm_t comm, cudaStream_t stream, bool own_stream,
              int device)
      : nccl_(nccl), comm_(comm), stream_(stream), own_stream_(own_stream), device_(device) {
    nccl_.SetDevice(device_);
    nccl_.Malloc(&scratch_, sizeof(float));
  }

  ~NcclBackend() override {
    nccl_.SetDevice(device_);
    if (comm_ != nullptr && !aborted_) nccl_.CommDestroy(comm_);
    if (scratch_ != nullptr) nccl_.Free(scratch_);
    if (own_stream_) nccl_.StreamDestroy(stream_);
  }

  ncclComm_t comm() const { return comm_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  bool own_stream() const { return own_stream_; }
  // Gives the communicator away (to a shrunk successor); this backend no longer owns it.
  void Release() {
    comm_ = nullptr;
    own_stream_ = false;
  }

  absl::Status Allreduce(void* data, size_t count, DType dtype, ReduceOp op,
                         absl::Duration timeout) override {
    return Run("allreduce", timeout, [&] {
      return nccl_.AllReduce(data, data, count, NcclType(dtype), NcclOp(op), comm_, stream_);
    });
  }

  absl::Status Allgather(const void* in, void* out, size_t count, DType dtype,
                         absl::Duration timeout) override {
    return Run("allgather", timeout,
               [&] { return nccl_.AllGather(in, out, count, NcclType(dtype), comm_, stream_); });
  }

  absl::Status Broadcast(void* data, size_t count, DType dtype, int root,
                         absl::Duration timeout) override {
    return Run("broadcast", timeout, [&] {
      return nccl_.Broadcast(data, data, count, NcclType(dtype), root, comm_, stream_);
    });
  }

  absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             absl::Duration timeout) override {
    return Run("reduce-scatter", timeout, [&] {
      return nccl_.ReduceScatter(in, out, count, NcclType(dtype), NcclOp(op), comm_, stream_);
    });
  }

  absl::Status Barrier(absl::Duration timeout) override {
    return Run("barrier", timeout, [&] {
      return nccl_.AllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }

  absl::Status Send(const void* data, size_t count, DType dtype, int dst,
                    absl::Duration timeout) override {
    return Run("send", timeout,
               [&] { return nccl_.Send(data, count, NcclType(dtype), dst, comm_, stream_); });
  }

  absl::Status Recv(void* data, size_t count, DType dtype, int src,
                    absl::Duration timeout) override {
    return Run("recv", timeout,
               [&] { return nccl_.Recv(data, count, NcclType(dtype), src, comm_, stream_); });
  }

  // Safe from another thread while a call waits (ncclCommAbort is how NCCL cancels).
  void Abort() override {
    if (comm_ != nullptr && !aborted_.exchange(true)) nccl_.CommAbort(comm_);
  }

 private:
  // Issues a call and waits for the stream, checking the communicator for asynchronous
  // errors; a timeout or an error aborts the communicator so that no one hangs on it.
  template <typename F>
  absl::Status Run(const char* what, absl::Duration timeout, F&& issue) {
    if (comm_ == nullptr || aborted_) {
      return absl::FailedPreconditionError("the communicator was aborted");
    }
    // A blocking call runs on the caller's thread: its current device is put back after.
    int callers_device = device_;
    nccl_.GetDevice(&callers_device);
    if (callers_device != device_) nccl_.SetDevice(device_);
    absl::Cleanup restore = [&] {
      if (callers_device != device_) nccl_.SetDevice(callers_device);
    };
    absl::Time deadline = absl::Now() + timeout;
    if (auto s = AwaitIssued(nccl_, comm_, issue(), deadline, what); !s.ok()) {
      Abort();
      return s;
    }
    while (true) {
      cudaError_t done = nccl_.StreamQuery(stream_);
      if (done == cudaSuccess) return absl::OkStatus();
      if (done != cudaErrorNotReady) {
        Abort();
        return absl::InternalError(absl::StrCat(what, ": CUDA: ", nccl_.CudaGetErrorString(done)));
      }
      ncclResult_t async = ncclSuccess;
      nccl_.CommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        Abort();
        return NcclError(nccl_, async, absl::StrCat(what, " (a peer failed)"));
      }
      if (absl::Now() > deadline) {
        Abort();
        return absl::DeadlineExceededError(
            absl::StrCat(what, ": timed out after ", absl::FormatDuration(timeout),
                         " (a peer stopped answering); the communicator was aborted"));
      }
      std::this_thread::yield();
    }
  }

  const NcclApi& nccl_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  bool own_stream_;
  int device_;
  void* scratch_ = nullptr;
  std::atomic<bool> aborted_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<CommBackend>> ConnectNccl(KvStore* store,
                                                         const ConnectOptions& options,
                                                         CommBackend* previous,
                                                         const std::vector<int>& kept_ranks) {
  auto loaded = LoadNccl();
  if (!loaded.ok()) return loaded.status();
  const NcclApi& nccl = **loaded;
  int devices = 0;
  if (nccl.GetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError("NCCL: no CUDA device on this machine");
  }
  int device = options.cuda_device >= 0 ? options.cuda_device : options.rank % devices;
  nccl.SetDevice(device);
  absl::Time deadline = absl::Now() + options.timeout;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;

  auto* prev = dynamic_cast<NcclBackend*>(previous);
  bool shrink = prev != nullptr && prev->comm() != nullptr && !kept_ranks.empty();
#if PHALANX_NCCL_HAS_SHRINK
  // Every member loads the same library, so all shrink or all re-form.
  shrink = shrink && nccl.CommShrink != nullptr;
  if (shrink) {
    // Pure scale-in: every member was in the previous communicator; drop the others.
    std::vector<int> exclude;
    for (size_t old_rank = 0; old_rank < kept_ranks.size(); ++old_rank) {
      if (kept_ranks[old_rank] < 0) exclude.push_back(static_cast<int>(old_rank));
    }
    ncclResult_t r = nccl.CommShrink(prev->comm(), exclude.data(), static_cast<int>(exclude.size()),
                                     &comm, &config, NCCL_SHRINK_ABORT);
    if (auto s = AwaitIssued(nccl, comm, r, deadline, "ncclCommShrink"); !s.ok()) return s;
  }
#else
  shrink = false;
#endif
  if (!shrink) {
    ncclUniqueId id;
    if (options.rank == 0) {
      if (ncclResult_t r = nccl.GetUniqueId(&id); r != ncclSuccess) {
        return NcclError(nccl, r, "ncclGetUniqueId");
      }
      auto s = store->Set("nccl/unique_id", std::string(id.internal, sizeof(id.internal)));
      if (!s.ok()) return s;
    } else {
      auto value = store->Get("nccl/unique_id", options.timeout);
      if (!value.ok()) return value.status();
      std::memcpy(id.internal, value->data(), std::min(value->size(), sizeof(id.internal)));
    }
    ncclResult_t r = nccl.CommInitRankConfig(&comm, options.world_size, id, options.rank, &config);
    if (auto s = AwaitIssued(nccl, comm, r, deadline, "ncclCommInitRankConfig"); !s.ok()) {
      if (comm != nullptr) nccl.CommAbort(comm);
      return s;
    }
  }
  cudaStream_t stream = static_cast<cudaStream_t>(options.cuda_stream);
  bool own_stream = stream == nullptr;
  if (own_stream) nccl.StreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  return std::unique_ptr<CommBackend>(new NcclBackend(nccl, comm, stream, own_stream, device));
}

bool NcclBuiltImpl() { return true; }

// 0 where NCCL or the CUDA runtime cannot be loaded, or there is no device.
int NcclDeviceCountImpl() {
  auto loaded = LoadNccl();
  int devices = 0;
  if (!loaded.ok() || (*loaded)->GetDeviceCount(&devices) != cudaSuccess) return 0;
  return devices;
}

}  // namespace phalanx::collective
