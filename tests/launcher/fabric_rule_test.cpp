// One fabric rule for the pool and the planner, over every topology of the real-machine fixtures:
// a node the pool grants for a fabric plans on that fabric, and a node that plans on a fabric is
// granted for it. The pool is PoolState itself (what poold, the embedded and the sim: pools run).

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "poolrun/common/error.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/fixtures.hpp"

namespace poolrun::launcher {
namespace {

using topo::Fabric;

const Fabric kFabrics[] = {Fabric::kIb, Fabric::kRoce, Fabric::kTcp};

pool::TimePoint t0() {
  return pool::TimePoint(std::chrono::hours(24 * 365 * 50));
}

std::string fabricText(std::optional<Fabric> f) {
  return f ? toString(*f) : "none";
}

// Every topology file of the fixtures that the readers take, each as a cluster of `nodes` nodes.
std::vector<topo::Cluster> fixtureClusters(const std::filesystem::path& dir, int nodes = 1) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".xml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<topo::Cluster> out;
  for (const std::filesystem::path& file : files) {
    std::shared_ptr<const topo::NodeTopology> t;
    try {
      t = std::make_shared<const topo::NodeTopology>(topo::readTopologyFile(file));
    } catch (const Error&) {
      continue;  // not a topology (NCCL's graph XML): the readers' tests cover what they refuse
    }
    topo::Cluster c;
    c.file = file;
    for (int i = 0; i < nodes; ++i) {
      topo::ClusterNode n;
      n.name = "n" + std::to_string(i + 1);
      n.topology = t;
      n.topology_file = file;
      c.nodes.push_back(n);
    }
    out.push_back(std::move(c));
  }
  return out;
}

size_t nvidiaGpus(const topo::NodeTopology& t) {
  return static_cast<size_t>(
      std::count_if(t.gpus.begin(), t.gpus.end(), [](const topo::Gpu& g) { return g.isNvidia(); }));
}

pool::PoolState poolOf(const topo::Cluster& c) {
  pool::PoolState state;
  for (const topo::ClusterNode& n : c.nodes) state.registerNode(n);
  return state;
}

// The lease the pool grants for `gpus` GPUs on `fabric` (nullopt: any), or nullopt where it
// refuses the request as one it can never satisfy.
std::optional<pool::Lease> poolGrant(const topo::Cluster& c, int gpus, std::optional<Fabric> fabric) {
  pool::PoolState state = poolOf(c);
  pool::LeaseRequest r;
  r.gpus = gpus;
  r.fabric = fabric;
  r.owner = "test";
  try {
    return state.submit(r, t0(), false).lease;
  } catch (const pool::PoolError& e) {
    EXPECT_EQ(e.failure(), pool::PoolFailure::kNeverFits) << e.what();
    return std::nullopt;
  }
}

// The plan of `ranks` ranks on `fabric` (nullopt: auto), or nullopt where the planner refuses the
// fabric for these nodes.
std::optional<JobPlan> plan(const topo::Cluster& c, int ranks, std::optional<Fabric> fabric) {
  PlanRequest req;
  req.ranks = ranks;
  req.fabric = fabric;
  try {
    return planOnCluster(c, req);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fabric " + fabricText(fabric)), std::string::npos)
        << "refused for something other than the fabric: " << e.what();
    return std::nullopt;
  }
}

TEST(FabricRule, PoolAndPlannerAgreeOnEveryFixture) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  std::vector<topo::Cluster> clusters = fixtureClusters(dir);
  ASSERT_GE(clusters.size(), 15u) << "fewer topology files than the fixtures hold: " << dir;
  int checked = 0;
  for (topo::Cluster& c : clusters) {
    const topo::NodeTopology& t = *c.nodes[0].topology;
    if (nvidiaGpus(t) == 0) continue;  // nothing to plan on (planner_test covers the message)
    const int gpus = static_cast<int>(nvidiaGpus(t));
    // As the topology says, and as a cluster file's `fabric =` says for it.
    for (std::optional<Fabric> declared : {std::optional<Fabric>(), std::optional(Fabric::kIb),
                                           std::optional(Fabric::kRoce), std::optional(Fabric::kTcp)}) {
      c.nodes[0].fabric = declared;
      for (Fabric f : kFabrics) {
        SCOPED_TRACE(c.file.filename().string() + ", declared " + fabricText(declared) + ", fabric " +
                     toString(f));
        std::optional<pool::Lease> lease = poolGrant(c, 1, f);
        std::optional<JobPlan> p = plan(c, gpus, f);
        EXPECT_EQ(lease.has_value(), p.has_value())
            << (lease ? "granted but does not plan" : "plans but not granted");
        if (p) {
          EXPECT_EQ(p->fabric, f);
        }
        ++checked;
      }
      // What the pool shows for the node is what a job on it alone runs on with --fabric auto.
      std::optional<JobPlan> automatic = plan(c, gpus, std::nullopt);
      ASSERT_TRUE(automatic);
      EXPECT_EQ(poolOf(c).nodeInfos().at(0).fabric, toString(automatic->fabric)) << c.file;
    }
  }
  EXPECT_GE(checked, 100);
}

// Seen on main: on two Azure NDv4 nodes (NCCL XML: bare InfiniBand <pci> NICs, no port state)
// `poolrun plan` said "fabric ib" while `poolrun --pool sim:... -n 16 --fabric ib` was refused with
// "the pool has 0 usable GPUs that match it".
TEST(FabricRule, AzureNdv4IsGrantedForTheFabricItPlansOn) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  std::vector<topo::Cluster> all = fixtureClusters(dir / "nccl-topo", 2);
  auto it = std::find_if(all.begin(), all.end(),
                         [](const topo::Cluster& c) { return c.file.filename() == "azure_ndv4-topo.xml"; });
  ASSERT_NE(it, all.end()) << "no azure_ndv4-topo.xml in " << dir;
  const topo::Cluster& c = *it;

  std::optional<JobPlan> automatic = plan(c, 16, std::nullopt);
  ASSERT_TRUE(automatic);
  EXPECT_EQ(automatic->fabric, Fabric::kIb);

  std::optional<pool::Lease> lease = poolGrant(c, 16, Fabric::kIb);
  ASSERT_TRUE(lease) << "the pool refuses 16 GPUs on ib";
  ASSERT_EQ(lease->gpus.size(), 16u);
  // The granted GPUs themselves plan on ib.
  std::vector<NodeGrant> grants;
  for (const topo::ClusterNode& n : c.nodes) {
    NodeGrant g;
    g.node = &n;
    for (const pool::GpuRef& ref : lease->gpus) {
      if (ref.node == n.name) g.gpus.push_back(ref.index);
    }
    grants.push_back(std::move(g));
  }
  PlanRequest req;
  req.ranks = 16;
  req.fabric = Fabric::kIb;
  EXPECT_EQ(makePlan(grants, req).fabric, Fabric::kIb);
  EXPECT_EQ(poolOf(c).nodeInfos().at(0).fabric, "ib");
}

}  // namespace
}  // namespace poolrun::launcher
