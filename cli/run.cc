// `phalanx run` and `phalanx job submit --torchrun`: torchrun's and horovodrun's command lines
// are Python's to parse (python/phalanx/run.py), so these verbs hand the whole command line to
// `python3 -m phalanx.run` in this process's place.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "base/python_env.h"
#include "cli/commands.h"

namespace phalanx::cli {

int ExecPythonLauncher(const std::vector<std::string>& args) {
  // The same Python as the node's workers (base/python_env.h): a build tree runs its own
  // Python side, and a pip-installed phalanx its own. Without $PHALANX_PYTHON, Debian's
  // python3 also finds the package through the .pth file scripts/setup.sh writes, or the
  // .deb's dist-packages.
  std::string interpreter = PhalanxPython();
  std::string path = PhalanxPythonPath();
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
    path = path + ":" + old;
  }
  ::setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<std::string> argv_strings = {interpreter, "-m", "phalanx.run"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::execvp(interpreter.c_str(), argv.data());
  std::cerr << "phalanx run: cannot run " << interpreter << ": " << std::strerror(errno)
            << " (set $PHALANX_PYTHON to a Python 3 with the phalanx package)\n";
  return 127;
}

}  // namespace phalanx::cli
