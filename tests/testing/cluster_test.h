// A gtest fixture over a real control plane: a redis-server, a phalanx-gcs on it (a node is
// declared dead after 2 s without heartbeats) and this test process connected as a driver.
// Tests start their own node managers.
#pragma once

#include <memory>

#include "actors/api.h"
#include "client/gcs_client.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx::testing {

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<RedisServer>();
    gcs_ =
        std::make_unique<GcsProcess>(*redis_, GcsProcess::Options{/*node_timeout_ms=*/2000, 10000});
    client_ = *gcs::GcsClient::Connect({gcs_->address(), gcs_->token()});
    InitOptions init;
    init.address = gcs_->address();
    init.token = gcs_->token();
    ASSERT_TRUE(Init(init).ok());
  }

  // Disconnects the driver; the subclass stops its nodes after this.
  void TearDown() override { Shutdown(); }

  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<GcsProcess> gcs_;
  std::unique_ptr<gcs::GcsClient> client_;
};

}  // namespace phalanx::testing
