// The binding planner: table-driven on topologies the tests write and on the real fixtures,
// property tests over generated machines.

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "poolrun/common/error.hpp"
#include "poolrun/launcher/job_directory.hpp"
#include "poolrun/launcher/plan.hpp"
#include "support/fixtures.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::launcher {
namespace {

using poolrun::test::synthetic;
using poolrun::test::SyntheticSpec;
using topo::Cluster;

Cluster clusterOf(const topo::NodeTopology& t, int nodes, std::vector<std::string> switches = {}) {
  Cluster c;
  c.file = "test-cluster.toml";
  auto shared = std::make_shared<const topo::NodeTopology>(t);
  for (int i = 0; i < nodes; ++i) {
    topo::ClusterNode n;
    n.name = "n" + std::to_string(i + 1);
    n.topology = shared;
    n.topology_file = "synthetic";
    if (!switches.empty()) n.levels.switch_name = switches[static_cast<size_t>(i) % switches.size()];
    c.nodes.push_back(n);
  }
  return c;
}

std::string env(const RankPlan& r, const std::string& name) {
  for (const auto& [k, v] : r.env) {
    if (k == name) return v;
  }
  return "<unset>";
}

std::string nicNames(const RankPlan& r) {
  std::string out;
  for (const NicChoice& n : r.nics) out += (out.empty() ? "" : ",") + n.name;
  return out;
}

// Invariants every plan keeps: each granted GPU used once per node, CPU sets disjoint and inside
// the GPU's NUMA node, exact-match HCA strings, local ranks contiguous.
void checkInvariants(const JobPlan& plan) {
  std::map<std::string, std::set<size_t>> gpus;
  std::map<std::string, topo::CpuSet> used;
  int expectedRank = 0;
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(r.rank, expectedRank++);
    const NodePlan& n = plan.nodeOf(r);
    EXPECT_EQ(r.rank, n.first_rank + r.local_rank);
    EXPECT_TRUE(gpus[n.name].insert(r.gpu).second) << "GPU" << r.gpu << " twice on " << n.name;
    if (!r.shares_cpus) {
      EXPECT_FALSE(used[n.name].intersects(r.cpuset)) << "rank " << r.rank << " cpus " << r.cpuset.toList();
      used[n.name] = used[n.name] | r.cpuset;
    }
    EXPECT_FALSE(r.cpuset.empty());
    if (const topo::NumaNode* numa = n.node.topology->numaNode(r.numa);
        numa != nullptr && !numa->cpus.empty()) {
      EXPECT_EQ((r.cpuset & numa->cpus), r.cpuset) << "rank " << r.rank << " is not NUMA-local";
    }
    std::string hca = env(r, "NCCL_IB_HCA");
    if (hca != "<unset>" && !r.user_won.contains("NCCL_IB_HCA")) {
      EXPECT_EQ(hca[0], '=') << hca;
      for (const NicChoice& nic : r.nics)
        EXPECT_NE(hca.find(nic.name + ":" + std::to_string(nic.port)), std::string::npos);
    }
    EXPECT_EQ(env(r, "RANK"), std::to_string(r.rank));
    EXPECT_EQ(env(r, "LOCAL_RANK"), std::to_string(r.local_rank));
    EXPECT_EQ(env(r, "WORLD_SIZE"), std::to_string(plan.ranks.size()));
  }
}

struct PlannerCase {
  const char* name;
  SyntheticSpec spec;
  PlanRequest request;
  std::function<void(const JobPlan&)> check;
};

PlanRequest ranks(int n) {
  PlanRequest r;
  r.ranks = n;
  return r;
}

PlanRequest with(PlanRequest r, std::function<void(PlanRequest&)> f) {
  f(r);
  return r;
}

SyntheticSpec spec(std::function<void(SyntheticSpec&)> f) {
  SyntheticSpec s;
  f(s);
  return s;
}

