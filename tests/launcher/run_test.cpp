// `poolrun -n N PROGRAM` on the simulated cluster, with real Open MPI: what every rank received
// against the plan, for IB, RoCE and TCP and 1, 2 and 4 nodes; failures with real processes and
// signals; the lease is always given back and nothing is left running.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include "poolrun/common/text.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

using nlohmann::json;
using poolrun::test::TempDir;
using namespace std::chrono_literals;

using poolrun::test::slurp;

std::string src(const char* rel) {
  return (poolrun::test::sourceDir() / rel).string();
}

// One test's world: its own state directory (so its sim pool is its own) and report folder.
class RunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(tmp_.path() / "state");
    std::filesystem::create_directories(tmp_.path() / "reports");
  }

  std::string env() const {
    // CI runs as root; Open MPI wants to be told that this is intended (tests say so, not poolrun).
    return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_STATE_DIR=" +
           (tmp_.path() / "state").string() + " REPORT_DIR=" + (tmp_.path() / "reports").string() + " ";
  }

  using Result = poolrun::test::ProcessResult;

  Result poolrun(const std::string& args) {
    return poolrun::test::runShell(env() + "timeout 120 " + POOLRUN_BINARY + " " + args);
  }

  json report(int rank) const {
    return json::parse(slurp(tmp_.path() / "reports" / ("rank-" + std::to_string(rank) + ".json")));
  }

  // The only job directory under the state directory.
  std::filesystem::path jobDir() const {
    for (const auto& e : std::filesystem::directory_iterator(tmp_.path() / "state/jobs"))
      if (e.is_directory()) return e.path();  // (beside it: .pruned, when pruning last looked)
    return {};
  }

  // Leases still held in the sim pool, through poolctl.
  json leases(const std::string& cluster) {
    std::string cmd = env() + POOLCTL_BINARY + " --pool sim:" + cluster + " leases --json >" +
                      (tmp_.path() / "leases").string() + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(tmp_.path() / "leases");
    return json::parse(slurp(tmp_.path() / "leases"));
  }

  // Every rank got what the plan gave it: variables, its node, a CPU set mapped from the plan.
  void checkAgainstPlan(int ranks) {
    json plan = json::parse(slurp(jobDir() / "plan.json"));
    ASSERT_EQ(plan["ranks"].size(), static_cast<size_t>(ranks));
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (int r = 0; r < ranks; ++r) {
      json rep = report(r);
      const json& planned = plan["ranks"][r];
      EXPECT_EQ(rep["size"], ranks);
      EXPECT_EQ(rep["sum"], ranks * (ranks - 1) / 2) << "the ranks talked to each other";
      EXPECT_EQ(rep["env"]["POOLRUN_NODE"], planned["node"]) << "rank " << r;
      EXPECT_EQ(rep["host"], planned["node"]) << "rank " << r << " runs in its node's UTS namespace";
      for (const auto& [k, v] : planned["env"].items()) {
        EXPECT_EQ(rep["env"].value(k, "<unset>"), v.get<std::string>()) << "rank " << r << " " << k;
      }
      EXPECT_EQ(rep["env"]["POOLRUN_PLANNED_CPUSET"], planned["cpuset"]);
      ASSERT_FALSE(rep["cpus"].empty());
      for (const json& c : rep["cpus"]) EXPECT_LT(c.get<long>(), cpus);
      EXPECT_LT(rep["cpus"].size(), static_cast<size_t>(cpus) + 1);
    }
  }

  TempDir tmp_;
};

struct Shape {
  const char* name;
  const char* cluster;
  int ranks;
  int per_node;
  const char* fabric;
};

class RunShapes : public RunTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(RunShapes, EveryRankGetsItsPlan) {
  const Shape& s = GetParam();
  std::string args = "--pool sim:" + src(s.cluster) + " -n " + std::to_string(s.ranks) + " --gpus-per-node " +
                     std::to_string(s.per_node) + (std::string(s.fabric) == "tcp" ? " --fabric tcp" : "") +
                     " " + RANK_REPORT;
  Result r = poolrun(args);
  ASSERT_EQ(r.status, 0) << r.err;
  json plan = json::parse(slurp(jobDir() / "plan.json"));
  EXPECT_EQ(plan["fabric"], s.fabric);
  EXPECT_EQ(plan["nodes"].size(), static_cast<size_t>(s.ranks / s.per_node));
  checkAgainstPlan(s.ranks);
  EXPECT_TRUE(leases(src(s.cluster)).empty()) << "the lease was given back";
  // The tuner configuration written for the job is one the plugin's model accepts. (With TCP and
  // NICs the topology names only as RDMA devices there is no network to model, and no tuner.)
  std::filesystem::path tuner = jobDir() / "tuner.json";
  if (std::string(s.fabric) == "tcp") {
    EXPECT_FALSE(std::filesystem::exists(tuner));
    EXPECT_NE(r.err.find("NCCL tunes itself"), std::string::npos) << r.err;
    return;
  }
  Result explain = poolrun("tuner explain --config " + tuner.string() + " --min-bytes 1024 --max-bytes 1024");
  EXPECT_EQ(explain.status, 0) << explain.err;
  EXPECT_EQ(json::parse(report(0)["env"]["POOLRUN_TUNER_CONFIG"].get<std::string>()),
            json::parse(slurp(tuner)));
}

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.cluster << ", " << s.ranks << " ranks, " << s.per_node << " per node, " << s.fabric;
}

