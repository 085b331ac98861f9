// UTF-8 checks for text that users hand to Phalanx (job specs): protobuf strings must be
// UTF-8, and an error should say where a bad byte is, not fail in serialization.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace phalanx {

// The offset of the first byte of `s` that is not part of well-formed UTF-8 (an overlong form,
// a surrogate, a code point past U+10FFFF, a sequence cut short), or npos when it all is.
size_t FirstInvalidUtf8(absl::string_view s);

// Where that byte is in a text of lines, for an error: "line L, column C (byte 0xNN)", and
// the line's YAML key (`key:` before it on the line) as " in 'key'" when there is one.
std::string DescribeInvalidUtf8(absl::string_view text, size_t offset);

}  // namespace phalanx