const std::vector<PlannerCase>& cases() {
  static const std::vector<PlannerCase> kCases = {
      {"Gpu8Nic8", SyntheticSpec{}, ranks(8),
       [](const JobPlan& p) {
         EXPECT_EQ(p.fabric, topo::Fabric::kIb);
         std::set<std::string> nics;
         for (const RankPlan& r : p.ranks) {
           ASSERT_EQ(r.nics.size(), 1u);
           nics.insert(r.nics[0].name);
           EXPECT_EQ(r.gpu_nic_path.str(), "PIX");
           EXPECT_TRUE(r.gdr);
           EXPECT_EQ(env(r, "NCCL_NET_GDR_LEVEL"), "PIX");
           EXPECT_EQ(env(r, "NCCL_NET_GDR_READ"), "1");
           EXPECT_EQ(env(r, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
           EXPECT_EQ(env(r, "CUDA_VISIBLE_DEVICES"), std::to_string(r.gpu));
           EXPECT_EQ(env(r, "NCCL_SOCKET_IFNAME"), "=ib" + r.nics[0].name.substr(5));
         }
         EXPECT_EQ(nics.size(), 8u) << "every NIC serves one GPU";
         // 4 ranks per NUMA node of 16 cores x 2 threads: 4 whole cores each.
         EXPECT_EQ(p.ranks[0].cpuset.toList(), "0-3,32-35");
         EXPECT_EQ(p.ranks[0].rankfile_slots, "0-3");
         EXPECT_EQ(p.ranks[4].cpuset.toList(), "16-19,48-51");
         EXPECT_FALSE(p.hwthread_slots);
       }},
      {"Gpu8Nic4", spec([](SyntheticSpec& s) { s.nics = 4; }), ranks(8),
       [](const JobPlan& p) {
         std::map<std::string, int> load;
         for (const RankPlan& r : p.ranks) {
           ++load[r.nics.at(0).name];
           EXPECT_EQ(r.gpu_nic_path.str(), "PIX");
         }
         for (const auto& [nic, n] : load) EXPECT_EQ(n, 2) << nic;
       }},
      {"Gpu8Nic1", spec([](SyntheticSpec& s) { s.nics = 1; }), ranks(8),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) EXPECT_EQ(r.nics.at(0).name, "mlx5_0");
         std::map<size_t, std::string> path;
         for (const RankPlan& r : p.ranks) path[r.gpu] = r.gpu_nic_path.str();
         EXPECT_EQ(path[0], "PIX");
         EXPECT_EQ(path[2], "PHB");
         EXPECT_EQ(path[7], "SYS");
         for (const RankPlan& r : p.ranks) {
           EXPECT_EQ(r.gdr, r.gpu < 2) << "GPU" << r.gpu << ": " << r.gdr_reason;
           if (r.gpu >= 4) {
             ASSERT_FALSE(r.notes.empty());
             EXPECT_NE(r.notes[0].find("no NIC near GPU"), std::string::npos) << r.notes[0];
             EXPECT_EQ(env(r, "NCCL_NET_GDR_LEVEL"), "LOC");
           }
         }
       }},
      {"Gpu8Nic1GdrOn", spec([](SyntheticSpec& s) { s.nics = 1; }),
       with(ranks(8), [](PlanRequest& r) { r.gdr = GdrMode::kOn; }),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) {
           EXPECT_EQ(r.gdr, r.gpu < 4) << "GPU" << r.gpu << ": " << r.gdr_reason;
           if (r.gpu == 2) {
             EXPECT_EQ(env(r, "NCCL_NET_GDR_LEVEL"), "PHB") << "NODE counts as PHB for NCCL";
           }
         }
       }},
      {"GdrOff", SyntheticSpec{}, with(ranks(8), [](PlanRequest& r) { r.gdr = GdrMode::kOff; }),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) {
           EXPECT_FALSE(r.gdr);
           EXPECT_EQ(env(r, "NCCL_NET_GDR_LEVEL"), "LOC");
         }
       }},
      {"RoceWithGidTable", spec([](SyntheticSpec& s) {
         s.layer = topo::LinkLayer::kEthernet;
         s.gid_index = 3;
       }),
       with(ranks(8), [](PlanRequest& r) { r.roce_tc = 106; }),
       [](const JobPlan& p) {
         EXPECT_EQ(p.fabric, topo::Fabric::kRoce);
         for (const RankPlan& r : p.ranks) {
           EXPECT_EQ(env(r, "NCCL_IB_GID_INDEX"), "3");
           EXPECT_EQ(env(r, "NCCL_IB_TC"), "106");
           EXPECT_EQ(env(r, "NCCL_IB_HCA"), "=" + r.nics.at(0).name + ":1");
         }
       }},
      {"RoceWithoutGid", spec([](SyntheticSpec& s) { s.layer = topo::LinkLayer::kEthernet; }), ranks(2),
       [](const JobPlan& p) {
         EXPECT_EQ(env(p.ranks[0], "NCCL_IB_GID_INDEX"), "<unset>");
         EXPECT_NE(p.ranks[0].notes.at(0).find("GID index unknown"), std::string::npos);
       }},
      {"MixedIbAndEthernetPorts", spec([](SyntheticSpec& s) {
         s.ethernet_nics = {1, 3, 5, 7};
       }),
       ranks(8),
       [](const JobPlan& p) {
         EXPECT_EQ(p.fabric, topo::Fabric::kIb);
         std::map<std::string, int> load;
         for (const RankPlan& r : p.ranks) ++load[r.nics.at(0).name];
         EXPECT_EQ(load,
                   (std::map<std::string, int>{{"mlx5_0", 2}, {"mlx5_2", 2}, {"mlx5_4", 2}, {"mlx5_6", 2}}));
       }},
      {"ExplicitRoceOnMixedPorts", spec([](SyntheticSpec& s) {
         s.ethernet_nics = {1, 3, 5, 7};
       }),
       with(ranks(8), [](PlanRequest& r) { r.fabric = topo::Fabric::kRoce; }),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) EXPECT_EQ(r.nics.at(0).link_layer, topo::LinkLayer::kEthernet);
       }},
      {"PortDown", spec([](SyntheticSpec& s) { s.down_nics = {0}; }), ranks(8),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) {
           EXPECT_NE(r.nics.at(0).name, "mlx5_0");
           if (r.gpu < 2) {
             EXPECT_EQ(r.nics.at(0).name, "mlx5_1");
           }
         }
       }},
      {"MoreNicsThanGpus", spec([](SyntheticSpec& s) { s.gpus = 4; }), ranks(4),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) {
           ASSERT_EQ(r.nics.size(), 2u) << "a rank gets all the NICs of its switch";
           EXPECT_EQ(env(r, "NCCL_IB_HCA"), "=" + r.nics[0].name + ":1," + r.nics[1].name + ":1");
           EXPECT_EQ(env(r, "UCX_NET_DEVICES"), r.nics[0].name + ":1," + r.nics[1].name + ":1");
         }
       }},
      {"HyperthreadsWhenCoresRunOut", spec([](SyntheticSpec& s) { s.cores_per_numa = 2; }), ranks(8),
       [](const JobPlan& p) {
         EXPECT_TRUE(p.hwthread_slots);
         for (const RankPlan& r : p.ranks) {
           EXPECT_EQ(r.cpuset.size(), 1u);
           EXPECT_FALSE(r.shares_cpus);
         }
         // First threads of both cores, then the second threads: CPUs 0, 1, then 4, 5 (siblings).
         EXPECT_EQ(p.ranks[0].cpuset.toList(), "0");
         EXPECT_EQ(p.ranks[2].cpuset.toList(), "4");
         EXPECT_EQ(p.ranks[2].rankfile_slots, "1") << "logical hardware thread index";
       }},
      {"SharedCpus", spec([](SyntheticSpec& s) {
         s.cores_per_numa = 1;
         s.threads = 1;
       }),
       ranks(8),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) {
           EXPECT_TRUE(r.shares_cpus);
           EXPECT_NE(r.notes.back().find("ranks share CPUs"), std::string::npos);
         }
       }},
      {"Tcp", SyntheticSpec{}, with(ranks(4), [](PlanRequest& r) { r.fabric = topo::Fabric::kTcp; }),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) {
           EXPECT_EQ(env(r, "NCCL_IB_DISABLE"), "1");
           EXPECT_EQ(env(r, "NCCL_IB_HCA"), "<unset>");
           EXPECT_EQ(env(r, "NCCL_SOCKET_IFNAME").substr(0, 3), "=ib");
           EXPECT_EQ(r.transport, NetTransport::kSocket);
           EXPECT_FALSE(r.gdr) << "PIX to the NIC, but NCCL's sockets never use GPUDirect RDMA";
         }
       }},
      {"TcpWithGdrOn", SyntheticSpec{},
       with(ranks(4),
            [](PlanRequest& r) {
              r.fabric = topo::Fabric::kTcp;
              r.gdr = GdrMode::kOn;
            }),
       [](const JobPlan& p) {
         for (const RankPlan& r : p.ranks) {
           EXPECT_FALSE(r.gdr);
           EXPECT_NE(r.gdr_reason.find("(--gdr on does not apply)"), std::string::npos) << r.gdr_reason;
         }
         ASSERT_EQ(p.notes.size(), 1u);
         EXPECT_TRUE(p.notes[0].starts_with("--gdr on does not apply to fabric tcp")) << p.notes[0];
       }},
      {"UserValueWins", SyntheticSpec{},
       with(ranks(2), [](PlanRequest& r) { r.user_env["NCCL_IB_HCA"] = "mlx5"; }),
       [](const JobPlan& p) {
         EXPECT_EQ(env(p.ranks[0], "NCCL_IB_HCA"), "mlx5");
         EXPECT_EQ(p.ranks[0].user_won.at("NCCL_IB_HCA"), "=mlx5_0:1");
         nlohmann::json doc = nlohmann::json::parse(planToJson(p).dump());
         EXPECT_EQ(doc["ranks"][0]["user_won"]["NCCL_IB_HCA"]["planned"], "=mlx5_0:1");
       }},
      {"GpusPerNode", SyntheticSpec{}, with(ranks(6), [](PlanRequest& r) { r.gpus_per_node = 2; }),
       [](const JobPlan& p) {
         ASSERT_EQ(p.nodes.size(), 3u);
         for (const NodePlan& n : p.nodes) EXPECT_EQ(n.ranks, 2);
         // The two GPUs of one PCIe switch (the best-connected pair).
         EXPECT_EQ(p.ranks[0].gpu, 0);
         EXPECT_EQ(p.ranks[1].gpu, 1);
       }},
  };
  return kCases;
}

