// `poolrun plan` as a user runs it: the real binary in a child process.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/test_names.hpp"

namespace {

using poolrun::test::TempDir;

using Result = poolrun::test::ProcessResult;

Result run(const std::string& args, const std::string& envPrefix = "") {
  return poolrun::test::runShell(envPrefix + " " + POOLRUN_BINARY + " " + args);
}

std::string src(const char* rel) {
  return (poolrun::test::sourceDir() / rel).string();
}

TEST(PlanCommandTest, TableForTheShippedCluster) {
  Result r = run("plan --cluster " + src("clusters/hgx-h100.toml") + " -n 16");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("fabric ib · 16 ranks on 2 nodes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("RANK  NODE   LOCAL  GPU  BUS ID"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hgx02  7      7    0000:f3:00.0  mlx5_7  PIX   on   1     56-63"), std::string::npos)
      << r.out;
}

TEST(PlanCommandTest, JsonAndJobDirectory) {
  TempDir tmp;
  Result r = run("plan --cluster " + src("clusters/hgx-h100.toml") +
                 " -n 24 --gpus-per-node 4 --json --out " + (tmp.path() / "job").string());
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["schema"], "poolrun.plan/1");
  EXPECT_EQ(doc["ranks"].size(), 24u);
  EXPECT_EQ(doc["nodes"].size(), 6u);
  EXPECT_EQ(doc["ranks"][5]["env"]["NCCL_IB_HCA"], "=mlx5_1:1");
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "job/plan.json"));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "job/rankfile"));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "job/topo-hgx06.xml"));
}

