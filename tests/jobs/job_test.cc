// `phalanx job`: drivers submitted to the head, their logs and states, stop, GCS restarts,
// bad input, and elastic jobs from a YAML spec. Real daemons started by `phalanx start`, real
// drivers, real signals.
//
// This binary is also a driver for one test: with PHALANX_TEST_DRIVER=hold-actor it creates
// a Counter actor, prints its pid and waits (see main() at the bottom).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "actors/api.h"
#include "base/files.h"
#include "base/process.h"
#include "base/system.h"
#include "base/tls.h"
#include "client/gcs_client.h"
#include "gtest/gtest.h"
#include "tests/actors/test_actors.h"
#include "tests/testing/test_util.h"
#include "worker/worker_host.h"

namespace phalanx {
namespace {

using testing::CommandResult;
using testing::RunCommand;

class JobTest : public ::testing::Test {
 protected:
  void SetUp() override { StartHead(); }

  void StartHead(std::vector<std::pair<std::string, std::string>> env = {}) {
    auto head = Phalanx({"start", "--head", "--port", absl::StrCat(port_), "--node-ip-address",
                         "127.0.0.1", "--num-cpus", "2"},
                        std::move(env));
    ASSERT_EQ(head.exit_code, 0) << head.output;
    session_ = *ReadLink(root_.path() + "/session_latest");
  }

  void TearDown() override {
    if (restarted_gcs_ > 0) ::kill(restarted_gcs_, SIGKILL);
    Phalanx({"stop", "--force"});
    if (restarted_gcs_ > 0) WaitProcessGone(restarted_gcs_, absl::Seconds(5));
    EXPECT_TRUE(testing::FindProcesses(root_.path()).empty());
  }

  static absl::StatusOr<std::string> ReadLink(const std::string& path) {
    char buf[4096];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) return absl::NotFoundError(path);
    return std::string(buf, static_cast<size_t>(n));
  }

  CommandResult Phalanx(std::vector<std::string> args,
                        std::vector<std::pair<std::string, std::string>> env = {},
                        absl::Duration timeout = absl::Seconds(60)) {
    args.insert(args.begin(), testing::BinDir() + "/phalanx");
    env.emplace_back("PHALANX_TMPDIR", root_.path());
    env.emplace_back("PHALANX_ADDRESS", "");
    env.emplace_back("PHALANX_TOKEN", "");
    return RunCommand(args, env, timeout);
  }

  std::string StatusOf(const std::string& job) { return Phalanx({"job", "status", job}).output; }

  bool WaitState(const std::string& job, const std::string& state, absl::Duration timeout) {
    return testing::WaitFor(
        [&] { return absl::StrContains(StatusOf(job), absl::StrCat(": ", state)); }, timeout);
  }

  pid_t GcsPid() {
    auto text = ReadFile(session_ + "/pids/gcs.pid");
    pid_t pid = 0;
    if (text.ok()) {
      std::vector<std::string> parts = absl::StrSplit(*text, ' ');
      (void)absl::SimpleAtoi(parts[0], &pid);
    }
    return pid;
  }

  // kill -9 of the GCS, then the same command line again (as an operator would).
  void RestartGcsAfterKill9() {
    pid_t old = restarted_gcs_ > 0 ? restarted_gcs_ : GcsPid();
    ASSERT_GT(old, 0);
    ::kill(old, SIGKILL);
    ASSERT_TRUE(WaitProcessGone(old, absl::Seconds(5)));
    std::vector<std::string> argv =
        absl::StrSplit(*ReadFile(session_ + "/gcs.args"), '\n', absl::SkipEmpty());
    SpawnOptions spawn;
    spawn.argv = argv;
    spawn.stdout_path = session_ + "/logs/gcs.out";
    spawn.new_session = true;
    auto pid = Spawn(spawn);
    ASSERT_TRUE(pid.ok()) << pid.status();
    restarted_gcs_ = *pid;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          return Phalanx({"job", "list"}).exit_code == 0;
        },
        absl::Seconds(20)));
  }

  testing::TempDir root_;
  int port_ = FreePort();
  std::string session_;
  pid_t restarted_gcs_ = -1;
};

