// The agent's loop with a recording link, a stub sampler and a clock that never waits.

#include <gtest/gtest.h>

#include <sstream>

#include "agent_fakes.hpp"
#include "poolrun/agent/agent.hpp"
#include "poolrun/agent/health.hpp"
#include "poolrun/common/names.hpp"
#include "support/process.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

pool::PoolError unreachable() {
  return pool::PoolError(
      pool::PoolFailure::kOther, ErrorCode::kIo,
      "cannot reach poold at http://test (connection refused); is it running and listening there?");
}

struct Loop {
  topo::NodeTopology topology = synthetic({});
  std::shared_ptr<LinkScript> link = std::make_shared<LinkScript>();
  StubNode node{topology};
  FakeTime time;
  std::ostringstream log;
  agent::AgentConfig config;

  Loop() {
    config.node.name = "n01";
    config.node.topology = std::make_shared<const topo::NodeTopology>(topology);
    config.agent_version = "poold-agent test";
  }
  int run(int rounds) {
    time.rounds = rounds;
    agent::Agent a(config, recordingLinks(link), node.sampler(), time.clock(), log);
    int status = a.run();
    last_topology = a.topology();
    return status;
  }
  topo::NodeTopology last_topology;
};

TEST(AgentLoop, RegistersThenSendsAHeartbeatEveryInterval) {
  Loop t;
  EXPECT_EQ(t.run(3), 0);
  EXPECT_EQ(t.link->calls, (std::vector<std::string>{"open tok-node-0123456789", "register", "heartbeat",
                                                     "heartbeat", "heartbeat"}));
  ASSERT_EQ(t.link->registrations.size(), 1u);
  EXPECT_EQ(t.link->registrations[0].node.name, "n01");
  EXPECT_EQ(*t.link->registrations[0].node.topology, t.topology);
  EXPECT_EQ(t.link->registrations[0].agent_version, "poold-agent test");
  ASSERT_EQ(t.link->heartbeats.size(), 3u);
  for (const pool::Heartbeat& h : t.link->heartbeats) {
    EXPECT_EQ(h.node, "n01");
    EXPECT_EQ(h.topology_hash, pool::topologyHash(t.topology));
    EXPECT_EQ(h.gpus.size(), 8u);
    EXPECT_EQ(h.nics.size(), 8u);
  }
  EXPECT_EQ(t.time.sleeps, (std::vector<milliseconds>{seconds(5), seconds(5), seconds(5)}));
  EXPECT_EQ(countLines(t.log.str(), "registered node n01"), 1) << t.log.str();
}

TEST(AgentLoop, FollowsAShorterIntervalThatPooldAsksFor) {
  Loop t;
  t.config.interval = seconds(30);
  t.link->on_heartbeat = [](int) {
    pool::HeartbeatReply r;
    r.interval = seconds(10);
    return r;
  };
  t.run(2);
  EXPECT_EQ(t.time.sleeps, (std::vector<milliseconds>{seconds(10), seconds(10)}));
}

TEST(AgentLoop, BacksOffWhilePooldIsDownAndSaysSoOnceEachWay) {
  Loop t;
  // Heartbeats 2 to 7 do not get through; poold answers again from the 8th.
  t.link->on_heartbeat = [](int n) {
    if (n >= 2 && n <= 7) throw unreachable();
    return pool::HeartbeatReply{};
  };
  EXPECT_EQ(t.run(9), 0);
  EXPECT_EQ(t.time.sleeps,
            (std::vector<milliseconds>{seconds(5), seconds(1), seconds(2), seconds(4), seconds(5), seconds(5),
                                       seconds(5), seconds(5), seconds(5)}));
  EXPECT_EQ(countLines(t.log.str(), "cannot reach poold"), 1) << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "reached poold again"), 1) << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "after 6 failed attempts over 0:22"), 1) << t.log.str();
  EXPECT_EQ(t.link->count("register"), 1);  // an outage is no reason to register again
  EXPECT_EQ(t.log.str().find("reached"), t.log.str().rfind("reached"));
}

