// MIG instances as the pool's units beyond the table (placement_test.cpp): what is shown and
// counted, what the request may say, a node's instances renumbered when its agent registers another
// layout, and leases of instances through the state file.

#include <gtest/gtest.h>

#include "inventory.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/request_options.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using test::addInventory;
using test::gpuList;
using test::parseRequest;
using test::t0;

// A node "n01" of `gpus` GPUs whose GPU 0 is in MIG mode with instances of `uuids` (1g.10gb each,
// GPU instance ids from 1 in that order).
topo::ClusterNode migNode(const std::vector<std::string>& uuids, int gpus = 2) {
  test::SyntheticSpec spec;
  spec.gpus = gpus;
  spec.nics = gpus;
  auto t = std::make_shared<topo::NodeTopology>(test::synthetic(spec));
  t->gpus[0].mig = test::migState(true, true);
  int gi = 1;
  for (const std::string& uuid : uuids)
    t->gpus[0].mig.instances.push_back(test::migInstance(gi++, 0, "1g.10gb", 19, 1, 16, 9984, uuid));
  topo::ClusterNode n;
  n.name = "n01";
  n.topology = t;
  return n;
}

TEST(Mig, InstancesAreShownAndCountedByState) {
  PoolState state;
  addInventory(state, "n01/gpu[0-3] layout=0:1g.10gb*7 layout=1:3g.40gb*2; n01 failed 1", t0());
  SubmitResult r = state.submit(parseRequest("2 mig=1g.10gb"), t0(), false);
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(gpuList(r.lease->gpus), "n01:MIG-0-1,MIG-0-2");
  for (const GpuRef& g : r.lease->gpus) EXPECT_TRUE(g.mig.starts_with("MIG-0-")) << g.mig;
  const PoolStatus s = state.status();
  EXPECT_EQ(s.gpus_mig, 1);  // GPU 0 (GPU 1 is failed, which says more)
  EXPECT_EQ(s.gpus_failed, 1);
  EXPECT_EQ(s.gpus_free, 2);
  EXPECT_EQ(s.mig_leased, 2);
  EXPECT_EQ(s.mig_free, 5);
  EXPECT_EQ(s.mig_unusable, 2);  // GPU 1's, failed with it
  const std::vector<NodeInfo> nodes = state.nodeInfos();
  ASSERT_EQ(nodes.size(), 1u);
  const std::vector<MigInstanceInfo>& zero = nodes[0].gpus[0].mig_instances;
  ASSERT_EQ(zero.size(), 7u);
  EXPECT_EQ(zero[0].unit, 4u);  // after the node's 4 GPUs
  EXPECT_EQ(zero[0].state, GpuState::kLeased);
  EXPECT_EQ(zero[0].lease, r.lease->id);
  EXPECT_EQ(zero[0].profile, "1g.10gb");
  EXPECT_EQ(zero[2].state, GpuState::kFree);
  EXPECT_EQ(nodes[0].gpus[1].mig_instances.at(0).state, GpuState::kFailed);
  EXPECT_TRUE(nodes[0].gpus[2].mig_instances.empty());
  // The JSON a client reads back says the same.
  const NodeInfo back = nodeInfoFromJson(toJson(nodes[0]));
  ASSERT_EQ(back.gpus[0].mig_instances.size(), 7u);
  EXPECT_EQ(back.gpus[0].mig_instances[0].uuid, "MIG-0-1");
  EXPECT_EQ(back.gpus[0].mig_instances[0].lease, r.lease->id);
  EXPECT_EQ(statusFromJson(toJson(s)).mig_unusable, 2);
  EXPECT_EQ(state.checkInvariants(), "");
}

TEST(Mig, RequestsThatCannotBeMigAreRefusedWithWhatToDo) {
  PoolState state;
  addInventory(state, "n01/gpu[0-7] layout=0:1g.10gb*7", t0());
  for (const auto& [spec, expected] :
       std::vector<std::pair<const char*, const char*>>{{"7 mig=1g.10gb whole", "drop whole_nodes"},
                                                        {"4 mig=1g.10gb ppn=2", "drop it"},
                                                        {"2 mig=1g.10gb upto=4", "not elastic"}}) {
    try {
      state.submit(parseRequest(spec), t0());
      ADD_FAILURE() << spec << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput) << spec;
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  LeaseRequest larger;
  larger.gpus = 1;
  larger.owner = "alice";
  larger.mig_or_larger = true;
  EXPECT_THROW(validateRequest(larger), Error);
  // The never-fits message counts instances, not GPUs.
  try {
    state.submit(parseRequest("8 mig=1g.10gb"), t0());
    ADD_FAILURE() << "8 instances granted from 7";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kNeverFits);
    EXPECT_NE(std::string(e.what()).find("a request for 8 MIG instances 1g.10gb can never be satisfied: the "
                                         "pool has 7 usable MIG instances"),
              std::string::npos)
        << e.what();
  }
}

