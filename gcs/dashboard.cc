#include "gcs/dashboard.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/tls.h"
#include "nlohmann/json.hpp"

namespace phalanx::gcs {

// The files of gcs/dashboard/, compiled in (gcs/CMakeLists.txt). Empty when unknown.
std::string_view DashboardAsset(std::string_view name);

namespace {

using nlohmann::json;
using rpc::HttpRequest;
using rpc::HttpResponse;

// Debian's libjs-chart.js (Chart.js 3, UMD build): served by the head, no CDN.
constexpr char kChartJsPath[] = "/usr/share/javascript/chart.js/chart.min.js";
// The most of a job's driver log one request returns.
constexpr int64_t kMaxLogTailBytes = 1 << 20;
constexpr int64_t kDefaultLogTailBytes = 16 << 10;
// The most actors one /api/actors answer lists (the total is always given).
constexpr int kMaxActorsListed = 5000;

// A protobuf message as JSON: field names as in the .proto, defaults printed.
json ProtoJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(m, &out, options).ok()) return json::object();
  return json::parse(out, nullptr, /*allow_exceptions=*/false);
}

HttpResponse Json(const json& body) {
  HttpResponse r;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse Asset(std::string_view name, const std::string& type) {
  HttpResponse r;
  std::string_view body = DashboardAsset(name);
  if (body.empty())
    return rpc::JsonError(404, absl::StrCat(std::string(name), " was not built in"));
  r.content_type = type;
  r.body = std::string(body);
  return r;
}

std::string Param(const HttpRequest& req, const std::string& key) {
  auto it = req.params.find(key);
  return it == req.params.end() ? "" : it->second;
}

// "ALIVE" or "ACTOR_ALIVE" both match ACTOR_ALIVE.
bool StateMatches(const std::string& want, const std::string& enum_name) {
  return want.empty() || want == enum_name || absl::StrCat("ACTOR_", want) == enum_name;
}

json ClusterJson(const GcsObservables& o) {
  json c;
  c["cluster_id"] = o.cluster_id;
  c["version"] = o.version;
  c["start_time_ms"] = o.start_time_ms;
  c["now_ms"] = absl::ToUnixMillis(absl::Now());
  c["tls"] = !o.ca_fingerprint.empty();
  c["ca_fingerprint"] = o.ca_fingerprint;
  NodeTotals nodes = SumNodes(o.nodes->GetAll(false));
  c["nodes_alive"] = nodes.alive;
  c["nodes_dead"] = nodes.dead;
  c["resources_total"] = nodes.total;
  c["resources_used"] = nodes.used;
  std::map<std::string, int> actors, jobs;
  for (const auto& [key, n] : o.actors->CountByStateAndClass()) {
    actors[rpc::ActorState_Name(key.first)] += n;
  }
  for (const auto& j : o.jobs->List()) ++jobs[rpc::JobState_Name(j.state())];
  c["actors_by_state"] = actors;
  c["jobs_by_state"] = jobs;
  return c;
}

HttpResponse Actors(const GcsObservables& o, const HttpRequest& req) {
  std::string state = Param(req, "state");
  std::string cls = Param(req, "class");
  std::string job = Param(req, "job");
  int limit = kMaxActorsListed;
  if (std::string l = Param(req, "limit"); !l.empty()) {
    if (!absl::SimpleAtoi(l, &limit) || limit < 0) {
      return rpc::JsonError(400, "limit: not a count; pass limit=N with N >= 0");
    }
    limit = std::min(limit, kMaxActorsListed);
  }
  json list = json::array();
  int total = 0;
  auto actors = o.actors->List(job);
  // Newest first: the ones a person looks for.
  std::reverse(actors.begin(), actors.end());
  for (auto& a : actors) {
    if (!StateMatches(state, rpc::ActorState_Name(a.state()))) continue;
    if (!cls.empty() && a.class_name() != cls) continue;
    ++total;
    if (static_cast<int>(list.size()) >= limit) continue;
    a.clear_init_args();  // the constructor's arguments: bytes nobody reads here
    a.clear_env();
    list.push_back(ProtoJson(a));
  }
  return Json({{"actors", list}, {"total", total}});
}

HttpResponse Job(const GcsObservables& o, const HttpRequest& req, bool history) {
  const std::string& id = req.matches.at(0);
  auto job = o.jobs->Get(id);
  if (!job) {
    return rpc::JsonError(404, absl::StrCat("no job '", id, "'; /api/jobs lists the known ones"));
  }
  if (!history) {
    job->clear_env();
    return Json({{"job", ProtoJson(*job)}});
  }
  json points = json::array();
  for (const auto& p : o.history->Points(*job)) {
    points.push_back({{"time_ms", p.time_ms},
                      {"world_size", p.world_size},
                      {"step", p.step},
                      {"steps_per_second", p.steps_per_second}});
  }
  return Json({{"points", points}});
}

HttpResponse Logs(const GcsObservables& o, const HttpRequest& req) {
  int64_t tail = kDefaultLogTailBytes;
  if (std::string t = Param(req, "tail"); !t.empty()) {
    if (!absl::SimpleAtoi(t, &tail) || tail < 0) {
      return rpc::JsonError(400, "tail: not a byte count; pass tail=N with N >= 0");
    }
  }
  auto log = o.job_manager->TailLog(req.matches.at(0), std::min(tail, kMaxLogTailBytes));
  if (!log.ok()) {
    // No such job, or none to show (an elastic job has no driver; the message says where its
    // workers' logs are): the page shows the message.
    return rpc::JsonError(404, std::string(log.status().message()));
  }
  return Json({{"log", log->first}, {"size", log->second}});
}

}  // namespace