// -x VAR=VALUE wins over the plan; the shell's value of a planned variable does not, and is named.
TEST(PlanCommandTest, ExportsWinAndTheShellDoesNot) {
  Result r =
      run("plan --from " + src("topologies/hgx-h100-8gpu-8nic.xml") + " -n 2 --json -x NCCL_IB_HCA=mlx5_3",
          "WORLD_SIZE=1 CUDA_VISIBLE_DEVICES=3");
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["ranks"][0]["env"]["NCCL_IB_HCA"], "mlx5_3");
  EXPECT_EQ(doc["ranks"][0]["user_won"]["NCCL_IB_HCA"]["planned"], "=mlx5_0:1");
  EXPECT_EQ(doc["ranks"][1]["env"]["WORLD_SIZE"], "2");
  EXPECT_EQ(doc["ranks"][1]["env"]["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_FALSE(doc["ranks"][1]["user_won"].contains("CUDA_VISIBLE_DEVICES"));
  EXPECT_NE(
      r.err.find("poolrun: note: your shell's CUDA_VISIBLE_DEVICES=3, WORLD_SIZE=1 not used: the plan sets "
                 "these for each rank"),
      std::string::npos)
      << r.err;
  Result shell =
      run("plan --from " + src("topologies/hgx-h100-8gpu-8nic.xml") + " -n 2 --json", "NCCL_IB_HCA=mlx5_3");
  ASSERT_EQ(shell.status, 0) << shell.err;
  EXPECT_EQ(nlohmann::json::parse(shell.out)["ranks"][0]["env"]["NCCL_IB_HCA"], "=mlx5_0:1");
}

TEST(PlanCommandTest, RoceTrafficClass) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  Result r = run("plan --cluster " + src("clusters/fixtures-mixed.toml") + " -n 4 --roce-tc 106 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["fabric"], "roce");
  EXPECT_EQ(doc["ranks"][0]["env"]["NCCL_IB_TC"], "106");
}

// What the plan claims on hardware the model under-describes, as the user sees it.
TEST(PlanCommandTest, EfaPlanClaimsNoGpuDirectRdmaAndSaysWhatNcclNeeds) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  std::string file = (dir / "nccl-topo/aws-ofi-nccl_p4d-24xl-topo.xml").string();
  Result r = run("plan --from " + file + " -n 8");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("fabric tcp · 8 ranks on 1 nodes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0     node0  0      0    0000:10:1c.0  pci:0000:10:1b.0  PIX   plugin  0     0-11\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("  on  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("through the aws-ofi-nccl net plugin"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  - GPUs 0-7 are A100 SXM4, which have NVLink, but " + file + " records no NVLink"),
            std::string::npos)
      << r.out;

  Result j = run("plan --from " + file + " -n 8 --json");
  ASSERT_EQ(j.status, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  for (const auto& rank : doc["ranks"]) {
    EXPECT_TRUE(rank["gdr"].is_null()) << rank.dump();
    EXPECT_EQ(rank["transport"], "ofi-plugin");
    EXPECT_TRUE(rank["nic_ports"][0]["rate_gbps"].is_null()) << "the file gives no rate";
  }
}

TEST(PlanCommandTest, TcpPlanSaysGdrDoesNotApply) {
  Result r = run("plan --cluster " + src("clusters/hgx-h100.toml") + " -n 8 --fabric tcp --gdr on");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("hgx01  7      7    0000:f3:00.0  -       -     n/a  1     56-63"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--gdr on does not apply to fabric tcp"), std::string::npos) << r.out;
}

TEST(PlanCommandTest, AmdGpusAreRefusedWithTheReason) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  Result r = run("plan --from " + (dir / "hwloc-xml/mpibind_epyc-corona.xml").string() + " -n 4");
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("has 0 NVIDIA GPUs on 0 nodes (and GPUs that take no rank, not being NVIDIA's: 4 AMD; "
                       "poolrun plans CUDA/NCCL ranks on NVIDIA GPUs only); give nodes with NVIDIA GPUs"),
            std::string::npos)
      << r.err;
}

struct Bad {
  const char* args;
  const char* message;
};

class PlanCommandErrors : public ::testing::TestWithParam<Bad> {};

TEST_P(PlanCommandErrors, ExitTwoWithTheReason) {
  TempDir tmp;
  tmp.write("missing-topo.toml", "[[group]]\nnodes = \"n[1-2]\"\ntopology = \"nope.xml\"\n");
  tmp.write("typo.toml", "[[group]]\nnodes = \"n[1-2]\"\ntopolgy = \"x.xml\"\n");
  tmp.write("badlist.toml", "[[group]]\nnodes = \"n[2-1]\"\ntopology = \"x.xml\"\n");
  tmp.write("broken.toml", "[[group]\nnodes = 3\n");
  std::string args = GetParam().args;
  for (size_t at; (at = args.find("TMP")) != std::string::npos;) args.replace(at, 3, tmp.path().string());
  for (size_t at; (at = args.find("SRC")) != std::string::npos;)
    args.replace(at, 3, poolrun::test::sourceDir().string());
  Result r = run(args);
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
}

void PrintTo(const Bad& b, std::ostream* os) {
  *os << "poolrun " << b.args << ": \"" << b.message << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlanCommandErrors,
    ::testing::Values(
        Bad{"plan --cluster SRC/clusters/hgx-h100.toml -n 129", "-n 129: "},
        Bad{"plan --cluster SRC/clusters/hgx-h100.toml -n 8 --gpus-per-node 9",
            "--gpus-per-node 9: node hgx01 has 8"},
        Bad{"plan --cluster SRC/clusters/hgx-h100.toml -n 8 --fabric roce",
            "--fabric roce: node hgx01 has no usable RoCE"},
        Bad{"plan --cluster SRC/clusters/hgx-h100.toml -n 8 --fabric fddi", "unknown fabric 'fddi'"},
        Bad{"plan --cluster SRC/clusters/hgx-h100.toml -n 8 --gdr maybe", "unknown --gdr 'maybe'"},
        Bad{"plan --cluster TMP/missing-topo.toml -n 2", "missing-topo.toml: group 1: topology: "},
        Bad{"plan --cluster TMP/missing-topo.toml -n 2", "/nope.xml: no such file (check the path)"},
        Bad{"plan --cluster TMP/typo.toml -n 2", "unknown key 'topolgy'"},
        Bad{"plan --cluster TMP/badlist.toml -n 2", "range '2-1' goes backwards"},
        Bad{"plan --cluster TMP/broken.toml -n 2", "broken.toml:1:"},
        Bad{"plan --cluster TMP/none.toml -n 2", "none.toml: no such file"},
        Bad{"plan -n 2", "give exactly one of --cluster FILE and --from TOPOLOGY"},
        Bad{"plan --cluster SRC/clusters/hgx-h100.toml", "-n N is required"}),
    [](const ::testing::TestParamInfo<Bad>& p) { return poolrun::test::testName(p.param.message); });

}  // namespace
