// The cost model validated on the published tables of nccl_tuner/data/: the fitted constants are the
// fit of all the tables, and every table is predicted by the model fitted on the others
// (leave-one-table-out). The report is printed; nccl_tuner/README.md quotes it.

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>

#include "poolrun/tuner/validate.hpp"

namespace {

using namespace poolrun::tuner;

const std::string kTables = POOLRUN_TUNER_TABLES;
constexpr std::uint64_t kFrom = std::uint64_t{64} << 10;

TEST(ValidationTest, TablesLoad) {
  const std::vector<Table> tables = loadTables(kTables);
  ASSERT_GE(tables.size(), 5u);
  for (const Table& t : tables) {
    EXPECT_FALSE(compareTable(t, defaultFit(), kFrom).rows.empty()) << t.name;
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
  const Comparison c = compareTable(t, defaultFit(), kFrom);
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
  std::cout << "fit of all tables: fill " << fit.fill_us << " us, half at " << fit.fill_half_bytes << " B\n";
  EXPECT_EQ(fit.fill_us, defaultFit().fill_us);
  EXPECT_EQ(fit.fill_half_bytes, defaultFit().fill_half_bytes);
}

double worst(const Comparison& c, std::uint64_t from, std::uint64_t to = ~std::uint64_t{0}) {
  double w = 0;
  for (const CompareRow& r : c.rows) {
    if (r.bytes >= from && r.bytes <= to) w = std::max(w, std::fabs(r.error()));
  }
  return w;
}

// Each table predicted by the model fitted on the others. The bounds are what the model reaches
// today (nccl_tuner/README.md lists them with the reasons for the misses), a little rounded up: a
// change that makes any held-out table worse fails here. The aim is 25% from 64 KiB and 10%
// from 256 MiB; only the A100 tables from 1 MiB up and the 2 x 1 H100 table come near it.
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
      {"a100-8x1-azure-nda100v4.json", {0.60, 0.16, 0.12}},
      {"a100-8x1-ml-engineering.json", {0.64, 0.53, 0.07}},
      {"h100-1x2-roce-4nic-tree.json", {0.32, 0.32, 0}},
      {"h100-8x2-gcp-a3mega-tcpxo.json", {0.61, 0.61, 0.52}},
      {"h20-8x2-ib-ndr.json", {0.50, 0.50, 0.40}},
  };
  ASSERT_EQ(heldOut.size(), bounds.size());
  for (const HeldOut& h : heldOut) {
    ASSERT_TRUE(bounds.count(h.name)) << h.name << " is a new table: add its bounds";
    const Bound& b = bounds.at(h.name);
    EXPECT_LE(worst(h.comparison, kFrom), b.from64KiB) << h.name;
    EXPECT_LE(worst(h.comparison, std::uint64_t{1} << 20), b.from1MiB) << h.name;
    EXPECT_LE(worst(h.comparison, std::uint64_t{256} << 20), b.from256MiB) << h.name;
  }
}

// The fill is what the one-node tables ask for: held out, each A100 table is predicted better with
// the fill fitted on the others than with none. (Not every table gains: the 2 x 1 H100 Tree table is
// predicted better without it; nccl_tuner/README.md says so.)
TEST(ValidationTest, FittedFillPredictsHeldOutTablesBetterThanNone) {
  const std::vector<Table> tables = loadTables(kTables);
  ModelFit none;
  none.fill_us = 0;
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

}  // namespace
