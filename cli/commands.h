// The `phalanx` command's verbs. Each returns the process exit code and prints one clear
// line on stderr for bad input.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace phalanx::cli {

struct StartOptions {
  bool head = false;
  std::string address;  // join: the GCS address
  // Join: the cluster token (or $PHALANX_TOKEN). Head: the token to use instead of a new
  // random one (a Kubernetes Secret, say).
  std::string token;
  int port = 6380;  // head: the GCS port
  double num_cpus = -1;
  double num_gpus = -1;
  double memory = -1;  // bytes
  std::string resources_json;
  std::string redis_address;  // head: an external Redis instead of the embedded one
  std::string redis_password;
  // Head: find the Redis primary through these sentinels ("HOST:PORT,...") and follow its
  // failovers, instead of starting a Redis; the master's name they monitor; their password.
  std::string redis_sentinel;
  std::string redis_master_name;
  std::string redis_sentinel_password;
  int redis_port = 0;  // head, embedded Redis: 0 picks a free port
  // Head, embedded Redis: its appendfsync. "everysec" (default): a write the GCS acknowledged
  // is on disk within a second; "always": before the GCS acknowledges it (slower writes).
  std::string redis_fsync = "everysec";
  std::string node_ip;
  int64_t node_timeout_ms = 3000;
  int64_t driver_lease_timeout_ms = 60000;
  int64_t partition_timeout_ms = 60000;
  int64_t node_call_timeout_ms = 10000;
  int64_t heartbeat_ms = 500;
  // TLS (default): the head makes the cluster's CA and prints its fingerprint in the join
  // command; a joining machine checks the CA against it (--ca-fingerprint) and gets its own
  // certificate. --no-tls: plaintext everywhere (debugging; the token travels in clear).
  bool no_tls = false;
  std::string ca_fingerprint;  // join
  // A CA that `phalanx make-ca` wrote. Head: the cluster's CA (instead of a new one). Join:
  // trust its ca.pem (instead of checking --ca-fingerprint).
  std::string ca_dir;
  // Head: the HTTP(S) port of /metrics, /api and the dashboard (8265, like Ray's). When the
  // user did not choose it and it is taken, another free port serves (status shows it).
  int dashboard_port = 8265;
  bool dashboard_port_given = false;
  // Every node: its node manager's /metrics port (0: any free one, -1: none).
  int metrics_port = 0;
  // Every node: the node manager's memory monitor kills the newest actor when the machine's
  // memory use passes this fraction (<0: the node manager's default).
  double memory_usage_threshold = -1;
  // Every node: its object store's capacity in /dev/shm, bytes (0: the node manager's default).
  int64_t object_store_memory = 0;
  std::string object_store_dir;  // "": /dev/shm
  // Stay in the foreground: SIGTERM or SIGINT stops what this command started; so does the
  // death of its GCS or node manager (then the exit code is 1). For container entrypoints and
  // `srun`, where the step must own the processes.
  bool block = false;
};
int RunStart(const StartOptions& options);

// `phalanx make-ca DIR`: a new cluster CA (DIR/ca.pem, DIR/ca.key) for `start --ca-dir`.
int RunMakeCa(const std::string& dir);

// `--watch`: run `show` every `interval_s`, redrawing the terminal in place, until Ctrl-C.
struct WatchOptions {
  bool watch = false;
  double interval_s = 2;
};
int RunWatched(const WatchOptions& options, const std::function<int()>& show);

struct StopOptions {
  bool force = false;
  double grace_s = 10;
};
int RunStop(const StopOptions& options);
// Stops the processes of `sessions` (node managers and their workers first, Redis last);
// prints what it stopped. False if one would not stop.
bool StopSessions(const std::vector<std::string>& sessions, const StopOptions& options);

struct ClusterFlags {
  std::string address;
  std::string token;
  std::string token_file;  // --token-file: read into token
};

// Overwrites the value of every --token (and --token=) in argv before a `--` with '*', so that
// the token does not show in `ps` for the rest of this process's life. Whether there was one.
bool MaskTokenArguments(int argc, char** argv);
// The token in `path` (standard input for "-"), surrounding whitespace removed. Errors name
// the file and say what is wrong (missing, unreadable, empty, over 4 KiB).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);
int RunStatus(const ClusterFlags& flags);
// `phalanx metrics-config`: a Prometheus scrape config for the cluster.
int RunMetricsConfig(const ClusterFlags& flags);
int RunListActors(const ClusterFlags& flags, bool all);

// `phalanx job …`: jobs on the head's job manager, and elastic training jobs.
struct JobSubmitOptions {
  ClusterFlags cluster;
  std::string working_dir;
  std::vector<std::string> env;  // NAME=VALUE
  bool no_wait = false;
  std::string submission_id;
  std::string spec_file;  // -f: an elastic training job
  std::vector<std::string> entrypoint;
};
int RunJobSubmit(const JobSubmitOptions& options);
int RunJobList(const ClusterFlags& flags);
int RunJobStatus(const ClusterFlags& flags, const std::string& job_id);
int RunJobLogs(const ClusterFlags& flags, const std::string& job_id, bool follow);
int RunJobStop(const ClusterFlags& flags, const std::string& job_id, double grace_s, bool no_wait);
int RunJobScale(const ClusterFlags& flags, const std::string& job_id, int replicas,
                const std::vector<int>& ranks,
                const std::optional<std::vector<std::string>>& nodes = std::nullopt);

// `phalanx run ARGS` (and `job submit --torchrun`): replaces this process with
// `python3 -m phalanx.run ARGS`; returns only when that cannot start (the exit code, 127).
int ExecPythonLauncher(const std::vector<std::string>& args);

}  // namespace phalanx::cli
