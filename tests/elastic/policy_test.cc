// The elastic fault policies, row by row, without a cluster: what a rank's death leads to
// (fail, shrink, or a replacement and how it starts), the restart budget's window, memory
// growth and its caps, scale requests, and the KV values the job kind and the controller
// share (elastic/job_keys.h).
#include "elastic/policy.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "elastic/fault.h"
#include "elastic/job_keys.h"
#include "gtest/gtest.h"

namespace phalanx::elastic {
namespace {

constexpr double kMi = 1 << 20;
constexpr double kGi = 1 << 30;
const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

JobSpec Spec(std::vector<FaultPolicy> policies = {}) {
  JobSpec spec;
  spec.name = "p";
  spec.trainer = "T";
  spec.replicas = 3;
  spec.min_replicas = 2;
  spec.max_replicas = 4;
  spec.steps = 10;
  spec.policies = std::move(policies);
  return spec;
}

FaultPolicy Rule(Action action, std::string event, std::vector<int> codes = {}) {
  FaultPolicy p;
  p.action = action;
  p.event = std::move(event);
  p.exit_codes = std::move(codes);
  return p;
}

RankDeath Death(rpc::FaultKind fault, int code_or_signal = 0) {
  RankDeath d;
  d.fault = fault;
  if (fault == rpc::FAULT_EXIT_CODE) d.exit_code = code_or_signal;
  if (fault == rpc::FAULT_SIGNAL) d.signal = code_or_signal;
  d.memory = 256 * kMi;
  d.bundle = 1;
  d.node_id = "node-a";
  return d;
}

DeathDecision Decide(const JobSpec& spec, const RankDeath& death) {
  RestartBudget budget(10, absl::Hours(1));
  return DecideOnDeath(spec, death, &budget, kT0);
}

// One vocabulary (elastic/fault.h): each death cause is one fault kind, and each kind has
// one name in the record and one event in the spec.
TEST(PolicyTest, EachCauseIsOneFaultKindWithOneNameAndOneSpecEvent) {
  struct Case {
    rpc::DeathCause::Kind cause;
    rpc::FaultKind fault;
    const char* name;
    const char* event;
  };
  const Case cases[] = {
      {rpc::DeathCause::EXITED, rpc::FAULT_EXIT_CODE, "exit_code", "exited"},
      {rpc::DeathCause::SIGNALED, rpc::FAULT_SIGNAL, "signal", "exited"},
      {rpc::DeathCause::OOM_KILLED, rpc::FAULT_OOM, "oom", "oom"},
      {rpc::DeathCause::NODE_DIED, rpc::FAULT_NODE_DIED, "node_died", "nodeDied"},
      {rpc::DeathCause::LEASE_EXPIRED, rpc::FAULT_LEASE_EXPIRED, "lease_expired", "exited"},
      {rpc::DeathCause::SCALED_IN, rpc::FAULT_SCALE, "scale", "exited"},
      {rpc::DeathCause::KILLED_BY_USER, rpc::FAULT_KILLED, "killed", "exited"},
      {rpc::DeathCause::OWNER_DIED, rpc::FAULT_KILLED, "killed", "exited"},
      {rpc::DeathCause::NONE, rpc::FAULT_KILLED, "killed", "exited"},
  };
  for (const Case& c : cases) {
    rpc::DeathCause cause;
    cause.set_kind(c.cause);
    EXPECT_EQ(FaultOf(cause), c.fault) << rpc::DeathCause::Kind_Name(c.cause);
    EXPECT_EQ(FaultName(c.fault), c.name);
    EXPECT_EQ(SpecEvent(c.fault), c.event) << c.name;
  }
  // The controller's own verdicts: no death cause says them.
  EXPECT_EQ(FaultName(rpc::FAULT_HANG), "hang");
  EXPECT_EQ(SpecEvent(rpc::FAULT_HANG), "hang");
  EXPECT_EQ(FaultName(rpc::FAULT_STRAGGLER), "straggler");
  // Every kind of the enum has a name of its own.
  std::set<std::string> names;
  for (int k = rpc::FaultKind_MIN; k <= rpc::FaultKind_MAX; ++k) {
    names.insert(std::string(FaultName(static_cast<rpc::FaultKind>(k))));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(rpc::FaultKind_MAX - rpc::FaultKind_MIN + 1));
}

TEST(PolicyTest, ByDefaultAnOomRespawnsLargerOutsideItsBundleWhichIsGivenBack) {
  DeathDecision d = Decide(Spec(), Death(rpc::FAULT_OOM));
  EXPECT_EQ(d.kind, DeathDecision::Kind::kReplace);
  EXPECT_EQ(d.policy.action, Action::kRespawnLarger);
  EXPECT_EQ(d.memory, 512 * kMi);
  EXPECT_EQ(d.bundle, -1);
  EXPECT_TRUE(d.release_bundle);
  EXPECT_TRUE(d.avoid_nodes.empty());
  EXPECT_EQ(d.summary, "action: respawnLarger: memory 256.0 MiB → 512.0 MiB");
}

TEST(PolicyTest, AnOomWithoutAMemoryRequestRestartsInItsBundle) {
  RankDeath death = Death(rpc::FAULT_OOM);
  death.memory = 0;
  DeathDecision d = Decide(Spec(), death);
  EXPECT_EQ(d.kind, DeathDecision::Kind::kReplace);
  EXPECT_EQ(d.memory, 0);
  EXPECT_EQ(d.bundle, 1);
  EXPECT_FALSE(d.release_bundle);
  EXPECT_EQ(d.summary, "action: respawnLarger");
}

TEST(PolicyTest, MemoryGrowsByTheFactorAtMostTheStepAndAtMostTheCap) {
  FaultPolicy p = Rule(Action::kRespawnLarger, "oom");
  p.memory_growth = 4;
  p.max_memory_step = static_cast<int64_t>(1 * kGi);
  p.memory_cap = static_cast<int64_t>(3 * kGi);
  EXPECT_EQ(GrownMemory(p, 256 * kMi), 1 * kGi);  // ×4
  EXPECT_EQ(GrownMemory(p, 1 * kGi), 2 * kGi);    // +1 GiB at most
  EXPECT_EQ(GrownMemory(p, 2.5 * kGi), 3 * kGi);  // 3 GiB at most
  EXPECT_EQ(GrownMemory(p, 3 * kGi), 3 * kGi);    // stays at the cap
  FaultPolicy defaults;                           // DLRover's: ×2, ≤ +8 GiB, ≤ 64 GiB
  EXPECT_EQ(GrownMemory(defaults, 4 * kGi), 8 * kGi);
  EXPECT_EQ(GrownMemory(defaults, 12 * kGi), 20 * kGi);
  EXPECT_EQ(GrownMemory(defaults, 60 * kGi), 64 * kGi);
}

TEST(PolicyTest, ADeadNodesRankIsReplacedInItsBundleWhichTheGcsPlacesAgain) {
  DeathDecision d = Decide(Spec(), Death(rpc::FAULT_NODE_DIED));
  EXPECT_EQ(d.kind, DeathDecision::Kind::kReplace);
  EXPECT_EQ(d.policy.action, Action::kReschedule);
  EXPECT_EQ(d.bundle, 1);
  EXPECT_FALSE(d.release_bundle);
  EXPECT_TRUE(d.avoid_nodes.empty());
  EXPECT_EQ(d.summary, "action: reschedule");
}

TEST(PolicyTest, RescheduleElsewhereAvoidsTheNodeAndGivesTheBundleBack) {
  DeathDecision d =
      Decide(Spec({Rule(Action::kReschedule, "exited")}), Death(rpc::FAULT_EXIT_CODE, 1));
  EXPECT_EQ(d.kind, DeathDecision::Kind::kReplace);
  EXPECT_EQ(d.avoid_nodes, std::vector<std::string>{"node-a"});
  EXPECT_EQ(d.bundle, -1);
  EXPECT_TRUE(d.release_bundle);
  EXPECT_EQ(d.memory, 256 * kMi);
}

TEST(PolicyTest, ExitsSignalsAndHangsRestartInPlaceByDefault) {
  RankDeath hung = Death(rpc::FAULT_HANG);
  for (const RankDeath& death :
       {Death(rpc::FAULT_EXIT_CODE, 1), Death(rpc::FAULT_SIGNAL, 9), hung}) {
    DeathDecision d = Decide(Spec(), death);
    EXPECT_EQ(d.kind, DeathDecision::Kind::kReplace) << SpecEvent(death.fault);
    EXPECT_EQ(d.policy.action, Action::kRestart) << SpecEvent(death.fault);
    EXPECT_EQ(d.bundle, 1);
    EXPECT_EQ(d.memory, 256 * kMi);
    EXPECT_FALSE(d.release_bundle);
    EXPECT_EQ(d.summary, "action: restart");
  }
}

TEST(PolicyTest, ExitCodeRulesMatchExitCodesAndOneHundredTwentyEightPlusTheSignal) {
  JobSpec spec = Spec({Rule(Action::kFailJob, "", {129, 101})});
  EXPECT_EQ(Decide(spec, Death(rpc::FAULT_EXIT_CODE, 101)).kind, DeathDecision::Kind::kFailJob);
  EXPECT_EQ(Decide(spec, Death(rpc::FAULT_SIGNAL, 1)).kind,
            DeathDecision::Kind::kFailJob);  // SIGHUP: 128 + 1
  EXPECT_EQ(Decide(spec, Death(rpc::FAULT_EXIT_CODE, 129)).kind, DeathDecision::Kind::kFailJob);
  EXPECT_EQ(Decide(spec, Death(rpc::FAULT_EXIT_CODE, 3)).kind, DeathDecision::Kind::kReplace);
  EXPECT_EQ(Decide(spec, Death(rpc::FAULT_SIGNAL, 9)).kind,
            DeathDecision::Kind::kReplace);  // 137 is not listed
  // An OOM is not an exit code: its own rule (the default) applies.
  EXPECT_EQ(Decide(spec, Death(rpc::FAULT_OOM)).policy.action, Action::kRespawnLarger);
  EXPECT_EQ(Decide(spec, Death(rpc::FAULT_EXIT_CODE, 101)).summary, "policy: failJob");
}

TEST(PolicyTest, TheFirstMatchingRuleWinsAndTheUsersComeBeforeTheDefaults) {
  JobSpec spec = Spec({Rule(Action::kShrink, "oom"), Rule(Action::kFailJob, "oom"),
                       Rule(Action::kFailJob, "hang")});
  DeathDecision oom = Decide(spec, Death(rpc::FAULT_OOM));
  EXPECT_EQ(oom.kind, DeathDecision::Kind::kShrink);
  EXPECT_EQ(oom.summary, "policy: shrink");
  RankDeath hung = Death(rpc::FAULT_HANG);
  EXPECT_EQ(Decide(spec, hung).kind, DeathDecision::Kind::kFailJob);
  // A kill that was not for hanging is not a hang.
  EXPECT_EQ(Decide(spec, Death(rpc::FAULT_KILLED)).kind, DeathDecision::Kind::kReplace);
}

TEST(PolicyTest, TheBudgetAllowsLimitRespawnsPerWindowThenTheJobShrinks) {
  JobSpec spec = Spec();
  RestartBudget budget(2, absl::Seconds(60));
  RankDeath death = Death(rpc::FAULT_EXIT_CODE, 1);
  EXPECT_EQ(DecideOnDeath(spec, death, &budget, kT0).kind, DeathDecision::Kind::kReplace);
  EXPECT_EQ(DecideOnDeath(spec, death, &budget, kT0 + absl::Seconds(10)).kind,
            DeathDecision::Kind::kReplace);
  DeathDecision third = DecideOnDeath(spec, death, &budget, kT0 + absl::Seconds(20));
  EXPECT_EQ(third.kind, DeathDecision::Kind::kShrink);
  EXPECT_EQ(third.summary, "restart budget exhausted: shrinking");
  // A shrink spends nothing, and a policy that shrinks does not look at the budget.
  EXPECT_EQ(DecideOnDeath(spec, death, &budget, kT0 + absl::Seconds(59)).kind,
            DeathDecision::Kind::kShrink);
  // The first respawn leaves the window after 60 s: one is left again, then none.
  EXPECT_EQ(DecideOnDeath(spec, death, &budget, kT0 + absl::Seconds(61)).kind,
            DeathDecision::Kind::kReplace);
  EXPECT_EQ(DecideOnDeath(spec, death, &budget, kT0 + absl::Seconds(62)).kind,
            DeathDecision::Kind::kShrink);
  RestartBudget none(0, absl::Seconds(60));
  EXPECT_EQ(DecideOnDeath(spec, death, &none, kT0).kind, DeathDecision::Kind::kShrink);
  // A failJob rule fails the job whatever the budget.
  EXPECT_EQ(DecideOnDeath(Spec({Rule(Action::kFailJob, "exited")}), death, &none, kT0).kind,
            DeathDecision::Kind::kFailJob);
}

TEST(PolicyTest, AStragglerIsReplacedWhenItsPolicyRestartsOrReschedulesAndBudgetIsLeft) {
  RestartBudget budget(1, absl::Seconds(60));
  EXPECT_FALSE(ReplaceStraggler(Rule(Action::kShrink, "straggler"), &budget, kT0));
  EXPECT_FALSE(ReplaceStraggler(Rule(Action::kFailJob, "straggler"), &budget, kT0));
  EXPECT_TRUE(ReplaceStraggler(Rule(Action::kReschedule, "straggler"), &budget, kT0));
  EXPECT_FALSE(ReplaceStraggler(Rule(Action::kRestart, "straggler"), &budget, kT0))
      << "the one respawn was spent";
  EXPECT_TRUE(
      ReplaceStraggler(Rule(Action::kRestart, "straggler"), &budget, kT0 + absl::Seconds(61)));
  EXPECT_EQ(MatchPolicy(Spec(), "straggler", 0, 0).action, Action::kReschedule);
}

TEST(PolicyTest, ScaleRequestsAreClampedAndNamedRanksLeave) {
  JobSpec spec = Spec();  // min 2, max 4
  auto plain = ParseScaleRequest("r1:3", 3, spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->asked, 3);
  EXPECT_EQ(plain->replicas, 3);
  EXPECT_TRUE(plain->leaving.empty());
  EXPECT_EQ(ParseScaleRequest("r2:9", 3, spec)->replicas, 4);
  EXPECT_EQ(ParseScaleRequest("r3:0", 3, spec)->replicas, 2);
  // Named ranks: out of range or repeated ones are ignored; the size follows from them.
  auto named = ParseScaleRequest("r4:2:2,0,2,7,-1,x", 4, spec);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->leaving, (std::vector<int>{2, 0}));
  EXPECT_EQ(named->asked, 2);
  EXPECT_EQ(named->replicas, 2);
  EXPECT_EQ(ParseScaleRequest("r5:2:0,1,2", 4, spec)->replicas, 2);  // asked 1: min 2
  for (const char* bad : {"", "r6", "r7:many", "r8:"}) {
    auto parsed = ParseScaleRequest(bad, 3, spec);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("<replicas>"), std::string::npos) << bad;
  }
}

