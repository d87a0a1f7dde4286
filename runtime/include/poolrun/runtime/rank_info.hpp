#pragma once

// Who a rank is in its job: its rank, the world, its node's share of it, and the rendezvous that
// torch.distributed's env:// initialisation uses. Read from the variables the plan gave the rank
// (poolrun-rank exports them) or, for a program started by plain mpirun, from Open MPI's own.

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace poolrun::runtime {

using Environment = std::map<std::string, std::string>;

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty: no rendezvous was agreed (not started by poolrun)
  int master_port = 0;      // 0: none agreed
};

// This process's environment as a map.
Environment processEnvironment();

// The rank's identity from `env`: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, each falling back
// to Open MPI's OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (then PMIX_RANK for the rank);
// a process with none of them is rank 0 of 1. MASTER_ADDR and MASTER_PORT are taken as they are.
// Throws poolrun::Error (kBadInput) naming the variable and its value when one is not a number,
// when the plan and Open MPI disagree (WORLD_SIZE=16 but OMPI_COMM_WORLD_SIZE=8: the job was not
// started as planned), or when the numbers contradict each other (RANK >= WORLD_SIZE, ...).
RankInfo rankInfo(const Environment& env);

// The variables torch.distributed expects, in this order: RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, and MASTER_ADDR, MASTER_PORT where a rendezvous was agreed.
std::vector<std::pair<std::string, std::string>> torchVariables(const RankInfo& info);

}  // namespace poolrun::runtime