std::vector<rpc::HttpRoute> DashboardRoutes(const GcsObservables& o) {
  // Read once: the file does not change while the head runs.
  auto chart_js = std::make_shared<absl::StatusOr<std::string>>(ReadFile(kChartJsPath));
  std::vector<rpc::HttpRoute> routes;
  auto get = [&](std::string pattern, rpc::HttpHandler handler) {
    routes.push_back({"GET", std::move(pattern), std::move(handler)});
  };
  get("/metrics", [o](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = ClusterMetricsPage(o);
    return r;
  });
  get("/api/cluster", [o](const HttpRequest&) { return Json(ClusterJson(o)); });
  get("/api/nodes", [o](const HttpRequest&) {
    json list = json::array();
    for (const auto& n : o.nodes->GetAll(false)) list.push_back(ProtoJson(n));
    return Json({{"nodes", list}});
  });
  get("/api/actors", [o](const HttpRequest& req) { return Actors(o, req); });
  get("/api/placement_groups", [o](const HttpRequest&) {
    json list = json::array();
    for (const auto& pg : o.placement_groups->List()) list.push_back(ProtoJson(pg));
    return Json({{"placement_groups", list}});
  });
  get("/api/jobs", [o](const HttpRequest&) {
    auto jobs = o.jobs->List();
    std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(a.submit_time_ms(), a.job_id()) >
             std::make_tuple(b.submit_time_ms(), b.job_id());
    });
    json list = json::array();
    for (auto& j : jobs) {
      j.clear_events();  // the job's own page has them
      j.clear_env();
      j.mutable_elastic()->clear_recoveries();
      list.push_back(ProtoJson(j));
    }
    return Json({{"jobs", list}});
  });
  get("/api/jobs/([^/]+)", [o](const HttpRequest& req) { return Job(o, req, false); });
  get("/api/jobs/([^/]+)/history", [o](const HttpRequest& req) { return Job(o, req, true); });
  get("/api/jobs/([^/]+)/logs", [o](const HttpRequest& req) { return Logs(o, req); });
  get("/", [](const HttpRequest&) { return Asset("index.html", "text/html; charset=utf-8"); });
  get("/login", [](const HttpRequest&) {
    // Reached only when signed in (the gate answers 401 with this page otherwise).
    HttpResponse r;
    r.status = 303;
    r.headers["Location"] = "/";
    return r;
  });
  // The page's scripts and styles, by name (every .js and .css of gcs/dashboard/).
  get("/([a-z_-]+\\.(js|css))", [](const HttpRequest& req) {
    bool js = req.matches.at(1) == "js";
    return Asset(req.matches.at(0),
                 js ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8");
  });
  get("/static/chart.min.js", [chart_js](const HttpRequest&) {
    if (!chart_js->ok()) {
      return rpc::JsonError(404, absl::StrCat(kChartJsPath,
                                              " is missing: install Debian's libjs-chart.js "
                                              "(scripts/setup.sh does)"));
    }
    HttpResponse r;
    r.content_type = "text/javascript; charset=utf-8";
    r.headers["Cache-Control"] = "max-age=86400";
    r.body = **chart_js;
    return r;
  });
  return routes;
}

