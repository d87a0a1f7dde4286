// What poold keeps of a heartbeat across a kill -9: a GPU the heartbeat failed (its reply waits for
// that commit), and nothing of a heartbeat that failed none (its reply waits for no commit): the
// samples come back with the next heartbeat.

#include <gtest/gtest.h>

#include "poold_process.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

constexpr const char* kAdmin = "tok-root-0123456789";

NodeInfo nodeNamed(const std::string& uri, const std::string& name) {
  ClientOptions o;
  o.token = kAdmin;
  for (const NodeInfo& n : openPoolControl(uri, o)->nodes())
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

TEST(HeartbeatCommit, GpuFailedByAHeartbeatOutlivesKill9AndSamplesDoNot) {
  test::TempDir dir;
  auto tokens = dir.writeSecret("tokens", test::kTokens);
  auto topology = std::make_shared<const topo::NodeTopology>(test::synthetic({}));
  Heartbeat hb;
  hb.node = "hb01";
  hb.agent_version = "poold-agent test";
  hb.topology_hash = topologyHash(*topology);
  hb.time = std::chrono::system_clock::now();
  for (size_t i = 0; i < topology->gpus.size(); ++i) {
    topo::GpuSample g;
    g.index = i;
    g.sm_utilization = 0.75;
    g.ecc_uncorrected_volatile = i == 3 ? 2 : 0;
    hb.gpus.push_back(g);
  }
  {
    test::PooldProcess poold(dir.path() / "state", tokens);
    auto link = openAgentLink(poold.uri(), kAdmin);
    NodeRegistration r;
    r.node.name = "hb01";
    r.node.topology = topology;
    r.agent_version = "poold-agent test";
    link->registerNode(r);
    hb.gpus[3].ecc_uncorrected_volatile = 0;
    EXPECT_FALSE(link->heartbeat(hb).register_again);
    hb.gpus[3].ecc_uncorrected_volatile = 2;
    EXPECT_FALSE(link->heartbeat(hb).register_again);
    EXPECT_EQ(nodeNamed(poold.uri(), "hb01").gpus.at(0).utilization, 0.75);
    poold.kill9();
  }
  test::PooldProcess poold(dir.path() / "state", tokens);
  NodeInfo n = nodeNamed(poold.uri(), "hb01");
  EXPECT_EQ(n.agent, "poold-agent test");
  EXPECT_EQ(n.gpus.at(3).state, GpuState::kFailed);
  EXPECT_NE(n.gpus.at(3).failed_reason.find("2 uncorrectable ECC errors"), std::string::npos)
      << n.gpus.at(3).failed_reason;
  EXPECT_EQ(n.gpus.at(0).state, GpuState::kFree);
  EXPECT_FALSE(n.gpus.at(0).utilization) << "a sample is not kept across a restart";
}

}  // namespace
}  // namespace poolrun::pool
