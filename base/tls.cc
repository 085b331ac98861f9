#include "base/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/rpc.h"
#include "base/sha256.h"

namespace phalanx::rpc {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bignum = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using SslCtx = std::unique_ptr<SSL_CTX, Deleter<SSL_CTX, SSL_CTX_free>>;
using Ssl = std::unique_ptr<SSL, Deleter<SSL, SSL_free>>;

// OpenSSL's queued errors as one line (and the queue emptied).
std::string OpenSslErrors() {
  std::vector<std::string> all;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    all.push_back(buf);
  }
  return all.empty() ? "no detail from OpenSSL" : absl::StrJoin(all, "; ");
}

absl::Status Failed(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", OpenSslErrors()));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return Failed("writing a certificate");
  return BioText(bio.get());
}

absl::StatusOr<Cert> ReadCert(const std::string& pem, const std::string& what) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a PEM certificate"));
  }
  return cert;
}

absl::StatusOr<Key> ReadPrivateKey(const std::string& pem, const std::string& what) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Key key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a PEM private key"));
  }
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return Failed(absl::StrCat("certificate extension ", OBJ_nid2sn(nid)));
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? absl::OkStatus() : Failed("adding a certificate extension");
}

// A certificate for `key`'s public half, valid for `validity`, with a random serial; signed
// by `signer` (issuer `issuer`, or itself when null).
absl::StatusOr<Cert> NewCert(EVP_PKEY* key, const std::string& common_name, absl::Duration validity,
                             X509* issuer) {
  Cert cert(X509_new());
  Bignum serial(BN_new());
  if (!cert || !serial || X509_set_version(cert.get(), 2) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(validity)) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return Failed("making a certificate");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("Phalanx"), -1, -1,
                                 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                 -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name) !=
          1) {
    return Failed("naming a certificate");
  }
  return cert;
}

bool IsHostName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') return false;
  }
  return true;
}

bool IsIp(const std::string& name) {
  in_addr v4;
  in6_addr v6;
  return inet_pton(AF_INET, name.c_str(), &v4) == 1 || inet_pton(AF_INET6, name.c_str(), &v6) == 1;
}

// A connected TCP socket to `address` within `deadline`.
absl::StatusOr<int> Dial(const std::string& address, absl::Time deadline) {
  auto split = SplitHostPort(address);
  if (!split.ok()) return split.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc =
          getaddrinfo(split->first.c_str(), absl::StrCat(split->second).c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", split->first, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> hold(found, freeaddrinfo);
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError("socket() failed");
  if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address));
  }
  pollfd p{fd, POLLOUT, 0};
  int ms =
      static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
  int err = 0;
  socklen_t len = sizeof(err);
  if (::poll(&p, 1, ms) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
      err != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address));
  }
  // The handshake below blocks, bounded by the socket's timeouts.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{};
  absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  tv.tv_sec = absl::ToInt64Seconds(left);
  tv.tv_usec = absl::ToInt64Microseconds(left - absl::Seconds(tv.tv_sec));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

// The certificates a server presents (leaf first), from a handshake that trusts nothing.
// FailedPrecondition when the server does not speak TLS.
absl::StatusOr<std::vector<std::string>> PeerChain(const std::string& address,
                                                   absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  auto fd = Dial(address, deadline);
  if (!fd.ok()) return fd.status();
  SslCtx ctx(SSL_CTX_new(TLS_client_method()));
  Ssl ssl(ctx ? SSL_new(ctx.get()) : nullptr);
  if (!ssl) {
    ::close(*fd);
    return Failed("starting a TLS client");
  }
  SSL_set_verify(ssl.get(), SSL_VERIFY_NONE, nullptr);
  static const unsigned char kAlpn[] = {2, 'h', '2'};  // gRPC's protocol
  SSL_set_alpn_protos(ssl.get(), kAlpn, sizeof(kAlpn));
  SSL_set_tlsext_host_name(ssl.get(), kClusterServerName);
  SSL_set_fd(ssl.get(), *fd);
  int rc = SSL_connect(ssl.get());
  std::vector<std::string> out;
  if (rc == 1) {
    STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl.get());
    for (int i = 0; chain != nullptr && i < sk_X509_num(chain); ++i) {
      auto pem = CertPem(sk_X509_value(chain, i));
      if (pem.ok()) out.push_back(*pem);
    }
    SSL_shutdown(ssl.get());
  }
  ERR_clear_error();
  ::close(*fd);
  if (rc != 1) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no TLS handshake with ", address, " within ",
                                                      absl::FormatDuration(timeout)));
    }
    return absl::FailedPreconditionError(absl::StrCat(address, " does not speak TLS"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> NewPrivateKey() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return Failed("making an EC P-256 key");
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Failed("writing a private key");
  }
  return BioText(bio.get());
}

