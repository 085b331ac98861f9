#include "collectives/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/sha256.h"
#include "spdlog/spdlog.h"

namespace phalanx::collective {
namespace {

// Says who is on the other end of a new stream, that it speaks this protocol, and that it
// holds the cluster token: `mac` is HelloMac's HMAC, bound to the epoch's keys and both ends.
constexpr uint32_t kHelloMagic = 0x50484c58;  // "PHLX"

struct Hello {
  uint32_t magic;
  int32_t index;
  char mac[32];
};

std::string HelloMac(const std::string& secret, const std::string& mesh, int from, int to) {
  return HmacSha256(secret, absl::StrCat("phalanx-mesh|", mesh, "|", from, ">", to));
}

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

void Tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Socket buffers stay autotuned: a fixed size measured no faster on loopback, and is capped
  // by net.core.wmem_max (often 208 KiB) while it turns autotuning off.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Milliseconds poll() may wait before `deadline` (rounded up, so it never spins).
int PollMs(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 24 * 3600 * 1000));
}

absl::Status Aborted() { return absl::UnavailableError("aborted (CollectiveGroup::Abort)"); }

// Waits until `fd` has `events` (or abort / deadline).
absl::Status WaitFor(int fd, short events, const AbortSignal& abort, absl::Time deadline,
                     const std::string& what) {
  while (true) {
    if (abort.raised()) return Aborted();
    pollfd p[2] = {{fd, events, 0}, {abort.fd(), POLLIN, 0}};
    int ms = PollMs(deadline);
    int rc = ::poll(p, 2, ms);
    if (rc < 0 && errno != EINTR) return Errno("poll");
    if (abort.raised()) return Aborted();
    if (rc > 0 && p[0].revents != 0) return absl::OkStatus();
    if (ms == 0) return absl::DeadlineExceededError(absl::StrCat("timed out ", what));
  }
}

absl::StatusOr<int> ConnectTo(const std::string& address, const AbortSignal& abort,
                              absl::Time deadline) {
  size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "'"));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Errno("socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    absl::Status s = Errno(absl::StrCat("connecting to ", address));
    ::close(fd);
    return s;
  }
  if (auto s = WaitFor(fd, POLLOUT, abort, deadline, absl::StrCat("connecting to ", address));
      !s.ok()) {
    ::close(fd);
    return s;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    ::close(fd);
    errno = err;
    return Errno(absl::StrCat("connecting to ", address));
  }
  Tune(fd);
  return fd;
}

absl::StatusOr<int> AcceptOne(int listen_fd, const AbortSignal& abort, absl::Time deadline) {
  while (true) {
    if (auto s = WaitFor(listen_fd, POLLIN, abort, deadline, "waiting for a connection"); !s.ok()) {
      return s;
    }
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Tune(fd);
      return fd;
    }
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) return Errno("accept");
  }
}

absl::Status SendHello(int fd, int index, const std::string& mac, const std::string& peer,
                       const AbortSignal& abort, absl::Time deadline) {
  Hello hello{kHelloMagic, index, {}};
  std::memcpy(hello.mac, mac.data(), sizeof(hello.mac));
  std::vector<Transfer> sends = {{fd, reinterpret_cast<uint8_t*>(&hello), sizeof(hello), peer}};
  std::vector<Transfer> none;
  return ExchangeAll(sends, none, abort, deadline);
}

