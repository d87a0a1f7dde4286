// The cost model validated on the published tables of nccl_tuner/data/: the fitted constants are the
// fit of all the tables, and every table is predicted by the model fitted on the others
// (leave-one-table-out). The report is printed; nccl_tuner/README.md quotes it. A binary of its own,
// labelled `model`: the fits are CPU-bound (15 s each at -O2, about 330 s under the sanitizer
// tree's instrumentation), so CI runs them in the main build, not under the sanitizers.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "poolrun/tuner/decision.hpp"
#include "poolrun/tuner/validate.hpp"

namespace {

using namespace poolrun::tuner;

const std::string kTables = POOLRUN_TUNER_TABLES;
constexpr std::uint64_t kFrom = std::uint64_t{64} << 10;

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

// The worst |error| a table may show from 64 KiB, from 1 MiB and from 256 MiB.
struct Bound {
  double from64KiB, from1MiB, from256MiB;
};

// Each prediction within its table's bound; a table without a bound is a new one.
void expectWithin(const std::vector<HeldOut>& predicted, const std::map<std::string, Bound>& bounds) {
  ASSERT_EQ(predicted.size(), bounds.size());
  for (const HeldOut& h : predicted) {
    ASSERT_TRUE(bounds.count(h.name)) << h.name << " is a new table: add its bounds";
    const Bound& b = bounds.at(h.name);
    EXPECT_LE(worst(h.comparisons, kFrom), b.from64KiB) << h.name;
    EXPECT_LE(worst(h.comparisons, std::uint64_t{1} << 20), b.from1MiB) << h.name;
    EXPECT_LE(worst(h.comparisons, std::uint64_t{256} << 20), b.from256MiB) << h.name;
  }
}

// Each table predicted by the model fitted on the others. The bounds are what the model reaches
// today (nccl_tuner/README.md lists them with the reasons for the misses), a little rounded up: a
// change that makes any held-out table worse fails here (allreduce, and allgather and reducescatter
// where a table has them). The aim is 25% from 64 KiB and 10% from 256 MiB; the 8x A100 Azure
// table, the DGX H100, the 2 x 8 H100 InfiniBand table, the H100 slices, the 2 x 1 H100 Tree table and
// the B200 figures reach the first, eight of the twelve the second. NCCL's tree correction (2026-12-02)
// moved some bounds up as well as down: nccl_tuner/README.md gives both columns.
// Every choice a table names (several algorithms or protocols measured at one size) is the model's too.
const std::vector<HeldOut>& heldOutTables() {
  static const std::vector<HeldOut> heldOut = leaveOneOut(loadTables(kTables), kFrom);
  return heldOut;
}

TEST(ValidationTest, LeaveOneTableOut) {
  const std::vector<HeldOut>& heldOut = heldOutTables();
  std::cout << validationReport(heldOut);
  expectWithin(heldOut, {
                            {"a100-8x1-azure-nda100v4.json", {0.21, 0.11, 0.06}},
                            {"a100-8x1-ml-engineering.json", {0.46, 0.46, 0.05}},
                            {"a100-8x2-azure-ndv4-hdr.json", {0.39, 0.24, 0.07}},
                            {"a100-8x2-oci-roce.json", {0.27, 0.27, 0.19}},
                            {"b200-nx1-ml-engineering.json", {0.06, 0.06, 0.06}},
                            {"h100-1x2-roce-4nic-tree.json", {0.17, 0.17, 0}},
                            {"h100-8x1-dgx.json", {0.17, 0.11, 0.03}},
                            {"h100-8x2-gcp-a3mega-tcpxo.json", {0.55, 0.55, 0.52}},
                            {"h100-8x2-ib-ndr400.json", {0.18, 0.18, 0.09}},
                            {"h100-nx1-nvswitch-slices.json", {0.24, 0.24, 0.12}},
                            {"h20-8x2-ib-ndr.json", {0.45, 0.45, 0.41}},
                            {"h200-nx1-ml-engineering.json", {0.60, 0.40, 0.04}},
                        });
  int choices = 0;
  for (const HeldOut& h : heldOut) {
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

// nccl_tuner/README.md shows every held-out size (the issue asks for the error at every size from 64
// KiB): its block between the two markers is what perSizeMarkdown says today. When the model or the
// tables change, this fails and prints the block to paste.
TEST(ValidationTest, ReadmeShowsTheErrorAtEverySize) {
  const std::string begin = "<!-- per-size: written by tuner_validation_fit_test -->\n";
  const std::string end = "<!-- per-size end -->";
  std::ifstream in(kTables + "/../README.md");
  ASSERT_TRUE(in) << "cannot read " << kTables << "/../README.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const size_t from = readme.find(begin);
  const size_t to = readme.find(end);
  ASSERT_NE(from, std::string::npos) << "nccl_tuner/README.md lacks the marker " << begin;
  ASSERT_NE(to, std::string::npos) << "nccl_tuner/README.md lacks the marker " << end;
  ASSERT_LT(from, to);
  const std::string shown = readme.substr(from + begin.size(), to - from - begin.size());
  const std::string now = perSizeMarkdown(heldOutTables());
  EXPECT_TRUE(shown == now) << "nccl_tuner/README.md is out of date; its block should read:\n" << now;
}

// The fill is what the one-node tables ask for: held out, each A100 table is predicted better with
// the fill fitted on the others than with none. (Not every table gains: the 2 x 1 H100 Tree table is
// predicted better without it; nccl_tuner/README.md says so.)
TEST(ValidationTest, FittedFillPredictsHeldOutTablesBetterThanNone) {
  const std::vector<Table> tables = loadTables(kTables);
  ModelFit none;
  none.fill_step_us = 0;
  int checked = 0;
  for (const Table& held : tables) {  // each A100 table held out: fitted on the others (two fits, not eight)
    if (!held.name.starts_with("a100-8x1-")) continue;
    std::vector<const Table*> others;
    for (const Table& t : tables)
      if (t.name != held.name) others.push_back(&t);
    const ModelFit fit = fitTables(others, kFrom);
    EXPECT_LT(fitCost({&held}, fit, kFrom), fitCost({&held}, none, kFrom)) << held.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

}  // namespace
