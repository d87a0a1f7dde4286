// MPS shares beyond the table (placement_test.cpp): what the request may say and how its options
// read, the limits of a GPU's shares (percent, memory, clients, one owner), what is shown and
// counted, what a share does to whole-GPU requests in the queue, the agent's reply, and shares
// through the state file and the lease document.

#include <gtest/gtest.h>

#include "inventory.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/request_options.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using test::addInventory;
using test::gpuList;
using test::parseRequest;
using test::t0;

std::string mpsErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Mps, ShareOptionsReadAFractionOrAPercentageAndBytes) {
  const std::pair<const char*, int> good[] = {{"0.25", 25},  {"25%", 25}, {"1", 100},    {"1.0", 100},
                                              {"100%", 100}, {".5", 50},  {"0.333", 33}, {"0.01", 1}};
  for (const auto& [text, percent] : good) {
    LeaseRequest r;
    setSharePercent(r, text, "--share");
    EXPECT_EQ(r.share_percent, percent) << text;
  }
  const std::pair<const char*, const char*> bad[] = {{"", "not a number"},
                                                     {"0", "less than 1% of a GPU"},
                                                     {"0.004", "less than 1%"},
                                                     {"0.5%", "less than 1%"},
                                                     {"0.009", "less than 1%"},
                                                     {"1.5", "more than a whole GPU"},
                                                     {"101%", "more than a whole GPU"},
                                                     {"-0.5", "not a number"},
                                                     {"nan", "not a number"},
                                                     {"1e-1", "not a number"},
                                                     {"0.2.5", "not a number"},
                                                     {".", "not a number"},
                                                     {" 0.5", "not a number"},
                                                     {"99999999999999999999", "not a number"},
                                                     {"0.5\xff", "not a number"}};
  for (const auto& [text, says] : bad) {
    LeaseRequest r;
    std::string e = mpsErrorOf([&r, t = text] { setSharePercent(r, t, "--share"); });
    EXPECT_NE(e.find(says), std::string::npos) << "'" << text << "': " << e;
    EXPECT_NE(e.find("give a fraction of a GPU (0.25) or a percentage (25%)"), std::string::npos) << e;
  }
  const std::pair<const char*, uint64_t> bytes[] = {{"512M", uint64_t{512} << 20},
                                                    {"10G", uint64_t{10} << 30},
                                                    {"10GiB", uint64_t{10} << 30},
                                                    {"1T", uint64_t{1} << 40},
                                                    {"4096", 4096},
                                                    {"1024TiB", uint64_t{1} << 50}};
  for (const auto& [text, value] : bytes) {
    LeaseRequest r;
    setShareMemory(r, text, "--gpu-memory");
    EXPECT_EQ(r.share_memory_bytes, value) << text;
  }
  const std::pair<const char*, const char*> badBytes[] = {{"", "not a byte count"},
                                                          {"10X", "not a byte count"},
                                                          {"-1G", "not a byte count"},
                                                          {"1.5G", "not a byte count"},
                                                          {"0", "no memory at all"},
                                                          {"1025T", "more than 1 PiB"},
                                                          {"99999999999999999999", "not a byte count"}};
  for (const auto& [text, says] : badBytes) {
    LeaseRequest r;
    std::string e = mpsErrorOf([&r, t = text] { setShareMemory(r, t, "--gpu-memory"); });
    EXPECT_NE(e.find("--gpu-memory '"), std::string::npos) << e;
    EXPECT_NE(e.find(says), std::string::npos) << "'" << text << "': " << e;
  }
}

TEST(Mps, RequestsThatCannotBeSharesAreRefusedWithWhatToDo) {
  PoolState state;
  addInventory(state, "n01/gpu[0-7]", t0());
  for (const auto& [spec, says] : std::vector<std::pair<const char*, const char*>>{
           {"2 share=0.25 whole", "drop whole_nodes"},
           {"2 share=0.25 ppn=1", "drop it"},
           {"2 share=0.25 upto=4", "not elastic"},
           {"2 share=0.25 mig=1g.10gb", "ask for one or the other"}}) {
    std::string e =
        mpsErrorOf([&state, request = spec] { state.submit(parseRequest(request), t0(), false); });
    EXPECT_NE(e.find(says), std::string::npos) << spec << ": " << e;
  }
  LeaseRequest r = parseRequest("1");
  r.share_percent = 101;
  EXPECT_NE(mpsErrorOf([&] {
              state.submit(r, t0(), false);
            }).find("field 'share_percent': 101 is out of range (0 to 100)"),
            std::string::npos);
  // Never: the message says what the pool has.
  std::string never = mpsErrorOf([&] { state.submit(parseRequest("9 share=0.25"), t0(), false); });
  EXPECT_NE(
      never.find("a request for 9 MPS shares of 25% of a GPU can never be satisfied: the pool has 8 GPUs "
                 "that could take such a share"),
      std::string::npos)
      << never;
}