TEST(AgentLoop, RetriesTheRegistrationWhilePooldIsDownAtTheStart) {
  Loop t;
  t.link->on_register = [](int n) {
    if (n <= 3) throw unreachable();
  };
  t.run(5);
  EXPECT_EQ(t.link->count("register"), 4);
  EXPECT_EQ(t.link->count("heartbeat"), 2);
  EXPECT_EQ(t.time.sleeps,
            (std::vector<milliseconds>{seconds(1), seconds(2), seconds(4), seconds(5), seconds(5)}));
  EXPECT_EQ(countLines(t.log.str(), "cannot reach poold"), 1) << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "reached poold again"), 1) << t.log.str();
}

TEST(AgentLoop, TheRetriesAreJitteredWithinAQuarter) {
  for (double draw : {0.0, 0.999}) {
    Loop t;
    t.time.random = draw;
    t.link->on_register = [](int) { throw unreachable(); };
    t.run(4);
    ASSERT_EQ(t.time.sleeps.size(), 4u);
    const int64_t base[] = {1000, 2000, 4000, 5000};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_GE(t.time.sleeps[i].count(), base[i] * 3 / 4) << i;
      EXPECT_LE(t.time.sleeps[i].count(), base[i] * 5 / 4) << i;
    }
    EXPECT_NE(t.time.sleeps[0], milliseconds(1000));
  }
}

TEST(AgentLoop, RegistersAgainWhenPooldAsks) {
  Loop t;
  t.link->on_heartbeat = [](int n) {
    pool::HeartbeatReply r;
    r.register_again = n == 2;
    return r;
  };
  t.run(4);
  EXPECT_EQ(t.link->calls,
            (std::vector<std::string>{"open tok-node-0123456789", "register", "heartbeat", "heartbeat",
                                      "open tok-node-0123456789", "register", "heartbeat", "heartbeat"}));
  EXPECT_EQ(countLines(t.log.str(), "poold asks for node n01 again"), 1) << t.log.str();
}

TEST(AgentLoop, RegistersTheNewTopologyWhenANicPortChangesState) {
  Loop t;
  t.time.after_sleep = [&](int n) {
    if (n == 2) t.node.ports["mlx5_3:1"] = topo::PortState::kDown;
  };
  t.run(5);
  ASSERT_EQ(t.link->registrations.size(), 2u) << t.log.str();
  const topo::NodeTopology& now = *t.link->registrations[1].node.topology;
  EXPECT_EQ(now.nics[3].ports[0].state, topo::PortState::kDown);
  EXPECT_EQ(now.nics[2].ports[0].state, topo::PortState::kActive);
  EXPECT_EQ(now.gpus, t.topology.gpus);
  EXPECT_EQ(t.last_topology, now);
  // The heartbeats name the topology that was registered when they were sent.
  ASSERT_EQ(t.link->heartbeats.size(), 5u);
  EXPECT_EQ(t.link->heartbeats[1].topology_hash, pool::topologyHash(t.topology));
  EXPECT_EQ(t.link->heartbeats[2].topology_hash, pool::topologyHash(now));
  EXPECT_EQ(t.link->heartbeats[4].topology_hash, pool::topologyHash(now));
  EXPECT_EQ(countLines(t.log.str(), "NIC mlx5_3 port 1 is down (was active)"), 1) << t.log.str();
}

// MIG: a layout NVML reports is registered; a reading NVML could not complete is not; a layout
// poold asks for is made, and how it went is told in the next heartbeat.
TEST(AgentLoop, RegistersTheMigLayoutNvmlReportsButNotAPartialReading) {
  Loop t;
  topo::MigState split = migState(true, true);
  split.instances = {migInstance(1, 0, "3g.40gb", 9, 3, 60, 40448, "MIG-a"),
                     migInstance(2, 0, "3g.40gb", 9, 3, 60, 40448, "MIG-b")};
  t.time.after_sleep = [&](int n) {
    if (n == 1) t.node.mig[2] = split;
    if (n == 2) t.node.mig[2] = topo::MigState{};  // the mode not answered
    if (n == 3) {
      topo::MigState noUuid = split;
      noUuid.instances[1].uuid = "";
      t.node.mig[2] = noUuid;
    }
  };
  t.run(5);
  ASSERT_EQ(t.link->registrations.size(), 2u) << t.log.str();
  EXPECT_EQ(t.link->registrations[1].node.topology->gpus[2].mig, split);
  EXPECT_EQ(countLines(t.log.str(), "GPU 2 MIG on, 2 instances (was 0): registering"), 1) << t.log.str();
}