TEST(Mig, ProfileOptionTextIsChecked) {
  LeaseRequest r;
  setMigProfile(r, "3g.40gb+", "--mig");
  EXPECT_EQ(r.mig_profile, "3g.40gb");
  EXPECT_TRUE(r.mig_or_larger);
  setMigProfile(r, "1g.10gb+me", "--mig");
  EXPECT_EQ(r.mig_profile, "1g.10gb+me");
  EXPECT_FALSE(r.mig_or_larger);
  for (const std::string& bad :
       std::vector<std::string>{"", "+", "1g.10gb++", "1G.10GB", "1g 10gb", std::string(65, 'a'), "1g\xff"}) {
    try {
      setMigProfile(r, bad, "--mig");
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find("--mig"), std::string::npos) << e.what();
    }
  }
}

// An agent registering another layout: the instances a lease holds keep it, under their new
// numbers, found by their UUIDs; losing one is refused and changes nothing.
TEST(Mig, ARegistrationRenumbersHeldInstancesAndNeverLosesOne) {
  PoolState state;
  state.registerNode(migNode({"MIG-a", "MIG-b", "MIG-c"}));
  LeaseRequest request = parseRequest("1 mig=1g.10gb");
  state.loadLease([&] {
    Lease l;
    l.id = "Lheld";
    l.owner = "bob";
    l.gpus = {{"n01", 4, "MIG-c"}};  // units 2, 3, 4: MIG-a, -b, -c
    l.created = t0();
    l.expires = t0() + std::chrono::hours(1);
    return l;
  }());
  state.takeDirty();
  // MIG-a is gone (destroyed while free), MIG-d is new: MIG-c is unit 3 now.
  state.registerNode(migNode({"MIG-b", "MIG-c", "MIG-d"}));
  EXPECT_EQ(state.leaseMap().at("Lheld").gpus, (std::vector<GpuRef>{{"n01", 3, "MIG-c"}}));
  EXPECT_EQ(*state.holder("n01", 3), "Lheld");
  EXPECT_EQ(state.holder("n01", 4), nullptr);
  EXPECT_EQ(state.checkInvariants(), "");
  Dirty d = state.takeDirty();
  EXPECT_TRUE(d.resized.count("Lheld")) << "the store writes the lease's units again";
  // A layout without MIG-c is refused while it is held.
  try {
    state.registerNode(migNode({"MIG-b", "MIG-d"}));
    ADD_FAILURE() << "a held instance was dropped";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("would lose MIG instance MIG-c of GPU0, held by lease Lheld"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(state.nodeMap().at("n01").mig_units.size(), 3u);
  EXPECT_EQ(*state.holder("n01", 3), "Lheld");
  // The new instances are placed like the others.
  SubmitResult r = state.submit(request, t0(), false);
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(gpuList(r.lease->gpus), "n01:MIG-b");
  EXPECT_EQ(state.checkInvariants(), "");
}

TEST(Mig, LeasesOfInstancesOutliveAReloadFromTheStateFile) {
  test::TempDir dir;
  PoolState state;
  addInventory(state, "n[01-02]/gpu[0-1] layout=0:1g.10gb*7", t0());
  SubmitResult r = state.submit(parseRequest("3 mig=1g.10gb"), t0(), false);
  ASSERT_TRUE(r.lease);
  PoolState loaded = test::throughStateFile(state, dir.path() / "pool.sqlite");
  ASSERT_TRUE(loaded.leaseMap().count(r.lease->id));
  EXPECT_EQ(loaded.leaseMap().at(r.lease->id).gpus, r.lease->gpus);
  EXPECT_EQ(loaded.nodeMap().at("n01").mig_units.size(), 7u);
  EXPECT_EQ(loaded.status().mig_leased, 3);
  EXPECT_EQ(loaded.checkInvariants(), "");
  // And the lease document a client reads has them, UUIDs and all.
  const Lease back = leaseFromJson(toJson(*r.lease));
  EXPECT_EQ(back.gpus, r.lease->gpus);
}

TEST(Mig, ALeaseDocumentWithABadInstanceIsRefused) {
  Lease l;
  l.id = "Lx";
  l.owner = "bob";
  l.gpus = {{"n01", 9, "GPU-not-an-instance"}};
  l.created = t0();
  l.expires = t0();
  try {
    leaseFromJson(toJson(l));
    ADD_FAILURE() << "taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a MIG instance's UUID"), std::string::npos) << e.what();
  }
}

