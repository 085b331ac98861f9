// _phalanx: the native half of the `phalanx` Python package. The Python layer (python/phalanx)
// does the user-facing API and pickling; this module talks to the runtime. Each concern binds
// itself (bindings.h): the driver side (actors, calls, placement groups, KV), the Python
// worker, collective groups on numpy arrays and torch tensors, and elastic jobs. Every call
// that may block releases the GIL, and every error is raised as its class of
// phalanx.exceptions (errors.cc).
#include <pybind11/pybind11.h>

#include "actors/elastic/controller.h"
#include "python/src/bindings.h"
#include "python/src/py_trainer.h"

PYBIND11_MODULE(_phalanx, m) {
  namespace python = phalanx::python;
  m.doc() = "the native half of the phalanx package";
  // The C++ actor classes this module hosts in a Python worker.
  phalanx::elastic::RegisterController();
  python::RegisterPythonTrainer();

  m.attr("BIN_DIR") = PHALANX_BIN_DIR;
  python::BindErrors(m);
  python::BindDriver(m);
  python::BindWorker(m);
  python::BindCollectives(m);
  python::BindJobs(m);
}
