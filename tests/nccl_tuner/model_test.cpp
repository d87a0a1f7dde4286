// The cost model against published measurements (../shared/ref/perf-anchors.md), NCCL's validity
// rules, the fabric terms, calibration and the decision table.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "poolrun/tuner/decision.hpp"
#include "poolrun/tuner/explain.hpp"
#include "poolrun/tuner/model.hpp"

#include "tuner_data.hpp"

namespace {

using namespace poolrun::tuner;

using poolrun::test::kTunerData;

TunerConfig a100Node() {
  return loadConfig(kTunerData + "/a100-8gpu-1node.json");
}

// The chosen cell's prediction at `bytes` on 8 ranks of the 8x A100 node, as nccl-tests busbw.
double busbw(const TunerConfig& c, CommShape shape, std::uint64_t bytes, double* timeUs = nullptr) {
  DecisionTable t = DecisionTable::build(c, shape);
  const Candidate& best = t.candidates(Coll::kAllReduce, bytes)[0];
  if (timeUs != nullptr) *timeUs = best.time_us;
  return static_cast<double>(bytes) * busBandwidthFactor(Coll::kAllReduce, shape.nranks) /
         (best.time_us * 1e3);
}

// ---- anchors ---------------------------------------------------------------------------------------

// 1 GiB: three published runs on 8x A100 SXM NVSwitch nodes, 228.10 (Azure ND A100 v4, NCCL 2.18.5),
// 229.04 (ml-engineering) and 231.45 GB/s (mscclpp NDmv4, NCCL 2.17.1), agree within 1.5%. At this size
// the time is bandwidth only, which the model takes from the NVLink rate, so it must land close:
// within 10% of their mean (the aim is 15%).
TEST(AnchorTest, A100NodeAllreduceAt1GiB) {
  const double predicted = busbw(a100Node(), {8, 1}, std::uint64_t{1} << 30);
  const double published = (228.10 + 229.04 + 231.45) / 3;
  RecordProperty("predicted_busbw_1GiB", std::to_string(predicted));
  EXPECT_NEAR(predicted, published, 0.10 * published);
}

// 1 MiB: the two published series disagree by 2x (36.22 GB/s Azure, 18.00 GB/s ml-engineering): this
// is where NCCL switches protocols and both runs show fixed costs an alpha-beta model does not carry
// (Azure's series never drops below ~42 us). The prediction must fall inside the published range
// widened by 20% on each side: [0.8 x 18.00, 1.2 x 36.22].
TEST(AnchorTest, A100NodeAllreduceAt1MiB) {
  const double predicted = busbw(a100Node(), {8, 1}, std::uint64_t{1} << 20);
  RecordProperty("predicted_busbw_1MiB", std::to_string(predicted));
  EXPECT_GE(predicted, 0.8 * 18.00);
  EXPECT_LE(predicted, 1.2 * 36.22);
}

// Small messages: mscclpp measured NCCL's 1 KiB allreduce on 8x A100 NDmv4 at 16.96 us. The model's
// latencies are NCCL's own per-hop constants, which NCCL's authors fit to their measurements; allow
// 20% for the NCCL versions in between (2.17 measured, 2.28 constants).
TEST(AnchorTest, A100NodeSmallMessageLatency) {
  double timeUs = 0;
  busbw(a100Node(), {8, 1}, 1024, &timeUs);
  RecordProperty("predicted_latency_1KiB_us", std::to_string(timeUs));
  EXPECT_NEAR(timeUs, 16.96, 0.20 * 16.96);
}

// Multi-node: DGX A100 with 8x HDR 200G per node reached 192 GB/s allreduce busbw (NVIDIA/nccl#812):
// the ring is bound by the node's NIC rate, 8 x 25 GB/s. Within 10%.
TEST(AnchorTest, DgxA100OverHdrInfiniBand) {
  TunerConfig c = a100Node();
  c.nodes = 4;
  c.fabric = Fabric::kIb;
  const double predicted = busbw(c, {32, 4}, std::uint64_t{8} << 30);
  RecordProperty("predicted_busbw_4x8_8GiB", std::to_string(predicted));
  EXPECT_NEAR(predicted, 192.0, 0.10 * 192.0);
}

// H100: Simple ring busbw 365-370 GB/s and NVLS 475-482 GB/s on 8x H100 (perf-anchors section 3).
TEST(AnchorTest, H100NodeRingAndNvls) {
  TunerConfig c = loadConfig(kTunerData + "/h100-ib-4node.json");
  CostModel m(c, {8, 1});
  const std::uint64_t bytes = std::uint64_t{8} << 30;
  auto bus = [&](Cell cell) {
    return static_cast<double>(bytes) * 1.75 / (m.predictUs(Coll::kAllReduce, cell, bytes) * 1e3);
  };
  EXPECT_NEAR(bus({Algo::kRing, Proto::kSimple}), 367.5, 0.10 * 367.5);
  EXPECT_NEAR(bus({Algo::kNvls, Proto::kSimple}), 478.5, 0.10 * 478.5);
  EXPECT_EQ(DecisionTable::build(c, {8, 1}).candidates(Coll::kAllReduce, bytes)[0].cell,
            (Cell{Algo::kNvls, Proto::kSimple}));
}

// NCCL scales a tree allreduce's bandwidth per power of two of the size (its treeCorrectionFactor):
// LL128 0.6 at 1 MiB, 1.0 at 256 MiB. Without the fill a tree's time grows by bytes / bandwidth, so
// it grows 1/0.6 as fast within the 1 MiB bucket as within the 256 MiB one. A tree of one rank a node
// has no chain through a node and takes no correction: 2x1 H100 over RoCE ran Tree/Simple at 41.5
// GB/s busbw at 32 MiB, past even the uncorrected model (nccl_tuner/data/h100-1x2-roce-4nic-tree.json).
TEST(ModelTest, TreeTakesNcclsSizeCorrectionWhereItRunsThroughANode) {
  const TunerConfig c = loadConfig(kTunerData + "/h100-ib-4node.json");
  const Cell tree{Algo::kTree, Proto::kLL128};
  const std::uint64_t mib = 1 << 20;
  auto growth = [&](CommShape shape, std::uint64_t bytes) {
    const CostModel m(c, shape, ModelFit{});
    return (m.predictUs(Coll::kAllReduce, tree, bytes / 2 * 3) - m.predictUs(Coll::kAllReduce, tree, bytes)) /
           static_cast<double>(bytes / 2);
  };
  EXPECT_NEAR(growth({16, 2}, mib) / growth({16, 2}, 256 * mib), 1 / 0.6, 1e-9);
  EXPECT_NEAR(growth({16, 2}, 64 * mib) / growth({16, 2}, 256 * mib), 1 / 0.9, 1e-9);
  EXPECT_NEAR(growth({2, 2}, mib) / growth({2, 2}, 256 * mib), 1.0, 1e-9);
  // Rings take none.
  const CostModel ring(c, {16, 2}, ModelFit{});
  const Cell ringLl128{Algo::kRing, Proto::kLL128};
  EXPECT_NEAR((ring.predictUs(Coll::kAllReduce, ringLl128, 3 * mib / 2) -
               ring.predictUs(Coll::kAllReduce, ringLl128, mib)) *
                  256,
              ring.predictUs(Coll::kAllReduce, ringLl128, 384 * mib) -
                  ring.predictUs(Coll::kAllReduce, ringLl128, 256 * mib),
              1e-6);
}

// ---- fabrics -----------------------------------------------------------------------------------------

TEST(FabricTest, RoceAndTcpPayMoreLatencyPerNetworkHopThanIb) {
  TunerConfig ib = loadConfig(kTunerData + "/h100-ib-4node.json");
  TunerConfig roce = loadConfig(kTunerData + "/h100-roce-4node.json");
  TunerConfig tcp = ib;
  tcp.fabric = Fabric::kTcp;
  tcp.net.gdr = false;
  for (Cell cell :
       {Cell{Algo::kRing, Proto::kLL}, Cell{Algo::kTree, Proto::kLL}, Cell{Algo::kRing, Proto::kSimple}}) {
    const double i = CostModel(ib, {32, 4}).predictUs(Coll::kAllReduce, cell, 8);
    const double r = CostModel(roce, {32, 4}).predictUs(Coll::kAllReduce, cell, 8);
    const double t = CostModel(tcp, {32, 4}).predictUs(Coll::kAllReduce, cell, 8);
    EXPECT_GT(r, i) << algoName(cell.algo);
    EXPECT_GT(t - i, 10 * (r - i)) << algoName(cell.algo);  // 25 us against 1.4 us per hop
    // One node: no network hop, no difference.
    EXPECT_DOUBLE_EQ(CostModel(ib, {8, 1}).predictUs(Coll::kAllReduce, cell, 8),
                     CostModel(roce, {8, 1}).predictUs(Coll::kAllReduce, cell, 8));
  }
}

TEST(FabricTest, RoceLeavesLl128EarlierAtLargeInterNodeSizes) {
  TunerConfig ib = loadConfig(kTunerData + "/h100-ib-4node.json");
  TunerConfig roce = loadConfig(kTunerData + "/h100-roce-4node.json");
  // With NVLS on, NVLSTree (Simple only) takes over from Tree/LL128 at the same size on both fabrics;
  // the protocol crossover shows where NVLS is off.
  ib.gpu.nvls = roce.gpu.nvls = false;
  DecisionTable ti = DecisionTable::build(ib, {32, 4}), tr = DecisionTable::build(roce, {32, 4});
  int ibOnly = 0;
  for (int b = 20; b <= 34; ++b) {
    const std::uint64_t bytes = std::uint64_t{1} << b;
    const bool ll128Ib = ti.candidates(Coll::kAllReduce, bytes)[0].cell.proto == Proto::kLL128;
    const bool ll128Roce = tr.candidates(Coll::kAllReduce, bytes)[0].cell.proto == Proto::kLL128;
    EXPECT_FALSE(ll128Roce && !ll128Ib) << bytes;
    ibOnly += ll128Ib && !ll128Roce ? 1 : 0;
  }
  EXPECT_GE(ibOnly, 1);
  // Without GPUDirect RDMA across nodes NCCL turns LL128 off.
  TunerConfig noGdr = ib;
  noGdr.net.gdr = false;
  EXPECT_FALSE(CostModel(noGdr, {32, 4}).valid(Coll::kAllReduce, {Algo::kRing, Proto::kLL128}));
  EXPECT_TRUE(CostModel(noGdr, {8, 1}).valid(Coll::kAllReduce, {Algo::kRing, Proto::kLL128}));
}

// ---- NCCL's validity rules ------------------------------------------------------------------------

struct ValidityCase {
  const char* what;
  Coll coll;
  Cell cell;
  CommShape shape;
  bool nvls, sharp, nvlink;
  bool expected;
};

class ValidityTest : public ::testing::TestWithParam<ValidityCase> {};

TEST_P(ValidityTest, FollowsNccl) {
  const ValidityCase& v = GetParam();
  TunerConfig c = loadConfig(kTunerData + "/h100-ib-4node.json");
  c.gpu.nvls = v.nvls;
  c.net.sharp = v.sharp;
  if (!v.nvlink) {
    c.gpu.nvlink_gbyte_s = 0;
    c.gpu.nvswitch = false;
    c.gpu.nvls = false;
  }
  EXPECT_EQ(CostModel(c, v.shape).valid(v.coll, v.cell), v.expected) << v.what;
}

constexpr Cell kRingLL{Algo::kRing, Proto::kLL}, kRingLL128{Algo::kRing, Proto::kLL128},
    kRingSimple{Algo::kRing, Proto::kSimple}, kTreeLL{Algo::kTree, Proto::kLL},
    kNvls{Algo::kNvls, Proto::kSimple}, kNvlsLL{Algo::kNvls, Proto::kLL},
    kNvlsTree{Algo::kNvlsTree, Proto::kSimple}, kDirect{Algo::kCollNetDirect, Proto::kSimple},
    kChain{Algo::kCollNetChain, Proto::kSimple}, kPat{Algo::kPat, Proto::kSimple};

void PrintTo(const ValidityCase& v, std::ostream* os) {
  *os << v.what << " (" << v.shape.nranks << " ranks, " << v.shape.nnodes
      << " nodes): " << (v.expected ? "valid" : "invalid");
}

INSTANTIATE_TEST_SUITE_P(
    Model, ValidityTest,
    ::testing::Values(
        ValidityCase{"ring everywhere", Coll::kBroadcast, kRingLL, {16, 2}, true, true, true, true},
        ValidityCase{"broadcast is ring only", Coll::kBroadcast, kTreeLL, {16, 2}, true, true, true, false},
        ValidityCase{"reduce is ring only", Coll::kReduce, kNvls, {8, 1}, true, true, true, false},
        ValidityCase{"tree for allreduce", Coll::kAllReduce, kTreeLL, {16, 2}, false, false, true, true},
        ValidityCase{"no tree for allgather", Coll::kAllGather, kTreeLL, {16, 2}, false, false, true, false},
        ValidityCase{"NVLS on one node", Coll::kAllReduce, kNvls, {8, 1}, true, false, true, true},
        ValidityCase{"NVLS needs nvls", Coll::kAllReduce, kNvls, {8, 1}, false, false, true, false},
        ValidityCase{"NVLS is Simple only", Coll::kAllReduce, kNvlsLL, {8, 1}, true, false, true, false},
        ValidityCase{
            "NVLS across nodes needs SHARP", Coll::kAllReduce, kNvls, {16, 2}, true, false, true, false},
        ValidityCase{
            "NVLS across nodes with SHARP", Coll::kAllReduce, kNvls, {16, 2}, true, true, true, true},
        ValidityCase{"NVLSTree needs nodes", Coll::kAllReduce, kNvlsTree, {8, 1}, true, false, true, false},
        ValidityCase{"NVLSTree across nodes", Coll::kAllReduce, kNvlsTree, {16, 2}, true, false, true, true},
        ValidityCase{"CollNet needs SHARP", Coll::kAllReduce, kDirect, {16, 2}, false, false, true, false},
        ValidityCase{"CollNetDirect with SHARP", Coll::kAllReduce, kDirect, {16, 2}, false, true, true, true},
        ValidityCase{"CollNetChain with SHARP", Coll::kAllReduce, kChain, {16, 2}, false, true, true, true},
        ValidityCase{"CollNet not on one node", Coll::kAllReduce, kChain, {8, 1}, false, true, true, false},
        ValidityCase{
            "CollNetDirect needs NVSwitch", Coll::kAllReduce, kDirect, {16, 2}, false, true, false, false},
        ValidityCase{"PAT with one GPU per node", Coll::kAllGather, kPat, {4, 4}, false, false, true, true},
        ValidityCase{"PAT not with 8 per node", Coll::kAllGather, kPat, {32, 4}, false, false, true, false},
        ValidityCase{"PAT not for allreduce", Coll::kAllReduce, kPat, {4, 4}, false, false, true, false},
        ValidityCase{"LL128 needs NVLink", Coll::kAllReduce, kRingLL128, {8, 1}, false, false, false, false},
        ValidityCase{"LL128 over NVLink", Coll::kAllReduce, kRingLL128, {8, 1}, false, false, true, true},
        ValidityCase{
            "one rank: Ring/Simple only", Coll::kAllReduce, kRingLL, {1, 1}, true, true, true, false},
        ValidityCase{"one rank: Ring/Simple", Coll::kAllReduce, kRingSimple, {1, 1}, true, true, true, true}),
    [](const auto& p) {
      std::string name = p.param.what;
      for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return name;
    });

// ---- calibration -------------------------------------------------------------------------------------

TEST(CalibrationTest, MeasuredFiguresWinWhereTheyExist) {
  TunerConfig c = a100Node();
  // A cell the model alone does not choose at 2 MiB (it runs Ring/LL128 there), measured fast.
  const Cell treeLL128{Algo::kTree, Proto::kLL128};
  const std::uint64_t mib = 1 << 20;
  c.calibration.push_back({Coll::kAllReduce, 8, 1, Algo::kTree, Proto::kLL128, mib, 12.0, "t"});
  c.calibration.push_back({Coll::kAllReduce, 8, 1, Algo::kTree, Proto::kLL128, 4 * mib, 48.0, "t"});
  c.calibration.push_back({Coll::kAllReduce, 8, 1, std::nullopt, std::nullopt, 2 * mib, 1.0, "unforced"});
  c.calibration.push_back({Coll::kAllReduce, 16, 2, Algo::kRing, Proto::kLL, 2 * mib, 1.0, "other shape"});
  CostModel m(c, {8, 1});
  EXPECT_EQ(m.estimate(Coll::kAllReduce, treeLL128, mib).time_us, 12.0);
  EXPECT_TRUE(m.estimate(Coll::kAllReduce, treeLL128, mib).measured);
  // Between two measured sizes: log-log interpolation (time doubles per doubling here: 24 us).
  EXPECT_NEAR(m.estimate(Coll::kAllReduce, treeLL128, 2 * mib).time_us, 24.0, 1e-9);
  // Outside the measured range, and for other cells: the model.
  EXPECT_FALSE(m.estimate(Coll::kAllReduce, treeLL128, 8 * mib).measured);
  EXPECT_FALSE(m.estimate(Coll::kAllReduce, {Algo::kRing, Proto::kLL}, 2 * mib).measured);
  DecisionTable t = DecisionTable::build(c, {8, 1});
  EXPECT_EQ(t.candidates(Coll::kAllReduce, 2 * mib)[0].cell, treeLL128);
  EXPECT_TRUE(t.candidates(Coll::kAllReduce, 2 * mib)[0].measured);
  EXPECT_NE(DecisionTable::build(a100Node(), {8, 1}).candidates(Coll::kAllReduce, 2 * mib)[0].cell,
            treeLL128);
}

// ---- decision table ------------------------------------------------------------------------------------

TEST(DecisionTableTest, RankedByTimeWithNcclsTieOrder) {
  DecisionTable t = DecisionTable::build(loadConfig(kTunerData + "/h100-roce-4node.json"), {32, 4});
  for (int c = 0; c < kNumColls; ++c) {
    for (int b = 0; b < 64; ++b) {
      auto cands = t.candidates(static_cast<Coll>(c), std::uint64_t{1} << b);
      ASSERT_FALSE(cands.empty());
      for (size_t i = 1; i < cands.size(); ++i) {
        EXPECT_LE(cands[i - 1].time_us, cands[i].time_us);
        if (cands[i - 1].time_us == cands[i].time_us) {
          EXPECT_LT(static_cast<int>(cands[i - 1].cell.algo) * 3 + static_cast<int>(cands[i - 1].cell.proto),
                    static_cast<int>(cands[i].cell.algo) * 3 + static_cast<int>(cands[i].cell.proto));
        }
      }
    }
  }
}

TEST(DecisionTableTest, RuleBoundariesAreExact) {
  TunerConfig c = a100Node();
  Rule r;
  r.coll = Coll::kAllReduce;
  r.min_bytes = 1000;
  r.max_bytes = 5000;
  r.algo = Algo::kTree;
  r.proto = Proto::kSimple;
  r.channels = 3;
  c.rules.push_back(r);
  DecisionTable t = DecisionTable::build(c, {8, 1});
  float open[kNumAlgos * kNumProtos];
  std::fill(std::begin(open), std::end(open), 1.0f);
  for (std::uint64_t bytes : {999u, 1000u, 3000u, 4096u, 5000u, 5001u}) {
    Choice choice;
    ASSERT_TRUE(t.choose(Coll::kAllReduce, bytes, 1, 0, open, kNumAlgos, kNumProtos, &choice));
    const bool inRule = bytes >= 1000 && bytes <= 5000;
    EXPECT_EQ(choice.rule, inRule ? 0 : -1) << bytes;
    EXPECT_EQ(choice.channels, inRule ? 3 : 0) << bytes;
    if (inRule) {
      EXPECT_EQ(choice.cell, (Cell{Algo::kTree, Proto::kSimple}));
    }
  }
  Choice choice;
  EXPECT_TRUE(t.choose(Coll::kAllGather, 3000, 1, 0, open, kNumAlgos, kNumProtos, &choice));
  EXPECT_EQ(choice.rule, -1);
}

TEST(ExplainTest, RowsPerPowerOfTwoWithBusBandwidth) {
  ExplainOptions o;
  o.min_bytes = 1000;
  o.max_bytes = 1 << 20;
  Explanation e = explain(a100Node(), o);
  ASSERT_EQ(e.rows.size(), 11u);  // 1 KiB .. 1 MiB
  EXPECT_EQ(e.rows.front().bytes, 1024u);
  EXPECT_EQ(e.shape.nranks, 8);
  for (const ExplainRow& row : e.rows) {
    ASSERT_TRUE(row.choice);
    EXPECT_NEAR(row.busbw_gbyte_s, static_cast<double>(row.bytes) * 1.75 / (row.choice->time_us * 1e3), 1e-9);
  }
  auto doc = explainJson(a100Node(), e);
  EXPECT_EQ(doc["schema"], "poolrun.tuner-explain/1");
  EXPECT_EQ(doc["rows"][0]["candidates"][0]["algo"], doc["rows"][0]["algo"]);
  o.nnodes = 9;
  o.nranks = 4;
  EXPECT_THROW(explain(a100Node(), o), ConfigError);
}

TEST(ExplainTest, Bytes) {
  EXPECT_EQ(parseBytes("8", "x"), 8u);
  EXPECT_EQ(parseBytes("64K", "x"), 65536u);
  EXPECT_EQ(parseBytes("1MiB", "x"), 1u << 20);
  EXPECT_EQ(parseBytes("4G", "x"), std::uint64_t{4} << 30);
  EXPECT_THROW(parseBytes("12X", "--max-bytes"), ConfigError);
  EXPECT_THROW(parseBytes("", "--max-bytes"), ConfigError);
  EXPECT_THROW(parseBytes("99999999999T", "--max-bytes"), ConfigError);
  EXPECT_EQ(formatBytes(1536), "1536 B");
  EXPECT_EQ(formatBytes(std::uint64_t{1} << 30), "1 GiB");
}

// The table's rules for a size are those whose range holds it, first in the configuration's order
// first: checked against a scan of every rule, on random overlapping ranges.
TEST(DecisionTableTest, FirstRuleHoldingTheSizeWinsAsAScanOfEveryRuleFinds) {
  TunerConfig c;
  c.has_hardware = false;  // rules only: they alone decide
  std::mt19937_64 random(17);
  for (int i = 0; i < 400; ++i) {
    Rule r;
    r.coll = random() % 3 == 0 ? std::nullopt : std::optional<Coll>(static_cast<Coll>(random() % kNumColls));
    r.min_bytes = std::uint64_t{1} << (random() % 40);
    r.min_bytes += random() % r.min_bytes;
    r.max_bytes = random() % 5 == 0 ? std::numeric_limits<std::uint64_t>::max()
                                    : r.min_bytes + (std::uint64_t{1} << (random() % 36));
    r.algo = Algo::kRing;
    r.proto = Proto::kSimple;
    c.rules.push_back(r);
  }
  DecisionTable t = DecisionTable::build(c, {16, 2});
  float costs[kNumAlgos * kNumProtos];
  for (float& f : costs) f = 1.0f;
  for (int coll = 0; coll < kNumColls; ++coll) {
    for (int k = 0; k < 2000; ++k) {
      const std::uint64_t bytes = (std::uint64_t{1} << (random() % 42)) + random() % 4096;
      int expected = -1;
      for (size_t i = 0; i < c.rules.size() && expected < 0; ++i) {
        const Rule& r = c.rules[i];
        if ((!r.coll || static_cast<int>(*r.coll) == coll) && bytes >= r.min_bytes && bytes <= r.max_bytes) {
          expected = static_cast<int>(i);
        }
      }
      Choice choice;
      ASSERT_TRUE(t.choose(static_cast<Coll>(coll), bytes, 1, 0, costs, kNumAlgos, kNumProtos, &choice));
      EXPECT_EQ(choice.rule, expected) << "coll " << coll << ", " << bytes << " bytes";
    }
  }
}

TEST(DecisionTableTest, RulesOverlappingTooMuchAreRefusedNotGigabytes) {
  TunerConfig c;
  c.has_hardware = false;  // rules only: they alone decide
  for (int i = 0; i < 3000; ++i) {
    Rule r;
    r.min_bytes =
        static_cast<std::uint64_t>(i) * 64;  // every range runs to the end: each new start repeats all
    r.algo = Algo::kRing;
    r.proto = Proto::kSimple;
    c.rules.push_back(r);
  }
  try {
    DecisionTable::build(c, {16, 2});
    FAIL() << "built";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rules overlap at"), std::string::npos) << e.what();
  }
}

}  // namespace
