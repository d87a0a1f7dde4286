// The runtime and the examples through poolrun on the simulated cluster, with real Open MPI: what
// poolrun-rank gives every rank (torch.distributed variables, one rendezvous, a binding that took),
// every collective of the MPI backend, the allreduce benchmark's output and JSON, and data-parallel
// training that reaches the same weights on 1, 2 and 4 ranks.

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "poolrun/topo/cpuset.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

using nlohmann::json;
using poolrun::test::slurp;

std::string cluster() {
  return (poolrun::test::sourceDir() / "clusters/sim-ib.toml").string();
}

// The fields of a row of all_reduce_perf for doubles, each after one or more spaces: size count
// "double" "sum" "-1", then time algbw busbw #wrong out of place and the same in place; none
// where `line` is no such row.
std::vector<std::string> benchRow(const std::string& line) {
  // '#': digits, '.': digits and points, else the word itself.
  static const std::vector<std::string> kFields = {"#", "#", "double", "sum", "-1", ".", ".",
                                                   ".", "#", ".",      ".",   ".",  "#"};
  std::vector<std::string> fields;
  for (size_t at = 0; at < line.size();) {
    size_t start = line.find_first_not_of(' ', at);
    if (start == at || start == std::string::npos) return {};  // no space before it, or trailing spaces
    at = std::min(line.find(' ', start), line.size());
    fields.push_back(line.substr(start, at - start));
  }
  if (fields.size() != kFields.size()) return {};
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string& want = kFields[i];
    bool ok = want == "#"   ? fields[i].find_first_not_of("0123456789") == std::string::npos
              : want == "." ? fields[i].find_first_not_of("0123456789.") == std::string::npos
                            : fields[i] == want;
    if (!ok) return {};
  }
  return fields;
}

class RuntimeRunTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(tmp_.path() / "reports"); }

  poolrun::test::ProcessResult poolrun(int ranks, const std::string& program, const std::string& extra = "") {
    int perNode = ranks > 1 ? ranks / 2 : 1;
    std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_STATE_DIR=" +
                      tmp_.path().string() + "/state REPORT_DIR=" + (tmp_.path() / "reports").string() + " ";
    return poolrun::test::runShell(env + "timeout 300 " + POOLRUN_BINARY + " --pool sim:" + cluster() +
                                   " -n " + std::to_string(ranks) + " --gpus-per-node " +
                                   std::to_string(perNode) + " " + extra + " " + program);
  }
  std::filesystem::path path(const std::string& name) const { return tmp_.path() / name; }

  poolrun::test::TempDir tmp_;
};

// Each rank writes its environment and its CPU affinity as the kernel reports it.
constexpr const char* kEnvReport =
    "sh -c 'env > $REPORT_DIR/env-$RANK; grep Cpus_allowed_list /proc/self/status > $REPORT_DIR/cpus-$RANK'";