TEST(AgentLoop, MakesTheMigLayoutPooldAsksForAndSaysHowItWent) {
  Loop t;
  std::vector<std::pair<size_t, std::vector<std::string>>> made;
  t.config.apply_mig = [&](size_t gpu, const std::vector<std::string>& profiles) {
    made.emplace_back(gpu, profiles);
    return gpu == 1 ? std::string("cannot create a 7g.80gb GPU instance: Insufficient Permissions") : "";
  };
  t.link->on_heartbeat = [](int n) {
    pool::HeartbeatReply r;
    if (n == 2) r.mig_layouts = {{0, {"3g.40gb", "3g.40gb"}}, {1, {"7g.80gb"}}};
    return r;
  };
  t.run(4);
  ASSERT_EQ(made.size(), 2u);
  EXPECT_EQ(made[0].second, (std::vector<std::string>{"3g.40gb", "3g.40gb"}));
  ASSERT_GE(t.link->heartbeats.size(), 4u);
  EXPECT_TRUE(t.link->heartbeats[1].mig_results.empty());
  EXPECT_EQ(t.link->heartbeats[2].mig_results,
            (std::map<size_t, std::string>{
                {0, ""}, {1, "cannot create a 7g.80gb GPU instance: Insufficient Permissions"}}));
  EXPECT_TRUE(t.link->heartbeats[3].mig_results.empty()) << "told once";
  EXPECT_EQ(countLines(t.log.str(), "GPU 0: MIG layout 3g.40gb,3g.40gb made"), 1) << t.log.str();
  // Without NVML's MIG calls, every layout fails saying so.
  Loop bare;
  bare.link->on_heartbeat = t.link->on_heartbeat;
  bare.run(3);
  EXPECT_EQ(bare.link->heartbeats[2].mig_results.at(0),
            "this poold-agent cannot change MIG layouts (no NVML access)");
}

TEST(AgentLoop, ARegistrationOfANewTopologyThatFailsIsTriedAgain) {
  Loop t;
  t.time.after_sleep = [&](int n) {
    if (n == 1) t.node.ports["mlx5_0:1"] = topo::PortState::kDown;
  };
  t.link->on_register = [](int n) {
    if (n == 2) throw unreachable();
  };
  t.run(3);
  ASSERT_EQ(t.link->registrations.size(), 2u) << t.log.str();
  EXPECT_EQ(t.link->registrations[1].node.topology->nics[0].ports[0].state, topo::PortState::kDown);
  EXPECT_EQ(t.link->heartbeats.back().topology_hash,
            pool::topologyHash(*t.link->registrations[1].node.topology));
}

TEST(AgentLoop, APortThatCannotBeReadIsNoChange) {
  Loop t;
  t.node.ports["mlx5_1:1"] = topo::PortState::kUnknown;
  t.run(3);
  EXPECT_EQ(t.link->count("register"), 1) << t.log.str();
}

TEST(AgentLoop, AGpuThatNvmlLosesStaysAndIsSaidOnceEachWay) {
  Loop t;
  t.time.after_sleep = [&](int n) {
    if (n == 1) t.node.lost = {3};
    if (n == 4) t.node.lost = {};
  };
  t.run(6);
  EXPECT_EQ(t.link->count("register"), 1);
  ASSERT_EQ(t.link->heartbeats.size(), 6u);
  EXPECT_EQ(t.link->heartbeats[2].gpus.size(), 8u);
  EXPECT_NE(t.link->heartbeats[2].gpus[3].error, "");
  EXPECT_EQ(countLines(t.log.str(), "GPU 3 (0000:"), 2) << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "is lost"), 1) << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "answers NVML again"), 1) << t.log.str();
}

TEST(AgentLoop, NoGpuIsLostWhereNvmlIsAbsent) {
  Loop t;
  t.node.nvml_ok = false;
  t.node.lost = {0, 1, 2, 3, 4, 5, 6, 7};
  t.run(2);
  EXPECT_EQ(countLines(t.log.str(), "is lost"), 0) << t.log.str();
}

pool::PoolError refusedToken() {
  return pool::PoolError(pool::PoolFailure::kUnauthorized, ErrorCode::kBadInput,
                         "http://test refused POST /v1/nodes/n01/register (401): unknown token; set "
                         "POOLRUN_TOKEN or --token-file to a token poold knows");
}