// The index of the member that connected on `fd`; Unauthenticated when the other end is no
// member of this mesh (wrong protocol, index or proof, or silent past kHelloTimeout).
absl::StatusOr<int> ReadHello(int fd, int me, int limit, const std::string& secret,
                              const std::string& mesh, const AbortSignal& abort,
                              absl::Time deadline) {
  Hello hello{};
  std::vector<Transfer> none;
  std::vector<Transfer> recvs = {
      {fd, reinterpret_cast<uint8_t*>(&hello), sizeof(hello), "a connecting member"}};
  absl::Status read =
      ExchangeAll(none, recvs, abort, std::min(deadline, absl::Now() + kHelloTimeout));
  if (!read.ok()) {
    if (abort.raised()) return read;
    return absl::UnauthenticatedError(
        absl::StrCat("a connection sent no hello (", read.message(), ")"));
  }
  if (hello.magic != kHelloMagic || hello.index < 0 || hello.index >= limit || hello.index == me) {
    return absl::UnauthenticatedError("a connection did not speak this protocol");
  }
  if (!ConstantTimeEquals(absl::string_view(hello.mac, sizeof(hello.mac)),
                          HelloMac(secret, mesh, hello.index, me))) {
    return absl::UnauthenticatedError(absl::StrCat(
        "a connection claiming to be member ", hello.index, " did not prove the cluster token"));
  }
  return hello.index;
}

}  // namespace

AbortSignal::AbortSignal() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

AbortSignal::~AbortSignal() {
  if (fd_ >= 0) ::close(fd_);
}

void AbortSignal::Raise() {
  raised_.store(true, std::memory_order_release);
  uint64_t one = 1;
  if (::write(fd_, &one, sizeof(one)) < 0) {
    // The counter is saturated only after 2^64 - 1 writes: it is readable already.
  }
}

