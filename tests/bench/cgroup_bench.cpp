// What a lease's cgroup costs the agent per lease per node (Google Benchmark; root): made with the
// node's seven other GPUs refused, a process moved in, killed and removed; on cgroup v1 (devices,
// freezer, pids) and v2 (a device program attached). Skips a version this machine lacks.
//   build/tests/bench/cgroup_bench [--benchmark_repetitions=N]

#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "poolrun/agent/lease_cgroup.hpp"

namespace {

using namespace poolrun::agent;

void leaseCgroup(benchmark::State& state, CgroupVersion version) {
  const CgroupMounts mounts = readCgroupMounts();
  if (geteuid() != 0 ||
      (version == CgroupVersion::kV1 ? !mounts.controllers.count("devices") : mounts.unified.empty())) {
    state.SkipWithError("needs root and the cgroup version");
    return;
  }
  Confinement c;
  for (uint32_t minor = 1; minor < 8; ++minor) c.deny.push_back({kNvidiaMajor, minor});
  if (version == CgroupVersion::kV1) c.pids_max = 4096;
  const std::string parent = "poolrun-bench-" + std::to_string(getpid());
  for (auto _ : state) {
    LeaseCgroup cg(mounts, version, parent, "L1", c);
    state.PauseTiming();
    const pid_t pid = fork();
    if (pid == 0) {
      pause();
      _exit(0);
    }
    state.ResumeTiming();
    cg.add(pid);
    benchmark::DoNotOptimize(cg.destroy(std::chrono::seconds(5)));
    state.PauseTiming();
    waitpid(pid, nullptr, 0);
    state.ResumeTiming();
  }
  for (const auto& [name, mount] : mounts.controllers) rmdir((mount / parent).c_str());
  if (!mounts.unified.empty()) rmdir((mounts.unified / parent).c_str());
}

BENCHMARK_CAPTURE(leaseCgroup, v1, CgroupVersion::kV1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(leaseCgroup, v2, CgroupVersion::kV2)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