std::map<std::string, std::string> envReport(const std::filesystem::path& file) {
  std::map<std::string, std::string> env;
  std::istringstream in(slurp(file));
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

TEST_F(RuntimeRunTest, TorchVariablesAgreeAcrossRanksAndTheBindingTook) {
  auto r = poolrun(4, kEnvReport);
  ASSERT_EQ(r.status, 0) << r.err;
  std::set<std::string> ports, addrs;
  for (int rank = 0; rank < 4; ++rank) {
    std::string n = std::to_string(rank);
    auto env = envReport(path("reports") / ("env-" + n));
    ASSERT_FALSE(env.empty()) << "rank " << rank << " wrote no report";
    EXPECT_EQ(env["RANK"], n);
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    ports.insert(env["MASTER_PORT"]);
    addrs.insert(env["MASTER_ADDR"]);
    // The binding poolrun-rank reports is the process's CPU affinity.
    std::string cpus = slurp(path("reports") / ("cpus-" + n));
    std::string allowed = cpus.substr(cpus.find(':') + 1);
    allowed.erase(0, allowed.find_first_not_of(" \t"));
    allowed.erase(allowed.find_last_not_of(" \t\n") + 1);
    EXPECT_EQ(env["POOLRUN_BOUND_CPUS"], allowed) << "rank " << rank;
  }
  ASSERT_EQ(ports.size(), 1u) << "one MASTER_PORT for the job";
  EXPECT_GT(std::stoi(*ports.begin()), 0);
  EXPECT_EQ(addrs, std::set<std::string>{"127.0.0.1"}) << "every simulated node runs here";
  EXPECT_EQ(r.err.find("poolrun-rank: warning"), std::string::npos) << r.err;
}

TEST_F(RuntimeRunTest, UserRendezvousWins) {
  auto r = poolrun(2, kEnvReport, "-x MASTER_PORT=23456");
  ASSERT_EQ(r.status, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(envReport(path("reports") / ("env-" + std::to_string(rank)))["MASTER_PORT"], "23456");
  }
}

TEST_F(RuntimeRunTest, PlannedCoresAreBoundThroughTheKernel) {
  // A planned cpuset makes poolrun-rank bind (sched_setaffinity): every rank must end up on this
  // machine's last CPU, whichever core the rankfile gave it.
  unsigned last = poolrun::topo::CpuSet::parseList(slurp("/sys/devices/system/cpu/online")).cpus().back();
  auto r = poolrun(2, kEnvReport, "-x POOLRUN_CPUSET=" + std::to_string(last) + " -x POOLRUN_BIND=strict");
  ASSERT_EQ(r.status, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string n = std::to_string(rank);
    std::string cpus = slurp(path("reports") / ("cpus-" + n));
    EXPECT_NE(cpus.find(":\t" + std::to_string(last) + "\n"), std::string::npos)
        << "rank " << rank << ": " << cpus;
    EXPECT_EQ(envReport(path("reports") / ("env-" + n))["POOLRUN_BOUND_CPUS"], std::to_string(last));
  }
}

TEST_F(RuntimeRunTest, StrictBindingFailsARankThatCannotBeBound) {
  // Cores that this machine does not have: the binding cannot take.
  auto r = poolrun(2, "true", "-x POOLRUN_CPUSET=100000 -x POOLRUN_BIND=strict");
  EXPECT_EQ(r.status, 127) << r.err;
  EXPECT_NE(r.err.find("poolrun-rank: error: rank"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("planned cores 100000 are not all usable here"), std::string::npos) << r.err;
  auto warn = poolrun(2, "true", "-x POOLRUN_CPUSET=100000");
  EXPECT_EQ(warn.status, 0) << warn.err;
  EXPECT_NE(warn.err.find("poolrun-rank: warning: rank"), std::string::npos) << warn.err;
}

TEST_F(RuntimeRunTest, EveryCollectiveOfTheMpiBackend) {
  auto r = poolrun(4, COLLECTIVES_CHECK);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("collectives OK (MPI backend"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("MPI backend (host buffers): no usable GPU"), std::string::npos) << r.err;
}

TEST_F(RuntimeRunTest, AllreduceBenchOutputAndJson) {
  auto r = poolrun(4, std::string(ALLREDUCE_BENCH) + " -b 8 -e 1M -f 4 -n 2 -w 1 -d double --json " +
                          path("bench.json").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  // Every row as all_reduce_perf prints it: size count type redop root, then time algbw busbw
  // #wrong twice; #wrong 0.
  std::istringstream lines(r.out);
  std::string line;
  std::vector<size_t> sizes;
  while (std::getline(lines, line)) {
    std::vector<std::string> m = benchRow(line);
    if (m.empty()) continue;
    sizes.push_back(std::stoul(m[0]));
    EXPECT_EQ(std::stoul(m[1]) * 8, sizes.back());
    EXPECT_EQ(m[8], "0") << line;
    EXPECT_EQ(m[12], "0") << line;
    double algbw = std::stod(m[6]), busbw = std::stod(m[7]);
    EXPECT_NEAR(busbw, algbw * 2 * 3 / 4, 0.011) << line;
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288})) << r.out;
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# Avg bus bandwidth    : "), std::string::npos) << r.out;
  // What tools that read nccl-tests output make of it. `poolrun tuner calibrate` refuses this run
  // (its ranks ran on host memory: MPI's times teach nothing of NCCL's) and leaves the
  // configuration as it was; the same output as a run on GPUs names its devices is taken whole,
  // every row with the 4 ranks and 2 nodes of its "# Using devices" lines.
  std::ofstream(path("bench.txt")) << r.out;
  std::filesystem::copy_file(poolrun::test::sourceDir() / "tests/nccl_tuner/data/h100-ib-4node.json",
                             path("tuner.json"));
  const std::string before = slurp(path("tuner.json"));
  auto refused = poolrun::test::runShell(std::string(POOLRUN_BINARY) + " tuner calibrate --config " +
                                         path("tuner.json").string() + " " + path("bench.txt").string());
  EXPECT_EQ(refused.status, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("bench.txt:"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find(" ran on host memory (CPU buffers, MPI), not on a GPU"), std::string::npos)
      << refused.err;
  EXPECT_EQ(slurp(path("tuner.json")), before);
  std::string onGpus = r.out;
  for (size_t at = onGpus.find("host memory"); at != std::string::npos; at = onGpus.find("host memory", at))
    onGpus.replace(at, 11, "[0000:07:00] NVIDIA H100 80GB HBM3");
  std::ofstream(path("bench.txt"), std::ios::trunc) << onGpus;
  auto cal = poolrun::test::runShell(std::string(POOLRUN_BINARY) + " tuner calibrate --config " +
                                     path("tuner.json").string() + " " + path("bench.txt").string());
  ASSERT_EQ(cal.status, 0) << cal.out << cal.err;
  EXPECT_NE(cal.out.find("9 figures from 1 log"), std::string::npos) << cal.out << cal.err;
  json calibrated = json::parse(slurp(path("tuner.json")));
  EXPECT_NE(calibrated.dump().find("\"nranks\":4"), std::string::npos) << calibrated.dump();
  json doc = json::parse(slurp(path("bench.json")));
  EXPECT_EQ(doc["schema"], "poolrun.bench/1");
  EXPECT_EQ(doc["backend"], "mpi");
  EXPECT_EQ(doc["ranks"], 4);
  EXPECT_EQ(doc["nodes"], 2);
  EXPECT_EQ(doc["wrong"], 0);
  ASSERT_EQ(doc["rows"].size(), sizes.size());
  for (const json& row : doc["rows"]) {
    EXPECT_EQ(row["out_of_place"]["wrong"], 0);
    EXPECT_EQ(row["in_place"]["wrong"], 0);
    EXPECT_GT(row["out_of_place"]["time_us"].get<double>(), 0);
  }
}

TEST_F(RuntimeRunTest, AllreduceBenchBaselineAndBadOptions) {
  auto r = poolrun(2, std::string(ALLREDUCE_BENCH) + " -b 1M -e 1M -n 1 -w 0 --baseline --rounds 1 --json " +
                          path("base.json").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  json doc = json::parse(slurp(path("base.json")));
  ASSERT_EQ(doc["rows"].size(), 1u);
  EXPECT_GT(doc["rows"][0]["baseline_mpi"]["time_us"].get<double>(), 0);
  EXPECT_GT(doc["rows"][0]["overhead_ratio"].get<double>(), 0);
  auto bad = poolrun(2, std::string(ALLREDUCE_BENCH) + " -b 12X");
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("-b '12X': a size is a number of bytes"), std::string::npos) << bad.err;
}

TEST_F(RuntimeRunTest, DataParallelReachesTheSameWeightsOnAnyRankCount) {
  std::vector<json> results;
  for (int ranks : {1, 2, 4}) {
    std::string out = path("dp" + std::to_string(ranks) + ".json").string();
    auto r = poolrun(ranks, std::string(DATA_PARALLEL) + " --steps 200 --out " + out);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    results.push_back(json::parse(slurp(out)));
    EXPECT_EQ(results.back()["ranks"], ranks);
  }
  const json& one = results[0];
  for (const json& other : results) {
    ASSERT_EQ(other["weights"].size(), one["weights"].size());
    for (size_t j = 0; j < one["weights"].size(); ++j) {
      EXPECT_NEAR(other["weights"][j].get<double>(), one["weights"][j].get<double>(), 1e-9)
          << "weight " << j << " on " << other["ranks"] << " ranks";
      EXPECT_NEAR(other["weights"][j].get<double>(), one["truth"][j].get<double>(), 0.01) << "it converged";
    }
  }
}

}  // namespace

namespace {

// On real nodes (POOLRUN_CHECK_PORTS=1) the wrapper refuses to start the program when a port of
// its NCCL_IB_HCA is not active, names it, and exits 125; with the ports up it runs the program.
TEST(RankWrapperTest, StopsBeforeTheProgramWhenItsPortIsDown) {
  poolrun::test::TempDir sys;
  sys.write("class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  sys.write("class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  std::string env =
      "OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=8 POOLRUN_NODE=node07 POOLRUN_CHECK_PORTS=1 "
      "POOLRUN_SYSFS_ROOT=" +
      sys.path().string() + " ";
  auto down = poolrun::test::runShell(env + "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 " + POOLRUN_RANK_BINARY +
                                      " touch " + (sys.path() / "ran").string());
  EXPECT_EQ(down.status, 125) << down.err;
  EXPECT_NE(down.err.find("rank 3 on node07: mlx5_1 port 1 is 1: DOWN"), std::string::npos) << down.err;
  EXPECT_FALSE(std::filesystem::exists(sys.path() / "ran")) << "the program did not start";
  auto up = poolrun::test::runShell(env + "NCCL_IB_HCA==mlx5_0:1 " + POOLRUN_RANK_BINARY + " touch " +
                                    (sys.path() / "ran").string());
  EXPECT_EQ(up.status, 0) << up.err;
  EXPECT_TRUE(std::filesystem::exists(sys.path() / "ran"));
}

// An MPS share's rank (POOLRUN_MPS_WAIT, from the plan) waits for its GPU's MPS control daemon, whose
// PID file the node's agent has it write, and never starts the program without it: CUDA would run
// it without MPS and without the share's limits.
TEST(RankWrapperTest, AShareWaitsForItsMpsDaemonAndNeverStartsWithoutIt) {
  poolrun::test::TempDir dir;
  std::filesystem::create_directories(dir.path() / "gpu3");
  std::string env =
      "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 POOLRUN_NODE=node07 POOLRUN_MPS_WAIT=1 "
      "CUDA_MPS_PIPE_DIRECTORY=" +
      (dir.path() / "gpu3").string() + " ";
  auto none = poolrun::test::runShell(env + POOLRUN_RANK_BINARY + " touch " + (dir.path() / "ran").string());
  EXPECT_EQ(none.status, 127) << none.err;
  EXPECT_NE(
      none.err.find("rank 1 on node07: no MPS control daemon in " + (dir.path() / "gpu3").string() +
                    " after 1 s (no " + (dir.path() / "gpu3").string() + "/nvidia-cuda-mps-control.pid)"),
      std::string::npos)
      << none.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "ran"));
  // The daemon comes up while the rank waits: the program starts.
  auto later = poolrun::test::runShell("(sleep 0.3; echo 42 > " + (dir.path() / "gpu3").string() +
                                       "/nvidia-cuda-mps-control.pid) & " + env + "POOLRUN_MPS_WAIT=10 " +
                                       POOLRUN_RANK_BINARY + " touch " + (dir.path() / "ran").string());
  EXPECT_EQ(later.status, 0) << later.err;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "ran"));
}

