// phalanx-worker LIB.so: a worker for actors whose classes live in a shared library. It loads
// the library (whose static initializers register the classes) and hosts the actor its node
// manager names.
#include <dlfcn.h>

#include <cstdio>

#include "runtime/worker/worker_host.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: phalanx-worker LIBRARY.so (started by a node manager)\n");
    return 2;
  }
  if (dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "phalanx-worker: cannot load %s: %s\n", argv[1], dlerror());
    return 1;
  }
  if (!phalanx::InWorkerMode()) {
    std::fprintf(stderr, "phalanx-worker: not started by a node manager\n");
    return 2;
  }
  return phalanx::RunWorker();
}
