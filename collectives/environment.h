// The environment switches of collective groups, for the programs that offer them (the
// trainer host, the Python module, benchmarks and test ranks). The groups themselves read no
// environment: these only fill their options.
//   PHALANX_COLLECTIVE_SHM=0             GroupOptions::shared_memory = false
//   PHALANX_COLLECTIVE_TRANSPORT=gloo    GroupOptions::gloo_mesh = true
#pragma once

#include "collectives/collective_group.h"

namespace phalanx::collective {

void GroupOptionsFromEnvironment(GroupOptions* options);

}  // namespace phalanx::collective