// poolrun-rank finds and starts the program as execvp would (on musl, whose execvp leaves a script
// without "#!" to the shell, too): the PATH in order, past a file it may not execute, a script
// without "#!" through /bin/sh, and a message naming the program and the system's reason when
// there is none to run.
TEST(RankWrapperTest, StartsTheProgramAsExecvpDoes) {
  poolrun::test::TempDir dir;
  std::string marker = (dir.path() / "ran").string();
  dir.write("a/prog", "#!/bin/sh\necho a > " + marker + "\n");  // not executable
  dir.write("b/prog", "#!/bin/sh\necho b:\"$1\" > " + marker + "\n");
  dir.write("b/noshebang", "echo sh:\"$1\" > " + marker + "\n");
  dir.write("c/locked", "#!/bin/sh\n");
  std::filesystem::permissions(dir.path() / "b/prog", std::filesystem::perms::owner_all);
  std::filesystem::permissions(dir.path() / "b/noshebang", std::filesystem::perms::owner_all);
  std::string path =
      "PATH=" + dir.path().string() + "/missing:" + dir.path().string() + "/a:" + dir.path().string() + "/b ";
  auto found = poolrun::test::runShell(path + POOLRUN_RANK_BINARY + " prog 'x y'");
  EXPECT_EQ(found.status, 0) << found.err;
  EXPECT_EQ(slurp(marker), "b:x y\n");
  auto script = poolrun::test::runShell(path + POOLRUN_RANK_BINARY + " noshebang arg");
  EXPECT_EQ(script.status, 0) << script.err;
  EXPECT_EQ(slurp(marker), "sh:arg\n");
  auto direct =
      poolrun::test::runShell(std::string(POOLRUN_RANK_BINARY) + " " + dir.path().string() + "/b/prog z");
  EXPECT_EQ(direct.status, 0) << direct.err;
  EXPECT_EQ(slurp(marker), "b:z\n");
  // Not executable anywhere on the PATH: the permission is the reason, not "not found". (As root,
  // execve refuses a file without any execute bit all the same.)
  auto locked =
      poolrun::test::runShell("PATH=" + dir.path().string() + "/c " + POOLRUN_RANK_BINARY + " locked");
  EXPECT_EQ(locked.status, 127);
  EXPECT_NE(locked.err.find("poolrun-rank: error: cannot run 'locked': Permission denied"), std::string::npos)
      << locked.err;
  auto missing = poolrun::test::runShell(path + POOLRUN_RANK_BINARY + " no-such-program");
  EXPECT_EQ(missing.status, 127);
  EXPECT_NE(
      missing.err.find("cannot run 'no-such-program': No such file or directory (check the program's path"),
      std::string::npos)
      << missing.err;
}

