#include "node/object_store.h"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/process.h"
#include "base/system.h"
#include "node/snapshot_store.h"

namespace phalanx::node {

bool IsStoreName(absl::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

std::string ObjectStoreDir(const std::string& node_id) {
  return absl::StrCat("/dev/shm/phalanx-objects-", node_id);
}

std::string ObjectStoreDataDir(const std::string& root, const std::string& node_id) {
  return absl::StrCat(root, "/phalanx-objects-", node_id);
}

namespace {

// The directory a store's link names ("" when `dir` is not a link).
std::string LinkTarget(const std::string& dir) {
  char target[4096];
  ssize_t n = ::readlink(dir.c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : "";
}

}  // namespace

void RemoveObjectStoreDir(const std::string& dir) {
  std::string target = LinkTarget(dir);
  if (target.empty()) {
    ::rmdir(dir.c_str());
    return;
  }
  ::rmdir(target.c_str());
  ::unlink(dir.c_str());
}

bool ObjectOwnerAlive(absl::string_view owner) {
  std::pair<std::string, std::string> parts = absl::StrSplit(owner, absl::MaxSplits('-', 1));
  int pid = 0;
  if (!absl::SimpleAtoi(parts.first, &pid) || pid <= 0 || parts.second.empty()) return false;
  return ProcessStartTime(pid) == parts.second;
}

int64_t DefaultObjectStoreBytes(const std::string& root) {
  auto bytes =
      static_cast<int64_t>(static_cast<double>(TotalMemoryBytes()) * kDefaultObjectStoreFraction);
  struct statvfs shm {};
  if (::statvfs(root.empty() ? "/dev/shm" : root.c_str(), &shm) == 0) {
    bytes =
        std::min(bytes, static_cast<int64_t>(shm.f_bavail) * static_cast<int64_t>(shm.f_frsize));
  }
  return std::max<int64_t>(bytes, 0);
}

absl::Status CreateObjectStore(const std::string& dir, const std::string& spill_dir,
                               int64_t capacity_bytes, const std::string& data_dir) {
  if (!data_dir.empty()) {
    if (auto s = MakeDirs(data_dir); !s.ok()) return s;
    if (LinkTarget(dir) != data_dir) {
      ::unlink(dir.c_str());  // a link left by an earlier run of this node id
      if (::symlink(data_dir.c_str(), dir.c_str()) != 0) {
        return absl::UnavailableError(absl::StrCat("cannot link ", dir, " to the object store in ",
                                                   data_dir, ": ", std::strerror(errno)));
      }
    }
  }
  if (auto s = MakeDirs(dir); !s.ok()) return s;
  if (auto s = WriteFile(absl::StrCat(dir, "/.node"),
                         absl::StrCat(::getpid(), "-", ProcessStartTime(::getpid())));
      !s.ok()) {
    return s;
  }
  if (auto s = MakeDirs(spill_dir); !s.ok()) return s;
  if (auto s = WriteFile(absl::StrCat(dir, "/.capacity"), absl::StrCat(capacity_bytes)); !s.ok()) {
    return s;
  }
  return WriteFile(absl::StrCat(dir, "/.spill"), spill_dir);
}

int RemoveStaleObjectStores(const std::string& own_dir) {
  constexpr absl::string_view kPrefix = "phalanx-objects-";
  int removed = 0;
  for (const std::string& name : ListDir("/dev/shm")) {
    std::string dir = absl::StrCat("/dev/shm/", name);
    if (!absl::StartsWith(name, kPrefix) || dir == own_dir) continue;
    auto node = ReadFileAtMost(absl::StrCat(dir, "/.node"), 256);
    if (node.ok() && ObjectOwnerAlive(absl::StripAsciiWhitespace(*node))) continue;
    // No ".node": one that ended (it removes its files) or one being created this moment.
    struct stat st {};
    if (!node.ok() && (::stat(dir.c_str(), &st) != 0 ||
                       absl::FromTimeT(st.st_mtime) > absl::Now() - kStaleObjectStoreAge)) {
      continue;
    }
    SweepObjectStore(dir);
    bool owners_left = false;
    for (const std::string& entry : ListDir(dir)) owners_left |= IsStoreName(entry);
    if (node.ok() || !owners_left) {
      std::string target = LinkTarget(dir);  // a store moved by --object-store-dir
      if (!target.empty()) RemoveAll(target).IgnoreError();
      if (RemoveAll(dir).ok()) ++removed;
    }
  }
  return removed;
}

std::vector<CachedObject> ListObjectCache(const std::string& dir) {
  std::vector<CachedObject> out;
  const std::string cache = absl::StrCat(dir, "/", kObjectCacheDir);
  const absl::Time stale = absl::Now() - kStaleObjectStoreAge;
  auto remove_if_empty_and_old = [&](const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && absl::FromTimeT(st.st_mtime) < stale) {
      ::rmdir(path.c_str());  // fails, harmlessly, when not empty
    }
  };
  for (const std::string& node : ListDir(cache)) {
    if (!IsStoreName(node)) continue;
    const std::string node_dir = absl::StrCat(cache, "/", node);
    for (const std::string& owner : ListDir(node_dir)) {
      if (!IsStoreName(owner)) continue;
      const std::string owner_dir = absl::StrCat(node_dir, "/", owner);
      for (const std::string& name : ListDir(owner_dir)) {
        const std::string path = absl::StrCat(owner_dir, "/", name);
        if (absl::StartsWith(name, ".")) {
          // ".<id>.lock" names its reader in its content, ".<id>.<reader>" in its name.
          std::pair<std::string, std::string> parts =
              absl::StrSplit(name.substr(1), absl::MaxSplits('.', 1));
          std::string reader = parts.second;
          if (reader == "lock") {
            auto content = ReadFileAtMost(path, 256);
            if (!content.ok()) continue;
            reader = std::string(absl::StripAsciiWhitespace(*content));
            struct stat st {};
            // Empty: its reader created it and is writing its name this moment.
            if (reader.empty() && ::stat(path.c_str(), &st) == 0 &&
                absl::FromTimeT(st.st_mtime) > stale) {
              continue;
            }
          }
          if (!ObjectOwnerAlive(reader)) ::unlink(path.c_str());
          continue;
        }
        if (!IsStoreName(name)) continue;
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) continue;
        out.push_back({node, owner, name, path, static_cast<int64_t>(st.st_size),
                       absl::FromTimeT(st.st_mtime)});
      }
      remove_if_empty_and_old(owner_dir);
    }
    remove_if_empty_and_old(node_dir);
  }
  return out;
}

int64_t TrimObjectCache(std::vector<CachedObject> cache, int64_t used_bytes,
                        int64_t capacity_bytes) {
  std::sort(cache.begin(), cache.end(),
            [](const CachedObject& a, const CachedObject& b) { return a.read < b.read; });
  int64_t removed = 0;
  for (const CachedObject& c : cache) {
    if (used_bytes - removed <= capacity_bytes) break;
    if (::unlink(c.path.c_str()) == 0) removed += c.bytes;
  }
  return removed;
}

namespace {

// Copies `from` to `to` (through a temporary name beside it); false on any failure.
bool CopyFile(const std::string& from, const std::string& to) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return false;
  struct stat st {};
  ::fstat(in, &st);
  const std::string tmp = absl::StrCat(to, ".spilling");
  int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = out >= 0;
  off_t at = 0;
  while (ok && at < st.st_size) {
    ssize_t n = ::sendfile(out, in, &at, static_cast<size_t>(st.st_size - at));
    ok = n > 0;
  }
  ::close(in);
  if (out >= 0) ::close(out);
  ok = ok && ::rename(tmp.c_str(), to.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace

int64_t SpillOldestObjects(const std::string& dir, const std::string& spill_dir, int64_t used_bytes,
                           int64_t target_bytes) {
  struct Value {
    std::string owner, name;
    int64_t bytes;
    absl::Time made;
  };
  std::vector<Value> values;
  for (const std::string& owner : ListDir(dir)) {
    if (!IsStoreName(owner) || !ObjectOwnerAlive(owner)) continue;
    const std::string owner_dir = absl::StrCat(dir, "/", owner);
    for (const std::string& name : ListDir(owner_dir)) {
      struct stat st {};
      // "fetch-...": a private copy a reader is writing (_objects.py), not a value.
      if (!IsStoreName(name) || absl::StartsWith(name, "fetch-") ||
          ::stat(absl::StrCat(owner_dir, "/", name).c_str(), &st) != 0) {
        continue;
      }
      values.push_back(
          {owner, name, static_cast<int64_t>(st.st_size), absl::FromTimeT(st.st_mtime)});
    }
  }
  std::sort(values.begin(), values.end(),
            [](const Value& a, const Value& b) { return a.made < b.made; });
  int64_t moved = 0;
  for (const Value& v : values) {
    if (used_bytes - moved <= target_bytes) break;
    const std::string from = absl::StrCat(dir, "/", v.owner, "/", v.name);
    const std::string to_dir = absl::StrCat(spill_dir, "/", v.owner);
    const std::string to = absl::StrCat(to_dir, "/", v.name);
    if (!MakeDirs(to_dir).ok() || !CopyFile(from, to)) continue;
    if (::unlink(from.c_str()) != 0) {
      ::unlink(to.c_str());  // freed by its owner meanwhile
      continue;
    }
    moved += v.bytes;
  }
  return moved;
}

bool ObjectHeld(const std::vector<std::string>& dirs, absl::string_view owner,
                absl::string_view object_id) {
  if (!IsStoreName(owner) || !IsStoreName(object_id) || !ObjectOwnerAlive(owner)) return false;
  for (const std::string& dir : dirs) {
    if (::access(absl::StrCat(dir, "/", owner, "/", object_id).c_str(), F_OK) == 0) return true;
  }
  return false;
}

rpc::ObjectStoreUsage MeasureObjectStore(const std::string& dir, const std::string& spill_dir,
                                         int64_t capacity_bytes) {
  rpc::ObjectStoreUsage usage;
  usage.set_capacity_bytes(capacity_bytes);
  auto measure = [&](const std::string& root, bool spilled) {
    for (const std::string& owner : ListDir(root)) {
      if (!IsStoreName(owner)) continue;
      std::string owner_dir = absl::StrCat(root, "/", owner);
      for (const std::string& object : ListDir(owner_dir)) {
        struct stat st {};
        if (::stat(absl::StrCat(owner_dir, "/", object).c_str(), &st) != 0) continue;
        if (spilled) {
          usage.set_spilled_bytes(usage.spilled_bytes() + st.st_size);
        } else {
          usage.set_used_bytes(usage.used_bytes() + st.st_size);
        }
        if (!absl::StartsWith(object, kObjectPoolPrefix)) usage.set_objects(usage.objects() + 1);
      }
    }
  };
  measure(dir, false);
  measure(spill_dir, true);
  for (const CachedObject& c : ListObjectCache(dir)) {
    usage.set_cached_bytes(usage.cached_bytes() + c.bytes);
  }
  usage.set_snapshot_bytes(SnapshotBytes(dir));
  usage.set_used_bytes(usage.used_bytes() + usage.cached_bytes() + usage.snapshot_bytes());
  return usage;
}

int SweepObjectStore(const std::string& dir, std::vector<std::string>* removed) {
  int count = 0;
  for (const std::string& owner : ListDir(dir)) {
    if (!IsStoreName(owner) || ObjectOwnerAlive(owner)) continue;
    if (RemoveAll(absl::StrCat(dir, "/", owner)).ok()) {
      ++count;
      if (removed != nullptr) removed->push_back(owner);
    }
  }
  return count;
}

absl::Status StreamObject(const std::vector<std::string>& dirs, absl::string_view owner,
                          absl::string_view object_id, bool probe,
                          const std::function<bool(absl::string_view chunk, int64_t size)>& write) {
  if (!IsStoreName(owner) || !IsStoreName(object_id)) {
    return absl::InvalidArgumentError(absl::StrCat("owner '", owner, "' and object id '", object_id,
                                                   "' must be names (letters, digits, '-', '_')"));
  }
  std::string path;
  int fd = -1;
  for (const std::string& dir : dirs) {
    path = absl::StrCat(dir, "/", owner, "/", object_id);
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) break;
  }
  if (fd < 0) {
    if (!ObjectOwnerAlive(owner)) {
      return absl::FailedPreconditionError(absl::StrCat("its owner (pid ", owner, ") died"));
    }
    return absl::NotFoundError(absl::StrCat("object ", object_id, " is not in the store"));
  }
  struct stat st {};
  ::fstat(fd, &st);
  const int64_t size = st.st_size;
  if (probe) {
    ::close(fd);
    return write("", size) ? absl::OkStatus() : absl::CancelledError("the reader went away");
  }
  std::string chunk;
  int64_t sent = 0;
  absl::Status status = absl::OkStatus();
  do {
    chunk.resize(static_cast<size_t>(std::min(kObjectChunkBytes, size - sent)));
    ssize_t n = chunk.empty() ? 0 : ::pread(fd, chunk.data(), chunk.size(), sent);
    if (n < 0 || (n == 0 && !chunk.empty())) {
      status = absl::DataLossError(absl::StrCat("reading ", path, " failed"));
      break;
    }
    chunk.resize(static_cast<size_t>(n));
    sent += n;
    if (!write(chunk, size)) {
      status = absl::CancelledError("the reader went away");
      break;
    }
  } while (sent < size);
  ::close(fd);
  return status;
}

}  // namespace phalanx::node
