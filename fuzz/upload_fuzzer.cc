// Fuzzes the working-dir upload's server side (base/upload.h): the path checks and
// the writers (WriteUploadedFile, and UploadWriter as UploadWorkingDir streams), into a
// scratch dir.
//
// Each input is a list of (path, content, mode) entries, written into a working dir that
// holds planted traps (symlinks out of it and back into it, a plain file). Properties:
//   - CheckUploadPath accepts exactly the relative, '/'-separated paths with no empty, '.'
//     or '..' component and no NUL (checked against a plain re-implementation);
//   - UploadMode never keeps setuid, setgid or sticky bits;
//   - CheckUploadPaths accepts exactly the sets with no path twice and none the directory of
//     another;
//   - a write that succeeds leaves a regular file at dir/path with that mode and content; a
//     path the checks refuse is never written; a stream stays within its limits;
//   - nothing is ever created outside the scratch dir (the symlinks' targets stay empty).
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/upload.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "upload fuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The rule CheckUploadPath implements, written the obvious way.
bool SafePath(const std::string& path) {
  if (path.empty() || path.size() >= PATH_MAX || path[0] == '/') return false;
  if (path.find('\0') != std::string::npos) return false;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == ".." || part.size() > NAME_MAX) return false;
  }
  return true;
}

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

void RemoveTree(const std::string& path) {
  ::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
}

// Entry names in `dir` (without . and ..).
std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) Fail("cannot list", dir);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

std::string ReadFile(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) Fail("cannot read back", path);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

// The traps planted in the working dir: links to `outside` (a directory and a file), a link
// back inside, a link two levels up from a subdirectory, and a plain file. They stay for the
// whole run; what an input adds is removed after it.
const char* const kTraps[] = {"out", "f", "self", "sub", "file"};

struct Scratch {
  std::string base;     // holds exactly `dir` and `outside`
  std::string dir;      // the working dir uploads go to
  std::string outside;  // what the planted links point at; must stay empty
};

const Scratch& GetScratch() {
  static const Scratch* scratch = [] {
    // $TMPDIR (scripts/fuzz.sh points it into its scratch dir, which a crash leaves for
    // inspection), else tmpfs: the target creates and removes files at every input.
    const char* tmpdir = std::getenv("TMPDIR");
    const char* root = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir
                       : ::access("/dev/shm", W_OK) == 0    ? "/dev/shm"
                                                            : "/tmp";
    std::string tmpl = std::string(root) + "/phalanx-fuzz-upload-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) Fail("mkdtemp", tmpl);
    auto* s = new Scratch{tmpl, tmpl + "/dir", tmpl + "/outside"};
    bool ok = ::mkdir(s->outside.c_str(), 0755) == 0 && ::mkdir(s->dir.c_str(), 0755) == 0 &&
              ::symlink(s->outside.c_str(), (s->dir + "/out").c_str()) == 0 &&
              ::symlink((s->outside + "/f").c_str(), (s->dir + "/f").c_str()) == 0 &&
              ::symlink(".", (s->dir + "/self").c_str()) == 0 &&
              ::mkdir((s->dir + "/sub").c_str(), 0755) == 0 &&
              ::symlink("../../outside", (s->dir + "/sub/up").c_str()) == 0;
    int fd = ::open((s->dir + "/file").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (!ok || fd < 0) Fail("cannot plant the traps in", s->dir);
    ::close(fd);
    std::atexit([] { RemoveTree(GetScratch().base); });
    return s;
  }();
  return *scratch;
}

// Removes what an input wrote: everything in `dir` but the traps, and in dir/sub but "up".
void Clean(const Scratch& s) {
  for (const std::string& name : List(s.dir)) {
    bool trap = false;
    for (const char* t : kTraps) trap = trap || name == t;
    if (!trap) RemoveTree(s.dir + "/" + name);
  }
  for (const std::string& name : List(s.dir + "/sub")) {
    if (name != "up") RemoveTree(s.dir + "/sub/" + name);
  }
}

// The rule for a whole upload, order aside: every path safe, none twice, and none the
// directory of another ("a" and "a/b").
bool SafeSet(const std::vector<std::string>& paths) {
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!SafePath(paths[i])) return false;
    for (size_t j = 0; j < paths.size(); ++j) {
      if (i == j) continue;
      if (paths[i] == paths[j] || absl::StartsWith(paths[j], paths[i] + "/")) return false;
    }
  }
  return true;
}

