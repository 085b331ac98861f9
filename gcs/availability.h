// A node's available resources, as the node table shows them, follow the scheduler's ledger:
// whatever changes the ledger calls SyncAvailable for each node it touched.
#pragma once

#include <string>

#include "base/describe.h"
#include "gcs/node_manager.h"
#include "placement/resource_scheduler.h"

namespace phalanx::gcs {

// Sets `node_id`'s available resources in `nodes` to what `scheduler` leaves free on it. A node
// the scheduler no longer knows, or one that is not alive, is left as it is.
inline void SyncAvailable(const placement::ResourceScheduler& scheduler, GcsNodeManager* nodes,
                          const std::string& node_id) {
  if (auto available = scheduler.Available(node_id)) {
    nodes->UpdateAvailable(node_id, rpc::ToProto(*available)).IgnoreError();
  }
}

}  // namespace phalanx::gcs