TEST(PolicyTest, AScaleRequestWrittenByTheJobKindParsesBackAndEachIsNew) {
  JobSpec spec = Spec();
  std::string first = keys::ScaleValue(3, {});
  std::string again = keys::ScaleValue(3, {});
  EXPECT_NE(first, again);  // the same size asked twice is two requests
  EXPECT_EQ(ParseScaleRequest(first, 4, spec)->replicas, 3);
  auto named = ParseScaleRequest(keys::ScaleValue(3, {1}), 4, spec);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->leaving, (std::vector<int>{1}));
}

TEST(PolicyTest, AScaleRequestCarriesTheNodesTheRanksMayUse) {
  JobSpec spec = Spec();
  auto plain = ParseScaleRequest(keys::ScaleValue(3, {}), 4, spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->nodes.has_value());  // no nodes named: they stay as they were
  auto set = ParseScaleRequest(
      keys::ScaleValue(3, {}, std::vector<std::string>{"host-a", "10.0.0.2"}), 4, spec);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_TRUE(set->nodes.has_value());
  EXPECT_EQ(*set->nodes, (std::vector<std::string>{"host-a", "10.0.0.2"}));
  EXPECT_EQ(set->replicas, 3);  // the size asked, not one following from leavers
  EXPECT_TRUE(set->leaving.empty());
  auto any = ParseScaleRequest(keys::ScaleValue(3, {}, std::vector<std::string>{}), 4, spec);
  ASSERT_TRUE(any.ok()) << any.status();
  ASSERT_TRUE(any->nodes.has_value());  // set, to none: any node
  EXPECT_TRUE(any->nodes->empty());
}

