// Session directories: what `phalanx start` leaves on a machine so that `status`, `stop` and
// drivers find the cluster again.
//
//   $PHALANX_TMPDIR (default /tmp/phalanx)/
//     session_<date>_<time>_<pid>/
//       address        the GCS address (host:port)
//       token          the cluster token (mode 0600)
//       cluster_id
//       redis_password (head with embedded Redis; mode 0600), redis.conf, redis/ (data + AOF)
//       gcs.args       the GCS's command line, one argument per line (to restart it by hand)
//       logs/          one log per daemon
//       pids/<name>.pid  "<pid> <program>" per process this session started
//     session_latest → the newest session
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace phalanx {

// The root of all sessions on this machine.
std::string SessionRoot();

// Creates a new session directory (with logs/ and pids/) and points session_latest at it.
absl::StatusOr<std::string> CreateSession();

// Removes a session that failed to start and points session_latest back at the newest
// remaining session (or removes the link).
void DiscardSession(const std::string& session);

// The session session_latest points at, or NotFound with a hint to run `phalanx start`.
absl::StatusOr<std::string> LatestSession();

// Every session directory under the root, oldest first.
std::vector<std::string> AllSessions();

struct PidEntry {
  std::string name;  // file name without .pid ("gcs", "redis", "node", "worker-…")
  pid_t pid = 0;
  std::string program;  // expected in the process's command line (guards against pid reuse)
  std::string path;     // the pid file
};

absl::Status WritePidFile(const std::string& session, const std::string& name, pid_t pid,
                          const std::string& program);
std::vector<PidEntry> ReadPidFiles(const std::string& session);

// True if the entry's process is alive and still runs the program it names.
bool PidEntryAlive(const PidEntry& entry);

// Where a command finds the cluster: --address / $PHALANX_ADDRESS / the latest session, and
// --token / $PHALANX_TOKEN / the token file of a local session with that address.
struct ClusterAddress {
  std::string address;
  std::string token;
};
absl::StatusOr<ClusterAddress> ResolveCluster(const std::string& address_flag,
                                              const std::string& token_flag);

// The last `lines` lines of a log file (for error messages when a daemon fails to start).
std::string LogTail(const std::string& path, int lines = 15);

}  // namespace phalanx
