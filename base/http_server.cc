#include "base/http_server.h"

#include <httplib.h>

#include <regex>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/logging.h"
#include "base/sha256.h"
#include "nlohmann/json.hpp"

namespace phalanx::rpc {
namespace {

constexpr char kSessionCookie[] = "phalanx_session";

constexpr char kDefaultLoginPage[] =
    "<!doctype html><title>Phalanx: sign in</title><form method=post action=/login>"
    "<label>Cluster token <input type=password name=token id=token></label> "
    "<button id=login>Sign in</button></form>";

// Equal in time whatever the inputs, so that a guess learns nothing from how long it took.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string CookieValue(const httplib::Request& req, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(req.get_header_value("Cookie"), ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, name) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return "";
}

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(const HttpServerOptions& options, std::vector<HttpRoute> routes)
      : options_(options),
        session_(DashboardSessionValue(options.token)),
        routes_(std::move(routes)) {
    if (options_.login_page.empty()) options_.login_page = kDefaultLoginPage;
  }

  ~HttpServerImpl() override { Stop(); }

  absl::Status Init() {
    https_ = !options_.cert_file.empty() && !options_.key_file.empty();
    if (https_) {
      server_ = std::make_unique<httplib::SSLServer>(options_.cert_file.c_str(),
                                                     options_.key_file.c_str());
    } else {
      server_ = std::make_unique<httplib::Server>();
    }
    if (!server_->is_valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat("HTTPS: cannot load the certificate ", options_.cert_file, " and key ",
                       options_.key_file, " (`phalanx start` makes them in <session>/tls)"));
    }
    int threads = std::max(1, options_.num_threads);
    server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    auto io = std::chrono::microseconds(absl::ToInt64Microseconds(options_.io_timeout));
    server_->set_read_timeout(io);
    server_->set_write_timeout(io);
    server_->set_keep_alive_timeout(std::max<time_t>(1, io.count() / 1000000));
    // Without it, a page written in several sends waits for the client's delayed ACK (Nagle):
    // ~40 ms per answer.
    server_->set_tcp_nodelay(true);
    // Requests here are small: a login form at most.
    server_->set_payload_max_length(64 * 1024);
    server_->set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return Gate(req, res); });
    server_->Post("/login",
                  [this](const httplib::Request& req, httplib::Response& res) { Login(req, res); });
    server_->Get(kHealthPath, [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    server_->Get("/logout", [this](const httplib::Request&, httplib::Response& res) {
      res.set_header("Set-Cookie", Cookie("", 0));
      res.set_redirect("/login", 303);
    });
    for (const HttpRoute& route : routes_) {
      auto serve = [handler = route.handler](const httplib::Request& req, httplib::Response& res) {
        HttpRequest request;
        request.method = req.method;
        request.path = req.path;
        for (const auto& [k, v] : req.params) request.params.emplace(k, v);
        for (size_t i = 1; i < req.matches.size(); ++i) request.matches.push_back(req.matches[i]);
        HttpResponse response = handler(request);
        res.status = response.status;
        // The gate's defaults (Cache-Control: no-store) give way to the route's own.
        for (const auto& [k, v] : response.headers) {
          res.headers.erase(k);
          res.set_header(k, v);
        }
        res.set_content(std::move(response.body), response.content_type);
      };
      if (route.method == "POST") {
        server_->Post(route.pattern, serve);
      } else {
        server_->Get(route.pattern, serve);
      }
    }
    server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (res.status == 404 && res.body.empty()) {
        res.set_content(
            nlohmann::json({{"error", absl::StrCat("no such page: ", req.path)}}).dump(),
            "application/json");
      }
    });
    if (options_.port == 0) {
      port_ = server_->bind_to_any_port(options_.host);
    } else if (server_->bind_to_port(options_.host, options_.port)) {
      port_ = options_.port;
    }
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrCat("HTTP: cannot listen on ", options_.host, ":",
                                                 options_.port,
                                                 ": the port is in use; pass another port"));
    }
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    return absl::OkStatus();
  }

  int port() const override { return port_; }
  bool https() const override { return https_; }

  void Stop() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string Cookie(const std::string& value, int max_age_s) const {
    return absl::StrCat(kSessionCookie, "=", value, "; Path=/; HttpOnly; SameSite=Strict",
                        https_ ? "; Secure" : "", "; Max-Age=", max_age_s);
  }

  bool Authorized(const httplib::Request& req) const {
    std::string auth = req.get_header_value("Authorization");
    absl::string_view bearer = auth;
    if (absl::ConsumePrefix(&bearer, "Bearer ") && SameSecret(bearer, options_.token)) {
      return true;
    }
    std::string cookie = CookieValue(req, kSessionCookie);
    return !cookie.empty() && SameSecret(cookie, session_);
  }

  // `failed`: a sign-in with a wrong token (the login page says so: its body is marked).
  void Unauthorized(const httplib::Request& req, httplib::Response& res, const std::string& why,
                    bool failed = false) const {
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer realm=\"phalanx\"");
    if (absl::StrContains(req.get_header_value("Accept"), "text/html")) {
      std::string page = options_.login_page;
      if (size_t body = page.find("<body"); failed && body != std::string::npos) {
        page.insert(body + 5, " data-failed=\"1\"");
      }
      res.set_content(page, "text/html; charset=utf-8");
    } else {
      res.set_content(nlohmann::json({{"error", why}}).dump(), "application/json");
    }
  }

  httplib::Server::HandlerResponse Gate(const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    if (req.method == "POST" && req.path == "/login") {
      return httplib::Server::HandlerResponse::Unhandled;  // Login() checks the form
    }
    if (req.method == "GET" && req.path == kHealthPath) {
      return httplib::Server::HandlerResponse::Unhandled;  // says nothing but "ok"
    }
    if (Authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    Unauthorized(req, res,
                 "unauthorized: send the cluster token as `Authorization: Bearer <token>` (it "
                 "is in <session>/token on the head), or sign in at /login");
    return httplib::Server::HandlerResponse::Handled;
  }

  void Login(const httplib::Request& req, httplib::Response& res) {
    std::string token = req.has_param("token") ? req.get_param_value("token") : "";
    if (!SameSecret(token, options_.token)) {
      spdlog::warn("dashboard: a sign-in with a wrong token from {}", req.remote_addr);
      Unauthorized(req, res, "wrong token", /*failed=*/true);
      return;
    }
    res.set_header("Set-Cookie", Cookie(session_, 7 * 24 * 3600));
    res.set_redirect("/", 303);
  }

  HttpServerOptions options_;
  const std::string session_;
  const std::vector<HttpRoute> routes_;
  std::unique_ptr<httplib::Server> server_;
  bool https_ = false;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

std::string DashboardSessionValue(const std::string& token) {
  return absl::BytesToHexString(HmacSha256(token, "phalanx dashboard session v1"));
}

HttpResponse JsonError(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = nlohmann::json({{"error", message}}).dump();
  return r;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              std::vector<HttpRoute> routes) {
  if (options.token.empty()) {
    return absl::InvalidArgumentError("HTTP server: no cluster token (every server needs one)");
  }
  auto server = std::make_unique<HttpServerImpl>(options, std::move(routes));
  if (auto s = server->Init(); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace phalanx::rpc
