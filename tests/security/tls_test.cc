// TLS by default, with real daemons started by `phalanx start`: the head's CA and
// certificates are private files, the token never crosses the wire in clear (a relay between
// `phalanx status` and the GCS records every byte), plaintext clients and clients trusting
// another CA get nowhere, and a joining machine checks the CA's fingerprint before it trusts
// the cluster, then gets a certificate of its own. --no-tls is the control: the same relay
// sees the token.
#include "base/tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "base/system.h"
#include "client/gcs_client.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

using testing::CommandResult;
using testing::RunCommand;

// A TCP relay on loopback to `upstream_port` that keeps every byte it passes, both ways.
class RecordingRelay {
 public:
  explicit RecordingRelay(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 16);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~RecordingRelay() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }

  int port() const { return port_; }
  std::string Seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  void Run() {
    std::vector<std::pair<int, int>> pairs;  // (client, upstream)
    while (!stop_) {
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (auto [a, b] : pairs) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        int client = ::accept(listen_fd_, nullptr, nullptr);
        int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (client >= 0 &&
            ::connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
          pairs.emplace_back(client, upstream);
        } else {
          if (client >= 0) ::close(client);
          ::close(upstream);
        }
      }
      std::vector<std::pair<int, int>> open;
      for (size_t i = 0; i < pairs.size(); ++i) {
        bool closed = false;
        for (int side = 0; side < 2; ++side) {
          if (!(fds[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          int from = side == 0 ? pairs[i].first : pairs[i].second;
          int to = side == 0 ? pairs[i].second : pairs[i].first;
          char buf[65536];
          ssize_t n = ::read(from, buf, sizeof(buf));
          if (n <= 0 || ::write(to, buf, n) != n) {
            closed = true;
            break;
          }
          absl::MutexLock lock(&mu_);
          seen_.append(buf, n);
        }
        if (closed) {
          ::close(pairs[i].first);
          ::close(pairs[i].second);
        } else {
          open.push_back(pairs[i]);
        }
      }
      pairs = std::move(open);
    }
    for (auto [a, b] : pairs) {
      ::close(a);
      ::close(b);
    }
  }

  int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::string seen_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class TlsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const auto& root : {head_root_.path(), join_root_.path()}) {
      Phalanx({"stop", "--force"}, root);
      EXPECT_TRUE(testing::FindProcesses(root).empty());
    }
    rpc::UseTls("").IgnoreError();
  }

  CommandResult Phalanx(std::vector<std::string> args, const std::string& root,
                        std::vector<std::pair<std::string, std::string>> env = {}) {
    args.insert(args.begin(), testing::BinDir() + "/phalanx");
    env.emplace_back("PHALANX_TMPDIR", root);
    env.emplace_back("PHALANX_ADDRESS", "");
    env.emplace_back("PHALANX_TOKEN", "");
    env.emplace_back("PHALANX_TLS_DIR", "");
    return RunCommand(args, env, absl::Seconds(60));
  }

  // Starts the head; returns its output.
  std::string StartHead(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "start",     "--head",     "--port", absl::StrCat(port_), "--node-ip-address",
        "127.0.0.1", "--num-cpus", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto head = Phalanx(args, head_root_.path());
    EXPECT_EQ(head.exit_code, 0) << head.output;
    session_ = LatestSession(head_root_.path());
    token_ = std::string(absl::StripAsciiWhitespace(ReadFile(session_ + "/token").value_or("")));
    return head.output;
  }

  static std::string LatestSession(const std::string& root) {
    char buf[4096];
    ssize_t n = ::readlink((root + "/session_latest").c_str(), buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

  std::string Fingerprint() {
    auto ca = ReadFile(session_ + "/tls/ca.pem");
    return ca.ok() ? rpc::CertFingerprint(*ca).value_or("") : "";
  }

  testing::TempDir head_root_, join_root_;
  int port_ = FreePort();
  std::string session_, token_;
};

TEST_F(TlsTest, TheTokenNeverCrossesTheWireInClearAndStrangersGetNowhere) {
  std::string out = StartHead();
  ASSERT_FALSE(session_.empty());
  std::string fingerprint = Fingerprint();
  ASSERT_EQ(fingerprint.size(), 64u);
  EXPECT_TRUE(absl::StrContains(out, absl::StrCat("--ca-fingerprint ", fingerprint))) << out;
  // The CA, its key and the machine's key and certificate: the owner's alone.
  struct stat st {};
  ASSERT_EQ(::stat((session_ + "/tls").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const char* file : {"ca.pem", "ca.key", "node.pem", "node.key"}) {
    ASSERT_EQ(::stat(absl::StrCat(session_, "/tls/", file).c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << file;
  }

  // `phalanx status` through a relay that records every byte: it works, and the token is
  // nowhere in what crossed the wire.
  RecordingRelay relay(port_);
  auto status =
      Phalanx({"status", "--address", absl::StrCat("127.0.0.1:", relay.port()), "--token", token_},
              join_root_.path(), {{"PHALANX_TLS_DIR", session_ + "/tls"}});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(absl::StrContains(status.output, "TLS: on, CA fingerprint " + fingerprint))
      << status.output;
  std::string seen = relay.Seen();
  EXPECT_GT(seen.size(), 1000u);
  EXPECT_FALSE(absl::StrContains(seen, token_));
  EXPECT_FALSE(absl::StrContains(seen, "x-phalanx-token"));
  std::printf("relay passed %zu bytes; the token is not among them\n", seen.size());

  // A plaintext client, and a TLS client that trusts another CA: neither gets an answer.
  std::string address = absl::StrCat("127.0.0.1:", port_);
  ASSERT_TRUE(rpc::UseTls("").ok());
  auto plain = gcs::GcsClient::Connect({address, token_}, absl::Seconds(2));
  EXPECT_FALSE(plain.ok());
  testing::TempDir other;
  auto other_ca = rpc::NewClusterCa("other");
  ASSERT_TRUE(other_ca.ok()) << other_ca.status();
  ASSERT_TRUE(WriteFile(other.path() + "/ca.pem", other_ca->cert_pem).ok());
  ASSERT_TRUE(rpc::UseTls(other.path()).ok());
  auto impostor = gcs::GcsClient::Connect({address, token_}, absl::Seconds(2));
  EXPECT_FALSE(impostor.ok());
  // The cluster's own CA: an answer.
  ASSERT_TRUE(rpc::UseTls(session_ + "/tls").ok());
  auto trusted = gcs::GcsClient::Connect({address, token_}, absl::Seconds(10));
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  // Bad input to IssueCertificate is named, and signs nothing.
  auto bad = (*trusted)->IssueCertificate("not a key", {"10.0.0.9"});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "public_key_pem")) << bad.status();
  auto key = rpc::NewPrivateKey();
  ASSERT_TRUE(key.ok());
  auto bad_name = (*trusted)->IssueCertificate(*rpc::PublicKeyOf(*key), {"no spaces allowed"});
  EXPECT_TRUE(absl::IsInvalidArgument(bad_name.status())) << bad_name.status();
}

TEST_F(TlsTest, NoTlsIsPlaintextAndSaysSo) {
  std::string out = StartHead({"--no-tls"});
  EXPECT_TRUE(absl::StrContains(out, "WARNING: --no-tls")) << out;
  EXPECT_TRUE(absl::StrContains(out, "--no-tls\n")) << out;  // in the join command
  EXPECT_FALSE(PathExists(session_ + "/tls"));
  RecordingRelay relay(port_);
  auto status =
      Phalanx({"status", "--address", absl::StrCat("127.0.0.1:", relay.port()), "--token", token_},
              join_root_.path());
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(absl::StrContains(status.output, "TLS: off")) << status.output;
  // The control for the test above: without TLS the relay does see the token.
  EXPECT_TRUE(absl::StrContains(relay.Seen(), token_));
  // Joining it needs --no-tls too.
  auto join = Phalanx({"start", "--address", absl::StrCat("127.0.0.1:", port_), "--token", token_,
                       "--num-cpus", "1"},
                      join_root_.path());
  EXPECT_EQ(join.exit_code, 1) << join.output;
  EXPECT_TRUE(absl::StrContains(join.output, "does not speak TLS")) << join.output;
}

TEST_F(TlsTest, AJoiningMachineChecksTheCaFingerprintAndGetsItsOwnCertificate) {
  StartHead();
  std::string fingerprint = Fingerprint();
  std::string address = absl::StrCat("127.0.0.1:", port_);
  // join_root_ holds no session of this cluster: the fingerprint is all it can go by.
  std::vector<std::string> join = {"start", "--address",  address, "--token",
                                   token_,  "--num-cpus", "1"};
  auto without = Phalanx(join, join_root_.path());
  EXPECT_EQ(without.exit_code, 1) << without.output;
  EXPECT_TRUE(absl::StrContains(without.output, "pass --ca-fingerprint")) << without.output;
  auto wrong_args = join;
  wrong_args.insert(wrong_args.end(), {"--ca-fingerprint", std::string(64, 'a')});
  auto wrong = Phalanx(wrong_args, join_root_.path());
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_TRUE(absl::StrContains(wrong.output, "presented no CA with fingerprint")) << wrong.output;
  auto plain_args = join;
  plain_args.push_back("--no-tls");
  auto plain = Phalanx(plain_args, join_root_.path());
  EXPECT_EQ(plain.exit_code, 1) << plain.output;
  EXPECT_TRUE(absl::StrContains(plain.output, "speaks TLS")) << plain.output;
  // Nothing was left running or half-made by the refused joins.
  EXPECT_TRUE(testing::FindProcesses(join_root_.path()).empty());

  auto right_args = join;
  right_args.insert(right_args.end(), {"--ca-fingerprint", fingerprint});
  auto joined = Phalanx(right_args, join_root_.path());
  ASSERT_EQ(joined.exit_code, 0) << joined.output;
  std::string tls = LatestSession(join_root_.path()) + "/tls";
  // Its own key, a certificate for it from the cluster's CA, and no CA key.
  EXPECT_EQ(*ReadFile(tls + "/ca.pem"), *ReadFile(session_ + "/tls/ca.pem"));
  EXPECT_NE(*ReadFile(tls + "/node.key"), *ReadFile(session_ + "/tls/node.key"));
  EXPECT_FALSE(PathExists(tls + "/ca.key"));
  auto chain = ReadFile(tls + "/node.pem");
  ASSERT_TRUE(chain.ok());
  EXPECT_NE(*rpc::CertFingerprint(*chain),
            *rpc::CertFingerprint(*ReadFile(session_ + "/tls/node.pem")));
  // Both nodes serve over TLS and the cluster sees them.
  auto status = Phalanx({"status"}, head_root_.path());
  EXPECT_TRUE(absl::StrContains(status.output, "Nodes: 2 alive")) << status.output;
}

}  // namespace
}  // namespace phalanx
