#include "node/snapshot_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "node/object_store.h"

namespace phalanx::node {
namespace {

std::string Root(const std::string& store_dir) {
  return absl::StrCat(store_dir, "/", kSnapshotDir);
}

std::string FileName(int64_t step, int64_t epoch, const std::string& from_node) {
  return absl::StrCat("step-", step, ".e", epoch,
                      from_node.empty() ? "" : absl::StrCat(".from-", from_node), ".snap");
}

// "step-<step>.e<epoch>[.from-<node>].snap" → its parts; false for any other name.
bool ParseName(absl::string_view name, Snapshot* out) {
  if (!absl::ConsumePrefix(&name, "step-") || !absl::ConsumeSuffix(&name, ".snap")) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(name, absl::MaxSplits('.', 2));
  if (parts.size() < 2 || !absl::ConsumePrefix(&parts[1], "e")) return false;
  if (!absl::SimpleAtoi(parts[0], &out->step) || !absl::SimpleAtoi(parts[1], &out->epoch)) {
    return false;
  }
  out->from_node.clear();
  if (parts.size() == 3) {
    if (!absl::ConsumePrefix(&parts[2], "from-") || !IsStoreName(parts[2])) return false;
    out->from_node = std::string(parts[2]);
  }
  return true;
}

int64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

int64_t Capacity(const std::string& store_dir) {
  auto text = ReadFileAtMost(absl::StrCat(store_dir, "/.capacity"), 64);
  int64_t capacity = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &capacity)) return 0;
  return capacity;
}

// "2120 bytes", "1.5 KiB", "256.0 MiB", "1.2 GiB".
std::string MiB(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " bytes");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return absl::StrCat(absl::StrFormat("%.1f", v), " ", units[u]);
}

}  // namespace

std::string SnapshotJobDir(const std::string& store_dir, const std::string& job_id) {
  if (!IsStoreName(job_id)) return "";
  return absl::StrCat(Root(store_dir), "/", job_id);
}

std::vector<Snapshot> ListSnapshots(const std::string& store_dir, const std::string& job_id) {
  std::vector<Snapshot> out;
  std::string dir = SnapshotJobDir(store_dir, job_id);
  if (dir.empty()) return out;
  for (const std::string& name : ListDir(dir)) {
    Snapshot s;
    if (!ParseName(name, &s)) continue;
    s.path = absl::StrCat(dir, "/", name);
    int64_t size = FileSize(s.path);
    if (size < 0) continue;  // pruned meanwhile
    s.bytes = std::max<int64_t>(0, size - static_cast<int64_t>(absl::StrCat(s.step, "\n").size()));
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const Snapshot& a, const Snapshot& b) {
    if (a.step != b.step) return a.step > b.step;
    if (a.epoch != b.epoch) return a.epoch > b.epoch;
    return a.from_node.empty() && !b.from_node.empty();
  });
  return out;
}

bool HasSnapshot(const std::string& store_dir, const std::string& job_id, int64_t step,
                 int64_t epoch) {
  for (const Snapshot& s : ListSnapshots(store_dir, job_id)) {
    if (s.step == step && s.epoch >= epoch) return true;
  }
  return false;
}

std::vector<std::string> SnapshotJobs(const std::string& store_dir) {
  std::vector<std::string> out;
  for (const std::string& job : ListDir(Root(store_dir))) {
    if (IsStoreName(job)) out.push_back(job);
  }
  return out;
}

int64_t SnapshotBytes(const std::string& store_dir) {
  int64_t total = 0;
  for (const std::string& job : SnapshotJobs(store_dir)) {
    std::string dir = SnapshotJobDir(store_dir, job);
    for (const std::string& name : ListDir(dir)) {
      total += std::max<int64_t>(0, FileSize(absl::StrCat(dir, "/", name)));
    }
  }
  return total;
}