class PlannerTable : public ::testing::TestWithParam<PlannerCase> {};

TEST_P(PlannerTable, Plans) {
  const PlannerCase& c = GetParam();
  JobPlan plan = planOnCluster(clusterOf(synthetic(c.spec), 4), c.request);
  checkInvariants(plan);
  c.check(plan);
}

void PrintTo(const PlannerCase& c, std::ostream* os) {
  *os << c.name << ", " << c.request.ranks << " ranks";
}

INSTANTIATE_TEST_SUITE_P(Synthetic, PlannerTable, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<PlannerCase>& param) {
                           return std::string(param.param.name);
                         });

TEST(JobDirs, PruneKeepsTheNewestAndAnythingRecent) {
  test::TempDir tmp;
  namespace fs = std::filesystem;
  const auto now = fs::file_time_type::clock::now();
  auto make = [&](const std::string& name, std::chrono::hours age) {
    fs::create_directories(tmp.path() / name / "sub");
    std::ofstream(tmp.path() / name / "plan.json") << "{}";
    std::ofstream(tmp.path() / name / kJobMarkerFile) << name << "\n";  // as poolrun marks its own
    fs::last_write_time(tmp.path() / name, now - age);
  };
  for (int i = 0; i < 3; ++i) make("new" + std::to_string(i), std::chrono::hours(i));
  make("old-but-newest-of-the-old", std::chrono::hours(24 * 8));
  make("old1", std::chrono::hours(24 * 9));
  make("old2", std::chrono::hours(24 * 30));
  make("recent", std::chrono::hours(24 * 2));
  std::ofstream(tmp.path() / "a-file") << "not a job";
  // Keep 4: the three new ones and "recent"; of the rest, all are older than a week.
  EXPECT_EQ(pruneJobDirs(tmp.path(), 4, std::chrono::hours(24 * 7)), 3u);
  for (const char* kept : {"new0", "new1", "new2", "recent", "a-file"})
    EXPECT_TRUE(fs::exists(tmp.path() / kept)) << kept;
  for (const char* gone : {"old-but-newest-of-the-old", "old1", "old2"})
    EXPECT_FALSE(fs::exists(tmp.path() / gone)) << gone;
  // Within `keep`, nothing goes, however old; a missing folder is no error.
  make("old3", std::chrono::hours(24 * 40));
  EXPECT_EQ(pruneJobDirs(tmp.path(), 10, std::chrono::hours(24 * 7)), 0u);
  EXPECT_EQ(pruneJobDirs(tmp.path() / "absent", 0, std::chrono::hours(1)), 0u);
  // With keep 2, the recent ones beyond it stay too: only age removes.
  EXPECT_EQ(pruneJobDirs(tmp.path(), 2, std::chrono::hours(24 * 7)), 1u);
  EXPECT_TRUE(fs::exists(tmp.path() / "recent"));
}

