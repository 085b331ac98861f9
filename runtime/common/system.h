// Facts about this machine and small clock/format helpers. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

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

// The directory of the running executable (from /proc/self/exe).
std::string ExecutableDir();

// "1.5 GiB", "512 MiB", "0 B".
std::string FormatBytes(double bytes);

}  // namespace phalanx