TEST(AgentLoop, ARefusedTokenIsSaidOnceAndReadAgainBeforeEachSlowRetry) {
  Loop t;
  int reads = 0;
  t.link->token = [&] { return "tok-" + std::to_string(++reads) + "-0123456789"; };
  t.link->on_register = [](int n) {
    if (n <= 3) throw refusedToken();
  };
  t.run(5);
  EXPECT_EQ(t.link->count("open"), 4);
  EXPECT_EQ(t.link->calls[0], "open tok-1-0123456789");
  EXPECT_EQ(t.link->calls.back(), "heartbeat");
  EXPECT_EQ(t.time.sleeps[0], agent::kRefusedRetry);
  EXPECT_EQ(t.time.sleeps[2], agent::kRefusedRetry);
  EXPECT_EQ(t.time.sleeps[3], seconds(5));
  EXPECT_EQ(countLines(t.log.str(), "(401): unknown token"), 1) << t.log.str();
}

TEST(AgentLoop, AHeartbeatRefusedForItsTokenLeadsToANewRegistration) {
  Loop t;
  t.link->on_heartbeat = [](int n) -> pool::HeartbeatReply {
    if (n == 2)
      throw pool::PoolError(pool::PoolFailure::kForbidden, ErrorCode::kBadInput,
                            "http://test refused POST /v1/nodes/n01/heartbeat (403): token of node n02");
    return {};
  };
  t.run(3);
  EXPECT_EQ(t.link->count("register"), 2);
  EXPECT_EQ(t.link->count("open"), 2);
  EXPECT_EQ(t.time.sleeps[1], agent::kRefusedRetry);
  EXPECT_EQ(countLines(t.log.str(), "(403): token of node n02"), 1) << t.log.str();
}

TEST(AgentLoop, ARefusedRegistrationDocumentEndsTheAgentWithStatus1) {
  Loop t;
  t.link->on_register = [](int) {
    throw pool::PoolError(pool::PoolFailure::kOther, ErrorCode::kBadInput,
                          "http://test refused POST /v1/nodes/n01/register (400): node.topology: bad");
  };
  EXPECT_EQ(t.run(5), 1);
  EXPECT_EQ(t.link->count("register"), 1);
  EXPECT_EQ(countLines(t.log.str(), "error: http://test refused POST /v1/nodes/n01/register (400)"), 1)
      << t.log.str();
}

TEST(AgentLoop, AnUnreadableTokenFileIsSaidOnceAndTriedAgain) {
  Loop t;
  int reads = 0;
  t.link->token = [&]() -> std::string {
    if (++reads <= 2)
      throw Error(ErrorCode::kNotFound, "/etc/poolrun/agent.token: no such file (check the path)");
    return "tok-node-0123456789";
  };
  t.run(4);
  EXPECT_EQ(t.link->count("register"), 1);
  EXPECT_EQ(countLines(t.log.str(), "agent.token: no such file"), 1) << t.log.str();
  EXPECT_EQ(t.time.sleeps[0], agent::kRefusedRetry);
}

TEST(AgentLoop, StopsAtTheFirstSleepThatSaysStop) {
  Loop t;
  EXPECT_EQ(t.run(1), 0);
  EXPECT_EQ(t.link->count("heartbeat"), 1);
  EXPECT_EQ(t.time.sleeps.size(), 1u);
}

