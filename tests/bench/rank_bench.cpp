// What poolrun-rank costs each rank: the wrapper in front of a program that exits at once, against
// the program alone, and binding against POOLRUN_BIND=off; the two launches of a pair alternate
// which goes first. The rank's environment is an Open MPI rank's: a hundred OMPI_/PMIX_ variables
// and the POOLRUN_RANK_ENV of an 8-GPU node's plan. And the reaper (POOLRUN_REAP=1) against none. Measures
// only; asserts nothing about time. With a second poolrun-rank (another build of it), the two
// wrappers against each other instead, alternating in the same way, for each of those environments.
//
//   rank_bench [PAIRS (1000)] [OTHER_POOLRUN_RANK]

#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "poolrun/launcher/mpi.hpp"
#include "poolrun/launcher/plan.hpp"
#include "support/synthetic.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Command {
  std::vector<std::string> argv;
  std::vector<std::string> env;
};

double runOnce(const Command& c) {
  std::vector<char*> argv, envp;
  for (const std::string& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : c.env) envp.push_back(const_cast<char*>(e.c_str()));
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  auto start = Clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) != 0) {
    std::fprintf(stderr, "rank_bench: cannot start %s\n", argv[0]);
    std::exit(1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "rank_bench: %s failed (status %d)\n", argv[0], status);
    std::exit(1);
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// A against B, alternating: the medians and the quartiles of the paired difference, in ms.
void compare(const char* what, const Command& a, const Command& b, int pairs) {
  std::vector<double> ta, tb, d;
  for (int i = 0; i < pairs; ++i) {
    double x = 0, y = 0;
    if (i % 2 == 0) {
      x = runOnce(a);
      y = runOnce(b);
    } else {
      y = runOnce(b);
      x = runOnce(a);
    }
    ta.push_back(x);
    tb.push_back(y);
    d.push_back(x - y);
  }
  std::printf(
      "%-52s %7.3f ms vs %7.3f ms; median paired difference %.3f ms (quartiles %.3f and %.3f), %d pairs\n",
      what, quantile(ta, 0.5), quantile(tb, 0.5), quantile(d, 0.5), quantile(d, 0.25), quantile(d, 0.75),
      pairs);
}

// An Open MPI rank's environment (rank 3 of 8 on one node) with the plan's POOLRUN_RANK_ENV, as a
// simulated node gets it (without the planned cores, which are a fixture's).
std::vector<std::string> rankEnvironment() {
  auto topology = std::make_shared<const poolrun::topo::NodeTopology>(poolrun::test::synthetic({}));
  poolrun::topo::ClusterNode node;
  node.name = "gpu07";
  node.topology = topology;
  poolrun::launcher::PlanRequest request;
  request.ranks = 8;
  poolrun::launcher::JobPlan plan = poolrun::launcher::makePlan({{&node, {0, 1, 2, 3, 4, 5, 6, 7}}}, request);
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin",
                                  "HOME=/root",
                                  "POOLRUN_RANK_ENV=" + poolrun::launcher::encodeRankEnv(plan, true),
                                  "OMPI_COMM_WORLD_RANK=3",
                                  "OMPI_COMM_WORLD_SIZE=8",
                                  "OMPI_COMM_WORLD_LOCAL_RANK=3",
                                  "OMPI_COMM_WORLD_LOCAL_SIZE=8",
                                  "PMIX_RANK=3",
                                  "MASTER_ADDR=gpu07",
                                  "MASTER_PORT=29500"};
  for (int i = 0; i < 95; ++i) {
    env.push_back("OMPI_MCA_setting_" + std::to_string(i) + "=" +
                  std::string(static_cast<size_t>(8 + i % 40), 'v'));
  }
  return env;
}

}  // namespace

int main(int argc, char** argv) {
  int pairs = argc > 1 ? std::atoi(argv[1]) : 1000;
  if (pairs < 4 || argc > 3) {
    std::fprintf(stderr,
                 "usage: rank_bench [PAIRS (at least 4; 1000)] [OTHER_POOLRUN_RANK (to compare with)]\n");
    return 2;
  }
  std::vector<std::string> env = rankEnvironment();
  // The plan names cores of the synthetic node; here the rank binds to a CPU it may use.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof allowed, &allowed);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
  std::vector<std::string> bind = env;
  bind.push_back("POOLRUN_CPUSET=" + std::to_string(cpu));
  std::vector<std::string> bindOff = bind;
  bindOff.push_back("POOLRUN_BIND=off");
  std::printf("poolrun-rank %s; the plan's document is %zu bytes\n", POOLRUN_RANK_BINARY, env[2].size() - 17);
  std::vector<std::string> reap = env;
  reap.push_back("POOLRUN_REAP=1");
  if (argc == 3) {
    std::string other = argv[2];
    std::printf("against %s\n", other.c_str());
    for (const auto& [what, e] :
         {std::pair{"an Open MPI rank's environment:", env}, std::pair{"binding to a core:", bind},
          std::pair{"POOLRUN_REAP=1:", reap}}) {
      compare(what, Command{{POOLRUN_RANK_BINARY, "/bin/true"}, e}, Command{{other, "/bin/true"}, e}, pairs);
    }
    return 0;
  }
  compare("poolrun-rank /bin/true against /bin/true:", Command{{POOLRUN_RANK_BINARY, "/bin/true"}, env},
          Command{{"/bin/true"}, env}, pairs);
  compare("binding to a core against POOLRUN_BIND=off:", Command{{POOLRUN_RANK_BINARY, "/bin/true"}, bind},
          Command{{POOLRUN_RANK_BINARY, "/bin/true"}, bindOff}, pairs);
  compare("staying beside the program as its reaper (POOLRUN_REAP=1) against exec'ing it:",
          Command{{POOLRUN_RANK_BINARY, "/bin/true"}, reap}, Command{{POOLRUN_RANK_BINARY, "/bin/true"}, env},
          pairs);
  return 0;
}
