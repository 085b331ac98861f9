#include "collectives/environment.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"

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

void NetworkCheckOptionsFromEnvironment(NetworkCheckOptions* options) {
  int ms = 0;
  if (absl::SimpleAtoi(Env("PHALANX_NETCHECK_DELAY_MS"), &ms) && ms > 0) {
    options->matmul_delay = absl::Milliseconds(ms);
  }
}

}  // namespace phalanx::collective
