// poold's token file as TokenStore reads it again while poold runs: a change is read once the file
// is whole (topo::FileWatch) and at most TokenStore::kLookEvery after that, without a look at the
// file for every request.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "poolrun/topo/regular_file.hpp"
#include "support/temp_dir.hpp"
#include "tokens.hpp"

namespace poolrun::pool {
namespace {

// The file rewritten with `text`, its modification time set back past the settle time.
void rewriteSettled(const test::TempDir& dir, const std::string& text) {
  const std::filesystem::path file = dir.write("tokens", text);
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
  std::optional<TokenEntry> bob = store.find("tok-bob-0123456789");
  ASSERT_TRUE(bob);
  EXPECT_EQ(bob->owner, "bob");
  EXPECT_TRUE(bob->admin);
  EXPECT_FALSE(store.find("tok-alice-0123456789")) << "a token taken out of the file still works";

  // A file being written (modified just now) is not read until it settles: the tokens before stay.
  std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
  const auto written = std::chrono::steady_clock::now();
  dir.write("tokens", "");
  std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
  const bool found = store.find("tok-bob-0123456789").has_value();
  if (std::chrono::steady_clock::now() - written < topo::kFileSettleTime) {  // (a stalled machine: settled)
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
  std::filesystem::last_write_time(file,
                                   std::filesystem::file_time_type::clock::now() - std::chrono::seconds(1));
  EXPECT_TRUE(store.find("tok-bob-0123456789"))
      << "an emptied file dated a second ago was read at the first look";

  dir.write("tokens", "tok-carol-0123456789 carol user\n");
  bool carol = false;
  for (int i = 0; i < 200 && !carol; ++i) {
    std::this_thread::sleep_for(TokenStore::kLookEvery + std::chrono::milliseconds(5));
    carol = store.find("tok-carol-0123456789").has_value();
  }
  EXPECT_TRUE(carol) << "the filled file was never read";
  EXPECT_FALSE(store.find("tok-bob-0123456789"));
  EXPECT_TRUE(warnings.empty());
}

}  // namespace
}  // namespace poolrun::pool