TEST(AgentLoop, WritesTheJobMappingFilesAfterEachReply) {
  Loop t;
  TempDir dir;
  t.config.job_mapping_dir = dir.path();
  t.link->on_heartbeat = [](int n) {
    pool::HeartbeatReply r;
    if (n == 1) r.gpu_leases = {{0, "L0123456789abcdef"}, {5, "L5"}};
    if (n == 2) r.gpu_leases = {{5, "L6"}};
    return r;
  };
  t.time.after_sleep = [&](int n) {
    if (n == 1) {
      EXPECT_EQ(slurp(dir.path() / "0"), "L0123456789abcdef\n");
      EXPECT_EQ(slurp(dir.path() / "5"), "L5\n");
      EXPECT_FALSE(std::filesystem::exists(dir.path() / "1"));
    }
    if (n == 2) {
      EXPECT_FALSE(std::filesystem::exists(dir.path() / "0"));
      EXPECT_EQ(slurp(dir.path() / "5"), "L6\n");
    }
  };
  t.run(3);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(AgentLoop, AReplyThatAsksForTheNodeAgainLeavesTheJobMappingFilesAlone) {
  Loop t;
  TempDir dir;
  t.config.job_mapping_dir = dir.path();
  t.link->on_heartbeat = [](int n) {
    pool::HeartbeatReply r;
    r.register_again = n == 2;  // poold lost its state: no leases in this reply
    if (n != 2) r.gpu_leases = {{1, "L1"}};
    return r;
  };
  t.time.after_sleep = [&](int n) {
    if (n == 2) {
      EXPECT_EQ(slurp(dir.path() / "1"), "L1\n");
    }
  };
  t.run(3);
  EXPECT_EQ(slurp(dir.path() / "1"), "L1\n");
}

TEST(AgentLoop, TheHeartbeatNamesTheLeaseOfEachProcessOnAGpu) {
  Loop t;
  TempDir proc;
  proc.write("4242/environ", std::string("HOME=/root\0POOLRUN_LEASE=Labc\0", 30));
  t.config.proc_root = proc.path();
  t.node.processes[2] = {{4242, 1 << 20}, {4343, 0}};
  t.run(1);
  ASSERT_EQ(t.link->heartbeats.size(), 1u);
  EXPECT_EQ(t.link->heartbeats[0].process_leases, (std::map<uint32_t, std::string>{{4242, "Labc"}}));
  EXPECT_EQ(t.link->heartbeats[0].gpus[2].processes.size(), 2u);
}

// MPS: a daemon runs for each GPU poold lists while it has shares, and only then; one that will
// not start is told once and not tried again while listed; one found running at start is stopped
// where poold does not list its GPU. The MPS server on such a GPU is no process outside the pool.
TEST(AgentLoop, RunsAnMpsDaemonForEachGpuWithShares) {
  Loop t;
  std::vector<std::string> calls;
  t.config.mps.start = [&](size_t gpu) {
    calls.push_back("start " + std::to_string(gpu));
    return gpu == 1 ? std::string("nvidia-cuda-mps-control -d exited with status 1") : "";
  };
  t.config.mps.stop = [&](size_t gpu) {
    calls.push_back("stop " + std::to_string(gpu));
    return std::string();
  };
  t.config.mps.running = [] { return std::set<size_t>{3}; };
  t.link->on_heartbeat = [](int n) {
    pool::HeartbeatReply r;
    if (n == 2 || n == 3) r.mps_gpus = {0, 1};
    if (n == 4) r.mps_gpus = {0};
    return r;
  };
  TempDir proc;
  proc.write("77/comm", "nvidia-cuda-mps\n");
  proc.write("78/comm", "python3\n");
  t.config.proc_root = proc.path();
  t.node.processes[0] = {{77, 1 << 20}, {78, 1 << 20}};
  t.run(5);
  EXPECT_EQ(calls, (std::vector<std::string>{"stop 3", "start 0", "start 1", "stop 0"}));
  ASSERT_GE(t.link->heartbeats.size(), 5u);
  EXPECT_TRUE(t.link->heartbeats[1].mps_errors.empty());
  EXPECT_EQ(t.link->heartbeats[2].mps_errors,
            (std::map<size_t, std::string>{{1, "nvidia-cuda-mps-control -d exited with status 1"}}));
  EXPECT_TRUE(t.link->heartbeats[3].mps_errors.empty()) << "told once";
  // GPU 0's MPS server is left out of its processes while its daemon runs, not the job's process.
  EXPECT_EQ(t.link->heartbeats[1].gpus[0].processes.size(), 2u) << "no daemon yet";
  ASSERT_EQ(t.link->heartbeats[2].gpus[0].processes.size(), 1u);
  EXPECT_EQ(t.link->heartbeats[2].gpus[0].processes[0].pid, 78u);
  EXPECT_EQ(
      countLines(t.log.str(), "GPU 1: MPS control daemon not started: nvidia-cuda-mps-control -d exited"), 1)
      << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "GPU 0: MPS control daemon stopped (no share left)"), 1) << t.log.str();
  // An agent without MPS says so for every GPU it is asked to share.
  Loop bare;
  bare.link->on_heartbeat = t.link->on_heartbeat;
  bare.run(3);
  EXPECT_EQ(bare.link->heartbeats[2].mps_errors.at(0), "this poold-agent does not run MPS daemons");
}