absl::StatusOr<std::string> PublicKeyOf(const std::string& key_pem) {
  auto key = ReadPrivateKey(key_pem, "the key");
  if (!key.ok()) return key.status();
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), key->get()) != 1) {
    return Failed("writing a public key");
  }
  return BioText(bio.get());
}

absl::StatusOr<KeyAndCert> NewClusterCa(const std::string& cluster_id) {
  KeyAndCert ca;
  auto key_pem = NewPrivateKey();
  if (!key_pem.ok()) return key_pem.status();
  ca.key_pem = *key_pem;
  auto key = ReadPrivateKey(ca.key_pem, "the CA key");
  if (!key.ok()) return key.status();
  auto cert = NewCert(key->get(), absl::StrCat("Phalanx cluster ", cluster_id, " CA"), kCaValidity,
                      nullptr);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  for (auto [nid, value] : {std::pair<int, const char*>{NID_basic_constraints, "critical,CA:TRUE"},
                            {NID_key_usage, "critical,keyCertSign,cRLSign"},
                            {NID_subject_key_identifier, "hash"}}) {
    if (auto s = AddExtension(c, c, nid, value); !s.ok()) return s;
  }
  if (X509_sign(c, key->get(), EVP_sha256()) == 0) return Failed("signing the CA");
  auto pem = CertPem(c);
  if (!pem.ok()) return pem.status();
  ca.cert_pem = *pem;
  return ca;
}

absl::StatusOr<std::string> IssueCertificate(const KeyAndCert& ca,
                                             const std::string& public_key_pem,
                                             const std::vector<std::string>& names) {
  Bio bio(BIO_new_mem_buf(public_key_pem.data(), static_cast<int>(public_key_pem.size())));
  Key key(bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "public_key_pem is not a PEM public key (-----BEGIN PUBLIC KEY-----)");
  }
  std::vector<std::string> alt = {absl::StrCat("DNS:", kClusterServerName), "DNS:localhost",
                                  "IP:127.0.0.1"};
  for (const std::string& name : names) {
    if (name.empty()) continue;
    std::string entry;
    if (IsIp(name)) {
      entry = absl::StrCat("IP:", name);
    } else if (IsHostName(name)) {
      entry = absl::StrCat("DNS:", name);
    }
    if (!entry.empty()) {
      if (std::find(alt.begin(), alt.end(), entry) == alt.end()) alt.push_back(entry);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("name '", name, "' is neither an IP address nor a host name"));
    }
  }
  auto ca_cert = ReadCert(ca.cert_pem, "the CA certificate");
  if (!ca_cert.ok()) return ca_cert.status();
  auto ca_key = ReadPrivateKey(ca.key_pem, "the CA key");
  if (!ca_key.ok()) return ca_key.status();
  std::string common = names.empty() || names[0].empty() ? kClusterServerName : names[0];
  auto cert = NewCert(key.get(), common, kCertValidity, ca_cert->get());
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  for (auto [nid, value] : {std::pair<int, std::string>{NID_basic_constraints, "critical,CA:FALSE"},
                            {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                            {NID_ext_key_usage, "serverAuth,clientAuth"},
                            {NID_subject_key_identifier, "hash"},
                            {NID_authority_key_identifier, "keyid:always"},
                            {NID_subject_alt_name, absl::StrJoin(alt, ",")}}) {
    if (auto s = AddExtension(c, ca_cert->get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(c, ca_key->get(), EVP_sha256()) == 0) return Failed("signing a certificate");
  return CertPem(c);
}

absl::StatusOr<KeyAndCert> LoadClusterCa(const std::string& dir) {
  KeyAndCert ca;
  for (auto [file, text] : {std::pair<const char*, std::string*>{kCaCertFile, &ca.cert_pem},
                            {kCaKeyFile, &ca.key_pem}}) {
    auto read = ReadFile(absl::StrCat(dir, "/", file));
    if (!read.ok()) {
      return absl::NotFoundError(
          absl::StrCat("no ", dir, "/", file, ": give a directory that `phalanx make-ca` wrote"));
    }
    *text = *read;
  }
  auto cert = ReadCert(ca.cert_pem, absl::StrCat(dir, "/", kCaCertFile));
  if (!cert.ok()) return cert.status();
  auto key = ReadPrivateKey(ca.key_pem, absl::StrCat(dir, "/", kCaKeyFile));
  if (!key.ok()) return key.status();
  if (X509_check_ca(cert->get()) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, "/", kCaCertFile, " is not a CA certificate: make one with `phalanx make-ca DIR`"));
  }
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(dir, "/", kCaKeyFile, " is not the key of ", dir,
                                                   "/", kCaCertFile,
                                                   ": give the two files `phalanx make-ca` wrote"));
  }
  return ca;
}