INSTANTIATE_TEST_SUITE_P(Sim, RunShapes,
                         ::testing::Values(Shape{"IbOneNode", "clusters/sim-ib.toml", 2, 2, "ib"},
                                           Shape{"IbTwoNodes", "clusters/sim-ib.toml", 4, 2, "ib"},
                                           Shape{"RoceTwoNodes", "clusters/sim-roce.toml", 4, 2, "roce"},
                                           Shape{"TcpTwoNodes", "clusters/sim-ib.toml", 4, 2, "tcp"},
                                           Shape{"IbFourNodes", "clusters/sim-4node.toml", 8, 2, "ib"}),
                         [](const ::testing::TestParamInfo<Shape>& p) { return std::string(p.param.name); });

TEST_F(RunTest, RoceRanksGetTheGidIndex) {
  Result r = poolrun("--pool sim:" + src("clusters/sim-roce.toml") +
                     " -n 2 --gpus-per-node 1 --roce-tc 106 " + RANK_REPORT);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(report(0)["env"]["NCCL_IB_GID_INDEX"], "3");
  EXPECT_EQ(report(1)["env"]["NCCL_IB_TC"], "106");
}

TEST_F(RunTest, RealFixtureCluster) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  Result r =
      poolrun("--pool sim:" + src("clusters/fixtures-ib.toml") + " -n 4 --gpus-per-node 2 " + RANK_REPORT);
  ASSERT_EQ(r.status, 0) << r.err;
  checkAgainstPlan(4);
}

TEST_F(RunTest, OldJobDirectoriesArePruned) {
  // 100 recent job directories and one from ten days ago: the next job's start removes the old one.
  namespace fs = std::filesystem;
  fs::path jobs = tmp_.path() / "state/jobs";
  auto make = [&](const std::string& id) {  // as poolrun makes them: named by the lease, marked
    fs::create_directories(jobs / id);
    std::ofstream(jobs / id / ".poolrun-job") << id << "\n";
  };
  for (int i = 0; i < 100; ++i) make("Lrecent" + std::to_string(i));
  make("Lold");
  fs::last_write_time(jobs / "Lold", fs::file_time_type::clock::now() - std::chrono::hours(24 * 10));
  // An old folder poolrun did not make stays.
  fs::create_directories(jobs / "experiment-2026-10");
  fs::last_write_time(jobs / "experiment-2026-10",
                      fs::file_time_type::clock::now() - std::chrono::hours(24 * 40));
  Result r = poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -n 1 true");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(fs::exists(jobs / "Lold"));
  EXPECT_TRUE(fs::exists(jobs / "Lrecent0"));
  EXPECT_TRUE(fs::exists(jobs / "experiment-2026-10"));
  size_t left = 0;
  for (const auto& e : fs::directory_iterator(jobs)) left += e.is_directory() ? 1 : 0;
  EXPECT_EQ(left, 102u) << "the 100 recent ones, the experiment's and this job's";
  // This job's directory is marked as poolrun's.
  size_t marked = 0;
  for (const auto& e : fs::directory_iterator(jobs))
    if (fs::exists(e.path() / ".poolrun-job") &&
        slurp(e.path() / ".poolrun-job") == e.path().filename().string() + "\n")
      ++marked;
  EXPECT_EQ(marked, 101u);
  // The next job within the hour does not look again.
  make("Lold2");
  fs::last_write_time(jobs / "Lold2", fs::file_time_type::clock::now() - std::chrono::hours(24 * 10));
  r = poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -n 1 true");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(jobs / "Lold2"));
}

// A DNS server on a loopback address that answers every question "no such name" and keeps the names
// it was asked. A test points a mount namespace's /etc/resolv.conf at it.
class NameServer {
 public:
  static constexpr const char* kAddress = "127.83.79.1";

