// The job directory's run.sh and command file, run with a shell as a user would run them.

#include <gtest/gtest.h>

#include <sys/stat.h>

#include "poolrun/common/error.hpp"
#include "poolrun/launcher/job_directory.hpp"
#include "poolrun/launcher/mpi.hpp"
#include "poolrun/launcher/plan.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::launcher {
namespace {

// run.sh exports every variable with its value as it is (quotes, newlines, JSON) and runs the command;
// the readable command reads the named variables from their files. Both checked by running them.
TEST(LaunchScriptTest, ScriptAndReadableCommandRunAsWritten) {
  MpiCommand cmd;
  cmd.env = {{"POOLRUN_RANK_ENV", "{\"a\": \"it's $HOME `x`\"}"}, {"B", "two\nlines"}, {"C", ""}};
  cmd.argv = {"sh", "-c", "printf '%s|%s|%s|%s' \"$POOLRUN_RANK_ENV\" \"$B\" \"$C\" \"$(pwd)\"", "arg one"};
  test::TempDir tmp;
  std::string script = launchScript(cmd, tmp.path());
  EXPECT_EQ(script.substr(0, 10), "#!/bin/sh\n");
  EXPECT_NE(script.find("\nexport B='two\nlines'\n"), std::string::npos) << script;
  std::filesystem::path run = tmp.write("run.sh", script);
  const std::string expected = cmd.env[0].second + "|two\nlines||" + tmp.path().string();
  test::ProcessResult r = test::runShell("cd / && sh " + run.string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, expected);

  std::filesystem::path doc = tmp.write("rank env.json", cmd.env[0].second + "\n");
  std::string readable = readableCommand(cmd, {{"POOLRUN_RANK_ENV", doc.string()}});
  EXPECT_EQ(readable.substr(0, readable.find('\n')), "POOLRUN_RANK_ENV=\"$(cat '" + doc.string() + "')\" \\");
  std::filesystem::path command = tmp.write("command", readable);
  r = test::runShell("cd " + tmp.path().string() + " && sh " + command.string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, expected);
}

// run.sh is written whole under a temporary name and renamed: no temporary is left, the mode is the
// one asked for (not the umask's), a second write replaces the first, and a folder that cannot be
// written to is an error naming the file.
TEST(LaunchScriptTest, WrittenAtomically) {
  test::TempDir tmp;
  namespace fs = std::filesystem;
  const fs::path file = tmp.path() / "run.sh";
  const fs::perms mode = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec;
  mode_t old = umask(077);
  writeFileAtomically(file, "#!/bin/sh\nexit 3\n", mode, Durability::kSynced);
  writeFileAtomically(file, "#!/bin/sh\nexit 4\n", mode, Durability::kSameBoot);
  umask(old);
  EXPECT_EQ(fs::status(file).permissions(), mode);
  EXPECT_EQ(test::slurp(file), "#!/bin/sh\nexit 4\n");
  EXPECT_EQ(test::runShell(file.string()).status, 4);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) entries += e.path() == file ? 0 : 1;
  EXPECT_EQ(entries, 0u) << "a temporary file was left beside run.sh";
  try {
    writeFileAtomically(tmp.path() / "missing" / "run.sh", "x", mode, Durability::kSynced);
    ADD_FAILURE() << "no error for a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find((tmp.path() / "missing" / "run.sh").string() + ": cannot write ("),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace poolrun::launcher
