// snapshot_copy: one side of bench/snapshot_bench.py --crosshost, run inside a network-namespace
// host. Sends a snapshot of --mib MiB to another host's node manager the way a rank's writer
// sends its peer copy (elastic/snapshot_writer.h's PutSnapshot: 1 MiB chunks over gRPC into
// that node's shared-memory store), and, as the peer, the same bytes over one raw TCP stream.
//
//   snapshot_copy put --gcs HOST:PORT --token-file F --to-ip IP --mib 256 [--rate-mbps 0]
//                     [--step N]
//   snapshot_copy tcp-serve --port P          (reads one stream to its end; prints its size)
//   snapshot_copy tcp-send --to IP:PORT --mib 256
//
// Prints "seconds S bytes B" on success.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/tls.h"
#include "client/gcs_client.h"
#include "elastic/snapshot_writer.h"

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "snapshot_copy: %s\n", what.c_str());
  return 1;
}

std::string Bytes(int64_t mib) {
  std::string state(static_cast<size_t>(mib) << 20, '\0');
  for (size_t i = 0; i < state.size(); i += 4096) state[i] = static_cast<char>(i / 4096);
  return state;
}

int Put(const std::string& gcs, const std::string& token_file, const std::string& to_ip,
        int64_t mib, double rate_mbps, int64_t step) {
  auto token = phalanx::ReadFile(token_file);
  if (!token.ok()) return Fail(std::string(token.status().message()));
  std::string t(*token);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  // The cluster's transport security, as every program finds it ($PHALANX_TLS_DIR).
  auto cluster = phalanx::rpc::FindCluster(gcs, t);
  if (!cluster.ok()) return Fail(std::string(cluster.status().message()));
  auto client = phalanx::gcs::GcsClient::Connect({gcs, t});
  if (!client.ok()) return Fail(std::string(client.status().message()));
  auto nodes = (*client)->GetAllNodes(/*alive_only=*/true);
  if (!nodes.ok()) return Fail(std::string(nodes.status().message()));
  std::string address;
  for (const auto& n : *nodes) {
    if (absl::StartsWith(n.address(), to_ip + ":")) address = n.address();
  }
  if (address.empty()) return Fail(absl::StrCat("no live node at ", to_ip));
  std::string state = Bytes(mib);
  absl::Time start = absl::Now();
  auto sent = phalanx::elastic::PutSnapshot(address, t, {"snapshotcopy-bench", step, 1, "bench"},
                                            state, rate_mbps * 1e6);
  double s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!sent.ok()) return Fail(std::string(sent.message()));
  std::printf("seconds %.4f bytes %zu\n", s, state.size());
  return 0;
}

int TcpServe(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = INADDR_ANY;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1) != 0) {
    return Fail(absl::StrCat("cannot listen on port ", port));
  }
  std::printf("listening\n");
  std::fflush(stdout);
  int c = ::accept(fd, nullptr, nullptr);
  std::vector<char> buf(1 << 20);
  int64_t total = 0;
  absl::Time start = absl::Now();
  for (ssize_t n; (n = ::read(c, buf.data(), buf.size())) > 0;) total += n;
  double s = absl::ToDoubleSeconds(absl::Now() - start);
  ::close(c);
  ::close(fd);
  std::printf("seconds %.4f bytes %lld\n", s, static_cast<long long>(total));
  return 0;
}

int TcpSend(const std::string& to, int64_t mib) {
  size_t colon = to.rfind(':');
  if (colon == std::string::npos) return Fail("--to: give IP:PORT");
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(to.substr(colon + 1))));
  ::inet_pton(AF_INET, to.substr(0, colon).c_str(), &addr.sin_addr);
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (absl::Now() > deadline) return Fail(absl::StrCat("cannot connect to ", to));
    ::close(fd);
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::string state = Bytes(mib);
  absl::Time start = absl::Now();
  for (size_t at = 0; at < state.size();) {
    ssize_t n = ::write(fd, state.data() + at, state.size() - at);
    if (n <= 0) return Fail("the stream broke");
    at += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char byte;
  while (::read(fd, &byte, 1) > 0) {
  }
  double s = absl::ToDoubleSeconds(absl::Now() - start);
  ::close(fd);
  std::printf("seconds %.4f bytes %zu\n", s, state.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("one side of snapshot_bench.py --crosshost");
  std::string gcs, token_file, to_ip, to;
  int64_t mib = 256;
  double rate_mbps = 0;
  int port = 0;
  auto* put = app.add_subcommand("put", "send a snapshot to a node manager");
  put->add_option("--gcs", gcs)->required();
  put->add_option("--token-file", token_file)->required();
  put->add_option("--to-ip", to_ip)->required();
  put->add_option("--mib", mib);
  put->add_option("--rate-mbps", rate_mbps);
  int64_t step = 1;
  put->add_option("--step", step, "the snapshot's step (a node refuses one it holds)");
  auto* serve = app.add_subcommand("tcp-serve", "read one TCP stream");
  serve->add_option("--port", port)->required();
  auto* send = app.add_subcommand("tcp-send", "write one TCP stream");
  send->add_option("--to", to)->required();
  send->add_option("--mib", mib);
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  if (*put) return Put(gcs, token_file, to_ip, mib, rate_mbps, step);
  if (*serve) return TcpServe(port);
  return TcpSend(to, mib);
}
