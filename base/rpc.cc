#include "base/rpc.h"

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <openssl/crypto.h>

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "base/sha256.h"
#include "base/tls.h"

namespace phalanx::rpc {

namespace {

constexpr char kMissingToken[] =
    "missing cluster token: pass --token (or set PHALANX_TOKEN) with the token printed by "
    "`phalanx start --head`";
constexpr char kWrongToken[] =
    "wrong cluster token: use the token printed by `phalanx start --head` (in the head's "
    "session dir, file 'token')";

// OpenSSL frees its global state in an atexit handler, while gRPC's threads may still be
// using it as a process exits (a TLS channel's handshake or shutdown): the two race, and
// `phalanx start` was seen aborting with "double free or corruption" after its work was done.
// Nothing needs that cleanup at exit, so it is turned off before OpenSSL is first used (this
// file is in every program that makes a channel or a server).
[[maybe_unused]] const bool kOpenSslCleanupAtExitOff = [] {
  return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
}();

// This process's transport security (UseTls).
struct Tls {
  std::string ca_pem;          // empty: plaintext
  std::string cert_chain_pem;  // this machine's certificate, then the CA's
  std::string key_pem;
  std::string dir;
};
absl::Mutex tls_mu;
Tls& ProcessTls() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tls_mu) {
  static Tls* tls = new Tls;
  return *tls;
}
Tls CurrentTls() {
  absl::MutexLock lock(&tls_mu);
  return ProcessTls();
}

// gRPC core's auth metadata processor: runs on a call's headers, before the server reads the
// call's body or hands it to a handler. `state` is the token (a heap string it owns).
void CheckTokenMetadata(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                        size_t num_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
  const auto* token = static_cast<const std::string*>(state);
  const char* error = kMissingToken;
  for (size_t i = 0; i < num_md; ++i) {
    if (grpc_slice_str_cmp(md[i].key, kTokenHeader) != 0) continue;
    absl::string_view value(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
                            GRPC_SLICE_LENGTH(md[i].value));
    error = ConstantTimeEquals(value, *token) ? nullptr : kWrongToken;
    break;
  }
  if (error == nullptr) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, error);
  }
}

// Server credentials whose ports check the cluster token on every call's headers (above),
// over TLS with this machine's certificate or over plaintext. gRPC's C++ server credentials
// refuse a metadata processor, so the port is added through the core API, where the
// processor works with any transport security.
class TokenServerCredentials final : public grpc::ServerCredentials {
 public:
  TokenServerCredentials(std::string token, Tls tls)
      : token_(std::move(token)), tls_(std::move(tls)) {}

  // The token check above is this class's processor; nothing in Phalanx sets another.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    grpc_server_credentials* credentials = nullptr;
    if (tls_.ca_pem.empty()) {
      credentials = grpc_insecure_server_credentials_create();
    } else {
      // No client certificates: callers prove themselves with the token, and need only the
      // CA to check who they talk to.
      grpc_ssl_pem_key_cert_pair pair{tls_.key_pem.c_str(), tls_.cert_chain_pem.c_str()};
      credentials = grpc_ssl_server_credentials_create_ex(
          nullptr, &pair, 1, GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, nullptr);
      if (credentials == nullptr) return 0;
    }
    grpc_auth_metadata_processor processor{
        &CheckTokenMetadata, [](void* state) { delete static_cast<std::string*>(state); },
        new std::string(token_)};
    grpc_server_credentials_set_auth_metadata_processor(credentials, processor);
    int port = grpc_server_add_http2_port(server, address.c_str(), credentials);
    grpc_server_credentials_release(credentials);
    return port;
  }

  const std::string token_;
  const Tls tls_;
};

}  // namespace

absl::Status UseTls(const std::string& tls_dir) {
  Tls tls;
  tls.dir = tls_dir;
  if (!tls_dir.empty()) {
    auto ca = ReadFile(absl::StrCat(tls_dir, "/", kCaCertFile));
    if (!ca.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "TLS dir ", tls_dir, " has no ", kCaCertFile,
          " (the cluster's CA): point $PHALANX_TLS_DIR or --tls-dir at a dir holding the "
          "head's <session>/tls/ca.pem, or join the machine with `phalanx start --address`"));
    }
    tls.ca_pem = *ca;
    auto cert = ReadFile(absl::StrCat(tls_dir, "/", kCertFile));
    auto key = ReadFile(absl::StrCat(tls_dir, "/", kKeyFile));
    if (cert.ok() && key.ok()) {
      tls.cert_chain_pem = *cert;
      tls.key_pem = *key;
    }
  }
  absl::MutexLock lock(&tls_mu);
  ProcessTls() = std::move(tls);
  return absl::OkStatus();
}

