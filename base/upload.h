// The server side of a working-dir upload (`phalanx job submit --working-dir`): the checks a
// client's file list must pass before anything is written, and a writer that never leaves
// the directory it is given.
//
// An upload is a list of (path, content, mode), streamed (UploadWriter) or whole. The paths
// come from the network, so they are checked as hostile: relative, '/'-separated, no empty, '.' or
// '..' component, no NUL byte, within the file system's name limits, and no path that is both a
// file and a directory of another. The checks are pure functions (no file system), cheap enough to
// fuzz.
//
// Uploads carry regular files only: the client reads a symlink's target and sends its
// content. The writer still opens every component without following links, so a link that
// is already on disk (planted, or left over) is refused instead of written through.
//
// All functions are thread-safe; the classes are not (one per upload).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace phalanx {

// OK if `relative_path` is a safe name for a file under the working dir; otherwise
// InvalidArgument naming the path (escaped and shortened) and what to send instead.
absl::Status CheckUploadPath(absl::string_view relative_path);

// The paths of one upload, checked as they arrive (a streamed upload has no list up front):
// each passes CheckUploadPath, none comes twice, and none is both a file and a directory of
// another ("a" and "a/b", in either order). InvalidArgument names the path and the fix.
class UploadPaths {
 public:
  absl::Status Add(absl::string_view relative_path);

 private:
  absl::flat_hash_set<std::string> files_;
  absl::flat_hash_set<std::string> dirs_;  // every parent of a file so far
};

// UploadPaths::Add for each path in order; the first refusal.
absl::Status CheckUploadPaths(const std::vector<absl::string_view>& relative_paths);

// The mode an uploaded file gets: the permission bits alone (setuid, setgid and sticky are
// dropped), or 0644 when the client sent none.
mode_t UploadMode(uint32_t requested_mode);

// Writes `content` to `dir`/`relative_path` with exactly `mode`, creating missing parent
// directories (0755). `dir` must exist; `relative_path` must pass CheckUploadPath. Never
// follows a symlink, neither `dir` itself nor any component below it, and never replaces an
// existing file: either is InvalidArgument naming the path. Other failures are I/O errors
// naming the path. On error the file may be left partly written; the caller removes `dir`.
absl::Status WriteUploadedFile(const std::string& dir, absl::string_view relative_path,
                               absl::string_view content, mode_t mode);

// Writes a streamed upload into `dir` (which must exist), one file at a time, with the
// guarantees of WriteUploadedFile: Begin() checks the next file's path (UploadPaths) and
// creates it, Append() adds bytes to it, Finish() completes the last one. More than
// `max_bytes` in all, or more than `max_files` files, is InvalidArgument naming the limit.
// After an error the writer refuses everything; the caller removes `dir`.
class UploadWriter {
 public:
  UploadWriter(std::string dir, int64_t max_bytes, int64_t max_files);
  ~UploadWriter();
  UploadWriter(const UploadWriter&) = delete;
  UploadWriter& operator=(const UploadWriter&) = delete;

  absl::Status Begin(absl::string_view relative_path, uint32_t requested_mode);
  absl::Status Append(absl::string_view data);
  absl::Status Finish();

  int64_t bytes() const { return bytes_; }
  int64_t files() const { return files_; }

 private:
  absl::Status EndFile();
  absl::Status Fail(absl::Status status);

  const std::string dir_;
  const int64_t max_bytes_;
  const int64_t max_files_;
  UploadPaths paths_;
  int fd_ = -1;  // the file being written
  std::string path_;
  mode_t mode_ = 0;
  int64_t bytes_ = 0;
  int64_t files_ = 0;
  absl::Status error_;
};

}  // namespace phalanx
