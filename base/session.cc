#include "base/session.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/process.h"
#include "base/system.h"

namespace phalanx {

namespace {

// "nobody (uid 65534)", or "uid 1234" for a uid with no name.
std::string Owner(uid_t uid) {
  struct passwd entry;
  struct passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &entry, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    return absl::StrCat(found->pw_name, " (uid ", uid, ")");
  }
  return absl::StrCat("uid ", uid);
}

// What a refused root's message ends with.
std::string RootFix(absl::string_view first) {
  return absl::StrCat(first, ", or set PHALANX_TMPDIR to a directory of your own (e.g. ",
                      "`export PHALANX_TMPDIR=$HOME/.phalanx`)");
}

}  // namespace

std::string SessionRoot() {
  const char* root = std::getenv("PHALANX_TMPDIR");
  return root && *root ? root : "/tmp/phalanx";
}

absl::Status CheckSessionRoot(const std::string& root) {
  struct stat link;
  if (::lstat(root.c_str(), &link) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("the session root ", root, " does not exist"));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot inspect the session root ", root, ": ", std::strerror(errno)));
  }
  uid_t me = ::geteuid();
  // A link in a shared directory such as /tmp could be pointed elsewhere by its owner later.
  if (S_ISLNK(link.st_mode) && link.st_uid != me && link.st_uid != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the session root ", root, " is a symlink owned by ", Owner(link.st_uid),
                     ", not by you (uid ", me, "); ", RootFix("remove it")));
  }
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the session root ", root, " is a symlink that cannot be followed (",
                     std::strerror(errno), "); ", RootFix("remove it")));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the session root ", root, " is not a directory; ", RootFix("remove it")));
  }
  if (st.st_uid != me) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the session root ", root, " is owned by ", Owner(st.st_uid), ", not by you (uid ", me,
        "): its owner could replace your sessions or plant its own; ",
        RootFix(absl::StrCat("remove it (`rm -rf ", root, "` as its owner or root)"))));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the session root ", root, " is writable by ",
                     (st.st_mode & S_IWOTH) != 0 ? "everyone" : "its group",
                     absl::StrFormat(" (mode %04o)", st.st_mode & 07777),
                     ": others could plant or replace sessions there; ",
                     RootFix(absl::StrCat("run `chmod go-w ", root, "`"))));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EnsureSessionRoot() {
  std::string root = SessionRoot();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  absl::Status checked = CheckSessionRoot(root);
  if (absl::IsNotFound(checked)) {
    // Parents as `mkdir -p` makes them; the root itself 0700 (it holds tokens), and not
    // chmod-ed afterwards: whoever wins a race to create it must pass the check below.
    std::error_code ec;
    std::filesystem::path parent = std::filesystem::path(root).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::UnavailableError(
          absl::StrCat("cannot create the session root ", root, ": ", std::strerror(errno),
                       "; set PHALANX_TMPDIR to a directory you can write"));
    }
    checked = CheckSessionRoot(root);
  }
  if (!checked.ok()) return checked;
  // Ours, and nobody else can write it (checked above); one that others can read or enter
  // (`mkdir -p` under a umask of 022 makes 0755) would show them every session's token, logs
  // and job files: it is made 0700, and the user told.
  struct stat st;
  if (::stat(root.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    if (::chmod(root.c_str(), 0700) != 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the session root %s can be read by others (mode %04o) and cannot be made 0700 (%s): "
          "it holds the cluster token; run `chmod 700 %s`, or set PHALANX_TMPDIR to a private "
          "directory",
          root, st.st_mode & 07777, std::strerror(errno), root));
    }
    std::cerr << absl::StrFormat(
        "phalanx: the session root %s could be read by others (mode %04o); it is now 0700 "
        "(it holds the cluster token, logs and job files)\n",
        root, st.st_mode & 07777);
  }
  return root;
}

absl::StatusOr<std::string> CreateSession() {
  auto checked_root = EnsureSessionRoot();
  if (!checked_root.ok()) return checked_root.status();
  const std::string& root = *checked_root;
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
  auto sessions = AllSessions();
  ::unlink(link.c_str());
  if (sessions.ok() && !sessions->empty()) {
    (void)!::symlink(sessions->back().c_str(), link.c_str());
  }
}

absl::StatusOr<std::string> LatestSession() {
  std::string root = SessionRoot();
  // A missing root is the "no session" below; a root someone else controls is refused.
  if (auto s = CheckSessionRoot(root); !s.ok() && !absl::IsNotFound(s)) return s;
  std::string link = root + "/session_latest";
  char buf[4096];
  ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) {
    return absl::NotFoundError(absl::StrCat("no Phalanx session on this machine (", link,
                                            " is missing): run `phalanx start --head` first, "
                                            "or pass --address HOST:PORT"));
  }
  return std::string(buf, static_cast<size_t>(n));
}

absl::StatusOr<std::vector<std::string>> AllSessions() {
  std::vector<std::string> out;
  std::string root = SessionRoot();
  if (auto s = CheckSessionRoot(root); !s.ok()) {
    if (absl::IsNotFound(s)) return out;
    return s;
  }
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
    auto sessions = AllSessions();
    if (!sessions.ok()) return sessions.status();
    for (auto it = sessions->rbegin(); it != sessions->rend(); ++it) {
      auto address = ReadFile(*it + "/address");
      if (!address.ok() ||
          !SameGcsAddress(std::string(absl::StripAsciiWhitespace(*address)), out.address)) {
        continue;
      }
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
  if (const char* env = std::getenv("PHALANX_TLS_DIR"); env && *env) {
    out.tls_dir = env;
  } else {
    out.tls_dir = LocalTlsDir(out.address);
  }
  return out;
}

bool SameGcsAddress(const std::string& a, const std::string& b) {
  if (a == b) return true;
  size_t ca = a.rfind(':'), cb = b.rfind(':');
  if (ca == std::string::npos || cb == std::string::npos) return false;
  if (a.substr(ca) != b.substr(cb)) return false;
  return IsLocalHost(a.substr(0, ca)) && IsLocalHost(b.substr(0, cb));
}

std::string LocalTlsDir(const std::string& address) {
  auto sessions = AllSessions();
  if (!sessions.ok()) return "";
  for (auto it = sessions->rbegin(); it != sessions->rend(); ++it) {
    auto there = ReadFile(*it + "/address");
    if (!there.ok() || !SameGcsAddress(std::string(absl::StripAsciiWhitespace(*there)), address)) {
      continue;
    }
    return PathExists(*it + "/tls/ca.pem") ? *it + "/tls" : "";
  }
  return "";
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