// The cgroups of leases poold lists no more on the node are ended after the second reply that
// leaves them out; a lease listed again is kept; a cgroup made while a heartbeat was on its way is
// not judged by its reply; one that cannot go is said once and tried again; a reply without the list
// (a poold before it) or asking for the node again ends nothing.
TEST(AgentLoop, EndsTheCgroupsOfLeasesThatPooldListsNoMore) {
  Loop t;
  std::set<std::string> cgroups{"La", "Lb", "Lc", "Le"};
  std::vector<std::string> ended;
  int refusals = 0;
  t.config.lease_cgroups.list = [&] { return cgroups; };
  t.config.lease_cgroups.end = [&](const std::string& lease) -> size_t {
    if (lease == "Le" && refusals++ < 2)
      throw Error(ErrorCode::kIo, "2 processes outlived 5 s: 4242 (sleep) D");
    ended.push_back(lease);
    cgroups.erase(lease);
    return lease == "La" ? 3 : 0;
  };
  std::vector<std::vector<std::string>> endedBy;  // what had been ended when each heartbeat was sent
  t.link->on_heartbeat = [&](int n) {
    endedBy.push_back(ended);
    pool::HeartbeatReply r;
    r.leases = std::set<std::string>{"Lb"};
    if (n == 1) r.leases = std::set<std::string>{"La", "Lb", "Lc", "Le"};
    if (n == 3) r.leases->insert("Lc");  // listed again: its count starts over
    if (n == 2) cgroups.insert("Ld");    // made during the heartbeat: this reply does not judge it
    if (n == 5) r.leases.reset();        // a poold that sends no list
    if (n == 6) r.register_again = true;
    return r;
  };
  t.run(9);
  ASSERT_EQ(endedBy.size(), 9u) << t.log.str();
  EXPECT_EQ(endedBy[2], std::vector<std::string>{}) << "one reply without them is not enough";
  EXPECT_EQ(endedBy[3], std::vector<std::string>{"La"}) << t.log.str();
  EXPECT_EQ(endedBy[4], (std::vector<std::string>{"La", "Ld"})) << "Ld: left out by replies 3 and 4";
  EXPECT_EQ(endedBy[6], (std::vector<std::string>{"La", "Ld"})) << "no list, or a registration, ends nothing";
  EXPECT_EQ(ended, (std::vector<std::string>{"La", "Ld", "Lc", "Le"})) << t.log.str();
  EXPECT_EQ(cgroups, std::set<std::string>{"Lb"});
  EXPECT_EQ(countLines(t.log.str(),
                       "lease La has ended (poold lists it no more on node n01): its cgroup "
                       "removed, 3 processes in it killed"),
            1)
      << t.log.str();
  EXPECT_EQ(countLines(t.log.str(),
                       "lease Le has ended, but its cgroup on node n01 is left for now (tried "
                       "again after each heartbeat): 2 processes outlived 5 s"),
            1)
      << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "lease Le has ended (poold lists it no more"), 1) << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "lease Lb"), 0) << t.log.str();
}

// The health checks run at the start, then every interval while the node is idle (never while a lease
// holds it); each heartbeat carries what they last said; each change is one line; a check that
// throws counts as a failure, with why.
TEST(AgentLoop, RunsTheHealthChecksWhileIdleAndTellsPooldWhatFailed) {
  Loop t;
  std::vector<std::string> said = {"", "gpu.retired_pages GPU 2 (0000:3a:00.0): a row remapping failed", "",
                                   "throw"};
  size_t runs = 0;
  std::vector<int> ranBefore;  // the heartbeat each run came before
  t.config.health_interval = seconds(10);
  t.config.health_check = [&] {
    ranBefore.push_back(t.link->count("heartbeat") + 1);
    const std::string s = said[std::min(runs++, said.size() - 1)];
    if (s == "throw") throw Error(ErrorCode::kIo, "NVML answered nothing");
    return s;
  };
  t.link->on_heartbeat = [](int n) {
    pool::HeartbeatReply r;
    r.leases.emplace();
    if (n >= 3 && n <= 6) r.leases->insert("L1");  // busy from the 3rd reply to the 6th
    return r;
  };
  // Heartbeats 5 s apart: checks due every other one while idle.
  t.run(12);
  EXPECT_EQ(ranBefore, (std::vector<int>{1, 3, 8, 10, 12})) << "not while busy (after replies 3 to 6)";
  ASSERT_EQ(t.link->heartbeats.size(), 12u);
  EXPECT_EQ(t.link->heartbeats[0].health_failure, "");
  EXPECT_EQ(t.link->heartbeats[1].health_failure, "") << "carried between checks";
  EXPECT_EQ(t.link->heartbeats[2].health_failure, said[1]);
  EXPECT_EQ(t.link->heartbeats[6].health_failure, said[1]) << "not checked again while busy";
  EXPECT_EQ(t.link->heartbeats[7].health_failure, "");
  EXPECT_EQ(t.link->heartbeats[9].health_failure, "the health checks could not run: NVML answered nothing");
  EXPECT_EQ(countLines(t.log.str(), "health checks pass (run every 10 s while no lease holds the node)"), 1)
      << t.log.str();
  EXPECT_EQ(
      countLines(t.log.str(), "health checks fail: " + said[1] + " (poold drains node n01 until they pass)"),
      1)
      << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "health checks pass again"), 1) << t.log.str();
  EXPECT_EQ(countLines(t.log.str(), "health checks fail: the health checks could not run"), 1)
      << "said once, not at each run: " << t.log.str();
  // An agent without checks sends nothing of them.
  Loop bare;
  bare.run(2);
  EXPECT_FALSE(bare.link->heartbeats[1].health_failure);
}

