#pragma once

// What the plugin would decide, per power-of-two size, and why: the chosen cell, its estimate and
// every valid candidate with its own. The plugin and `poolrun tuner explain` share the decision table,
// so the two agree by construction (and a test checks it through the built .so).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/tuner/calibrate.hpp"
#include "poolrun/tuner/config.hpp"
#include "poolrun/tuner/decision.hpp"

namespace poolrun::tuner {

inline constexpr std::string_view kExplainSchema = "poolrun.tuner-explain/1";

struct ExplainOptions {
  Coll coll = Coll::kAllReduce;
  int nranks = 0;  // 0: the configuration's nodes x gpus_per_node
  int nnodes = 0;  // 0: the configuration's nodes
  std::uint64_t min_bytes = 8;
  std::uint64_t max_bytes = std::uint64_t{1} << 30;
};

struct ExplainRow {
  std::uint64_t bytes = 0;
  std::optional<Choice> choice;  // empty: nothing valid, NCCL decides
  std::vector<Candidate> candidates;
  double busbw_gbyte_s = 0;
};

struct Explanation {
  Coll coll = Coll::kAllReduce;
  CommShape shape;
  std::vector<ExplainRow> rows;
};

// Throws ConfigError for an unusable shape (nnodes > nranks, ...) or configuration.
Explanation explain(const TunerConfig& config, const ExplainOptions& options);

// The "poolrun.tuner-explain/1" document.
nlohmann::json explainJson(const TunerConfig& config, const Explanation& e);
// A table for people.
std::string explainText(const TunerConfig& config, const Explanation& e);

// ---- the model against measured figures (`poolrun tuner explain --compare TABLE`) ----------------

// One measured size: the model's prediction for the cell the run used (the cell it forced with
// NCCL_ALGO/NCCL_PROTO; where it forced none, the cell the model ranks first, which is what the
// plugin would run) against the measured time.
struct CompareRow {
  std::uint64_t bytes = 0;
  std::optional<Algo> forced_algo;  // what the run forced, if anything
  std::optional<Proto> forced_proto;
  Cell cell;  // the cell predicted
  double predicted_us = 0;
  double measured_us = 0;
  double error() const { return predicted_us / measured_us - 1.0; }  // +0.25: the model 25% slow
};

// The choice at one size where the table measured several algorithms (runs forcing NCCL_ALGO) or
// several protocols (runs forcing only NCCL_PROTO): the cell the model ranks first, which is what the
// plugin would run, against the fastest measured. Only the forced dimension is judged: the algorithm
// of the model's cell against the fastest forced algorithm, or its protocol against the fastest
// forced protocol.
struct ChoiceRow {
  std::uint64_t bytes = 0;
  bool by_algo = true;        // false: protocols were forced
  Cell model;                 // the model's first cell
  int measured_best = 0;      // an Algo (by_algo) or Proto index
  double best_us = 0;         // its measured time
  double model_pick_us = -1;  // the measured time of the model's algorithm (protocol); -1: not measured
  int measured_count = 0;     // how many algorithms (protocols) were measured at this size
  bool agrees() const {
    return measured_best == (by_algo ? static_cast<int>(model.algo) : static_cast<int>(model.proto));
  }
};

struct Comparison {
  Coll coll = Coll::kAllReduce;
  CommShape shape;
  std::string table;  // where the figures came from
  std::vector<CompareRow> rows;
  std::vector<ChoiceRow> choices;    // sizes with several algorithms or protocols measured
  std::vector<std::string> skipped;  // figures of cells the model cannot run here, one line each
};

// A table to compare against: nccl-tests output (any *_perf program; ranks and nodes from its
// `# Using devices` lines unless `overrides` give them) or a poolrun.tuner/1 document, whose
// `calibration` figures are taken (the format of nccl_tuner/data/). `origin` names it in messages.
// Throws ConfigError for an empty text, one with no figures, or one that is neither format.
std::vector<Measurement> readComparisonTable(std::string_view text, const std::string& origin,
                                             const LogOverrides& overrides);

// The model alone (the configuration's own calibration is left out, so that a table is never
// compared with itself) against the figures of `options.coll` within [min_bytes, max_bytes]. The
// shape is options.nranks/nnodes where set, else the table's; a table of several shapes needs them.
// Throws ConfigError where nothing is left to compare or the configuration cannot model the shape.
Comparison compare(const TunerConfig& config, const std::vector<Measurement>& table,
                   const std::string& origin, const ExplainOptions& options,
                   const ModelFit& fit = defaultFit());

nlohmann::json compareJson(const TunerConfig& config, const Comparison& c);
// Size, cell, predicted, measured, error and bus bandwidths, then the worst error from 64 KiB and
// from 256 MiB, then the choices where the table measured several algorithms or protocols.
std::string compareText(const TunerConfig& config, const Comparison& c);

// One line: "256 MiB: model NVLS/Simple, fastest of 3 algorithms NVLS (1120.5 us): agrees".
std::string choiceText(const ChoiceRow& ch);

// "8 B", "64 KiB", "1 GiB" (exact binary units where they divide, else bytes).
std::string formatBytes(std::uint64_t bytes);
// Parses "1048576", "64K", "64KiB", "1M", "1MiB", "1G", "1GiB" (binary units). Throws ConfigError.
std::uint64_t parseBytes(const std::string& text, const std::string& what);

}  // namespace poolrun::tuner
