// NCCL and the CUDA runtime, loaded when a program first asks for the NCCL backend
// (dlopen), not linked: a program or the SDK built where NCCL was found still starts on a
// machine with no CUDA at all, and NCCL comes from whatever the machine has (its own CUDA
// directory, the driver's, or torch's). Built only with PHALANX_WITH_NCCL.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/statusor.h"

namespace phalanx::collective {

// ncclCommShrink (a scale-in without a new unique id) is there from NCCL 2.27.
#define PHALANX_NCCL_HAS_SHRINK (NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0))
inline constexpr int kNcclShrinkVersion = 22700;

// The entry points the NCCL backend calls, each typed as its header declares it.
struct NcclApi {
  int version = 0;  // ncclGetVersion: 22703 for 2.27.3
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
#if PHALANX_NCCL_HAS_SHRINK
  decltype(&ncclCommShrink) CommShrink = nullptr;  // null before 2.27: a new communicator then
#endif
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;

  decltype(&cudaGetDeviceCount) GetDeviceCount = nullptr;
  decltype(&cudaSetDevice) SetDevice = nullptr;
  decltype(&cudaGetDevice) GetDevice = nullptr;
  cudaError_t (*Malloc)(void** pointer, size_t bytes) = nullptr;  // overloaded in C++
  decltype(&cudaFree) Free = nullptr;
  decltype(&cudaMemcpy) Memcpy = nullptr;
  decltype(&cudaStreamCreateWithFlags) StreamCreateWithFlags = nullptr;
  decltype(&cudaStreamDestroy) StreamDestroy = nullptr;
  decltype(&cudaStreamQuery) StreamQuery = nullptr;
  decltype(&cudaGetErrorString) CudaGetErrorString = nullptr;
};

// Loads libnccl.so.2 and libcudart (by the loader's search path, then the CUDA directory this
// build found them in) once per process. FailedPrecondition naming what is missing and where
// it was looked for.
absl::StatusOr<const NcclApi*> LoadNccl();

}  // namespace phalanx::collective
