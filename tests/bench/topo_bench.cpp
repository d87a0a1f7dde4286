// Benchmarks of the topology readers and the live probe (measurements, not tests).
//
// On this machine compare BM_LiveProbe with BM_LstopoXml, which runs `lstopo-no-graphics --of xml`
// (process start included, as a user would run it) in the same run.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "poolrun/topo/sources.hpp"
#include "support/fixtures.hpp"

namespace {

using poolrun::topo::readTopologyFile;

void BM_ReadFixture(benchmark::State& state, std::filesystem::path file) {
  for (auto _ : state) {
    auto topo = readTopologyFile(file);
    benchmark::DoNotOptimize(topo.gpus.size());
  }
}

void BM_LiveProbe(benchmark::State& state) {
  poolrun::topo::LiveOptions options;
  options.use_nvml = false;
  for (auto _ : state) {
    auto topo = poolrun::topo::probeLive(options);
    benchmark::DoNotOptimize(topo.packages.size());
  }
}
BENCHMARK(BM_LiveProbe)->Unit(benchmark::kMillisecond);

void BM_LstopoXml(benchmark::State& state) {
  for (auto _ : state) {
    FILE* p = popen("lstopo-no-graphics --of xml - 2>/dev/null", "r");
    if (p == nullptr) {
      state.SkipWithError("lstopo-no-graphics not found (apt-get install hwloc)");
      return;
    }
    char buf[65536];
    size_t total = 0;
    while (size_t n = fread(buf, 1, sizeof buf, p)) total += n;
    if (pclose(p) != 0 || total == 0) {
      state.SkipWithError("lstopo-no-graphics failed");
      return;
    }
    benchmark::DoNotOptimize(total);
  }
}
BENCHMARK(BM_LstopoXml)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  if (auto dir = poolrun::test::fixturesDir()) {
    for (const char* sub : {"hwloc-xml", "nccl-topo"}) {
      for (const auto& entry : std::filesystem::directory_iterator(*dir / sub)) {
        if (entry.path().extension() != ".xml") continue;
        std::string name = entry.path().filename().string();
        if (name.find(".v3.") != std::string::npos || name.find("graph") != std::string::npos) continue;
        benchmark::RegisterBenchmark(("BM_ReadFixture/" + name).c_str(), BM_ReadFixture, entry.path())
            ->Unit(benchmark::kMicrosecond);
      }
    }
  } else {
    std::fprintf(stderr, "topo_bench: fixtures not found; only the live probe is measured\n");
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