void PruneSnapshots(const std::string& store_dir, const std::string& job_id, int keep,
                    int64_t rolled_back_past) {
  std::vector<Snapshot> all = ListSnapshots(store_dir, job_id);  // newest first
  int kept = 0;
  int64_t last_step = -1, last_epoch = -1;
  for (const Snapshot& s : all) {
    bool rolled_back = rolled_back_past >= 0 && s.step > rolled_back_past;
    // Of one step, the newest epoch's copies (this node's and a peer's) are kept.
    bool same_step = s.step == last_step;
    bool keep_it = !rolled_back && (same_step ? s.epoch == last_epoch : kept < keep);
    if (keep_it) {
      if (!same_step) ++kept;
      last_step = s.step;
      last_epoch = s.epoch;
      continue;
    }
    // A reader that has it open keeps reading it: unlinking frees it after the last close.
    ::unlink(s.path.c_str());
  }
}

SnapshotFileWriter::~SnapshotFileWriter() { Discard(); }

void SnapshotFileWriter::Discard() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

absl::Status SnapshotFileWriter::Open(const std::string& store_dir, const std::string& job_id,
                                      int64_t step, int64_t epoch, const std::string& from_node,
                                      int64_t total_bytes) {
  Discard();
  std::string dir = SnapshotJobDir(store_dir, job_id);
  if (dir.empty() || (!from_node.empty() && !IsStoreName(from_node))) {
    return absl::InvalidArgumentError(absl::StrCat("job id '", job_id, "' and node id '", from_node,
                                                   "' must be names (letters, digits, '-', '_')"));
  }
  if (HasSnapshot(store_dir, job_id, step, epoch)) {
    return absl::AlreadyExistsError(
        absl::StrCat("the store holds step ", step, " of epoch ", epoch, " or later already"));
  }
  const std::string header = absl::StrCat(step, "\n");
  const int64_t capacity = Capacity(store_dir);
  if (capacity > 0) {
    // What the store holds now, less this job's snapshots that the new one will push out.
    int64_t used = MeasureObjectStore(store_dir, "", capacity).used_bytes();
    std::vector<Snapshot> old = ListSnapshots(store_dir, job_id);
    std::vector<int64_t> steps;
    for (const Snapshot& s : old) {
      if (steps.empty() || steps.back() != s.step) steps.push_back(s.step);
      if (steps.size() >= kSnapshotsKept) used -= s.bytes;  // pushed out by the new one
    }
    if (used + total_bytes > capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a snapshot of step ", step, " (", MiB(total_bytes), ") does not fit in the node's ",
          "object store (", MiB(std::max<int64_t>(0, capacity - used)), " free of ", MiB(capacity),
          "): give the node more (phalanx start --object-store-memory BYTES), or turn snapshots ",
          "off (the job spec's snapshot.enabled: false); training goes on, and a job that loses ",
          "every rank restarts from its last checkpoint"));
    }
  }
  if (auto s = MakeDirs(dir, 0700); !s.ok()) return s;
  static std::atomic<int64_t> counter{0};
  store_dir_ = store_dir;
  job_id_ = job_id;
  final_ = absl::StrCat(dir, "/", FileName(step, epoch, from_node));
  tmp_ = absl::StrCat(dir, "/.tmp-", ::getpid(), "-", counter.fetch_add(1));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    tmp_.clear();
    return absl::InternalError(absl::StrCat("cannot create a snapshot in ", dir));
  }
  header_ = static_cast<int64_t>(header.size());
  total_ = total_bytes;
  written_ = -header_;
  if (total_bytes > 0 && ::posix_fallocate(fd_, 0, header_ + total_bytes) != 0) {
    Discard();
    return absl::ResourceExhaustedError(absl::StrCat(
        "no room for a snapshot of step ", step, " (", MiB(total_bytes), ") in ", dir,
        ": /dev/shm is full; give it more room, or turn snapshots off (snapshot.enabled: false)"));
  }
  return Append(header);
}

absl::Status SnapshotFileWriter::Append(absl::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError("no snapshot is open");
  if (written_ + static_cast<int64_t>(data.size()) > total_) {
    return absl::InvalidArgumentError(absl::StrCat("more than the ", total_, " bytes announced"));
  }
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd_, data.data(), data.size(), written_ + header_);
    if (n <= 0) {
      Discard();
      return absl::InternalError(absl::StrCat("writing a snapshot into ", final_, " failed"));
    }
    data.remove_prefix(static_cast<size_t>(n));
    written_ += n;
  }
  return absl::OkStatus();
}

