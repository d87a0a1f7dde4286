// poolrun-rank: the wrapper poolrun starts in front of every rank. It exports the rank's variables
// from its plan (POOLRUN_RANK_ENV), binds the process to its cores and its memory to their NUMA node
// and checks that the binding took, exports the variables torch.distributed expects, and execs the
// program, so that programs that never link poolrun get their GPU, NIC, binding and rank variables.
//
//   poolrun-rank PROGRAM [ARGS...]

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "poolrun/runtime/binding.hpp"
#include "poolrun/runtime/port_check.hpp"
#include "poolrun/runtime/rank_env.hpp"
#include "poolrun/runtime/rank_info.hpp"
#include "poolrun/topo/error.hpp"

namespace {

using poolrun::runtime::Environment;

// poolrun-rank runs once per rank and stays clear of iostreams: their start-up (the C++ locale)
// would cost each rank a quarter of a millisecond before the program is even exec'd.
void say(const std::string& line) {
  std::string text = "poolrun-rank: " + line + "\n";
  std::fputs(text.c_str(), stderr);
}

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

std::string nodeName() {
  if (const char* n = std::getenv("POOLRUN_NODE"); n != nullptr && *n != '\0') return n;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// The CPUs the kernel lets this process run on now.
poolrun::topo::CpuSet currentAffinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<unsigned> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return poolrun::topo::CpuSet(cpus);
}

// One NUMA node (or a kernel without NUMA): /sys/devices/system/node/online names at most one.
bool singleNumaNode() {
  int fd = open("/sys/devices/system/node/online", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char online[256] = {};
  ssize_t got = read(fd, online, sizeof online - 1);
  close(fd);
  return got <= 0 || std::strpbrk(online, ",-") == nullptr;
}

// The variables this wrapper reads, and no others: under Open MPI a rank has over a hundred, and
// copying them all into a map cost each rank about 0.05 ms.
Environment wrapperVariables() {
  using namespace poolrun::runtime;
  std::vector<const char*> names(kRankInfoVariables.begin(), kRankInfoVariables.end());
  names.insert(names.end(), kBindingVariables.begin(), kBindingVariables.end());
  names.insert(names.end(), {"POOLRUN_CHECK_PORTS", "NCCL_IB_HCA", "POOLRUN_SYSFS_ROOT"});
  return processEnvironment(names);
}

// Binds as the plan says; returns false where POOLRUN_BIND=strict and the binding did not take.
bool bind(const Environment& env, int rank) {
  using namespace poolrun::runtime;
  if (auto mode = env.find("POOLRUN_BIND"); mode != env.end() && mode->second == "off") return true;
  std::optional<BindingRequest> request = bindingRequest(env, currentAffinity());
  if (!request) return true;
  // Open MPI's rankfile has bound this process already where the plan names no cores of this
  // machine (the simulated cluster), and with one NUMA node there is no memory to place: nothing is
  // left for hwloc to do, and loading it would cost every rank about 10 ms.
  if (env.find("POOLRUN_CPUSET") == env.end() && request->numa < 0 && singleNumaNode()) {
    setenv("POOLRUN_BOUND_CPUS", request->cpus.toList().c_str(), 1);
    setenv("POOLRUN_BOUND_MEMORY", "", 1);
    return true;
  }
  std::unique_ptr<Binder> binder = hwlocBinder();
  BindingResult result = applyBinding(*binder, *request);
  setenv("POOLRUN_BOUND_CPUS", result.cpus.toList().c_str(), 1);
  std::string memory;
  for (int n : result.memory) memory += (memory.empty() ? "" : ",") + std::to_string(n);
  setenv("POOLRUN_BOUND_MEMORY", memory.c_str(), 1);
  auto mode = env.find("POOLRUN_BIND");
  bool strict = mode != env.end() && mode->second == "strict";
  for (const std::string& p : result.problems) {
    say(std::string(strict ? "error" : "warning") + ": rank " + std::to_string(rank) + " on " + nodeName() +
        ": " + p);
  }
  return !strict || result.problems.empty();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("usage: poolrun-rank PROGRAM [ARGS...] (started by poolrun in front of every rank)\n", stderr);
    return 2;
  }
  const char* doc = std::getenv(poolrun::runtime::kRankEnvVariable);
  int rank = worldRank();
  if (doc != nullptr) {
    if (rank < 0) {
      say("error: no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK); start it through poolrun "
          "or mpirun");
      return 127;
    }
    try {
      for (const auto& [name, value] : poolrun::runtime::rankEnvironment(doc, rank)) {
        setenv(name.c_str(), value.c_str(), 1);
      }
    } catch (const std::exception& e) {
      say("error: rank " + std::to_string(rank) + ": " + e.what());
      return 127;
    }
    setenv("RANK", std::to_string(rank).c_str(), 1);
    unsetenv(poolrun::runtime::kRankEnvVariable);
  }
  try {
    Environment env = wrapperVariables();
    for (const auto& [name, value] : poolrun::runtime::torchVariables(poolrun::runtime::rankInfo(env))) {
      setenv(name.c_str(), value.c_str(), 1);
    }
    // On real nodes the launcher asks each rank to look at its own RDMA ports before the program
    // starts: a port that is down would hang the whole job in NCCL's setup.
    if (auto check = env.find("POOLRUN_CHECK_PORTS"); check != env.end() && check->second == "1") {
      auto hca = env.find("NCCL_IB_HCA");
      auto root = env.find("POOLRUN_SYSFS_ROOT");
      std::vector<std::string> problems =
          hca == env.end()
              ? std::vector<std::string>{}
              : poolrun::runtime::downPorts(hca->second, root == env.end() ? "/sys" : root->second);
      for (const std::string& p : problems) {
        say("error: rank " + std::to_string(rank) + " on " + nodeName() + ": " + p +
            "; run `poolrun doctor` there, or start with --no-doctor");
      }
      if (!problems.empty()) return 125;
    }
    // Binding is the plan's: a program started by plain mpirun keeps the binding mpirun gave it.
    if (doc != nullptr && !bind(env, rank)) return 127;
  } catch (const std::exception& e) {
    say("error: rank " + std::to_string(rank) + " on " + nodeName() + ": " + e.what());
    return 127;
  }
  execvp(argv[1], argv + 1);
  say(std::string("error: cannot run '") + argv[1] + "': " + std::strerror(errno) +
      " (check the program's path and that it is executable on every node)");
  return 127;
}
