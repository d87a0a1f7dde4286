// poolrun against a real single-machine Slurm (scripts/slurm-test-cluster.sh, started by the CTest
// fixture): inside salloc (--pool slurm) and from outside (--pool slurm:debug), with mpirun (its
// daemons started through srun) and with --launcher srun. Every rank must get a GPU that Slurm
// allocated to the job and the variables of its plan, and no allocation may be left behind after
// success, failure, Ctrl-C or kill -9.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "support/hwloc_xml.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

using nlohmann::json;
using poolrun::test::slurp;
using poolrun::test::TempDir;
using namespace std::chrono_literals;
using Result = poolrun::test::ProcessResult;

const std::filesystem::path kCluster = POOLRUN_SLURM_DIR;

// Over loopback: the test node's "remote" daemons talk to mpirun on this machine.
constexpr const char* kLoopback = "--mca oob_tcp_if_include lo --mca btl_tcp_if_include lo ";

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::filesystem::exists(kCluster / "skip-reason"))
      GTEST_SKIP() << "Slurm cannot run here: " << slurp(kCluster / "skip-reason");
    if (!std::filesystem::exists(kCluster / "etc/slurm.conf"))
      GTEST_SKIP() << "the Slurm fixture did not run (ctest -R slurm starts it: slurm_cluster_start)";
    std::filesystem::create_directories(tmp_.path() / "state");
    std::filesystem::create_directories(tmp_.path() / "reports");
    ASSERT_TRUE(queueEmpty()) << "a job of an earlier test is still there";
  }

  // The test's environment: this Slurm, no allocation of a surrounding one, Open MPI as root.
  std::string env() const {
    return "env -u SLURM_JOB_ID -u SLURM_JOBID -u SLURM_STEP_ID -u SLURM_JOB_NODELIST "
           "SLURM_CONF=" +
           (kCluster / "etc/slurm.conf").string() +
           " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_STATE_DIR=" +
           (tmp_.path() / "state").string() + " REPORT_DIR=" + (tmp_.path() / "reports").string() + " ";
  }

  Result sh(const std::string& command) { return poolrun::test::runShell(env() + "timeout 90 " + command); }
  Result poolrun(const std::string& args) { return sh(std::string(POOLRUN_BINARY) + " " + args); }

  bool queueEmpty(std::chrono::seconds limit = 15s) {
    auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      Result q = sh("squeue -h -o '%i %T'");
      if (q.status == 0 && q.out.empty()) return true;
      if (std::chrono::steady_clock::now() > end) {
        ADD_FAILURE() << "squeue still lists: " << q.out << q.err;
        return false;
      }
      std::this_thread::sleep_for(200ms);
    }
  }

  json report(int rank) const {
    return json::parse(slurp(tmp_.path() / "reports" / ("rank-" + std::to_string(rank) + ".json")));
  }

  std::filesystem::path jobDir() const {
    for (const auto& e : std::filesystem::directory_iterator(tmp_.path() / "state/jobs"))
      if (e.is_directory()) return e.path();  // (beside it: .pruned, when pruning last looked)
    return {};
  }

  // Every rank: a GPU of the job's (the GPUs Slurm gave the step its daemons or tasks run in), no
  // two ranks the same GPU, the plan's variables, and Slurm's node.
  void checkRanks(int ranks) {
    json plan = json::parse(slurp(jobDir() / "plan.json"));
    ASSERT_EQ(plan["ranks"].size(), static_cast<size_t>(ranks));
    std::set<std::string> gpus;
    for (int r = 0; r < ranks; ++r) {
      json rep = report(r);
      EXPECT_EQ(rep["size"], ranks);
      EXPECT_EQ(rep["sum"], ranks * (ranks - 1) / 2) << "the ranks talked to each other";
      const json& env = rep["env"];
      EXPECT_EQ(env.value("SLURMD_NODENAME", ""), plan["ranks"][r]["node"]) << "rank " << r << " on its node";
      std::string cvd = env.value("CUDA_VISIBLE_DEVICES", "<unset>");
      std::string stepGpus = "," + env.value("SLURM_STEP_GPUS", "") + ",";
      EXPECT_NE(stepGpus.find("," + cvd + ","), std::string::npos)
          << "rank " << r << " GPU " << cvd << " is one Slurm allocated (" << stepGpus << ")";
      EXPECT_TRUE(gpus.insert(env.value("SLURMD_NODENAME", "") + ":" + cvd).second)
          << "rank " << r << " shares GPU " << cvd;
      for (const auto& [k, v] : plan["ranks"][r]["env"].items()) {
        EXPECT_EQ(env.value(k, "<unset>"), v.get<std::string>()) << "rank " << r << " " << k;
      }
    }
  }

  TempDir tmp_;
};

