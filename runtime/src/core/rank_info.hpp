#pragma once

// A rank's identity from its variables, without the C++ library (poolrun/runtime/rank_info.hpp has
// the rules and the C++ interface).

#include "text.hpp"

namespace poolrun::runtime::core {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  Text master_addr;  // unset: no rendezvous was agreed
  int master_port = 0;
};

// False with the message in `error` when a variable is not a number, the plan and Open MPI
// disagree, or the numbers contradict each other. `info.master_addr` points into `env`.
bool rankInfo(const Variables& env, RankInfo& info, Line& error);

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, then MASTER_ADDR and MASTER_PORT where agreed.
bool torchVariables(const RankInfo& info, VariableSink& sink);

}  // namespace poolrun::runtime::core
