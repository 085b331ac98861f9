// `phalanx list actors`: every actor with state, node, pid, resources, restarts and cause.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/describe.h"
#include "base/ids.h"
#include "base/session.h"
#include "base/tls.h"
#include "cli/commands.h"
#include "client/gcs_client.h"

namespace phalanx::cli {

int RunListActors(const ClusterFlags& flags, bool all) {
  auto cluster = rpc::FindCluster(flags.address, flags.token);
  if (!cluster.ok()) {
    std::cerr << "phalanx list: " << cluster.status().message() << "\n";
    return 1;
  }
  auto gcs = gcs::GcsClient::Connect({cluster->address, cluster->token}, absl::Seconds(5));
  if (!gcs.ok()) {
    std::cerr << "phalanx list: " << gcs.status().message() << "\n";
    return 1;
  }
  auto actors = (*gcs)->ListActors();
  if (!actors.ok()) {
    std::cerr << "phalanx list: " << actors.status().message() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat("%-9s %-16s %-12s %-10s %-9s %-8s %-26s %-8s %s\n", "ACTOR", "CLASS",
                               "NAME", "STATE", "NODE", "PID", "RESOURCES", "RESTARTS",
                               "CAUSE / REASON");
  int shown = 0, hidden = 0;
  for (const auto& a : *actors) {
    if (!all && a.state() == rpc::ACTOR_DEAD && a.end_time_ms() > 0 && actors->size() > 50) {
      ++hidden;
      continue;
    }
    std::string detail;
    if (a.state() == rpc::ACTOR_PENDING || a.state() == rpc::ACTOR_RESTARTING) {
      detail = a.pending_reason();
      if (a.state() == rpc::ACTOR_RESTARTING && a.death_cause().kind() != rpc::DeathCause::NONE) {
        detail = absl::StrCat("after ", rpc::DescribeCause(a.death_cause()),
                              detail.empty() ? "" : "; ", detail);
      }
    } else if (a.state() == rpc::ACTOR_DEAD) {
      detail = rpc::DescribeCause(a.death_cause());
    } else if (a.death_cause().kind() != rpc::DeathCause::NONE) {
      detail = absl::StrCat("last death: ", rpc::DescribeCause(a.death_cause()));
    }
    std::string restarts = a.max_restarts() == -1
                               ? absl::StrCat(a.num_restarts(), "/inf")
                               : absl::StrCat(a.num_restarts(), "/", a.max_restarts());
    std::cout << absl::StrFormat(
        "%-9s %-16s %-12s %-10s %-9s %-8s %-26s %-8s %s\n", ShortId(a.actor_id()), a.class_name(),
        a.name().empty() ? "-" : a.name(), rpc::StateName(a.state()),
        a.node_id().empty() ? "-" : ShortId(a.node_id()), a.pid() > 0 ? absl::StrCat(a.pid()) : "-",
        rpc::FromProto(a.resources()).ToString(), restarts, detail);
    ++shown;
  }
  if (hidden > 0) std::cout << "(" << hidden << " dead actors not shown; --all shows them)\n";
  if (shown == 0 && hidden == 0) std::cout << "(no actors)\n";
  return 0;
}

}  // namespace phalanx::cli
