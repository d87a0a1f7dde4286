// The cost model validated on the published tables of nccl_tuner/data/: the fitted constants are the
// fit of all the tables, and every table is predicted by the model fitted on the others
// (leave-one-table-out). The report is printed; nccl_tuner/README.md quotes it.

#include <gtest/gtest.h>

#include <iostream>

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

TEST(ValidationTest, LeaveOneTableOut) {
  std::cout << validationReport(leaveOneOut(loadTables(kTables), kFrom));
}

}  // namespace
