// Placement over the levels above the node (docs/placement.md) on NVL72-like pools: 8 NVLink
// domains of 18 nodes x 4 GPUs, two domains under each leaf, two leaves under each spine. Requests
// land on the fewest domains and the lowest levels; a fragmented pool shows the choice; strict
// waits rather than cross a domain an empty pool would not; bad levels are refused.

#include <gtest/gtest.h>

#include <set>

#include "inventory.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/pool/placement.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using test::addInventory;
using test::parseRequest;
using test::t0;

// Rack k (1..racks): nodes rKn01..rKn18, NVLink domain rackK, leaf (k+1)/2, spine (k+3)/4.
std::string nvl72(int racks) {
  std::string spec;
  for (int k = 1; k <= racks; ++k)
    spec += "r" + std::to_string(k) + "n[01-18]/gpu[0-3]@leaf" + std::to_string((k + 1) / 2) + " nvl=rack" +
            std::to_string(k) + " spine=s" + std::to_string((k + 3) / 4) + "; ";
  return spec;
}

// Leases of every GPU of nodes PREFIX<from>..PREFIX<to> (two digits).
std::string leased(const std::string& prefix, int from, int to, const char* gpus = "0-3") {
  std::string spec;
  for (int n = from; n <= to; ++n)
    spec += prefix + (n < 10 ? "0" : "") + std::to_string(n) + " leased " + gpus + "; ";
  return spec;
}

std::shared_ptr<topo::NodeTopology> gpusOf(int count) {
  test::SyntheticSpec spec;
  spec.gpus = count;
  spec.nics = count;
  return std::make_shared<topo::NodeTopology>(test::synthetic(spec));
}

// The names at a level of the nodes `gpus` are on.
std::set<std::string> namesOf(const PoolState& s, const std::vector<GpuRef>& gpus,
                              std::string topo::NodeLevels::*level) {
  std::set<std::string> out;
  for (const GpuRef& g : gpus) out.insert(s.nodeMap().at(g.node).levels.*level);
  return out;
}

size_t nodesOf(const std::vector<GpuRef>& gpus) {
  std::set<std::string> nodes;
  for (const GpuRef& g : gpus) nodes.insert(g.node);
  return nodes.size();
}

TEST(Levels, RequestsLandOnTheFewestDomainsAndTheLowestLevels) {
  struct Case {
    int gpus;
    size_t nodes, domains, leaves, spines;
  };
  for (const Case& c : {Case{4, 1, 1, 1, 1}, Case{64, 16, 1, 1, 1}, Case{72, 18, 1, 1, 1},
                        Case{144, 36, 2, 1, 1}, Case{200, 50, 3, 2, 1}, Case{576, 144, 8, 4, 2}}) {
    PoolState s;
    addInventory(s, nvl72(8), t0());
    const SubmitResult r = s.submit(parseRequest(std::to_string(c.gpus)), t0());
    ASSERT_TRUE(r.lease) << c.gpus;
    const std::vector<GpuRef>& gpus = r.lease->gpus;
    EXPECT_EQ(nodesOf(gpus), c.nodes) << c.gpus << ": whole nodes";
    EXPECT_EQ(namesOf(s, gpus, &topo::NodeLevels::nvlink_domain).size(), c.domains) << c.gpus;
    EXPECT_EQ(namesOf(s, gpus, &topo::NodeLevels::switch_name).size(), c.leaves) << c.gpus;
    EXPECT_EQ(namesOf(s, gpus, &topo::NodeLevels::spine).size(), c.spines) << c.gpus;
  }
}

