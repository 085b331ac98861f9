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

// The root of all sessions on this machine: $PHALANX_TMPDIR, or /tmp/phalanx. Only a path;
// everything below that reads or writes the root checks it first (CheckSessionRoot).
std::string SessionRoot();

// OK if `root` is a directory that only this user can change: owned by geteuid() and not
// writable by group or others (sticky bit or not: others could still plant a session there,
// whose pid files `phalanx stop` would act on). A symlink is followed only if this user or
// root owns it. NotFound if `root` does not exist; FailedPrecondition naming the directory,
// its owner or mode, and the fix (remove it, or set PHALANX_TMPDIR) otherwise.
absl::Status CheckSessionRoot(const std::string& root);

// SessionRoot(), created (mode 0700, missing parents too) if it does not exist, then checked
// with CheckSessionRoot. Returns the root's path.
absl::StatusOr<std::string> EnsureSessionRoot();

// Creates a new session directory (with logs/ and pids/) under EnsureSessionRoot() and points
// session_latest at it.
absl::StatusOr<std::string> CreateSession();

// Removes a session that failed to start and points session_latest back at the newest
// remaining session (or removes the link).
void DiscardSession(const std::string& session);

// The session session_latest points at, or NotFound with a hint to run `phalanx start`, or
// CheckSessionRoot's error for a root that is not safe to read.
absl::StatusOr<std::string> LatestSession();

// Every session directory under the root, oldest first (none if the root does not exist), or
// CheckSessionRoot's error.
absl::StatusOr<std::vector<std::string>> AllSessions();

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
// Its TLS dir (rpc/tls.h): $PHALANX_TLS_DIR, or <session>/tls of a local session of that
// cluster when it has one; empty: plaintext.
struct ClusterAddress {
  std::string address;
  std::string token;
  std::string tls_dir;
};
absl::StatusOr<ClusterAddress> ResolveCluster(const std::string& address_flag,
                                              const std::string& token_flag);

// True when the GCS addresses `a` and `b` (HOST:PORT) name the same GCS: equal, or the same
// port on two names of this machine (127.0.0.1 and its node IP, say).
bool SameGcsAddress(const std::string& a, const std::string& b);

// The TLS dir of the newest local session of the cluster at `address`; empty when there is
// none, or it runs without TLS.
std::string LocalTlsDir(const std::string& address);

// The last `lines` lines of a log file (for error messages when a daemon fails to start).
std::string LogTail(const std::string& path, int lines = 15);

}  // namespace phalanx