TEST(Mps, AGpuTakesSharesUpToItsSmsItsMemoryAndItsClients) {
  PoolState state;
  addInventory(state, "n01/gpu[0]", t0());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(state.submit(parseRequest("1 share=0.25"), t0(), false).lease) << i;
  EXPECT_FALSE(state.submit(parseRequest("1 share=0.01"), t0(), false).lease) << "100% taken";
  EXPECT_EQ(state.checkInvariants(), "");
  const PoolStatus s = state.status();
  EXPECT_EQ(s.gpus_shared, 1);
  EXPECT_EQ(s.mps_shares, 4);
  EXPECT_EQ(s.gpus_leased, 1);
  EXPECT_EQ(s.gpus_free, 0);
  // Memory: 70 GiB of 80 held, 20 more do not fit, 10 do.
  PoolState memory;
  addInventory(memory, "n01/gpu[0]", t0());
  ASSERT_TRUE(memory.submit(parseRequest("1 gpumem=70G"), t0(), false).lease);
  EXPECT_FALSE(memory.submit(parseRequest("1 gpumem=20G"), t0(), false).lease);
  EXPECT_TRUE(memory.submit(parseRequest("1 gpumem=10G"), t0(), false).lease);
  // Clients: at most kMaxMpsClients shares of a GPU, however small.
  PoolState clients;
  addInventory(clients, "n01/gpu[0]", t0());
  for (int i = 0; i < kMaxMpsClients; ++i)
    ASSERT_TRUE(clients.submit(parseRequest("1 gpumem=1G"), t0(), false).lease) << i;
  EXPECT_FALSE(clients.submit(parseRequest("1 gpumem=1G"), t0(), false).lease);
  EXPECT_EQ(clients.status().mps_shares, kMaxMpsClients);
  EXPECT_EQ(clients.checkInvariants(), "");
}

TEST(Mps, SharesAreShownWithTheirLeasesAndGiveTheGpuBackWhenAllEnd) {
  PoolState state;
  addInventory(state, "n01/gpu[0-1]", t0());
  Lease a = *state.submit(parseRequest("1 share=0.25"), t0(), false).lease;
  Lease b = *state.submit(parseRequest("1 gpumem=8G"), t0(), false).lease;
  EXPECT_EQ(gpuList(a.gpus), "n01:0(25% 20 GiB)");
  EXPECT_EQ(gpuList(b.gpus), "n01:0(8 GiB)");
  const std::vector<NodeInfo> nodes = state.nodeInfos();
  const GpuInfo& zero = nodes.at(0).gpus.at(0);
  EXPECT_EQ(zero.state, GpuState::kLeased);
  EXPECT_EQ(zero.lease, a.id);
  ASSERT_EQ(zero.shares.size(), 2u);
  EXPECT_EQ(zero.shares[0].lease, a.id);
  EXPECT_EQ(zero.shares[0].percent, 25);
  EXPECT_EQ(zero.shares[1].memory_bytes, uint64_t{8} << 30);
  const NodeInfo back = nodeInfoFromJson(toJson(nodes[0]));
  ASSERT_EQ(back.gpus[0].shares.size(), 2u);
  EXPECT_EQ(back.gpus[0].shares[1].lease, b.id);
  EXPECT_EQ(statusFromJson(toJson(state.status())).mps_shares, 2);
  // A whole GPU request for both waits for the shares; one GPU is free.
  EXPECT_FALSE(state.submit(parseRequest("2"), t0(), false).lease);
  ASSERT_TRUE(state.release(a.id, "alice", false, t0()));
  EXPECT_EQ(state.status().gpus_shared, 1);
  ASSERT_TRUE(state.release(b.id, "alice", false, t0()));
  EXPECT_EQ(state.status().gpus_shared, 0);
  EXPECT_EQ(state.status().gpus_free, 2);
  EXPECT_TRUE(state.submit(parseRequest("2"), t0(), false).lease);
  EXPECT_EQ(state.checkInvariants(), "");
}

