#pragma once

// Validation of the cost model on published tables (nccl_tuner/data/): the constants of ModelFit
// fitted on a set of tables, and leave-one-table-out, where each table is predicted by the model
// fitted on all the others. tests/nccl_tuner/validation_test.cpp runs it and prints the report.

#include <cstdint>
#include <string>
#include <vector>

#include "poolrun/tuner/config.hpp"
#include "poolrun/tuner/explain.hpp"
#include "poolrun/tuner/model.hpp"

namespace poolrun::tuner {

// One published table: the hardware it was measured on and its figures (a poolrun.tuner/1 file
// whose calibration holds them). One source is one table, whatever communicator shapes it measured
// (a sweep over 2, 4 and 6 GPUs of one host stays one table), so that leave-one-table-out never
// predicts a run from another run of the same machine.
struct Table {
  std::string name;  // the file name
  TunerConfig config;
  std::vector<Measurement> figures;
};

// Every *.json file of `dir`, by name. Throws ConfigError for a file that is not a table.
std::vector<Table> loadTables(const std::string& dir);

// The model with `fit` against one table's figures from `minBytes` up: one comparison per collective
// (allreduce, then allgather and reducescatter where the table has them) and communicator shape
// (ranks x nodes) the table measured, fewest ranks first.
std::vector<Comparison> compareTable(const Table& t, const ModelFit& fit, std::uint64_t minBytes);

// The mean over the tables of each table's mean absolute log error (|log(predicted / measured)|)
// from `minBytes` up: every table weighs the same, however many sizes it lists.
double fitCost(const std::vector<const Table*>& tables, const ModelFit& fit, std::uint64_t minBytes);

// The fit of least cost, on grids fitted in turn (twice): the fill per step 0.5..50 us in steps of
// 0.5 with its half size 64 KiB..4 GiB in steps of sqrt(2), then the launch floor 0..20 us a GPU in steps of
// 0.2. Deterministic; no table, or tables that need neither, give zeros.
ModelFit fitTables(const std::vector<const Table*>& tables, std::uint64_t minBytes);

struct HeldOut {
  std::string name;
  ModelFit fit;                         // fitted without this table
  std::vector<Comparison> comparisons;  // one per shape
};

// Each table predicted by the fit on all the others.
std::vector<HeldOut> leaveOneOut(const std::vector<Table>& tables, std::uint64_t minBytes);

// Per table: the fit used, the error at every size and the worst from 64 KiB and from 256 MiB.
std::string validationReport(const std::vector<HeldOut>& heldOut);

// The same errors as one Markdown table, a row per curve (a table's collective and shape, and each
// cell a run forced) and a column per size, then the cells the model ran on each curve where NCCL
// chose: what nccl_tuner/README.md shows under "Every size, held out".
std::string perSizeMarkdown(const std::vector<HeldOut>& heldOut);

}  // namespace poolrun::tuner
