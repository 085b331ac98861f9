// The `phalanx` command end to end: real daemons, real Redis, real processes.
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/process.h"
#include "base/system.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

using testing::CommandResult;
using testing::RunCommand;

class CliTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Whatever a test left running is stopped, and nothing may remain.
    Phalanx({"stop", "--force"});
    EXPECT_TRUE(testing::FindProcesses(root_.path()).empty());
  }

  CommandResult Phalanx(std::vector<std::string> args,
                        std::vector<std::pair<std::string, std::string>> env = {}) {
    args.insert(args.begin(), testing::BinDir() + "/phalanx");
    env.emplace_back("PHALANX_TMPDIR", root_.path());
    env.emplace_back("PHALANX_ADDRESS", "");
    bool token_given = false;
    for (const auto& [k, v] : env) token_given |= k == "PHALANX_TOKEN";
    if (!token_given) env.emplace_back("PHALANX_TOKEN", "");
    return RunCommand(args, env, absl::Seconds(60));
  }

  std::string Latest() { return root_.path() + "/session_latest"; }

  testing::TempDir root_;
  int port_ = FreePort();
};

TEST_F(CliTest, HeadPlusSecondNodeStatusAndStop) {
  auto head = Phalanx({"start", "--head", "--port", absl::StrCat(port_), "--node-ip-address",
                       "127.0.0.1", "--num-cpus", "2", "--resources", R"({"accel": 1})"});
  ASSERT_EQ(head.exit_code, 0) << head.output;
  std::string address = absl::StrCat("127.0.0.1:", port_);
  struct stat st;
  ASSERT_EQ(::stat((Latest() + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string token(absl::StripAsciiWhitespace(*ReadFile(Latest() + "/token")));
  // The join command it prints keeps the token off the command line (`ps` shows those).
  EXPECT_NE(head.output.find("PHALANX_TOKEN=" + token + " phalanx start --address " + address),
            std::string::npos)
      << head.output;
  EXPECT_EQ(head.output.find("--token " + token), std::string::npos) << head.output;

  // A token given on the command line anyway works, with a warning.
  auto join = Phalanx({"start", "--address", address, "--token", token, "--node-ip-address",
                       "127.0.0.1", "--num-cpus", "3"});
  ASSERT_EQ(join.exit_code, 0) << join.output;
  EXPECT_NE(join.output.find("--token on a command line can be read by every user"),
            std::string::npos)
      << join.output;

  auto status = Phalanx({"status"});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("Nodes: 2 alive, 0 dead"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("0/5 CPU"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("0/1 accel"), std::string::npos) << status.output;

  // Every daemon the two sessions started, by pid.
  std::vector<pid_t> pids;
  for (const auto& session : ListDir(root_.path())) {
    if (session == "session_latest") continue;
    for (const auto& f : ListDir(root_.path() + "/" + session + "/pids")) {
      auto content = ReadFile(root_.path() + "/" + session + "/pids/" + f);
      std::vector<std::string> parts = absl::StrSplit(*content, ' ');
      pid_t pid;
      ASSERT_TRUE(absl::SimpleAtoi(parts[0], &pid)) << *content;
      pids.push_back(pid);
    }
  }
  ASSERT_EQ(pids.size(), 4u);  // redis, gcs, node (head) + node (joined)
  for (pid_t pid : pids) EXPECT_TRUE(ProcessAlive(pid));

  auto stop = Phalanx({"stop"});
  ASSERT_EQ(stop.exit_code, 0) << stop.output;
  EXPECT_NE(stop.output.find("Stopped 4 Phalanx processes"), std::string::npos) << stop.output;
  for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << "pid " << pid << " survived stop";
  EXPECT_TRUE(testing::FindProcesses(root_.path()).empty());
}

// The pid `phalanx stop` has on record for a daemon of the latest session.
pid_t RecordedPid(const std::string& session, const std::string& name) {
  auto content = ReadFile(session + "/pids/" + name + ".pid");
  pid_t pid = 0;
  if (content.ok()) {
    std::vector<std::string> parts = absl::StrSplit(*content, ' ');
    (void)absl::SimpleAtoi(parts[0], &pid);
  }
  return pid;
}

TEST_F(CliTest, StopFindsAGcsAndRedisStartedAgainByHand) {
  auto head = Phalanx({"start", "--head", "--port", absl::StrCat(port_), "--node-ip-address",
                       "127.0.0.1", "--num-cpus", "1"});
  ASSERT_EQ(head.exit_code, 0) << head.output;
  std::string session = Latest();
  // kill -9 of both, then each started again from its session files, as an operator would.
  std::vector<pid_t> old = {RecordedPid(session, "redis"), RecordedPid(session, "gcs")};
  for (pid_t pid : old) {
    ASSERT_GT(pid, 0);
    ::kill(pid, SIGKILL);
    ASSERT_TRUE(WaitProcessGone(pid, absl::Seconds(5)));
  }
  SpawnOptions redis;
  redis.argv = {"redis-server", session + "/redis.conf"};
  redis.new_session = true;
  SpawnOptions gcs;
  gcs.argv = absl::StrSplit(*ReadFile(session + "/gcs.args"), '\n', absl::SkipEmpty());
  gcs.stdout_path = session + "/logs/gcs.out";
  gcs.new_session = true;
  std::vector<pid_t> restarted;
  for (const auto* options : {&redis, &gcs}) {
    auto pid = Spawn(*options);
    ASSERT_TRUE(pid.ok()) << pid.status();
    restarted.push_back(*pid);
  }
  ASSERT_TRUE(
      testing::WaitFor([&] { return Phalanx({"status"}).exit_code == 0; }, absl::Seconds(20)))
      << Phalanx({"status"}).output << "\ngcs.out:\n"
      << ReadFile(session + "/logs/gcs.out").value_or("(none)") << "\ngcs.log:\n"
      << ReadFile(session + "/logs/gcs.log").value_or("(none)") << "\nredis.log:\n"
      << ReadFile(session + "/logs/redis.log").value_or("(none)")
      << "\nlogs: " << absl::StrJoin(ListDir(session + "/logs"), ", ");
  // Each recorded its own pid.
  EXPECT_EQ(RecordedPid(session, "redis"), restarted[0]);
  EXPECT_EQ(RecordedPid(session, "gcs"), restarted[1]);

  auto stop = Phalanx({"stop"});
  ASSERT_EQ(stop.exit_code, 0) << stop.output;
  EXPECT_NE(stop.output.find("Stopped 3 Phalanx processes"), std::string::npos) << stop.output;
  for (pid_t pid : restarted) EXPECT_TRUE(WaitProcessGone(pid, absl::Seconds(5))) << pid;
  EXPECT_TRUE(testing::FindProcesses(root_.path()).empty());
}

TEST_F(CliTest, BadInputGetsOneClearLine) {
  auto bad_json =
      Phalanx({"start", "--head", "--port", absl::StrCat(port_), "--resources", "{accel: 1"});
  EXPECT_EQ(bad_json.exit_code, 1);
  EXPECT_NE(bad_json.output.find("--resources: '{accel: 1' is not a JSON object"),
            std::string::npos)
      << bad_json.output;

  auto no_redis =
      Phalanx({"start", "--head", "--port", absl::StrCat(port_)}, {{"PATH", "/nonexistent"}});
  EXPECT_EQ(no_redis.exit_code, 1);
  EXPECT_NE(no_redis.output.find("redis-server is not on PATH"), std::string::npos)
      << no_redis.output;

  auto unreachable = Phalanx({"start", "--address", "127.0.0.1:1", "--token", "x"});
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_NE(unreachable.output.find("cannot reach the GCS at 127.0.0.1:1"), std::string::npos)
      << unreachable.output;

  auto not_an_address = Phalanx({"start", "--address", "nowhere", "--token", "x"});
  EXPECT_EQ(not_an_address.exit_code, 1);
  EXPECT_NE(not_an_address.output.find("is not HOST:PORT"), std::string::npos);

  auto no_session = Phalanx({"status"});
  EXPECT_EQ(no_session.exit_code, 1);
  EXPECT_NE(no_session.output.find("run `phalanx start --head` first"), std::string::npos)
      << no_session.output;

  // With a head running: its port is taken, and a wrong token is refused.
  auto head = Phalanx({"start", "--head", "--port", absl::StrCat(port_), "--node-ip-address",
                       "127.0.0.1", "--num-cpus", "1"});
  ASSERT_EQ(head.exit_code, 0) << head.output;
  auto again = Phalanx({"start", "--head", "--port", absl::StrCat(port_)});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.output.find(absl::StrCat("port ", port_, " is in use")), std::string::npos)
      << again.output;
  auto wrong_token =
      Phalanx({"start", "--address", absl::StrCat("127.0.0.1:", port_), "--token", "wrong"});
  EXPECT_EQ(wrong_token.exit_code, 1);
  EXPECT_NE(wrong_token.output.find("refused the token"), std::string::npos) << wrong_token.output;
  auto status_wrong = Phalanx({"status", "--token", "wrong"});
  EXPECT_EQ(status_wrong.exit_code, 1);
  EXPECT_NE(status_wrong.output.find("wrong cluster token"), std::string::npos)
      << status_wrong.output;
  // The failed commands did not disturb the running cluster.
  auto status = Phalanx({"status"});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("Nodes: 1 alive"), std::string::npos) << status.output;
}

// What a container entrypoint or srun needs: `start --block` stays up until SIGTERM and then
// stops what it started; the death of a daemon it started ends it with exit code 1.
TEST_F(CliTest, BlockStaysInTheForegroundAndStopsWhatItStartedOnSigtermOrADeath) {
  for (bool kill_gcs : {false, true}) {
    SCOPED_TRACE(kill_gcs ? "the GCS dies" : "SIGTERM");
    std::string log = root_.path() + (kill_gcs ? "/block2.log" : "/block1.log");
    testing::ChildProcess block(
        {testing::BinDir() + "/phalanx", "start", "--head", "--port", absl::StrCat(port_),
         "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--dashboard-port", "-1", "--block"},
        log, {{"PHALANX_TMPDIR", root_.path()}, {"PHALANX_ADDRESS", ""}, {"PHALANX_TOKEN", ""}});
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          return ReadFile(log).value_or("").find("Staying in the foreground") != std::string::npos;
        },
        absl::Seconds(60)))
        << ReadFile(log).value_or("");
    char* real = ::realpath(Latest().c_str(), nullptr);
    ASSERT_NE(real, nullptr);
    std::string session = real;
    ::free(real);
    pid_t gcs = RecordedPid(session, "gcs");
    ASSERT_TRUE(ProcessAlive(gcs));
    EXPECT_TRUE(block.alive());
    if (kill_gcs) {
      ::kill(gcs, SIGKILL);
    } else {
      block.Kill(SIGTERM);
    }
    int status = block.WaitExit(absl::Seconds(30));
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), kill_gcs ? 1 : 0) << ReadFile(log).value_or("");
    EXPECT_TRUE(testing::FindProcesses(session).empty()) << ReadFile(log).value_or("");
    port_ = FreePort();
  }
}