absl::Status SnapshotFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError("no snapshot is open");
  if (written_ != total_) {
    Discard();
    return absl::FailedPreconditionError(
        absl::StrCat("a snapshot of ", total_, " bytes ended after ", written_));
  }
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
    Discard();
    return absl::InternalError(absl::StrCat("cannot rename a snapshot to ", final_));
  }
  tmp_.clear();
  PruneSnapshots(store_dir_, job_id_, kSnapshotsKept);
  return absl::OkStatus();
}

absl::Status WriteSnapshot(const std::string& store_dir, const std::string& job_id, int64_t step,
                           int64_t epoch, const std::string& from_node, absl::string_view state) {
  SnapshotFileWriter writer;
  if (auto s = writer.Open(store_dir, job_id, step, epoch, from_node,
                           static_cast<int64_t>(state.size()));
      !s.ok()) {
    return s;
  }
  // In chunks: a large state is written piece by piece (each pwrite a few MiB).
  constexpr size_t kChunk = size_t{8} << 20;
  for (size_t at = 0; at < state.size(); at += kChunk) {
    if (auto s = writer.Append(state.substr(at, kChunk)); !s.ok()) return s;
  }
  return writer.Commit();
}

namespace {

// An open snapshot file: its step, where its state starts and how long it is.
struct OpenedSnapshot {
  int fd = -1;
  int64_t step = 0;
  int64_t skip = 0;  // the step line's length
  int64_t size = 0;  // the state's
  ~OpenedSnapshot() {
    if (fd >= 0) ::close(fd);
  }
};

absl::Status OpenSnapshot(const std::string& path, OpenedSnapshot* out) {
  out->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (out->fd < 0) return absl::NotFoundError(absl::StrCat("snapshot ", path, " is gone"));
  struct stat st {};
  ::fstat(out->fd, &st);
  char head[32];
  ssize_t got = ::pread(out->fd, head, sizeof(head), 0);
  ssize_t nl = 0;
  while (nl < got && head[nl] != '\n') ++nl;
  if (nl >= got ||
      !absl::SimpleAtoi(absl::string_view(head, static_cast<size_t>(nl)), &out->step)) {
    return absl::DataLossError(absl::StrCat("snapshot ", path, " has no step line"));
  }
  out->skip = nl + 1;
  out->size = std::max<int64_t>(0, static_cast<int64_t>(st.st_size) - out->skip);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::pair<int64_t, std::string>> ReadSnapshot(const std::string& path) {
  // The state is read straight into its string (no copy to drop the step line).
  OpenedSnapshot file;
  if (auto s = OpenSnapshot(path, &file); !s.ok()) return s;
  std::string state(static_cast<size_t>(file.size), '\0');
  for (size_t done = 0; done < state.size();) {
    ssize_t n = ::pread(file.fd, state.data() + done, state.size() - done,
                        static_cast<off_t>(file.skip + static_cast<int64_t>(done)));
    if (n <= 0) return absl::DataLossError(absl::StrCat("snapshot ", path, " ended early"));
    done += static_cast<size_t>(n);
  }
  return std::make_pair(file.step, std::move(state));
}

absl::Status StreamSnapshot(const std::string& path, int64_t chunk_bytes,
                            const std::function<bool(absl::string_view, int64_t)>& write) {
  OpenedSnapshot file;
  if (auto s = OpenSnapshot(path, &file); !s.ok()) return s;
  const int64_t size = file.size;
  std::string buffer(static_cast<size_t>(std::max<int64_t>(1, std::min(chunk_bytes, size))), '\0');
  for (int64_t at = 0; at < size || size == 0;) {
    ssize_t n = size == 0 ? 0
                          : ::pread(file.fd, buffer.data(),
                                    static_cast<size_t>(std::min<int64_t>(
                                        static_cast<int64_t>(buffer.size()), size - at)),
                                    file.skip + at);
    if (n < 0) return absl::InternalError(absl::StrCat("reading ", path, " failed"));
    if (!write(absl::string_view(buffer.data(), static_cast<size_t>(n)), size)) {
      return absl::CancelledError("the reader went away");
    }
    at += n;
    if (size == 0 || n == 0) break;
  }
  return absl::OkStatus();
}

}  // namespace phalanx::node
