#include "collectives/nccl_api.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace phalanx::collective {
namespace {

// The names each library is tried under, in order; then each in PHALANX_CUDA_LIB_DIR (where
// CMake found NCCL).
const std::vector<std::string>& NcclNames() {
  static const auto* names = new std::vector<std::string>{"libnccl.so.2", "libnccl.so"};
  return *names;
}
const std::vector<std::string>& CudartNames() {
  static const auto* names = new std::vector<std::string>{"libcudart.so", "libcudart.so.13",
                                                          "libcudart.so.12", "libcudart.so.11.0"};
  return *names;
}

void* Open(const std::vector<std::string>& names, std::vector<std::string>* tried) {
  for (const std::string& dir : {std::string(), std::string(PHALANX_CUDA_LIB_DIR) + "/"}) {
    for (const auto& name : names) {
      std::string path = dir + name;
      if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return handle;
      tried->push_back(path);
    }
  }
  return nullptr;
}

template <typename F>
bool Bind(void* lib, const char* symbol, F* out, std::vector<std::string>* missing) {
  *out = reinterpret_cast<F>(::dlsym(lib, symbol));
  if (*out == nullptr) missing->push_back(symbol);
  return *out != nullptr;
}

absl::StatusOr<NcclApi> Load() {
  std::vector<std::string> tried;
  void* nccl = Open(NcclNames(), &tried);
  void* cudart = Open(CudartNames(), &tried);
  if (nccl == nullptr || cudart == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NCCL backend needs NCCL and the CUDA runtime on this machine; none of ",
        absl::StrJoin(tried, ", "),
        " could be loaded (install NCCL, or add its directory to LD_LIBRARY_PATH), or use the "
        "Gloo backend"));
  }
  NcclApi api;
  std::vector<std::string> missing;
  Bind(nccl, "ncclGetVersion", &api.GetVersion, &missing);
  Bind(nccl, "ncclGetErrorString", &api.GetErrorString, &missing);
  Bind(nccl, "ncclGetUniqueId", &api.GetUniqueId, &missing);
  Bind(nccl, "ncclCommInitRankConfig", &api.CommInitRankConfig, &missing);
  Bind(nccl, "ncclCommGetAsyncError", &api.CommGetAsyncError, &missing);
  Bind(nccl, "ncclCommAbort", &api.CommAbort, &missing);
  Bind(nccl, "ncclCommDestroy", &api.CommDestroy, &missing);
  Bind(nccl, "ncclAllReduce", &api.AllReduce, &missing);
  Bind(nccl, "ncclAllGather", &api.AllGather, &missing);
  Bind(nccl, "ncclBroadcast", &api.Broadcast, &missing);
  Bind(nccl, "ncclReduceScatter", &api.ReduceScatter, &missing);
  Bind(nccl, "ncclSend", &api.Send, &missing);
  Bind(nccl, "ncclRecv", &api.Recv, &missing);
  Bind(cudart, "cudaGetDeviceCount", &api.GetDeviceCount, &missing);
  Bind(cudart, "cudaSetDevice", &api.SetDevice, &missing);
  Bind(cudart, "cudaGetDevice", &api.GetDevice, &missing);
  Bind(cudart, "cudaMalloc", &api.Malloc, &missing);
  Bind(cudart, "cudaFree", &api.Free, &missing);
  Bind(cudart, "cudaMemcpy", &api.Memcpy, &missing);
  Bind(cudart, "cudaStreamCreateWithFlags", &api.StreamCreateWithFlags, &missing);
  Bind(cudart, "cudaStreamDestroy", &api.StreamDestroy, &missing);
  Bind(cudart, "cudaStreamQuery", &api.StreamQuery, &missing);
  Bind(cudart, "cudaGetErrorString", &api.CudaGetErrorString, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the NCCL or CUDA runtime library found lacks ", absl::StrJoin(missing, ", "),
                     ": install NCCL >= 2.18 with its CUDA runtime"));
  }
  api.GetVersion(&api.version);
#if PHALANX_NCCL_HAS_SHRINK
  // Optional: an older library than the header still runs, re-forming instead of shrinking.
  if (api.version >= kNcclShrinkVersion) {
    api.CommShrink = reinterpret_cast<decltype(api.CommShrink)>(::dlsym(nccl, "ncclCommShrink"));
  }
#endif
  return api;
}

}  // namespace

absl::StatusOr<const NcclApi*> LoadNccl() {
  static const absl::StatusOr<NcclApi>* loaded = new absl::StatusOr<NcclApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace phalanx::collective
