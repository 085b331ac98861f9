// The cluster's TLS material: a CA made by `phalanx start --head`, a certificate per machine
// signed by it, and the SHA-256 fingerprint a joining machine checks the CA against. All of
// it as PEM text; OpenSSL stays inside tls.cc.
//
// Every certificate names the cluster (DNS "phalanx", kClusterServerName) rather than a host:
// channels verify a server as "holds a certificate from this cluster's CA", whatever address
// reached it (an IP that changed, a NAT, a network namespace). Only the head holds the CA's
// key, and it signs only for callers that present the cluster token.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/session.h"

namespace phalanx::rpc {

// The name every cluster certificate carries, and that channels verify.
inline constexpr char kClusterServerName[] = "phalanx";
// How long a certificate made here stays valid.
inline constexpr absl::Duration kCaValidity = absl::Hours(24 * 3650);
inline constexpr absl::Duration kCertValidity = absl::Hours(24 * 825);
// The bound on fetching a server's certificate chain (FetchCaByFingerprint).
inline constexpr absl::Duration kCaFetchTimeout = absl::Seconds(10);

// Files under a TLS dir (<session>/tls).
inline constexpr char kCaCertFile[] = "ca.pem";  // the cluster CA's certificate
inline constexpr char kCaKeyFile[] = "ca.key";   // its key: the head only
inline constexpr char kCertFile[] = "node.pem";  // this machine's certificate, then the CA's
inline constexpr char kKeyFile[] = "node.key";   // this machine's key

struct KeyAndCert {
  std::string key_pem;
  std::string cert_pem;
};

// A new EC P-256 key (PEM, PKCS#8) and its public half (PEM).
absl::StatusOr<std::string> NewPrivateKey();
absl::StatusOr<std::string> PublicKeyOf(const std::string& key_pem);

// A new self-signed CA for cluster `cluster_id`.
absl::StatusOr<KeyAndCert> NewClusterCa(const std::string& cluster_id);

// A certificate for `public_key_pem` signed by `ca`: for kClusterServerName, localhost,
// 127.0.0.1, and `names` (IP addresses or host names of the machine). Errors name the bad
// input (a key that is not a PEM public key, a name that is neither an IP nor a host name).
absl::StatusOr<std::string> IssueCertificate(const KeyAndCert& ca,
                                             const std::string& public_key_pem,
                                             const std::vector<std::string>& names);

// The CA in `dir` (kCaCertFile and kCaKeyFile, as `phalanx make-ca` writes them), checked: the
// certificate is a CA and the key is its own. Errors name the file and what to do.
absl::StatusOr<KeyAndCert> LoadClusterCa(const std::string& dir);

// Writes `ca` into `dir` (mode 0700; files 0600) and returns its fingerprint.
absl::StatusOr<std::string> WriteClusterCa(const std::string& dir, const KeyAndCert& ca);

// Makes `dir` (mode 0700) a new cluster's TLS dir, as `phalanx start --head` has it: the CA
// (`ca`, or a new one for `cluster_id`), and this machine's key and a certificate for `names`
// from that CA (files 0600). Returns the CA's fingerprint.
absl::StatusOr<std::string> MakeClusterTlsDir(const std::string& dir, const std::string& cluster_id,
                                              const std::vector<std::string>& names,
                                              const KeyAndCert* ca = nullptr);

// The names a machine's certificate carries besides the cluster's: its IP `node_ip` and its
// host name, when that is a valid DNS name (one with '_', say, is left out, not refused).
std::vector<std::string> MachineNames(const std::string& node_ip);

// The SHA-256 of a certificate's DER encoding, as 64 lowercase hex characters.
absl::StatusOr<std::string> CertFingerprint(const std::string& cert_pem);

// Opens a TLS connection to `address` (host:port) without trusting anything yet, and returns
// the certificate in the chain the server presents whose fingerprint is `fingerprint` (PEM).
// How a joining machine learns the cluster's CA: the head prints the fingerprint in its join
// command, so a server that is not the cluster's cannot pass off another CA.
absl::StatusOr<std::string> FetchCaByFingerprint(const std::string& address,
                                                 const std::string& fingerprint,
                                                 absl::Duration timeout = kCaFetchTimeout);

// Transport security for every channel and server this process makes: TLS with the cluster's
// CA and this machine's certificate (rpc/tls.h), or none. Set once at start-up, before the
// first channel or server: by each daemon from its --tls-dir, by clients through
// FindCluster. `tls_dir` holds ca.pem (channels trust only it) and, for servers, node.pem
// and node.key. Empty: plaintext (a cluster started with --no-tls).
absl::Status UseTls(const std::string& tls_dir);
// True once UseTls loaded a CA.
bool TlsEnabled();

// Where the cluster is (ResolveCluster: --address, $PHALANX_ADDRESS, the latest session; the
// token likewise), and its transport security, which this process then uses (UseTls): the
// TLS dir in $PHALANX_TLS_DIR, or the one of a local session of that cluster.
absl::StatusOr<ClusterAddress> FindCluster(const std::string& address_flag,
                                           const std::string& token_flag);

// Whether the server at `address` speaks TLS at all (a cluster started with --no-tls does
// not); an error when it cannot be reached.
absl::StatusOr<bool> SpeaksTls(const std::string& address,
                               absl::Duration timeout = kCaFetchTimeout);

}  // namespace phalanx::rpc
