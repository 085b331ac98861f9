// The head's HTTP port and a node's /metrics, served by real daemons over HTTPS with the
// cluster's CA: no token or a wrong one gets 401 on every path, a bearer token or the
// dashboard's sign-in cookie gets in, /metrics is Prometheus text with the families the
// dashboard and the alerts use, /api answers JSON, and the file_sd targets name every
// metrics port.
#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/tls.h"
#include "client/gcs_client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

using nlohmann::json;

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::GcsProcess::Options options;
    options.tls = true;
    options.dashboard_port = 0;
    gcs_ = std::make_unique<testing::GcsProcess>(redis_, options, session_.path());
    testing::NodeOptions node;
    node.metrics_port = 0;
    node_ = testing::StartNode(*gcs_, "node-a", node);
    client_ = *gcs::GcsClient::Connect({gcs_->address(), gcs_->token()});
    auto info = client_->GetClusterInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_GT(info->dashboard_port(), 0);
    ASSERT_TRUE(info->dashboard_https());
    port_ = info->dashboard_port();
  }

  // An HTTPS client that trusts only the cluster's CA.
  std::unique_ptr<httplib::SSLClient> Client(int port) {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    c->set_ca_cert_path(absl::StrCat(gcs_->tls_dir(), "/", rpc::kCaCertFile).c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(5);
    c->set_read_timeout(5);
    return c;
  }

  httplib::Headers Bearer(const std::string& token) {
    return {{"Authorization", absl::StrCat("Bearer ", token)}};
  }

  testing::RedisServer redis_;
  testing::TempDir session_;
  std::unique_ptr<testing::GcsProcess> gcs_;
  testing::ChildProcess node_;
  std::unique_ptr<gcs::GcsClient> client_;
  int port_ = 0;
};

TEST_F(DashboardTest, NoTokenOrAWrongOneGets401OnEveryPath) {
  auto c = Client(port_);
  for (const char* path :
       {"/", "/metrics", "/api/cluster", "/api/nodes", "/api/actors", "/api/jobs", "/api/jobs/x",
        "/api/jobs/x/logs", "/dashboard.js", "/static/chart.min.js", "/login", "/no/such/page"}) {
    auto none = c->Get(path);
    ASSERT_TRUE(none) << path << ": " << httplib::to_string(none.error());
    EXPECT_EQ(none->status, 401) << path;
    auto wrong = c->Get(path, Bearer("not-the-token"));
    ASSERT_TRUE(wrong) << path;
    EXPECT_EQ(wrong->status, 401) << path;
    auto cookie = c->Get(path, {{"Cookie", "phalanx_session=0123abcd"}});
    ASSERT_TRUE(cookie) << path;
    EXPECT_EQ(cookie->status, 401) << path;
  }
  // A browser gets the sign-in page; a script a JSON error that says what to send.
  auto browser = c->Get("/", {{"Accept", "text/html"}});
  EXPECT_TRUE(absl::StrContains(browser->body, "name=\"token\"")) << browser->body;
  auto script = c->Get("/metrics");
  EXPECT_TRUE(absl::StrContains(script->body, "Authorization: Bearer")) << script->body;
  auto bad_login = c->Post("/login", "token=wrong", "application/x-www-form-urlencoded");
  ASSERT_TRUE(bad_login);
  EXPECT_EQ(bad_login->status, 401);
  EXPECT_FALSE(bad_login->has_header("Set-Cookie"));
  // Plain HTTP on the HTTPS port gets nowhere.
  httplib::Client plain("127.0.0.1", port_);
  plain.set_connection_timeout(2);
  plain.set_read_timeout(2);
  auto cleartext = plain.Get("/metrics", Bearer(gcs_->token()));
  EXPECT_TRUE(!cleartext || cleartext->status != 200);
}

