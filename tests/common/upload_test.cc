// The working-dir upload's server-side checks (base/upload.h): the pure path
// validator, the mode it keeps, and the writer that never follows a symlink.
#include "base/upload.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

// The refusal's message, or "" when the path was accepted.
std::string Refusal(absl::string_view path) {
  absl::Status s = CheckUploadPath(path);
  if (s.ok()) return "";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Every refusal names the path (the field) and says what to send instead.
  EXPECT_TRUE(absl::StrContains(s.message(), "working dir file '")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "relative to the working dir")) << s;
  return std::string(s.message());
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(UploadPath, AbsolutePathsAreRefused) {
  EXPECT_TRUE(absl::StrContains(Refusal("/etc/passwd"), "'/etc/passwd': an absolute path"));
  EXPECT_TRUE(absl::StrContains(Refusal("/"), "an absolute path"));
}

TEST(UploadPath, DotDotComponentsAreRefusedWhereverTheyAre) {
  for (const char* path : {"..", "../escape", "a/../../b", "a/..", "a/b/../c", "../../etc/x"}) {
    std::string refusal = Refusal(path);
    EXPECT_TRUE(absl::StrContains(refusal, "a '..' component would leave the working dir"))
        << path << ": " << refusal;
    EXPECT_TRUE(absl::StrContains(refusal, absl::StrCat("'", path, "'"))) << refusal;
  }
}

TEST(UploadPath, EmptyPathsAndEmptyOrDotComponentsAreRefused) {
  EXPECT_TRUE(absl::StrContains(Refusal(""), "the path is empty"));
  EXPECT_TRUE(absl::StrContains(Refusal("a//b"), "an empty component"));
  EXPECT_TRUE(absl::StrContains(Refusal("a/"), "an empty component"));
  EXPECT_TRUE(absl::StrContains(Refusal("."), "a '.' component"));
  EXPECT_TRUE(absl::StrContains(Refusal("./a"), "a '.' component"));
  EXPECT_TRUE(absl::StrContains(Refusal("a/./b"), "a '.' component"));
}

TEST(UploadPath, NulBytesAreRefusedAndShownEscaped) {
  std::string refusal = Refusal(std::string("ok\0/../x", 8));
  EXPECT_TRUE(absl::StrContains(refusal, "the path holds a NUL byte")) << refusal;
  EXPECT_TRUE(absl::StrContains(refusal, "'ok\\000/../x'")) << refusal;
  EXPECT_FALSE(absl::StrContains(refusal, std::string(1, '\0')));
}

TEST(UploadPath, NamesOverTheFileSystemLimitsAreRefusedAndShownShortened) {
  std::string long_name(300, 'n');
  std::string refusal = Refusal("dir/" + long_name);
  EXPECT_TRUE(absl::StrContains(refusal, "a name of 300 bytes, over the limit of 255")) << refusal;
  EXPECT_TRUE(absl::StrContains(refusal, "...'")) << refusal;
  EXPECT_LT(refusal.size(), 400u);
  std::string deep;
  for (int i = 0; i < 2100; ++i) absl::StrAppend(&deep, i == 0 ? "" : "/", "d");
  EXPECT_TRUE(absl::StrContains(Refusal(deep), "bytes, over the limit of 4095"));
}

TEST(UploadPath, CleanRelativePathsPass) {
  for (const char* path : {"train.py", "src/models/net.py", ".hidden/config", "a..b", "..a/b.",
                           "dir with space/file-1_2.txt", "ü/ñ"}) {
    EXPECT_TRUE(CheckUploadPath(path).ok()) << path << ": " << CheckUploadPath(path);
  }
}

TEST(UploadPath, TheSetMayNotNameAPathTwiceNorUseAFileAsADirectory) {
  EXPECT_TRUE(CheckUploadPaths({}).ok());
  EXPECT_TRUE(CheckUploadPaths({"a/b", "ab", "a/c", "b"}).ok());
  absl::Status twice = CheckUploadPaths({"x/y", "x/y"});
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(twice.message(), "'x/y': sent twice")) << twice;
  // In either order: the later path is refused (a streamed upload sees them one by one).
  absl::Status file_first = CheckUploadPaths({"a", "a/b/c"});
  EXPECT_EQ(file_first.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(file_first.message(), "'a/b/c': 'a' is sent as a file too"))
      << file_first;
  absl::Status dir_first = CheckUploadPaths({"a/b/c", "a"});
  EXPECT_EQ(dir_first.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(dir_first.message(), "'a': it is sent as a directory too"))
      << dir_first;
  // One bad path anywhere refuses the whole set.
  absl::Status bad = CheckUploadPaths({"ok.txt", "fine/too.py", "../escape"});
  EXPECT_TRUE(absl::StrContains(bad.message(), "'../escape'")) << bad;
}

