#pragma once

// What the plugin would decide, per power-of-two size, and why: the chosen cell, its estimate and
// every valid candidate with its own. The plugin and `poolrun tuner explain` share the decision table,
// so the two agree by construction (and a test checks it through the built .so).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

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

// "8 B", "64 KiB", "1 GiB" (exact binary units where they divide, else bytes).
std::string formatBytes(std::uint64_t bytes);
// Parses "1048576", "64K", "64KiB", "1M", "1MiB", "1G", "1GiB" (binary units). Throws ConfigError.
std::uint64_t parseBytes(const std::string& text, const std::string& what);

}  // namespace poolrun::tuner