TEST_F(JobTest, ADriverThatExitsZeroSucceedsAndItsOutputIsInTheLogs) {
  auto run = Phalanx({"job", "submit", "--submission-id", "hello", "--", "bash", "-c",
                      "echo hello-from-the-job; echo to-stderr >&2; echo $PHALANX_JOB_ID"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "hello-from-the-job")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "Job hello SUCCEEDED (exit code 0)")) << run.output;
  std::string status = StatusOf("hello");
  EXPECT_TRUE(absl::StrContains(status, "job hello: SUCCEEDED")) << status;
  EXPECT_TRUE(absl::StrContains(status, "exit code 0")) << status;
  auto logs = Phalanx({"job", "logs", "hello"});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_EQ(logs.output, "hello-from-the-job\nto-stderr\nhello\n");
}

TEST_F(JobTest, ExitCodeThreeIsFailedWithThatCode) {
  auto run = Phalanx(
      {"job", "submit", "--submission-id", "three", "--", "bash", "-c", "echo failing; exit 3"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "Job three FAILED (exit code 3)")) << run.output;
  std::string status = StatusOf("three");
  EXPECT_TRUE(absl::StrContains(status, "job three: FAILED")) << status;
  EXPECT_TRUE(absl::StrContains(status, "exit code 3")) << status;
  auto list = Phalanx({"job", "list"});
  EXPECT_TRUE(absl::StrContains(list.output, "FAILED")) << list.output;
}

TEST_F(JobTest, StoppingALongJobLeavesNoProcess) {
  // The driver ignores SIGTERM (so the grace period runs out) and has a child of its own.
  std::string marker = absl::StrCat("sleep 97.", getpid());
  auto submit =
      Phalanx({"job", "submit", "--no-wait", "--submission-id", "long", "--", "bash", "-c",
               absl::StrCat("trap 'echo got-term' TERM; ", marker, " & wait; ", marker, " & wait; ",
                            marker)});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  ASSERT_TRUE(WaitState("long", "RUNNING", absl::Seconds(10))) << StatusOf("long");
  ASSERT_TRUE(
      testing::WaitFor([&] { return !testing::FindProcesses(marker).empty(); }, absl::Seconds(10)));
  auto stop = Phalanx({"job", "stop", "--grace", "1", "long"});
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  EXPECT_TRUE(absl::StrContains(stop.output, "Job long STOPPED")) << stop.output;
  EXPECT_TRUE(absl::StrContains(StatusOf("long"), "job long: STOPPED")) << StatusOf("long");
  EXPECT_TRUE(
      testing::WaitFor([&] { return testing::FindProcesses(marker).empty(); }, absl::Seconds(5)));
  EXPECT_TRUE(absl::StrContains(Phalanx({"job", "logs", "long"}).output, "got-term"));
  // Stopping it again says so.
  auto again = Phalanx({"job", "stop", "long"});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(again.output, "had already ended: STOPPED")) << again.output;
}

