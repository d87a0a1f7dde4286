// The doctor's scope for a plan, and the pre-launch verdict on simulated nodes.

#include "poolrun/launcher/preflight.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "poolrun/topo/cluster.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::launcher {
namespace {

using ::testing::HasSubstr;

topo::Cluster roceCluster() {
  return topo::readClusterFile(poolrun::test::sourceDir() / "clusters" / "sim-roce.toml");
}

TEST(PreflightTest, ScopeIsThePortsAndPairsOfTheNodesRanks) {
  topo::Cluster c = roceCluster();
  PlanRequest req;
  req.ranks = 4;
  req.gpus_per_node = 2;
  JobPlan plan = planOnCluster(c, req);
  ASSERT_EQ(plan.nodes.size(), 2u);
  for (size_t node = 0; node < 2; ++node) {
    doctor::Scope scope = doctorScope(plan, node);
    EXPECT_TRUE(scope.planned);
    std::set<std::string> expected;
    for (const RankPlan& r : plan.ranks) {
      if (r.node_index != node) continue;
      for (const NicChoice& n : r.nics) expected.insert(n.name);
    }
    std::set<std::string> got;
    for (const doctor::PlannedPort& p : scope.ports) {
      got.insert(p.nic);
      EXPECT_EQ(p.gid_index, 3) << p.nic << ": the plan's NCCL_IB_GID_INDEX";
    }
    EXPECT_EQ(got, expected);
    EXPECT_EQ(scope.ports.size(), expected.size()) << "each port once";
    EXPECT_EQ(scope.gdr.size(), expected.size()) << "one GPU-NIC pair per rank, all with GPUDirect RDMA";
  }
}

TEST(PreflightTest, TheUsersGidIndexIsTheOneJudged) {
  PlanRequest req;
  req.ranks = 2;
  req.gpus_per_node = 1;
  req.user_env["NCCL_IB_GID_INDEX"] = "0";
  JobPlan plan = planOnCluster(roceCluster(), req);
  for (const doctor::PlannedPort& p : doctorScope(plan, 0).ports) EXPECT_EQ(p.gid_index, 0);
  doctor::Report report = preflight(plan, [](const NodePlan&) { return false; });
  ASSERT_TRUE(report.failed()) << doctor::toText(report);
  for (const doctor::Check& c : report.checks) {
    if (c.status != doctor::Status::kFail) continue;
    EXPECT_EQ(c.id, "roce.gid");
    EXPECT_THAT(c.evidence, HasSubstr("the job would use GID index 0, but the RoCE v2 IPv4 GID is index 3"));
    EXPECT_THAT(c.fix, HasSubstr("NCCL_IB_GID_INDEX=3"));
    EXPECT_FALSE(c.node.empty());
  }
}

TEST(PreflightTest, HealthyFixturesAndTcpPassQuietly) {
  PlanRequest req;
  req.ranks = 4;
  req.gpus_per_node = 2;
  JobPlan plan = planOnCluster(roceCluster(), req);
  doctor::Report report = preflight(plan, [](const NodePlan&) { return false; });
  EXPECT_FALSE(report.failed());
  EXPECT_EQ(report.count(doctor::Status::kWarn), 0) << doctor::toText(report);
  EXPECT_GT(report.count(doctor::Status::kPass), 0);

  req.fabric = topo::Fabric::kTcp;
  JobPlan tcp = planOnCluster(roceCluster(), req);
  EXPECT_TRUE(preflight(tcp, [](const NodePlan&) { return false; }).checks.empty())
      << "TCP uses no RDMA port: nothing to judge";
}

TEST(PreflightTest, LiveNodesAreReadThroughTheirRoots) {
  PlanRequest req;
  req.ranks = 1;
  JobPlan plan = planOnCluster(roceCluster(), req);
  poolrun::test::TempDir empty;  // a node with no RDMA device at all, where the plan wants one
  doctor::Report report =
      preflight(plan, [](const NodePlan&) { return true; }, {empty.path(), empty.path(), empty.path()});
  ASSERT_TRUE(report.failed());
  EXPECT_EQ(report.checks.front().id, "rdma.port");
  EXPECT_THAT(report.checks.front().evidence, HasSubstr("the node has no such RDMA port"));
}

}  // namespace
}  // namespace poolrun::launcher
