// What one heartbeat's telemetry costs the node agent: a TelemetrySampler sample of 8 GPUs through
// the fake NVML (docs/fake-nvml.md), and of 8 NIC ports from a sysfs tree (measurements, not tests).
// The fake answers each call from memory after one stat of its file; the real driver's calls cost
// what the driver makes them cost (some, such as power, ask the GPU), so this is poolrun's share.

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include "fake_nvml/fake_nvml_file.hpp"
#include "poolrun/topo/telemetry.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace poolrun;

struct Node {
  test::TempDir dir;
  topo::NodeTopology topology = test::synthetic(test::SyntheticSpec());
  Node() {
    nlohmann::json doc = test::fakeNvmlFor(topology);
    for (auto& g : doc["gpus"]) {
      g["utilization"] = {{"gpu", 87}, {"memory", 40}};
      g["processes"] = {{{"pid", 1000}, {"used_memory_bytes", 40ULL << 30}}, {{"pid", 1001}}};
    }
    test::writeFakeNvml(dir.path() / "nvml.json", doc);
    setenv("POOLRUN_FAKE_NVML", (dir.path() / "nvml.json").c_str(), 1);
    for (const topo::Nic& n : topology.nics) {
      dir.write("sys/class/infiniband/" + n.name + "/ports/1/state", "4: ACTIVE\n");
      dir.write("sys/class/infiniband/" + n.name + "/ports/1/rate", "400 Gb/sec (4X NDR)\n");
    }
  }
};

void BM_SampleEightGpus(benchmark::State& state) {
  Node node;
  topo::TelemetrySampler sampler(node.topology, node.dir.path().string());
  if (!sampler.nvmlOk()) {
    state.SkipWithError(sampler.nvmlWhy().c_str());
    return;
  }
  for (auto _ : state) {
    std::vector<topo::GpuSample> samples = sampler.gpus();
    if (!samples[7].error.empty()) state.SkipWithError(samples[7].error.c_str());
    benchmark::DoNotOptimize(samples.data());
  }
  state.counters["gpus"] = 8;
}
BENCHMARK(BM_SampleEightGpus)->Unit(benchmark::kMicrosecond);

void BM_SampleEightNicPorts(benchmark::State& state) {
  Node node;
  topo::TelemetrySampler sampler(node.topology, node.dir.path().string());
  for (auto _ : state) {
    std::vector<topo::NicPortSample> ports = sampler.nics();
    benchmark::DoNotOptimize(ports.data());
  }
}
BENCHMARK(BM_SampleEightNicPorts)->Unit(benchmark::kMicrosecond);

// The sampler's start: NVML opened, devices mapped, XID events registered.
void BM_StartSampler(benchmark::State& state) {
  Node node;
  for (auto _ : state) {
    topo::TelemetrySampler sampler(node.topology, node.dir.path().string());
    benchmark::DoNotOptimize(sampler.nvmlOk());
  }
}
BENCHMARK(BM_StartSampler)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  poolrun::test::reexecWithFakeNvml(argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