TEST_F(SlurmTest, InsideSallocEveryRankGetsASlurmGpu) {
  Result r = sh("salloc -N1 --gpus-per-node=2 --ntasks-per-node=2 " + std::string(POOLRUN_BINARY) +
                " --pool slurm -n 2 " + kLoopback + RANK_REPORT + " </dev/null");
  ASSERT_EQ(r.status, 0) << r.err;
  checkRanks(2);
  EXPECT_NE(r.err.find("Trusting Slurm"), std::string::npos) << "says what it could not bind: " << r.err;
  EXPECT_NE(slurp(jobDir() / "command").find("mpirun"), std::string::npos);
  EXPECT_TRUE(queueEmpty());
}

// Two nodes: mpirun starts a daemon on each through srun, the topology of both is probed in one
// step (one task per node), and every rank runs on its planned node. (Shared memory between the two
// "nodes" of one host is off: they are one machine.)
TEST_F(SlurmTest, InsideSallocTwoNodes) {
  Result r =
      sh("salloc -N2 --gpus-per-node=2 --ntasks-per-node=2 " + std::string(POOLRUN_BINARY) +
         " --pool slurm -n 4 --mca pml ob1 --mca btl self,tcp " + kLoopback + RANK_REPORT + " </dev/null");
  ASSERT_EQ(r.status, 0) << r.err;
  checkRanks(4);
  EXPECT_NE(r.err.find("probing the topology of sn[01-02]"), std::string::npos) << r.err;
  json plan = json::parse(slurp(jobDir() / "plan.json"));
  EXPECT_EQ(plan["ranks"][0]["node"], "sn01");
  EXPECT_EQ(plan["ranks"][3]["node"], "sn02");
  EXPECT_TRUE(queueEmpty());
}

// In a batch script (the batch step is no step of poolrun's): the allocation is the lease, and the
// node's topology is probed once, then taken from the cache.
TEST_F(SlurmTest, InsideSbatchTopologyProbedOnceThenCached) {
  std::string run = std::string(POOLRUN_BINARY) + " --pool slurm -n 2 " + kLoopback + RANK_REPORT;
  std::string script = tmp_.write("job.sh", "#!/bin/sh\n" + run + " 2>" + (tmp_.path() / "first").string() +
                                                "\n" + run + " 2>" + (tmp_.path() / "second").string() + "\n")
                           .string();
  Result r = sh("sbatch --wait --quiet -N1 --gpus-per-node=2 --ntasks-per-node=2 -o " +
                (tmp_.path() / "out").string() + " " + script);
  ASSERT_EQ(r.status, 0) << r.err << slurp(tmp_.path() / "out") << slurp(tmp_.path() / "first")
                         << slurp(tmp_.path() / "second");
  checkRanks(2);
  EXPECT_NE(slurp(tmp_.path() / "first").find("probing the topology of sn01"), std::string::npos)
      << slurp(tmp_.path() / "first");
  EXPECT_EQ(slurp(tmp_.path() / "second").find("probing the topology"), std::string::npos)
      << slurp(tmp_.path() / "second");
  int cached = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator(tmp_.path() / "state/slurm-topology"))
    ++cached;
  EXPECT_EQ(cached, 1);
  EXPECT_TRUE(queueEmpty());
}