// A whole-GPU request queued behind shares starts when the last share of its GPU ends; a share
// asked for meanwhile does not take the GPU it waits for.
TEST(Mps, AQueuedWholeGpuRequestIsNotDelayedByNewShares) {
  PoolState state;
  addInventory(state, "n01/gpu[0]", t0());
  Lease share = *state.submit(parseRequest("1 share=0.25 max=100"), t0(), false).lease;
  SubmitResult whole = state.submit(parseRequest("1 owner=bob"), t0(), true);
  ASSERT_FALSE(whole.lease);
  ASSERT_GT(whole.ticket, 0);
  // Another share of the same owner lasting longer would hold the GPU past the planned start.
  EXPECT_FALSE(state.submit(parseRequest("1 share=0.25"), t0() + std::chrono::seconds(1), false).lease);
  // One that ends with the first delays nobody.
  EXPECT_TRUE(state.submit(parseRequest("1 share=0.25 max=50"), t0() + std::chrono::seconds(1), false).lease);
  EXPECT_NE(state.waitReason(whole.ticket), "");
  state.tick(t0() + std::chrono::seconds(101), std::chrono::hours(1));
  PollResult p = state.poll(whole.ticket, t0() + std::chrono::seconds(101));
  EXPECT_EQ(p.status, QueueEntry::Status::kGranted) << p.wait_reason;
  EXPECT_FALSE(state.leaseMap().count(share.id));
  EXPECT_EQ(state.checkInvariants(), "");
}

TEST(Mps, AQueuedShareSaysWhyItWaitsAndStartsWhenRoomIsMade) {
  PoolState state;
  addInventory(state, "n01/gpu[0]; n01 leased 0 share=80 owner=alice", t0());
  SubmitResult r = state.submit(parseRequest("1 share=0.5"), t0(), true);
  ASSERT_FALSE(r.lease);
  EXPECT_EQ(state.waitReason(r.ticket),
            "needs 1 MPS share of 50% of a GPU, one per GPU; 0 GPUs have room for it");
  ASSERT_TRUE(state.release("pre1", "alice", true, t0()));
  state.tick(t0());
  EXPECT_EQ(state.poll(r.ticket, t0()).status, QueueEntry::Status::kGranted);
}

TEST(Mps, TheAgentIsToldWhichGpusHaveShares) {
  PoolState state;
  addInventory(state, "n01/gpu[0-3]", t0());
  NodeRegistration reg;
  reg.node.name = "n01";
  reg.node.topology = state.nodeMap().at("n01").topology;
  reg.agent_version = "test";
  state.registerAgentNode(reg, t0());
  ASSERT_TRUE(state.submit(parseRequest("2 share=0.5"), t0(), false).lease);
  Heartbeat hb;
  hb.node = "n01";
  hb.topology_hash = state.nodeMap().at("n01").topology_hash;
  HeartbeatReply reply = state.heartbeat(hb, t0());
  EXPECT_EQ(reply.mps_gpus, (std::set<size_t>{0, 1}));
  EXPECT_TRUE(reply.gpu_leases.empty()) << "a shared GPU has no one lease";
  ASSERT_TRUE(reply.leases);
  EXPECT_EQ(reply.leases->size(), 1u) << "the share's lease is the node's all the same";
  EXPECT_EQ(heartbeatReplyFromJson(toJson(reply)).mps_gpus, reply.mps_gpus);
  // A daemon that would not start fails its GPU, with why.
  hb.mps_errors[1] = "nvidia-cuda-mps-control -d exited with status 1";
  state.heartbeat(hb, t0());
  EXPECT_EQ(state.gpuState("n01", 1), GpuState::kFailed);
  EXPECT_EQ(state.nodeMap().at("n01").failures.at(1).reason,
            "MPS control daemon not started: nvidia-cuda-mps-control -d exited with status 1");
}

