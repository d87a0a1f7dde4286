// Benchmarks of the binding planner: 64 ranks, and a 100,000-GPU cluster (12,500 nodes of 8).
// The aims are under 1 ms and under 1 s; memory is reported as bytes allocated per plan.

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>

#include "poolrun/launcher/plan.hpp"
#include "support/synthetic.hpp"

namespace {

std::atomic<size_t> gAllocated{0};

}  // namespace

// Counts the bytes the process allocates, to report what a plan costs in memory. (GCC cannot
// see that these operators pair malloc with free.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  gAllocated.fetch_add(n, std::memory_order_relaxed);
  if (void* p = std::malloc(n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace {

using namespace poolrun;

topo::Cluster cluster(int nodes) {
  auto topology = std::make_shared<const topo::NodeTopology>(test::synthetic({}));
  topo::Cluster c;
  c.file = "bench";
  c.nodes.reserve(static_cast<size_t>(nodes));
  for (int i = 0; i < nodes; ++i) {
    topo::ClusterNode n;
    n.name = "node" + std::to_string(i);
    n.topology = topology;
    n.levels.switch_name = "leaf" + std::to_string(i / 32);
    c.nodes.push_back(std::move(n));
  }
  return c;
}

void BM_Plan(benchmark::State& state) {
  int nodes = static_cast<int>(state.range(0));
  topo::Cluster c = cluster(nodes);
  launcher::PlanRequest req;
  req.ranks = nodes * 8;
  size_t bytes = 0;
  for (auto _ : state) {
    size_t before = gAllocated.load();
    auto plan = launcher::makePlan(launcher::grantFromCluster(c, req), req);
    bytes = gAllocated.load() - before;
    benchmark::DoNotOptimize(plan.ranks.data());
  }
  state.counters["ranks"] = req.ranks;
  state.counters["MiB_allocated"] = static_cast<double>(bytes) / (1 << 20);
}
BENCHMARK(BM_Plan)->Arg(8)->Arg(12500)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
