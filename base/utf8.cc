#include "base/utf8.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace phalanx {

size_t FirstInvalidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, cp = c & 0x07;
    } else {
      return i;
    }
    if (s.size() - i <= static_cast<size_t>(extra)) return i;  // cut short
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += extra + 1;
  }
  return absl::string_view::npos;
}

std::string DescribeInvalidUtf8(absl::string_view text, size_t offset) {
  size_t newline = offset == 0 ? absl::string_view::npos : text.rfind('\n', offset - 1);
  size_t line_start = newline == absl::string_view::npos ? 0 : newline + 1;
  size_t line = 1;
  for (size_t i = 0; i < line_start; ++i) line += text[i] == '\n';
  std::string where =
      absl::StrFormat("line %d, column %d (byte 0x%02x)", line, offset - line_start + 1,
                      static_cast<unsigned char>(text[offset]));
  absl::string_view before = text.substr(line_start, offset - line_start);
  size_t colon = before.find(':');
  if (colon != absl::string_view::npos) {
    absl::string_view key = absl::StripAsciiWhitespace(before.substr(0, colon));
    if (!key.empty() && key.front() == '-') key = absl::StripAsciiWhitespace(key.substr(1));
    if (!key.empty()) where += absl::StrFormat(" in '%s'", key);
  }
  return where;
}

}  // namespace phalanx