// The plan's variables reach the program byte for byte (JSON escapes decoded), the rest of the
// environment is passed on, and POOLRUN_RANK_ENV itself is not.
// POOLRUN_REAP=1 (what poolrun sets for ranks on a pool's nodes): poolrun-rank stays beside the
// program as its subreaper, ends what it left running (a daemon, one that ignores SIGTERM too),
// passes the launcher's signals on, and ends as the program did.
TEST(RankWrapperTest, TheReaperEndsWhatTheProgramLeavesRunning) {
  poolrun::test::TempDir dir;
  std::string pids = (dir.path() / "pids").string();
  auto r = poolrun::test::runShell(
      "POOLRUN_REAP=1 " + std::string(POOLRUN_RANK_BINARY) + " sh -c '(setsid sleep 100 & echo $! >> " +
      pids + "); (trap \"\" TERM; setsid sh -c \"trap \\\"\\\" TERM; sleep 100\" & echo $! >> " + pids +
      "); exit 3'");
  EXPECT_EQ(r.status, 3) << r.err;
  std::istringstream in(slurp(pids));
  int n = 0;
  for (long pid; in >> pid; ++n)
    EXPECT_NE(::kill(static_cast<pid_t>(pid), 0), 0) << "pid " << pid << " survived";
  EXPECT_EQ(n, 2);
  auto plain = poolrun::test::runShell(std::string(POOLRUN_RANK_BINARY) + " sh -c 'exit 4'");
  EXPECT_EQ(plain.status, 4) << "without POOLRUN_REAP: exec'ed as before";
}

