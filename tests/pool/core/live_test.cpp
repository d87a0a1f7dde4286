// The live pool's rules (pool/core/src/live.cpp) on a fake clock: heartbeats and unreachable nodes,
// GPUs failed by what their agent reports, foreign processes, idle leases and their reclaim; and
// the agent protocol's documents, read as strictly as every client document.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "inventory.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/heartbeat_reader.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/store.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/writers.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"
#include "support/test_names.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using std::chrono::minutes;
using std::chrono::seconds;
using test::addInventory;
using test::gpuList;
using test::parseRequest;

using test::livePool;
using test::t0;

// A heartbeat of `node` with every GPU at `utilization`.
Heartbeat beat(const PoolState& state, const std::string& node, double utilization = 0.5) {
  Heartbeat hb = test::heartbeatOf(state, node, utilization);
  for (topo::GpuSample& g : hb.gpus) {
    g.memory_used_bytes = uint64_t{1} << 30;
    g.memory_total_bytes = uint64_t{80} << 30;
  }
  return hb;
}

// poold's network thread takes heartbeats without a planning pass: a node back starts the queued
// request at the next tick instead (planNow false).
TEST(LivePool, AHeartbeatTakenWithoutPlanningLeavesTheQueuedRequestToTheNextTick) {
  PoolState state = livePool("n[01-02]/gpu[0-7]");
  state.heartbeat(beat(state, "n01"), t0() + seconds(10));
  state.tick(t0() + seconds(16));
  ASSERT_TRUE(state.nodeMap().at("n02").live.unreachable);
  SubmitResult waiting = state.submit(parseRequest("16"), t0() + seconds(16));
  ASSERT_FALSE(waiting.lease);
  state.heartbeat(beat(state, "n02"), t0() + seconds(17), false);
  EXPECT_FALSE(state.nodeMap().at("n02").live.unreachable) << "up again at its heartbeat";
  EXPECT_EQ(state.queueMap().at(waiting.ticket).status, QueueEntry::Status::kWaiting) << "planned at once";
  state.tick(t0() + seconds(17));
  PollResult p = state.poll(waiting.ticket, t0() + seconds(17));
  ASSERT_EQ(p.status, QueueEntry::Status::kGranted) << "the tick after the heartbeat starts it";
  EXPECT_EQ(gpuList(p.lease->gpus), "n01:0-7 n02:0-7");
}

// A request that excludes a node (poolrun --exclude, a job restarted after the node failed) is never
// placed there: neither at once nor from the queue when the node's GPUs come free; and what it
// waits for says so.
TEST(LivePool, AnExcludedNodeIsNeverPlacedOn) {
  PoolState state = livePool("n[01-02]/gpu[0-3]");
  LeaseRequest four = parseRequest("4");
  four.exclude_nodes = {"n01"};
  const Lease first = *state.submit(four, t0()).lease;
  EXPECT_EQ(gpuList(first.gpus), "n02:0-3");
  const Lease other = *state.submit(parseRequest("4"), t0()).lease;
  EXPECT_EQ(gpuList(other.gpus), "n01:0-3");
  SubmitResult waiting = state.submit(four, t0());
  ASSERT_FALSE(waiting.lease);
  ASSERT_TRUE(state.release(other.id, other.owner, false, t0()));
  state.tick(t0());
  EXPECT_EQ(state.poll(waiting.ticket, t0()).status, QueueEntry::Status::kWaiting)
      << "n01 is free, and excluded";
  ASSERT_TRUE(state.release(first.id, first.owner, false, t0()));
  state.tick(t0());
  PollResult p = state.poll(waiting.ticket, t0());
  ASSERT_EQ(p.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(gpuList(p.lease->gpus), "n02:0-3");
  LeaseRequest nowhere = parseRequest("1");
  nowhere.exclude_nodes = {"n01", "n02"};
  EXPECT_THROW(state.submit(nowhere, t0()), Error) << "excluding every node: it could never start";
}

TEST(LivePool, SilentNodeBecomesUnreachableAndPlacementAvoidsIt) {
  PoolState state = livePool("n[01-02]/gpu[0-7]");
  state.heartbeat(beat(state, "n01"), t0() + seconds(10));
  state.tick(t0() + seconds(14));
  EXPECT_FALSE(state.nodeMap().at("n02").live.unreachable) << "within the 15 s timeout";
  state.tick(t0() + seconds(16));
  EXPECT_TRUE(state.nodeMap().at("n02").live.unreachable);
  EXPECT_FALSE(state.nodeMap().at("n01").live.unreachable) << "heard from at t0+10";
  EXPECT_EQ(state.status().nodes_unreachable, 1);
  std::vector<NodeEvent> events = state.takeNodeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, NodeEvent::Kind::kUnreachable);
  EXPECT_EQ(events[0].node, "n02");
  EXPECT_EQ(events[0].reason, "no heartbeat from its agent for 16 s");
  EXPECT_EQ(state.status().gpus_unreachable, 8);

  SubmitResult a = state.submit(parseRequest("4"), t0() + seconds(16));
  ASSERT_TRUE(a.lease);
  EXPECT_EQ(gpuList(a.lease->gpus), "n01:0-3");
  SubmitResult b = state.submit(parseRequest("8"), t0() + seconds(16));
  EXPECT_FALSE(b.lease) << "only 4 reachable GPUs are free: it waits for n02";
  EXPECT_GT(b.ticket, 0);

  HeartbeatReply reply = state.heartbeat(beat(state, "n02"), t0() + seconds(17));
  EXPECT_FALSE(reply.register_again);
  EXPECT_FALSE(state.nodeMap().at("n02").live.unreachable) << "up again at its next heartbeat";
  PollResult p = state.poll(b.ticket, t0() + seconds(17));
  ASSERT_EQ(p.status, QueueEntry::Status::kGranted) << "n02 coming back starts the queued request";
  EXPECT_EQ(gpuList(p.lease->gpus), "n02:0-7");
}

TEST(LivePool, ANodeItsAgentRegistersStartsWhatWaitsForItsGpus) {
  PoolState state = livePool("n01/gpu[0-7]");
  ASSERT_TRUE(state.submit(parseRequest("8"), t0()).lease);
  SubmitResult waiting = state.submit(parseRequest("8"), t0());
  ASSERT_FALSE(waiting.lease) << "n01 is full";
  topo::ClusterNode n02;
  n02.name = "n02";
  n02.topology = state.nodeMap().at("n01").topology;
  state.registerAgentNode({n02, "poold-agent test"}, t0() + seconds(1));
  PollResult p = state.poll(waiting.ticket, t0() + seconds(1));
  ASSERT_EQ(p.status, QueueEntry::Status::kGranted) << "without a tick";
  EXPECT_EQ(gpuList(p.lease->gpus), "n02:0-7");
}