TEST_F(DashboardTest, TheSignInCookieOpensThePagesAndSignOutEndsIt) {
  auto c = Client(port_);
  auto login =
      c->Post("/login", absl::StrCat("token=", gcs_->token()), "application/x-www-form-urlencoded");
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 303);
  std::string set_cookie = login->get_header_value("Set-Cookie");
  EXPECT_TRUE(absl::StrContains(set_cookie, "HttpOnly")) << set_cookie;
  EXPECT_TRUE(absl::StrContains(set_cookie, "Secure")) << set_cookie;
  // The cookie is not the token.
  EXPECT_FALSE(absl::StrContains(set_cookie, gcs_->token())) << set_cookie;
  std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  for (const char* path :
       {"/", "/dashboard.js", "/dashboard.css", "/static/chart.min.js", "/api/cluster"}) {
    auto r = c->Get(path, {{"Cookie", cookie}});
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path << ": " << r->body.substr(0, 200);
    EXPECT_FALSE(r->body.empty()) << path;
  }
  auto out = c->Get("/logout", {{"Cookie", cookie}});
  ASSERT_TRUE(out);
  EXPECT_TRUE(absl::StrContains(out->get_header_value("Set-Cookie"), "Max-Age=0"));
}

TEST_F(DashboardTest, MetricsAndApiDescribeTheCluster) {
  auto c = Client(port_);
  auto page = c->Get("/metrics", Bearer(gcs_->token()));
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200);
  EXPECT_TRUE(absl::StartsWith(page->get_header_value("Content-Type"), "text/plain"));
  for (const char* line :
       {"# TYPE phalanx_nodes gauge", "phalanx_nodes{state=\"alive\"} 1",
        "phalanx_resources_total{resource=\"CPU\"} 2",
        "# TYPE phalanx_gcs_rpc_latency_seconds histogram",
        "phalanx_gcs_rpc_latency_seconds_bucket{method=\"RegisterNode\",le=\"+Inf\"}",
        "phalanx_gcs_redis_write_latency_seconds_count", "phalanx_gcs_subscribers",
        "# TYPE phalanx_elastic_recovery_resume_seconds histogram"}) {
    EXPECT_TRUE(absl::StrContains(page->body, line)) << line << "\n" << page->body;
  }
  auto cluster = c->Get("/api/cluster", Bearer(gcs_->token()));
  ASSERT_TRUE(cluster);
  json j = json::parse(cluster->body);
  EXPECT_EQ(j["nodes_alive"], 1);
  EXPECT_EQ(j["tls"], true);
  EXPECT_EQ(j["cluster_id"], "testcluster");
  auto nodes = c->Get("/api/nodes", Bearer(gcs_->token()));
  json n = json::parse(nodes->body);
  ASSERT_EQ(n["nodes"].size(), 1u);
  std::string metrics_address = n["nodes"][0]["metrics_address"];
  EXPECT_FALSE(metrics_address.empty());
  auto missing = c->Get("/api/jobs/nope", Bearer(gcs_->token()));
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(absl::StrContains(missing->body, "no job 'nope'")) << missing->body;
  auto bad = c->Get("/api/actors?limit=x", Bearer(gcs_->token()));
  EXPECT_EQ(bad->status, 400);
  EXPECT_TRUE(absl::StrContains(bad->body, "limit")) << bad->body;

  // The node's own /metrics, on the address it registered, same token, same CA.
  int node_port = std::stoi(metrics_address.substr(metrics_address.rfind(':') + 1));
  auto nc = Client(node_port);
  EXPECT_EQ(nc->Get("/metrics")->status, 401);
  auto node_page = nc->Get("/metrics", Bearer(gcs_->token()));
  ASSERT_TRUE(node_page);
  ASSERT_EQ(node_page->status, 200);
  for (const char* line : {"# TYPE phalanx_node_workers gauge", "phalanx_node_oom_kills_total",
                           "phalanx_node_memory_monitor_kills_total",
                           "# TYPE phalanx_node_worker_start_seconds histogram"}) {
    EXPECT_TRUE(absl::StrContains(node_page->body, line)) << line << "\n" << node_page->body;
  }

  // The scrape targets name the head's port and the node's.
  auto targets = ReadFile(session_.path() + "/metrics/targets.json");
  ASSERT_TRUE(targets.ok()) << targets.status();
  EXPECT_TRUE(absl::StrContains(*targets, absl::StrCat(":", port_))) << *targets;
  EXPECT_TRUE(absl::StrContains(*targets, metrics_address)) << *targets;
}

}  // namespace
}  // namespace phalanx
