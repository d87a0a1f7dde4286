#pragma once

// The environment each rank gets from its plan, as the launcher hands it to every rank in one
// variable, POOLRUN_RANK_ENV (so that every node reads identical bytes without a shared file
// system). Its value is a "poolrun.rank-env/1" JSON document:
//
//   {"schema": "poolrun.rank-env/1",
//    "sets": [{"VAR": "value", ...}, ...],     distinct per-rank environments
//    "templates": [[0, 1, 2, 3], ...],         per node type: the set of each local rank
//    "runs": [[first_rank, nodes, ranks_per_node, template], ...]}
//
// Consecutive identical nodes form one run, so a 12,500-node cluster of one machine type costs
// a few hundred bytes.

#include <map>
#include <string>
#include <string_view>

namespace poolrun::runtime {

inline constexpr const char* kRankEnvVariable = "POOLRUN_RANK_ENV";
inline constexpr const char* kRankEnvSchema = "poolrun.rank-env/1";

// The variables of `rank` in the document `text`. Throws poolrun::Error (kBadInput) naming what
// is wrong when the document is malformed or does not cover `rank`.
std::map<std::string, std::string> rankEnvironment(std::string_view text, int rank);

}  // namespace poolrun::runtime
