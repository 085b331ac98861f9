// phalanx._native: the native half of the `phalanx` Python package. The Python layer
// (python/phalanx) does the user-facing API and pickling; this module talks to the runtime. Each
// concern binds itself (bindings.h): the driver side (actors, calls, placement groups, KV), the
// Python worker, collective groups on numpy arrays and torch tensors, and elastic jobs. Every call
// that may block releases the GIL, and every error is raised as its class of
// phalanx.exceptions (errors.cc).
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <unistd.h>

#include <string>

#include "base/mutex_check.h"
#include "elastic/controller.h"
#include "python/src/bindings.h"
#include "python/src/py_trainer.h"

namespace {

// Where the cluster's programs are: $PHALANX_BIN_DIR; else the _bin folder beside this module,
// where a wheel puts them (setup.py); else the build tree this module was built in, while it
// has them; else, for a module the .deb installed
// (<prefix>/lib/python3/dist-packages/phalanx/_native*.so), <prefix>/bin.
std::string BinDir() {
  if (const char* env = std::getenv("PHALANX_BIN_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  std::string module;
  if (Dl_info info;
      ::dladdr(reinterpret_cast<void*>(&BinDir), &info) != 0 && info.dli_fname != nullptr) {
    module = info.dli_fname;
  }
  std::string folder = module.substr(0, module.rfind('/'));
  if (!module.empty() && ::access((folder + "/_bin/phalanx").c_str(), X_OK) == 0) {
    return folder + "/_bin";
  }
  std::string built = PHALANX_BIN_DIR;
  if (::access((built + "/phalanx").c_str(), X_OK) == 0) return built;
  std::string path = module;
  for (int up = 0; up < 5 && !path.empty(); ++up) path = path.substr(0, path.rfind('/'));
  if (!path.empty() && ::access((path + "/bin/phalanx").c_str(), X_OK) == 0) return path + "/bin";
  return built;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  namespace python = phalanx::python;
  phalanx::ConfigureMutexDeadlockCheck();  // at import, before the module starts any thread
  m.doc() = "the native half of the phalanx package";
  // The C++ actor classes this module hosts in a Python worker.
  phalanx::elastic::RegisterController();
  python::RegisterPythonTrainer();

  m.attr("BIN_DIR") = BinDir();
  python::BindErrors(m);
  python::BindDriver(m);
  python::BindWorker(m);
  python::BindCollectives(m);
  python::BindJobs(m);
  python::BindObjects(m);
}