absl::StatusOr<std::unique_ptr<HeadDashboard>> HeadDashboard::Start(
    const GcsObservables& o, const DashboardOptions& options) {
  std::unique_ptr<HeadDashboard> d(new HeadDashboard(o, options));
  rpc::HttpServerOptions http;
  http.host = options.host;
  http.port = options.port;
  http.token = options.token;
  http.login_page = std::string(DashboardAsset("login.html"));
  if (!options.tls_dir.empty()) {
    http.cert_file = absl::StrCat(options.tls_dir, "/", rpc::kCertFile);
    http.key_file = absl::StrCat(options.tls_dir, "/", rpc::kKeyFile);
  }
  auto started = rpc::HttpServer::Start(http, DashboardRoutes(o));
  if (!started.ok() && absl::IsUnavailable(started.status()) && options.port_fallback &&
      options.port != 0) {
    spdlog::warn("dashboard: port {} is taken; serving on another (phalanx status shows it)",
                 options.port);
    http.port = 0;
    started = rpc::HttpServer::Start(http, DashboardRoutes(o));
  }
  if (!started.ok()) {
    return absl::Status(started.status().code(),
                        absl::StrCat("dashboard: ", started.status().message(),
                                     " (--dashboard-port; -1 serves none)"));
  }
  d->server_ = std::move(*started);
  spdlog::info("dashboard and /metrics on {}://{}:{}", d->server_->https() ? "https" : "http",
               options.host, d->server_->port());
  d->UpdateScrapeTargets();
  return d;
}

void HeadDashboard::UpdateScrapeTargets() {
  if (options_.scrape_targets_path.empty()) return;
  const std::string& path = options_.scrape_targets_path;
  auto nodes = o_.nodes->GetAll(/*alive_only=*/true);
  std::string host = "127.0.0.1";
  for (const auto& n : nodes) {
    if (n.is_head()) host = n.address().substr(0, n.address().rfind(':'));
  }
  absl::MutexLock lock(&targets_mu_);
  MakeDirs(path.substr(0, path.rfind('/'))).IgnoreError();
  absl::Status s = WriteScrapeTargets(path, absl::StrCat(host, ":", port()), nodes);
  if (!s.ok()) spdlog::warn("cannot write the scrape targets {}: {}", path, s.message());
}

absl::Status WriteScrapeTargets(const std::string& path, const std::string& head_address,
                                const std::vector<rpc::NodeInfo>& nodes) {
  json groups = json::array();
  groups.push_back({{"targets", {head_address}}, {"labels", {{"phalanx_role", "head"}}}});
  for (const auto& n : nodes) {
    if (n.state() != rpc::NODE_ALIVE || n.metrics_address().empty()) continue;
    groups.push_back({{"targets", {n.metrics_address()}},
                      {"labels",
                       {{"phalanx_role", "node"},
                        {"node_id", n.node_id()},
                        {"hostname", n.hostname()},
                        {"is_head", n.is_head() ? "true" : "false"}}}});
  }
  return WriteFile(path, groups.dump(2) + "\n");
}

}  // namespace phalanx::gcs