// The body of POST /v1/nodes/NAME/gpus/G/mig, as a hostile client may send it.
TEST(Mig, ALayoutBodyIsReadStrictly) {
  EXPECT_EQ(migLayoutFromJson(nlohmann::json::parse(R"({"profiles": ["3g.40gb", "1g.10gb+me"]})")),
            (std::vector<std::string>{"3g.40gb", "1g.10gb+me"}));
  const std::pair<const char*, const char*> bad[] = {
      {R"([])", "expected a JSON object"},
      {R"({})", "profiles"},
      {R"({"profiles": []})", "a layout of 1 to 8 profiles, not 0"},
      {R"({"profiles": ["1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb"]})",
       "not 9"},
      {R"({"profiles": "3g.40gb"})", "profiles"},
      {R"({"profiles": [3]})", "expected a list of profile names"},
      {R"({"profiles": ["3g.40gb+"]})", "names no single profile"},
      {R"({"profiles": ["../../etc"]})", "expected a MIG profile"},
      {R"({"profiles": ["1g.10gb"], "force": true})", "force"},
  };
  for (const auto& [body, expected] : bad) {
    try {
      migLayoutFromJson(nlohmann::json::parse(body));
      ADD_FAILURE() << body << " was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput) << body;
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << body << ": " << e.what();
    }
  }
}

// A lease of MIG instances is on its node's list in the heartbeat's reply (its GPU index is not
// the lease's, so the job-mapping list leaves it out), and off it once released.
TEST(Mig, ALeaseOfInstancesIsOnItsNodesListOfLeases) {
  PoolState state;
  addInventory(state, "n01/gpu[0-1] layout=0:1g.10gb*7", t0());
  NodeRegistration reg;
  reg.node.name = "n01";
  reg.node.topology = state.nodeMap().at("n01").topology;
  reg.agent_version = "poold-agent test";
  state.registerAgentNode(reg, t0());
  const Lease l = *state.submit(parseRequest("2 mig=1g.10gb"), t0(), false).lease;
  Heartbeat hb;
  hb.node = "n01";
  hb.topology_hash = state.nodeMap().at("n01").topology_hash;
  HeartbeatReply reply = state.heartbeat(hb, t0());
  EXPECT_TRUE(reply.gpu_leases.empty());
  ASSERT_TRUE(reply.leases);
  EXPECT_EQ(*reply.leases, std::set<std::string>{l.id});
  ASSERT_TRUE(state.release(l.id, l.owner, false, t0()));
  EXPECT_TRUE(state.heartbeat(hb, t0()).leases->empty());
}

// poolctl mig's rules in the state: no agent, no MIG, a bad index are refused; a request keeps the
// GPU and its instances from new leases, and a failed result fails the GPU.
TEST(Mig, ALayoutRequestHoldsTheGpuBackAndAFailedOneFailsIt) {
  PoolState state;
  addInventory(state, "n01/gpu[0-1] layout=0:1g.10gb*7", t0());
  EXPECT_THROW(state.setMigLayout("n01", 0, {"7g.80gb"}), Error);  // no agent
  NodeRegistration reg;
  reg.node.name = "n01";
  reg.node.topology = state.nodeMap().at("n01").topology;
  reg.agent_version = "poold-agent test";
  state.registerAgentNode(reg, t0());
  EXPECT_THROW(state.setMigLayout("n02", 0, {"7g.80gb"}), Error);
  EXPECT_THROW(state.setMigLayout("n01", 2, {"7g.80gb"}), Error);
  EXPECT_THROW(state.setMigLayout("n01", 1, {"7g.80gb"}), Error);  // GPU 1 has no MIG
  EXPECT_THROW(state.setMigLayout("n01", 0, {}), Error);
  state.setMigLayout("n01", 0, {"7g.80gb"});
  EXPECT_FALSE(state.submit(parseRequest("1 mig=1g.10gb"), t0(), false).lease) << "held back";
  Heartbeat hb;
  hb.node = "n01";
  hb.topology_hash = state.nodeMap().at("n01").topology_hash;
  HeartbeatReply reply = state.heartbeat(hb, t0());
  ASSERT_EQ(reply.mig_layouts.size(), 1u) << "no lease holds it: the agent is asked";
  EXPECT_EQ(reply.mig_layouts.at(0), std::vector<std::string>{"7g.80gb"});
  hb.mig_results[0] = "cannot destroy a compute instance: Insufficient Permissions (NVML error 4)";
  reply = state.heartbeat(hb, t0());
  EXPECT_TRUE(reply.mig_layouts.empty());
  EXPECT_EQ(state.gpuState("n01", 0), GpuState::kFailed);
  EXPECT_EQ(state.nodeMap().at("n01").failures.at(0).reason,
            "MIG layout 7g.80gb not made: cannot destroy a compute instance: Insufficient Permissions (NVML "
            "error 4)");
  EXPECT_TRUE(state.nodeMap().at("n01").mig_layouts.empty());
}

}  // namespace
}  // namespace poolrun::pool
