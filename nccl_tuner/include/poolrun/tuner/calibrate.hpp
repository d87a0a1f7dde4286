#pragma once

// Calibration: measured times from nccl-tests (all_reduce_perf, all_gather_perf,
// reduce_scatter_perf, broadcast_perf, reduce_perf), written into a configuration's `calibration`
// section, where the model then prefers them to its own predictions.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "poolrun/tuner/config.hpp"

namespace poolrun::tuner {

// What a log does not say, or what the user knows better. A forced algorithm/protocol is read from
// NCCL's "NCCL_ALGO set by environment to ..." lines (NCCL_DEBUG=INFO) where present.
struct LogOverrides {
  std::optional<Coll> coll;
  std::optional<Algo> algo;
  std::optional<Proto> proto;
  std::optional<int> nranks;
  std::optional<int> nnodes;
};

struct ParsedLog {
  std::vector<Measurement> measurements;
  std::vector<std::string> warnings;  // lines skipped (wrong results, lists in NCCL_ALGO, ...)
};

// Reads one nccl-tests output. `source` names it in messages and in each measurement. Throws
// ConfigError when the text holds no result lines or the collective cannot be told.
ParsedLog parseNcclTestsLog(std::string_view text, const std::string& source, const LogOverrides& overrides);

struct MergeStats {
  size_t added = 0;
  size_t replaced = 0;
};

// Adds the measurements to doc["calibration"], replacing figures of the same collective, shape,
// algorithm, protocol and size; other keys and their order are kept. The caller validates the result.
MergeStats mergeCalibration(nlohmann::ordered_json& doc, const std::vector<Measurement>& measurements);

}  // namespace poolrun::tuner
