// gRPC helpers shared by every Phalanx service and client: the cluster token, status
// conversion, channels and servers. Internal: include only from .cc files or from headers
// that are themselves internal to a module.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/metrics.h"

namespace phalanx::rpc {

// Metadata key that carries the cluster token on every call.
inline constexpr char kTokenHeader[] = "x-phalanx-token";

// The largest request each kind of server accepts (gRPC's max receive message size). A larger
// one fails with RESOURCE_EXHAUSTED before it is allocated. Control messages (the GCS, node
// managers) are small; an actor call carries its arguments by value, so workers take more.
// Working dirs reach the GCS as a stream of chunks (UploadWorkingDir), not as one message.
inline constexpr int64_t kMaxControlMessageBytes = 64ll << 20;
inline constexpr int64_t kMaxCallMessageBytes = 512ll << 20;
// An elastic job's spec (its YAML text) is at most this large: the CLI reads no more of a
// file (`-f /dev/zero` ends there), and the GCS parses no more (a 10 MB spec grew it by
// 430 MiB). Large data goes in files the trainer reads.
inline constexpr size_t kMaxJobSpecBytes = 256u << 10;

// Puts the token, a deadline of now + `timeout` and wait-for-ready on a client context.
// wait_for_ready makes a call wait (up to its deadline) for a server that is restarting,
// instead of failing at once.
void PrepareContext(grpc::ClientContext* context, const std::string& token, absl::Duration timeout,
                    bool wait_for_ready = true);

// A channel to `address` (host:port) with keepalive pings, so that a peer that vanished is
// noticed within seconds, and unlimited message sizes. TLS when UseTls (tls.h) set it up: the
// server must show a certificate from the cluster's CA, for the cluster's name.
// How long one connection attempt may take: the TCP connect, then the TLS and HTTP/2
// handshakes, which need the peer's process to run. A live process on a busy machine (or
// one stopped for a moment) must not look unreachable, so this is gRPC's own default; a
// closed port (a dead process) is still refused at once, and every call has its deadline.
inline constexpr absl::Duration kConnectTimeout = absl::Seconds(20);
// After a failed attempt the next one starts this soon, backing off to the max (gRPC's
// default grows to 120 s: a restarted server would wait that long for its clients).
inline constexpr absl::Duration kReconnectBackoff = absl::Milliseconds(100);
inline constexpr absl::Duration kMaxReconnectBackoff = absl::Seconds(1);
// An idle connection is pinged this often, and closed when a ping goes this long unanswered
// (the peer's host vanished without closing it).
inline constexpr absl::Duration kKeepaliveTime = absl::Seconds(10);
inline constexpr absl::Duration kKeepaliveTimeout = absl::Seconds(5);

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Converts between gRPC and Abseil status; `what` prefixes the message ("GCS at 1.2.3.4:6380").
absl::Status FromGrpc(const grpc::Status& status, absl::string_view what = "");
grpc::Status ToGrpc(const absl::Status& status);

// Builds and starts a server on `listen_address` (host:port; port 0 picks a free one) with
// `services`. Returns the server and the bound port, or an error naming the address.
//
// The port speaks TLS with this machine's certificate when UseTls set one up.
//
// Every call must carry `token` (kTokenHeader). It is checked on the call's headers, before
// its body is read: a call without it fails with UNAUTHENTICATED and its body is dropped, so
// a peer without the token cannot make the server allocate anything. The handlers need not
// check it again.
struct ServerOptions {
  std::string token;
  int64_t max_receive_bytes = kMaxControlMessageBytes;
  int num_threads = 0;  // 0: gRPC's default
  // Threads of the synchronous server kept waiting for calls once they finished one (gRPC's
  // MAX_POLLERS; 0: its default, 2). A thread finishing a call while as many wait ends, and
  // a call that finds none waiting starts a new one: where handlers block (a GCS write waits
  // for Redis), concurrent calls would pay for a thread each.
  int max_idle_threads = 0;
  // When set, every unary call's latency (from its arrival to its status) is observed into
  // it, keyed by the method's short name ("CreateActor"). Must outlive the server.
  metrics::HistogramFamily* latency = nullptr;
};
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};
absl::StatusOr<StartedServer> StartServer(const std::string& listen_address,
                                          const std::vector<grpc::Service*>& services,
                                          const ServerOptions& options);

// "host:port" → (host, port); error names the field `what`.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view address,
                                                          absl::string_view what = "address");

}  // namespace phalanx::rpc
