#include "runtime/rpc/rpc.h"

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/common/sha256.h"

namespace phalanx::rpc {

grpc::Status CheckToken(const grpc::ServerContext& context, const std::string& token) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kTokenHeader);
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing cluster token: pass --token (or set PHALANX_TOKEN) with the "
                        "token printed by `phalanx start --head`");
  }
  if (!ConstantTimeEquals(absl::string_view(it->second.data(), it->second.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "wrong cluster token: use the token printed by `phalanx start --head` "
                        "(in the head's session dir, file 'token')");
  }
  return grpc::Status::OK;
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
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
  args.SetInt(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
  // Reconnect quickly after a server restart (the default backoff grows to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Each channel gets its own connection, so independent clients do not share one socket.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
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

absl::StatusOr<StartedServer> StartServer(const std::string& listen_address,
                                          const std::vector<grpc::Service*>& services,
                                          int num_threads) {
  grpc::ServerBuilder builder;
  StartedServer started;
  builder.AddListeningPort(listen_address, grpc::InsecureServerCredentials(), &started.port);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Without SO_REUSEPORT two servers could silently share a port; a taken port must fail.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (num_threads > 0) {
    grpc::ResourceQuota quota("phalanx");
    quota.SetMaxThreads(num_threads);
    builder.SetResourceQuota(quota);
  }
  for (grpc::Service* service : services) builder.RegisterService(service);
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