// A job holding part of a node's CPUs has the node probed within them, and that view cached for
// those CPUs: the second poolrun of the same job (the same CPUs) probes no more. (On a one-CPU
// machine the job holds the whole node, which is cached as well.)
TEST_F(SlurmTest, PartOfANodeProbedOnceThenCached) {
  std::string run = std::string(POOLRUN_BINARY) + " --pool slurm -n 1 " + kLoopback + RANK_REPORT;
  std::string script = tmp_.write("job.sh", "#!/bin/sh\n" + run + " 2>" + (tmp_.path() / "first").string() +
                                                "\n" + run + " 2>" + (tmp_.path() / "second").string() + "\n")
                           .string();
  Result r = sh("sbatch --wait --quiet -N1 --gpus-per-node=1 --ntasks-per-node=1 -o " +
                (tmp_.path() / "out").string() + " " + script);
  ASSERT_EQ(r.status, 0) << r.err << slurp(tmp_.path() / "out") << slurp(tmp_.path() / "first")
                         << slurp(tmp_.path() / "second");
  checkRanks(1);
  std::string first = slurp(tmp_.path() / "first");
  EXPECT_NE(first.find("probing the topology of sn01"), std::string::npos) << first;
  if (sysconf(_SC_NPROCESSORS_ONLN) > 1) {
    EXPECT_NE(first.find("the job holds 1 of its"), std::string::npos)
        << "probed as part of a node: " << first;
  }
  EXPECT_EQ(slurp(tmp_.path() / "second").find("probing the topology"), std::string::npos)
      << slurp(tmp_.path() / "second");
  int cached = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator(tmp_.path() / "state/slurm-topology"))
    ++cached;
  EXPECT_EQ(cached, 1);
  EXPECT_TRUE(queueEmpty());
}

// A node whose topology is given (--topology): 2 GPUs and 2 InfiniBand NICs on one PCIe switch,
// on this machine's CPUs, so that the ranks get NIC variables from the plan.
std::string topologyWithNics() {
  namespace hx = poolrun::test::hwloc;
  std::string devices = hx::pciBridge(
      "0000:01:00.0", 2,
      hx::pciDev("0000:02:00.0", "0302", "10de:20b0") +
          hx::pciDev("0000:03:00.0", "0207", "15b3:101b", hx::osdev("mlx5_0", 3, {{"Port1State", "4"}})) +
          hx::pciDev("0000:04:00.0", "0302", "10de:20b0") +
          hx::pciDev("0000:05:00.0", "0207", "15b3:101b", hx::osdev("mlx5_1", 3, {{"Port1State", "4"}})));
  int pus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return hx::machine({{pus, hx::hostBridge("0000:[00-0f]", hx::pciBridge("0000:00:01.0", 1, devices))}});
}