  NameServer() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(53);
    inet_pton(AF_INET, kAddress, &addr.sin_addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    thread_ = std::thread([this] { serve(); });
  }
  ~NameServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  bool listening() const { return thread_.joinable(); }
  std::set<std::string> asked() {
    std::lock_guard lock(mu_);
    return asked_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) != 1) continue;
      unsigned char q[512];
      sockaddr_in from{};
      socklen_t len = sizeof from;
      ssize_t n = recvfrom(fd_, q, sizeof q, 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n < 12) continue;
      std::string name;
      size_t at = 12;
      while (at < static_cast<size_t>(n) && q[at] != 0 && at + 1 + q[at] <= static_cast<size_t>(n)) {
        name += (name.empty() ? "" : ".") + std::string(reinterpret_cast<char*>(q + at + 1), q[at]);
        at += 1 + q[at];
      }
      at += 5;  // the root label, QTYPE, QCLASS
      if (at > static_cast<size_t>(n)) continue;
      {
        std::lock_guard lock(mu_);
        asked_.insert(name);
      }
      q[2] = 0x80 | (q[2] & 0x79);  // a response to the same opcode, recursion desired as asked
      q[3] = 0x83;                  // recursion available, NXDOMAIN
      std::fill(q + 6, q + 12, 0);  // the question only
      sendto(fd_, q, at, 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }

  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::set<std::string> asked_;
};

// A simulated node's name is in no resolver, and Open MPI would ask DNS whether it is this machine:
// where the DNS server drops the question, that costs mpirun the resolver's 5 s timeout. poolrun
// tells Open MPI not to ask. Here every name any process of the job looks up reaches a DNS server of
// the test's own, in a mount namespace whose /etc/resolv.conf names it.
TEST_F(RunTest, SimulatedNodeNamesAreNotLookedUp) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: a mount namespace and port 53";
  if (std::system("unshare -m true 2>/dev/null") != 0) GTEST_SKIP() << "no mount namespaces here";
  NameServer dns;
  if (!dns.listening()) GTEST_SKIP() << "cannot listen on " << NameServer::kAddress << ":53";
  std::string resolv =
      tmp_.write("resolv.conf", "nameserver " + std::string(NameServer::kAddress) + "\n").string();
  Result r =
      poolrun::test::runShell("unshare -m sh -c 'mount --bind " + resolv +
                              " /etc/resolv.conf && getent hosts poolrun-dns-probe; exec env " + env() +
                              "timeout 120 " + POOLRUN_BINARY + " --pool sim:" + src("clusters/sim-ib.toml") +
                              " -n 4 --gpus-per-node 2 " + RANK_REPORT + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  checkAgainstPlan(4);
  std::set<std::string> asked = dns.asked();
  ASSERT_TRUE(asked.contains("poolrun-dns-probe")) << "the namespace's lookups reach the test's server";
  std::string names;
  for (const std::string& n : asked) names += " " + n;
  EXPECT_FALSE(asked.contains("ib01")) << "a simulated node's name was looked up; all asked:" << names;
  EXPECT_FALSE(asked.contains("ib02")) << "a simulated node's name was looked up; all asked:" << names;
}

TEST_F(RunTest, FailingRankExitCodeAndWhere) {
  Result r = poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -n 4 --gpus-per-node 2 " + RANK_REPORT +
                     " --exit 3 7");
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_NE(r.err.find("poolrun: rank 3 on node ib02 (GPU 1) exited with code 7"), std::string::npos)
      << r.err;
  EXPECT_TRUE(leases(src("clusters/sim-ib.toml")).empty());
}

