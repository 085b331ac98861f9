// SHA-256, for storing the cluster token's hash (never the token) in Redis, and HMAC-SHA-256,
// with which collective members prove the token to each other.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace phalanx {

// The SHA-256 digest of `data`: 32 bytes.
std::string Sha256(absl::string_view data);

// The SHA-256 digest of `data` as 64 lowercase hex characters.
std::string Sha256Hex(absl::string_view data);

// HMAC-SHA-256 (RFC 2104) of `data` under `key`: 32 bytes.
std::string HmacSha256(absl::string_view key, absl::string_view data);

// Compares two strings in time that depends only on their lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace phalanx
