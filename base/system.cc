#include "base/system.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/files.h"

namespace phalanx {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Hostname() {
  char buf[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string MachineId() {
  // Test hook: lets processes on one machine play members of different machines.
  if (const char* id = std::getenv("PHALANX_MACHINE_ID"); id != nullptr && *id != '\0') return id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  in >> boot_id;
  return absl::StrCat(boot_id, "@", Hostname());
}

std::string DetectNodeIp() {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "127.0.0.1";
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(53);
  ::inet_pton(AF_INET, "10.255.255.255", &remote.sin_addr);  // no packet is sent
  std::string ip = "127.0.0.1";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) ip = buf;
    }
  }
  ::close(fd);
  return ip;
}

bool IsLocalHost(const std::string& host) {
  if (host == "localhost" || host == Hostname() || host == "::1" || host.rfind("127.", 0) == 0) {
    return true;
  }
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return false;
  bool local = false;
  for (ifaddrs* a = all; a != nullptr && !local; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_UP) == 0) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (a->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf,
                  sizeof(buf));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf,
                  sizeof(buf));
    }
    local = host == buf;
  }
  ::freeifaddrs(all);
  return local;
}

int NumCpus() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int NumGpus() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string v = visible;
    if (v.empty() || v == "-1") return 0;
    return static_cast<int>(std::vector<std::string>(absl::StrSplit(v, ',')).size());
  }
  int n = 0;
  while (PathExists(absl::StrFormat("/dev/nvidia%d", n))) ++n;
  return n;
}

namespace {
int64_t MemInfoKb(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t value;
  std::string unit;
  while (in >> name >> value) {
    std::getline(in, unit);
    if (name == field + ":") return value;
  }
  return 0;
}
}  // namespace

int64_t TotalMemoryBytes() { return MemInfoKb("MemTotal") * 1024; }

int64_t UsedMemoryBytes() { return (MemInfoKb("MemTotal") - MemInfoKb("MemAvailable")) * 1024; }

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

bool PortInUse(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool in_use =
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

std::string ExecutableDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%.0f B", bytes);
  return absl::StrFormat("%.1f %s", bytes, kUnits[unit]);
}

namespace {

// A nonblocking socket whose connect to `host_port` is under way (or already ended: *now).
int StartConnect(const std::string& host_port, Knock* now) {
  *now = Knock::kSilent;
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return -1;
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) return -1;
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    // Closed with a reset: no TIME_WAIT here, and nothing for the other side to read.
    linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      *now = Knock::kAccepted;
    } else if (errno == ECONNREFUSED) {
      *now = Knock::kRefused;
    } else if (errno != EINPROGRESS) {
      *now = Knock::kSilent;
    } else {
      freeaddrinfo(found);
      return fd;  // under way
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return -1;
}

}  // namespace

std::vector<Knock> KnockTcp(const std::vector<std::string>& host_ports, absl::Duration timeout) {
  std::vector<Knock> out(host_ports.size(), Knock::kSilent);
  std::vector<pollfd> pending;
  std::vector<size_t> index;
  for (size_t i = 0; i < host_ports.size(); ++i) {
    int fd = StartConnect(host_ports[i], &out[i]);
    if (fd < 0) continue;
    pending.push_back({fd, POLLOUT, 0});
    index.push_back(i);
  }
  absl::Time deadline = absl::Now() + timeout;
  size_t open = pending.size();
  while (open > 0) {
    int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) break;
    int ready = ::poll(pending.data(), pending.size(), static_cast<int>(left));
    if (ready < 0 && errno != EINTR) break;
    // The scan stops once it has seen the `ready` sockets poll reported.
    for (size_t j = 0; ready > 0 && j < pending.size(); ++j) {
      if (pending[j].fd < 0 || pending[j].revents == 0) continue;
      --ready;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(pending[j].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      out[index[j]] = err == 0              ? Knock::kAccepted
                      : err == ECONNREFUSED ? Knock::kRefused
                                            : Knock::kSilent;
      ::close(pending[j].fd);
      pending[j].fd = -1;  // poll skips it from now on
      --open;
    }
  }
  for (const auto& p : pending) {
    if (p.fd >= 0) ::close(p.fd);
  }
  return out;
}

}  // namespace phalanx
