// The cost model against the published tables of nccl_tuner/data/: the tables load, forced figures
// are compared with their algorithm, and the model's shape (NVLS, the launch floor, one NIC per rank,
// the crossovers). The fits (leave-one-table-out) are in validation_fit_test.cpp.

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