// A head given its token and a CA made beforehand (a Kubernetes Secret, say); a node joins
// trusting that CA's file, and a machine that runs the head finds the token by itself
// whichever of the head's addresses it is given.
TEST_F(CliTest, AGivenTokenAndCaAreUsedAndTheHeadsMachineFindsItsToken) {
  std::string ca = root_.path() + "/ca";
  auto made = Phalanx({"make-ca", ca});
  ASSERT_EQ(made.exit_code, 0) << made.output;
  std::string fingerprint = made.output.substr(made.output.find("fingerprint ") + 12, 64);
  EXPECT_EQ(Phalanx({"make-ca", ca}).exit_code, 1);  // never overwritten
  std::string token = "0123456789abcdef-token";
  // The head takes its token from the environment (a Kubernetes Secret), never from its
  // command line.
  auto head = Phalanx({"start", "--head", "--port", absl::StrCat(port_), "--node-ip-address",
                       "127.0.0.1", "--num-cpus", "1", "--ca-dir", ca},
                      {{"PHALANX_TOKEN", token}});
  ASSERT_EQ(head.exit_code, 0) << head.output;
  EXPECT_NE(head.output.find("PHALANX_TOKEN=" + token + " phalanx start --address 127.0.0.1:" +
                             absl::StrCat(port_) + " --ca-fingerprint " + fingerprint),
            std::string::npos)
      << head.output;
  std::string localhost = absl::StrCat("localhost:", port_);
  auto join = Phalanx({"start", "--address", localhost, "--num-cpus", "1"});
  ASSERT_EQ(join.exit_code, 0) << join.output;  // the token and CA of the local head
  testing::TempDir elsewhere;                   // a machine with no session of the cluster
  ASSERT_TRUE(WriteFile(elsewhere.path() + "/token", token + "\n").ok());
  auto trusted = RunCommand(
      {testing::BinDir() + "/phalanx", "start", "--address", absl::StrCat("127.0.0.1:", port_),
       "--token-file", elsewhere.path() + "/token", "--ca-dir", ca, "--num-cpus", "1"},
      {{"PHALANX_TMPDIR", elsewhere.path()}, {"PHALANX_TOKEN", ""}}, absl::Seconds(60));
  ASSERT_EQ(trusted.exit_code, 0) << trusted.output;
  auto status = Phalanx({"status", "--address", localhost});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("Nodes: 3 alive"), std::string::npos) << status.output;
  RunCommand({testing::BinDir() + "/phalanx", "stop"}, {{"PHALANX_TMPDIR", elsewhere.path()}},
             absl::Seconds(60));
  EXPECT_TRUE(testing::FindProcesses(elsewhere.path()).empty());

  auto short_token =
      Phalanx({"start", "--head", "--port", absl::StrCat(FreePort()), "--token", "short"});
  EXPECT_EQ(short_token.exit_code, 1);
  EXPECT_NE(short_token.output.find("--token is 5 characters; give at least 16"), std::string::npos)
      << short_token.output;
  auto no_ca = Phalanx(
      {"start", "--head", "--port", absl::StrCat(FreePort()), "--ca-dir", root_.path() + "/none"});
  EXPECT_EQ(no_ca.exit_code, 1);
  EXPECT_NE(no_ca.output.find("--ca-dir: no "), std::string::npos) << no_ca.output;
  auto threshold = Phalanx(
      {"start", "--head", "--port", absl::StrCat(FreePort()), "--memory-usage-threshold", "0"});
  EXPECT_EQ(threshold.exit_code, 1);
  EXPECT_NE(threshold.output.find("--memory-usage-threshold 0 is not a fraction"),
            std::string::npos)
      << threshold.output;
}

TEST_F(CliTest, ASessionRootOfAnotherUserIsRefusedByEveryCommandThatUsesIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown the session root to another user";
  ASSERT_EQ(::chown(root_.path().c_str(), 65534, 65534), 0);
  std::vector<std::vector<std::string>> commands = {
      {"start", "--head", "--port", absl::StrCat(port_), "--node-ip-address", "127.0.0.1"},
      {"start", "--address", "127.0.0.1:1", "--token", "x"},
      {"status"},
      {"job", "list"},
      {"stop"},
  };
  for (const auto& args : commands) {
    auto run = Phalanx(args);
    EXPECT_EQ(run.exit_code, 1) << args[0] << ": " << run.output;
    EXPECT_NE(run.output.find(absl::StrCat("the session root ", root_.path(), " is owned by ")),
              std::string::npos)
        << run.output;
    EXPECT_NE(run.output.find("(uid 65534), not by you"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("set PHALANX_TMPDIR"), std::string::npos) << run.output;
  }
  EXPECT_TRUE(ListDir(root_.path()).empty());  // nothing was started or written there
  ASSERT_EQ(::chown(root_.path().c_str(), 0, 0), 0);
}

}  // namespace
}  // namespace phalanx
