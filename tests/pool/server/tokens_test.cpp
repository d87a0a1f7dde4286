// poold's token file as TokenStore reads it again while poold runs: a change is read once the file
// is whole (common::FileWatch) and at most TokenStore::kLookEvery after that, without a look at the
// file for every request.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/tokens.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

// The file rewritten with `text`, its modification time set back past the settle time.
void rewriteSettled(const test::TempDir& dir, const std::string& text) {
  const std::filesystem::path file = dir.write("tokens", text);
  std::filesystem::permissions(file, std::filesystem::perms(0600));
  std::filesystem::last_write_time(file,
                                   std::filesystem::file_time_type::clock::now() - std::chrono::seconds(5));
}

TEST(TokenFileReload, AChangeIsSeenWithinTheLookIntervalOnceWhole) {
  test::TempDir dir;
  rewriteSettled(dir, "tok-alice-0123456789 alice user\n");
  std::vector<std::string> warnings;
  TokenStore store(dir.path() / "tokens", [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(store.find("tok-alice-0123456789"));
  EXPECT_FALSE(store.find("tok-bob-0123456789"));

  std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
  rewriteSettled(dir, "tok-bob-0123456789 bob admin\n");
  std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
  std::optional<Caller> bob = store.find("tok-bob-0123456789");
  ASSERT_TRUE(bob);
  EXPECT_EQ(bob->owner, "bob");
  EXPECT_TRUE(bob->admin);
  EXPECT_FALSE(store.find("tok-alice-0123456789")) << "a token taken out of the file still works";

  // A file being written (modified just now) is not read until it settles: the tokens before stay.
  std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
  const auto written = std::chrono::steady_clock::now();
  std::filesystem::permissions(dir.write("tokens", ""), std::filesystem::perms(0600));
  std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
  const bool found = store.find("tok-bob-0123456789").has_value();
  if (std::chrono::steady_clock::now() - written < common::kFileSettleTime) {  // (a stalled machine: settled)
    EXPECT_TRUE(found) << "an emptied file, still being written, was read";
  }
  EXPECT_TRUE(warnings.empty());
}

// The failure a loaded machine showed: the file emptied and its writer held off the CPU past the
// settle time (or the file system keeps whole seconds), so that its modification time says it is
// old. The first look does not take it; once filled, the new version is read after it settles.
TEST(TokenFileReload, AnEmptiedFileDatedInThePastIsNotReadAtTheFirstLook) {
  test::TempDir dir;
  rewriteSettled(dir, "tok-bob-0123456789 bob admin\n");
  std::vector<std::string> warnings;
  TokenStore store(dir.path() / "tokens", [&](const std::string& w) { warnings.push_back(w); });
  std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
  const std::filesystem::path file = dir.write("tokens", "");
  std::filesystem::permissions(file, std::filesystem::perms(0600));
  std::filesystem::last_write_time(file,
                                   std::filesystem::file_time_type::clock::now() - std::chrono::seconds(1));
  EXPECT_TRUE(store.find("tok-bob-0123456789"))
      << "an emptied file dated a second ago was read at the first look";

  dir.write("tokens", "tok-carol-0123456789 carol user\n");
  std::filesystem::permissions(file, std::filesystem::perms(0600));
  bool carol = false;
  for (int i = 0; i < 200 && !carol; ++i) {
    std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
    carol = store.find("tok-carol-0123456789").has_value();
  }
  EXPECT_TRUE(carol) << "the filled file was never read";
  EXPECT_FALSE(store.find("tok-bob-0123456789"));
  EXPECT_TRUE(warnings.empty());
}

// A token file others can change is no source of tokens: at start it is refused naming the file and
// its mode or owner; while poold runs, the version that others could have written is refused and the
// tokens read before stay (an appended admin token does not work). One others may read is warned of
// once, not at every change.
TEST(TokenFileReload, AFileOthersCanChangeIsRefusedAndOneOthersCanReadIsWarnedOf) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  rewriteSettled(dir, "tok-alice-0123456789 alice user\n");
  const fs::path file = dir.path() / "tokens";
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& w) { warnings.push_back(w); };
  fs::permissions(file, fs::perms(0666));
  try {
    TokenStore refused(file, warn);
    ADD_FAILURE() << "a file every user can write was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), file.string() +
                                         " is writable by every user (mode 0666): anyone who can write "
                                         "it could add a token; run `chmod go-w " +
                                         file.string() + "`");
  }
  fs::permissions(file, fs::perms(0640));
  TokenStore store(file, warn);
  ASSERT_TRUE(store.find("tok-alice-0123456789"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], file.string() +
                             " is readable by its group (mode 0640): they can use its tokens; run "
                             "`chmod 600 " +
                             file.string() + "`");

  // Made group-writable, and an admin token appended: refused, alice's token still works.
  rewriteSettled(dir, "tok-alice-0123456789 alice user\ntok-mallory-0123456789 mallory admin\n");
  fs::permissions(file, fs::perms(0660));
  std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
  EXPECT_FALSE(store.find("tok-mallory-0123456789"));
  EXPECT_TRUE(store.find("tok-alice-0123456789"));
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[1],
            "keeping the previous tokens: " + file.string() +
                " is writable by its group (mode 0660): anyone who can write it could add a token; "
                "run `chmod go-w " +
                file.string() + "`");
  if (geteuid() == 0) {  // owned by another user, however private: refused
    fs::permissions(file, fs::perms(0600));
    ASSERT_EQ(chown(file.c_str(), 65534, 65534), 0);
    std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
    EXPECT_FALSE(store.find("tok-mallory-0123456789"));
    ASSERT_EQ(warnings.size(), 3u);
    EXPECT_NE(warnings[2].find(file.string() +
                               " belongs to nobody (uid 65534), not to root or to you (root (uid 0)): "
                               "its owner could put any token in it"),
              std::string::npos)
        << warnings[2];
    ASSERT_EQ(chown(file.c_str(), 0, 0), 0);
  }
  // Put right (0600): read, and no warning of readers any more.
  fs::permissions(file, fs::perms(0600));
  const size_t said = warnings.size();
  bool mallory = false;
  for (int i = 0; i < 200 && !mallory; ++i) {
    std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
    mallory = store.find("tok-mallory-0123456789").has_value();
  }
  EXPECT_TRUE(mallory) << "the file, put right, was never read again";
  EXPECT_EQ(warnings.size(), said) << warnings.back();
}

// The rule itself, as clients (poolctl, poolrun, poold-agent) and poold apply it.
TEST(SecretFiles, OwnerAndModeDecide) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const fs::path file = dir.write("token", "tok-alice-0123456789\n");
  std::string readable;
  for (unsigned mode : {0600u, 0400u, 0700u}) {
    fs::permissions(file, fs::perms(mode));
    EXPECT_EQ(common::readSecretFile(file, 1024, "token files", nullptr, &readable),
              "tok-alice-0123456789\n");
    EXPECT_EQ(readable, "") << mode;
  }
  for (unsigned mode : {0644u, 0604u, 0640u}) {
    fs::permissions(file, fs::perms(mode));
    common::readSecretFile(file, 1024, "token files", nullptr, &readable);
    EXPECT_NE(readable, "") << mode;
  }
  for (unsigned mode : {0620u, 0602u, 0666u, 0622u}) {
    fs::permissions(file, fs::perms(mode));
    EXPECT_THROW(common::readSecretFile(file, 1024, "token files"), Error) << mode;
  }
}

}  // namespace
}  // namespace poolrun::pool
