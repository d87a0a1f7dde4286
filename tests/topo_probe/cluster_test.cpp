// Hostlists and cluster files.

#include <gtest/gtest.h>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/hostlist.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"
#include "support/test_names.hpp"

namespace poolrun::topo {
namespace {

using V = std::vector<std::string>;

TEST(HostlistTest, Expands) {
  EXPECT_EQ(expandHostlist("dgx[01-03]"), (V{"dgx01", "dgx02", "dgx03"}));
  EXPECT_EQ(expandHostlist("dgx[08-10]"), (V{"dgx08", "dgx09", "dgx10"}));
  EXPECT_EQ(expandHostlist("gpu[1-2,7],login1"), (V{"gpu1", "gpu2", "gpu7", "login1"}));
  EXPECT_EQ(expandHostlist("r[1-2]n[01-02]"), (V{"r1n01", "r1n02", "r2n01", "r2n02"}));
  EXPECT_EQ(expandHostlist("single"), (V{"single"}));
  EXPECT_EQ(expandHostlist("n[5]"), (V{"n5"}));
  EXPECT_EQ(expandHostlist("n[1-3]-ib"), (V{"n1-ib", "n2-ib", "n3-ib"}));
}

TEST(HostlistTest, RejectsMalformedLists) {
  for (const char* bad :
       {"n[1-2", "n1-2]", "n[2-1]", "n[a-b]", "n[]", "n[1-]", ",n1", "n[[1]]", "n[1-99999999]"}) {
    try {
      expandHostlist(bad);
      FAIL() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("bad hostlist '") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(expandHostlist("n[1-100]", 50), Error);
}

TEST(HostlistTest, CompressesRoundTrip) {
  for (const char* list : {"dgx[01-03,05]", "gpu[1-2,7],login1", "a1,b[2-3]", "n[08-12]"}) {
    EXPECT_EQ(compressHostlist(expandHostlist(list)), list);
  }
  EXPECT_EQ(compressHostlist({"n1", "n2", "n3"}), "n[1-3]");
  EXPECT_EQ(compressHostlist({}), "");
}

constexpr const char* kTopo = R"(<system version="1"><cpu numaid="0" affinity="ff">
<pci busid="0000:01:00.0" class="0x030200" vendor="0x10de" device="0x2330"/>
<pci busid="0000:02:00.0" class="0x020700" vendor="0x15b3" device="0x1021"/></cpu></system>)";

TEST(ClusterFileTest, ReadsGroupsWithSharedTopologies) {
  poolrun::test::TempDir tmp;
  tmp.write("topo/node.xml", kTopo);
  auto file = tmp.write("c.toml", R"(
[[group]]
nodes = "a[01-02]"
topology = "topo/node.xml"
switch = "leaf1"
rail_group = "x"
nvlink_domain = "rack1"
block = "b1"
spine = "s1"
fabric = "roce"
labels = { rack = "r1", gpu = "h100" }

[[group]]
nodes = "b1"
topology = "topo/node.xml"
)");
  Cluster c = readClusterFile(file);
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.nodes[0].name, "a01");
  EXPECT_EQ(c.nodes[0].levels.switch_name, "leaf1");
  EXPECT_EQ(c.nodes[0].levels.rail_group, "x");
  EXPECT_EQ(c.nodes[1].levels.nvlink_domain, "rack1");
  EXPECT_EQ(c.nodes[1].levels.block, "b1");
  EXPECT_EQ(c.nodes[1].levels.spine, "s1");
  EXPECT_EQ(c.nodes[2].levels, NodeLevels{}) << "no level given";
  EXPECT_EQ(c.nodes[0].fabric, Fabric::kRoce);
  EXPECT_EQ(c.nodes[0].labels.at("rack"), "r1");
  EXPECT_EQ(c.nodes[0].topology.get(), c.nodes[2].topology.get()) << "one file is read once";
  EXPECT_EQ(c.nodes[2].topology->gpus.size(), 1u);
  EXPECT_FALSE(c.nodes[2].fabric.has_value());
  EXPECT_EQ(c.node("b1"), &c.nodes[2]);
}

struct BadClusterFile {
  const char* toml;
  const char* message;
};

class ClusterFileErrors : public ::testing::TestWithParam<BadClusterFile> {};

TEST_P(ClusterFileErrors, NameTheFileAndTheProblem) {
  poolrun::test::TempDir tmp;
  tmp.write("node.xml", kTopo);
  auto file = tmp.write("c.toml", GetParam().toml);
  try {
    readClusterFile(file);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(file.string())) << e.what();
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

void PrintTo(const BadClusterFile& b, std::ostream* os) {
  *os << "error with \"" << b.message << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ClusterFileErrors,
    ::testing::Values(
        BadClusterFile{"", "no [[group]]"}, BadClusterFile{"[[group]\n", ":1: "},
        BadClusterFile{"name = 'x'\n[[group]]\nnodes='a'\ntopology='node.xml'\n",
                       "unknown top-level key 'name'"},
        BadClusterFile{"[[group]]\ntopology='node.xml'\n", "group 1: missing 'nodes'"},
        BadClusterFile{"[[group]]\nnodes='a'\n", "group 1: missing 'topology'"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nswich='x'\n", "unknown key 'swich'"},
        BadClusterFile{"[[group]]\nnodes=3\ntopology='node.xml'\n", "'nodes' must be a string"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nfabric='ethernet'\n",
                       "unknown fabric 'ethernet'"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nlabels='r1'\n",
                       "'labels' must be a table"},
        BadClusterFile{
            "[[group]]\nnodes='a[1-2]'\ntopology='node.xml'\n[[group]]\nnodes='a2'\ntopology='node.xml'\n",
            "group 2: node a2 is already in an earlier group"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='missing.xml'\n", "missing.xml: no such file"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nswitch=\"leaf\\u001b[2J\"\n",
                       "group 1: switch 'leaf\\x1b[2J': control character \\x1b at byte 4"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nrail_group=\"a\\u0007\"\n",
                       "group 1: rail_group 'a\\x07': control character"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nfabric=\"ib\\u0000x\"\n",
                       "group 1: fabric 'ib\\x00x': control character"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nlabels={rack=\"r\\u001b1\"}\n",
                       "group 1: label 'rack' 'r\\x1b1': control character"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nnvlink_domain=\"r\\u001b1\"\n",
                       "group 1: nvlink_domain 'r\\x1b1': control character"},
        BadClusterFile{
            "[[group]]\nnodes='n[1-10000]'\ntopology='node.xml'\nnvlink_domain='big'\n",
            "nvlink_domain 'big' joins 10000 GPUs on 10000 nodes; one NVLink domain joins at most 576"},
        BadClusterFile{"[[group]]\nnodes='a[1-2]'\ntopology='node.xml'\nnvlink_domain='r1'\nspine='s1'\n"
                       "[[group]]\nnodes='a3'\ntopology='node.xml'\nnvlink_domain='r1'\nspine='s2'\n",
                       "nvlink_domain 'r1': node a3 has spine 's2', node a1 of the same domain spine 's1'"},
        BadClusterFile{"[[group]]\nnodes='a'\ntopology='node.xml'\nspine=7\n", "'spine' must be a string"}),
    [](const ::testing::TestParamInfo<BadClusterFile>& p) {
      std::string name = poolrun::test::testName(p.param.message);
      return std::isdigit(static_cast<unsigned char>(name[0])) ? "syntax_error_at_line_" + name : name;
    });

TEST(ClusterFileTest, FixturesFolderOverride) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  poolrun::test::TempDir tmp;
  auto file = tmp.write(
      "c.toml", "[[group]]\nnodes='x'\ntopology='../../shared/fixtures/nccl-topo/azure_ndv2-topo.xml'\n");
  setenv("POOLRUN_FIXTURES", dir.c_str(), 1);
  Cluster c = readClusterFile(file);
  unsetenv("POOLRUN_FIXTURES");
  EXPECT_EQ(c.nodes[0].topology_file, dir / "nccl-topo/azure_ndv2-topo.xml");
  EXPECT_EQ(c.nodes[0].topology->gpus.size(), 8u);
}

}  // namespace
}  // namespace poolrun::topo
