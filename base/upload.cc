#include "base/upload.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/system.h"

namespace phalanx {
namespace {

// What every refusal tells the sender to do instead.
constexpr absl::string_view kFix =
    "send each file's path relative to the working dir, '/'-separated, like 'src/train.py' "
    "(as `phalanx job submit --working-dir DIR` does)";

// A path as it may appear in a message: escaped (it came from the network) and shortened.
std::string Shown(absl::string_view path) {
  constexpr size_t kMaxShown = 120;
  if (path.size() <= kMaxShown) return absl::CEscape(path);
  return absl::StrCat(absl::CEscape(path.substr(0, kMaxShown)), "...");
}

absl::Status Refuse(absl::string_view path, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("working dir file '", Shown(path), "': ", why, "; ", kFix));
}

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

absl::Status IoError(const std::string& what, absl::string_view path, int err) {
  return absl::UnavailableError(
      absl::StrCat("cannot ", what, " working dir file '", Shown(path), "': ", std::strerror(err)));
}

}  // namespace

absl::Status CheckUploadPath(absl::string_view path) {
  if (path.empty()) return Refuse(path, "the path is empty");
  if (path.find('\0') != absl::string_view::npos) return Refuse(path, "the path holds a NUL byte");
  if (path.front() == '/') return Refuse(path, "an absolute path");
  // PATH_MAX counts the terminating NUL; the path is also appended to the job's directory,
  // so this only refuses early what the kernel would refuse later.
  if (path.size() >= PATH_MAX) {
    return Refuse(path, absl::StrCat("the path is ", path.size(), " bytes, over the limit of ",
                                     PATH_MAX - 1));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") return Refuse(path, "a '..' component would leave the working dir");
    if (part.empty()) return Refuse(path, "an empty component (a doubled or trailing '/')");
    if (part == ".") return Refuse(path, "a '.' component");
    if (part.size() > NAME_MAX) {
      return Refuse(
          path, absl::StrCat("a name of ", part.size(), " bytes, over the limit of ", NAME_MAX));
    }
  }
  return absl::OkStatus();
}

absl::Status UploadPaths::Add(absl::string_view path) {
  if (auto s = CheckUploadPath(path); !s.ok()) return s;
  if (files_.contains(path)) return Refuse(path, "sent twice");
  if (dirs_.contains(path)) {
    return Refuse(path, "it is sent as a directory too (of another file), and cannot be both");
  }
  for (size_t slash = path.find('/'); slash != absl::string_view::npos;
       slash = path.find('/', slash + 1)) {
    absl::string_view parent = path.substr(0, slash);
    if (files_.contains(parent)) {
      return Refuse(path, absl::StrCat("'", Shown(parent),
                                       "' is sent as a file too, and cannot be both a file "
                                       "and a directory"));
    }
  }
  for (size_t slash = path.find('/'); slash != absl::string_view::npos;
       slash = path.find('/', slash + 1)) {
    dirs_.insert(std::string(path.substr(0, slash)));
  }
  files_.insert(std::string(path));
  return absl::OkStatus();
}

absl::Status CheckUploadPaths(const std::vector<absl::string_view>& paths) {
  UploadPaths seen;
  for (absl::string_view path : paths) {
    if (auto s = seen.Add(path); !s.ok()) return s;
  }
  return absl::OkStatus();
}

mode_t UploadMode(uint32_t requested_mode) {
  if (requested_mode == 0) return 0644;
  return static_cast<mode_t>(requested_mode & 0777);
}

