// phalanx: the command-line interface. One binary; the daemons (phalanx-gcs, phalanx-node)
// live next to it.
#include <iostream>

#include "CLI/CLI.hpp"
#include "runtime/cli/commands.h"

int main(int argc, char** argv) {
  using namespace phalanx::cli;
  CLI::App app{"phalanx: an actor runtime for elastic, fault-tolerant distributed training"};
  app.require_subcommand(1);

  StartOptions start;
  auto* start_cmd = app.add_subcommand("start", "start a head node, or join a cluster");
  start_cmd->add_flag("--head", start.head, "start a new cluster with this machine as head");
  start_cmd->add_option("--address", start.address, "join the cluster whose GCS is HOST:PORT");
  start_cmd->add_option("--token", start.token, "the cluster token (join; or $PHALANX_TOKEN)");
  start_cmd->add_option("--port", start.port, "head: the GCS port")->capture_default_str();
  start_cmd->add_option("--num-cpus", start.num_cpus, "CPUs to offer (default: all)");
  start_cmd->add_option("--num-gpus", start.num_gpus, "GPUs to offer (default: all)");
  start_cmd->add_option("--memory", start.memory, "memory to offer, bytes (default: all)");
  start_cmd->add_option("--resources", start.resources_json,
                        "custom resources as JSON, e.g. '{\"accel\": 2}'");
  start_cmd->add_option("--redis-address", start.redis_address,
                        "head: use this Redis (HOST:PORT) instead of starting one");
  start_cmd->add_option("--redis-password", start.redis_password,
                        "head: password of --redis-address");
  start_cmd->add_option("--redis-port", start.redis_port, "head: port of the embedded Redis");
  start_cmd->add_option("--node-ip-address", start.node_ip,
                        "the address other machines reach this one at");
  start_cmd
      ->add_option("--node-timeout-ms", start.node_timeout_ms,
                   "head: declare a node dead after this long without heartbeats")
      ->capture_default_str();
  start_cmd->add_option("--heartbeat-ms", start.heartbeat_ms, "node heartbeat period")
      ->capture_default_str();

  StopOptions stop;
  auto* stop_cmd = app.add_subcommand("stop", "stop every Phalanx process on this machine");
  stop_cmd->add_flag("--force", stop.force, "SIGKILL at once");
  stop_cmd->add_option("--grace", stop.grace_s, "seconds before SIGKILL")->capture_default_str();

  ClusterFlags cluster;
  auto* status_cmd = app.add_subcommand("status", "show the cluster's nodes and resources");
  auto* list_cmd = app.add_subcommand("list", "list cluster objects");
  auto* list_actors = list_cmd->add_subcommand("actors", "every actor: state, node, cause");
  list_cmd->require_subcommand(1);
  bool list_all = false;
  list_actors->add_flag("--all", list_all, "include every dead actor");
  for (auto* cmd : {status_cmd, list_actors}) {
    cmd->add_option("--address", cluster.address, "GCS HOST:PORT (default: this machine's)");
    cmd->add_option("--token", cluster.token, "cluster token (default: this machine's)");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (*start_cmd) return RunStart(start);
  if (*stop_cmd) return RunStop(stop);
  if (*status_cmd) return RunStatus(cluster);
  if (*list_actors) return RunListActors(cluster, list_all);
  return 2;
}