// A caller with the token writes a job record that names another process as the runner, a
// file outside the job's dir as its log, and another command: the GCS keeps its own values,
// so StopJob signals only the job's runner and JobLogs reads only the job's log.
TEST_F(JobTest, AJobRecordFromACallerCannotPointStopOrLogsElsewhere) {
  std::string marker = absl::StrCat("sleep 96.", getpid());
  auto submit = Phalanx({"job", "submit", "--no-wait", "--submission-id", "mine", "--", "bash",
                         "-c", absl::StrCat("echo driver-output; ", marker)});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  ASSERT_TRUE(WaitState("mine", "RUNNING", absl::Seconds(10))) << StatusOf("mine");
  testing::ChildProcess decoy({"/bin/sleep", "95"}, root_.path() + "/decoy.log");
  std::string secret_file = root_.path() + "/not-a-log";
  ASSERT_TRUE(WriteFile(secret_file, "private-bytes\n").ok());

  auto address = ReadFile(session_ + "/address");
  auto token = ReadFile(session_ + "/token");
  ASSERT_TRUE(address.ok() && token.ok());
  ASSERT_TRUE(rpc::UseTls(session_ + "/tls").ok());
  auto gcs = gcs::GcsClient::Connect({std::string(absl::StripAsciiWhitespace(*address)),
                                      std::string(absl::StripAsciiWhitespace(*token))});
  ASSERT_TRUE(gcs.ok()) << gcs.status();
  auto stored = (*gcs)->GetJob("mine");
  ASSERT_TRUE(stored.ok()) << stored.status();
  rpc::JobInfo forged = *stored;
  forged.set_runner_pid(decoy.pid());
  forged.set_log_path(secret_file);
  forged.clear_entrypoint();
  forged.add_entrypoint("rm");
  forged.set_message("a message the controller may set");
  forged.set_controller_actor_id("not-the-controller");
  ASSERT_TRUE((*gcs)->UpdateJob(forged).ok());
  auto after = (*gcs)->GetJob("mine");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->runner_pid(), stored->runner_pid());
  EXPECT_EQ(after->log_path(), stored->log_path());
  EXPECT_EQ(after->entrypoint(0), "bash");
  EXPECT_EQ(after->controller_actor_id(), stored->controller_actor_id());
  EXPECT_EQ(after->message(), "a message the controller may set");

  // A record new to the GCS gets none of those fields, and an id that is no id is refused.
  rpc::JobInfo fresh;
  fresh.set_job_id("fresh");
  fresh.set_runner_pid(decoy.pid());
  fresh.set_log_path(secret_file);
  ASSERT_TRUE((*gcs)->UpdateJob(fresh).ok());
  EXPECT_EQ((*gcs)->GetJob("fresh")->runner_pid(), 0);
  EXPECT_EQ((*gcs)->GetJob("fresh")->log_path(), "");
  fresh.set_job_id("../../outside");
  auto refused = (*gcs)->UpdateJob(fresh);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "UpdateJob: job_id")) << refused;

  auto logs = Phalanx({"job", "logs", "mine"});
  EXPECT_TRUE(absl::StrContains(logs.output, "driver-output")) << logs.output;
  EXPECT_FALSE(absl::StrContains(logs.output, "private-bytes")) << logs.output;
  auto stop = Phalanx({"job", "stop", "--grace", "1", "mine"});
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  EXPECT_TRUE(
      testing::WaitFor([&] { return testing::FindProcesses(marker).empty(); }, absl::Seconds(5)));
  EXPECT_TRUE(ProcessAlive(decoy.pid()));
}

TEST_F(JobTest, StoppingADriverKillsTheActorsItCreated) {
  // This test binary as the driver: it creates a Counter actor and waits.
  auto submit = Phalanx({"job", "submit", "--no-wait", "--submission-id", "owner", "--env",
                         "PHALANX_TEST_DRIVER=hold-actor", "--", testing::BinDir() + "/job_test"});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  pid_t actor_pid = 0;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        std::string logs = Phalanx({"job", "logs", "owner"}).output;
        size_t at = logs.find("actor pid ");
        if (at == std::string::npos) return false;
        std::string rest = logs.substr(at + 10);
        return absl::SimpleAtoi(rest.substr(0, rest.find('\n')), &actor_pid);
      },
      absl::Seconds(30)))
      << Phalanx({"job", "logs", "owner"}).output;
  ASSERT_TRUE(ProcessAlive(actor_pid));
  auto stop = Phalanx({"job", "stop", "--grace", "1", "owner"});
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  EXPECT_TRUE(testing::WaitFor([&] { return !ProcessAlive(actor_pid); }, absl::Seconds(10)))
      << "the job's actor (pid " << actor_pid << ") outlived the job";
}

TEST_F(JobTest, WorkingDirFilesReachTheJob) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteFile(dir.path() + "/data.txt", "the-data\n").ok());
  ASSERT_TRUE(MakeDirs(dir.path() + "/sub").ok());
  ASSERT_TRUE(WriteFile(dir.path() + "/sub/more.txt", "more-data\n").ok());
  ASSERT_TRUE(
      WriteFile(dir.path() + "/run.sh", "#!/bin/sh\ncat data.txt sub/more.txt\n", 0755).ok());
  auto run = Phalanx(
      {"job", "submit", "--working-dir", dir.path(), "--env", "GREETING=hi", "--", "./run.sh"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "the-data\nmore-data\n")) << run.output;
  auto env = Phalanx(
      {"job", "submit", "--env", "GREETING=hi", "--", "bash", "-c", "echo greeting=$GREETING"});
  EXPECT_TRUE(absl::StrContains(env.output, "greeting=hi")) << env.output;
}