absl::StatusOr<std::string> WriteClusterCa(const std::string& dir, const KeyAndCert& ca) {
  if (auto s = MakeDirs(dir, 0700); !s.ok()) return s;
  for (auto [file, text] :
       {std::pair<const char*, std::string>{kCaCertFile, ca.cert_pem}, {kCaKeyFile, ca.key_pem}}) {
    if (auto s = WriteFile(absl::StrCat(dir, "/", file), text, 0600); !s.ok()) return s;
  }
  return CertFingerprint(ca.cert_pem);
}

absl::StatusOr<std::string> MakeClusterTlsDir(const std::string& dir, const std::string& cluster_id,
                                              const std::vector<std::string>& names,
                                              const KeyAndCert* given_ca) {
  absl::StatusOr<KeyAndCert> ca = given_ca ? *given_ca : NewClusterCa(cluster_id);
  if (!ca.ok()) return ca.status();
  auto fingerprint = WriteClusterCa(dir, *ca);
  if (!fingerprint.ok()) return fingerprint.status();
  auto key = NewPrivateKey();
  if (!key.ok()) return key.status();
  auto public_key = PublicKeyOf(*key);
  if (!public_key.ok()) return public_key.status();
  auto cert = IssueCertificate(*ca, *public_key, names);
  if (!cert.ok()) return cert.status();
  for (auto [file, text] :
       {std::pair<const char*, std::string>{kKeyFile, *key}, {kCertFile, *cert + ca->cert_pem}}) {
    if (auto s = WriteFile(absl::StrCat(dir, "/", file), text, 0600); !s.ok()) return s;
  }
  return fingerprint;
}

std::vector<std::string> MachineNames(const std::string& node_ip) {
  std::vector<std::string> names = {node_ip};
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) == 0 && IsHostName(host)) names.push_back(host);
  return names;
}

absl::StatusOr<std::string> CertFingerprint(const std::string& cert_pem) {
  auto cert = ReadCert(cert_pem, "the certificate");
  if (!cert.ok()) return cert.status();
  unsigned char* der = nullptr;
  int n = i2d_X509(cert->get(), &der);
  if (n <= 0) return Failed("encoding a certificate");
  std::string hex = Sha256Hex(absl::string_view(reinterpret_cast<char*>(der), n));
  OPENSSL_free(der);
  return hex;
}

absl::StatusOr<std::string> FetchCaByFingerprint(const std::string& address,
                                                 const std::string& fingerprint,
                                                 absl::Duration timeout) {
  std::string want = absl::AsciiStrToLower(fingerprint);
  auto chain = PeerChain(address, timeout);
  if (!chain.ok()) return chain.status();
  for (const std::string& pem : *chain) {
    auto print = CertFingerprint(pem);
    if (print.ok() && ConstantTimeEquals(*print, want)) return pem;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "the server at ", address, " presented no CA with fingerprint ", fingerprint,
      ": check --ca-fingerprint against the join command `phalanx start --head` printed (a "
      "server that is not the cluster's head cannot show its CA)"));
}

absl::StatusOr<bool> SpeaksTls(const std::string& address, absl::Duration timeout) {
  auto chain = PeerChain(address, timeout);
  if (absl::IsFailedPrecondition(chain.status())) return false;
  if (!chain.ok()) return chain.status();
  return true;
}

}  // namespace phalanx::rpc