// A written file must be regular, with exactly `mode` and `content`.
void CheckWritten(const Scratch& s, const std::string& path, const std::string& content,
                  mode_t mode) {
  if (!SafePath(path)) Fail("wrote an unsafe path", path);
  const std::string full = s.dir + "/" + path;
  struct stat st;
  if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) Fail("no regular file at", full);
  if ((st.st_mode & 07777) != mode) Fail("wrong mode", full);
  if (ReadFile(full) != content) Fail("wrong content", full);
}

void CheckNothingOutside(const Scratch& s) {
  if (!List(s.outside).empty()) Fail("an upload wrote outside the working dir", s.outside);
  if (List(s.base).size() != 2) Fail("an upload created something next to the working dir", s.base);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Scratch& s = GetScratch();
  FuzzedDataProvider in(data, size);
  struct Entry {
    std::string path, content;
    uint32_t mode;
  };
  std::vector<Entry> entries;
  while (in.remaining_bytes() > 0 && entries.size() < 8) {
    Entry e;
    e.path = in.ConsumeRandomLengthString(PATH_MAX + 16);
    e.content = in.ConsumeRandomLengthString(256);
    e.mode = in.ConsumeIntegral<uint32_t>();
    entries.push_back(std::move(e));
  }

  // The checks alone.
  std::vector<std::string> paths;
  std::vector<absl::string_view> views;
  for (const auto& e : entries) {
    const bool ok = phalanx::CheckUploadPath(e.path).ok();
    if (ok != SafePath(e.path)) {
      Fail(ok ? "accepted an unsafe path" : "refused a safe path", e.path);
    }
    const mode_t mode = phalanx::UploadMode(e.mode);
    if ((mode & ~0777) != 0) Fail("UploadMode kept special bits", std::to_string(mode));
    paths.push_back(e.path);
    views.push_back(e.path);
  }
  const bool set_ok = phalanx::CheckUploadPaths(views).ok();
  if (set_ok != SafeSet(paths)) {
    Fail(set_ok ? "accepted an unsafe set of paths" : "refused a safe set of paths",
         absl::StrJoin(paths, " | "));
  }

  // Whole files, one call each.
  for (const auto& e : entries) {
    const mode_t mode = phalanx::UploadMode(e.mode);
    if (phalanx::WriteUploadedFile(s.dir, e.path, e.content, mode).ok()) {
      CheckWritten(s, e.path, e.content, mode);
    }
  }
  CheckNothingOutside(s);
  Clean(s);

  // Streamed, as UploadWorkingDir writes them: each file in two chunks, within limits.
  constexpr int64_t kMaxBytes = 512, kMaxFiles = 6;
  phalanx::UploadWriter writer(s.dir, kMaxBytes, kMaxFiles);
  bool ok = true;
  size_t begun = 0;
  for (const auto& e : entries) {
    const size_t half = e.content.size() / 2;
    ok = writer.Begin(e.path, e.mode).ok() &&
         writer.Append(absl::string_view(e.content).substr(0, half)).ok() &&
         writer.Append(absl::string_view(e.content).substr(half)).ok();
    if (!ok) break;
    ++begun;
  }
  if (ok && writer.Finish().ok()) {
    std::vector<std::string> written(paths.begin(), paths.begin() + begun);
    if (!SafeSet(written)) Fail("a stream wrote an unsafe set", absl::StrJoin(written, " | "));
    if (writer.bytes() > kMaxBytes || writer.files() > kMaxFiles) Fail("over the limits", "");
    for (size_t i = 0; i < begun; ++i) {
      CheckWritten(s, entries[i].path, entries[i].content, phalanx::UploadMode(entries[i].mode));
    }
  }
  CheckNothingOutside(s);
  Clean(s);
  return 0;
}
