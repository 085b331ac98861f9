// The Python that runs the phalanx package: a node's Python workers and `phalanx run`'s
// launcher use the same. A pip-installed phalanx names its own (python/phalanx/_command.py
// sets the variables for the programs it starts); otherwise this build's.
#pragma once

#include <string>

namespace phalanx {

// $PHALANX_PYTHON, else Debian's python3 (the interpreter the native module is built for).
std::string PhalanxPython();
// $PHALANX_PYTHONPATH, else this build's folders: the package's sources and the build tree
// that holds its native module. Put ahead of whatever else is on the path.
std::string PhalanxPythonPath();

}  // namespace phalanx