TEST(JobDirs, PruneLooksAtMostEveryInterval) {
  test::TempDir tmp;
  namespace fs = std::filesystem;
  const auto now = fs::file_time_type::clock::now();
  auto make = [&](const std::string& name, std::chrono::hours age) {
    fs::create_directories(tmp.path() / name);
    std::ofstream(tmp.path() / name / kJobMarkerFile) << name << "\n";
    fs::last_write_time(tmp.path() / name, now - age);
  };
  make("new", std::chrono::hours(0));
  make("old1", std::chrono::hours(24 * 9));
  const auto hourly = std::chrono::minutes(60);
  EXPECT_EQ(pruneJobDirs(tmp.path(), 1, std::chrono::hours(24 * 7), hourly), 1u);
  ASSERT_TRUE(fs::exists(tmp.path() / ".pruned")) << "the look is recorded";
  // Within the hour, a new old directory stays; looking every time (zero) takes it.
  make("old2", std::chrono::hours(24 * 9));
  EXPECT_EQ(pruneJobDirs(tmp.path(), 1, std::chrono::hours(24 * 7), hourly), 0u);
  EXPECT_TRUE(fs::exists(tmp.path() / "old2"));
  // An hour later (the record aged by hand), it goes; so it does where the record is in the future.
  fs::last_write_time(tmp.path() / ".pruned", now - std::chrono::minutes(61));
  EXPECT_EQ(pruneJobDirs(tmp.path(), 1, std::chrono::hours(24 * 7), hourly), 1u);
  make("old3", std::chrono::hours(24 * 9));
  fs::last_write_time(tmp.path() / ".pruned", now + std::chrono::hours(5));
  EXPECT_EQ(pruneJobDirs(tmp.path(), 1, std::chrono::hours(24 * 7), hourly), 1u);
  EXPECT_TRUE(fs::exists(tmp.path() / "new"));
  EXPECT_TRUE(fs::exists(tmp.path() / ".pruned")) << "the record is no job directory";
}

TEST(PlannerTest, LeafSwitchNeighboursAreAdjacentInRankOrder) {
  JobPlan plan = planOnCluster(clusterOf(synthetic({}), 4, {"leaf1", "leaf2"}), ranks(32));
  std::vector<std::string> order;
  for (const NodePlan& n : plan.nodes) order.push_back(n.name);
  EXPECT_EQ(order, (std::vector<std::string>{"n1", "n3", "n2", "n4"}));
}

TEST(PlannerTest, ConsecutiveRanksShareTheFastestLink) {
  // No switches; NVLink between GPU0-GPU2 and GPU2-GPU1 and GPU1-GPU3.
  SyntheticSpec s;
  s.switches = 0;
  s.numa = 1;
  s.gpus = 4;
  s.nics = 0;
  s.nvswitch_links = 0;
  topo::NodeTopology t = synthetic(s);
  auto link = [&](size_t a, size_t b) {
    t.gpus[a].nvlinks.push_back({b, "GPU" + std::to_string(b), 4});
    t.gpus[b].nvlinks.push_back({a, "GPU" + std::to_string(a), 4});
  };
  link(0, 2);
  link(2, 1);
  link(1, 3);
  PlanRequest req = ranks(4);
  req.fabric = topo::Fabric::kTcp;
  JobPlan plan = planOnCluster(clusterOf(t, 1), req);
  std::vector<size_t> gpus;
  for (const RankPlan& r : plan.ranks) gpus.push_back(r.gpu);
  EXPECT_EQ(gpus, (std::vector<size_t>{0, 2, 1, 3}));
}

TEST(PlannerTest, CudaIndexSkipsNonNvidiaGpus) {
  topo::NodeTopology t = synthetic({});
  t.gpus[0].vendor = topo::kVendorAmd;
  Cluster c = clusterOf(t, 1);
  JobPlan plan = planOnCluster(c, ranks(7));
  for (const RankPlan& r : plan.ranks) {
    EXPECT_NE(r.gpu, 0);
    EXPECT_EQ(r.cuda_index, r.gpu - 1);
  }
  EXPECT_NE(
      std::find(plan.notes.begin(), plan.notes.end(),
                "n1: GPU0 (AMD GPU 1002:2330) is not an NVIDIA GPU: no CUDA device, no rank planned on it"),
      plan.notes.end());
}

TEST(PlannerTest, RefusesRanksOnGpusThatAreNotNvidia) {
  topo::NodeTopology t = synthetic({});
  t.gpus[0].vendor = topo::kVendorAmd;
  Cluster c = clusterOf(t, 2);
  // Asked of the cluster: the AMD GPUs are not counted, and the error says so.
  try {
    planOnCluster(c, ranks(16));
    FAIL() << "planned 16 ranks on 14 NVIDIA GPUs";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("-n 16: test-cluster.toml has 14 NVIDIA GPUs on 2 nodes (and GPUs that "
                                   "take no rank, not being NVIDIA's: 2 AMD; poolrun plans CUDA/NCCL ranks "
                                   "on NVIDIA GPUs only); ask for fewer ranks"),
        std::string::npos)
        << e.what();
  }
  // Granted by a pool: refused before anything starts.
  std::vector<NodeGrant> grants{{&c.nodes[0], {0, 1}}};
  try {
    makePlan(grants, ranks(2));
    FAIL() << "planned a CUDA rank on an AMD GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_NE(
        std::string(e.what()).find("GPU0 of node n1 (AMD GPU 1002:2330) is not an NVIDIA GPU: poolrun plans "
                                   "CUDA/NCCL ranks only; ask for NVIDIA GPUs"),
        std::string::npos)
        << e.what();
  }
}

