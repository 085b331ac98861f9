#include "base/python_env.h"

#include <cstdlib>

namespace phalanx {
namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* set = std::getenv(name);
  return set != nullptr && *set != '\0' ? set : fallback;
}

}  // namespace

std::string PhalanxPython() { return EnvOr("PHALANX_PYTHON", PHALANX_PYTHON_DEFAULT); }

std::string PhalanxPythonPath() { return EnvOr("PHALANX_PYTHONPATH", PHALANX_PYTHON_PATH_DEFAULT); }

}  // namespace phalanx
