// Random identifiers for clusters, nodes, actors, jobs and placement groups.
#pragma once

#include <string>

namespace phalanx {

// Returns `bytes` random bytes as lowercase hex (2 * bytes characters), from the kernel's
// random source. Thread-safe.
std::string RandomHex(int bytes);

// An id for a node, actor, job or placement group: 16 hex characters.
inline std::string NewId() { return RandomHex(8); }

// The first 8 characters of an id, for logs and tables.
inline std::string ShortId(const std::string& id) { return id.substr(0, 8); }

}  // namespace phalanx
