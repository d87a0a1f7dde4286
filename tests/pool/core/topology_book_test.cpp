// Nodes of one kind share one topology (PoolState's TopologyBook): by content, never by hash
// alone, and never through the address of a topology that is gone.

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "inventory.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/pool/topology_book.hpp"
#include "support/synthetic.hpp"

namespace poolrun::pool {
namespace {

std::shared_ptr<topo::NodeTopology> madeTopology(int gpus, std::string source = "json:node n01") {
  test::SyntheticSpec spec;
  spec.gpus = gpus;
  auto t = std::make_shared<topo::NodeTopology>(test::synthetic(spec));
  t->source = std::move(source);
  return t;
}

TEST(TopologyBook, TheSameHardwareIsOneCopyWhateverItsSource) {
  TopologyBook book;
  auto a = madeTopology(8, "json:node n01");
  auto b = madeTopology(8, "json:node n02");
  b->warnings.push_back("read from a registration");
  ASSERT_NE(a.get(), b.get());
  TopologyBook::Shared first = book.share(a);
  TopologyBook::Shared second = book.share(b);
  EXPECT_EQ(first.topology.get(), a.get());
  EXPECT_EQ(second.topology.get(), a.get()) << "the copy held already";
  EXPECT_EQ(first.hash, topologyHash(*a));
  EXPECT_EQ(second.hash, first.hash);
  TopologyBook::Shared other = book.share(madeTopology(4));
  EXPECT_NE(other.topology.get(), a.get()) << "other hardware is not shared";
  EXPECT_NE(other.hash, first.hash);
  EXPECT_EQ(other.hash, topologyHash(*other.topology));
}

// Topologies made and dropped over and over (addresses are reused by the allocator): each is
// hashed as what it is, never as what once lived at its address.
TEST(TopologyBook, AGoneTopologysAddressNamesNothing) {
  TopologyBook book;
  const std::string eight = topologyHash(*madeTopology(8)), four = topologyHash(*madeTopology(4));
  for (int round = 0; round < 200; ++round) {
    const int gpus = round % 2 == 0 ? 8 : 4;
    TopologyBook::Shared s = book.share(madeTopology(gpus));
    ASSERT_EQ(s.hash, gpus == 8 ? eight : four) << "round " << round;
    ASSERT_EQ(s.topology->gpus.size(), static_cast<size_t>(gpus)) << "round " << round;
  }
}

TEST(TopologyBook, TopologiesNoNodeHoldsAreForgotten) {
  TopologyBook book;
  auto kept = madeTopology(8);
  book.share(kept);
  for (int round = 0; round < 200; ++round) {
    test::SyntheticSpec spec;
    spec.cores_per_numa = round + 1;  // 200 kinds of node, each gone at once
    book.share(std::make_shared<topo::NodeTopology>(test::synthetic(spec)));
    ASSERT_LE(book.size(), 24u) << "round " << round << ": entries of gone topologies kept";
  }
  EXPECT_EQ(book.share(madeTopology(8)).topology.get(), kept.get()) << "one still held stays";
}

TEST(TopologyBook, NodesRegisteredWithEqualTopologiesHoldOneAndANewOneTheirOwn) {
  PoolState state;
  for (const char* name : {"n01", "n02", "n03"}) {
    topo::ClusterNode node;
    node.name = name;
    node.topology = madeTopology(8, std::string("json:node ") + name);  // each parsed on its own
    state.registerNode(node);
  }
  const auto& nodes = state.nodeMap();
  EXPECT_EQ(nodes.at("n01").topology.get(), nodes.at("n02").topology.get());
  EXPECT_EQ(nodes.at("n01").topology.get(), nodes.at("n03").topology.get());
  EXPECT_EQ(nodes.at("n02").topology_hash, topologyHash(*madeTopology(8)));
  topo::ClusterNode smaller;
  smaller.name = "n02";
  smaller.topology = madeTopology(4);
  state.registerNode(smaller);
  EXPECT_NE(state.nodeMap().at("n02").topology.get(), state.nodeMap().at("n01").topology.get());
  EXPECT_EQ(state.nodeMap().at("n02").gpuCount(), 4u);
  EXPECT_EQ(state.nodeMap().at("n02").topology_hash, topologyHash(*madeTopology(4)));
  EXPECT_EQ(state.nodeMap().at("n01").gpuCount(), 8u);
}

// A registration storm: 1,000 nodes register, then all again (as after poold's restart), each
// with a topology parsed anew: one copy is held throughout, and the book does not grow.
TEST(TopologyBook, NodesRegisteringAgainAndAgainHoldOneCopy) {
  PoolState state;
  const auto parsed = madeTopology(8);
  for (int round = 0; round < 2; ++round)
    for (int n = 0; n < 1000; ++n) {
      topo::ClusterNode node;
      node.name = "n" + std::to_string(n);
      node.topology = std::make_shared<topo::NodeTopology>(*parsed);  // a copy of its own
      state.registerNode(node);
    }
  std::set<const topo::NodeTopology*> held;
  for (const auto& [name, node] : state.nodeMap()) held.insert(node.topology.get());
  EXPECT_EQ(held.size(), 1u);
  EXPECT_EQ(state.nodeMap().size(), 1000u);
}

}  // namespace
}  // namespace poolrun::pool
