// poold-agent --join's side on the node (join.hpp): the credential made, kept while it is sent, and
// moved into the token file once poold took it; a join cut off half-way, poold out of reach, and a
// refusal, with a join call the test plays.

#include "poolrun/agent/join.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/types.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::agent {
namespace {

std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

mode_t modeOf(const std::filesystem::path& file) {
  struct stat st {};
  stat(file.c_str(), &st);
  return st.st_mode & 0777;
}

TEST(Join, MakesACredentialSendsItAndKeepsItInTheTokenFileMode0600) {
  test::TempDir dir;
  const auto file = dir.path() / "node.token";
  StopSignal stop;
  std::ostringstream log;
  std::string sent;
  ASSERT_TRUE(joinIfNeeded(
      file,
      [&](const std::string& credential) {
        // Sent only once it is safe on disk.
        EXPECT_EQ(slurp(dir.path() / "node.token.joining"), credential + "\n");
        sent = credential;
        return true;
      },
      stop, log));
  EXPECT_TRUE(pool::isSecretOf(pool::kNodeCredentialPrefix, sent)) << sent;
  EXPECT_EQ(slurp(file), sent + "\n");
  EXPECT_EQ(modeOf(file), 0600u);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "node.token.joining"));
  EXPECT_NE(log.str().find("joined the pool"), std::string::npos) << log.str();
  // Once the file is there, nothing is sent again.
  bool called = false;
  EXPECT_TRUE(joinIfNeeded(
      file, [&](const std::string&) { return called = true; }, stop, log));
  EXPECT_FALSE(called);
  EXPECT_NE(log.str().find("--join is not needed"), std::string::npos) << log.str();
}

TEST(Join, AJoinCutOffHalfWaySendsTheSameCredentialAgain) {
  test::TempDir dir;
  const auto file = dir.path() / "node.token";
  const std::string earlier = "pn-" + std::string(64, 'a');
  dir.writeSecret("node.token.joining", earlier + "\n");
  StopSignal stop;
  std::ostringstream log;
  std::string sent;
  ASSERT_TRUE(joinIfNeeded(
      file, [&](const std::string& c) { return sent = c, false; }, stop, log));
  EXPECT_EQ(sent, earlier);
  EXPECT_EQ(slurp(file), earlier + "\n");
  EXPECT_NE(log.str().find("cut off half-way"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("had taken this join already"), std::string::npos) << log.str();
}

TEST(Join, ACredentialFileCutOffWhileWrittenIsReplacedByANewOne) {
  test::TempDir dir;
  const auto file = dir.path() / "node.token";
  dir.writeSecret("node.token.joining", "pn-0123");  // killed while writing: never sent
  StopSignal stop;
  std::ostringstream log;
  std::string sent;
  ASSERT_TRUE(joinIfNeeded(
      file, [&](const std::string& c) { return sent = c, true; }, stop, log));
  EXPECT_TRUE(pool::isSecretOf(pool::kNodeCredentialPrefix, sent)) << sent;
}

TEST(Join, APendingCredentialOthersMayWriteIsRefused) {
  test::TempDir dir;
  const auto pending = dir.writeSecret("node.token.joining", "pn-" + std::string(64, 'a') + "\n");
  chmod(pending.c_str(), 0666);
  StopSignal stop;
  std::ostringstream log;
  try {
    joinIfNeeded(
        dir.path() / "node.token", [](const std::string&) { return true; }, stop, log);
    FAIL() << "a credential file every user may write was sent";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("writable by every user"), std::string::npos) << e.what();
  }
}

TEST(Join, PooldOutOfReachIsTriedAgainARefusalIsNot) {
  test::TempDir dir;
  StopSignal stop;
  std::ostringstream log;
  int calls = 0;
  std::string first;
  // Out of reach once, then taken: the same credential both times.
  ASSERT_TRUE(joinIfNeeded(
      dir.path() / "a.token",
      [&](const std::string& c) {
        if (++calls == 1) {
          first = c;
          throw Error(ErrorCode::kIo, "cannot connect to 127.0.0.1:1");
        }
        EXPECT_EQ(c, first);
        return true;
      },
      stop, log));
  EXPECT_EQ(calls, 2);
  EXPECT_NE(log.str().find("cannot join yet: cannot connect to 127.0.0.1:1; trying again in 2 s"),
            std::string::npos)
      << log.str();
  // A refusal is poold's last word: thrown at once, the credential kept for a later try.
  EXPECT_THROW(joinIfNeeded(
                   dir.path() / "b.token",
                   [](const std::string&) -> bool {
                     throw pool::PoolError(pool::PoolFailure::kForbidden, ErrorCode::kBadInput,
                                           "join token expired");
                   },
                   stop, log),
               pool::PoolError);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "b.token"));
  // Stopped while it waits to try again: false, nothing written.
  stop.request();
  EXPECT_FALSE(joinIfNeeded(
      dir.path() / "c.token", [](const std::string&) -> bool { throw Error(ErrorCode::kIo, "down"); }, stop,
      log));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "c.token"));
}

TEST(Join, AMissingFolderIsSaidBeforeAnythingIsSent) {
  test::TempDir dir;
  StopSignal stop;
  std::ostringstream log;
  try {
    joinIfNeeded(
        dir.path() / "none" / "node.token", [](const std::string&) { return true; }, stop, log);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace poolrun::agent