TEST(RankWrapperTest, TheReaperPassesSignalsOnAndEndsAsTheProgramDid) {
  poolrun::test::TempDir dir;
  std::string ready = (dir.path() / "ready").string(), got = (dir.path() / "got").string();
  // The program answers SIGTERM with exit 7: the wrapper must have passed the signal on.
  auto r = poolrun::test::runShell(
      "POOLRUN_REAP=1 " + std::string(POOLRUN_RANK_BINARY) + " sh -c 'trap \"echo term > " + got +
      "; exit 7\" TERM; touch " + ready + "; while :; do sleep 0.05; done' & w=$!; " +
      "for i in $(seq 200); do [ -e " + ready + " ] && break; sleep 0.05; done; kill -TERM $w; wait $w");
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_EQ(slurp(got), "term\n");
  // Killed by a signal, it ends by the same signal (the shell reports 128 + N).
  auto killed = poolrun::test::runShell("POOLRUN_REAP=1 " + std::string(POOLRUN_RANK_BINARY) +
                                        " sh -c 'kill -USR1 $$'");
  EXPECT_EQ(killed.status, 128 + SIGUSR1) << killed.err;
}

TEST(RankWrapperTest, ExportsThePlanAsWritten) {
  poolrun::test::TempDir dir;
  dir.write("doc.json", R"({"schema": "poolrun.rank-env/1", "templates": [[0, 1]], "runs": [[0, 1, 2, 0]],
    "sets": [{"A": "zero"}, {"A": "caf\u00e9 \ud83d\ude80 'q' \"d\" \\ $HOME", "CUDA_VISIBLE_DEVICES": "1"}]})");
  std::string out = (dir.path() / "env").string();
  auto r = poolrun::test::runShell(
      "KEEP=kept OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 POOLRUN_RANK_ENV=\"$(cat " +
      (dir.path() / "doc.json").string() + ")\" " + POOLRUN_RANK_BINARY +
      " sh -c 'printf \"%s|%s|%s|%s|%s|\" \"$A\" \"$CUDA_VISIBLE_DEVICES\" \"$KEEP\" \"$RANK\" "
      "\"${POOLRUN_RANK_ENV-unset}\" > " +
      out + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(slurp(out), "caf\xc3\xa9 \xf0\x9f\x9a\x80 'q' \"d\" \\ $HOME|1|kept|1|unset|");
  // The variables it neither sets nor removes reach the program in the order it got them.
  std::string env =
      "FIRST=1 OMPI_COMM_WORLD_RANK=0 POOLRUN_RANK_ENV='{\"schema\": \"poolrun.rank-env/1\", "
      "\"sets\": [{}], \"templates\": [[0]], \"runs\": [[0, 1, 1, 0]]}' MIDDLE=2 LAST=3 ";
  std::string added =
      " | grep -v -E '^(POOLRUN_RANK_ENV|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|POOLRUN_BOUND_[A-Z]+)='";
  auto plain = poolrun::test::runShell("(" + env + "env" + added + ")");
  auto wrapped = poolrun::test::runShell("(" + env + POOLRUN_RANK_BINARY + " env" + added + ")");
  ASSERT_EQ(wrapped.status, 0) << wrapped.err;
  EXPECT_NE(plain.out.find("FIRST=1"), std::string::npos) << plain.out;
  EXPECT_EQ(wrapped.out, plain.out);
  auto bad = poolrun::test::runShell("OMPI_COMM_WORLD_RANK=1 POOLRUN_RANK_ENV='{\"schema\": 1}' " +
                                     std::string(POOLRUN_RANK_BINARY) + " true");
  EXPECT_EQ(bad.status, 127);
  EXPECT_NE(bad.err.find("poolrun-rank: error: rank 1: POOLRUN_RANK_ENV: schema is not poolrun.rank-env/1"),
            std::string::npos)
      << bad.err;
}

