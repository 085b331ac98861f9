// TCP streams for collectives that cross machines (internal): nonblocking sockets, every wait
// a poll() on the sockets plus an eventfd that Abort() writes, so a call in flight ends at
// once on Abort, at its deadline, or as soon as a peer's connection closes — never later,
// even when the peer vanished without a FIN or RST (a host whose link went down).
//
// TcpMesh connects `n` endpoints (the leaders of the machines of a group) with one stream per
// pair, eagerly. PeerLinks opens streams between any two members lazily, on their first
// send/recv. Not thread-safe, except Abort(), which any thread may call at any time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/kv_store.h"

namespace phalanx::collective {

// How long an accepted connection has to send its hello (who it is, and its proof of the
// token) before it is taken for a stranger and closed.
inline constexpr absl::Duration kHelloTimeout = absl::Seconds(5);

// An eventfd shared by every stream of one backend: once written, every wait fails at once
// (and keeps failing: an aborted epoch is never used again).
class AbortSignal {
 public:
  AbortSignal();
  ~AbortSignal();
  AbortSignal(const AbortSignal&) = delete;
  AbortSignal& operator=(const AbortSignal&) = delete;

  void Raise();
  bool raised() const { return raised_.load(std::memory_order_acquire); }
  int fd() const { return fd_; }

 private:
  int fd_;
  std::atomic<bool> raised_{false};
};

// One transfer of a full-duplex exchange: `len` bytes to send on, or receive from, `fd`.
// `on_progress(bytes so far)` runs after each read that made progress (to reduce what has
// arrived while the rest is still on its way).
struct Transfer {
  Transfer(int fd, uint8_t* data, size_t len, std::string peer,
           std::function<void(size_t)> on_progress = nullptr)
      : fd(fd), data(data), len(len), peer(std::move(peer)), on_progress(std::move(on_progress)) {}
  int fd;
  uint8_t* data;
  size_t len;
  std::string peer;  // names the peer in errors ("peer rank 2 (machine hB)")
  std::function<void(size_t)> on_progress;
};

// Moves every send and every receive to completion concurrently (poll on all of them, the
// abort eventfd and the deadline). Errors: Unavailable naming the peer whose connection
// closed or failed, or "aborted"; DeadlineExceeded naming the peers still pending.
absl::Status ExchangeAll(std::vector<Transfer>& sends, std::vector<Transfer>& recvs,
                         const AbortSignal& abort, absl::Time deadline);

// A listening socket on `host` (port chosen by the kernel); "host:port" in *address.
absl::StatusOr<int> Listen(const std::string& host, std::string* address);

class TcpMesh {
 public:
  // Endpoint `me` of `n`: publishes its address under `key` + "/<i>" in `store`, connects to
  // every lower endpoint and accepts every higher one. `names[i]` names endpoint i in errors.
  // Each stream opens with a hello proving `secret` (the cluster token) for this mesh and
  // these two ends; a connection that does not is closed, and the wait goes on.
  static absl::StatusOr<std::unique_ptr<TcpMesh>> Connect(KvStore* store, const std::string& key,
                                                          int me, int n, const std::string& host,
                                                          std::vector<std::string> names,
                                                          const std::string& secret,
                                                          const AbortSignal* abort,
                                                          absl::Duration timeout);
  ~TcpMesh();
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  int fd(int peer) const { return fds_[peer]; }
  const std::string& name(int peer) const { return names_[peer]; }
  int me() const { return me_; }
  int size() const { return static_cast<int>(fds_.size()); }

  // Shuts every stream down (peers blocked on this endpoint see the close at once). Safe
  // from any thread: the descriptors stay open until destruction.
  void ShutdownAll();

 private:
  TcpMesh(int me, std::vector<int> fds, std::vector<std::string> names)
      : me_(me), fds_(std::move(fds)), names_(std::move(names)) {}

  int me_;
  std::vector<int> fds_;  // -1 for me
  std::vector<std::string> names_;
};

// Streams between any two members for send/recv, opened on first use: the sender connects
// to the receiver's listening socket and says who it is; each direction has its own stream.
class PeerLinks {
 public:
  // `addresses[r]`: member r's listening address; `listen_fd`: ours (owned). Each stream opens
  // with a hello proving `secret` for `mesh` (a name unique to the epoch) and its two ends; a
  // connection that does not is closed, and the wait goes on.
  PeerLinks(int me, int listen_fd, std::vector<std::string> addresses,
            std::vector<std::string> names, std::string secret, std::string mesh,
            const AbortSignal* abort);
  ~PeerLinks();
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  absl::Status Send(const void* data, size_t bytes, int dst, absl::Time deadline);
  absl::Status Recv(void* data, size_t bytes, int src, absl::Time deadline);
  void ShutdownAll();  // as TcpMesh::ShutdownAll

 private:
  absl::Status AcceptUntil(int src, absl::Time deadline);

  const int me_;
  const int listen_fd_;
  const std::vector<std::string> addresses_;
  const std::vector<std::string> names_;
  const std::string secret_;
  const std::string mesh_;
  const AbortSignal* abort_;
  std::map<int, int> to_;    // rank → stream we send on
  std::map<int, int> from_;  // rank → stream we receive on
  std::mutex fds_mu_;        // all_fds_ is read by ShutdownAll from another thread
  std::vector<int> all_fds_;
};

}  // namespace phalanx::collective