// --retries: a job whose rank exits non-zero is restarted at once on a new lease, with the restart
// count its ranks see, up to N times; what the user or --timeout ended is not.
TEST_F(RunTest, AFailedJobIsRestartedUpToRetriesTimes) {
  const std::filesystem::path job = tmp_.path() / "job.sh";
  std::ofstream(job) << "#!/bin/sh\n"
                        "[ \"$POOLRUN_RESTART_COUNT\" = 0 ] && [ \"$OMPI_COMM_WORLD_RANK\" = 3 ] && exit 7\n"
                        "echo run $POOLRUN_RESTART_COUNT rank $OMPI_COMM_WORLD_RANK\n";
  std::filesystem::permissions(job, std::filesystem::perms::owner_all);
  const std::string cluster = src("clusters/sim-ib.toml");
  Result r = poolrun("--pool sim:" + cluster + " -n 4 --gpus-per-node 2 --retries 2 " + job.string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("poolrun: rank 3 on node ib02 (GPU 1) exited with code 7"), std::string::npos)
      << r.err;
  EXPECT_NE(
      r.err.find("poolrun: the job failed (exit status 7); restarting it (retry 1 of 2), in the same job "
                 "directory "),
      std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("retry 2"), std::string::npos) << r.err;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.out.find("run 1 rank " + std::to_string(rank)), std::string::npos) << r.out;
  EXPECT_TRUE(leases(cluster).empty());

  // Failing every time: restarted once, then its status; no node to blame, so no NODE_FAIL.
  r = poolrun("--pool sim:" + cluster + " -n 4 --gpus-per-node 2 --retries 1 " + RANK_REPORT + " --exit 3 7");
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_NE(r.err.find("restarting it (retry 1 of 1)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("retry 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("NODE_FAIL"), std::string::npos) << r.err;
  EXPECT_TRUE(leases(cluster).empty());

  // --timeout's end is the job's answer, not a failure to retry.
  r = poolrun("--pool sim:" + cluster + " -n 2 --gpus-per-node 1 --timeout 2 --retries 3 " + RANK_REPORT +
              " --sleep 60");
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;
}

TEST_F(RunTest, RankKilledBySignal) {
  Result r = poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -n 2 --gpus-per-node 1 " + RANK_REPORT +
                     " --signal 1 9");
  EXPECT_EQ(r.status, 128 + 9) << r.err;
  EXPECT_NE(r.err.find("rank 1 on node ib02"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
  EXPECT_TRUE(leases(src("clusters/sim-ib.toml")).empty());
}

TEST_F(RunTest, TimeoutEndsTheJob) {
  Result r = poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -n 2 --gpus-per-node 1 --timeout 3 " +
                     RANK_REPORT + " --sleep 60");
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_NE(r.err.find("past --timeout"), std::string::npos) << r.err;
  EXPECT_TRUE(leases(src("clusters/sim-ib.toml")).empty());
}

// What of the job is still running: ranks and Open MPI's daemons inherit REPORT_DIR and
// POOLRUN_STATE_DIR, which name the test's folder.
std::vector<std::string> leftovers(const std::filesystem::path& tmp) {
  return poolrun::test::processesMentioning(tmp.string());
}

std::string listed(const std::vector<std::string>& processes) {
  std::string s;
  for (const std::string& p : processes) s += "\n  " + p;
  return s;
}

class RunSignals : public RunTest, public ::testing::WithParamInterface<int> {};

TEST_P(RunSignals, ForwardedAndTheLeaseIsReleased) {
  int sig = GetParam();
  pid_t pid = poolrun::test::spawnShell(
      "env " + env() + POOLRUN_BINARY + " --pool sim:" + src("clusters/sim-ib.toml") +
      " -n 2 --gpus-per-node 1 " + RANK_REPORT + " --sleep 60 >" + (tmp_.path() / "out").string() + " 2>" +
      (tmp_.path() / "err").string());
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp_.path() / "reports", 2, 60s)) << slurp(tmp_.path() / "err");
  ASSERT_GE(leftovers(tmp_.path()).size(), 2u) << "the two ranks are found while they run";
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "poolrun itself handles the signal";
  EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << slurp(tmp_.path() / "err");
  EXPECT_NE(slurp(tmp_.path() / "err").find("forwarding signal " + std::to_string(sig)), std::string::npos);
  EXPECT_TRUE(leases(src("clusters/sim-ib.toml")).empty());
  std::this_thread::sleep_for(500ms);
  std::vector<std::string> left = leftovers(tmp_.path());
  EXPECT_TRUE(left.empty()) << "left behind:" << listed(left);
}

INSTANTIATE_TEST_SUITE_P(Sim, RunSignals, ::testing::Values(SIGINT, SIGTERM),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(p.param == SIGINT ? "SIGINT" : "SIGTERM");
                         });