TEST_F(JobTest, NoWaitThenFollowTheLogs) {
  auto submit = Phalanx({"job", "submit", "--no-wait", "--submission-id", "ticks", "--", "bash",
                         "-c", "for i in 1 2 3 4 5; do echo tick-$i; sleep 0.3; done"});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  EXPECT_TRUE(absl::StrContains(submit.output, "phalanx job logs --follow ticks"));
  auto follow = Phalanx({"job", "logs", "--follow", "ticks"});
  EXPECT_EQ(follow.exit_code, 0) << follow.output;
  // The progress lines ("[job ticks] RUNNING …", on stderr) may fall between log lines.
  std::string log;
  for (absl::string_view line : absl::StrSplit(follow.output, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "[job ")) absl::StrAppend(&log, line, "\n");
  }
  EXPECT_TRUE(absl::StrContains(log, "tick-1\ntick-2\ntick-3\ntick-4\ntick-5\n")) << log;
  EXPECT_TRUE(absl::StrContains(follow.output, "[job ticks] RUNNING")) << follow.output;
  EXPECT_TRUE(absl::StrContains(follow.output, "Job ticks SUCCEEDED")) << follow.output;
}

TEST_F(JobTest, AJobRunsOnThroughAGcsKill9AndEveryJobIsKept) {
  auto first = Phalanx({"job", "submit", "--submission-id", "before", "--", "true"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto submit = Phalanx({"job", "submit", "--no-wait", "--submission-id", "through", "--", "bash",
                         "-c", "for i in 1 2 3 4 5 6 7 8; do echo tick-$i; sleep 0.4; done"});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  ASSERT_TRUE(WaitState("through", "RUNNING", absl::Seconds(10)));
  RestartGcsAfterKill9();
  // Still running (or already done) after the restart, and it finishes SUCCEEDED.
  std::string during = StatusOf("through");
  EXPECT_TRUE(absl::StrContains(during, ": RUNNING") || absl::StrContains(during, ": SUCCEEDED"))
      << during;
  EXPECT_TRUE(WaitState("through", "SUCCEEDED", absl::Seconds(20))) << StatusOf("through");
  auto logs = Phalanx({"job", "logs", "through"});
  EXPECT_TRUE(absl::StrContains(logs.output, "tick-1\n") &&
              absl::StrContains(logs.output, "tick-8\n"))
      << logs.output;
  auto list = Phalanx({"job", "list"});
  EXPECT_TRUE(absl::StrContains(list.output, "before")) << list.output;
  EXPECT_TRUE(absl::StrContains(list.output, "through")) << list.output;
}

TEST_F(JobTest, BadInputGetsClearErrors) {
  auto no_entrypoint = Phalanx({"job", "submit"});
  EXPECT_EQ(no_entrypoint.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(no_entrypoint.output, "no entrypoint: put the command after `--`"))
      << no_entrypoint.output;

  for (const char* verb : {"status", "logs", "stop"}) {
    auto unknown = Phalanx({"job", verb, "no-such-job"});
    EXPECT_EQ(unknown.exit_code, 1) << verb;
    EXPECT_TRUE(absl::StrContains(unknown.output, "no job 'no-such-job'")) << unknown.output;
  }

  auto wrong_token = Phalanx({"job", "submit", "--token", "not-the-token", "--", "true"});
  EXPECT_EQ(wrong_token.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(wrong_token.output, "wrong cluster token")) << wrong_token.output;

  // A spec file that never ends: the CLI reads no more than the spec limit (before, it read
  // until std::bad_alloc).
  auto endless = Phalanx({"job", "submit", "-f", "/dev/zero"}, {}, absl::Seconds(30));
  EXPECT_EQ(endless.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(endless.output, "a job spec is at most 256 KiB")) << endless.output;

  // A byte that is not UTF-8: named with its line, column and field, before anything is sent
  // (before, a protobuf log line named none of them).
  testing::TempDir specs;
  ASSERT_TRUE(WriteFile(specs.path() + "/latin1.yaml",
                        "name: x\ntrainer: T\nconfig:\n  city: \"Z\xfcrich\"\n")
                  .ok());
  auto latin1 = Phalanx({"job", "submit", "-f", specs.path() + "/latin1.yaml"});
  EXPECT_EQ(latin1.exit_code, 1);
  EXPECT_TRUE(
      absl::StrContains(latin1.output, "not UTF-8 at line 4, column 11 (byte 0xfc) in 'city'"))
      << latin1.output;

  auto bad_env = Phalanx({"job", "submit", "--env", "NOVALUE", "--", "true"});
  EXPECT_TRUE(absl::StrContains(bad_env.output, "--env 'NOVALUE': write it as NAME=VALUE"))
      << bad_env.output;

  ASSERT_EQ(Phalanx({"job", "submit", "--submission-id", "taken", "--", "true"}).exit_code, 0);
  auto taken = Phalanx({"job", "submit", "--submission-id", "taken", "--", "true"});
  EXPECT_TRUE(absl::StrContains(taken.output, "'taken' is taken by a job that is SUCCEEDED"))
      << taken.output;

  // A working dir over the limit, refused by the client (its limit) ...
  testing::TempDir big;

  {
    FILE* f = std::fopen((big.path() + "/blob").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
    ASSERT_EQ(::truncate((big.path() + "/blob").c_str(), 3 << 20), 0);  // 3 MiB, sparse
  }
  auto too_large = Phalanx({"job", "submit", "--working-dir", big.path(), "--", "true"},
                           {{"PHALANX_MAX_WORKING_DIR_MB", "2"}});
  EXPECT_EQ(too_large.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(too_large.output, "holds 3.0 MiB, over the limit of 2.0 MiB"))
      << too_large.output;
  // ... and by the head (its limit), whatever the client's.
  Phalanx({"stop", "--force"});
  StartHead({{"PHALANX_MAX_WORKING_DIR_MB", "2"}});
  auto refused = Phalanx({"job", "submit", "--working-dir", big.path(), "--", "true"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(refused.output, "over the limit of 2.0 MiB")) << refused.output;

  // A job whose command cannot run fails with the reason in its log.
  auto missing = Phalanx({"job", "submit", "--submission-id", "nocmd", "--", "no-such-program-x"});
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(absl::StrContains(missing.output, "no-such-program-x")) << missing.output;
  EXPECT_TRUE(absl::StrContains(StatusOf("nocmd"), "exit code 127")) << StatusOf("nocmd");

  // An elastic spec with a mistake, refused before anything starts.
  ASSERT_TRUE(WriteFile(specs.path() + "/bad.yaml",
                        "name: x\ntrainer: T\nreplicas: 3\nminReplicas: 5\nmaxReplicas: 4\n")
                  .ok());
  auto bad_spec = Phalanx({"job", "submit", "-f", specs.path() + "/bad.yaml"});
  EXPECT_EQ(bad_spec.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(bad_spec.output, "minReplicas")) << bad_spec.output;
}

TEST_F(JobTest, AnElasticJobFromAYamlSpecRunsToTheEnd) {
  testing::TempDir specs;
  std::string spec = absl::StrCat(R"(name: yamljob
trainer: RegressionTrainer
codePath: )",
                                  testing::BinDir(), R"(/elastic_regression
replicas: 2
minReplicas: 1
maxReplicas: 2
resources: {CPU: 0.5}
data: {numSamples: 256, globalBatch: 32, seed: 5}
steps: 40
config: {stepMs: "5", dims: "8"}
)");
  ASSERT_TRUE(WriteFile(specs.path() + "/job.yaml", spec).ok());
  auto run = Phalanx({"job", "submit", "-f", specs.path() + "/job.yaml"}, {}, absl::Seconds(90));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "[condition] Running")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "SUCCEEDED")) << run.output;
  auto list = Phalanx({"job", "list"});
  EXPECT_TRUE(absl::StrContains(list.output, "elastic")) << list.output;
  EXPECT_TRUE(absl::StrContains(list.output, "yamljob: world size 2, step 40")) << list.output;
  // Without codePath the head cannot know which program hosts the trainer.
  ASSERT_TRUE(WriteFile(specs.path() + "/nocode.yaml",
                        "name: n\ntrainer: RegressionTrainer\nreplicas: 1\nsteps: 3\n"
                        "data: {numSamples: 64, globalBatch: 8}\n")
                  .ok());
  auto no_code = Phalanx({"job", "submit", "-f", specs.path() + "/nocode.yaml"});
  EXPECT_EQ(no_code.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(no_code.output, "codePath: empty")) << no_code.output;
}

