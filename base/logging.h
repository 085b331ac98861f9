// Process-wide logging setup on spdlog, and fmt formatters for Abseil types so that
// spdlog::info("{}", status) works. Include this instead of spdlog/spdlog.h.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(const absl::Status& s, Context& ctx) const {
    std::string text = s.ToString();
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text), ctx);
  }
};

namespace phalanx {

// Sends the default spdlog logger to `log_file` (appending), or to stderr when empty, with a
// "[time] [component pid] [level]" prefix. Level from $PHALANX_LOG_LEVEL (debug, info, warn,
// error; default info). Call once, early in main().
void InitLogging(const std::string& component, const std::string& log_file = "");

}  // namespace phalanx