TEST_F(RunTest, KillNineLeavesNothingAndTheLeaseExpires) {
  pid_t pid = poolrun::test::spawnShell(
      "env " + env() + POOLRUN_BINARY + " --pool sim:" + src("clusters/sim-ib.toml") +
      " -n 2 --gpus-per-node 1 --lease-ttl 3 " + RANK_REPORT + " --sleep 60 >" +
      (tmp_.path() / "out").string() + " 2>" + (tmp_.path() / "err").string());
  ASSERT_TRUE(poolrun::test::waitForFiles(tmp_.path() / "reports", 2, 60s)) << slurp(tmp_.path() / "err");
  EXPECT_EQ(leases(src("clusters/sim-ib.toml")).size(), 1u);
  ASSERT_GE(leftovers(tmp_.path()).size(), 2u) << "the two ranks are found while they run";
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  // mpirun dies at once (PR_SET_PDEATHSIG); its daemons then end the ranks, which on a loaded
  // machine takes a few seconds. The lease lapses after its 3 s time to live.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!leftovers(tmp_.path()).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(200ms);
  std::vector<std::string> left = leftovers(tmp_.path());
  EXPECT_TRUE(left.empty()) << "mpirun and the ranks die with poolrun; left behind:" << listed(left);
  std::this_thread::sleep_for(4s);
  EXPECT_TRUE(leases(src("clusters/sim-ib.toml")).empty()) << "the lease expired";
}

// A rank that leaves a daemon behind in a session of its own (closing its output, as daemons do:
// Open MPI waits for a rank's output to end) and exits: the daemon ends with the job.
TEST_F(RunTest, NoProcessOfTheJobOutlivesIt) {
  std::string pidFile = (tmp_.path() / "daemon.pid").string();
  Result r =
      poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -n 2 --gpus-per-node 1 /bin/sh -c " +
              "'[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] || exit 0; setsid sleep 100 </dev/null >/dev/null 2>&1 & " +
              "echo $! > " + pidFile + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  pid_t daemon = 0;
  std::ifstream(pidFile) >> daemon;
  ASSERT_GT(daemon, 0) << "the rank started its daemon";
  bool gone = kill(daemon, 0) != 0;
  if (!gone) kill(daemon, SIGKILL);
  EXPECT_TRUE(gone) << "pid " << daemon << " (setsid sleep 100, started by rank 1) outlived the job";
  EXPECT_TRUE(leases(src("clusters/sim-ib.toml")).empty());
}

TEST_F(RunTest, DryRunOpenMpi4And5) {
  Result r4 =
      poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -n 4 --gpus-per-node 2 --dry-run ./train");
  ASSERT_EQ(r4.status, 0) << r4.err;
  EXPECT_NE(r4.out.find("--rankfile"), std::string::npos) << r4.out;
  EXPECT_NE(r4.out.find("--mca plm_rsh_agent"), std::string::npos) << r4.out;
  EXPECT_NE(r4.out.find("poolrun-rank ./train"), std::string::npos) << r4.out;
  // A stub that reports Open MPI 5.
  std::string stub = tmp_.write("mpirun5", "#!/bin/sh\necho 'mpirun (Open MPI) 5.0.3'\n").string();
  std::filesystem::permissions(stub, std::filesystem::perms::owner_all);
  Result r5 = poolrun("--pool sim:" + src("clusters/sim-ib.toml") +
                      " -n 4 --gpus-per-node 2 --dry-run --mpirun " + stub + " ./train");
  ASSERT_EQ(r5.status, 0) << r5.err;
  EXPECT_NE(r5.out.find("--map-by rankfile:file="), std::string::npos) << r5.out;
  EXPECT_NE(r5.out.find("--prtemca plm_ssh_agent"), std::string::npos) << r5.out;
  EXPECT_TRUE(leases(src("clusters/sim-ib.toml")).empty());
}

// What --dry-run prints runs the job: the job directory's run.sh (the line the dry run prints) and its
// command file, each run with a shell after the dry run gave the lease back (a simulated cluster needs
// none), start every rank with its plan's variables, the tuner configuration and what --mpirun-arg
// gave mpirun.
TEST_F(RunTest, DryRunScriptRunsTheJob) {
  const std::string cluster = src("clusters/sim-ib.toml");
  Result dry = poolrun("--pool sim:" + cluster + " -n 4 --gpus-per-node 2 --dry-run --mpirun-arg -x " +
                       "--mpirun-arg USER_VIA_MPIRUN=yes " + RANK_REPORT);
  ASSERT_EQ(dry.status, 0) << dry.err;
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "reports" / "rank-0.json")) << "a dry run started ranks";
  EXPECT_TRUE(leases(cluster).empty()) << "the dry run gave its lease back";
  const std::string script = (jobDir() / "run.sh").string();
  const std::string line = "\n  sh " + script + "\n";
  ASSERT_NE(dry.out.find(line), std::string::npos) << "the dry run names the script to run\n" << dry.out;
  // The readable command is the command file, with the two JSON documents read from their files.
  const std::string command = slurp(jobDir() / "command");
  EXPECT_NE(dry.out.find(command), std::string::npos) << dry.out;
  EXPECT_NE(command.find("POOLRUN_RANK_ENV=\"$(cat " + (jobDir() / "rank-env.json").string() + ")\" \\\n"),
            std::string::npos)
      << command;
  EXPECT_NE(command.find("POOLRUN_TUNER_CONFIG=\"$(cat " + (jobDir() / "tuner.json").string() + ")\" \\\n"),
            std::string::npos)
      << command;

  for (const std::string& run : {"sh " + script, "sh " + (jobDir() / "command").string()}) {
    SCOPED_TRACE(run);
    std::filesystem::remove_all(tmp_.path() / "reports");
    std::filesystem::create_directories(tmp_.path() / "reports");
    // From another folder, as a user would: run.sh goes where poolrun ran; the command file runs
    // where it is run, and the program's path here is absolute.
    Result r = poolrun::test::runShell("cd / && " + env() + "timeout 120 " + run);
    ASSERT_EQ(r.status, 0) << r.err;
    checkAgainstPlan(4);
    for (int rank = 0; rank < 4; ++rank) {
      json rep = report(rank);
      EXPECT_EQ(rep["env"].value("RANK", ""), std::to_string(rank));
      EXPECT_EQ(rep["env"].value("USER_VIA_MPIRUN", ""), "yes") << "mpirun got -x USER_VIA_MPIRUN=yes";
      EXPECT_EQ(json::parse(rep["env"].value("POOLRUN_TUNER_CONFIG", "null")),
                json::parse(slurp(jobDir() / "tuner.json")));
    }
  }
}

