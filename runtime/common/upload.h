// The server side of a working-dir upload (`phalanx job submit --working-dir`): the checks a
// client's file list must pass before anything is written, and a writer that never leaves
// the directory it is given.
//
// An upload is a list of (path, content, mode). The paths come from the network, so they are
// checked as hostile: relative, '/'-separated, no empty, '.' or '..' component, no NUL byte,
// within the file system's name limits, and no path that is both a file and a directory of
// another. The checks are pure functions (no file system), cheap enough to fuzz.
//
// Uploads carry regular files only: the client reads a symlink's target and sends its
// content. The writer still opens every component without following links, so a link that
// is already on disk (planted, or left over) is refused instead of written through.
//
// All functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace phalanx {

// OK if `relative_path` is a safe name for a file under the working dir; otherwise
// InvalidArgument naming the path (escaped and shortened) and what to send instead.
absl::Status CheckUploadPath(absl::string_view relative_path);

// CheckUploadPath for each path, then the set as a whole: no path twice, and no path that
// another uses as a directory ("a" and "a/b"). InvalidArgument names the first bad path.
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

}  // namespace phalanx
