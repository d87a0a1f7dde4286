// getCollInfo of the built plugin, called as NCCL 2.28 calls it (dlopen, v5, a 7x3 table), and the
// decision table alone. The aim is under 50 ns per call with no allocation; allocs_per_call counts
// every malloc in the process during the timed loop (counting_malloc.hpp).

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "counting_malloc.hpp"
#include "nccl_host.hpp"
#include "poolrun/tuner/decision.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace nccl = poolrun::test::nccl;
const std::string kData = POOLRUN_TUNER_TEST_DATA;

std::vector<size_t> mixedSizes() {
  std::vector<size_t> out;
  for (int b = 3; b <= 32; ++b) out.push_back((size_t{1} << b) + static_cast<size_t>(b) * 24);
  return out;
}

void BM_PluginGetCollInfo(benchmark::State& state) {
  setenv("POOLRUN_TUNER_CONFIG", (kData + "/h100-roce-4node.json").c_str(), 1);
  std::string error;
  auto host = nccl::Host::load(POOLRUN_TUNER_PLUGIN, nccl::Release::k2_28, &error);
  if (!host) {
    state.SkipWithError(error.c_str());
    return;
  }
  auto comm = host->init(32, 4);
  if (!comm->hasContext()) {
    state.SkipWithError("the plugin declined the configuration");
    return;
  }
  const nccl::CostTable fresh = nccl::ncclLikeTable(nccl::kAllReduce, {true, false, true, false, 4});
  const std::vector<size_t> sizes = mixedSizes();
  size_t i = 0;
  long calls = 0;
  poolrun::test::AllocationCounter counter;
  for (auto _ : state) {
    nccl::CostTable table = fresh;  // NCCL fills the table before every call too
    int channels = 0;
    comm->getCollInfo(nccl::kAllReduce, sizes[i], table, &channels);
    benchmark::DoNotOptimize(table);
    i = i + 1 == sizes.size() ? 0 : i + 1;
    ++calls;
  }
  state.counters["allocs_per_call"] = poolrun::test::countingMallocAvailable()
                                          ? static_cast<double>(counter.count()) / static_cast<double>(calls)
                                          : -1;
  unsetenv("POOLRUN_TUNER_CONFIG");
}
BENCHMARK(BM_PluginGetCollInfo);

void BM_DecisionTableChoose(benchmark::State& state) {
  poolrun::tuner::TunerConfig config = poolrun::tuner::loadConfig(kData + "/h100-roce-4node.json");
  for (int r = 0; r < state.range(0); ++r) {
    poolrun::tuner::Rule rule;
    rule.coll = poolrun::tuner::Coll::kAllReduce;
    rule.min_bytes = std::uint64_t{1000} << r;
    rule.max_bytes = rule.min_bytes + 777;
    rule.proto = poolrun::tuner::Proto::kSimple;
    config.rules.push_back(rule);
  }
  auto table = poolrun::tuner::DecisionTable::build(config, {32, 4});
  float costs[21];
  for (float& c : costs) c = 1.0f;
  const std::vector<size_t> sizes = mixedSizes();
  size_t i = 0;
  for (auto _ : state) {
    poolrun::tuner::Choice choice;
    benchmark::DoNotOptimize(
        table.choose(poolrun::tuner::Coll::kAllReduce, sizes[i], 1, 0, costs, 7, 3, &choice));
    benchmark::DoNotOptimize(choice);
    i = i + 1 == sizes.size() ? 0 : i + 1;
  }
}
BENCHMARK(BM_DecisionTableChoose)->Arg(0)->Arg(16);

void BM_DecisionTableBuild(benchmark::State& state) {
  poolrun::tuner::TunerConfig config = poolrun::tuner::loadConfig(kData + "/h100-roce-4node.json");
  for (auto _ : state) {
    auto table = poolrun::tuner::DecisionTable::build(config, {32, 4});
    benchmark::DoNotOptimize(table);
  }
}
BENCHMARK(BM_DecisionTableBuild)->Unit(benchmark::kMicrosecond);

// A communicator's init with a configuration file of N rules, as NCCL does it for every communicator
// of the process: the plugin parses the file once and builds only the table afterwards.
void BM_PluginInitWithRules(benchmark::State& state) {
  std::string text = poolrun::test::slurp(kData + "/h100-roce-4node.json");
  text.resize(text.rfind('}'));
  text += ", \"rules\": [\n";
  for (long r = 0; r < state.range(0); ++r) {
    text += std::string(r == 0 ? "" : ",\n") +
            "  {\"coll\": \"allreduce\", \"min_bytes\": " + std::to_string(r * 1000) +
            ", \"max_bytes\": " + std::to_string(r * 1000 + 999) +
            ", \"nnodes\": 4, \"algo\": \"Ring\", \"proto\": \"Simple\"}";
  }
  text += "\n]}\n";
  poolrun::test::TempDir tmp;
  setenv("POOLRUN_TUNER_CONFIG", tmp.write("rules.json", text).c_str(), 1);
  std::string error;
  auto host = nccl::Host::load(POOLRUN_TUNER_PLUGIN, nccl::Release::k2_28, &error);
  if (!host) {
    state.SkipWithError(error.c_str());
    return;
  }
  // The process's first communicator parses the file; the timed ones are its later communicators.
  auto start = std::chrono::steady_clock::now();
  if (!host->init(32, 4)->hasContext()) {
    state.SkipWithError("the plugin declined the configuration");
    return;
  }
  state.counters["first_init_ms"] =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (auto _ : state) {
    auto comm = host->init(32, 4);
    if (!comm->hasContext()) {
      state.SkipWithError("the plugin declined the configuration");
      break;
    }
    host->finalize(*comm);
  }
  state.counters["file_bytes"] = static_cast<double>(text.size());
  unsetenv("POOLRUN_TUNER_CONFIG");
}
BENCHMARK(BM_PluginInitWithRules)->Arg(20000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