// --tag-output (and mpirun's -np): every line a rank prints carries its rank, as mpirun prints it.
TEST_F(RunTest, TagOutputPrefixesEveryLineWithTheRank) {
  Result r =
      poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -np 2 --tag-output sh -c 'echo one; echo two'");
  ASSERT_EQ(r.status, 0) << r.err;
  std::multiset<std::string> seen;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    // "[JOB,RANK]<stdout>: TEXT" (the space is not there in every Open MPI version)
    using poolrun::common::takeDigits;
    using poolrun::common::takePrefix;
    std::string_view rest = l, rank;
    bool tagged = takePrefix(rest, "[") && !takeDigits(rest).empty() && takePrefix(rest, ",") &&
                  !(rank = takeDigits(rest)).empty() && takePrefix(rest, "]<stdout>:");
    takePrefix(rest, " ");
    ASSERT_TRUE(tagged && (rest == "one" || rest == "two")) << "an untagged line: '" << l << "'\n" << r.out;
    seen.insert(std::string(rank) + ":" + std::string(rest));
  }
  EXPECT_EQ(seen, (std::multiset<std::string>{"0:one", "0:two", "1:one", "1:two"})) << r.out;
}

// POOLRUN_POOL is the pool where --pool is not given; --pool wins over it.
TEST_F(RunTest, PoolFromTheEnvironment) {
  const std::string cluster = src("clusters/sim-ib.toml");
  Result r = poolrun::test::runShell(env() + "POOLRUN_POOL=sim:" + cluster + " timeout 120 " +
                                     POOLRUN_BINARY + " -n 2 --dry-run /bin/true");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(" from sim:" + cluster + " (released: dry run)"), std::string::npos) << r.out;
  Result option =
      poolrun::test::runShell(env() + "POOLRUN_POOL=sim:/nonexistent.toml timeout 120 " + POOLRUN_BINARY +
                              " --pool sim:" + cluster + " -n 2 --dry-run /bin/true");
  ASSERT_EQ(option.status, 0) << option.err;
  Result bad = poolrun::test::runShell(env() + "POOLRUN_POOL=sim:/nonexistent.toml timeout 120 " +
                                       POOLRUN_BINARY + " -n 2 --dry-run /bin/true");
  EXPECT_EQ(bad.status, 125) << bad.err;
  EXPECT_NE(bad.err.find("/nonexistent.toml"), std::string::npos) << bad.err;
}

// A two-node RoCE cluster whose second node's topology is the shipped one, changed by `change`.
std::string roceClusterWith(const TempDir& dir, const std::function<void(json&)>& change) {
  json topology = json::parse(slurp(src("topologies/hgx-h100-8gpu-8roce.json")));
  change(topology);
  std::ofstream(dir.path() / "changed.json") << topology.dump(1);
  std::ofstream(dir.path() / "cluster.toml")
      << "[[group]]\nnodes = \"roce01\"\ntopology = \"" << src("topologies/hgx-h100-8gpu-8roce.json")
      << "\"\nswitch = \"leaf1\"\n\n[[group]]\nnodes = \"roce02\"\n"
         "topology = \"changed.json\"\nswitch = \"leaf1\"\n";
  return (dir.path() / "cluster.toml").string();
}