// MIG instances: a rank per instance, CUDA_VISIBLE_DEVICES its UUID, the cores and NIC of its GPU,
// and NCCL told that no peer-to-peer path joins them.
TEST(PlannerTest, EachRankGetsItsMigInstanceAndTheNicOfItsGpu) {
  topo::NodeTopology t = synthetic({});
  for (size_t g : {size_t{0}, size_t{1}}) {
    t.gpus[g].mig = test::migState(true, true);
    for (int k = 0; k < 3; ++k)
      t.gpus[g].mig.instances.push_back(test::migInstance(
          k + 1, 0, "2g.20gb", 14, 2, 32, 20096, "MIG-" + std::to_string(g) + "-" + std::to_string(k)));
  }
  topo::Cluster c = clusterOf(t, 1);
  NodeGrant grant{&c.nodes[0], {0, 0, 1}, {"MIG-0-0", "MIG-0-2", "MIG-1-1"}};
  JobPlan plan = makePlan({grant}, ranks(3));
  ASSERT_EQ(plan.ranks.size(), 3u);
  const JobPlan whole = makePlan({NodeGrant{&c.nodes[0], {0, 1}}}, ranks(2));
  const char* expected[] = {"MIG-0-0", "MIG-0-2", "MIG-1-1"};
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(plan.ranks[r].mig, expected[r]);
    EXPECT_EQ(env(plan.ranks[r], "CUDA_VISIBLE_DEVICES"), expected[r]);
    EXPECT_EQ(env(plan.ranks[r], "NCCL_P2P_DISABLE"), "1");
    EXPECT_EQ(env(plan.ranks[r], "NCCL_NVLS_ENABLE"), "0");
    // A NIC as close to the GPU the instance is part of as a whole-GPU rank on that GPU gets (the
    // ranks of one PCIe switch share its NICs out), and that GPU's memory node.
    const RankPlan& onGpu = whole.ranks[plan.ranks[r].gpu == whole.ranks[0].gpu ? 0 : 1];
    ASSERT_FALSE(plan.ranks[r].nics.empty());
    EXPECT_EQ(plan.ranks[r].gpu_nic_path.str(), onGpu.gpu_nic_path.str());
    EXPECT_EQ(plan.ranks[r].numa, onGpu.numa);
  }
  EXPECT_NE(std::find(plan.notes.begin(), plan.notes.end(), migNcclNote()), plan.notes.end());
  EXPECT_NE(planTable(plan).find("0 MIG-0-2"), std::string::npos) << planTable(plan);
  EXPECT_EQ(planToJson(plan)["ranks"][2]["gpu"]["mig"], "MIG-1-1");
  // One rank on an instance: nothing to say of NCCL.
  JobPlan one = makePlan({NodeGrant{&c.nodes[0], {1}, {"MIG-1-0"}}}, ranks(1));
  EXPECT_EQ(env(one.ranks[0], "NCCL_P2P_DISABLE"), "<unset>");
  EXPECT_TRUE(std::find(one.notes.begin(), one.notes.end(), migNcclNote()) == one.notes.end());
  // An instance the GPU does not have is refused before anything starts.
  try {
    makePlan({NodeGrant{&c.nodes[0], {1}, {"MIG-0-0"}}}, ranks(1));
    FAIL() << "planned an instance on another GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MIG instance MIG-0-0 is not one of GPU1 of node"),
              std::string::npos)
        << e.what();
  }
}