// What a heartbeat says of the doctor's report: its FAILs alone, as UTF-8 poold takes, within bounds.
TEST(HealthFailure, IsTheFailsAloneAsBoundedUtf8) {
  doctor::Report r;
  r.add({"gpu.clocks", doctor::Status::kWarn, "GPU 0", "clocks event reasons 0x8", "check cooling", ""});
  EXPECT_EQ(agent::healthFailure(r), "") << "a WARN drains nothing";
  r.add({"rdma.port", doctor::Status::kFail, "mlx5_0/1", "state 1: DOWN (/sys/...)", "", ""});
  r.add({"gpu.ecc", doctor::Status::kFail, "GPU 1 (0000:18:00.0)", "2 uncorrected ECC errors", "", ""});
  r.add({"rdma", doctor::Status::kSkip, "node", "no RDMA device", "", ""});
  r.add({"rdma.memlock", doctor::Status::kFail, "ulimit -l", "8 MiB", "", ""});  // the agent's, not a job's
  EXPECT_EQ(
      agent::healthFailure(r),
      "rdma.port mlx5_0/1: state 1: DOWN (/sys/...); gpu.ecc GPU 1 (0000:18:00.0): 2 uncorrected ECC errors");
  doctor::Report odd;
  odd.add({"rdma.port", doctor::Status::kFail, "mlx5_\xff", "state \xc3", "", ""});
  EXPECT_EQ(agent::healthFailure(odd), "rdma.port mlx5_\\xff: state \\xc3");
  doctor::Report many;
  for (int i = 0; i < 2000; ++i)
    many.add({"gpu.ecc", doctor::Status::kFail, "GPU \u00e9", "2 uncorrected ECC errors", "", ""});
  const std::string cut = agent::healthFailure(many);
  EXPECT_LE(cut.size(), pool::kMaxHealthBytes);
  EXPECT_TRUE(cut.ends_with("...")) << cut.substr(cut.size() - 20);
  EXPECT_EQ(common::utf8ErrorOffset(cut), cut.size());
}

// An agent whose cgroups cannot be listed says so once and goes on heartbeating.
TEST(AgentLoop, LeasesCgroupsThatCannotBeListedAreSaidOnce) {
  Loop t;
  t.config.lease_cgroups.list = []() -> std::set<std::string> {
    throw Error(ErrorCode::kIo,
                "cannot list the leases' cgroups in /sys/fs/cgroup/poolrun: Permission denied");
  };
  t.config.lease_cgroups.end = [](const std::string&) -> size_t {
    ADD_FAILURE() << "nothing listed, nothing to end";
    return 0;
  };
  t.link->on_heartbeat = [](int) {
    pool::HeartbeatReply r;
    r.leases.emplace();
    return r;
  };
  EXPECT_EQ(t.run(3), 0);
  EXPECT_EQ(t.link->count("heartbeat"), 3);
  EXPECT_EQ(countLines(t.log.str(), "cannot list the leases' cgroups"), 1) << t.log.str();
}

}  // namespace
}  // namespace poolrun::test