TEST_F(SlurmTest, InsideSallocWithTopologyFileRanksGetTheirNics) {
  std::string topo = tmp_.write("node.xml", topologyWithNics()).string();
  // The NICs exist only in the topology file; each rank checks its own ports before the program
  // starts (POOLRUN_CHECK_PORTS), here in a /sys of the test's making.
  tmp_.write("sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  tmp_.write("sys/class/infiniband/mlx5_1/ports/1/state", "4: ACTIVE\n");
  std::string command = "salloc -N1 --gpus-per-node=2 --ntasks-per-node=2 " + std::string(POOLRUN_BINARY) +
                        " --pool slurm -n 2 --topology " + topo + " --mca pml ob1 --mca btl self,tcp " +
                        kLoopback + RANK_REPORT + " </dev/null";
  std::string sysfs = "env POOLRUN_SYSFS_ROOT=" + (tmp_.path() / "sys").string() + " ";
  Result r = sh(sysfs + command);
  ASSERT_EQ(r.status, 0) << r.err;
  checkRanks(2);
  EXPECT_EQ(r.err.find("Trusting Slurm"), std::string::npos) << r.err;
  std::set<std::string> hcas;
  for (int rank = 0; rank < 2; ++rank) hcas.insert(report(rank)["env"].value("NCCL_IB_HCA", ""));
  EXPECT_EQ(hcas, (std::set<std::string>{"=mlx5_0:1", "=mlx5_1:1"}));

  // A port that is down stops its rank before the program starts: the job ends, naming it.
  tmp_.write("sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  Result down = sh(sysfs + command);
  EXPECT_EQ(down.status, 125) << down.err;
  EXPECT_NE(down.err.find("mlx5_1 port 1 is 1: DOWN"), std::string::npos) << down.err;
  EXPECT_TRUE(queueEmpty());
}

// `poolrun doctor --slurm` runs the doctor on every node of the allocation: one table, a NODE
// column, both nodes there.
TEST_F(SlurmTest, DoctorOnEveryNodeOfTheAllocation) {
  Result r = sh("salloc -N2 " + std::string(POOLRUN_BINARY) + " doctor --slurm </dev/null");
  ASSERT_TRUE(r.status == 0 || r.status == 1) << r.out << r.err;
  EXPECT_NE(r.out.find("NODE"), std::string::npos) << r.out;
  for (const char* node : {"sn01", "sn02"}) {
    EXPECT_NE(r.out.find(std::string(node) + "  host.hwloc"), std::string::npos) << node << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("no report from this node"), std::string::npos) << r.out;
  Result outside = poolrun("doctor --slurm");
  EXPECT_EQ(outside.status, 2) << outside.err;
  EXPECT_NE(outside.err.find("SLURM_JOB_ID is not set"), std::string::npos) << outside.err;
  EXPECT_TRUE(queueEmpty());
}

TEST_F(SlurmTest, InsideTooFewGpusAndOutsideAnAllocation) {
  Result r = sh("salloc -N1 --gpus-per-node=1 " + std::string(POOLRUN_BINARY) + " --pool slurm -n 2 " +
                RANK_REPORT + " </dev/null");
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("-n 2 does not fit in Slurm job"), std::string::npos) << r.err;
  Result outside = poolrun("--pool slurm -n 1 " + std::string(RANK_REPORT));
  EXPECT_EQ(outside.status, 125);
  EXPECT_NE(outside.err.find("SLURM_JOB_ID is not set"), std::string::npos) << outside.err;
  Result part = poolrun("--pool slurm:nosuch -n 1 --wait 5 " + std::string(RANK_REPORT));
  EXPECT_EQ(part.status, 125);
  EXPECT_NE(part.err.find("invalid partition"), std::string::npos) << part.err;
  EXPECT_TRUE(queueEmpty());
}

TEST_F(SlurmTest, OutsideSuccessGivesTheAllocationBack) {
  Result r = poolrun("--pool slurm:debug -n 2 --gpus-per-node 2 --timeout 60 " + std::string(kLoopback) +
                     RANK_REPORT);
  ASSERT_EQ(r.status, 0) << r.err;
  checkRanks(2);
  EXPECT_TRUE(queueEmpty());
}

// What slurmctld's log says of how job `job` ended: its "_job_complete" and kill-request lines
// (this Slurm keeps no accounting, and forgets a finished job after MinJobAge).
std::string jobEnding(const std::string& job) {
  std::string ending;
  std::istringstream log(slurp(kCluster / "log/slurmctld.log"));
  for (std::string line; std::getline(log, line);) {
    if (line.ends_with(" JobId=" + job + " done")) continue;
    if (line.find("_job_complete: JobId=" + job + " ") != std::string::npos ||
        line.find("REQUEST_KILL_JOB JobId=" + job + " ") != std::string::npos)
      ending += line.substr(line.find("] ") + 2) + "\n";
  }
  return ending;
}

// The allocation ends as a completed job: salloc's command exits 0 and nothing signals or cancels
// it, so Slurm records COMPLETED (not a job killed by SIGTERM, then scancelled) and starts its next
// job at once. Also when the job itself failed: the allocation did what was asked of it.
TEST_F(SlurmTest, OutsideTheAllocationEndsAsACompletedJob) {
  for (const char* exit : {"", " --exit 1 7"}) {
    std::filesystem::remove_all(tmp_.path() / "state/jobs");
    Result r =
        poolrun("--pool slurm:debug -n 2 --gpus-per-node 2 " + std::string(kLoopback) + RANK_REPORT + exit);
    EXPECT_EQ(r.status, *exit ? 7 : 0) << r.err;
    // The job directory is named after the lease: slurm-JOB-PID.
    std::string lease = jobDir().filename().string();
    ASSERT_TRUE(lease.starts_with("slurm-")) << lease;
    std::string job = lease.substr(6, lease.find('-', 6) - 6);
    EXPECT_TRUE(queueEmpty());
    std::string ending;
    auto end = std::chrono::steady_clock::now() + 10s;
    while ((ending = jobEnding(job)).empty() && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(100ms);
    EXPECT_EQ(ending, "_job_complete: JobId=" + job + " WEXITSTATUS 0\n") << r.err;
  }
}

TEST_F(SlurmTest, OutsideFailureGivesTheAllocationBack) {
  Result r = poolrun("--pool slurm:debug -n 2 --gpus-per-node 2 " + std::string(kLoopback) + RANK_REPORT +
                     " --exit 1 7");
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_TRUE(queueEmpty());
}

TEST_F(SlurmTest, OutsideWithSrunLauncher) {
  Result r = poolrun("--pool slurm:debug -n 2 --gpus-per-node 2 --launcher srun " + std::string(RANK_REPORT));
  ASSERT_EQ(r.status, 0) << r.err;
  checkRanks(2);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(report(rank)["env"].value("RANK", ""), std::to_string(rank));
  EXPECT_NE(slurp(jobDir() / "command").find("srun --ntasks=2"), std::string::npos);
  EXPECT_TRUE(queueEmpty());
}

TEST_F(SlurmTest, OutsideSrunSaysWhichRankFailed) {
  Result r = poolrun("--pool slurm:debug -n 2 --gpus-per-node 2 --launcher srun " + std::string(RANK_REPORT) +
                     " --exit 1 7");
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_NE(r.err.find("poolrun: rank 1 on node sn01 (GPU 1) exited with code 7"), std::string::npos)
      << r.err;
  EXPECT_TRUE(queueEmpty());
}

class SlurmSignals : public SlurmTest, public ::testing::WithParamInterface<int> {};

TEST_P(SlurmSignals, OutsideTheAllocationIsGivenBack) {
  int sig = GetParam();
  pid_t pid = poolrun::test::spawnShell(
      env() + POOLRUN_BINARY + " --pool slurm:debug -n 2 --gpus-per-node 2 " + kLoopback + RANK_REPORT +
      " --sleep 60 >" + (tmp_.path() / "out").string() + " 2>" + (tmp_.path() / "err").string());
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp_.path() / "reports", 2, 60s)) << slurp(tmp_.path() / "err");
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  if (sig == SIGINT) {
    ASSERT_TRUE(WIFEXITED(status)) << "poolrun handles Ctrl-C itself";
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << slurp(tmp_.path() / "err");
  }
  // After SIGKILL salloc's command sees poolrun gone within a second and Slurm ends the job.
  EXPECT_TRUE(queueEmpty()) << slurp(tmp_.path() / "err");
}

