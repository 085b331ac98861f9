// The fault kinds of an elastic job's ranks in one vocabulary (rpc::FaultKind, in
// base/proto/common.proto), from a node's death cause to the policies, the recovery timeline
// and its histograms. Each spelling of a kind lives here:
//
//   rpc::DeathCause::Kind ──FaultOf──► rpc::FaultKind ──FaultName──► "signal", "oom", ... (the
//   (why a process ended)               │                            recovery record, the
//                                       │                            metrics' `kind` label)
//                                       └──SpecEvent──► "exited", "oom", "nodeDied", "hang"
//                                                       (the job spec's event names, as users
//                                                       write them in failPolicy rules)
#pragma once

#include <string_view>

#include "base/proto/common.pb.h"

namespace phalanx::elastic {

// The fault a death cause is: an exit, a signal, an OOM kill, a lost node, an expired lease, a
// scale-in; any other end (a kill by a user, a lost owner) is FAULT_KILLED. The controller's own
// verdicts (a hang, a straggler) are not causes: it knows them, and says so itself.
rpc::FaultKind FaultOf(const rpc::DeathCause& cause);

// The kind's name in a job's record and its metrics: "signal", "exit_code", "oom",
// "node_died", "hang", "straggler", "lease_expired", "killed", "scale" ("unknown" for none).
std::string_view FaultName(rpc::FaultKind kind);

// The job spec's event that a rank's death of this kind matches in failPolicy rules: "oom",
// "nodeDied", "hang", or "exited" for any other end of the process (exit-code rules tell
// those apart).
std::string_view SpecEvent(rpc::FaultKind kind);

}  // namespace phalanx::elastic
