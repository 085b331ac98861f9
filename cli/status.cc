// `phalanx status`: the cluster's nodes and resources, like `ray status`.
#include <ctime>
#include <iomanip>
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/resources.h"
#include "base/session.h"
#include "base/system.h"
#include "base/tls.h"
#include "cli/commands.h"
#include "client/gcs_client.h"

namespace phalanx::cli {
namespace {

Resources FromProto(const rpc::ResourceSet& set) {
  Resources r;
  for (const auto& [name, amount] : set.amounts()) r.Set(name, amount);
  return r;
}

std::string UsedOfTotal(const std::string& name, const Resources& total, const Resources& avail) {
  double t = total.Get(name);
  double used =
      static_cast<double>(total.GetFixed(name) - avail.GetFixed(name)) / Resources::kScale;
  return absl::StrCat(FormatAmount(name, used), "/", FormatAmount(name, t));
}

std::string Now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace

int RunStatus(const ClusterFlags& flags) {
  auto cluster = rpc::FindCluster(flags.address, flags.token);
  if (!cluster.ok()) {
    std::cerr << "phalanx status: " << cluster.status().message() << "\n";
    return 1;
  }
  auto gcs = gcs::GcsClient::Connect({cluster->address, cluster->token}, absl::Seconds(5));
  if (!gcs.ok()) {
    std::cerr << "phalanx status: " << gcs.status().message() << "\n";
    return 1;
  }
  auto info = (*gcs)->GetClusterInfo();
  auto nodes = (*gcs)->GetAllNodes(false);
  if (!info.ok() || !nodes.ok()) {
    std::cerr << "phalanx status: "
              << (info.ok() ? nodes.status().message() : info.status().message()) << "\n";
    return 1;
  }
  int alive = 0, dead = 0;
  Resources total, available;
  for (const auto& n : *nodes) {
    if (n.state() == rpc::NODE_ALIVE) {
      ++alive;
      total += FromProto(n.total());
      available += FromProto(n.available());
    } else {
      ++dead;
    }
  }
  std::cout << "======== Phalanx cluster " << info->cluster_id() << " at " << cluster->address
            << " — " << Now() << " ========\n";
  std::cout << "TLS: ";
  if (cluster->tls_dir.empty()) {
    std::cout << "off (plaintext; a cluster started with --no-tls)\n";
  } else {
    auto ca = ReadFile(absl::StrCat(cluster->tls_dir, "/", rpc::kCaCertFile));
    auto fingerprint = ca.ok() ? rpc::CertFingerprint(*ca) : ca.status();
    std::cout << "on, CA fingerprint "
              << (fingerprint.ok() ? *fingerprint : std::string(fingerprint.status().message()))
              << " (join with --ca-fingerprint)\n";
  }
  std::string head_host = cluster->address.substr(0, cluster->address.rfind(':'));
  std::cout << "Dashboard: ";
  if (info->dashboard_port() > 0) {
    std::cout << (info->dashboard_https() ? "https" : "http") << "://" << head_host << ":"
              << info->dashboard_port()
              << "/ (sign in with the cluster token; Prometheus: /metrics with it as a bearer "
                 "token, or `phalanx metrics-config`)\n";
  } else {
    std::cout << "none (the head was started with --dashboard-port -1)\n";
  }
  std::cout << "Nodes: " << alive << " alive, " << dead << " dead\n";
  std::cout << absl::StrFormat(" %-9s %-6s %-22s %-10s %-8s %-24s %s\n", "NODE", "STATE", "ADDRESS",
                               "CPU", "GPU", "MEMORY", "OTHER");
  for (const auto& n : *nodes) {
    Resources t = FromProto(n.total()), a = FromProto(n.available());
    std::vector<std::string> custom;
    for (const auto& [name, amount] : t.ToMap()) {
      if (name == "CPU" || name == "GPU" || name == "memory") continue;
      custom.push_back(absl::StrCat(name, " ", UsedOfTotal(name, t, a)));
    }
    bool is_alive = n.state() == rpc::NODE_ALIVE;
    std::cout << absl::StrFormat(
        " %-9s %-6s %-22s %-10s %-8s %-24s %s%s\n", ShortId(n.node_id()),
        is_alive ? "ALIVE" : "DEAD", n.address(),
        is_alive ? UsedOfTotal("CPU", t, a) : FormatAmount("CPU", t.Get("CPU")),
        is_alive ? UsedOfTotal("GPU", t, a) : FormatAmount("GPU", t.Get("GPU")),
        is_alive ? UsedOfTotal("memory", t, a) : FormatAmount("memory", t.Get("memory")),
        absl::StrJoin(custom, ", "),
        absl::StrCat(n.is_head() ? " (head)" : "",
                     is_alive ? "" : absl::StrCat(" — ", n.death_reason())));
  }
  std::cout << "Metrics (each node's /metrics, for Prometheus):\n";
  for (const auto& n : *nodes) {
    if (n.state() != rpc::NODE_ALIVE) continue;
    std::cout << "  " << ShortId(n.node_id()) << "  "
              << (n.metrics_address().empty() ? "none (--metrics-port -1)" : n.metrics_address())
              << "\n";
  }
  std::cout << "Object stores (in memory, used/capacity; spilled to disk past it):\n";
  for (const auto& n : *nodes) {
    if (n.state() != rpc::NODE_ALIVE) continue;
    const rpc::ObjectStoreUsage& o = n.object_store();
    if (!n.has_object_store()) {
      std::cout << "  " << ShortId(n.node_id()) << "  not reported yet\n";
      continue;
    }
    std::cout << "  " << ShortId(n.node_id()) << "  " << FormatBytes(o.used_bytes()) << "/"
              << FormatBytes(o.capacity_bytes()) << ", " << o.objects() << " object(s)"
              << (o.cached_bytes() > 0 ? absl::StrCat(", ", FormatBytes(o.cached_bytes()),
                                                      " cached from other nodes")
                                       : "")
              << (o.spilled_bytes() > 0
                      ? absl::StrCat(", ", FormatBytes(o.spilled_bytes()), " spilled to disk")
                      : "")
              << "\n";
  }
  std::cout << "Resources (alive nodes, used/total):\n";
  std::vector<std::string> usage;
  for (const auto& [name, amount] : total.ToMap()) {
    usage.push_back(absl::StrCat(UsedOfTotal(name, total, available), " ", name));
  }
  for (const auto& u : usage) std::cout << "  " << u << "\n";
  // Pending demand: actors waiting for a node, grouped by their request.
  std::map<std::string, int> pending;
  std::map<std::string, bool> infeasible;
  auto actors = (*gcs)->ListActors();
  if (actors.ok()) {
    for (const auto& a : *actors) {
      if (a.state() != rpc::ACTOR_PENDING && a.state() != rpc::ACTOR_RESTARTING) continue;
      Resources request = FromProto(a.resources());
      std::string key = request.ToString();
      ++pending[key];
      bool fits_somewhere = false;
      for (const auto& n : *nodes) {
        fits_somewhere |= n.state() == rpc::NODE_ALIVE && FromProto(n.total()).Contains(request);
      }
      infeasible[key] = !fits_somewhere;
    }
  }
  std::vector<std::string> groups;
  auto pgs = (*gcs)->ListPlacementGroups();
  if (pgs.ok()) {
    for (const auto& pg : *pgs) {
      if (pg.state() != rpc::PG_PENDING && pg.state() != rpc::PG_RESCHEDULING) continue;
      std::vector<std::string> bundles;
      for (const auto& b : pg.bundles()) bundles.push_back(FromProto(b.resources()).ToString());
      bool never = pg.pending_reason().rfind("INFEASIBLE", 0) == 0;
      groups.push_back(absl::StrCat("  Pending: 1x placement group ",
                                    pg.name().empty() ? pg.placement_group_id().substr(0, 8)
                                                      : absl::StrCat("'", pg.name(), "'"),
                                    " [", absl::StrJoin(bundles, ", "), "] ", pg.strategy(),
                                    pg.state() == rpc::PG_RESCHEDULING ? " (rescheduling)" : "",
                                    " — ", never ? pg.pending_reason() : pg.pending_reason()));
    }
  }
  std::cout << "Demands:\n";
  if (pending.empty() && groups.empty()) {
    std::cout << "  (no pending actors or placement groups)\n";
  }
  for (const auto& g : groups) std::cout << g << "\n";
  for (const auto& [request, count] : pending) {
    std::cout << "  Pending: " << count << "x " << request << " (actors)"
              << (infeasible[request] ? "  INFEASIBLE: no alive node can ever hold it" : "")
              << "\n";
  }
  return 0;
}

}  // namespace phalanx::cli
