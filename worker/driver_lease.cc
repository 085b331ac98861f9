#include "worker/driver_lease.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace phalanx::worker {
namespace {

// The address of this machine on its route to `gcs_address` ("host:port"): the one the GCS
// can knock on. Empty when it cannot be found (the lease timeout alone then).
std::string LocalAddressToward(const std::string& gcs_address) {
  size_t colon = gcs_address.rfind(':');
  if (colon == std::string::npos) return "";
  std::string host = gcs_address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), gcs_address.substr(colon + 1).c_str(), &hints, &found) != 0) {
    return "";
  }
  std::string local;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof(me);
    char text[INET_ADDRSTRLEN];
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        ::inet_ntop(AF_INET, &me.sin_addr, text, sizeof(text)) != nullptr) {
      local = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return local;
}

}  // namespace

DriverLease::DriverLease(gcs::GcsClient* gcs, std::string owner_id,
                         std::function<std::string()> job_id, const std::string& gcs_address)
    : gcs_(gcs), owner_id_(std::move(owner_id)), job_id_(std::move(job_id)) {
  std::string ip = LocalAddressToward(gcs_address);
  int fd = ip.empty() ? -1 : ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    ::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::listen(fd, 64) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      listen_fd_ = fd;
      knock_address_ = absl::StrCat(ip, ":", ntohs(addr.sin_port));
    } else {
      ::close(fd);
    }
  }
  char host[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(host, sizeof(host) - 1) == 0) hostname_ = host;
  thread_ = std::thread([this] { Run(); });
}

DriverLease::~DriverLease() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

rpc::RenewDriverLeaseRequest DriverLease::Request() {
  rpc::RenewDriverLeaseRequest request;
  request.set_owner_id(owner_id_);
  request.set_job_id(job_id_());
  request.set_knock_address(knock_address_);
  request.set_pid(static_cast<int32_t>(::getpid()));
  request.set_hostname(hostname_);
  return request;
}

void DriverLease::End() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  rpc::RenewDriverLeaseRequest request = Request();
  request.set_release(true);
  gcs_->RenewDriverLease(request).IgnoreError();  // else the GCS finds the port closed
}

void DriverLease::Run() {
  absl::Duration every = absl::Milliseconds(500);
  while (true) {
    // Knocks that came while this process could not run (stopped, starved): taken and closed,
    // so that the queue never fills and a later knock is still answered.
    if (listen_fd_ >= 0) {
      while (true) {
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) break;
        ::close(c);
      }
    }
    auto renewed = gcs_->RenewDriverLease(Request());
    if (renewed.ok() && *renewed > absl::ZeroDuration()) {
      every = *renewed;
    } else if (!renewed.ok()) {
      spdlog::debug("renewing the driver lease: {}", renewed.status().message());
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), every)) return;
  }
}

}  // namespace phalanx::worker
