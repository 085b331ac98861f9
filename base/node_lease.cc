#include "base/node_lease.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/system.h"

namespace phalanx {
namespace {

absl::StatusOr<void*> Map(const std::string& path, bool create) {
  int fd = ::open(path.c_str(), create ? (O_RDWR | O_CREAT | O_TRUNC) : O_RDWR, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("node lease ", path, ": ", std::strerror(errno)));
  }
  if (create && ::ftruncate(fd, static_cast<off_t>(sysconf(_SC_PAGESIZE))) != 0) {
    int e = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("node lease ", path, ": ", std::strerror(e)));
  }
  void* page = ::mmap(nullptr, static_cast<size_t>(sysconf(_SC_PAGESIZE)), PROT_READ | PROT_WRITE,
                      MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (page == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("node lease ", path, ": ", std::strerror(e)));
  }
  return page;
}

}  // namespace

int64_t NodeLease::NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

absl::StatusOr<std::unique_ptr<NodeLease>> NodeLease::Create(const std::string& path,
                                                             absl::Duration timeout) {
  auto page = Map(path, true);
  if (!page.ok()) return page.status();
  auto* p = static_cast<Page*>(*page);
  p->timeout_ns.store(absl::ToInt64Nanoseconds(timeout));
  p->renewed_ns.store(NowNs());
  return std::unique_ptr<NodeLease>(new NodeLease(p, path));
}

absl::StatusOr<std::unique_ptr<NodeLease>> NodeLease::Open(const std::string& path) {
  auto page = Map(path, false);
  if (!page.ok()) return page.status();
  return std::unique_ptr<NodeLease>(new NodeLease(static_cast<Page*>(*page), ""));
}

NodeLease::~NodeLease() {
  ::munmap(page_, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  if (!path_to_remove_.empty()) ::unlink(path_to_remove_.c_str());
}

void NodeLease::Renew(int64_t seen_ns) {
  int64_t old = page_->renewed_ns.load();
  while (seen_ns > old && !page_->renewed_ns.compare_exchange_weak(old, seen_ns)) {
  }
}

void NodeLease::SetTimeout(absl::Duration timeout) {
  page_->timeout_ns.store(absl::ToInt64Nanoseconds(timeout));
}

absl::Duration NodeLease::Age() const {
  return absl::Nanoseconds(NowNs() - page_->renewed_ns.load());
}

absl::Duration NodeLease::timeout() const { return absl::Nanoseconds(page_->timeout_ns.load()); }

bool HostAnswers(const std::string& host_port, absl::Duration timeout) {
  return KnockTcp({host_port}, timeout).front() != Knock::kSilent;
}

int RemoveStaleLeases(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (absl::StartsWith(name, "phalanx-node-") && absl::EndsWith(name, ".lease")) {
      names.push_back(std::move(name));
    }
  }
  ::closedir(d);
  int removed = 0;
  for (const auto& name : names) {
    // phalanx-node-<id>-<pid>-<tag>.lease: the pid is the second field from the end.
    std::vector<std::string> parts =
        absl::StrSplit(name.substr(0, name.size() - std::strlen(".lease")), '-');
    int pid = 0;
    if (parts.size() < 5 || !absl::SimpleAtoi(parts[parts.size() - 2], &pid) || pid <= 0) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::string path = absl::StrCat(dir, "/", name);
    auto lease = NodeLease::Open(path);
    if (!lease.ok() || !(*lease)->Expired()) continue;
    if (::unlink(path.c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace phalanx
