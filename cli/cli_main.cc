// phalanx: the command-line interface. One binary; the daemons (phalanx-gcs, phalanx-node)
// live next to it.
#include <algorithm>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "base/mutex_check.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  phalanx::ConfigureMutexDeadlockCheck();
  using namespace phalanx::cli;
  // torchrun's and horovodrun's options are the launcher's to parse, all of them.
  if (argc >= 2 && std::string(argv[1]) == "run") {
    return ExecPythonLauncher(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 4 && std::string(argv[1]) == "job" && std::string(argv[2]) == "submit") {
    std::vector<std::string> rest(argv + 3, argv + argc);
    auto dashes = std::find(rest.begin(), rest.end(), std::string("--"));
    auto torchrun = std::find(rest.begin(), dashes, std::string("--torchrun"));
    if (torchrun != dashes) {
      rest.erase(torchrun);
      rest.insert(rest.begin(), "--no-follow");
      return ExecPythonLauncher(rest);
    }
  }
  CLI::App app{"phalanx: an actor runtime for elastic, fault-tolerant distributed training"};
  app.require_subcommand(1);

  StartOptions start;
  auto* start_cmd = app.add_subcommand("start", "start a head node, or join a cluster");
  start_cmd->add_flag("--head", start.head, "start a new cluster with this machine as head");
  start_cmd->add_option("--address", start.address, "join the cluster whose GCS is HOST:PORT");
  start_cmd->add_option("--token", start.token,
                        "join: the cluster token; head: use this token instead of a random one "
                        "(at least 16 characters). Visible to other users in `ps` until this "
                        "command masks it: prefer $PHALANX_TOKEN or --token-file");
  std::string start_token_file;
  start_cmd->add_option("--token-file", start_token_file,
                        "read the token (as for --token) from this file, or from standard input "
                        "with -");
  start_cmd->add_option("--port", start.port, "head: the GCS port")->capture_default_str();
  start_cmd->add_option("--ca-fingerprint", start.ca_fingerprint,
                        "join: the SHA-256 fingerprint of the cluster's CA, as the head's join "
                        "command prints it (not needed where a session of the cluster is)");
  start_cmd->add_flag("--no-tls", start.no_tls,
                      "head: run the cluster without TLS (debugging only: the token and all "
                      "traffic travel in clear); join: join such a cluster");
  start_cmd->add_option("--num-cpus", start.num_cpus, "CPUs to offer (default: all)");
  start_cmd->add_option("--num-gpus", start.num_gpus, "GPUs to offer (default: all)");
  start_cmd->add_option("--memory", start.memory, "memory to offer, bytes (default: all)");
  start_cmd
      ->add_option("--object-store-memory", start.object_store_memory,
                   "what the node's object store may hold in /dev/shm, bytes; past it, values "
                   "go to disk (default: 30% of the machine's memory)")
      ->check(CLI::NonNegativeNumber);
  start_cmd
      ->add_option("--object-store-dir", start.object_store_dir,
                   "keep the node's object store in this directory instead of /dev/shm (Ray's "
                   "--plasma-directory): a tmpfs mounted with huge=within_size makes large puts "
                   "several times faster")
      ->check(CLI::ExistingDirectory);
  start_cmd->add_option("--resources", start.resources_json,
                        "custom resources as JSON, e.g. '{\"accel\": 2}'");
  start_cmd->add_option("--redis-address", start.redis_address,
                        "head: use this Redis (HOST:PORT) instead of starting one");
  start_cmd->add_option("--redis-password", start.redis_password,
                        "head: password of --redis-address");
  start_cmd->add_option("--redis-sentinel", start.redis_sentinel,
                        "head: use the Redis primary these sentinels (HOST:PORT[,HOST:PORT...]) "
                        "name, and follow its failovers, instead of starting a Redis");
  start_cmd->add_option("--redis-master-name", start.redis_master_name,
                        "head, with --redis-sentinel: the master's name the sentinels monitor");
  start_cmd->add_option("--redis-sentinel-password", start.redis_sentinel_password,
                        "head, with --redis-sentinel: the sentinels' password, if they have one "
                        "(--redis-password is the primary's)");
  start_cmd->add_option("--redis-port", start.redis_port, "head: port of the embedded Redis");
  start_cmd
      ->add_option("--redis-fsync", start.redis_fsync,
                   "head: when the embedded Redis syncs its log to disk: everysec (an "
                   "acknowledged write can be lost to a machine crash within ~1 s) or always "
                   "(never lost; each write waits for the disk)")
      ->capture_default_str();
  start_cmd->add_option("--node-ip-address", start.node_ip,
                        "the address other machines reach this one at");
  start_cmd
      ->add_option("--node-timeout-ms", start.node_timeout_ms,
                   "head: declare a node dead after this long without heartbeats")
      ->capture_default_str();
  start_cmd
      ->add_option("--partition-timeout-ms", start.partition_timeout_ms,
                   "head: when most nodes fall silent at once (the head may be the one cut "
                   "off), declare them dead only after this much longer than the node timeout; "
                   "nodes cut off together with a majority of the cluster keep training as long")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  start_cmd
      ->add_option("--node-call-timeout-ms", start.node_call_timeout_ms,
                   "head: bound of each call the head makes to a node manager, at least 3000 "
                   "(a node refuses a bundle reservation with under 2 s of its call left); an "
                   "actor's start that runs out is sent again, and the node starts it once")
      ->check(CLI::Range(int64_t{3000}, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  start_cmd
      ->add_option("--driver-lease-timeout-ms", start.driver_lease_timeout_ms,
                   "head: release the actors of a driver silent this long even if its process "
                   "may live (a dead driver's go after the node timeout)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  start_cmd->add_option("--heartbeat-ms", start.heartbeat_ms, "node heartbeat period")
      ->capture_default_str();
  auto* dashboard_port =
      start_cmd
          ->add_option("--dashboard-port", start.dashboard_port,
                       "head: the HTTP(S) port of the dashboard, /metrics and /api (-1: none; "
                       "when left at the default and taken, another free port serves)")
          ->check(CLI::Range(-1, 65535))
          ->capture_default_str();
  start_cmd
      ->add_option("--metrics-port", start.metrics_port,
                   "this node's /metrics port (0: any free one, -1: none)")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();

  start_cmd->add_option("--ca-dir", start.ca_dir,
                        "a CA from `phalanx make-ca`: head: the cluster's CA instead of a new "
                        "one; join: trust its ca.pem instead of --ca-fingerprint");
  start_cmd
      ->add_option("--memory-usage-threshold", start.memory_usage_threshold,
                   "kill the newest actor when this machine's memory use passes this fraction "
                   "(default: the node manager's, 0.95)")
      ->check(CLI::Range(0.0, 1.0));
  start_cmd->add_flag("--block", start.block,
                      "stay in the foreground; SIGTERM/Ctrl-C stops what this command started, "
                      "as does the death of its GCS or node manager (exit code 1)");

  std::string ca_dir;
  auto* make_ca_cmd = app.add_subcommand(
      "make-ca", "write a new cluster CA (ca.pem, ca.key) for `start --head --ca-dir`");
  make_ca_cmd->add_option("dir", ca_dir, "the directory to write it to (made 0700)")->required();

  StopOptions stop;
  auto* stop_cmd = app.add_subcommand("stop", "stop every Phalanx process on this machine");
  stop_cmd->add_flag("--force", stop.force, "SIGKILL at once");
  stop_cmd->add_option("--grace", stop.grace_s, "seconds before SIGKILL")->capture_default_str();

  ClusterFlags cluster;
  auto* status_cmd = app.add_subcommand("status", "show the cluster's nodes and resources");
  WatchOptions watch;
  status_cmd->add_flag("-w,--watch", watch.watch, "refresh in place until Ctrl-C");
  status_cmd->add_option("--interval", watch.interval_s, "seconds between refreshes (--watch)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  auto* metrics_config_cmd = app.add_subcommand(
      "metrics-config",
      "print a Prometheus scrape config for this cluster (file_sd targets kept current by the "
      "head: its HTTP port and every node's /metrics)");
  auto* list_cmd = app.add_subcommand("list", "list cluster objects");
  auto* list_actors = list_cmd->add_subcommand("actors", "every actor: state, node, cause");
  list_cmd->require_subcommand(1);
  bool list_all = false;
  list_actors->add_flag("--all", list_all, "include every dead actor");

  app.add_subcommand("run",
                     "run a torchrun program on the cluster: `phalanx run [torchrun's options] "
                     "script.py ARGS...` (`phalanx run --help`), or a Horovod elastic one: "
                     "`phalanx run --horovod -np N python prog.py`");
  auto* job_cmd =
      app.add_subcommand("job", "submit and manage jobs (drivers and elastic training)");
  job_cmd->require_subcommand(1);
  JobSubmitOptions submit;
  auto* job_submit = job_cmd->add_subcommand(
      "submit",
      "run a program on the head: `phalanx job submit [--working-dir DIR] -- COMMAND ARGS...`, "
      "an elastic training job: `phalanx job submit -f job.yaml`, or a torchrun program: "
      "`phalanx job submit --torchrun [torchrun's options] -- script.py ARGS...`");
  job_submit->add_option("--working-dir", submit.working_dir,
                         "a directory to copy to the head; the job runs in the copy");
  job_submit->add_option("--env", submit.env, "NAME=VALUE for the job (repeatable)")
      ->allow_extra_args(false);
  job_submit->add_flag("--no-wait", submit.no_wait, "return once submitted");
  job_submit->add_option("--submission-id", submit.submission_id, "the job id to use");
  job_submit->add_option("-f,--file", submit.spec_file, "an elastic training job spec (YAML)");
  job_submit->add_option("entrypoint", submit.entrypoint, "the command, after `--`");
  std::string job_id;
  auto* job_status = job_cmd->add_subcommand("status", "a job's state (conditions and events)");
  job_status->add_flag("-w,--watch", watch.watch, "refresh in place until Ctrl-C");
  job_status->add_option("--interval", watch.interval_s, "seconds between refreshes (--watch)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  auto* job_logs = job_cmd->add_subcommand(
      "logs", "a job's output: a driver job's driver, an elastic job's ranks (phalanx.train)");
  bool follow = false;
  job_logs->add_flag("-f,--follow", follow, "keep printing new output until the job ends");
  auto* job_stop = job_cmd->add_subcommand("stop", "stop a job: SIGTERM, then SIGKILL");
  double stop_grace = 10;
  bool stop_no_wait = false;
  job_stop->add_option("--grace", stop_grace, "seconds between SIGTERM and SIGKILL")
      ->capture_default_str();
  job_stop->add_flag("--no-wait", stop_no_wait, "return once asked");
  auto* job_list = job_cmd->add_subcommand("list", "every job, oldest first");
  auto* job_scale = job_cmd->add_subcommand("scale", "resize an elastic training job");
  int scale_replicas = -1;
  std::vector<int> remove_ranks;
  job_scale->add_option("--replicas", scale_replicas, "the new world size");
  job_scale->add_option("--remove-ranks", remove_ranks, "take these ranks out (graceful)")
      ->delimiter(',')
      ->allow_extra_args(false);
  std::string scale_nodes;
  auto* nodes_option = job_scale->add_option(
      "--nodes", scale_nodes,
      "the nodes the ranks may use from now on: node ids, hostnames or IPs, comma-separated; "
      "'*' for any node. Ranks on other nodes leave gracefully");
  for (auto* cmd : {job_status, job_logs, job_stop, job_scale}) {
    cmd->add_option("job_id", job_id, "the job's id (`phalanx job list`)")->required();
  }
  for (auto* cmd : {status_cmd, metrics_config_cmd, list_actors, job_submit, job_status, job_logs,
                    job_stop, job_list, job_scale}) {
    auto& flags = cmd == job_submit ? submit.cluster : cluster;
    cmd->add_option("--address", flags.address, "GCS HOST:PORT (default: this machine's)");
    cmd->add_option("--token", flags.token,
                    "cluster token (default: $PHALANX_TOKEN, or this machine's)");
    cmd->add_option("--token-file", flags.token_file,
                    "read the cluster token from this file, or from standard input with -");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // A token on the command line shows in `ps` to every user of the machine: it is masked in
  // this process's arguments at once (`start --block` lives as long as its node), and the
  // token is better passed another way.
  if (MaskTokenArguments(argc, argv) && *start_cmd) {
    std::cerr << "phalanx: warning: --token on a command line can be read by every user of "
                 "this machine (ps, /proc) until it is masked; pass it in $PHALANX_TOKEN or "
                 "--token-file instead\n";
  }
  for (auto [file, token] :
       {std::pair{&start_token_file, &start.token}, std::pair{&cluster.token_file, &cluster.token},
        std::pair{&submit.cluster.token_file, &submit.cluster.token}}) {
    if (file->empty()) continue;
    if (!token->empty()) {
      std::cerr << "phalanx: give --token or --token-file, not both\n";
      return 2;
    }
    auto read = ReadTokenFile(*file);
    if (!read.ok()) {
      std::cerr << "phalanx: --token-file: " << read.status().message() << "\n";
      return 2;
    }
    *token = *read;
  }
  start.dashboard_port_given = dashboard_port->count() > 0;
  if (*start_cmd) return RunStart(start);
  if (*stop_cmd) return RunStop(stop);
  if (*make_ca_cmd) return RunMakeCa(ca_dir);
  if (*status_cmd) return RunWatched(watch, [&] { return RunStatus(cluster); });
  if (*metrics_config_cmd) return RunMetricsConfig(cluster);
  if (*list_actors) return RunListActors(cluster, list_all);
  if (*job_submit) return RunJobSubmit(submit);
  if (*job_status) return RunWatched(watch, [&] { return RunJobStatus(cluster, job_id); });
  if (*job_logs) return RunJobLogs(cluster, job_id, follow);
  if (*job_stop) return RunJobStop(cluster, job_id, stop_grace, stop_no_wait);
  if (*job_list) return RunJobList(cluster);
  if (*job_scale) {
    std::optional<std::vector<std::string>> nodes;
    if (*nodes_option) {
      nodes.emplace();
      if (scale_nodes != "*") nodes = absl::StrSplit(scale_nodes, ',', absl::SkipEmpty());
    }
    return RunJobScale(cluster, job_id, scale_replicas, remove_ranks, nodes);
  }
  return 2;
}