TEST(LivePool, NodeWithoutAgentIsNeverUnreachable) {
  PoolState state;
  addInventory(state, "n01/gpu[0-7]", t0());
  state.tick(t0() + std::chrono::hours(5));
  EXPECT_FALSE(state.nodeMap().at("n01").live.unreachable);
  EXPECT_TRUE(state.submit(parseRequest("8"), t0() + std::chrono::hours(5)).lease);
}

TEST(LivePool, RenewalNamesTheLeaseNodesThatAreUnreachable) {
  PoolState state = livePool("n[01-02]/gpu[0-7]");
  Lease l = *state.submit(parseRequest("16"), t0()).lease;
  state.heartbeat(beat(state, "n01"), t0() + seconds(12));
  state.tick(t0() + seconds(20));
  Lease renewed = state.renew(l.id, l.owner, false, t0() + seconds(20));
  EXPECT_EQ(renewed.at_risk_nodes, std::vector<std::string>{"n02"});
  json doc = toJson(renewed);
  EXPECT_EQ(leaseFromJson(doc).at_risk_nodes, std::vector<std::string>{"n02"}) << doc.dump();
  state.heartbeat(beat(state, "n02"), t0() + seconds(21));
  EXPECT_TRUE(state.renew(l.id, l.owner, false, t0() + seconds(21)).at_risk_nodes.empty());
}

TEST(LivePool, AfterARestartNodesGetATimeoutBeforeTheyAreUnreachable) {
  PoolState state = livePool("n01/gpu[0-7]");
  PoolNode loaded = state.nodeMap().at("n01");
  PoolState restarted;
  restarted.loadNode(loaded);
  restarted.tick(t0() + std::chrono::hours(1));
  EXPECT_FALSE(restarted.nodeMap().at("n01").live.unreachable) << "the timeout counts from the first tick";
  restarted.tick(t0() + std::chrono::hours(1) + seconds(16));
  EXPECT_TRUE(restarted.nodeMap().at("n01").live.unreachable);
}

struct FailureCase {
  const char* name;
  void (*damage)(topo::GpuSample&);
  const char* reason;  // expected in the failure's reason; nullptr: the GPU does not fail
};

const FailureCase kFailureCases[] = {
    {"uncorrectable ECC", [](topo::GpuSample& g) { g.ecc_uncorrected_volatile = 2; },
     "2 uncorrectable ECC errors"},
    {"row remapping failure", [](topo::GpuSample& g) { g.remapping_failure = true; }, "row remapping failed"},
    {"XID 79",
     [](topo::GpuSample& g) {
       g.xid_events.push_back({79, t0()});
     },
     "XID 79 (fallen off the bus)"},
    {"XID 48",
     [](topo::GpuSample& g) {
       g.xid_events.push_back({48, t0()});
     },
     "XID 48 (double-bit ECC error)"},
    {"XID 13 is the application's",
     [](topo::GpuSample& g) {
       g.xid_events.push_back({13, t0()});
     },
     nullptr},
    {"no uncorrected errors", [](topo::GpuSample& g) { g.ecc_uncorrected_volatile = 0; }, nullptr},
    {"pending retirement alone", [](topo::GpuSample& g) { g.retired_pages_pending = true; }, nullptr},
};

class GpuFailureTest : public ::testing::TestWithParam<FailureCase> {};

