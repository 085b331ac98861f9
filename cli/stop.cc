// `phalanx stop`: stops every process that this machine's sessions started.
#include <signal.h>

#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "base/process.h"
#include "base/session.h"
#include "cli/commands.h"

namespace phalanx::cli {
namespace {

// Node managers first (they stop their workers and tell the GCS), then drivers, then the
// GCS, then Redis.
int StopOrder(const std::string& name) {
  if (name == "node") return 0;
  if (name.rfind("worker", 0) == 0) return 1;
  if (name.rfind("driver", 0) == 0 || name.rfind("job", 0) == 0) return 2;
  if (name == "gcs") return 3;
  if (name == "redis") return 4;
  return 2;
}

}  // namespace

int RunStop(const StopOptions& options) {
  auto sessions = AllSessions();
  if (!sessions.ok()) {
    std::cerr << "phalanx stop: " << sessions.status().message() << "\n";
    return 1;
  }
  return StopSessions(*sessions, options) ? 0 : 1;
}

bool StopSessions(const std::vector<std::string>& sessions, const StopOptions& options) {
  std::vector<PidEntry> entries;
  for (const auto& session : sessions) {
    for (auto& e : ReadPidFiles(session)) entries.push_back(std::move(e));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const PidEntry& a, const PidEntry& b) {
    return StopOrder(a.name) < StopOrder(b.name);
  });
  int stopped = 0, failed = 0;
  absl::Duration grace = options.force ? absl::ZeroDuration() : absl::Seconds(options.grace_s);
  for (int order = 0; order <= 4; ++order) {
    // Signal every process of this rank at once, then wait for them together.
    std::vector<PidEntry> batch;
    for (const auto& e : entries) {
      if (StopOrder(e.name) != order) continue;
      if (PidEntryAlive(e)) {
        batch.push_back(e);
      } else {
        ::unlink(e.path.c_str());
      }
    }
    for (const auto& e : batch) ::kill(e.pid, options.force ? SIGKILL : SIGTERM);
    for (const auto& e : batch) {
      bool gone = TerminateProcess(e.pid, grace);
      if (gone) {
        ++stopped;
        ::unlink(e.path.c_str());
      } else {
        ++failed;
        std::cerr << "phalanx stop: " << e.name << " (pid " << e.pid << ") did not stop\n";
      }
    }
  }
  if (stopped == 0 && failed == 0) {
    std::cout << "No Phalanx processes are running on this machine.\n";
  } else {
    std::cout << "Stopped " << stopped << " Phalanx process" << (stopped == 1 ? "" : "es") << ".\n";
  }
  return failed == 0;
}

}  // namespace phalanx::cli