// A wrong program fails fast and says why: a codePath that exits at once (else its
// controller is restarted thousands of times, and `job stop` cannot end it), and a trainer
// class the program does not register (else the job sits RUNNING at world size 0).
TEST_F(JobTest, AWrongProgramOrTrainerFailsTheJobAtOnceNamingIt) {
  testing::TempDir specs;
  const std::string rest =
      "replicas: 2\nresources: {CPU: 0.5}\ndata: {numSamples: 64, globalBatch: 8}\nsteps: 10\n";
  ASSERT_TRUE(WriteFile(specs.path() + "/true.yaml",
                        "name: truejob\ntrainer: RegressionTrainer\ncodePath: /bin/true\n" + rest)
                  .ok());
  absl::Time began = absl::Now();
  auto exits = Phalanx({"job", "submit", "-f", specs.path() + "/true.yaml"}, {}, absl::Seconds(90));
  EXPECT_EQ(exits.exit_code, 1) << exits.output;
  EXPECT_TRUE(absl::StrContains(exits.output, "3 times in a row (last: EXITED(0))"))
      << exits.output;
  EXPECT_TRUE(absl::StrContains(exits.output, "/bin/true is not a Phalanx program"))
      << exits.output;
  std::printf("codePath /bin/true: FAILED %.1f s after submit\n",
              absl::ToDoubleSeconds(absl::Now() - began));

  ASSERT_TRUE(WriteFile(specs.path() + "/nosuch.yaml",
                        absl::StrCat("name: nosuch\ntrainer: NoSuchTrainer\ncodePath: ",
                                     testing::BinDir(), "/elastic_regression\n", rest))
                  .ok());
  began = absl::Now();
  auto unknown =
      Phalanx({"job", "submit", "-f", specs.path() + "/nosuch.yaml"}, {}, absl::Seconds(90));
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_TRUE(absl::StrContains(unknown.output, "class NoSuchTrainer is not registered"))
      << unknown.output;
  EXPECT_TRUE(absl::StrContains(unknown.output, "registered: ElasticController, RegressionTrainer"))
      << unknown.output;
  std::printf("trainer NoSuchTrainer: FAILED %.1f s after submit\n",
              absl::ToDoubleSeconds(absl::Now() - began));
  // Nothing is left running (a controller that recorded its failure then ends itself).
  std::string actors;
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        actors = Phalanx({"list", "actors"}).output;
        return !absl::StrContains(actors, "ALIVE");
      },
      absl::Seconds(30)))
      << actors;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) {
  if (phalanx::worker::InWorkerMode()) phalanx::Init().IgnoreError();
  if (const char* mode = std::getenv("PHALANX_TEST_DRIVER");
      mode && std::string(mode) == "hold-actor") {
    // A driver submitted by StoppingADriverKillsTheActorsItCreated.
    if (auto s = phalanx::Init(); !s.ok()) {
      std::printf("Init: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    auto counter = phalanx::Actor<phalanx::testing::Counter>().Remote(0);
    if (!counter.ok()) return 1;
    (void)phalanx::Get(counter->Task(&phalanx::testing::Counter::Value).Remote());  // placed
    auto info = phalanx::GetActorInfo(*counter);
    std::printf("actor pid %d\n", info.ok() ? info->pid : -1);
    std::fflush(stdout);
    for (;;) ::pause();
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
