// A small MPI program for the launcher's integration tests: every rank writes what it received
// (its environment, its CPU affinity, its node) to REPORT_DIR/rank-N.json, after an allreduce
// that proves the ranks talk to each other. Options make a rank fail on purpose:
//   --exit RANK CODE   rank RANK exits with CODE after MPI_Init
//   --signal RANK SIG  rank RANK kills itself with SIG
//   --sleep SECONDS    every rank sleeps before finishing

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int exitRank = -1, exitCode = 0, signalRank = -1, sig = 0, sleepSeconds = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--exit" && i + 2 < argc) exitRank = std::atoi(argv[++i]), exitCode = std::atoi(argv[++i]);
    if (a == "--signal" && i + 2 < argc) signalRank = std::atoi(argv[++i]), sig = std::atoi(argv[++i]);
    if (a == "--sleep" && i + 1 < argc) sleepSeconds = std::atoi(argv[++i]);
  }
  long mine = rank, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  nlohmann::json cpus = nlohmann::json::array();
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  nlohmann::json env = nlohmann::json::object();
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    std::string k = kv.substr(0, eq);
    if (k.starts_with("NCCL_") || k.starts_with("UCX_") || k.starts_with("CUDA_") ||
        k.starts_with("POOLRUN_") || k == "RANK" || k == "LOCAL_RANK" || k == "WORLD_SIZE" ||
        k == "LOCAL_WORLD_SIZE" || k.starts_with("USER_") || k.starts_with("SLURM")) {
      env[k] = kv.substr(eq + 1);
    }
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  nlohmann::json report = {{"rank", rank}, {"size", size}, {"sum", sum},
                           {"cpus", cpus}, {"env", env},   {"host", host}};
  if (const char* dir = std::getenv("REPORT_DIR")) {
    std::ofstream(std::string(dir) + "/rank-" + std::to_string(rank) + ".json") << report.dump() << "\n";
  }
  if (rank == signalRank) raise(sig);
  if (sleepSeconds > 0) sleep(static_cast<unsigned>(sleepSeconds));
  if (rank == exitRank) {
    MPI_Finalize();
    return exitCode;
  }
  MPI_Finalize();
  return 0;
}