TEST(JobSpecTest, NodesRoundTripAndABadNameIsRefusedNamingTheField) {
  const std::string base = "name: j\ntrainer: T\nsteps: 1\ndata: {numSamples: 4, globalBatch: 2}\n";
  auto spec = ParseJobSpec(base + "nodes: [host-a, 10.0.0.2, 3f9c0a1b]\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->nodes, (std::vector<std::string>{"host-a", "10.0.0.2", "3f9c0a1b"}));
  auto again = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->nodes, spec->nodes);
  EXPECT_TRUE(ParseJobSpec(base)->nodes.empty());
  for (const char* bad : {"nodes: host-a\n", "nodes: [[a]]\n", "nodes: ['a:1']\n",
                          "nodes: ['a,b']\n", "nodes: ['']\n"}) {
    auto refused = ParseJobSpec(base + bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("nodes"), std::string::npos) << refused.status();
  }
}

TEST(PolicyTest, TheCheckpointPointerHoldsStepAndPathInOneValue) {
  std::string value = keys::Encode({120, "/ckpt/job step 120.ckpt"});
  auto back = keys::DecodeCheckpoint(value);
  ASSERT_TRUE(back.has_value()) << value;
  EXPECT_EQ(back->step, 120);
  EXPECT_EQ(back->path, "/ckpt/job step 120.ckpt");  // spaces in the path survive
  for (const char* bad : {"", "120", "120 ", "x /p", "-1 /p", "/ckpt/a.ckpt"}) {
    EXPECT_FALSE(keys::DecodeCheckpoint(bad).has_value()) << bad;
  }
  EXPECT_EQ(keys::Checkpoint("job-1"), "job-1/checkpoint");
}