// What a heartbeat may not say: an MPS error for a GPU poold asked no daemon for, or anything of a
// GPU past the node's count. Refused whole (kBadInput: 400), before anything of it is taken.
TEST(Mps, AHeartbeatOfGpusWithoutSharesOrPastTheNodeIsRefused) {
  PoolState state;
  addInventory(state, "n01/gpu[0-3]", t0());
  NodeRegistration reg;
  reg.node.name = "n01";
  reg.node.topology = state.nodeMap().at("n01").topology;
  reg.agent_version = "test";
  state.registerAgentNode(reg, t0());
  ASSERT_TRUE(state.submit(parseRequest("1 share=0.5"), t0(), false).lease);  // a share of GPU 0
  Heartbeat hb;
  hb.node = "n01";
  hb.topology_hash = state.nodeMap().at("n01").topology_hash;
  ASSERT_EQ(state.heartbeat(hb, t0()).mps_gpus, (std::set<size_t>{0}));
  auto refused = [&](const Heartbeat& h) -> std::string {
    try {
      state.heartbeat(h, t0());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput) << e.what();
      return e.what();
    }
    return "taken";
  };
  Heartbeat mps = hb;
  mps.mps_errors[2] = "nvidia-cuda-mps-control -d exited with status 1";
  EXPECT_EQ(
      refused(mps),
      "the heartbeat of node n01 reports an MPS error for GPU 2 (\"nvidia-cuda-mps-control -d exited with "
      "status 1\"), which has no MPS shares (poold asked for MPS daemons on GPUs 0); restart poold-agent on "
      "n01 (it registers the node again), and check that poold and poold-agent are of one version");
  mps.mps_errors = {{4, "no such GPU"}};
  EXPECT_NE(refused(mps).find("reports an MPS error for GPU 4, which the node does not have (it registered "
                              "4 GPUs, 0-3)"),
            std::string::npos);
  Heartbeat past = hb;
  past.gpus.resize(1);
  past.gpus[0].index = 7;
  past.gpus[0].sm_utilization = 0.5;
  EXPECT_NE(
      refused(past).find("has a sample of GPU 7, which the node does not have (it registered 4 GPUs, 0-3)"),
      std::string::npos);
  EXPECT_EQ(state.gpuState("n01", 2), GpuState::kFree) << "nothing of a refused heartbeat is acted on";
  EXPECT_TRUE(state.nodeMap().at("n01").failures.empty());
  // The GPU with shares reports its error: taken, and the GPU failed.
  mps.mps_errors = {{0, "nvidia-cuda-mps-control -d exited with status 1"}};
  EXPECT_EQ(refused(mps), "taken");
  EXPECT_EQ(state.gpuState("n01", 0), GpuState::kFailed);
}

TEST(Mps, SharesOutliveAReloadFromTheStateFileAndTravelInTheLeaseDocument) {
  test::TempDir dir;
  PoolState state;
  addInventory(state, "n[01-02]/gpu[0-1]", t0());
  Lease a = *state.submit(parseRequest("2 share=0.5"), t0(), false).lease;
  Lease b = *state.submit(parseRequest("2 share=0.25 gpumem=4G"), t0(), false).lease;
  PoolState loaded = test::throughStateFile(state, dir.path() / "pool.sqlite");
  EXPECT_EQ(loaded.leaseMap().at(a.id).gpus, a.gpus);
  EXPECT_EQ(loaded.leaseMap().at(b.id).gpus, b.gpus);
  EXPECT_EQ(loaded.status().mps_shares, 4);
  EXPECT_EQ(loaded.checkInvariants(), "");
  EXPECT_EQ(leaseFromJson(toJson(b)).gpus, b.gpus);
  // The document a hostile client or a damaged file may hold.
  nlohmann::json doc = toJson(b);
  for (const auto& [value, says] : std::vector<std::pair<nlohmann::json, const char*>>{
           {{{"percent", 101}, {"memory_bytes", 0}}, "out of range (0 to 100)"},
           {{{"percent", -1}, {"memory_bytes", 0}}, "out of range"},
           {{{"percent", 25}}, "missing field"},
           {{{"percent", 25}, {"memory_bytes", "4G"}}, "not a whole number"},
           {"25%", "expected a JSON object"}}) {
    nlohmann::json bad = doc;
    bad["gpus"][0]["share"] = value;
    std::string e = mpsErrorOf([&] { leaseFromJson(bad); });
    EXPECT_NE(e.find(says), std::string::npos) << value.dump() << ": " << e;
  }
  // A request body likewise.
  nlohmann::json body = toJson(parseRequest("1 share=0.5"));
  body["ttl_s"] = 60;
  EXPECT_EQ(requestFromJson(body).share_percent, 50);
  body["share_percent"] = 1000;
  EXPECT_NE(mpsErrorOf([&] { requestFromJson(body); }).find("field 'share_percent'"), std::string::npos);
  body["share_percent"] = 10;
  body["share_memory_bytes"] = -5;
  EXPECT_NE(mpsErrorOf([&] { requestFromJson(body); }).find("field 'share_memory_bytes'"), std::string::npos);
}

// A stored share of a GPU a whole lease holds is a damaged state file, refused with the lease.
TEST(Mps, AStoredShareOfAGpuHeldWholeIsRefused) {
  PoolState state;
  addInventory(state, "n01/gpu[0-1]; n01 leased 0", t0());
  Lease l;
  l.id = "Lshare";
  l.owner = "alice";
  GpuRef g{"n01", 0, {}};
  g.share = true;
  g.share_percent = 10;
  l.gpus = {g};
  l.created = t0();
  l.expires = t0() + std::chrono::hours(1);
  EXPECT_NE(mpsErrorOf([&] { state.loadLease(l); }).find("stored lease Lshare holds a share of n01:0"),
            std::string::npos);
}

}  // namespace
}  // namespace poolrun::pool