// Ctrl-C while the request waits in Slurm's queue behind another job: the request is withdrawn.
TEST_F(SlurmTest, CtrlCWhileQueuedWithdrawsTheRequest) {
  // Every GPU of the node to a job that holds them (and runs nothing) until it is cancelled.
  Result blocker = sh("salloc --no-shell -N2 --gpus-per-node=4 -J blocker </dev/null");
  ASSERT_EQ(blocker.status, 0) << blocker.err;
  auto end = std::chrono::steady_clock::now();
  pid_t pid =
      poolrun::test::spawnShell(env() + POOLRUN_BINARY + " --pool slurm:debug -n 2 --gpus-per-node 2 " +
                                RANK_REPORT + " 2>" + (tmp_.path() / "err").string());
  end = std::chrono::steady_clock::now() + 20s;
  while (sh("squeue -h -t PD").out.empty() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(sh("squeue -h -t PD").out.empty())
      << "poolrun's request waits: " << slurp(tmp_.path() / "err");
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  // poolrun (the shell execs it) exits 130 for the interrupt, and says so in one line.
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130)
      << status << ": " << slurp(tmp_.path() / "err");
  EXPECT_NE(slurp(tmp_.path() / "err").find("withdrew the pending Slurm request"), std::string::npos)
      << slurp(tmp_.path() / "err");
  end = std::chrono::steady_clock::now() + 10s;
  while (!sh("squeue -h -t PD").out.empty() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(sh("squeue -h -t PD").out.empty()) << "the pending request is gone";
  sh("scancel -n blocker");
  EXPECT_TRUE(queueEmpty());
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "reports/rank-0.json")) << "nothing ran";
}

INSTANTIATE_TEST_SUITE_P(Slurm, SlurmSignals, ::testing::Values(SIGINT, SIGKILL),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(p.param == SIGINT ? "CtrlC" : "Kill9");
                         });

}  // namespace
