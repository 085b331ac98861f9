// What the node's workers print, for the drivers of their jobs (Ray's log_to_driver): each
// worker's log file is read from where the last read stopped, and its new complete lines
// become a LogLines message (the GCS publishes it on the LOGS channel). The worker host's
// own log lines (the project's spdlog pattern) are left out: only what the program printed
// goes. Not thread-safe: one thread collects.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/proto/gcs.pb.h"

namespace phalanx::node {

// At most this much of one file is read per collection; the rest comes at the next.
inline constexpr int64_t kLogReadLimit = 64 << 10;
// A longer line is cut at this length (with "…" added).
inline constexpr size_t kLogLineLimit = 8 << 10;

class LogForwarder {
 public:
  struct Source {
    std::string path;  // the worker's log file (its stdout and stderr)
    pid_t pid = 0;
    std::string job_id;
    std::string actor_id;
    std::string label;  // the actor's class ("" for a task worker)
  };

  explicit LogForwarder(std::string node_ip) : node_ip_(std::move(node_ip)) {}

  // The new lines of each of `live`, and the last lines of a source that was live at the
  // previous call and is not now (its worker ended); one LogLines per source that has any.
  std::vector<rpc::LogLines> Collect(const std::vector<Source>& live);

  // Whether `line` is one of the worker host's own log lines rather than the program's.
  static bool IsHostLogLine(const std::string& line);

 private:
  struct Tail {
    Source source;
    int64_t offset = 0;
    std::string partial;  // a line not ended yet
  };
  // Reads `tail`'s new bytes; appends its complete lines to `out` (all of them, an unended
  // last one too, when `last`).
  static void Read(Tail* tail, bool last, std::vector<std::string>* out);

  std::string node_ip_;
  std::map<std::string, Tail> tails_;  // by path
};

}  // namespace phalanx::node