// MPS shares: a rank is a client of its GPU's MPS control daemon, named by the GPU's UUID, with
// its share's limits; a GPU without a share is the rank's as before.
TEST(PlannerTest, ARankOnAShareIsAClientOfItsGpusMpsDaemon) {
  topo::NodeTopology t = synthetic({});
  t.gpus[1].uuid = "GPU-11111111-2222-3333-4444-555555555555";
  topo::Cluster c = clusterOf(t, 1);
  NodeGrant grant{&c.nodes[0], {1, 2}};
  grant.shares[1] = {25, uint64_t{20} << 30};
  grant.shares[2] = {0, (uint64_t{1} << 20) - 1};  // less than a MiB: 1M, never 0 (not limited)
  PlanRequest req = ranks(2);
  req.mps_dir = "/run/mps-test";
  JobPlan plan = makePlan({grant}, req);
  ASSERT_EQ(plan.ranks.size(), 2u);
  const RankPlan& one = plan.ranks[0].gpu == 1 ? plan.ranks[0] : plan.ranks[1];
  const RankPlan& two = plan.ranks[0].gpu == 1 ? plan.ranks[1] : plan.ranks[0];
  EXPECT_EQ(env(one, "CUDA_VISIBLE_DEVICES"), "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(env(one, "CUDA_MPS_PIPE_DIRECTORY"), "/run/mps-test/gpu1");
  EXPECT_EQ(env(one, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(env(one, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20480M");
  EXPECT_EQ(env(one, "POOLRUN_MPS_WAIT"), "60");
  ASSERT_TRUE(one.share);
  EXPECT_EQ(one.share->percent, 25);
  // A GPU without a UUID keeps its index; no percentage: the SMs are not limited.
  EXPECT_EQ(env(two, "CUDA_VISIBLE_DEVICES"), std::to_string(two.cuda_index));
  EXPECT_EQ(env(two, "CUDA_MPS_PIPE_DIRECTORY"), "/run/mps-test/gpu2");
  EXPECT_EQ(env(two, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "<unset>");
  EXPECT_EQ(env(two, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=1M");
  // The user's own value still wins.
  req.user_env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "10";
  for (const RankPlan& r : makePlan({grant}, req).ranks) {
    if (r.gpu == 1) {
      EXPECT_EQ(env(r, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "10");
    }
  }
  // Whole GPUs: none of it.
  JobPlan whole = makePlan({NodeGrant{&c.nodes[0], {1, 2}}}, ranks(2));
  EXPECT_EQ(env(whole.ranks[0], "CUDA_MPS_PIPE_DIRECTORY"), "<unset>");
  EXPECT_FALSE(whole.ranks[0].share);
}

TEST(PlannerTest, MissingNvlinkIsNotedOncePerTopology) {
  JobPlan plan =
      planOnCluster(clusterOf(synthetic(spec([](SyntheticSpec& s) { s.nvswitch_links = 0; })), 4), ranks(32));
  ASSERT_EQ(plan.notes.size(), 1u) << planTable(plan);
  EXPECT_TRUE(
      plan.notes[0].starts_with("GPUs 0-7 are H100 SXM5, which have NVLink, but synthetic records no "
                                "NVLink"))
      << plan.notes[0];
  EXPECT_NE(planTable(plan).find("notes:\n  - GPUs 0-7 are H100 SXM5"), std::string::npos) << planTable(plan);
  EXPECT_TRUE(planOnCluster(clusterOf(synthetic({}), 4), ranks(32)).notes.empty())
      << "with NVSwitch links: no note";
}

struct Refusal {
  const char* name;
  PlanRequest request;
  const char* message;
};

class PlannerRefuses : public ::testing::TestWithParam<Refusal> {};

TEST_P(PlannerRefuses, BeforeAnythingStarts) {
  Cluster c = clusterOf(synthetic({}), 2);
  try {
    planOnCluster(c, GetParam().request);
    FAIL() << "planned " << GetParam().name;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

void PrintTo(const Refusal& r, std::ostream* os) {
  *os << r.name << ": \"" << r.message << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlannerRefuses,
    ::testing::Values(Refusal{"TooManyRanks", ranks(17), "-n 17: test-cluster.toml has 16 GPUs on 2 nodes"},
                      Refusal{"ZeroRanks", ranks(0), "at least one rank"},
                      Refusal{"GpusPerNode", with(ranks(8), [](PlanRequest& r) { r.gpus_per_node = 9; }),
                              "--gpus-per-node 9: node n1 has 8 NVIDIA GPUs"},
                      Refusal{"MissingFabric",
                              with(ranks(8), [](PlanRequest& r) { r.fabric = topo::Fabric::kRoce; }),
                              "--fabric roce: node n1 has no usable RoCE port"}),
    [](const ::testing::TestParamInfo<Refusal>& param) { return std::string(param.param.name); });

TEST(PlannerTest, RandomMachinesKeepTheInvariants) {
  std::mt19937 rng(20261129);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int iter = 0; iter < 300; ++iter) {
    SyntheticSpec s;
    s.numa = pick(1, 4);
    s.cores_per_numa = pick(1, 12);
    s.threads = pick(1, 2);
    s.switches = pick(0, 8);
    s.gpus = pick(1, 16);
    s.nics = s.switches == 0 ? 0 : pick(0, 12);
    for (int n = 0; n < s.nics; ++n) {
      if (pick(0, 5) == 0) s.down_nics.insert(n);
    }
    s.nvswitch_links = pick(0, 1) * 18;
    SCOPED_TRACE("iteration " + std::to_string(iter) + ": numa " + std::to_string(s.numa) + " cores " +
                 std::to_string(s.cores_per_numa) + "x" + std::to_string(s.threads) + " switches " +
                 std::to_string(s.switches) + " gpus " + std::to_string(s.gpus) + " nics " +
                 std::to_string(s.nics) + " down " + std::to_string(s.down_nics.size()));
    topo::NodeTopology t = synthetic(s);
    PlanRequest req = ranks(pick(1, s.gpus * 2));
    if (s.nics == 0 || static_cast<int>(s.down_nics.size()) == s.nics) req.fabric = topo::Fabric::kTcp;
    JobPlan plan = planOnCluster(clusterOf(t, 2), req);
    checkInvariants(plan);
    // Every rank's NIC is at its GPU's best distance, or it says why not.
    for (const RankPlan& r : plan.ranks) {
      if (r.nics.empty()) continue;
      int best = 99;
      for (size_t n = 0; n < t.nics.size(); ++n) {
        if (t.nics[n].ports[0].up())
          best = std::min(best, static_cast<int>(t.gpuToNic(r.gpu, static_cast<int>(n)).type));
      }
      if (best < static_cast<int>(topo::PathType::kSYS)) {
        EXPECT_EQ(static_cast<int>(r.gpu_nic_path.type), best) << "rank " << r.rank;
      }
    }
    // NICs at the same best distance carry loads that differ by at most one.
    std::map<std::string, std::map<std::string, int>> load;  // node -> nic -> GPUs
    for (const RankPlan& r : plan.ranks) {
      for (const NicChoice& n : r.nics) ++load[plan.nodeOf(r).name][n.name];
    }
    for (const RankPlan& r : plan.ranks) {
      if (r.nics.size() != 1 || r.gpu_nic_path.type == topo::PathType::kSYS) continue;
      for (size_t n = 0; n < t.nics.size(); ++n) {
        if (!t.nics[n].ports[0].up() || t.gpuToNic(r.gpu, int(n)).type != r.gpu_nic_path.type) continue;
        auto& l = load[plan.nodeOf(r).name];
        EXPECT_LE(l[r.nics[0].name], l[t.nics[n].name] + 1)
            << "rank " << r.rank << " " << r.nics[0].name << " vs " << t.nics[n].name << "\n"
            << planTable(plan);
      }
    }
  }
}

// ---- the real fixtures ----

Cluster fixtureCluster(const std::filesystem::path& file, int nodes) {
  Cluster c = topo::singleNodeCluster(file);
  topo::ClusterNode proto = c.nodes[0];
  c.nodes.clear();
  for (int i = 0; i < nodes; ++i) {
    proto.name = "node" + std::to_string(i);
    c.nodes.push_back(proto);
  }
  return c;
}

TEST(PlannerFixtures, JurecaEachGpuGetsTheNicOnItsSwitch) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  JobPlan plan = planOnCluster(fixtureCluster(dir / "hwloc-xml/psmgmt_topo.jrc0323.xml", 2), ranks(8));
  checkInvariants(plan);
  std::map<std::string, std::string> want = {{"0000:03:00.0", "mlx5_0"},
                                             {"0000:44:00.0", "mlx5_1"},
                                             {"0000:84:00.0", "mlx5_2"},
                                             {"0000:c4:00.0", "mlx5_3"}};
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(nicNames(r), want[r.gpu_pci.str()]) << r.gpu_pci.str();
    EXPECT_EQ(r.gpu_nic_path.str(), "PIX");
    EXPECT_TRUE(r.gdr);
    EXPECT_EQ(r.cpuset.size(), 32u) << "a whole NUMA node of 16 cores x 2 threads";
  }
}

TEST(PlannerFixtures, AzureNdv4OneNicPerGpuOnItsSwitch) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  JobPlan plan = planOnCluster(fixtureCluster(dir / "nccl-topo/azure_ndv4-topo.xml", 2), ranks(16));
  checkInvariants(plan);
  std::map<std::string, int> load;
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(r.gpu_nic_path.str(), "PIX");
    if (r.node_index == 0) ++load[nicNames(r)];
  }
  EXPECT_EQ(load.size(), 8u);
}

TEST(PlannerFixtures, AwsEfaGetsNoVerbsVariables) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  JobPlan plan = planOnCluster(fixtureCluster(dir / "nccl-topo/aws-ofi-nccl_p4d-24xl-topo.xml", 1), ranks(8));
  checkInvariants(plan);
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(r.gpu_nic_path.str(), "PIX");
    EXPECT_EQ(env(r, "NCCL_IB_HCA"), "<unset>");
    EXPECT_EQ(env(r, "UCX_NET_DEVICES"), "<unset>");
    ASSERT_EQ(r.notes.size(), 1u);
    EXPECT_NE(r.notes[0].find("AWS EFA (vendor 0x1d0f), neither InfiniBand nor RoCE: NCCL reaches them only "
                              "through the aws-ofi-nccl net plugin"),
              std::string::npos)
        << r.notes[0];
  }
}

// What a plan says about GPUDirect RDMA, over the fixtures: on or off only where NCCL's IB
// transport carries the rank (by path); n/a over sockets, which never use it; "plugin" over EFA,
// where the aws-ofi-nccl plugin decides. And the NVLink a file lacks for SXM GPUs, in the notes.
struct Truth {
  const char* file;
  int ranks;
  std::optional<topo::Fabric> fabric;  // asked for; nullopt: auto
  topo::Fabric planned;
  NetTransport transport;
  const char* gdr_cell;  // the table's GDR column for every rank
  bool nvlink_note;      // "GPUs ... which have NVLink, but FILE records no NVLink" in the notes
};

class PlanTruth : public ::testing::TestWithParam<Truth> {};

TEST_P(PlanTruth, GdrAndNvlinkAsTheyAre) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  const Truth& t = GetParam();
  PlanRequest req = ranks(t.ranks);
  req.fabric = t.fabric;
  JobPlan plan = planOnCluster(fixtureCluster(dir / t.file, 1), req);
  checkInvariants(plan);
  EXPECT_EQ(plan.fabric, t.planned);
  nlohmann::json doc = nlohmann::json::parse(planToJson(plan).dump());
  for (const RankPlan& r : plan.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank) + ": " + r.gdr_reason);
    EXPECT_EQ(r.transport, t.transport);
    EXPECT_EQ(r.gdr, std::string(t.gdr_cell) == "on");
    const nlohmann::json& rj = doc["ranks"][static_cast<size_t>(r.rank)];
    EXPECT_EQ(rj["transport"], toString(t.transport));
    if (t.transport == NetTransport::kOfiPlugin) {
      EXPECT_TRUE(rj["gdr"].is_null()) << "the plugin decides: not poolrun's to claim";
      EXPECT_TRUE(r.gdr_reason.starts_with("plugin: ")) << r.gdr_reason;
    } else {
      EXPECT_EQ(rj["gdr"], r.gdr);
    }
    if (t.transport != NetTransport::kIbVerbs) {
      EXPECT_EQ(env(r, "NCCL_NET_GDR_LEVEL"), "<unset>");
      EXPECT_EQ(env(r, "NCCL_IB_HCA"), "<unset>");
    }
    if (t.transport == NetTransport::kSocket) {
      EXPECT_TRUE(
          r.gdr_reason.starts_with("n/a: fabric tcp: NCCL's socket transport never uses GPUDirect RDMA"));
    }
  }
  // The table's GDR column, row by row.
  std::istringstream table(planTable(plan));
  std::string line;
  std::getline(table, line);  // fabric ...
  std::getline(table, line);  // header
  EXPECT_NE(line.find("GDR"), std::string::npos) << line;
  for (size_t i = 0; i < plan.ranks.size() && std::getline(table, line); ++i) {
    std::istringstream row(line);
    std::vector<std::string> cells{std::istream_iterator<std::string>(row), {}};
    ASSERT_EQ(cells.size(), 10u) << line;
    EXPECT_EQ(cells[7], t.gdr_cell) << line;
  }
  size_t nvlinkNotes = std::count_if(plan.notes.begin(), plan.notes.end(), [](const std::string& n) {
    return n.find("which have NVLink, but") != std::string::npos;
  });
  EXPECT_EQ(nvlinkNotes, t.nvlink_note ? 1u : 0u) << planTable(plan);
  EXPECT_EQ(doc["notes"].size(), plan.notes.size());
}

void PrintTo(const Truth& t, std::ostream* os) {
  *os << t.file << ", " << t.ranks << " ranks, --fabric " << (t.fabric ? topo::toString(*t.fabric) : "auto")
      << ": " << topo::toString(t.planned) << ", " << toString(t.transport) << ", GDR " << t.gdr_cell;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, PlanTruth,
    ::testing::Values(Truth{"nccl-topo/aws-ofi-nccl_p4d-24xl-topo.xml", 8, std::nullopt, topo::Fabric::kTcp,
                            NetTransport::kOfiPlugin, "plugin", true},
                      Truth{"nccl-topo/aws-ofi-nccl_p4d-24xl-topo.xml", 2, topo::Fabric::kTcp,
                            topo::Fabric::kTcp, NetTransport::kOfiPlugin, "plugin", true},
                      Truth{"hwloc-xml/mpibind_g4dnmetal.xml", 8, std::nullopt, topo::Fabric::kTcp,
                            NetTransport::kOfiPlugin, "plugin", false},
                      Truth{"hwloc-xml/psmgmt_topo.jrc0323.xml", 4, std::nullopt, topo::Fabric::kIb,
                            NetTransport::kIbVerbs, "on", true},
                      Truth{"hwloc-xml/psmgmt_topo.jrc0323.xml", 4, topo::Fabric::kTcp, topo::Fabric::kTcp,
                            NetTransport::kSocket, "n/a", true},
                      Truth{"nccl-topo/simai_topo_8A100_4CX6.xml", 8, std::nullopt, topo::Fabric::kRoce,
                            NetTransport::kIbVerbs, "on", false},
                      // Its RoCE bonds have no netdev: no NIC for sockets.
                      Truth{"nccl-topo/simai_topo_8A100_4CX6.xml", 8, topo::Fabric::kTcp, topo::Fabric::kTcp,
                            NetTransport::kNone, "n/a", false},
                      Truth{"hwloc-xml/psmgmt_topo.jwc09n003.xml", 4, std::nullopt, topo::Fabric::kIb,
                            NetTransport::kIbVerbs, "on", true}),
    [](const ::testing::TestParamInfo<Truth>& param) {
      std::string name = std::filesystem::path(param.param.file).stem().string() + "_" +
                         (param.param.fabric ? toString(*param.param.fabric) : "auto");
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(PlannerFixtures, AmdGpusTakeNoRank) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  // Only AMD GPUs: nothing to plan on, and the error says why.
  try {
    planOnCluster(fixtureCluster(dir / "hwloc-xml/mpibind_epyc-corona.xml", 1), ranks(4));
    FAIL() << "planned CUDA ranks on AMD GPUs";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_NE(
        std::string(e.what()).find(
            "has 0 NVIDIA GPUs on 0 nodes (and GPUs that take no rank, not being NVIDIA's: 4 AMD; poolrun "
            "plans CUDA/NCCL ranks on NVIDIA GPUs only); give nodes with NVIDIA GPUs"),
        std::string::npos)
        << e.what();
  }
  // Three NVIDIA GPUs and an AMD one: the plan uses the three and says why not the fourth.
  JobPlan plan =
      planOnCluster(fixtureCluster(dir / "hwloc-xml/hwloc_32em64t-2n8c2t-pci-normalio.v2.xml", 1), ranks(3));
  for (const RankPlan& r : plan.ranks) EXPECT_NE(r.gpu, 3);
  EXPECT_NE(
      std::find(
          plan.notes.begin(), plan.notes.end(),
          "node0: GPU3 (AMD GPU 1002:6798) is not an NVIDIA GPU: no CUDA device, no rank planned on it"),
      plan.notes.end())
      << planTable(plan);
}

TEST(PlannerFixtures, XeWithDownPortsAndALonelyGpu) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  JobPlan plan = planOnCluster(fixtureCluster(dir / "hwloc-xml/flux-core_ipa20.xml", 1), ranks(4));
  checkInvariants(plan);
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(nicNames(r), "mlx5_0") << "the only port that is up";
    if (r.gpu_pci.str() == "0000:cb:00.0") {
      ASSERT_FALSE(r.notes.empty());
      EXPECT_NE(r.notes[0].find("no NIC near"), std::string::npos);
    }
  }
}

