// The cost model validated on the published tables of nccl_tuner/data/: the fitted constants are the
// fit of all the tables, and every table is predicted by the model fitted on the others
// (leave-one-table-out). The report is printed; nccl_tuner/README.md quotes it.

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>

#include "poolrun/tuner/decision.hpp"
#include "poolrun/tuner/validate.hpp"

namespace {

using namespace poolrun::tuner;

const std::string kTables = POOLRUN_TUNER_TABLES;
constexpr std::uint64_t kFrom = std::uint64_t{64} << 10;

TEST(ValidationTest, TablesLoad) {
  const std::vector<Table> tables = loadTables(kTables);
  ASSERT_GE(tables.size(), 5u);
  for (const Table& t : tables) {
    const std::vector<Comparison> shapes = compareTable(t, defaultFit(), kFrom);
    ASSERT_FALSE(shapes.empty()) << t.name;
    for (const Comparison& c : shapes) EXPECT_FALSE(c.rows.empty()) << t.name;
  }
}

// The data file of the A3 Mega table holds what its nccl-tests output says: read through
// readComparisonTable both give the same 31 sizes and times (the faster of out-of-place and in-place).
TEST(ValidationTest, DataFileAndNcclTestsOutputAgree) {
  const std::string log =
      readConfigFile(std::string(POOLRUN_TUNER_TEST_DATA) + "/all_reduce_perf_2x8_h100_a3mega.log", "log",
                     std::size_t{64} << 20);
  const std::string file = kTables + "/h100-8x2-gcp-a3mega-tcpxo.json";
  const auto fromLog = readComparisonTable(log, "log", {});
  const auto fromFile = readComparisonTable(readConfigFile(file, "table"), file, {});
  ASSERT_EQ(fromLog.size(), 31u);
  ASSERT_EQ(fromFile.size(), fromLog.size());
  for (size_t i = 0; i < fromLog.size(); ++i) {
    EXPECT_EQ(fromLog[i].bytes, fromFile[i].bytes);
    EXPECT_DOUBLE_EQ(fromLog[i].time_us, fromFile[i].time_us) << fromLog[i].bytes;
    EXPECT_EQ(fromLog[i].nranks, 16);
    EXPECT_EQ(fromLog[i].nnodes, 2);
    EXPECT_EQ(fromLog[i].gpus_per_process, 1);  // "# nThread 1 nGpus 1"
    EXPECT_EQ(fromFile[i].gpus_per_process, 1);
  }
}

// A run that forced an algorithm is compared with the model's best cell of that algorithm, never
// with another algorithm's.
TEST(ValidationTest, ForcedFiguresAreComparedWithTheForcedAlgorithm) {
  const Table t = [] {
    for (Table& x : loadTables(kTables)) {
      if (x.name == "h100-1x2-roce-4nic-tree.json") return x;
    }
    return Table{};
  }();
  const std::vector<Comparison> shapes = compareTable(t, defaultFit(), kFrom);
  ASSERT_EQ(shapes.size(), 1u);
  const Comparison& c = shapes[0];
  ASSERT_EQ(c.rows.size(), 5u);
  for (const CompareRow& r : c.rows) {
    EXPECT_EQ(r.cell.algo, Algo::kTree) << r.bytes;
    EXPECT_EQ(r.forced_algo, Algo::kTree);
    EXPECT_FALSE(r.forced_proto.has_value());
  }
}

TEST(ValidationTest, DefaultFitIsTheFitOfAllTables) {
  const std::vector<Table> tables = loadTables(kTables);
  std::vector<const Table*> all;
  for (const Table& t : tables) all.push_back(&t);
  const ModelFit fit = fitTables(all, kFrom);
  std::cout << "fit of all tables: fill " << fit.fill_step_us << " us a step, half at " << fit.fill_half_bytes
            << " B, launch " << fit.launch_us << " us a GPU\n";
  EXPECT_EQ(fit.fill_step_us, defaultFit().fill_step_us);
  EXPECT_EQ(fit.fill_half_bytes, defaultFit().fill_half_bytes);
  EXPECT_EQ(fit.launch_us, defaultFit().launch_us);
}

double worst(const std::vector<Comparison>& shapes, std::uint64_t from) {
  double w = 0;
  for (const Comparison& c : shapes) {
    for (const CompareRow& r : c.rows) {
      if (r.bytes >= from) w = std::max(w, std::fabs(r.error()));
    }
  }
  return w;
}

// Each table predicted by the model fitted on the others. The bounds are what the model reaches
// today (nccl_tuner/README.md lists them with the reasons for the misses), a little rounded up: a
// change that makes any held-out table worse fails here (allreduce, and allgather and reducescatter
// where a table has them). The aim is 25% from 64 KiB and 10% from 256 MiB; the 8x A100 Azure
// table, the H100 slices and the 2 x 1 H100 Tree table reach the first, six of the eight the second.
// Every choice a table names (several algorithms or protocols measured at one size) is the model's too.
const std::vector<HeldOut>& heldOutTables() {
  static const std::vector<HeldOut> heldOut = leaveOneOut(loadTables(kTables), kFrom);
  return heldOut;
}

TEST(ValidationTest, LeaveOneTableOut) {
  const std::vector<HeldOut>& heldOut = heldOutTables();
  std::cout << validationReport(heldOut);
  struct Bound {
    double from64KiB, from1MiB, from256MiB;
  };
  const std::map<std::string, Bound> bounds = {
      {"a100-8x1-azure-nda100v4.json", {0.25, 0.07, 0.06}},
      {"a100-8x1-ml-engineering.json", {0.50, 0.50, 0.05}},
      {"b200-nx1-ml-engineering.json", {0.06, 0.06, 0.06}},
      {"h100-1x2-roce-4nic-tree.json", {0.17, 0.17, 0}},
      {"h100-8x2-gcp-a3mega-tcpxo.json", {0.54, 0.54, 0.52}},
      {"h100-nx1-nvswitch-slices.json", {0.24, 0.24, 0.12}},
      {"h20-8x2-ib-ndr.json", {0.48, 0.48, 0.40}},
      {"h200-nx1-ml-engineering.json", {0.60, 0.40, 0.04}},
  };
  ASSERT_EQ(heldOut.size(), bounds.size());
  int choices = 0;
  for (const HeldOut& h : heldOut) {
    ASSERT_TRUE(bounds.count(h.name)) << h.name << " is a new table: add its bounds";
    const Bound& b = bounds.at(h.name);
    EXPECT_LE(worst(h.comparisons, kFrom), b.from64KiB) << h.name;
    EXPECT_LE(worst(h.comparisons, std::uint64_t{1} << 20), b.from1MiB) << h.name;
    EXPECT_LE(worst(h.comparisons, std::uint64_t{256} << 20), b.from256MiB) << h.name;
    for (const Comparison& c : h.comparisons) {
      for (const ChoiceRow& ch : c.choices) {
        EXPECT_TRUE(ch.agrees()) << h.name << ": " << choiceText(ch);
        ++choices;
      }
    }
  }
  // 19 of the H100 slices (2, 4, 6 GPUs), 5 of the H200 node (5 to 8 GPUs), 3 of the B200 (6 to 8).
  EXPECT_EQ(choices, 27);
}

// The fill is what the one-node tables ask for: held out, each A100 table is predicted better with
// the fill fitted on the others than with none. (Not every table gains: the 2 x 1 H100 Tree table is
// predicted better without it; nccl_tuner/README.md says so.)
TEST(ValidationTest, FittedFillPredictsHeldOutTablesBetterThanNone) {
  const std::vector<Table> tables = loadTables(kTables);
  ModelFit none;
  none.fill_step_us = 0;
  for (const HeldOut& h : heldOutTables()) {
    if (!h.name.starts_with("a100-")) continue;
    for (const Table& t : tables) {
      if (t.name != h.name) continue;
      EXPECT_LT(fitCost({&t}, h.fit, kFrom), fitCost({&t}, none, kFrom)) << t.name;
    }
  }
}

// One rank per node uses one NIC, however many the node has: 2 x 1 H100 with 4x 400 Gb/s RoCE NICs
// measured 41.5 GB/s with Tree at 32 MiB (one NIC's worth); the model's Tree over two nodes is bound
// by the NICs used (at 8 GiB, where the fill is negligible: within 10% of 41.5).
TEST(ValidationTest, OneRankPerNodeUsesOneNic) {
  const TunerConfig c = loadConfig(kTables + "/h100-1x2-roce-4nic-tree.json");
  const CostModel m(c, {2, 2});
  EXPECT_EQ(m.nicsUsed(), 1);
  EXPECT_EQ(CostModel(c, {8, 2}).nicsUsed(), 4);
  const std::uint64_t bytes = std::uint64_t{8} << 30;
  const double busbw = static_cast<double>(bytes) /
                       (m.predictUs(Coll::kAllReduce, {Algo::kTree, Proto::kSimple}, bytes) * 1e3);
  EXPECT_NEAR(busbw, 41.5, 0.10 * 41.5);
}

// NVLS allreduce moves (n+1)/n x the bytes each way through every GPU's links, so its algorithm
// bandwidth grows with the GPUs as n/(n+1): NCCL_ALGO=NVLS on 2, 4 and 6 H100s and NVLS on 5, 7 and 8
// H200s at 8 GiB (the tables' figures, busbw x n / 2(n-1)) against the model, within 3% each. One
// efficiency (0.69 of the NVLink rate, from NVIDIA's 8x H100 figure) holds for them all.
TEST(ValidationTest, NvlsBandwidthGrowsAsNOverNPlusOne) {
  const TunerConfig c = loadConfig(kTables + "/h100-nx1-nvswitch-slices.json");
  ModelFit none;
  const std::uint64_t bytes = std::uint64_t{8} << 30;
  struct Case {
    int n;
    double algbw;
  };
  for (const Case& k : {Case{2, 205.58}, Case{4, 251.01}, Case{5, 414.2 * 5 / 8}, Case{6, 265.88},
                        Case{7, 460.0 * 7 / 12}, Case{8, 473.1 * 8 / 14}}) {
    const CostModel m(c, {k.n, 1}, none);
    const double algbw = static_cast<double>(bytes) /
                         (m.predictUs(Coll::kAllReduce, {Algo::kNvls, Proto::kSimple}, bytes) * 1e3);
    EXPECT_NEAR(algbw, k.algbw, 0.03 * k.algbw) << k.n << " GPUs";
  }
  // Blackwell's efficiency (0.60) comes from 8x B300; the B200 node's NVLS on 6, 7 and 8 GPUs is an
  // independent check of it and of the n/(n+1) shape.
  const TunerConfig b200 = loadConfig(kTables + "/b200-nx1-ml-engineering.json");
  for (const Case& k : {Case{6, 778.2 * 6 / 10}, Case{7, 811.2 * 7 / 12}, Case{8, 838.0 * 8 / 14}}) {
    const CostModel m(b200, {k.n, 1}, none);
    const double algbw = static_cast<double>(bytes) /
                         (m.predictUs(Coll::kAllReduce, {Algo::kNvls, Proto::kSimple}, bytes) * 1e3);
    EXPECT_NEAR(algbw, k.algbw, 0.03 * k.algbw) << k.n << " B200s";
  }
}

// The launch floor is per GPU a process drives: the 4 H100s driven by one nccl-tests process (-g 4)
// measured 22.7-25.5 us from 8 B to 64 KiB; the model with the fitted floor gives 4 x launch_us there,
// and a process per GPU (0 or 1) gives the collective's own time.
TEST(ValidationTest, LaunchFloorCountsTheGpusOfAProcess) {
  const TunerConfig c = loadConfig(kTables + "/h100-nx1-nvswitch-slices.json");
  const CostModel m(c, {4, 1});
  const Cell ll{Algo::kRing, Proto::kLL};
  EXPECT_DOUBLE_EQ(m.callUs(Coll::kAllReduce, ll, 8, 4), 4 * defaultFit().launch_us);
  EXPECT_NEAR(m.callUs(Coll::kAllReduce, ll, 8, 4), 23, 0.15 * 23);
  EXPECT_DOUBLE_EQ(m.callUs(Coll::kAllReduce, ll, 8, 0), m.predictUs(Coll::kAllReduce, ll, 8));
  EXPECT_DOUBLE_EQ(m.callUs(Coll::kAllReduce, ll, 8, 1), m.predictUs(Coll::kAllReduce, ll, 8));
  const std::uint64_t big = std::uint64_t{1} << 30;
  EXPECT_DOUBLE_EQ(m.callUs(Coll::kAllReduce, ll, big, 4), m.predictUs(Coll::kAllReduce, ll, big));
}

// On a full 8-GPU Hopper node the model's crossover is where NCCL's log puts it on 8x H200 (NCCL
// 2.27.7, ml-engineering): Ring/LL up to 1 MiB, NVLS/Simple from 2 MiB.
TEST(ValidationTest, NvlsCrossoverOnAFullHopperNode) {
  const TunerConfig c = loadConfig(kTables + "/h200-nx1-ml-engineering.json");
  const DecisionTable t = DecisionTable::build(c, {8, 1});
  for (int b = 15; b <= 34; ++b) {
    const std::uint64_t bytes = std::uint64_t{1} << b;
    const Cell first = t.candidates(Coll::kAllReduce, bytes)[0].cell;
    const Cell expected = b <= 20 ? Cell{Algo::kRing, Proto::kLL} : Cell{Algo::kNvls, Proto::kSimple};
    EXPECT_EQ(first.algo, expected.algo) << bytes;
    EXPECT_EQ(first.proto, expected.proto) << bytes;
  }
}

}  // namespace