namespace {

// Creates `dir`/`path` (0600, new, never through a symlink), creating missing parents; the
// open file.
absl::StatusOr<int> CreateUploadedFile(const std::string& dir, absl::string_view path) {
  if (auto s = CheckUploadPath(path); !s.ok()) return s;
  Fd at(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (at.get() < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open the working dir ", dir, ": ", std::strerror(errno)));
  }
  std::vector<std::string> parts = absl::StrSplit(path, '/');
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& part = parts[i];
    absl::StrAppend(&walked, walked.empty() ? "" : "/", part);
    if (::mkdirat(at.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError("create the directory of", path, errno);
    }
    // O_NOFOLLOW: a symlink here (even one pointing back inside) is refused, not entered.
    int next = ::openat(at.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      if (errno == ELOOP || errno == ENOTDIR) {
        return Refuse(path, absl::StrCat("'", Shown(walked),
                                         "' is already there as a symlink or a file, not a "
                                         "directory, and is not followed"));
      }
      return IoError("open the directory of", path, errno);
    }
    at.reset(next);
  }
  // O_EXCL: never truncate or replace what is there; with O_NOFOLLOW, never write through a
  // symlink. 0600 until the content is in; then the requested mode, exactly (no umask).
  int fd = ::openat(at.get(), parts.back().c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST || errno == ELOOP) {
      return Refuse(path, "a file, directory or symlink of that name is already there");
    }
    return IoError("create", path, errno);
  }
  return fd;
}

absl::Status WriteAll(int fd, absl::string_view content, absl::string_view path) {
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("write", path, errno);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Gives the complete file its mode and closes it (the descriptor is closed either way).
absl::Status Seal(int fd, mode_t mode, absl::string_view path) {
  Fd out(fd);
  if (::fchmod(out.get(), mode) != 0) return IoError("set the mode of", path, errno);
  if (::close(out.release()) != 0) return IoError("write", path, errno);
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteUploadedFile(const std::string& dir, absl::string_view path,
                               absl::string_view content, mode_t mode) {
  auto fd = CreateUploadedFile(dir, path);
  if (!fd.ok()) return fd.status();
  Fd out(*fd);
  if (auto s = WriteAll(out.get(), content, path); !s.ok()) return s;
  return Seal(out.release(), mode, path);
}

UploadWriter::UploadWriter(std::string dir, int64_t max_bytes, int64_t max_files)
    : dir_(std::move(dir)), max_bytes_(max_bytes), max_files_(max_files) {}

UploadWriter::~UploadWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status UploadWriter::Fail(absl::Status status) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  error_ = status;
  return status;
}

absl::Status UploadWriter::EndFile() {
  if (fd_ < 0) return absl::OkStatus();
  int fd = fd_;
  fd_ = -1;
  return Seal(fd, mode_, path_);
}

absl::Status UploadWriter::Begin(absl::string_view path, uint32_t requested_mode) {
  if (!error_.ok()) return error_;
  if (auto s = EndFile(); !s.ok()) return Fail(s);
  if (files_ >= max_files_) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("the working dir holds more than ", max_files_,
                     " files, over the limit: leave data sets and generated files out of it")));
  }
  if (auto s = paths_.Add(path); !s.ok()) return Fail(s);
  auto fd = CreateUploadedFile(dir_, path);
  if (!fd.ok()) return Fail(fd.status());
  fd_ = *fd;
  path_ = std::string(path);
  mode_ = UploadMode(requested_mode);
  ++files_;
  return absl::OkStatus();
}

absl::Status UploadWriter::Append(absl::string_view data) {
  if (!error_.ok()) return error_;
  if (data.empty()) return absl::OkStatus();
  if (fd_ < 0) {
    return Fail(absl::InvalidArgumentError(
        "working dir upload: data before any file's path; send each file's path with its "
        "first chunk"));
  }
  if (bytes_ + static_cast<int64_t>(data.size()) > max_bytes_) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "the working dir is over the limit of ", FormatBytes(static_cast<double>(max_bytes_)),
        ": leave data sets and checkpoints out of it and read them from shared storage")));
  }
  bytes_ += static_cast<int64_t>(data.size());
  if (auto s = WriteAll(fd_, data, path_); !s.ok()) return Fail(s);
  return absl::OkStatus();
}

absl::Status UploadWriter::Finish() {
  if (!error_.ok()) return error_;
  if (auto s = EndFile(); !s.ok()) return Fail(s);
  return absl::OkStatus();
}

}  // namespace phalanx
