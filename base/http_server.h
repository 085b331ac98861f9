// HttpServer: the HTTP(S) port of a Phalanx process (the head's dashboard, /metrics and /api;
// each node manager's /metrics), protected by the cluster token.
//
// A request is let in when it carries
//   - `Authorization: Bearer <token>` (Prometheus, curl, scripts), or
//   - the session cookie that POST /login (a form field `token`) sets for a browser.
// Anything else gets 401 on every path: a browser (Accept: text/html) gets the login page as
// the body, other clients a one-line JSON error. The one exception is GET /healthz, which
// answers "ok" to anyone while the process serves (for probes: Kubernetes, load balancers);
// it tells nothing about the cluster.
//
// HTTPS when a certificate and key are given (the machine's, signed by the cluster CA: see
// tls.h), plain HTTP otherwise (a --no-tls cluster).
//
// Thread safety: handlers run on the server's pool of threads, several at once. Start and
// Stop from one thread. No cpp-httplib in this header.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::rpc {

// The unauthenticated liveness path.
inline constexpr char kHealthPath[] = "/healthz";

struct HttpRequest {
  std::string method;  // "GET", "POST"
  std::string path;
  std::map<std::string, std::string> params;  // the query string, decoded
  std::vector<std::string> matches;           // the route pattern's capture groups
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpRoute {
  std::string method = "GET";
  std::string pattern;  // an ECMAScript regex over the whole path: "/api/jobs/([^/]+)"
  HttpHandler handler;
};

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 0;       // 0: pick a free one
  std::string token;  // required
  // Both set: HTTPS with this certificate chain and key (PEM files).
  std::string cert_file;
  std::string key_file;
  // The login page (HTML with a form that POSTs `token` to /login), served by GET /login and
  // as the body of a browser's 401. Empty: a minimal form.
  std::string login_page;
  int num_threads = 4;
  // A client that sends its request or reads the answer slower than this is cut off, so that
  // a stalled client never holds one of the threads for long.
  absl::Duration io_timeout = absl::Seconds(5);
};

class HttpServer {
 public:
  // Binds and starts serving `routes` on a thread of its own. Errors name the port and what
  // to do (another --dashboard-port, a missing certificate).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           std::vector<HttpRoute> routes);

  virtual ~HttpServer() = default;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  virtual int port() const = 0;
  virtual bool https() const = 0;
  // Stops accepting, lets running handlers finish, joins the thread. Idempotent.
  virtual void Stop() = 0;

 protected:
  HttpServer() = default;
};

// The session cookie's value for `token`: a MAC of it, not the token itself, so that the
// cookie jar never holds the token.
std::string DashboardSessionValue(const std::string& token);

// A JSON error body: {"error": message}.
HttpResponse JsonError(int status, const std::string& message);

}  // namespace phalanx::rpc
