// Facts about this machine and small clock/format helpers. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace phalanx {

// Milliseconds since the Unix epoch (wall clock), for timestamps stored in the GCS.
int64_t NowMs();

std::string Hostname();

// Names this machine (its boot id and host name): equal for two processes exactly when they
// run on the same machine, even under one host name in containers.
std::string MachineId();

// The address other machines reach this one at: the source address of the default route,
// or 127.0.0.1 when there is none.
std::string DetectNodeIp();

// True when `host` (an IP address or a name) is this machine: loopback, "localhost", its host
// name, or an address of one of its interfaces.
bool IsLocalHost(const std::string& host);

int NumCpus();
// Number of NVIDIA GPUs (/dev/nvidiaN), or the count in $CUDA_VISIBLE_DEVICES when set.
int NumGpus();

// From /proc/meminfo: total, and used (total - available), in bytes.
int64_t TotalMemoryBytes();
int64_t UsedMemoryBytes();

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();
// True if something listens on `port` (binding 0.0.0.0:port fails with EADDRINUSE).
bool PortInUse(int port);

// What a TCP handshake with a host:port found.
enum class Knock {
  kAccepted,  // something listens there (a stopped process's port still accepts, in its kernel)
  kRefused,   // the host answered with a reset: nothing listens on that port
  kSilent,    // no answer in time (a host that is down or cut off), or an address that is bad
};

// Knocks on each of `host_ports` ("host:port", "[v6]:port") at once: a TCP handshake, closed
// with a reset, nothing sent. Waits at most `timeout` for all of them together; the answers
// are in the order of `host_ports`. Names are resolved first, within the resolver's own
// bounds (resolv.conf's timeout and attempts); node addresses are IPs by default, which
// need none.
std::vector<Knock> KnockTcp(const std::vector<std::string>& host_ports, absl::Duration timeout);

// The directory of the running executable (from /proc/self/exe).
std::string ExecutableDir();

// "1.5 GiB", "512 MiB", "0 B".
std::string FormatBytes(double bytes);

}  // namespace phalanx