TEST(Levels, AFragmentedPoolTakesTheTightestDomainThatHoldsTheRequest) {
  PoolState s;
  // rack1: 10 nodes free (40 GPUs); rack2: 15 free (60); rack3 and rack4 whole (72).
  addInventory(s, nvl72(4) + leased("r1n", 1, 8) + leased("r2n", 1, 3), t0());
  const SubmitResult fortyEight = s.submit(parseRequest("48"), t0());
  ASSERT_TRUE(fortyEight.lease);
  EXPECT_EQ(namesOf(s, fortyEight.lease->gpus, &topo::NodeLevels::nvlink_domain),
            std::set<std::string>{"rack2"})
      << "rack1 is too small; rack2 is tighter than the whole racks";
  const SubmitResult forty = s.submit(parseRequest("40"), t0());
  ASSERT_TRUE(forty.lease);
  EXPECT_EQ(namesOf(s, forty.lease->gpus, &topo::NodeLevels::nvlink_domain), std::set<std::string>{"rack1"});
  const SubmitResult more = s.submit(parseRequest("72"), t0());
  ASSERT_TRUE(more.lease);
  EXPECT_EQ(namesOf(s, more.lease->gpus, &topo::NodeLevels::nvlink_domain).size(), 1u);
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Levels, ARequestNoDomainHoldsSpreadsOverTheFewestUnderOneLeaf) {
  PoolState s;
  // Every rack 2 nodes short (64 free): 68 GPUs fit no domain now, one when the pool empties.
  std::string spec = nvl72(8);
  for (int k = 1; k <= 8; ++k) spec += leased("r" + std::to_string(k) + "n", 17, 18);
  addInventory(s, spec, t0());
  const SubmitResult best = s.submit(parseRequest("68"), t0());
  ASSERT_TRUE(best.lease) << "best effort: over two domains now";
  EXPECT_EQ(namesOf(s, best.lease->gpus, &topo::NodeLevels::nvlink_domain).size(), 2u);
  EXPECT_EQ(namesOf(s, best.lease->gpus, &topo::NodeLevels::switch_name).size(), 1u) << "both under one leaf";

  const SubmitResult strict = s.submit(parseRequest("68 strict"), t0());
  EXPECT_FALSE(strict.lease) << "strict: an empty pool holds it in one domain, so it waits";
  EXPECT_GT(strict.ticket, 0);
  s.release(best.lease->id, "alice", false, t0());
  s.tick(t0());
  ASSERT_EQ(s.queueList().size(), 1u) << "64 free per rack again: still no domain holds 68";
  EXPECT_EQ(s.queueList()[0].ticket, strict.ticket);
  const SubmitResult wholeRack = s.submit(parseRequest("64 strict"), t0());
  ASSERT_TRUE(wholeRack.lease) << "64 fits one domain now";
  EXPECT_EQ(namesOf(s, wholeRack.lease->gpus, &topo::NodeLevels::nvlink_domain).size(), 1u);
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Levels, StrictTakesAsManyDomainsAsAnEmptyPoolWould) {
  PoolState s;
  addInventory(s, nvl72(4), t0());
  const SubmitResult r = s.submit(parseRequest("144 strict"), t0());
  ASSERT_TRUE(r.lease) << "two domains is the best there is";
  EXPECT_EQ(namesOf(s, r.lease->gpus, &topo::NodeLevels::nvlink_domain).size(), 2u);
  EXPECT_EQ(namesOf(s, r.lease->gpus, &topo::NodeLevels::switch_name).size(), 1u);
}

TEST(Levels, PoolsWithoutDomainsKeepTheirLeafRule) {
  PoolState s;
  addInventory(s, "a[01-04]/gpu[0-7]@leaf1 spine=s1; b[01-04]/gpu[0-7]@leaf2 spine=s1; " + leased("a", 1, 3),
               t0());
  const SubmitResult r = s.submit(parseRequest("16"), t0());
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(test::gpuList(r.lease->gpus), "b01:0-7 b02:0-7") << "fewest nodes: two whole nodes under leaf2";
}

TEST(Levels, ANodeJoiningADomainItDoesNotFitIsRefused) {
  PoolState s;
  addInventory(s, "r1n[01-18]/gpu[0-3]@leaf1 nvl=rack1 spine=s1", t0());
  topo::ClusterNode n;
  n.name = "r1n19";
  n.topology = gpusOf(4);
  n.levels.nvlink_domain = "rack1";
  n.levels.switch_name = "leaf1";
  n.levels.spine = "s9";
  try {
    s.registerNode(n);
    FAIL() << "a second spine in one domain was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node r1n19: nvlink_domain 'rack1': node r1n19 has spine 's9', node "
                                         "r1n01 of the same domain spine 's1'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(s.nodeMap().count("r1n19")) << "nothing changed";
  n.levels.spine = "s1";
  n.topology = gpusOf(8);
  for (int k = 19; k <= 80; ++k) {
    n.name = "r1n" + std::to_string(k);
    s.registerNode(n);  // 72 + 62 x 8 = 568 GPUs
  }
  n.name = "r1n81";
  s.registerNode(n);  // 576: as many as one domain joins
  n.name = "r1n82";
  try {
    s.registerNode(n);
    FAIL() << "a domain of 576+ GPUs was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "nvlink_domain 'rack1' would join 584 GPUs; one NVLink domain joins at most 576"),
              std::string::npos)
        << e.what();
  }
  n.name = "r1n20";  // registered again, the same: its GPUs are not counted twice
  EXPECT_NO_THROW(s.registerNode(n));
}

TEST(Levels, LevelsSurviveTheStateFile) {
  test::TempDir dir;
  PoolState s;
  addInventory(s, "r1n[01-02]/gpu[0-3]@leaf1 nvl=rack1 block=b1 rail=a spine=s1", t0());
  PoolState back = test::throughStateFile(s, dir.path() / "pool.sqlite");
  const topo::NodeLevels& levels = back.nodeMap().at("r1n02").levels;
  EXPECT_EQ(levels.nvlink_domain, "rack1");
  EXPECT_EQ(levels.block, "b1");
  EXPECT_EQ(levels.switch_name, "leaf1");
  EXPECT_EQ(levels.rail_group, "a");
  EXPECT_EQ(levels.spine, "s1");
  topo::ClusterNode n;
  n.name = "r1n03";
  n.topology = gpusOf(4);
  n.levels = levels;
  n.levels.block = "b2";
  EXPECT_THROW(back.registerNode(n), Error) << "the loaded pool knows its domains";
}

}  // namespace
}  // namespace poolrun::pool
