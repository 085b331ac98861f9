// The rank's side of the step protocol (TrainerHostBase), called directly: a step sent ahead
// runs in its turn and commits only what it carries; one that no longer fits is refused
// without touching the state; a rollback finds the agreed step among those held; a
// checkpoint holds the step it is taken at.
#include "elastic/trainer_host.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "elastic/job_spec.h"
#include "elastic/trainer_protocol.h"
#include "examples/cpp/regression_trainer.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx::elastic {
namespace {

class TrainerHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>();
    gcs_ = std::make_unique<testing::GcsProcess>(*redis_);
    // The host's collective group finds the GCS here (GroupOptions::gcs_address "").
    setenv("PHALANX_ADDRESS", gcs_->address().c_str(), 1);
    setenv("PHALANX_TOKEN", gcs_->token().c_str(), 1);
  }
  void TearDown() override {
    unsetenv("PHALANX_ADDRESS");
    unsetenv("PHALANX_TOKEN");
  }

  static std::string SpecYaml(std::map<std::string, std::string> config = {}) {
    JobSpec spec;
    spec.config = std::move(config);
    spec.name = "host";
    spec.trainer = "RegressionTrainer";
    spec.num_samples = 64;
    spec.global_batch = 8;
    spec.steps = 10;
    spec.hang_timeout_s = 10;
    return JobSpecToYaml(spec);
  }

  // A host of RegressionTrainer that formed epoch 1 alone, with 0 steps.
  void StartHost() {
    ASSERT_TRUE(host.Setup("job-host", SpecYaml()));
    ASSERT_EQ(host.Reconfigure("host-group", 1, 0, 1, 0), 0);
  }
  std::string held() { return host.Query(trainer_query::kHeldStep); }
  // "held committed updates": the steps whose state it holds, the committed step, and the
  // updates its live state applied.
  std::string Ledger() { return absl::StrCat(held(), " ", committed(), " ", updates()); }
  std::string committed() { return host.Query("committed_step"); }
  std::string updates() { return host.Query("updates"); }

  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<testing::GcsProcess> gcs_;
  TrainerHostBase host{std::make_unique<examples::RegressionTrainer>()};
};

TEST_F(TrainerHostTest, AStepSentAheadRunsInTurnAndOneThatNoLongerFitsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartHost());

  host.Step(0, 0, 1, 1);
  // Step 1 as the controller sends it ahead: it commits step 0's state (agreed before it
  // was sent), not step 1's, which nobody agreed yet.
  host.Step(1, 0, 1, 1);
  EXPECT_EQ(Ledger(), "2 0 2");

  // Not its turn (it holds 2 steps), another epoch's: refused, nothing changes.
  EXPECT_THROW(host.Step(1, 1, 1, 1), std::runtime_error);
  EXPECT_THROW(host.Step(2, 1, 0, 1), std::runtime_error);
  EXPECT_EQ(Ledger(), "2 0 2");

  // Aborted: no step runs until the next epoch forms.
  host.Abort("the test aborts the step");
  EXPECT_THROW(host.Step(2, 1, 1, 1), std::runtime_error);
  EXPECT_EQ(updates(), "2");

  // The controller agreed step 1 only (step 2's answers never all came): the rollback finds
  // it among the two finished steps and drops the newer one.
  EXPECT_EQ(host.Reconfigure("host-group", 2, 0, 1, 1), 1);
  EXPECT_EQ(Ledger(), "1 1 1");
  host.Step(1, 1, 2, 1);
  EXPECT_EQ(Ledger(), "2 1 2");
}

