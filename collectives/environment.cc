#include "collectives/environment.h"

#include <cstdlib>
#include <string>

namespace phalanx::collective {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

void GroupOptionsFromEnvironment(GroupOptions* options) {
  if (Env("PHALANX_COLLECTIVE_SHM") == "0") options->shared_memory = false;
  if (Env("PHALANX_COLLECTIVE_TRANSPORT") == "gloo") options->gloo_mesh = true;
}

}  // namespace phalanx::collective