absl::Status ExchangeAll(std::vector<Transfer>& sends, std::vector<Transfer>& recvs,
                         const AbortSignal& abort, absl::Time deadline) {
  std::vector<size_t> sent(sends.size(), 0), got(recvs.size(), 0);
  std::vector<pollfd> polls;
  std::vector<int> owner;  // polls[i] belongs to sends[k] (k >= 0) or recvs[-k-1]
  while (true) {
    if (abort.raised()) return Aborted();
    // Move what can move without waiting.
    bool pending = false;
    for (size_t i = 0; i < sends.size(); ++i) {
      Transfer& t = sends[i];
      while (sent[i] < t.len) {
        ssize_t n = ::send(t.fd, t.data + sent[i], t.len - sent[i], MSG_NOSIGNAL);
        if (n > 0) {
          sent[i] += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (abort.raised()) return Aborted();
        return absl::UnavailableError(absl::StrCat(
            "sending to ", t.peer, " failed: ", std::strerror(errno), " (its connection closed)"));
      }
      pending |= sent[i] < t.len;
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      Transfer& t = recvs[i];
      while (got[i] < t.len) {
        ssize_t n = ::recv(t.fd, t.data + got[i], t.len - got[i], 0);
        if (n > 0) {
          got[i] += static_cast<size_t>(n);
          if (t.on_progress) t.on_progress(got[i]);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (abort.raised()) return Aborted();
        return absl::UnavailableError(
            n == 0 ? absl::StrCat("connection to ", t.peer, " closed")
                   : absl::StrCat("receiving from ", t.peer, " failed: ", std::strerror(errno)));
      }
      pending |= got[i] < t.len;
    }
    if (!pending) return absl::OkStatus();
    // Wait for any of them, the abort, or the deadline.
    polls.clear();
    owner.clear();
    polls.push_back({abort.fd(), POLLIN, 0});
    owner.push_back(0);
    for (size_t i = 0; i < sends.size(); ++i) {
      if (sent[i] < sends[i].len) {
        polls.push_back({sends[i].fd, POLLOUT, 0});
        owner.push_back(static_cast<int>(i));
      }
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (got[i] < recvs[i].len) {
        polls.push_back({recvs[i].fd, POLLIN, 0});
        owner.push_back(-static_cast<int>(i) - 1);
      }
    }
    int ms = PollMs(deadline);
    int rc = ::poll(polls.data(), polls.size(), ms);
    if (rc < 0 && errno != EINTR) return Errno("poll");
    if (rc == 0 && ms == 0) {
      std::vector<std::string> waiting;
      for (size_t i = 1; i < polls.size(); ++i) {
        waiting.push_back(owner[i] >= 0
                              ? absl::StrCat("sending to ", sends[owner[i]].peer)
                              : absl::StrCat("receiving from ", recvs[-owner[i] - 1].peer));
      }
      return absl::DeadlineExceededError(
          absl::StrCat("timed out ", absl::StrJoin(waiting, ", "),
                       " (the peer is stopped, unreachable or not making this call)"));
    }
  }
}

absl::StatusOr<int> Listen(const std::string& host, std::string* address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GroupOptions::host '", host, "' is not an IPv4 address"));
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Errno("socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status s = Errno(absl::StrCat("listening on ", host));
    ::close(fd);
    return s;
  }
  *address = absl::StrCat(host, ":", ntohs(addr.sin_port));
  return fd;
}

// ---------------------------------------------------------------------------------------
// TcpMesh

absl::StatusOr<std::unique_ptr<TcpMesh>> TcpMesh::Connect(KvStore* store, const std::string& key,
                                                          int me, int n, const std::string& host,
                                                          std::vector<std::string> names,
                                                          const std::string& secret,
                                                          const AbortSignal* abort,
                                                          absl::Duration timeout) {
  const std::string mesh = store->prefix() + key;
  absl::Time deadline = absl::Now() + timeout;
  std::string address;
  auto listen_fd = Listen(host, &address);
  if (!listen_fd.ok()) return listen_fd.status();
  std::vector<int> fds(n, -1);
  auto fail = [&](absl::Status s) {
    ::close(*listen_fd);
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    return s;
  };
  if (auto s = store->Set(absl::StrCat(key, "/", me), address); !s.ok()) return fail(s);
  // Connect to every lower endpoint (its backlog accepts us even before it calls accept),
  // then accept every higher one: nobody waits on anybody in a cycle.
  for (int i = 0; i < me; ++i) {
    auto there = store->Get(absl::StrCat(key, "/", i), deadline - absl::Now());
    if (!there.ok()) return fail(there.status());
    auto fd = ConnectTo(*there, *abort, deadline);
    if (!fd.ok()) return fail(fd.status());
    fds[i] = *fd;
    if (auto s = SendHello(*fd, me, HelloMac(secret, mesh, me, i), names[i], *abort, deadline);
        !s.ok()) {
      return fail(s);
    }
  }
  // A connection that is no member (a stale client dialing a port this listener now has, a
  // scanner, someone without the token) is closed and the wait goes on.
  for (int accepted = 0; accepted < n - 1 - me;) {
    auto fd = AcceptOne(*listen_fd, *abort, deadline);
    if (!fd.ok()) return fail(fd.status());
    auto index = ReadHello(*fd, me, n, secret, mesh, *abort, deadline);
    if (absl::IsUnauthenticated(index.status())) {
      ::close(*fd);
      spdlog::warn("collective mesh {}: refused a connection: {}", mesh,
                   std::string(index.status().message()));
      continue;
    }
    if (!index.ok() || *index < me || fds[*index] >= 0) {
      ::close(*fd);
      return fail(index.ok() ? absl::UnavailableError("a mesh endpoint connected twice")
                             : index.status());
    }
    fds[*index] = *fd;
    ++accepted;
  }
  ::close(*listen_fd);
  return std::unique_ptr<TcpMesh>(new TcpMesh(me, std::move(fds), std::move(names)));
}

TcpMesh::~TcpMesh() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpMesh::ShutdownAll() {
  for (int fd : fds_) {
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
}

// ---------------------------------------------------------------------------------------
// PeerLinks

PeerLinks::PeerLinks(int me, int listen_fd, std::vector<std::string> addresses,
                     std::vector<std::string> names, std::string secret, std::string mesh,
                     const AbortSignal* abort)
    : me_(me),
      listen_fd_(listen_fd),
      addresses_(std::move(addresses)),
      names_(std::move(names)),
      secret_(std::move(secret)),
      mesh_(std::move(mesh)),
      abort_(abort) {}

PeerLinks::~PeerLinks() {
  ::close(listen_fd_);
  std::lock_guard<std::mutex> lock(fds_mu_);
  for (int fd : all_fds_) ::close(fd);
}

void PeerLinks::ShutdownAll() {
  std::lock_guard<std::mutex> lock(fds_mu_);
  ::shutdown(listen_fd_, SHUT_RDWR);
  for (int fd : all_fds_) ::shutdown(fd, SHUT_RDWR);
}

absl::Status PeerLinks::Send(const void* data, size_t bytes, int dst, absl::Time deadline) {
  auto it = to_.find(dst);
  if (it == to_.end()) {
    auto fd = ConnectTo(addresses_[dst], *abort_, deadline);
    if (!fd.ok()) {
      return absl::UnavailableError(
          absl::StrCat("connecting to ", names_[dst], " failed: ", fd.status().message()));
    }
    {
      std::lock_guard<std::mutex> lock(fds_mu_);
      all_fds_.push_back(*fd);
    }
    it = to_.emplace(dst, *fd).first;
    if (auto s =
            SendHello(*fd, me_, HelloMac(secret_, mesh_, me_, dst), names_[dst], *abort_, deadline);
        !s.ok()) {
      return s;
    }
  }
  // Each message is its length, then its bytes: a mismatched recv is named, not misread.
  uint64_t header = bytes;
  std::vector<Transfer> none;
  std::vector<Transfer> sends = {
      {it->second, reinterpret_cast<uint8_t*>(&header), sizeof(header), names_[dst]}};
  if (auto s = ExchangeAll(sends, none, *abort_, deadline); !s.ok()) return s;
  sends = {{it->second, static_cast<uint8_t*>(const_cast<void*>(data)), bytes, names_[dst]}};
  return ExchangeAll(sends, none, *abort_, deadline);
}

absl::Status PeerLinks::AcceptUntil(int src, absl::Time deadline) {
  while (from_.find(src) == from_.end()) {
    auto fd = AcceptOne(listen_fd_, *abort_, deadline);
    if (!fd.ok()) {
      return absl::Status(fd.status().code(), absl::StrCat("waiting for ", names_[src],
                                                           " to connect: ", fd.status().message()));
    }
    auto index =
        ReadHello(*fd, me_, static_cast<int>(addresses_.size()), secret_, mesh_, *abort_, deadline);
    if (absl::IsUnauthenticated(index.status())) {
      ::close(*fd);
      spdlog::warn("collective links {}: refused a connection: {}", mesh_,
                   std::string(index.status().message()));
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(fds_mu_);
      all_fds_.push_back(*fd);
    }
    if (!index.ok()) return index.status();
    if (from_.count(*index) != 0) {
      return absl::UnavailableError(absl::StrCat(names_[*index], " connected twice"));
    }
    from_[*index] = *fd;
  }
  return absl::OkStatus();
}

absl::Status PeerLinks::Recv(void* data, size_t bytes, int src, absl::Time deadline) {
  if (auto s = AcceptUntil(src, deadline); !s.ok()) return s;
  int fd = from_[src];
  uint64_t header = 0;
  std::vector<Transfer> none;
  std::vector<Transfer> recvs = {
      {fd, reinterpret_cast<uint8_t*>(&header), sizeof(header), names_[src]}};
  if (auto s = ExchangeAll(none, recvs, *abort_, deadline); !s.ok()) return s;
  if (header != bytes) {
    return absl::InternalError(absl::StrCat(names_[src], " sent ", header,
                                            " bytes; this recv expects ", bytes,
                                            " (send and recv must give the same count)"));
  }
  recvs = {{fd, static_cast<uint8_t*>(data), bytes, names_[src]}};
  return ExchangeAll(none, recvs, *abort_, deadline);
}

}  // namespace phalanx::collective