// The pre-launch doctor judges simulated nodes by their fixtures: a RoCE port without a routable
// GID would hang the job, so poolrun refuses it (and gives the lease back) unless --no-doctor.
TEST_F(RunTest, DoctorRefusesAPortWithoutARoutableGid) {
  TempDir dir;
  std::string cluster = roceClusterWith(dir, [](json& t) {
    for (json& nic : t["nics"]) nic["ports"][0].erase("roce_v2_gid_index");
  });
  Result r = poolrun("--pool sim:" + cluster + " -n 2 --gpus-per-node 1 " + RANK_REPORT);
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("poolrun: doctor: FAIL roce.gid roce02 mlx5_"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("refusing to start: the doctor found 1 problem(s)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("roce01"), std::string::npos) << "the healthy node is not flagged\n" << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "reports" / "rank-0.json")) << "nothing started";
  EXPECT_TRUE(leases(cluster).empty()) << "the lease was given back";

  Result forced = poolrun("--pool sim:" + cluster + " -n 2 --gpus-per-node 1 --no-doctor " + RANK_REPORT);
  EXPECT_EQ(forced.status, 0) << forced.err;
  EXPECT_EQ(forced.err.find("poolrun: doctor:"), std::string::npos) << forced.err;
}

// A port that trained slower than its like ports makes the job slow, not hang: a warning, and it runs.
TEST_F(RunTest, DoctorWarnsOfASlowPortAndStarts) {
  TempDir dir;
  std::string cluster = roceClusterWith(dir, [](json& t) {
    for (json& nic : t["nics"]) nic["ports"][0]["rate_gbps"] = nic["name"] == "mlx5_7" ? 200 : 100;
  });
  Result r = poolrun("--pool sim:" + cluster + " -n 2 --gpus-per-node 1 " + RANK_REPORT);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("poolrun: doctor: WARN rdma.rate roce02 mlx5_"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("100 Gb/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fix: the link trained slow"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(tmp_.path() / "reports" / "rank-1.json"));
}

// A job directory file that cannot be written (here rankfile.mpi, where a directory stands) stops the
// launch before mpirun: exit 125, one line naming the file and the system's reason, no temporary left
// and the lease given back. (A full disk, the same error from the write itself: job_directory_test.)
TEST_F(RunTest, AJobFileThatCannotBeWrittenStopsTheLaunch) {
  const std::string cluster = src("clusters/sim-ib.toml");
  const std::filesystem::path job = tmp_.path() / "job";
  tmp_.write("job/rankfile.mpi/in-the-way", "");
  Result r = poolrun("--pool sim:" + cluster + " -n 2 --job-dir " + job.string() + " " + RANK_REPORT);
  EXPECT_EQ(r.status, 125) << r.err;
  const std::string line = "poolrun: error: " + (job / "rankfile.mpi").string() + ": cannot write (renaming ";
  EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Is a directory); check that the folder is writable and has space\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "reports" / "rank-0.json")) << "ranks were started";
  EXPECT_TRUE(std::filesystem::exists(job / "hostfile")) << "the files before it are written";
  EXPECT_FALSE(std::filesystem::exists(job / "command")) << "nothing after it is";
  for (const auto& e : std::filesystem::directory_iterator(job))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  EXPECT_TRUE(leases(cluster).empty()) << "the lease was given back";
}

// A CUDA_VISIBLE_DEVICES or WORLD_SIZE left in the shell never overrides the plan: every rank gets
// its own GPU and the job's size, and poolrun names what it did not use.
TEST_F(RunTest, TheShellsVariablesNeverOverrideThePlan) {
  Result r = poolrun::test::runShell(
      env() + "CUDA_VISIBLE_DEVICES=3 WORLD_SIZE=1 NCCL_IB_HCA=mlx5_9 timeout 120 " + POOLRUN_BINARY +
      " --pool sim:" + src("clusters/sim-ib.toml") + " -n 2 --gpus-per-node 2 " + RANK_REPORT);
  ASSERT_EQ(r.status, 0) << r.err;
  checkAgainstPlan(2);
  EXPECT_EQ(report(1)["env"]["WORLD_SIZE"], "2");
  EXPECT_NE(report(1)["env"]["CUDA_VISIBLE_DEVICES"], "3");
  EXPECT_NE(
      r.err.find("poolrun: note: your shell's CUDA_VISIBLE_DEVICES=3, NCCL_IB_HCA=mlx5_9, WORLD_SIZE=1 not "
                 "used: the plan sets these for each rank"),
      std::string::npos)
      << r.err;
  // Said once, not per rank or per node.
  EXPECT_EQ(r.err.find("your shell's"), r.err.rfind("your shell's")) << r.err;
}