TEST_P(GpuFailureTest, FailsTheGpuWithItsReason) {
  const FailureCase& c = GetParam();
  PoolState state = livePool("n01/gpu[0-7]");
  Heartbeat hb = beat(state, "n01");
  c.damage(hb.gpus[3]);
  state.heartbeat(hb, t0() + seconds(5));
  const PoolNode& n = state.nodeMap().at("n01");
  if (c.reason == nullptr) {
    EXPECT_TRUE(n.failed.empty());
    return;
  }
  EXPECT_EQ(n.failed, std::set<size_t>{3});
  EXPECT_EQ(state.gpuState("n01", 3), GpuState::kFailed);
  ASSERT_TRUE(n.failures.count(3));
  EXPECT_NE(n.failures.at(3).reason.find(c.reason), std::string::npos) << n.failures.at(3).reason;
  EXPECT_EQ(n.failures.at(3).time, t0() + seconds(5));
  NodeInfo info = state.nodeInfos().at(0);
  EXPECT_EQ(info.gpus[3].failed_reason, n.failures.at(3).reason);
  try {
    state.submit(parseRequest("8"), t0() + seconds(5));
    FAIL() << "8 GPUs granted with one failed";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kNeverFits) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(LivePool, GpuFailureTest, ::testing::ValuesIn(kFailureCases),
                         [](const auto& p) { return test::testName(p.param.name); });

// A GPU NVML no longer lists: its sample carries the agent's error and no reading. poold keeps
// the GPU as it was (it fails it on the XID 79 the driver reports) and shows the error with it,
// in the node's view and its JSON, until a sample without one.
TEST(LivePool, AGpuNvmlNoLongerListsShowsTheAgentsError) {
  PoolState state = livePool("n01/gpu[0-3]");
  Heartbeat hb = beat(state, "n01");
  const std::string lost =
      "NVML does not list the GPU at 0000:53:00.0: it may have fallen off the bus (see `nvidia-smi` and "
      "the kernel log for XID 79)";
  hb.gpus[2] = topo::GpuSample{};
  hb.gpus[2].index = 2;
  hb.gpus[2].error = lost;
  state.heartbeat(hb, t0() + seconds(5));
  NodeInfo info = state.nodeInfos().at(0);
  EXPECT_EQ(info.gpus[2].sample_error, lost);
  EXPECT_FALSE(info.gpus[2].utilization);
  EXPECT_EQ(info.gpus[2].state, GpuState::kFree) << "failed by XID 79, not by a missing sample";
  EXPECT_EQ(info.gpus[1].sample_error, "");
  const json doc = toJson(info);
  EXPECT_EQ(doc["gpus"][2]["sample_error"], lost);
  EXPECT_TRUE(doc["gpus"][1]["sample_error"].is_null());
  EXPECT_EQ(nodeInfoFromJson(doc).gpus[2].sample_error, lost);

  state.heartbeat(beat(state, "n01"), t0() + seconds(10));
  EXPECT_EQ(state.nodeInfos().at(0).gpus[2].sample_error, "") << "it answers again";
}

TEST(LivePool, XidCountsAreBoundedPerGpu) {
  PoolState state = livePool("n01/gpu[0-7]");
  for (int round = 0; round < 4; ++round) {
    Heartbeat hb = beat(state, "n01");
    for (uint64_t x = 0; x < 1000; ++x) hb.gpus[0].xid_events.push_back({100 + round * 1000 + x, t0()});
    hb.gpus[1].xid_events.push_back({13, t0()});
    state.heartbeat(hb, t0() + seconds(round));
  }
  const auto& counts = state.nodeMap().at("n01").live.xid_counts;
  EXPECT_EQ(counts.size(), 33u) << "4,000 different XIDs on GPU 0: 32 series, and GPU 1's own";
  ASSERT_TRUE(counts.count({1, 13}));
  EXPECT_EQ(counts.at({1, 13}), 4u) << "a known series keeps counting";
}

TEST(LivePool, ResumeClearsFailuresAndAcceptsTheEccCountSeenThen) {
  PoolState state = livePool("n01/gpu[0-7]");
  Heartbeat hb = beat(state, "n01");
  hb.gpus[2].ecc_uncorrected_volatile = 1;
  state.heartbeat(hb, t0() + seconds(5));
  ASSERT_EQ(state.gpuState("n01", 2), GpuState::kFailed);
  state.clearGpuFailures("n01");
  EXPECT_EQ(state.gpuState("n01", 2), GpuState::kFree);
  state.heartbeat(hb, t0() + seconds(10));
  EXPECT_EQ(state.gpuState("n01", 2), GpuState::kFree) << "the same count, accepted at resume";
  hb.gpus[2].ecc_uncorrected_volatile = 2;
  state.heartbeat(hb, t0() + seconds(15));
  EXPECT_EQ(state.gpuState("n01", 2), GpuState::kFailed) << "a new error fails it again";
}

TEST(LivePool, ProcessesOfNoLeaseMakeAGpuForeign) {
  PoolState state = livePool("n01/gpu[0-3]");
  Lease l = *state.submit(parseRequest("2"), t0()).lease;
  ASSERT_EQ(gpuList(l.gpus), "n01:0-1");
  Heartbeat hb = beat(state, "n01");
  hb.gpus[0].processes = {{100, 1 << 20}};            // the lease's own rank
  hb.gpus[1].processes = {{101, 1 << 20}};            // another lease's process on this lease's GPU
  hb.gpus[2].processes = {{102, uint64_t{3} << 30}};  // no lease at all
  hb.process_leases = {{100, l.id}, {101, "Lother0000000000"}};
  state.heartbeat(hb, t0() + seconds(5));
  EXPECT_EQ(state.gpuState("n01", 0), GpuState::kLeased);
  EXPECT_EQ(state.gpuState("n01", 1), GpuState::kForeign) << "a process of another lease";
  EXPECT_EQ(state.gpuState("n01", 2), GpuState::kForeign);
  EXPECT_EQ(state.gpuState("n01", 3), GpuState::kFree);
  EXPECT_EQ(state.status().gpus_foreign, 2);
  NodeInfo info = state.nodeInfos().at(0);
  ASSERT_EQ(info.gpus[2].foreign_processes.size(), 1u);
  EXPECT_EQ(info.gpus[2].foreign_processes[0].pid, 102u);
  EXPECT_EQ(info.gpus[2].foreign_processes[0].used_memory_bytes, uint64_t{3} << 30);

  SubmitResult two = state.submit(parseRequest("2"), t0() + seconds(5));
  EXPECT_FALSE(two.lease) << "GPU 2 is foreign: only GPU 3 is free";
  hb.gpus[2].processes.clear();
  state.heartbeat(hb, t0() + seconds(10));
  EXPECT_NE(state.gpuState("n01", 2), GpuState::kForeign);
  EXPECT_EQ(state.poll(two.ticket, t0() + seconds(10)).status, QueueEntry::Status::kGranted)
      << "the GPU given back starts the queued request";
}

TEST(LivePool, LeaseIdleOnlyWhenEveryGpuReportsLowUtilisationForIdleAfter) {
  LiveOptions o;
  o.idle_after = minutes(30);
  PoolState state = livePool("n[01-02]/gpu[0-3]", o);
  Lease l = *state.submit(parseRequest("8"), t0()).lease;
  for (int m = 0; m <= 40; m += 5) {
    TimePoint now = t0() + minutes(m);
    state.heartbeat(beat(state, "n01", 0.01), now);
    state.heartbeat(beat(state, "n02", m < 10 ? 0.9 : 0.02), now);
    state.tick(now);
  }
  // Busy until minute 5 (n02), idle from then: idle at 35, 40.
  Lease seen = state.leaseList().at(0);
  ASSERT_TRUE(seen.idle_since);
  EXPECT_EQ(*seen.idle_since, t0() + minutes(5));
  EXPECT_FALSE(seen.reclaim_at) << "reclaim is off by default";
  EXPECT_TRUE(state.leaseMap().count(l.id));
  state.heartbeat(beat(state, "n02", 0.5), t0() + minutes(41));
  EXPECT_FALSE(state.idle(state.leaseMap().at(l.id), t0() + minutes(41)));
}

TEST(LivePool, LeaseOnANodeWithoutAgentIsNeverIdle) {
  LiveOptions o;
  o.idle_after = minutes(1);
  PoolState state;
  state.setLiveOptions(o);
  addInventory(state, "n01/gpu[0-3]", t0());
  Lease l = *state.submit(parseRequest("4"), t0()).lease;
  state.tick(t0() + std::chrono::hours(2));
  EXPECT_FALSE(state.idle(state.leaseMap().at(l.id), t0() + std::chrono::hours(2)));
}

TEST(LivePool, ReclaimWarnsThenEndsTheIdleLeaseAndTheQueueStarts) {
  LiveOptions o;
  o.idle_after = minutes(30);
  o.reclaim_idle = true;
  o.reclaim_grace = minutes(5);
  PoolState state = livePool("n01/gpu[0-7]", o);
  LeaseRequest r = parseRequest("8");
  Lease l = *state.submit(r, t0()).lease;
  int64_t waiting = state.submit(parseRequest("8"), t0()).ticket;
  ASSERT_GT(waiting, 0);
  auto at = [&](int m) { return t0() + minutes(m); };
  for (int m = 0; m <= 30; m += 5) {
    state.heartbeat(beat(state, "n01", 0.0), at(m));
    state.poll(waiting, at(m));
    state.tick(at(m));
  }
  Lease warned = state.renew(l.id, l.owner, false, at(30));
  ASSERT_TRUE(warned.reclaim_at) << "idle at 30 min: warned in the renewal";
  EXPECT_EQ(*warned.reclaim_at, at(35));
  state.heartbeat(beat(state, "n01", 0.0), at(34));
  state.poll(waiting, at(34));
  state.tick(at(34));
  EXPECT_TRUE(state.leaseMap().count(l.id)) << "within the grace";
  state.heartbeat(beat(state, "n01", 0.0), at(35));
  state.poll(waiting, at(35));
  state.tick(at(35));
  EXPECT_FALSE(state.leaseMap().count(l.id));
  EXPECT_EQ(state.leasesReclaimed(), 1u);
  try {
    state.renew(l.id, l.owner, false, at(35));
    FAIL() << "a reclaimed lease cannot be renewed";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kGone);
    EXPECT_NE(std::string(e.what()).find("reclaimed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(state.poll(waiting, at(35)).status, QueueEntry::Status::kGranted);
}

TEST(LivePool, BusyAgainCancelsTheReclaimAndNoReclaimLeasesStay) {
  LiveOptions o;
  o.idle_after = minutes(30);
  o.reclaim_idle = true;
  o.reclaim_grace = minutes(5);
  PoolState state = livePool("n[01-02]/gpu[0-7]", o);
  Lease kept = *state.submit(parseRequest("8"), t0()).lease;
  LeaseRequest exempt = parseRequest("8");
  exempt.no_reclaim = true;
  Lease noReclaim = *state.submit(exempt, t0()).lease;
  auto at = [&](int m) { return t0() + minutes(m); };
  for (int m = 0; m <= 60; m += 5) {
    state.heartbeat(beat(state, "n01", m == 35 ? 0.9 : 0.0), at(m));
    state.heartbeat(beat(state, "n02", 0.0), at(m));
    state.tick(at(m));
  }
  EXPECT_TRUE(state.leaseMap().count(noReclaim.id)) << "exempt";
  EXPECT_TRUE(state.leaseMap().count(kept.id)) << "busy at 35: the clock started again, idle at 65 only";
  EXPECT_FALSE(state.renew(kept.id, kept.owner, false, at(60)).reclaim_at);
}

TEST(LivePool, HeartbeatOfAnUnknownNodeOrAnotherTopologyAsksToRegister) {
  PoolState state = livePool("n01/gpu[0-3]");
  Heartbeat hb = beat(state, "n01");
  hb.node = "n09";
  EXPECT_TRUE(state.heartbeat(hb, t0()).register_again);
  hb = beat(state, "n01");
  hb.topology_hash = "0123456789abcdef";
  EXPECT_TRUE(state.heartbeat(hb, t0()).register_again);
  PoolState adminOnly;
  addInventory(adminOnly, "n01/gpu[0-3]", t0());
  EXPECT_TRUE(adminOnly.heartbeat(beat(adminOnly, "n01"), t0()).register_again)
      << "a node registered without an agent is registered again by its agent";
}

TEST(LivePool, ReplyNamesTheLeaseOfEveryHeldGpu) {
  PoolState state = livePool("n01/gpu[0-3]");
  Lease l = *state.submit(parseRequest("2"), t0()).lease;
  HeartbeatReply r = state.heartbeat(beat(state, "n01"), t0());
  EXPECT_EQ(r.gpu_leases, (std::map<size_t, std::string>{{0, l.id}, {1, l.id}}));
  EXPECT_EQ(r.interval, seconds(5));
}

// The reply lists every lease on the node, whatever it holds (the agent ends the cgroups of the
// others), and a released or expired lease is gone from it.
TEST(LivePool, ReplyListsEveryLeaseOnTheNodeAndNoEndedOne) {
  PoolState state = livePool("n[01-02]/gpu[0-3]");
  const Lease a = *state.submit(parseRequest("3"), t0()).lease;
  LeaseRequest shortLived = parseRequest("2");
  shortLived.ttl = seconds(60);
  const Lease b = *state.submit(shortLived, t0()).lease;
  const Lease other = *state.submit(parseRequest("3"), t0()).lease;
  // Which node holds what: found from the leases, not assumed of placement.
  std::map<std::string, std::set<std::string>> onNode;
  for (const Lease* l : {&a, &b, &other})
    for (const GpuRef& g : l->gpus) onNode[g.node].insert(l->id);
  ASSERT_EQ(onNode.size(), 2u);
  ASSERT_EQ(onNode["n01"].size() + onNode["n02"].size(), 4u) << "one lease over both nodes";
  for (const std::string node : {"n01", "n02"}) {
    const HeartbeatReply r = state.heartbeat(beat(state, node), t0());
    ASSERT_TRUE(r.leases);
    EXPECT_EQ(*r.leases, onNode[node]) << node;
  }
  ASSERT_TRUE(state.release(a.id, a.owner, false, t0()));
  state.tick(t0() + seconds(61));  // b's TTL ends
  for (const std::string node : {"n01", "n02"}) {
    const HeartbeatReply r = state.heartbeat(beat(state, node), t0() + seconds(61));
    ASSERT_TRUE(r.leases) << "an empty list is a list: the agent ends what it confines";
    EXPECT_EQ(*r.leases,
              onNode[node].count(other.id) ? std::set<std::string>{other.id} : std::set<std::string>{})
        << node;
  }
}

TEST(LivePool, FailuresAndTheAgentSurviveTheStateFile) {
  test::TempDir dir;
  PoolState state = livePool("n01/gpu[0-3]");
  Heartbeat hb = beat(state, "n01");
  hb.gpus[1].xid_events = {{79, t0()}};
  state.heartbeat(hb, t0() + seconds(3));
  {
    Store store(dir.path() / "pool.sqlite", Durability::kNormal);
    store.begin();
    Dirty all;
    for (const auto& [name, n] : state.nodeMap()) all.nodes.insert(name);
    store.write(state, all);
    store.commit();
  }
  Store store(dir.path() / "pool.sqlite", Durability::kNormal);
  PoolState loaded;
  store.load(loaded);
  const PoolNode& n = loaded.nodeMap().at("n01");
  EXPECT_EQ(n.agent, "poold-agent test");
  EXPECT_EQ(n.failed, std::set<size_t>{1});
  ASSERT_TRUE(n.failures.count(1));
  EXPECT_EQ(n.failures.at(1), state.nodeMap().at("n01").failures.at(1));
  EXPECT_EQ(n.topology_hash, state.nodeMap().at("n01").topology_hash);
}

// The agent's health checks: a failure drains an up node with what failed, once; a pass resumes a
// node they drained, never one an administrator drained; an administrator's resume holds until what
// they say changes; a node drained by them stays so, with its reason, through the state file.
TEST(LivePool, HealthChecksDrainAndResumeTheNodeTheyDrainedAlone) {
  test::TempDir dir;
  PoolState state = livePool("n[01-02]/gpu[0-3]");
  const std::string remap = "gpu.retired_pages GPU 2 (0000:3a:00.0): a row remapping failed";
  Heartbeat hb = beat(state, "n01");
  hb.health_failure = "";
  state.heartbeat(hb, t0());
  EXPECT_EQ(state.nodeMap().at("n01").state, NodeState::kUp);
  EXPECT_TRUE(state.takeNodeEvents().empty());
  hb.health_failure = remap;
  state.heartbeat(hb, t0());
  const PoolNode& n = state.nodeMap().at("n01");
  EXPECT_EQ(n.state, NodeState::kDraining);
  EXPECT_EQ(n.drain_reason, "health check failed: " + remap);
  std::vector<NodeEvent> events = state.takeNodeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, NodeEvent::Kind::kDrained);
  EXPECT_EQ(events[0].reason, "health check failed: " + remap);
  EXPECT_EQ(state.nodeInfos().at(0).drain_reason, "health check failed: " + remap);
  EXPECT_FALSE(state.submit(parseRequest("5"), t0(), false).lease) << "4 GPUs left to place on: n02's";
  state.heartbeat(hb, t0());
  EXPECT_TRUE(state.takeNodeEvents().empty()) << "the same again is no news";
  // Through the state file: still drained by its agent, with why.
  {
    Store store(dir.path() / "pool.sqlite", Durability::kNormal);
    store.begin();
    Dirty all;
    for (const auto& [name, node] : state.nodeMap()) all.nodes.insert(name);
    store.write(state, all);
    store.commit();
  }
  PoolState loaded;
  Store(dir.path() / "pool.sqlite", Durability::kNormal).load(loaded);
  EXPECT_EQ(loaded.nodeMap().at("n01").state, NodeState::kDraining);
  EXPECT_TRUE(loaded.nodeMap().at("n01").drained_by_agent);
  EXPECT_EQ(loaded.nodeMap().at("n01").drain_reason, "health check failed: " + remap);
  // They pass: resumed, and the queued request may start.
  hb.health_failure = "";
  state.heartbeat(hb, t0());
  EXPECT_EQ(n.state, NodeState::kUp);
  EXPECT_TRUE(n.drain_reason.empty());
  events = state.takeNodeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, NodeEvent::Kind::kResumed);
  // An administrator's drain is theirs: a pass does not resume it, a failure does not take it over.
  state.setNodeState("n01", NodeState::kDraining);
  hb.health_failure = remap;
  state.heartbeat(hb, t0());
  hb.health_failure = "";
  state.heartbeat(hb, t0());
  EXPECT_EQ(n.state, NodeState::kDraining);
  EXPECT_FALSE(n.drained_by_agent);
  EXPECT_TRUE(n.drain_reason.empty());
  // The agent drains; the administrator resumes while the failure stands: up until it changes.
  state.setNodeState("n01", NodeState::kUp);
  hb.health_failure = remap;
  state.heartbeat(hb, t0());
  ASSERT_EQ(n.state, NodeState::kDraining);
  state.setNodeState("n01", NodeState::kUp);
  state.heartbeat(hb, t0());
  EXPECT_EQ(n.state, NodeState::kUp) << "the administrator's resume holds while nothing changes";
  hb.health_failure =
      remap + "; gpu.ecc GPU 1 (0000:18:00.0): 2 uncorrected ECC errors since the driver loaded";
  state.heartbeat(hb, t0());
  EXPECT_EQ(n.state, NodeState::kDraining) << "a new failure drains it again";
  // An agent that runs no checks says nothing of them.
  hb.health_failure.reset();
  state.heartbeat(hb, t0());
  EXPECT_EQ(n.state, NodeState::kDraining);
}

// --- the documents

Heartbeat sampleHeartbeat() {
  Heartbeat h;
  h.node = "gpu-node-07";
  h.agent_version = "poold-agent 0.9.0";
  h.time = t0();
  h.topology_hash = "00112233aabbccdd";
  topo::GpuSample g;
  g.index = 0;
  g.uuid = "GPU-6a1f0c2e-0000-1111-2222-333344445555";
  g.pci = "0000:18:00.0";
  g.time = t0();
  g.sm_utilization = 0.97;
  g.memory_utilization = 0.4;
  g.memory_used_bytes = uint64_t{70} << 30;
  g.memory_total_bytes = uint64_t{80} << 30;
  g.temperature_c = 61;
  g.power_w = 612.5;
  g.ecc_uncorrected_volatile = 0;
  g.xid_events = {{13, t0()}};
  g.processes = {{4242, uint64_t{69} << 30}};
  h.gpus.push_back(g);
  topo::GpuSample unknown;
  unknown.index = 1;
  unknown.time = t0();
  unknown.error = "NVML: GPU is lost";
  h.gpus.push_back(unknown);
  h.nics.push_back({"mlx5_0", 1, topo::PortState::kActive, 400, t0()});
  h.process_leases = {{4242, "L0123456789abcdef"}};
  return h;
}

TEST(AgentProtocol, HeartbeatRoundTrips) {
  Heartbeat h = sampleHeartbeat();
  json doc = toJson(h);
  EXPECT_EQ(doc["schema"], kHeartbeatSchema);
  Heartbeat back = heartbeatFromText(doc.dump());
  EXPECT_EQ(back.node, h.node);
  EXPECT_EQ(back.time, h.time);
  EXPECT_EQ(back.gpus, h.gpus);
  EXPECT_EQ(back.nics, h.nics);
  EXPECT_EQ(back.process_leases, h.process_leases);
  EXPECT_FALSE(back.gpus[1].sm_utilization) << "unknown stays unknown, not 0";
  EXPECT_FALSE(back.health_failure) << "an agent that runs no health checks sends none";
  for (const std::string& health : std::vector<std::string>{
           "", "gpu.ecc GPU 1 (0000:18:00.0): 2 uncorrected ECC errors", std::string(kMaxHealthBytes, 'x')}) {
    h.health_failure = health;
    EXPECT_EQ(heartbeatFromText(toJson(h).dump()).health_failure, health);
  }
}

struct BadHeartbeat {
  const char* name;
  void (*edit)(json&);
  const char* message;
};

const BadHeartbeat kBadHeartbeats[] = {
    {"wrong schema", [](json& d) { d["schema"] = "poolrun.heartbeat/9"; }, "is not poolrun.heartbeat/1"},
    {"unknown field", [](json& d) { d["gpu"] = 1; }, "unknown field 'gpu'"},
    {"unknown GPU field", [](json& d) { d["gpus"][0]["utilisation"] = 1; },
     "unknown field 'gpus[0].utilisation'"},
    {"utilisation over 1", [](json& d) { d["gpus"][0]["sm_utilization"] = 97; }, "'gpus[0].sm_utilization'"},
    {"negative utilisation", [](json& d) { d["gpus"][0]["sm_utilization"] = -0.1; }, "sm_utilization"},
    {"negative memory", [](json& d) { d["gpus"][0]["memory_used_bytes"] = -1; }, "memory_used_bytes"},
    {"index past a node", [](json& d) { d["gpus"][0]["index"] = 4096; }, "'gpus[0].index'"},
    {"index as text", [](json& d) { d["gpus"][0]["index"] = "0"; }, "'gpus[0].index'"},
    {"duplicate index", [](json& d) { d["gpus"][1]["index"] = 0; }, "appears twice"},
    {"pid 0", [](json& d) { d["gpus"][0]["processes"][0]["pid"] = 0; }, "pid"},
    {"too many processes",
     [](json& d) {
       d["gpus"][0]["processes"] = json::array();
       for (int i = 0; i < 5000; ++i) d["gpus"][0]["processes"].push_back({{"pid", i + 1}});
     },
     "more than the 4096"},
    {"too many XIDs",
     [](json& d) {
       d["gpus"][0]["xid_events"] = json::array();
       for (int i = 0; i < 2000; ++i) d["gpus"][0]["xid_events"].push_back({{"xid", 13}, {"time_ms", 1}});
     },
     "more than the 1024"},
    {"bad port state", [](json& d) { d["nics"][0]["state"] = "sleepy"; }, "is not a port state"},
    {"bad node name", [](json& d) { d["node"] = "../etc"; }, "'node'"},
    {"lease id with a newline", [](json& d) { d["process_leases"][0]["lease"] = "L1\nX"; }, "lease"},
    {"agent as a number", [](json& d) { d["agent"] = 7; }, "field 'agent': 7 is not a string"},
    {"missing time", [](json& d) { d.erase("time_ms"); }, "missing field 'time_ms'"},
    {"missing GPU index", [](json& d) { d["gpus"][1].erase("index"); }, "missing field 'gpus[1].index'"},
    {"null for a needed field", [](json& d) { d["node"] = nullptr; }, "missing field 'node'"},
    {"GPU index as a float", [](json& d) { d["gpus"][0]["index"] = 1.0; }, "is not a whole number"},
    {"huge memory", [](json& d) { d["gpus"][0]["memory_used_bytes"] = 1e30; }, "memory_used_bytes"},
    {"a GPU that is a list", [](json& d) { d["gpus"][0] = json::array({1}); },
     "'gpus[0]': expected a JSON object"},
    {"a process without pid", [](json& d) { d["gpus"][0]["processes"][0].erase("pid"); },
     "missing field 'gpus[0].processes[0].pid'"},
    {"XID past 32 bits",
     [](json& d) {
       d["gpus"][0]["xid_events"] = {{{"xid", 1ull << 40}, {"time_ms", 1}}};
     },
     "'gpus[0].xid_events[0].xid'"},
    {"an unknown NIC field", [](json& d) { d["nics"][0]["speed"] = 1; }, "unknown field 'nics[0].speed'"},
    {"a port past 255", [](json& d) { d["nics"][0]["port"] = 256; }, "'nics[0].port'"},
    {"a lease of no pid", [](json& d) { d["process_leases"][0].erase("pid"); },
     "missing field 'process_leases[0].pid'"},
    {"a deep value",
     [](json& d) {
       json deep = 1;
       for (int i = 0; i < 200; ++i) deep = json::array({deep});
       d["gpus"][0]["sm_utilization"] = deep;
     },
     "'gpus[0].sm_utilization': [...] is not a number"},
    {"time before 1970", [](json& d) { d["time_ms"] = -5; }, "'time_ms'"},
    {"gpus not a list", [](json& d) { d["gpus"] = json::object(); }, "'gpus'"},
    {"health past its bound", [](json& d) { d["health_failure"] = std::string(kMaxHealthBytes + 1, 'x'); },
     "'health_failure'"},
    {"health as a number", [](json& d) { d["health_failure"] = 1; }, "'health_failure'"},
    {"health as a list", [](json& d) { d["health_failure"] = json::array({"gpu.ecc"}); }, "'health_failure'"},
};

class BadHeartbeatTest : public ::testing::TestWithParam<BadHeartbeat> {};

TEST_P(BadHeartbeatTest, IsRefusedNamingTheField) {
  json doc = toJson(sampleHeartbeat());
  GetParam().edit(doc);
  try {
    heartbeatFromText(doc.dump());
    FAIL() << "accepted " << doc.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 200);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(AgentProtocol, BadHeartbeatTest, ::testing::ValuesIn(kBadHeartbeats),
                         [](const auto& p) { return test::testName(p.param.name); });

// What only the text can hold: bytes that are not UTF-8, broken or cut JSON, a key twice, another
// root. Each edit is made to the text of a good heartbeat.
struct BadHeartbeatText {
  const char* name;
  std::string (*edit)(std::string);
  const char* message;
};

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

const BadHeartbeatText kBadHeartbeatTexts[] = {
    {"not UTF-8", [](std::string t) { return replaced(t, "poold-agent", "poold-agent \xff\xfe"); },
     "is not UTF-8"},
    {"empty", [](std::string) { return std::string(); }, "malformed JSON"},
    {"cut in half", [](std::string t) { return t.substr(0, t.size() / 2); }, "the heartbeat"},
    {"cut before the end", [](std::string t) { return t.substr(0, t.size() - 1); }, "the heartbeat"},
    {"more after the object", [](std::string t) { return t + " {}"; }, "malformed JSON"},
    {"a list", [](std::string t) { return "[" + t + "]"; }, "expected a JSON object, got array"},
    {"a number", [](std::string) { return std::string("42"); }, "expected a JSON object"},
    {"a key twice", [](std::string t) { return replaced(t, "{", "{\"node\":\"n01\","); },
     "'node': given twice"},
    {"a bad literal",
     [](std::string t) {
       return replaced(t, "\"retired_pages_pending\":false", "\"retired_pages_pending\":fals");
     },
     "the heartbeat"},
    {"an escaped control character in a name",
     [](std::string t) { return replaced(t, "\"agent\":\"", "\"agent\":\"\\u0007"); }, "'agent'"},
    {"a NUL in the body",
     [](std::string t) { return replaced(t, "poold-agent", std::string("poold\0agent", 11)); },
     "the heartbeat"},
    {"a bad number", [](std::string t) { return replaced(t, "\"port\":1", "\"port\":1e"); },
     "'nics[0].port'"},
    {"20 digits", [](std::string t) { return replaced(t, "\"port\":1", "\"port\":100000000000000000000"); },
     "field 'nics[0].port': 100000000000000000000 is out of range"},
    {"under INT64_MIN",
     [](std::string t) { return replaced(t, "\"port\":1", "\"port\":-9223372036854775809"); },
     "field 'nics[0].port': -9223372036854775809 is out of range"},
    {"1e400 for a float", [](std::string t) { return replaced(t, "\"power_w\":612.5", "\"power_w\":1e400"); },
     "field 'gpus[0].power_w': 1e400 is not a number"},
    {"just over a float's range",
     [](std::string t) { return replaced(t, "\"sm_utilization\":0.97", "\"sm_utilization\":1.0000001"); },
     "field 'gpus[0].sm_utilization': 1.0000001 is out of range"},
    {"a key twice, null first", [](std::string t) { return replaced(t, "{", "{\"node\":null,"); },
     "'node': given twice"},
    {"a key twice, escaped", [](std::string t) { return replaced(t, "{", "{\"\\u006eode\":\"n01\","); },
     "'node': given twice"},
    {"a GPU index twice",
     [](std::string t) { return replaced(t, "\"index\":0,", "\"index\":0,\"index\":0,"); },
     "'gpus[0].index': given twice"},
    {"a lone surrogate",
     [](std::string t) { return replaced(t, "\"uuid\":\"GPU-", "\"uuid\":\"\\udc00GPU-"); }, "the heartbeat"},
    {"a string at the root", [](std::string) { return std::string("\"x\""); },
     "expected a JSON object, got string"},
    {"true at the root", [](std::string) { return std::string("true"); },
     "expected a JSON object, got boolean"},
    {"null at the root", [](std::string) { return std::string("null"); }, "expected a JSON object, got null"},
    {"only spaces", [](std::string) { return std::string(" \n\t "); }, "malformed JSON"},
    {"a brace after the object", [](std::string t) { return t + "}"; }, "the heartbeat"},
    {"a NUL after the object", [](std::string t) { return t + std::string(1, '\0'); }, "the heartbeat"},
    {"nul for null", [](std::string t) { return replaced(t, "\"error\":\"\"", "\"error\":nul"); },
     "the heartbeat"},
    {"nullx for null", [](std::string t) { return replaced(t, "\"error\":\"\"", "\"error\":nullx"); },
     "the heartbeat"},
    {"a list closed by a brace",
     [](std::string t) { return replaced(t, "}],\"mig_results\"", "}},\"mig_results\""); }, "the heartbeat"},
    {"time past the clock",
     [](std::string t) { return replaced(t, "\"time_ms\":", "\"time_ms\":9223372036854775808,\"x\":"); },
     "field 'gpus[0].time_ms': 9223372036854775808 is out of range"},
};

class BadHeartbeatTextTest : public ::testing::TestWithParam<BadHeartbeatText> {};

TEST_P(BadHeartbeatTextTest, IsRefusedSayingWhat) {
  std::string text = GetParam().edit(toJson(sampleHeartbeat()).dump());
  try {
    heartbeatFromText(text);
    FAIL() << "accepted " << common::printable(text.substr(0, 200));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(AgentProtocol, BadHeartbeatTextTest, ::testing::ValuesIn(kBadHeartbeatTexts),
                         [](const auto& p) { return test::testName(p.param.name); });

TEST(AgentProtocol, EveryCutOfAHeartbeatIsRefused) {
  const std::string text = toJson(sampleHeartbeat()).dump();
  for (size_t n = 0; n < text.size(); ++n) {
    try {
      heartbeatFromText(std::string_view(text).substr(0, n));
      ADD_FAILURE() << "accepted the first " << n << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput) << e.what();
    }
  }
}

TEST(AgentProtocol, ByteOrderMarkNeverAndTheLimitsAtTheirEdge) {
  Heartbeat h = sampleHeartbeat();
  EXPECT_EQ(heartbeatFromText("\xEF\xBB\xBF" + toJson(h).dump()).gpus, h.gpus) << "a leading BOM is skipped";
  h.gpus[0].time = kNever;
  EXPECT_EQ(heartbeatFromText(toJson(h).dump()).gpus[0].time, kNever) << "INT64_MAX ms stands for never";
  auto withProcesses = [&](size_t n) {
    Heartbeat big = sampleHeartbeat();
    big.gpus[0].processes.clear();
    for (size_t i = 0; i < n; ++i) big.gpus[0].processes.push_back({static_cast<uint32_t>(i + 1), 0});
    return toJson(big).dump();
  };
  EXPECT_EQ(heartbeatFromText(withProcesses(kMaxProcessesPerGpu)).gpus[0].processes.size(),
            kMaxProcessesPerGpu);
  EXPECT_THROW(heartbeatFromText(withProcesses(kMaxProcessesPerGpu + 1)), Error);
  auto withNics = [&](size_t n) {
    Heartbeat big = sampleHeartbeat();
    big.nics.assign(n, big.nics.at(0));
    return toJson(big).dump();
  };
  EXPECT_EQ(heartbeatFromText(withNics(kMaxNicPorts)).nics.size(), kMaxNicPorts);
  EXPECT_THROW(heartbeatFromText(withNics(kMaxNicPorts + 1)), Error);
}

TEST(AgentProtocol, AHeartbeatReadsTheSameWhateverItsSpacingAndOrder) {
  Heartbeat h = sampleHeartbeat();
  json doc = toJson(h);
  for (std::string text : {doc.dump(2), nlohmann::ordered_json::parse(doc.dump()).dump(1, '\t')}) {
    Heartbeat back = heartbeatFromText(text);
    EXPECT_EQ(back.gpus, h.gpus);
    EXPECT_EQ(back.nics, h.nics);
    EXPECT_EQ(back.process_leases, h.process_leases);
  }
  // Fields in another order than the writer's, and nulls for what is unknown.
  std::string reordered =
      "{\"process_leases\":null,\"gpus\":[{\"time_ms\":5,\"index\":0,\"power_w\":null}],"
      "\"topology_hash\":\"" +
      h.topology_hash +
      "\",\"time_ms\":7,\"agent\":\"a\","
      "\"node\":\"" +
      h.node + "\",\"schema\":\"" + kHeartbeatSchema + "\"}";
  Heartbeat back = heartbeatFromText(reordered);
  ASSERT_EQ(back.gpus.size(), 1u);
  EXPECT_FALSE(back.gpus[0].power_w);
  EXPECT_TRUE(back.process_leases.empty());
}

TEST(AgentProtocol, TopologyHashSurvivesTheRegistrationDocument) {
  POOLRUN_REQUIRE_FIXTURES(fixtures);
  int checked = 0;
  for (const char* dir : {"hwloc-xml", "nccl-topo"}) {
    for (const auto& entry : std::filesystem::directory_iterator(fixtures / dir)) {
      if (entry.path().extension() != ".xml") continue;
      topo::ClusterNode node;
      node.name = "n01";
      try {
        node.topology = std::make_shared<topo::NodeTopology>(topo::readTopologyFile(entry.path()));
      } catch (const Error&) {
        continue;  // a fixture poolrun refuses (tested elsewhere)
      }
      NodeRegistration r{node, "poold-agent test"};
      NodeRegistration back = nodeRegistrationFromJson(json::parse(toJson(r).dump()));
      auto withoutSource = [](const topo::NodeTopology& t) {
        auto doc = topo::toJson(t);
        doc.erase("source");
        doc.erase("warnings");
        return doc.dump();
      };
      std::string sent = withoutSource(*node.topology), got = withoutSource(*back.node.topology);
      size_t at = std::mismatch(sent.begin(), sent.end(), got.begin(), got.end()).first - sent.begin();
      EXPECT_EQ(topologyHash(*back.node.topology), topologyHash(*node.topology))
          << entry.path() << ": differs at byte " << at << ": sent '"
          << sent.substr(at > 80 ? at - 80 : 0, 160) << "', read '" << got.substr(at > 80 ? at - 80 : 0, 160)
          << "'";
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

TEST(AgentProtocol, RegistrationIsReadStrictly) {
  topo::ClusterNode node;
  node.name = "n01";
  node.topology = std::make_shared<topo::NodeTopology>();
  json doc = toJson(NodeRegistration{node, "poold-agent 1"});
  doc["extra"] = true;
  EXPECT_THROW(nodeRegistrationFromJson(doc), Error);
  doc.erase("extra");
  doc["schema"] = "poolrun.node-registration/2";
  EXPECT_THROW(nodeRegistrationFromJson(doc), Error);
}

// A registration's launch address (where the agent starts jobs' daemons): HOST:PORT, or :PORT for
// the address it came from; anything else refused, naming the value.
TEST(AgentProtocol, ALaunchAddressIsHostAndPortOrRefused) {
  topo::ClusterNode node;
  node.name = "n01";
  node.topology = std::make_shared<topo::NodeTopology>();
  NodeRegistration r{node, "poold-agent 1"};
  for (const std::string good : {":7141", "10.0.0.1:7141", "n01.ib:1", "[::1]:65535", "[fe80::1]:7141"}) {
    r.launch = good;
    EXPECT_EQ(nodeRegistrationFromJson(json::parse(toJson(r).dump())).launch, good);
  }
  r.launch = "";
  EXPECT_FALSE(toJson(r).contains("launch")) << "none sent where the agent starts no daemons";
  for (const std::string& bad :
       {std::string(""), std::string("n01"), std::string("n01:"), std::string("n01:0"),
        std::string("n01:65536"), std::string("n01:-1"), std::string("n01:99999999999"),
        std::string("n 01:7141"), std::string("::1:7141"), std::string("\xff\xfe:7141"),
        std::string(400, 'a') + ":1", std::string(250, 'a') + ":1x"}) {
    json doc = toJson(NodeRegistration{node, "poold-agent 1"});
    doc["launch"] = json(bad);
    try {
      nodeRegistrationFromJson(doc);
      ADD_FAILURE() << "taken: " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("launch"), std::string::npos) << e.what();
    }
  }
  json doc = toJson(NodeRegistration{node, "poold-agent 1"});
  doc["launch"] = json::array({json::object({{"a", 1}})});
  EXPECT_THROW(nodeRegistrationFromJson(doc), Error);
}

// poold writes a heartbeat's reply as text (heartbeatReplyText): the same document as toJson, for
// replies empty and full, and with text that needs escaping or is not UTF-8 (replaced, as in every
// reply of poold).
TEST(HeartbeatReplyText, IsTheDocumentToJsonMakes) {
  std::vector<HeartbeatReply> replies(4);
  replies[1].register_again = true;
  replies[1].interval = seconds(30);
  replies[2].gpu_leases = {{0, "L1"}, {7, "L-2-abc"}};
  replies[2].mig_layouts = {{3, {"1g.10gb", "1g.10gb", "3g.40gb"}}, {5, {"7g.80gb"}}};
  replies[2].mps_gpus = {1, 2, 6};
  replies[2].leases = std::set<std::string>{"L1", "L-2-abc", "L3"};
  replies[3].leases = std::set<std::string>{};
  replies[3].gpu_leases = {{1, "quote\" back\\slash\ttab"}, {2, std::string("\xff\xfe not UTF-8")}, {3, ""}};
  replies[3].mig_layouts = {{0, {"\u00e9"}}};
  for (const HeartbeatReply& r : replies) {
    const std::string text = heartbeatReplyText(r);
    const json doc = json::parse(text);  // throws where the text is not JSON
    EXPECT_EQ(doc, json::parse(toJson(r).dump(-1, ' ', false, json::error_handler_t::replace))) << text;
  }
  // What the agent reads back (the last reply's lease names are not lease ids: it refuses them).
  const HeartbeatReply back = heartbeatReplyFromJson(json::parse(heartbeatReplyText(replies[2])));
  EXPECT_EQ(back.gpu_leases, replies[2].gpu_leases);
  EXPECT_EQ(back.mig_layouts, replies[2].mig_layouts);
  EXPECT_EQ(back.mps_gpus, replies[2].mps_gpus);
  EXPECT_EQ(back.leases, replies[2].leases);
  EXPECT_TRUE(heartbeatReplyFromJson(json::parse(heartbeatReplyText(replies[1]))).register_again);
  EXPECT_FALSE(heartbeatReplyFromJson(json::parse(heartbeatReplyText(replies[0]))).leases)
      << "no list from a reply without one (a poold before the list): the agent ends nothing by it";
}

// The list of the node's leases is read strictly: a hostile or broken poold's reply is refused,
// naming the field, rather than taken as "no lease" (which would end every job's processes).
TEST(HeartbeatReplyText, TheNodesLeasesAreReadStrictly) {
  HeartbeatReply r;
  r.leases = std::set<std::string>{"L1", "L2"};
  EXPECT_EQ(heartbeatReplyFromJson(json::parse(heartbeatReplyText(r))).leases, r.leases);
  r.leases->clear();
  ASSERT_TRUE(heartbeatReplyFromJson(json::parse(heartbeatReplyText(r))).leases);
  json many = json::array();
  for (size_t i = 0; i <= kMaxNodeLeases; ++i) many.push_back("L" + std::to_string(i));
  for (const json& bad : {json("L1"), json(7), json::array({1}), json::array({""}), json::array({"L 1"}),
                          json::array({std::string("\xff")}), json::array({std::string(129, 'a')}),
                          json::array({json::array({"L1"})}), json::object({{"L1", true}}), many}) {
    json doc = toJson(HeartbeatReply{});
    doc["leases"] = bad;
    try {
      heartbeatReplyFromJson(doc);
      ADD_FAILURE() << "taken: " << bad.dump().substr(0, 80);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("leases"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace poolrun::pool
