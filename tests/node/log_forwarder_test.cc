// The node's forwarding of what workers print (node/log_forwarder.h): new complete
// lines per read, the worker host's own log lines left out, the last words of a worker that
// ended, and long lines cut.
#include "node/log_forwarder.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace phalanx::node {
namespace {

class LogForwarderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phalanx-logs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Append(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::app) << text;
  }

  static std::vector<std::string> Lines(const rpc::LogLines& b) {
    return {b.lines().begin(), b.lines().end()};
  }

  std::string dir_;
};

TEST_F(LogForwarderTest, NewCompleteLinesOnlyAndNotTheHostsOwn) {
  const std::string path = dir_ + "/worker-a-0.log";
  LogForwarder f("10.0.0.2");
  LogForwarder::Source s{path, 42, "job1", "actor1", "Counter"};
  Append(path,
         "[2026-11-29 03:43:09.123] [worker 42] [info] actor ready at 10.0.0.2:5000\n"
         "hello\nworld\npart");
  auto batches = f.Collect({s});
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(Lines(batches[0]), (std::vector<std::string>{"hello", "world"}));
  EXPECT_EQ(batches[0].job_id(), "job1");
  EXPECT_EQ(batches[0].pid(), 42);
  EXPECT_EQ(batches[0].label(), "Counter");
  EXPECT_EQ(batches[0].node_ip(), "10.0.0.2");

  EXPECT_TRUE(f.Collect({s}).empty());  // nothing new; "part" is not ended
  Append(path, "ial line\n[not a log line] kept\n");
  batches = f.Collect({s});
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(Lines(batches[0]), (std::vector<std::string>{"partial line", "[not a log line] kept"}));
}

TEST_F(LogForwarderTest, AWorkerThatEndedGivesItsLastWordsOnce) {
  const std::string path = dir_ + "/worker-b-0.log";
  LogForwarder f("127.0.0.1");
  LogForwarder::Source s{path, 7, "job1", "actor2", ""};
  Append(path, "first\n");
  ASSERT_EQ(f.Collect({s}).size(), 1u);
  Append(path, "second\nno newline at the end");
  auto batches = f.Collect({});  // the worker is gone
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(Lines(batches[0]), (std::vector<std::string>{"second", "no newline at the end"}));
  EXPECT_TRUE(f.Collect({}).empty());
}

TEST_F(LogForwarderTest, SourcesWithoutAJobAreSkippedAndLongLinesAreCut) {
  const std::string path = dir_ + "/worker-c-0.log";
  LogForwarder f("127.0.0.1");
  Append(path, "idle worker output\n");
  EXPECT_TRUE(f.Collect({{path, 8, "", "", ""}}).empty());
  const std::string other = dir_ + "/worker-d-0.log";
  Append(other, std::string(kLogLineLimit + 100, 'x') + "\n");
  auto batches = f.Collect({{other, 9, "job2", "actor3", "Big"}});
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].lines_size(), 1);
  EXPECT_EQ(batches[0].lines(0).size(), kLogLineLimit + 3);  // and "…"
}

TEST_F(LogForwarderTest, HostLogLinesAreRecognizedByTheirShape) {
  EXPECT_TRUE(LogForwarder::IsHostLogLine("[2026-01-02 03:04:05.678] [node 1] [warn] x"));
  EXPECT_FALSE(LogForwarder::IsHostLogLine("[2026-01-02] something"));
  EXPECT_FALSE(LogForwarder::IsHostLogLine("hello"));
  EXPECT_FALSE(LogForwarder::IsHostLogLine(""));
}

}  // namespace
}  // namespace phalanx::node
