// A job on a poold pool outlives a restart of poold: `poolrun --simulate` runs the pool's nodes on
// this machine, poold is killed with SIGKILL mid-job and started again on the same port and state
// a few seconds later; the job goes on, says so in two lines, and its lease is released at the end.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "poold_process.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using poolrun::test::PooldProcess;
using poolrun::test::slurp;

TEST(PoolOutageTest, AJobOutlivesARestartOfPoold) {
  poolrun::test::TempDir tmp;
  std::filesystem::path tokens = tmp.writeSecret("tokens", poolrun::test::kTokens);
  std::filesystem::path state = tmp.path() / "poold";
  std::filesystem::create_directories(tmp.path() / "reports");
  const std::vector<std::string> cluster{"--cluster",
                                         (poolrun::test::sourceDir() / "clusters/sim-ib.toml").string()};
  auto poold = std::make_unique<PooldProcess>(state, tokens, cluster);
  const std::string uri = poold->uri();
  const int port = poold->port();

  // Renewed every 4 s; the job (14 s) lasts longer than the lease's time to live (12 s).
  std::filesystem::path err = tmp.path() / "err";
  poolrun::test::Reaped job{poolrun::test::spawnShell(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_TOKEN=tok-alice-0123456789 "
      "POOLRUN_STATE_DIR=" +
      (tmp.path() / "state").string() + " REPORT_DIR=" + (tmp.path() / "reports").string() + " timeout 120 " +
      POOLRUN_BINARY + " --pool " + uri + " --simulate -n 2 --gpus-per-node 1 --lease-ttl 12 " + RANK_REPORT +
      " --sleep 14 >" + (tmp.path() / "out").string() + " 2>" + err.string())};
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp.path() / "reports", 2, 60s)) << slurp(err);

  poold->kill9();
  // Down until poolrun has noticed (its next renewal, within 4 s), then back where it was.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (slurp(err).find("cannot renew lease") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  ASSERT_NE(slurp(err).find("cannot renew lease"), std::string::npos) << slurp(err);
  poold = std::make_unique<PooldProcess>(state, tokens, cluster, port);

  int status = 0;
  waitpid(job.pid, &status, 0);
  job.pid = -1;
  std::string text = slurp(err);
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 0) << text;
  EXPECT_EQ(poolrun::test::occurrences(text, "poolrun: warning: cannot renew lease L"), 1u) << text;
  EXPECT_NE(text.find("(cannot reach poold at " + uri), std::string::npos) << text;
  EXPECT_NE(text.find("; retrying until it expires at "), std::string::npos) << text;
  EXPECT_EQ(poolrun::test::occurrences(text, " renewed again after "), 1u) << text;
  EXPECT_EQ(text.find("ending the job"), std::string::npos) << text;

  std::string out;
  ASSERT_EQ(poolrun::test::runProgram({POOLCTL_BINARY, "--pool", uri, "status", "--json"}, &out,
                                      {"POOLRUN_TOKEN=tok-root-0123456789"}),
            0)
      << out;
  json s = json::parse(out);
  EXPECT_EQ(s["gpus"]["leased"], 0) << out;
  EXPECT_EQ(s["leases"], 0) << out;
}

// Ranks on a pool's own nodes get poolrun-rank as their reaper (POOLRUN_REAP=1, see
// RankWrapperTest.TheReaper*); simulated ones, under poolrun's own subreaper, do not; the user's
// -x POOLRUN_REAP=0 wins.
TEST(PoolOutageTest, RanksOnAPoolsNodesGetAReaper) {
  poolrun::test::TempDir tmp;
  std::filesystem::path tokens = tmp.writeSecret("tokens", poolrun::test::kTokens);
  PooldProcess poold(tmp.path() / "poold", tokens,
                     {"--cluster", (poolrun::test::sourceDir() / "clusters/sim-ib.toml").string()});
  auto dryRun = [&](const std::string& extra) {
    return poolrun::test::runShell(
        "env POOLRUN_TOKEN=tok-alice-0123456789 POOLRUN_STATE_DIR=" + (tmp.path() / "state").string() +
        " timeout 60 " + POOLRUN_BINARY + " --pool " + poold.uri() + " -n 2 --no-doctor --dry-run " + extra +
        " /bin/true");
  };
  auto remote = dryRun("");
  ASSERT_EQ(remote.status, 0) << remote.err;
  EXPECT_NE(remote.out.find("POOLRUN_REAP=1"), std::string::npos) << remote.out;
  EXPECT_NE(remote.out.find("-x POOLRUN_REAP "), std::string::npos) << remote.out;
  auto simulated = dryRun("--simulate");
  ASSERT_EQ(simulated.status, 0) << simulated.err;
  EXPECT_EQ(simulated.out.find("POOLRUN_REAP"), std::string::npos) << simulated.out;
  auto off = dryRun("-x POOLRUN_REAP=0");
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_EQ(off.out.find("POOLRUN_REAP=1"), std::string::npos) << off.out;
  EXPECT_NE(off.out.find("-x POOLRUN_REAP=0"), std::string::npos) << off.out;
}

// `poolrun -n 2 PROGRAM` on a poold pool's nodes without --simulate, where the remote shell cannot
// reach them (here a stand-in for ssh that answers as ssh does for a host that refuses): one line
// names the node and what to do, and poolrun exits 125 with the lease given back.
TEST(PoolOutageTest, ANodeTheRemoteShellCannotReachIsNamed) {
  poolrun::test::TempDir tmp;
  std::filesystem::path tokens = tmp.writeSecret("tokens", poolrun::test::kTokens);
  PooldProcess poold(tmp.path() / "poold", tokens,
                     {"--cluster", (poolrun::test::sourceDir() / "clusters/sim-ib.toml").string()});
  // Open MPI runs AGENT [options] HOST orted ...: the first word that is no option is the host.
  const std::filesystem::path ssh =
      tmp.write("bin/ssh",
                "#!/bin/sh\nfor a; do case $a in -*) ;; *) host=$a; break;; esac; done\n"
                "echo \"ssh: connect to host $host port 22: Connection refused\" >&2\nexit 255\n");
  std::filesystem::permissions(ssh, std::filesystem::perms(0755));
  auto r = poolrun::test::runShell(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=" + ssh.string() +
      " POOLRUN_TOKEN=tok-alice-0123456789 POOLRUN_STATE_DIR=" + (tmp.path() / "state").string() +
      " timeout 120 " + POOLRUN_BINARY + " --pool " + poold.uri() +
      " -n 2 --gpus-per-node 1 --no-doctor hostname");
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("poolrun: error: mpirun could not start the job on node "), std::string::npos)
      << r.err;
  EXPECT_NE(
      r.err.find(" port 22: Connection refused): the ranks on a poold pool's nodes are started from here "
                 "over ssh"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("run the pool's nodes here with --simulate. Exit status 125\n"), std::string::npos)
      << r.err;
  EXPECT_EQ(poolrun::test::occurrences(r.err, "poolrun: error:"), 1u) << r.err;
  std::string out;
  ASSERT_EQ(poolrun::test::runProgram({POOLCTL_BINARY, "--pool", poold.uri(), "status", "--json"}, &out,
                                      {"POOLRUN_TOKEN=tok-root-0123456789"}),
            0)
      << out;
  EXPECT_EQ(json::parse(out)["leases"], 0) << out;
}

}  // namespace