TEST(UploadMode, SetuidSetgidAndStickyBitsAreDropped) {
  EXPECT_EQ(UploadMode(04755), 0755u);
  EXPECT_EQ(UploadMode(02755), 0755u);
  EXPECT_EQ(UploadMode(06777), 0777u);
  EXPECT_EQ(UploadMode(01777), 0777u);
  EXPECT_EQ(UploadMode(0100644), 0644u);  // file-type bits from a raw st_mode, too
  EXPECT_EQ(UploadMode(0600), 0600u);
  EXPECT_EQ(UploadMode(0), 0644u);  // no mode sent
}

TEST(UploadedFile, ANestedFileGetsItsContentAndExactlyItsMode) {
  testing::TempDir dir;
  mode_t old_umask = ::umask(077);
  absl::Status s = WriteUploadedFile(dir.path(), "src/pkg/run.sh", "#!/bin/sh\necho hi\n", 0755);
  ::umask(old_umask);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(*ReadFile(dir.path() + "/src/pkg/run.sh"), "#!/bin/sh\necho hi\n");
  EXPECT_EQ(ModeOf(dir.path() + "/src/pkg/run.sh"), 0755u);
  ASSERT_TRUE(WriteUploadedFile(dir.path(), "src/empty", "", 0600).ok());
  EXPECT_EQ(ModeOf(dir.path() + "/src/empty"), 0600u);
}

TEST(UploadedFile, ASymlinkAlreadyOnDiskIsNeverFollowed) {
  testing::TempDir dir, outside;
  ASSERT_TRUE(WriteFile(outside.path() + "/target", "precious").ok());
  // A directory component that is a link (to outside, or even back inside).
  ASSERT_EQ(::symlink(outside.path().c_str(), (dir.path() + "/out").c_str()), 0);
  ASSERT_EQ(::symlink(dir.path().c_str(), (dir.path() + "/self").c_str()), 0);
  for (const char* path : {"out/target", "out/new", "self/new"}) {
    absl::Status s = WriteUploadedFile(dir.path(), path, "overwritten", 0644);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "is already there as a symlink or a file")) << s;
  }
  // The file itself a link.
  ASSERT_EQ(::symlink((outside.path() + "/target").c_str(), (dir.path() + "/f").c_str()), 0);
  absl::Status s = WriteUploadedFile(dir.path(), "f", "overwritten", 0644);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "already there")) << s;
  // A dangling link, which O_CREAT alone would create the target of.
  ASSERT_EQ(::symlink((outside.path() + "/created").c_str(), (dir.path() + "/g").c_str()), 0);
  EXPECT_FALSE(WriteUploadedFile(dir.path(), "g", "x", 0644).ok());

  EXPECT_EQ(*ReadFile(outside.path() + "/target"), "precious");
  EXPECT_EQ(ListDir(outside.path()), std::vector<std::string>{"target"});
  EXPECT_EQ(ListDir(dir.path()), (std::vector<std::string>{"f", "g", "out", "self"}));
}

TEST(UploadedFile, ADirectoryThatIsALinkIsRefusedAndAnExistingFileIsNotReplaced) {
  testing::TempDir real, links;
  std::string link = links.path() + "/wd";
  ASSERT_EQ(::symlink(real.path().c_str(), link.c_str()), 0);
  EXPECT_FALSE(WriteUploadedFile(link, "a", "x", 0644).ok());
  EXPECT_TRUE(ListDir(real.path()).empty());

  ASSERT_TRUE(WriteUploadedFile(real.path(), "a", "first", 0644).ok());
  absl::Status again = WriteUploadedFile(real.path(), "a", "second", 0644);
  EXPECT_EQ(again.code(), absl::StatusCode::kInvalidArgument) << again;
  EXPECT_EQ(*ReadFile(real.path() + "/a"), "first");
  // And the writer checks the path itself, for callers that did not.
  EXPECT_EQ(WriteUploadedFile(real.path(), "../x", "x", 0644).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace phalanx