TEST_F(TrainerHostTest, ACallOfSeveralStepsKeepsOnlyTheStateAtItsEnd) {
  ASSERT_NO_FATAL_FAILURE(StartHost());

  auto first = host.Step(0, 0, 1, 3);
  EXPECT_EQ(first[step_metric::kSteps], 3);
  EXPECT_EQ(first["samples"], 24);  // 3 steps of the global batch of 8, one rank
  EXPECT_EQ(Ledger(), "3 0 3");
  // The next call, sent ahead of the first one's answer: commits nothing new.
  host.Step(3, 0, 1, 4);
  EXPECT_EQ(Ledger(), "7 0 7");
  // A call must start where the last one ended.
  EXPECT_THROW(host.Step(5, 3, 1, 2), std::runtime_error);
  EXPECT_THROW(host.Step(7, 3, 1, 0), std::runtime_error);
  EXPECT_EQ(updates(), "7");
  host.Step(7, 3, 1, 2);
  EXPECT_EQ(Ledger(), "9 3 9");
  // The controller agreed the second call, not the third: the rollback finds its end.
  EXPECT_EQ(host.Reconfigure("host-group", 2, 0, 1, 7), 7);
  EXPECT_EQ(Ledger(), "7 7 7");
}

// The controller checkpoints a step every rank finished, while rank 0 may already run the
// call sent ahead, which carried an older agreed step: the checkpoint holds the step it is
// taken at (committed then), not the older one, and loads back as that step.
TEST_F(TrainerHostTest, ACheckpointHoldsTheAgreedStepNotTheOneTheCallsCarried) {
  ASSERT_NO_FATAL_FAILURE(StartHost());
  testing::TempDir dir;
  host.Step(0, 0, 1, 2);
  host.Step(2, 0, 1, 2);  // sent ahead when 0 steps were agreed
  EXPECT_EQ(Ledger(), "4 0 4");

  // The controller agreed the first call (2 steps) and checkpoints it.
  std::string path = dir.path() + "/ckpt/at2.ckpt";
  EXPECT_EQ(host.SaveCheckpoint(path, 2), 2);
  EXPECT_EQ(Ledger(), "4 2 4");  // committed there; the call ahead's state is still held
  auto written = ReadFile(path);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->substr(0, written->find('\n')), "2");

  // Loaded back: 2 steps, with 2 updates applied (not 0, nor the 4 run since).
  EXPECT_EQ(host.LoadCheckpoint(path), 2);
  EXPECT_EQ(Ledger(), "2 2 2");
}

// RegressionTrainer's stepPad: "before" sleeps stepMs before the step's update, "after" pads
// the step to stepMs after it (where torchrun's peer trainer logs its steps, so that
// recovery_bench times both sides at the same point); anything else is refused by name.
TEST_F(TrainerHostTest, AStepPaddedAfterAppliesItsUpdateBeforeThePadding) {
  constexpr int kPadMs = 600;  // long against a stall of the test, so the order is certain
  testing::TempDir dir;
  // The time the step's update was applied, from the trainer's updateLog (its 4th field).
  auto update_ms = [](const std::string& log) {
    std::ifstream in(log);
    int64_t pid, step, before, ms = -1;
    in >> pid >> step >> before >> ms;
    return ms;
  };
  for (std::string pad : {"before", "after"}) {
    SCOPED_TRACE(pad);
    std::string log = absl::StrCat(dir.path(), "/", pad, ".log");
    TrainerHostBase padded{std::make_unique<examples::RegressionTrainer>()};
    ASSERT_TRUE(padded.Setup(
        "job-" + pad,
        SpecYaml({{"stepMs", absl::StrCat(kPadMs)}, {"stepPad", pad}, {"updateLog", log}})));
    ASSERT_EQ(padded.Reconfigure(absl::StrCat("pad-", pad), 1, 0, 1, 0), 0);
    int64_t start = absl::ToUnixMillis(absl::Now());
    padded.Step(0, 0, 1, 1);
    int64_t end = absl::ToUnixMillis(absl::Now());
    EXPECT_GE(end - start, kPadMs);  // padded either way
    int64_t applied = update_ms(log);
    ASSERT_GT(applied, 0);
    if (pad == "before") {
      EXPECT_GE(applied - start, kPadMs);
    } else {
      EXPECT_LT(applied - start, kPadMs);
    }
  }
  TrainerHostBase bad{std::make_unique<examples::RegressionTrainer>()};
  try {
    bad.Setup("job-bad", SpecYaml({{"stepPad", "middle"}}));
    ADD_FAILURE() << "stepPad: middle was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("config.stepPad: \"middle\""), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace phalanx::elastic
