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

#include "cli/commands.h"

namespace phalanx::cli {

int ExecPythonLauncher(const std::vector<std::string>& args) {
  // $PHALANX_PYTHON: another interpreter; by default the one the native module is built for
  // (Debian's), which finds the package through the .pth file scripts/setup.sh writes, or the
  // .deb's dist-packages. $PHALANX_PYTHONPATH (a pip-installed phalanx sets both:
  // python/phalanx/_command.py) or else the checkout this binary was built from comes first,
  // so a build tree runs its own Python side.
  const char* python = std::getenv("PHALANX_PYTHON");
  std::string interpreter =
      python != nullptr && *python != '\0' ? python : PHALANX_PYTHON_EXECUTABLE;
  const char* package = std::getenv("PHALANX_PYTHONPATH");
  std::string path =
      package != nullptr && *package != '\0'
          ? std::string(package)
          : std::string(PHALANX_SOURCE_DIR) + "/python:" + PHALANX_BUILD_DIR + "/python";
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