// Found by fuzz/job_spec_fuzzer.cc: "11111111111111111111111" became a negative memory cap.
TEST(JobSpecTest, ASizeOfTwoToTheSixtyThreeBytesOrMoreIsRefusedNotWrappedNegative) {
  EXPECT_EQ(*ParseBytes("64Gi"), 64ll << 30);
  EXPECT_EQ(*ParseBytes("9223372036854774784"), 9223372036854774784ll);  // 2^63 - 1024
  EXPECT_FALSE(ParseBytes("11111111111111111111111").ok());
  EXPECT_FALSE(ParseBytes("8388608Ti").ok());  // 2^63 exactly
  EXPECT_FALSE(ParseBytes("1e300").ok());
  auto spec = ParseJobSpec(
      "name: j\ntrainer: T\nsteps: 1\ndata: {numSamples: 4, globalBatch: 2}\n"
      "resources: {memory: 1Gi}\n"
      "faultTolerantPolicy: [{event: oom, action: respawnLarger, memoryCap: 1e300}]\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("memoryCap"), std::string::npos) << spec.status();
}

// Found by fuzz/job_spec_fuzzer.cc: a codePath with a byte that is not UTF-8 was accepted, but
// JobSpecToYaml (what the job kind hands the controller) did not read back as the same spec.
TEST(JobSpecTest, TextThatIsNotUtf8IsRefusedAndUtf8RoundTrips) {
  const std::string base = "name: j\ntrainer: T\nsteps: 1\ndata: {numSamples: 4, globalBatch: 2}\n";
  for (const std::string& bad : {std::string("codePath: /opt\xaf"
                                             "app\n"),
                                 std::string("config: {k: \"\xc0\xaf\"}\n"),
                                 std::string("config: {\"\xed\xa0\x80\": v}\n"),  // a surrogate
                                 std::string("resources: {\"\xff\": 1}\n")}) {
    EXPECT_FALSE(ParseJobSpec(base + bad).ok()) << bad;
  }
  auto spec =
      ParseJobSpec(base + "codePath: /opt/\xc3\xa9t\xc3\xa9\nconfig: {k: \"\xf0\x9f\x99\x82\"}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto again = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->code_path, "/opt/\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(again->config.at("k"), "\xf0\x9f\x99\x82");
  EXPECT_EQ(JobSpecToYaml(*again), JobSpecToYaml(*spec));
}

TEST(JobSpecTest, StepCallMsDefaultsRoundTripsAndABadOneNamesTheField) {
  const std::string base = "name: j\ntrainer: T\nsteps: 1\ndata: {numSamples: 4, globalBatch: 2}\n";
  auto spec = ParseJobSpec(base);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->step_call_ms, 50);
  spec = ParseJobSpec(base + "stepCallMs: 0\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->step_call_ms, 0);
  auto again = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->step_call_ms, 0);
  for (const char* bad : {"stepCallMs: -5\n", "stepCallMs: soon\n", "stepCallMs: .nan\n"}) {
    auto refused = ParseJobSpec(base + bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("stepCallMs"), std::string::npos) << refused.status();
  }
}

TEST(JobSpecTest, CheckpointAtEndRoundTripsAndNeedsADir) {
  const std::string base = "name: j\ntrainer: T\nsteps: 1\ndata: {numSamples: 4, globalBatch: 2}\n";
  auto spec = ParseJobSpec(base + "checkpoint: {dir: /tmp/c, atEnd: true}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->checkpoint_at_end);
  EXPECT_EQ(spec->checkpoint_interval, 0);
  auto again = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->checkpoint_at_end);
  for (const char* bad : {"checkpoint: {atEnd: true}\n", "checkpoint: {dir: /c, atEnd: 2}\n"}) {
    auto refused = ParseJobSpec(base + bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("atEnd"), std::string::npos) << refused.status();
  }
}

TEST(JobSpecTest, TheControllerLeaseDefaultsToOneAndAHalfSilencesWhileTheProbeIsOn) {
  const std::string base = "name: j\ntrainer: T\nsteps: 1\ndata: {numSamples: 4, globalBatch: 2}\n";
  struct Case {
    const char* hang;
    double lease_s;
  } cases[] = {
      {"", 1.5},                                                     // 300 s timeout, 1 s silence
      {"hang: {silentSeconds: 0}\n", 10},                            // probe off: ≤ 10 s
      {"hang: {timeoutSeconds: 8, silentSeconds: 0}\n", 4},          // half the timeout
      {"hang: {timeoutSeconds: 2}\n", 1},                            // half the timeout
      {"hang: {silentSeconds: 3}\n", 4.5},                           // 1.5 × the silence
      {"hang: {silentSeconds: 0.2}\n", 1},                           // but not under 1 s
      {"hang: {silentSeconds: 1, controllerLeaseSeconds: 7}\n", 7},  // as set
  };
  for (const auto& c : cases) {
    auto spec = ParseJobSpec(base + c.hang);
    ASSERT_TRUE(spec.ok()) << c.hang << spec.status();
    EXPECT_DOUBLE_EQ(spec->ControllerLeaseSeconds(), c.lease_s) << c.hang;
  }
}

// Found by fuzz/job_spec_fuzzer.cc (fuzz/corpus/job_spec/config-value-with-carriage-return):
// a config value ending in a carriage return was printed as a plain scalar and read back
// without it.
TEST(JobSpecTest, TextWithControlCharactersRoundTrips) {
  const std::string base = "name: j\ntrainer: T\nsteps: 1\ndata: {numSamples: 4, globalBatch: 2}\n";
  auto spec = ParseJobSpec(base +
                           "checkpoint: {dir: \"/ck\\tpt\"}\n"
                           "config: {k: 'quote\r', \"tab\\tkey\": \"a\\tb \"}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->config.at("k"), "quote\r");
  auto again = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->config, spec->config);
  EXPECT_EQ(again->checkpoint_dir, "/ck\tpt");
  EXPECT_EQ(JobSpecToYaml(*again), JobSpecToYaml(*spec));
}

// Found by fuzz/job_spec_fuzzer.cc (fuzz/corpus/job_spec/config-key-of-nul-bytes): a key of
// 300 NUL bytes printed as "\x00..." is longer than the 1,024 characters YAML reads as a key
// on its own line, so the printed spec did not parse back ("illegal map value"). 256 is the
// fewest that do not fit: 1,026 characters with the quotes.
TEST(JobSpecTest, LongKeysRoundTrip) {
  const std::string base = "name: j\ntrainer: T\nsteps: 1\ndata: {numSamples: 4, globalBatch: 2}\n";
  std::string nuls;
  for (int i = 0; i < 256; ++i) nuls += "\\0";
  const std::string plain(2000, 'k');
  // The long plain key is given explicitly ("? key"): as "key: value" YAML would refuse it.
  auto spec =
      ParseJobSpec(absl::StrCat(base, "config:\n  \"", nuls, "\": a\n  ? ", plain,
                                "\n  : b\n  short: c\nresources:\n  ? ", plain, "\n  : 1\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->config.size(), 3u);
  EXPECT_EQ(spec->config.at(std::string(256, '\0')), "a");
  const std::string printed = JobSpecToYaml(*spec);
  EXPECT_NE(printed.find("\n  short: c"), std::string::npos) << printed;
  EXPECT_NE(printed.find("\nconfig:\n"), std::string::npos) << printed;
  auto again = ParseJobSpec(printed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->config, spec->config);
  EXPECT_EQ(again->resources, spec->resources);
  EXPECT_EQ(JobSpecToYaml(*again), printed);
}

// A trainer-driven loop's call that ran no work (its end-of-epoch commit, 1 ms) must not size
// the next call at 16 steps, nor put its probe 16 times later: the typical step of the last
// calls holds through one fast call, and through one slow call (the first after a resize).
TEST(StepPaceTest, OneFastOrSlowCallDoesNotMoveTheTypicalStep) {
  EXPECT_EQ(TypicalStepMs({}), 0);
  EXPECT_EQ(TypicalStepMs({75}), 75);
  EXPECT_EQ(TypicalStepMs({75, 76, 74, 1}), 74.5);
  EXPECT_EQ(TypicalStepMs({75, 76, 1, 74, 75}), 75);
  EXPECT_EQ(TypicalStepMs({2000, 75, 76, 74, 75}), 75);
  // A pace that really changed wins once it is most of the history.
  EXPECT_EQ(TypicalStepMs({75, 75, 30, 30, 30}), 30);
}

}  // namespace
}  // namespace phalanx::elastic