TEST(PlannerFixtures, RoceBondsBehindGpuSwitches) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  Cluster c = fixtureCluster(dir / "nccl-topo/simai_topo_8A100_4CX6.xml", 2);
  JobPlan plan = planOnCluster(c, ranks(16));
  EXPECT_EQ(plan.fabric, topo::Fabric::kRoce);
  checkInvariants(plan);
  std::map<std::string, int> load;
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(r.gpu_nic_path.str(), "PXB");
    EXPECT_NE(nicNames(r), "mlx5_bond_0") << "the frontend NIC";
    if (r.node_index == 0) ++load[nicNames(r)];
  }
  for (const auto& [nic, n] : load) EXPECT_EQ(n, 2) << nic;
}

TEST(PlannerFixtures, Dgx2SixteenGpusOnFourCpus) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  JobPlan plan = planOnCluster(fixtureCluster(dir / "hwloc-xml/hwloc_nvidiaDGX2.v2.xml", 1), ranks(16));
  checkInvariants(plan);
  for (const RankPlan& r : plan.ranks) EXPECT_TRUE(r.shares_cpus);
  EXPECT_TRUE(plan.hwthread_slots);
}

TEST(PlannerFixtures, ClusterFilesThatShip) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  for (const char* file :
       {"clusters/fixtures-ib.toml", "clusters/fixtures-mixed.toml", "clusters/hgx-h100.toml"}) {
    Cluster c = topo::readClusterFile(poolrun::test::sourceDir() / file);
    int gpus = 0;
    for (const topo::ClusterNode& n : c.nodes) gpus += static_cast<int>(n.topology->gpus.size());
    ASSERT_GT(gpus, 0) << file;
    PlanRequest req = ranks(std::min(gpus, 16));
    req.fabric = topo::Fabric::kTcp;
    checkInvariants(planOnCluster(c, req));
  }
}

