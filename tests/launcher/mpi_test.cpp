// The Open MPI command line, the rank environment document and mpirun's failure messages.

#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/launcher/mpi.hpp"
#include "poolrun/launcher/supervisor.hpp"
#include "poolrun/runtime/rank_env.hpp"
#include "support/synthetic.hpp"

namespace poolrun::launcher {
namespace {

struct Fixture {
  topo::Cluster cluster;
  JobPlan plan;
  explicit Fixture(int nodes, int ranks, test::SyntheticSpec spec = {}) {
    auto t = std::make_shared<const topo::NodeTopology>(test::synthetic(spec));
    cluster.file = "c.toml";
    for (int i = 0; i < nodes; ++i) {
      topo::ClusterNode n;
      n.name = "n" + std::to_string(i + 1);
      n.topology = t;
      cluster.nodes.push_back(n);
    }
    PlanRequest req;
    req.ranks = ranks;
    plan = planOnCluster(cluster, req);
  }
};

LaunchSpec spec(const JobPlan& plan, bool sim) {
  LaunchSpec s;
  s.plan = &plan;
  s.job_dir = "/jobs/j1";
  s.rank_wrapper = "/bin/poolrun-rank";
  s.program = {"./train", "--lr", "0.1"};
  s.simulated = sim;
  s.sim_agent = "/bin/poolrun-sim-agent";
  s.local_cores = 2;
  s.job_env = {{"POOLRUN_RANK_ENV", "{}"}};
  s.user_exports = {"USER_A=1"};
  s.user_mca = {{"btl_base_verbose", "1"}};
  return s;
}

// torch.distributed's rendezvous: the first node and one port; a simulated job's gloo on loopback
// (it would look the node's name up, fail and say so from every rank); the user's values win.
TEST(MpiCommandTest, RendezvousVariables) {
  Fixture f(2, 4);
  using Vars = std::vector<std::pair<std::string, std::string>>;
  unsetenv("GLOO_SOCKET_IFNAME");
  EXPECT_EQ(rendezvousVariables(f.plan, false, 29500, {}),
            (Vars{{"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(rendezvousVariables(f.plan, true, 29500, {}),
            (Vars{{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"GLOO_SOCKET_IFNAME", "lo"}}));
  EXPECT_EQ(rendezvousVariables(f.plan, true, 29500, {{"GLOO_SOCKET_IFNAME", "eth9"}, {"MASTER_PORT", "1"}}),
            (Vars{{"MASTER_ADDR", "127.0.0.1"}}));
  setenv("GLOO_SOCKET_IFNAME", "eth3", 1);
  EXPECT_EQ(rendezvousVariables(f.plan, true, 29500, {}).size(), 2u) << "the shell's value stays";
  unsetenv("GLOO_SOCKET_IFNAME");
}

TEST(MpiCommandTest, OpenMpi4Syntax) {
  Fixture f(2, 16);
  MpiCommand c = buildMpiCommand(spec(f.plan, false), {"mpirun", MpiFlavor::kOmpi4, "4.1.4"});
  EXPECT_EQ(shellJoin(c.argv),
            "mpirun -np 16 --hostfile /jobs/j1/hostfile --rankfile /jobs/j1/rankfile.mpi --mca pml ucx --mca "
            "btl_base_verbose 1 -x POOLRUN_RANK_ENV -x USER_A=1 /bin/poolrun-rank ./train --lr 0.1");
  EXPECT_EQ(c.hostfile, "n1 slots=8\nn2 slots=8\n");
  EXPECT_EQ(c.rankfile.substr(0, c.rankfile.find('\n')), "rank 0=n1 slot=0-3");
  EXPECT_EQ(c.env, (std::vector<std::pair<std::string, std::string>>{{"POOLRUN_RANK_ENV", "{}"}}));
}

TEST(MpiCommandTest, OpenMpi5SyntaxForASimulatedCluster) {
  Fixture f(2, 16);
  MpiCommand c = buildMpiCommand(spec(f.plan, true), {"prterun", MpiFlavor::kOmpi5, "5.0.3"});
  std::string s = shellJoin(c.argv);
  EXPECT_NE(s.find("--map-by rankfile:file=/jobs/j1/rankfile.mpi"), std::string::npos) << s;
  EXPECT_NE(s.find("--prtemca plm_ssh_agent /bin/poolrun-sim-agent"), std::string::npos) << s;
  EXPECT_NE(
      s.find("--mca if_base_do_not_resolve 1 --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo "
             "--prtemca oob_tcp_if_include lo --mca mpi_yield_when_idle 1"),
      std::string::npos)
      << s;
  EXPECT_EQ(s.find("pml ucx"), std::string::npos);
  // Planned cores 0-3 of the fixture map onto the 2 cores here.
  EXPECT_EQ(c.rankfile.substr(0, c.rankfile.find('\n')), "rank 0=n1 slot=0-1");
  // PMIx reads these from the environment, in mpirun (4.x) or prterun (5.x) and in every rank.
  std::map<std::string, std::string> env(c.env.begin(), c.env.end());
  EXPECT_EQ(env["PMIX_MCA_gds"], "hash");
  EXPECT_EQ(env["PMIX_MCA_pif_base_do_not_resolve"], "1") << "the simulated nodes' names are not looked up";
}

// A job whose environment has no shell Open MPI knows (a detached job of a nologin service account)
// would find Open MPI's "unhandled shell" warning in its output: the simulated cluster's mpirun is
// told sh, the shell its agent runs; a known shell is left alone.
TEST(MpiCommandTest, AnUnknownShellIsToldShOnTheSimulatedCluster) {
  EXPECT_TRUE(openMpiKnowsShell("/bin/bash"));
  EXPECT_TRUE(openMpiKnowsShell("tcsh"));
  EXPECT_FALSE(openMpiKnowsShell("/usr/sbin/nologin"));
  EXPECT_FALSE(openMpiKnowsShell("/bin/dash"));
  EXPECT_FALSE(openMpiKnowsShell(""));
  EXPECT_FALSE(openMpiKnowsShell(nullptr));
  const char* saved = std::getenv("SHELL");
  const std::string keep = saved ? saved : "";
  Fixture f(1, 2);
  auto shellOf = [&](bool simulated) {
    MpiCommand c = buildMpiCommand(spec(f.plan, simulated), {"mpirun", MpiFlavor::kOmpi4, "4.1.4"});
    std::map<std::string, std::string> env(c.env.begin(), c.env.end());
    return env.contains("SHELL") ? env["SHELL"] : "(unset)";
  };
  unsetenv("SHELL");
  EXPECT_EQ(shellOf(true), "/bin/sh");
  EXPECT_EQ(shellOf(false), "(unset)") << "a real cluster's ssh runs the user's own shell";
  setenv("SHELL", "/usr/sbin/nologin", 1);
  EXPECT_EQ(shellOf(true), "/bin/sh");
  setenv("SHELL", "/bin/zsh", 1);
  EXPECT_EQ(shellOf(true), "(unset)");
  if (saved)
    setenv("SHELL", keep.c_str(), 1);
  else
    unsetenv("SHELL");
}

// --tag-output in the flavour's syntax, and --mpirun-arg verbatim after poolrun's own options, in order,
// before the rank wrapper (so that mpirun, not the program, gets them).
TEST(MpiCommandTest, TagOutputAndPassThrough) {
  Fixture f(1, 2);
  LaunchSpec s = spec(f.plan, false);
  s.tag_output = true;
  s.mpirun_args = {"--report-bindings", "--display-map", "-x", "A B"};
  const std::string tail = " -x POOLRUN_RANK_ENV -x USER_A=1 ";
  std::string four = shellJoin(buildMpiCommand(s, {"mpirun", MpiFlavor::kOmpi4, "4.1.4"}).argv);
  EXPECT_NE(
      four.find(tail + "--tag-output --report-bindings --display-map -x 'A B' /bin/poolrun-rank ./train"),
      std::string::npos)
      << four;
  EXPECT_EQ(four.find("--output"), std::string::npos) << four;
  std::string five = shellJoin(buildMpiCommand(s, {"mpirun", MpiFlavor::kOmpi5, "5.0.3"}).argv);
  EXPECT_NE(
      five.find(tail + "--output tag --report-bindings --display-map -x 'A B' /bin/poolrun-rank ./train"),
      std::string::npos)
      << five;
  EXPECT_EQ(five.find("--tag-output"), std::string::npos) << five;
  s.tag_output = false;
  s.mpirun_args.clear();
  std::string plain = shellJoin(buildMpiCommand(s, {"mpirun", MpiFlavor::kOmpi4, "4.1.4"}).argv);
  EXPECT_EQ(plain.find("tag"), std::string::npos) << plain;
}

TEST(MpiCommandTest, HardwareThreadSlots) {
  test::SyntheticSpec s;
  s.cores_per_numa = 2;
  Fixture f(1, 8, s);
  ASSERT_TRUE(f.plan.hwthread_slots);
  EXPECT_NE(shellJoin(buildMpiCommand(spec(f.plan, false), {"mpirun", MpiFlavor::kOmpi4, ""}).argv)
                .find("--use-hwthread-cpus"),
            std::string::npos);
  EXPECT_NE(shellJoin(buildMpiCommand(spec(f.plan, false), {"mpirun", MpiFlavor::kOmpi5, ""}).argv)
                .find("rankfile.mpi:HWTCPUS"),
            std::string::npos);
}

TEST(MpiCommandTest, ParsesVersions) {
  auto v4 =
      parseMpiVersion("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->first, MpiFlavor::kOmpi4);
  EXPECT_EQ(v4->second, "4.1.4");
  auto v5 = parseMpiVersion("mpirun (Open MPI) 5.0.3\n");
  ASSERT_TRUE(v5);
  EXPECT_EQ(v5->first, MpiFlavor::kOmpi5);
  auto prte = parseMpiVersion("prterun (PRRTE) 3.0.5\n");
  ASSERT_TRUE(prte);
  EXPECT_EQ(prte->first, MpiFlavor::kOmpi5);
  EXPECT_FALSE(parseMpiVersion("HYDRA build details:\n    Version: 4.0.2\n"));
  EXPECT_FALSE(parseMpiVersion("mpirun (Open MPI) 3.1.6\n"));
}

// Every launcher name and brand Open MPI and PRRTE print, the version's patch level optional, the
// first such line anywhere in the output.
TEST(MpiCommandTest, ParsesVersionsOfEveryLauncherName) {
  struct Case {
    std::string output;
    std::optional<std::pair<MpiFlavor, std::string>> expected;
  };
  for (const Case& c : std::vector<Case>{
           {"mpiexec (OpenRTE) 4.0.3\n", std::pair{MpiFlavor::kOmpi4, "4.0.3"}},
           {"prte (PRRTE) 2.0\n", std::pair{MpiFlavor::kOmpi5, "2.0"}},
           {"mpirun (Open MPI) 4.1\n", std::pair{MpiFlavor::kOmpi4, "4.1"}},
           {"mpirun (Open MPI) 4.1.4.2\n", std::pair{MpiFlavor::kOmpi4, "4.1.4"}},
           {"mpirun (Open MPI) 5.0.3rc1\n", std::pair{MpiFlavor::kOmpi5, "5.0.3"}},
           {"mpirun (Open MPI) 6.0.0\n", std::pair{MpiFlavor::kOmpi5, "6.0.0"}},
           {"/opt/ompi/bin/mpirun (Open MPI) 4.1.2\n", std::pair{MpiFlavor::kOmpi4, "4.1.2"}},
           {"warning: no hwloc\nmpirun (Open MPI)\nmpirun (Open MPI) 4.1.6\n",
            std::pair{MpiFlavor::kOmpi4, "4.1.6"}},
           {"mpirun (Open MPI) 4\n", std::nullopt},
           {"mpirun (Open MPI) 4.\n", std::nullopt},
           {"mpirun(Open MPI) 4.1.2\n", std::nullopt},
           {"mpirun (open mpi) 4.1.2\n", std::nullopt},
           {"mpirun (Intel MPI) 2021.1\n", std::nullopt},
       }) {
    EXPECT_EQ(parseMpiVersion(c.output), c.expected) << c.output;
  }
}

TEST(MpiCommandTest, ShellJoinQuotes) {
  EXPECT_EQ(shellJoin({"a", "b c", "it's", "x=1,y"}), "a 'b c' 'it'\\''s' x=1,y");
}

TEST(RankEnvTest, EveryRankGetsItsPlannedEnvironment) {
  Fixture f(4, 32);
  std::string doc = encodeRankEnv(f.plan, true);
  EXPECT_LT(doc.size(), 8192u) << "identical nodes share one run";
  for (const RankPlan& r : f.plan.ranks) {
    auto env = runtime::rankEnvironment(doc, r.rank);
    for (const auto& [k, v] : r.env) {
      if (k == "RANK") continue;
      EXPECT_EQ(env[k], v) << "rank " << r.rank << " " << k;
    }
    EXPECT_EQ(env["POOLRUN_PLANNED_CPUSET"], r.cpuset.toList());
  }
  EXPECT_THROW(runtime::rankEnvironment(doc, 32), Error);
}

TEST(RankEnvTest, ScalesTo12500Nodes) {
  Fixture f(12500, 100000);
  std::string doc = encodeRankEnv(f.plan, false);
  EXPECT_LT(doc.size(), 16384u) << "must fit an environment variable";
  EXPECT_EQ(runtime::rankEnvironment(doc, 99999)["LOCAL_RANK"], "7");
}

TEST(RankEnvTest, RejectsBadDocuments) {
  for (const char* bad :
       {"", "[]", "{\"schema\":\"x\"}",
        "{\"schema\":\"poolrun.rank-env/1\",\"sets\":[],\"templates\":[],\"runs\":[[0,1,1,5]]}",
        "{\"schema\":\"poolrun.rank-env/"
        "1\",\"sets\":[{\"A\":1}],\"templates\":[[0]],\"runs\":[[0,1,1,0]]}"}) {
    EXPECT_THROW(runtime::rankEnvironment(bad, 0), Error) << bad;
  }
}

TEST(MpiFailureTest, ParsesOpenMpiMessages) {
  auto exit4 = parseMpiFailure(
      "-------\nmpirun detected that one or more processes exited with non-zero status, thus causing\nthe "
      "job to be "
      "terminated. The first process to do so was:\n\n  Process name: [[48101,1],3]\n  Exit code:    "
      "7\n-----\n");
  ASSERT_TRUE(exit4);
  EXPECT_EQ(exit4->rank, 3);
  EXPECT_EQ(exit4->exit_code, 7);
  auto sig = parseMpiFailure(
      "mpirun noticed that process rank 1 with PID 4242 on node n2 exited on signal 9 (Killed).");
  ASSERT_TRUE(sig);
  EXPECT_EQ(sig->rank, 1);
  EXPECT_EQ(sig->node, "n2");
  EXPECT_EQ(sig->signal, 9);
  auto exit5 = parseMpiFailure("  Process name: [prterun-host-1234@1,5]\n  Exit code:    2\n");
  ASSERT_TRUE(exit5);
  EXPECT_EQ(exit5->rank, 5);
  EXPECT_EQ(exit5->exit_code, 2);
  EXPECT_FALSE(parseMpiFailure("all good"));
  // Numbers past an int (a broken or hostile mpirun) are read as the largest, never thrown.
  auto huge = parseMpiFailure(
      "mpirun noticed that process rank 99999999999999999999 with PID 1 on node n2 exited on signal "
      "99999999999999999999 (x).");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->rank, INT_MAX);
  EXPECT_EQ(huge->signal, INT_MAX);
}

// mpirun that could not start its daemons: the remote shell's line naming the node where there is
// one (Open MPI 4.1's output with ssh, captured here), else the banner of ORTE or PRRTE.
TEST(MpiFailureTest, ParsesDaemonsThatCouldNotStart) {
  const std::string banner =
      "--------------------------------------------------------------------------\n"
      "ORTE was unable to reliably start one or more daemons.\nThis usually is caused by:\n\n"
      "* not finding the required libraries and/or binaries on\n";
  auto resolve =
      parseDaemonFailure("ssh: Could not resolve hostname dgx-07: Name or service not known\n" + banner);
  ASSERT_TRUE(resolve);
  EXPECT_EQ(resolve->node, "dgx-07");
  EXPECT_EQ(resolve->reason, "ssh: Could not resolve hostname dgx-07: Name or service not known");
  auto refused = parseDaemonFailure(banner + "ssh: connect to host n2 port 22: Connection refused\r\n");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->node, "n2");
  EXPECT_EQ(refused->reason, "ssh: connect to host n2 port 22: Connection refused");
  auto denied = parseDaemonFailure("alice@gpu-a3: Permission denied (publickey,password).\n" + banner);
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->node, "gpu-a3");
  auto onlyBanner = parseDaemonFailure(banner);
  ASSERT_TRUE(onlyBanner);
  EXPECT_EQ(onlyBanner->node, "");
  EXPECT_EQ(onlyBanner->reason, "ORTE was unable to reliably start one or more daemons.");
  // poolrun-rsh's lines: a daemon that could not start, and one lost with its node's agent.
  auto agent = parseDaemonFailure(
      "poolrun: cannot start the job's daemon on node n02: its agent refused: launch credential refused\n" +
      banner);
  ASSERT_TRUE(agent);
  EXPECT_EQ(agent->node, "n02");
  EXPECT_EQ(agent->reason, "its agent refused: launch credential refused");
  auto lost = parseDaemonFailure(
      banner +
      "poolrun: lost the job's daemon on node n-07: its agent at 10.0.0.7:7141 closed the connection\n");
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->node, "n-07");
  EXPECT_EQ(lost->reason, "its agent at 10.0.0.7:7141 closed the connection");
  auto prrte = parseDaemonFailure("PRTE has lost communication with a remote daemon.\n");
  ASSERT_TRUE(prrte);
  EXPECT_EQ(prrte->node, "");
  EXPECT_FALSE(parseDaemonFailure("all good\nrank 0: Permission denied (no such file) in my program\n"));
  EXPECT_FALSE(parseDaemonFailure(""));
}

// The first failing rank in each form mpirun and srun write it: a signal before an exit code
// wherever they are, the exit code on a later line than the process name, the node as one word.
TEST(MpiFailureTest, ParsesEveryFormOfTheMessages) {
  auto show = [](const std::optional<RankFailure>& f) {
    return f ? "rank " + std::to_string(f->rank) + " node '" + f->node + "' exit " +
                   std::to_string(f->exit_code) + " signal " + std::to_string(f->signal)
             : std::string("none");
  };
  for (auto [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"process rank 12 with PID 7 on node gpu-01.example exited on signal 11 (Segmentation fault)",
            "rank 12 node 'gpu-01.example' exit 0 signal 11"},
           {"process rank 1 with PID 7 on node n1\texited on signal 9", "none"},
           {"process rank x with PID 1\nprocess rank 2 with PID 9 on node b exited on signal 15",
            "rank 2 node 'b' exit 0 signal 15"},
           {"  Process name: [[1,0],2]\n  Exit code: 3\nprocess rank 4 with PID 9 on node b exited on signal "
            "6",
            "rank 4 node 'b' exit 0 signal 6"},
           {"Process name:[[1,0],2]\n\n\t Exit code:3", "rank 2 node '' exit 3 signal 0"},
           {"Process name: [[1,0],2] Exit code: 3", "none"},
           {"Process name: [[1,0],2]\n Exit code: none", "none"},
           {"Process name: [48101,1,3]\n Exit code: 4", "rank 3 node '' exit 4 signal 0"},
           {"Process name: [prterun-a,b-1@1,5]\n Exit code: 2", "rank 5 node '' exit 2 signal 0"},
           {"Process name: [host,3]\n Exit code: 2", "rank 3 node '' exit 2 signal 0"},
           {"Process name: [,3]\n Exit code: 2", "none"},
           {"Process name: [[1,0],2]\n Exit code: 3\nProcess name: [h,5]\n Exit code: 6",
            "rank 2 node '' exit 3 signal 0"},
           {"Process name: [h,5]\n Exit code: 6\nProcess name: [[1,0],2]\n Exit code: 3",
            "rank 2 node '' exit 3 signal 0"},
           {"srun: error: n1: task 0: Exited with exit code 255", "rank 0 node 'n1' exit 255 signal 0"},
           {"srun: error: a:b: tasks 1,2-3: Hangup", "rank 1 node 'a:b' exit 0 signal 1"},
           {"srun: error: sn01:task 1: Killed", "none"},
           {"srun: error: sn01: task 1:Killed", "none"},
           {"srun: error: sn01: task one: Killed\nsrun: error: sn02: task 2: Terminated",
            "rank 2 node 'sn02' exit 0 signal 15"},
       }) {
    EXPECT_EQ(show(parseMpiFailure(text)), expected) << text;
  }
}

}  // namespace
}  // namespace poolrun::launcher
