// Small file-system helpers. All functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace phalanx {

// Returns the whole content of `path`, or NotFound / an I/O error naming the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// At most `max` bytes of `path`; OutOfRange when it holds more (a device such as /dev/zero
// included: no more than max + 1 bytes are read).
absl::StatusOr<std::string> ReadFileAtMost(const std::string& path, size_t max);

// Writes `content` to `path` atomically (a temporary file renamed over it) with file mode
// `mode`. The mode is applied before any byte is written, so a secret never sits in a
// world-readable file.
absl::Status WriteFile(const std::string& path, const std::string& content, mode_t mode = 0600);
// WriteFile of the parts one after the other, without joining them first (a large state
// behind a small header is not copied).
absl::Status WriteFileParts(const std::string& path, std::initializer_list<absl::string_view> parts,
                            mode_t mode = 0600);

// Creates `path` and its missing parents (like `mkdir -p`); `path` itself gets `mode`.
absl::Status MakeDirs(const std::string& path, mode_t mode = 0700);

// Removes `path` recursively; a missing path is not an error.
absl::Status RemoveAll(const std::string& path);

// Names (not paths) of the entries of directory `path`, sorted; empty if it does not exist.
std::vector<std::string> ListDir(const std::string& path);

bool PathExists(const std::string& path);

}  // namespace phalanx