// ---- outputs ----

TEST(PlanOutputTest, JobDirectoryHasPlanRankfileAndTopologies) {
  JobPlan plan = planOnCluster(clusterOf(synthetic({}), 2), ranks(16));
  poolrun::test::TempDir tmp;
  JobDirectory(tmp.path() / "job", Durability::kSameBoot).writePlan(plan);
  std::ifstream rf(tmp.path() / "job/rankfile");
  std::string line;
  std::getline(rf, line);
  EXPECT_EQ(line, "rank 0=n1 slot=0-3");
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(tmp.path() / "job/plan.json"));
  EXPECT_EQ(doc["schema"], "poolrun.plan/1");
  ASSERT_EQ(doc["ranks"].size(), 16u);
  const nlohmann::json& r = doc["ranks"][9];
  EXPECT_EQ(r["rank"], 9);
  EXPECT_EQ(r["node"], "n2");
  EXPECT_EQ(r["local_rank"], 1);
  EXPECT_EQ(r["gpu"]["index"], 1);
  EXPECT_EQ(r["gpu"]["pci"], plan.ranks[9].gpu_pci.str());
  EXPECT_EQ(r["nics"][0], "mlx5_1");
  EXPECT_EQ(r["gpu_nic_path"], "PIX");
  EXPECT_EQ(r["gdr"], true);
  EXPECT_EQ(r["numa"], 0);
  EXPECT_EQ(r["cpuset"], "4-7,36-39");
  EXPECT_EQ(r["env"]["NCCL_IB_HCA"], "=mlx5_1:1");
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "job/topo-n1.xml"));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "job/topo-n2.xml"));
}

TEST(PlanOutputTest, TableHasOneRowPerRankAndTheNotes) {
  JobPlan plan = planOnCluster(clusterOf(synthetic(spec([](SyntheticSpec& s) { s.nics = 1; })), 1), ranks(8));
  std::string table = planTable(plan);
  EXPECT_NE(table.find("RANK  NODE  LOCAL  GPU  BUS ID"), std::string::npos) << table;
  EXPECT_NE(table.find("notes:"), std::string::npos);
  EXPECT_NE(table.find("no NIC near GPU4"), std::string::npos);
}

}  // namespace
}  // namespace poolrun::launcher