TEST_F(RuntimeRunTest, PytorchDdpRecipe) {
  POOLRUN_TEST_TORCH_PYTHON(python);
  std::string out = path("ddp.json").string();
  auto r =
      poolrun(4, python + " " + std::string(PYTORCH_SCRIPT) + " --steps 100 --checkpoint '' --out " + out);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  json doc = json::parse(slurp(out));
  EXPECT_EQ(doc["ranks"], 4);
  EXPECT_TRUE(doc["same_on_every_rank"].get<bool>());
  for (size_t j = 0; j < doc["weights"].size(); ++j) {
    EXPECT_NEAR(doc["weights"][j].get<double>(), doc["truth"][j].get<double>(), 0.05) << "weight " << j;
  }
  // A damaged checkpoint stops the job with what to do; it is left as it was.
  const std::string damaged = path("damaged.ckpt").string();
  std::ofstream(damaged) << "not a checkpoint\n";
  auto bad = poolrun(2, python + " " + std::string(PYTORCH_SCRIPT) + " --steps 5 --checkpoint " + damaged);
  EXPECT_NE(bad.status, 0) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("ddp_train.py: error: cannot resume from " + damaged), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("move it away to start afresh"), std::string::npos) << bad.err;
  EXPECT_EQ(slurp(damaged), "not a checkpoint\n");
}

}  // namespace
