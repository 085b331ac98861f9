#include "node/log_forwarder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <set>
#include <utility>

namespace phalanx::node {

bool LogForwarder::IsHostLogLine(const std::string& line) {
  // base/logging.cc: "[%Y-%m-%d %H:%M:%S.%e] [%n %P] [%l] %v".
  static constexpr char kShape[] = "[dddd-dd-dd dd:dd:dd.ddd] [";
  if (line.size() < sizeof(kShape) - 1) return false;
  for (size_t i = 0; i + 1 < sizeof(kShape); ++i) {
    const char want = kShape[i];
    const char got = line[i];
    if (want == 'd' ? !std::isdigit(static_cast<unsigned char>(got)) : got != want) return false;
  }
  return true;
}

void LogForwarder::Read(Tail* tail, bool last, std::vector<std::string>* out) {
  int fd = ::open(tail->source.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    std::string data(static_cast<size_t>(kLogReadLimit), '\0');
    ssize_t n = ::pread(fd, data.data(), data.size(), tail->offset);
    ::close(fd);
    if (n > 0) {
      data.resize(static_cast<size_t>(n));
      tail->offset += n;
      tail->partial += data;
    }
  }
  size_t start = 0;
  while (true) {
    size_t end = tail->partial.find('\n', start);
    if (end == std::string::npos) break;
    std::string line = tail->partial.substr(start, end - start);
    start = end + 1;
    if (IsHostLogLine(line)) continue;
    if (line.size() > kLogLineLimit) line = line.substr(0, kLogLineLimit) + "\xe2\x80\xa6";
    out->push_back(std::move(line));
  }
  tail->partial.erase(0, start);
  if (tail->partial.size() > kLogLineLimit || (last && !tail->partial.empty())) {
    // An unended line that is too long, or the last words of a worker that ended.
    if (!IsHostLogLine(tail->partial)) out->push_back(tail->partial.substr(0, kLogLineLimit));
    tail->partial.clear();
  }
}

std::vector<rpc::LogLines> LogForwarder::Collect(const std::vector<Source>& live) {
  std::vector<rpc::LogLines> batches;
  auto emit = [&](const Tail& tail, std::vector<std::string> lines) {
    if (lines.empty()) return;
    rpc::LogLines batch;
    batch.set_job_id(tail.source.job_id);
    batch.set_pid(tail.source.pid);
    batch.set_actor_id(tail.source.actor_id);
    batch.set_label(tail.source.label);
    batch.set_node_ip(node_ip_);
    for (auto& l : lines) batch.add_lines(std::move(l));
    batches.push_back(std::move(batch));
  };
  std::set<std::string> seen;
  for (const Source& source : live) {
    if (source.path.empty() || source.job_id.empty()) continue;
    seen.insert(source.path);
    auto [it, fresh] = tails_.try_emplace(source.path);
    if (fresh) it->second.source = source;
    std::vector<std::string> lines;
    Read(&it->second, /*last=*/false, &lines);
    emit(it->second, std::move(lines));
  }
  for (auto it = tails_.begin(); it != tails_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    std::vector<std::string> lines;
    Read(&it->second, /*last=*/true, &lines);
    emit(it->second, std::move(lines));
    it = tails_.erase(it);
  }
  return batches;
}

}  // namespace phalanx::node
