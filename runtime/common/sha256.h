// SHA-256, for storing the cluster token's hash (never the token) in Redis.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace phalanx {

// The SHA-256 digest of `data` as 64 lowercase hex characters.
std::string Sha256Hex(absl::string_view data);

// Compares two strings in time that depends only on their lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace phalanx