// -x CUDA_VISIBLE_DEVICES=VALUE overrides the plan, but not to a GPU outside the lease: refused
// before anything starts, the lease given back. Within the lease it is taken.
TEST_F(RunTest, AnExportOfAGpuOutsideTheLeaseIsRefused) {
  const std::string cluster = src("clusters/sim-ib.toml");
  Result r =
      poolrun("--pool sim:" + cluster + " -n 2 --gpus-per-node 2 -x CUDA_VISIBLE_DEVICES=7 " + RANK_REPORT);
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("poolrun: error: -x CUDA_VISIBLE_DEVICES=7 puts rank 0 on node "), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(" on GPU 7, which lease "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" does not hold (it holds 0,1 there"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "reports" / "rank-0.json")) << "ranks were started";
  EXPECT_TRUE(leases(cluster).empty()) << "the lease was given back";

  Result within =
      poolrun("--pool sim:" + cluster + " -n 2 --gpus-per-node 2 -x CUDA_VISIBLE_DEVICES=1 " + RANK_REPORT);
  ASSERT_EQ(within.status, 0) << within.err;
  EXPECT_EQ(report(0)["env"]["CUDA_VISIBLE_DEVICES"], "1");
}

// A state directory another user owns, or that others may write, is refused before any lease.
TEST_F(RunTest, AStateDirectoryOthersCanChangeIsRefused) {
  namespace fs = std::filesystem;
  const std::string cluster = src("clusters/sim-ib.toml");
  fs::permissions(tmp_.path() / "state", fs::perms::all);
  Result r = poolrun("--pool sim:" + cluster + " -n 1 " + RANK_REPORT);
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("poolrun: error: state directory " + (tmp_.path() / "state").string() +
                       " is writable by every user (mode 0777, no sticky bit)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(tmp_.path() / "reports" / "rank-0.json"));
  fs::permissions(tmp_.path() / "state", fs::perms(0755));
  if (geteuid() == 0) {
    const fs::path theirs = tmp_.path() / "theirs";
    fs::create_directories(theirs);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    Result job = poolrun("--pool sim:" + cluster + " -n 1 --job-dir " + theirs.string() + " " + RANK_REPORT);
    EXPECT_EQ(job.status, 125) << job.err;
    EXPECT_NE(job.err.find("poolrun: error: job directory " + theirs.string() + " belongs to "),
              std::string::npos)
        << job.err;
    EXPECT_TRUE(fs::is_empty(theirs));
  }
  EXPECT_TRUE(leases(cluster).empty()) << "the lease was given back";
}

TEST_F(RunTest, RefusesWhatCannotBeMet) {
  Result r = poolrun("--pool sim:" + src("clusters/sim-ib.toml") + " -n 64 " + RANK_REPORT);
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("poolrun: error: "), std::string::npos);
  Result local = poolrun("-n 1 " + std::string(RANK_REPORT));
  if (local.status != 0) {  // a machine with GPUs could run it
    EXPECT_EQ(local.status, 125);
    EXPECT_NE(local.err.find("no GPUs on this node; use --pool sim:FILE"), std::string::npos) << local.err;
  }
  Result slurmSim = poolrun("--pool slurm --simulate -n 1 true");
  EXPECT_EQ(slurmSim.status, 125) << slurmSim.err;
  EXPECT_NE(slurmSim.err.find("--simulate runs a pool's nodes on this machine"), std::string::npos)
      << slurmSim.err;
  Result usage = poolrun("-n 2");
  EXPECT_EQ(usage.status, 2);
  EXPECT_NE(usage.err.find("no PROGRAM to run"), std::string::npos);
  // MPS shares need the daemons a poold pool's agents run: a pool without agents says so at once,
  // before anything is leased (the ranks would otherwise wait for a daemon nobody starts).
  for (const std::string& pool : {"--pool sim:" + src("clusters/sim-ib.toml"), std::string("--pool local")}) {
    Result share = poolrun(pool + " --share 0.5 -n 1 " + RANK_REPORT);
    EXPECT_EQ(share.status, 125) << share.err;
    EXPECT_NE(share.err.find("--share and --gpu-memory are for a poold pool (http://HOST:PORT)"),
              std::string::npos)
        << share.err;
    EXPECT_NE(share.err.find("this pool has no agent"), std::string::npos) << share.err;
  }
  EXPECT_TRUE(leases(src("clusters/sim-ib.toml")).empty());
}

}  // namespace
