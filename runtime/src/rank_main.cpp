// poolrun-rank: the wrapper poolrun starts in front of every rank. It exports the rank's variables
// from its plan (POOLRUN_RANK_ENV) and execs the program, so that programs that never link poolrun
// get their GPU, NIC and rank variables.
//
//   poolrun-rank PROGRAM [ARGS...]

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "poolrun/runtime/rank_env.hpp"
#include "poolrun/topo/error.hpp"

namespace {

// The rank Open MPI (or another PMIx launcher) gave this process.
int worldRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      char* end = nullptr;
      long r = std::strtol(v, &end, 10);
      if (*end == '\0' && r >= 0 && r < (1L << 30)) return static_cast<int>(r);
    }
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: poolrun-rank PROGRAM [ARGS...] (started by poolrun in front of every rank)\n";
    return 2;
  }
  const char* doc = std::getenv(poolrun::runtime::kRankEnvVariable);
  if (doc != nullptr) {
    int rank = worldRank();
    if (rank < 0) {
      std::cerr
          << "poolrun-rank: error: no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK); start it "
             "through poolrun or mpirun\n";
      return 127;
    }
    try {
      for (const auto& [name, value] : poolrun::runtime::rankEnvironment(doc, rank)) {
        setenv(name.c_str(), value.c_str(), 1);
      }
    } catch (const std::exception& e) {
      std::cerr << "poolrun-rank: error: rank " << rank << ": " << e.what() << "\n";
      return 127;
    }
    setenv("RANK", std::to_string(rank).c_str(), 1);
    unsetenv(poolrun::runtime::kRankEnvVariable);
  }
  execvp(argv[1], argv + 1);
  std::cerr << "poolrun-rank: error: cannot run '" << argv[1] << "': " << std::strerror(errno)
            << " (check the program's path and that it is executable on every node)\n";
  return 127;
}
