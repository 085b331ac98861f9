// How the `phalanx` command takes the cluster token without showing it to other users.
#include <cstring>
#include <iostream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "cli/commands.h"

namespace phalanx::cli {

bool MaskTokenArguments(int argc, char** argv) {
  bool masked = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;  // a job's entrypoint: its arguments are its own
    char* value = nullptr;
    if (std::strcmp(argv[i], "--token") == 0 && i + 1 < argc) {
      value = argv[i + 1];
    } else if (absl::StartsWith(argv[i], "--token=")) {
      value = argv[i] + std::strlen("--token=");
    }
    if (value == nullptr) continue;
    for (char* c = value; *c != '\0'; ++c) *c = '*';
    masked = true;
  }
  return masked;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  constexpr size_t kMaxTokenFileBytes = 4096;
  std::string text;
  if (path == "-") {
    std::string line;
    std::getline(std::cin, line);
    text = line;
  } else {
    auto read = ReadFileAtMost(path, kMaxTokenFileBytes);
    if (!read.ok()) {
      return absl::Status(read.status().code(),
                          absl::StrCat(read.status().message(),
                                       " (a file holding the token that `phalanx start --head` "
                                       "wrote to <session>/token)"));
    }
    text = *read;
  }
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path == "-" ? "standard input" : path, " holds no token"));
  }
  return token;
}

}  // namespace phalanx::cli
