#include "runtime/common/session.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/common/files.h"
#include "runtime/common/process.h"

namespace phalanx {

std::string SessionRoot() {
  const char* root = std::getenv("PHALANX_TMPDIR");
  return root && *root ? root : "/tmp/phalanx";
}

absl::StatusOr<std::string> CreateSession() {
  std::string root = SessionRoot();
  if (auto s = MakeDirs(root); !s.ok()) return s;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[64];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d_%H-%M-%S", &tm);
  std::string dir = absl::StrCat(root, "/session_", stamp, "_", getpid());
  for (const char* sub : {"", "/logs", "/pids"}) {
    if (auto s = MakeDirs(dir + sub); !s.ok()) return s;
  }
  std::string link = root + "/session_latest";
  std::string tmp_link = absl::StrCat(link, ".", getpid());
  ::unlink(tmp_link.c_str());
  if (::symlink(dir.c_str(), tmp_link.c_str()) != 0 || ::rename(tmp_link.c_str(), link.c_str())) {
    return absl::UnavailableError(absl::StrCat("cannot point ", link, " at ", dir));
  }
  return dir;
}

void DiscardSession(const std::string& session) {
  RemoveAll(session).IgnoreError();
  std::string link = SessionRoot() + "/session_latest";
  std::vector<std::string> sessions = AllSessions();
  ::unlink(link.c_str());
  if (!sessions.empty()) (void)!::symlink(sessions.back().c_str(), link.c_str());
}

absl::StatusOr<std::string> LatestSession() {
  std::string link = SessionRoot() + "/session_latest";
  char buf[4096];
  ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) {
    return absl::NotFoundError(absl::StrCat("no Phalanx session on this machine (", link,
                                            " is missing): run `phalanx start --head` first, "
                                            "or pass --address HOST:PORT"));
  }
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> AllSessions() {
  std::vector<std::string> out;
  std::string root = SessionRoot();
  for (const auto& name : ListDir(root)) {
    if (name.rfind("session_", 0) == 0 && name != "session_latest" &&
        name.find(".") == std::string::npos) {
      out.push_back(root + "/" + name);
    }
  }
  return out;
}

absl::Status WritePidFile(const std::string& session, const std::string& name, pid_t pid,
                          const std::string& program) {
  return WriteFile(absl::StrCat(session, "/pids/", name, ".pid"),
                   absl::StrCat(pid, " ", program, "\n"));
}

std::vector<PidEntry> ReadPidFiles(const std::string& session) {
  std::vector<PidEntry> out;
  std::string dir = session + "/pids";
  for (const auto& file : ListDir(dir)) {
    if (!absl::EndsWith(file, ".pid")) continue;
    auto content = ReadFile(dir + "/" + file);
    if (!content.ok()) continue;
    std::vector<std::string> parts =
        absl::StrSplit(absl::StripAsciiWhitespace(*content), ' ', absl::SkipEmpty());
    PidEntry entry;
    entry.name = file.substr(0, file.size() - 4);
    if (parts.empty() || !absl::SimpleAtoi(parts[0], &entry.pid)) continue;
    if (parts.size() >= 2) {
      entry.program = parts[1];
    } else if (entry.name == "redis") {
      entry.program = "redis-server";  // the pidfile Redis writes itself holds the pid alone
    } else {
      continue;
    }
    entry.path = dir + "/" + file;
    out.push_back(entry);
  }
  return out;
}

bool PidEntryAlive(const PidEntry& entry) {
  if (!ProcessAlive(entry.pid)) return false;
  return ProcessCmdline(entry.pid).find(entry.program) != std::string::npos;
}

absl::StatusOr<ClusterAddress> ResolveCluster(const std::string& address_flag,
                                              const std::string& token_flag) {
  ClusterAddress out;
  out.address = address_flag;
  if (out.address.empty()) {
    if (const char* env = std::getenv("PHALANX_ADDRESS"); env && *env) out.address = env;
  }
  auto latest = LatestSession();
  if (out.address.empty()) {
    if (!latest.ok()) return latest.status();
    auto address = ReadFile(*latest + "/address");
    if (!address.ok()) {
      return absl::NotFoundError(
          absl::StrCat("the latest session (", *latest, ") has no address file; pass --address"));
    }
    out.address = std::string(absl::StripAsciiWhitespace(*address));
  }
  out.token = token_flag;
  if (out.token.empty()) {
    if (const char* env = std::getenv("PHALANX_TOKEN"); env && *env) out.token = env;
  }
  if (out.token.empty()) {
    // A local session of the same cluster holds the token.
    std::vector<std::string> sessions = AllSessions();
    for (auto it = sessions.rbegin(); it != sessions.rend(); ++it) {
      auto address = ReadFile(*it + "/address");
      if (!address.ok() || absl::StripAsciiWhitespace(*address) != out.address) continue;
      auto token = ReadFile(*it + "/token");
      if (token.ok()) {
        out.token = std::string(absl::StripAsciiWhitespace(*token));
        break;
      }
    }
  }
  if (out.token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no cluster token for ", out.address,
                     ": pass --token (or set PHALANX_TOKEN) with the token printed by "
                     "`phalanx start --head`"));
  }
  return out;
}

std::string LogTail(const std::string& path, int lines) {
  auto content = ReadFile(path);
  if (!content.ok()) return "";
  std::vector<std::string> all = absl::StrSplit(*content, '\n');
  while (!all.empty() && all.back().empty()) all.pop_back();
  size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  std::ostringstream out;
  for (size_t i = from; i < all.size(); ++i) out << "    " << all[i] << "\n";
  return out.str();
}

}  // namespace phalanx
