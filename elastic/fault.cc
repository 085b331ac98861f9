#include "elastic/fault.h"

namespace phalanx::elastic {
namespace {

struct Named {
  rpc::FaultKind kind;
  std::string_view name;
};

constexpr Named kNames[] = {
    {rpc::FAULT_UNKNOWN, "unknown"},     {rpc::FAULT_EXIT_CODE, "exit_code"},
    {rpc::FAULT_SIGNAL, "signal"},       {rpc::FAULT_OOM, "oom"},
    {rpc::FAULT_NODE_DIED, "node_died"}, {rpc::FAULT_KILLED, "killed"},
    {rpc::FAULT_HANG, "hang"},           {rpc::FAULT_LEASE_EXPIRED, "lease_expired"},
    {rpc::FAULT_STRAGGLER, "straggler"}, {rpc::FAULT_SCALE, "scale"},
};

}  // namespace

rpc::FaultKind FaultOf(const rpc::DeathCause& cause) {
  switch (cause.kind()) {
    case rpc::DeathCause::EXITED:
      return rpc::FAULT_EXIT_CODE;
    case rpc::DeathCause::SIGNALED:
      return rpc::FAULT_SIGNAL;
    case rpc::DeathCause::OOM_KILLED:
      return rpc::FAULT_OOM;
    case rpc::DeathCause::NODE_DIED:
      return rpc::FAULT_NODE_DIED;
    case rpc::DeathCause::LEASE_EXPIRED:
      return rpc::FAULT_LEASE_EXPIRED;
    case rpc::DeathCause::SCALED_IN:
      return rpc::FAULT_SCALE;
    default:
      return rpc::FAULT_KILLED;
  }
}

std::string_view FaultName(rpc::FaultKind kind) {
  for (const auto& n : kNames) {
    if (n.kind == kind) return n.name;
  }
  return "unknown";
}

std::string_view SpecEvent(rpc::FaultKind kind) {
  switch (kind) {
    case rpc::FAULT_OOM:
      return "oom";
    case rpc::FAULT_NODE_DIED:
      return "nodeDied";
    case rpc::FAULT_HANG:
      return "hang";
    default:
      return "exited";
  }
}

}  // namespace phalanx::elastic
