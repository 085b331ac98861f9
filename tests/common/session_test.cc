// The session root (base/session.h): only a directory this user alone controls
// holds sessions, and every way in (create, latest, all) checks it.
#include "base/session.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

constexpr uid_t kNobody = 65534;

// Sets (or with nullptr, unsets) an environment variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

class SessionRoot : public ::testing::Test {
 protected:
  // A directory under the test's temp dir, with mode `mode` exactly.
  std::string MakeRoot(mode_t mode) {
    std::string root = tmp_.path() + "/root";
    EXPECT_EQ(::mkdir(root.c_str(), 0700), 0);
    EXPECT_EQ(::chmod(root.c_str(), mode), 0);
    return root;
  }
  testing::TempDir tmp_;
};

TEST_F(SessionRoot, AnOwnPrivateDirectoryPasses) {
  EXPECT_TRUE(CheckSessionRoot(MakeRoot(0700)).ok()) << CheckSessionRoot(tmp_.path() + "/root");
  ASSERT_EQ(::chmod((tmp_.path() + "/root").c_str(), 0755), 0);
  EXPECT_TRUE(CheckSessionRoot(tmp_.path() + "/root").ok());
}

TEST_F(SessionRoot, ADirectoryOwnedByAnotherUserIsRefusedWithItsOwnerAndTheFix) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a directory to another user";
  std::string root = MakeRoot(0755);
  ASSERT_EQ(::chown(root.c_str(), kNobody, kNobody), 0);

  absl::Status s = CheckSessionRoot(root);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(
      absl::StrContains(s.message(), absl::StrCat("the session root ", root, " is owned by ")))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "uid 65534")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), ", not by you (uid 0)")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("`rm -rf ", root, "`"))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "set PHALANX_TMPDIR")) << s;

  // Every way into the root says so, and nothing is created in it.
  ScopedEnv env("PHALANX_TMPDIR", root.c_str());
  ScopedEnv no_token("PHALANX_TOKEN", nullptr);
  auto created = CreateSession();
  EXPECT_FALSE(created.ok());
  EXPECT_EQ(created.status().message(), s.message());
  EXPECT_EQ(EnsureSessionRoot().status().message(), s.message());
  EXPECT_EQ(LatestSession().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(AllSessions().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveCluster("127.0.0.1:1", "").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ListDir(root).empty());
}

TEST_F(SessionRoot, AGroupOrWorldWritableDirectoryIsRefusedEvenWithTheStickyBit) {
  std::string root = MakeRoot(0777);
  absl::Status s = CheckSessionRoot(root);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "is writable by everyone (mode 0777)")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("`chmod go-w ", root, "`"))) << s;

  ASSERT_EQ(::chmod(root.c_str(), 01777), 0);
  s = CheckSessionRoot(root);
  EXPECT_TRUE(absl::StrContains(s.message(), "is writable by everyone (mode 1777)")) << s;

  ASSERT_EQ(::chmod(root.c_str(), 0770), 0);
  s = CheckSessionRoot(root);
  EXPECT_TRUE(absl::StrContains(s.message(), "is writable by its group (mode 0770)")) << s;
}

TEST_F(SessionRoot, ASymlinkIsFollowedOnlyWhenThisUserOrRootOwnsIt) {
  std::string root = MakeRoot(0700);
  std::string link = tmp_.path() + "/link";
  ASSERT_EQ(::symlink(root.c_str(), link.c_str()), 0);
  EXPECT_TRUE(CheckSessionRoot(link).ok()) << CheckSessionRoot(link);
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a symlink to another user";
  ASSERT_EQ(::lchown(link.c_str(), kNobody, kNobody), 0);
  absl::Status s = CheckSessionRoot(link);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat(link, " is a symlink owned by "))) << s;
}

TEST_F(SessionRoot, AMissingRootIsCreatedPrivateAndAFileIsNoRoot) {
  std::string root = tmp_.path() + "/a/b/phalanx";
  ScopedEnv env("PHALANX_TMPDIR", root.c_str());
  EXPECT_EQ(CheckSessionRoot(root).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestSession().status().code(), absl::StatusCode::kNotFound);  // no session yet
  ASSERT_TRUE(AllSessions().ok());
  EXPECT_TRUE(AllSessions()->empty());
  EXPECT_FALSE(PathExists(root));  // looking does not create it

  auto session = CreateSession();
  ASSERT_TRUE(session.ok()) << session.status();
  struct stat st;
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(*LatestSession(), *session);
  EXPECT_EQ(*AllSessions(), std::vector<std::string>{*session});

  std::string file = tmp_.path() + "/file";
  ASSERT_TRUE(WriteFile(file, "").ok());
  absl::Status s = CheckSessionRoot(file);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a directory")) << s;
}

}  // namespace
}  // namespace phalanx