bool TlsEnabled() { return !CurrentTls().ca_pem.empty(); }

absl::StatusOr<ClusterAddress> FindCluster(const std::string& address_flag,
                                           const std::string& token_flag) {
  auto cluster = ResolveCluster(address_flag, token_flag);
  if (!cluster.ok()) return cluster.status();
  if (auto s = UseTls(cluster->tls_dir); !s.ok()) return s;
  return cluster;
}

void PrepareContext(grpc::ClientContext* context, const std::string& token, absl::Duration timeout,
                    bool wait_for_ready) {
  if (!token.empty()) context->AddMetadata(kTokenHeader, token);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(absl::ToInt64Microseconds(timeout)));
  context->set_wait_for_ready(wait_for_ready);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, absl::ToInt64Milliseconds(kKeepaliveTime));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, absl::ToInt64Milliseconds(kKeepaliveTimeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
  args.SetInt(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
  // Reconnect quickly after a server restart (the default backoff grows to 120 s). gRPC takes
  // its "min reconnect backoff" as the least time a connection attempt gets: at 100 ms a
  // handshake with a process that a busy machine had not run for 100 ms failed, and the
  // calls waiting on it with "lost the connection".
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, absl::ToInt64Milliseconds(kReconnectBackoff));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, absl::ToInt64Milliseconds(kConnectTimeout));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, absl::ToInt64Milliseconds(kMaxReconnectBackoff));
  // Each channel gets its own connection, so independent clients do not share one socket.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  Tls tls = CurrentTls();
  if (tls.ca_pem.empty()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  // Every cluster certificate is for the cluster's name (rpc/tls.h), whatever the address.
  args.SetSslTargetNameOverride(kClusterServerName);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.ca_pem;
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  std::string message =
      what.empty() ? status.error_message() : absl::StrCat(what, ": ", status.error_message());
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

namespace {

// Times each unary call of a server into a HistogramFamily by method.
class LatencyInterceptor final : public grpc::experimental::Interceptor {
 public:
  LatencyInterceptor(std::string method, metrics::HistogramFamily* latency)
      : method_(std::move(method)), latency_(latency), start_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      latency_->Observe(method_, absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  metrics::HistogramFamily* const latency_;
  const absl::Time start_;
};

class LatencyInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit LatencyInterceptorFactory(metrics::HistogramFamily* latency) : latency_(latency) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // Streams (subscriptions, log follows) last as long as their reader: not a latency.
    if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) return nullptr;
    absl::string_view method = info->method();
    method = method.substr(method.rfind('/') + 1);
    return new LatencyInterceptor(std::string(method), latency_);
  }

 private:
  metrics::HistogramFamily* const latency_;
};

}  // namespace

absl::StatusOr<StartedServer> StartServer(const std::string& listen_address,
                                          const std::vector<grpc::Service*>& services,
                                          const ServerOptions& options) {
  if (options.token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("server on ", listen_address, ": no cluster token (every server needs one)"));
  }
  Tls tls = CurrentTls();
  if (!tls.ca_pem.empty() && (tls.cert_chain_pem.empty() || tls.key_pem.empty())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server on ", listen_address, ": TLS dir ", tls.dir, " has the CA but no ", kCertFile,
        " and ", kKeyFile, " for this machine (`phalanx start` makes them)"));
  }
  grpc::ServerBuilder builder;
  StartedServer started;
  builder.AddListeningPort(listen_address,
                           std::make_shared<TokenServerCredentials>(options.token, std::move(tls)),
                           &started.port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_receive_bytes));
  builder.SetMaxSendMessageSize(-1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTime)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTimeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Without SO_REUSEPORT two servers could silently share a port; a taken port must fail.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (options.num_threads > 0) {
    grpc::ResourceQuota quota("phalanx");
    quota.SetMaxThreads(options.num_threads);
    builder.SetResourceQuota(quota);
  }
  if (options.max_idle_threads > 0) {
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                                options.max_idle_threads);
  }
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (options.latency != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
    factories.push_back(std::make_unique<LatencyInterceptorFactory>(options.latency));
    builder.experimental().SetInterceptorCreators(std::move(factories));
  }
  started.server = builder.BuildAndStart();
  if (!started.server || started.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen_address, ": the port is in use or not allowed"));
  }
  return started;
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view address,
                                                          absl::string_view what) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", address, "' is not HOST:PORT (for example 10.0.0.1:6380)"));
  }
  return std::make_pair(std::string(address.substr(0, colon)), port);
}

}  // namespace phalanx::rpc
