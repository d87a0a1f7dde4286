// libnccl-tuner-poolrun.so: NCCL's tuner plugin ABI v2..v6 over the decision table.
//
// Contract with NCCL (every version 2.21..2.30): nothing here throws across the C ABI or aborts, and
// every entry point returns ncclSuccess, because NCCL fails the communicator or the collective on any
// other result. Declining (no or bad configuration, NCCL_ALGO/NCCL_PROTO set by the user) means a
// null context: every call with it leaves NCCL's table as it is. getCollInfo reads the context only:
// no allocation, no I/O, no lock.

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "nccl_abi.h"
#include "poolrun/tuner/config.hpp"
#include "poolrun/tuner/decision.hpp"

namespace {

using poolrun::tuner::Choice;
using poolrun::tuner::Coll;
using poolrun::tuner::CommShape;
using poolrun::tuner::DecisionTable;
using poolrun::tuner::TunerConfig;

constexpr const char* kPluginName = "poolrun";

struct Context {
  DecisionTable table;
};

// The configuration is parsed once per process, not once per communicator (a file of 20,000 rules
// takes about a second); it is read again only when the file changes.
poolrun::tuner::ConfigCache& configCache() {
  static poolrun::tuner::ConfigCache cache;
  return cache;
}

// Messages about the process's configuration are logged once per process, not once per communicator.
std::atomic<bool> gToldNoConfig{false};
std::atomic<bool> gToldBadConfig{false};
std::atomic<bool> gToldUserForced{false};
std::atomic<bool> gToldBothSet{false};

void say(poolrunNcclLogger log, int level, unsigned long flags, const std::string& message) noexcept {
  if (log != nullptr) log(level, flags, __FILE__, __LINE__, "TUNER/Poolrun: %s", message.c_str());
}

void sayOnce(std::atomic<bool>& told, poolrunNcclLogger log, int level, unsigned long flags,
             const std::string& message) noexcept {
  if (!told.exchange(true)) say(log, level, flags, message);
}

bool envSet(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// v5+: bring NCCL's own model to the fabric too, for whatever NCCL still decides itself (channel and
// thread counts, cells the plugin leaves). The same terms the plugin's model adds.
void adjustConstants(const poolrun::tuner::CostModel& model, size_t nNodes, poolrunTunerConstantsV5* c) {
  if (c == nullptr || nNodes < 2) return;
  constexpr int kNet = 2;
  const double hop = model.fabricHopLatencyUs();
  for (int a = 0; a < POOLRUN_NCCL_ALGOS; ++a) {
    for (int p = 0; p < POOLRUN_NCCL_PROTOS; ++p) {
      double& lat = c->hwLatencies[kNet][a][p];
      if (lat > 0) lat += hop * (p == 2 ? 2.0 : 1.0);
    }
  }
  const double ll128 = model.ll128NetworkFactor();
  for (int cc = 0; cc < POOLRUN_NCCL_COMPCAPS; ++cc) {
    for (int scale = 1; scale < POOLRUN_NCCL_TUNING_SCALES; ++scale) {
      c->perChMaxRingLL128Bws[cc][scale] *= ll128;
      c->perChMaxTreeLL128Bws[cc][scale] *= ll128;
    }
  }
}

void* createContext(size_t nRanks, size_t nNodes, poolrunNcclLogger log, std::uint64_t commId,
                    poolrunTunerConstantsV5* constants) noexcept {
  try {
    if (envSet("NCCL_ALGO") || envSet("NCCL_PROTO")) {
      sayOnce(
          gToldUserForced, log, kPoolrunLogInfo, kPoolrunLogInit | kPoolrunLogTuning | kPoolrunLogEnv,
          "NCCL_ALGO or NCCL_PROTO is set: the user's choice stands, the tuner leaves NCCL's choices alone");
      return nullptr;
    }
    const char* json = std::getenv("POOLRUN_TUNER_CONFIG");
    const char* csv = std::getenv("NCCL_TUNER_CONFIG_FILE");
    std::shared_ptr<const TunerConfig> loaded;
    if (json != nullptr && *json != '\0') {
      if (csv != nullptr && *csv != '\0') {
        sayOnce(gToldBothSet, log, kPoolrunLogInfo, kPoolrunLogInit | kPoolrunLogTuning | kPoolrunLogEnv,
                std::string("both POOLRUN_TUNER_CONFIG and NCCL_TUNER_CONFIG_FILE are set: using "
                            "POOLRUN_TUNER_CONFIG, ignoring ") +
                    csv);
      }
      loaded = configCache().load(json);
    } else if (csv != nullptr && *csv != '\0') {
      loaded = configCache().loadExampleCsv(csv);
    } else {
      sayOnce(gToldNoConfig, log, kPoolrunLogInfo, kPoolrunLogInit | kPoolrunLogTuning,
              "POOLRUN_TUNER_CONFIG is not set: the tuner leaves NCCL's choices alone");
      return nullptr;
    }
    if (nRanks == 0 || nNodes == 0 || nRanks > INT_MAX || nNodes > nRanks) {
      sayOnce(gToldBadConfig, log, kPoolrunLogWarn, POOLRUN_LOG_ALL,
              "communicator of " + std::to_string(nRanks) + " ranks on " + std::to_string(nNodes) +
                  " nodes cannot be modelled: the tuner leaves NCCL's choices alone");
      return nullptr;
    }
    const TunerConfig& config = *loaded;
    const CommShape shape{static_cast<int>(nRanks), static_cast<int>(nNodes)};
    auto ctx = std::make_unique<Context>(Context{DecisionTable::build(config, shape)});
    if (ctx->table.model() != nullptr) adjustConstants(*ctx->table.model(), nNodes, constants);
    say(log, kPoolrunLogInfo, kPoolrunLogInit | kPoolrunLogTuning,
        "comm " + std::to_string(commId) + ": " + std::to_string(nRanks) + " ranks on " +
            std::to_string(nNodes) + " nodes, " +
            (config.has_hardware ? "fabric " + std::string(poolrun::tuner::fabricName(config.fabric))
                                 : std::string("rules only")) +
            ", " + std::to_string(config.rules.size()) + " rules, " +
            std::to_string(config.calibration.size()) + " measurements, from " + config.origin);
    return ctx.release();
  } catch (const std::exception& e) {
    sayOnce(gToldBadConfig, log, kPoolrunLogWarn, POOLRUN_LOG_ALL,
            std::string(e.what()) + "; the tuner leaves NCCL's choices alone");
  } catch (...) {
    sayOnce(gToldBadConfig, log, kPoolrunLogWarn, POOLRUN_LOG_ALL,
            "unexpected failure at init; the tuner leaves NCCL's choices alone");
  }
  return nullptr;
}

poolrunNcclResult initV2(size_t nRanks, size_t nNodes, poolrunNcclLogger log, void** context) noexcept {
  if (context != nullptr) *context = createContext(nRanks, nNodes, log, 0, nullptr);
  return kPoolrunNcclSuccess;
}

poolrunNcclResult initV5(void** context, std::uint64_t commId, size_t nRanks, size_t nNodes,
                         poolrunNcclLogger log, poolrunNvlDomainInfoV5* /*nvlDomainInfo*/,
                         poolrunTunerConstantsV5* constants) noexcept {
  if (context != nullptr) *context = createContext(nRanks, nNodes, log, commId, constants);
  return kPoolrunNcclSuccess;
}

poolrunNcclResult finalize(void* context) noexcept {
  delete static_cast<Context*>(context);
  return kPoolrunNcclSuccess;
}

poolrunNcclResult getCollInfoV4(void* context, int collType, size_t nBytes, int numPipeOps,
                                float** collCostTable, int numAlgo, int numProto, int regBuff,
                                int* nChannels) noexcept {
  const auto* ctx = static_cast<const Context*>(context);
  if (ctx == nullptr || collCostTable == nullptr || collType < 0 || collType >= poolrun::tuner::kNumColls) {
    return kPoolrunNcclSuccess;
  }
  // Declared float** but one contiguous numAlgo x numProto block.
  float* table = reinterpret_cast<float*>(collCostTable);
  Choice choice;
  if (!ctx->table.choose(static_cast<Coll>(collType), nBytes, numPipeOps, regBuff, table, numAlgo, numProto,
                         &choice)) {
    return kPoolrunNcclSuccess;
  }
  table[static_cast<int>(choice.cell.algo) * numProto + static_cast<int>(choice.cell.proto)] = 0.0f;
  if (choice.channels > 0 && nChannels != nullptr) *nChannels = choice.channels;
  return kPoolrunNcclSuccess;
}

poolrunNcclResult getCollInfoV3(void* context, int collType, size_t nBytes, int numPipeOps,
                                float** collCostTable, int numAlgo, int numProto, int* nChannels) noexcept {
  return getCollInfoV4(context, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto, 0, nChannels);
}

poolrunNcclResult getCollInfoV2(void* context, int collType, size_t nBytes, int collNetSupport,
                                int nvlsSupport, int numPipeOps, int* algorithm, int* protocol,
                                int* nChannels) noexcept {
  const auto* ctx = static_cast<const Context*>(context);
  if (ctx == nullptr || algorithm == nullptr || protocol == nullptr || collType < 0 ||
      collType >= poolrun::tuner::kNumColls) {
    return kPoolrunNcclSuccess;
  }
  // v2 has no cost table: the support flags say what NCCL would allow. NCCL 2.21 knows six algorithms
  // (no PAT), so only those are offered.
  constexpr int kV2Algos = 6;
  float table[kV2Algos * POOLRUN_NCCL_PROTOS] = {};
  for (int p = 0; p < POOLRUN_NCCL_PROTOS; ++p) {
    if (nvlsSupport == 0) {
      table[static_cast<int>(poolrun::tuner::Algo::kNvls) * POOLRUN_NCCL_PROTOS + p] = -1.0f;
      table[static_cast<int>(poolrun::tuner::Algo::kNvlsTree) * POOLRUN_NCCL_PROTOS + p] = -1.0f;
    }
    if (collNetSupport == 0) {
      table[static_cast<int>(poolrun::tuner::Algo::kCollNetDirect) * POOLRUN_NCCL_PROTOS + p] = -1.0f;
      table[static_cast<int>(poolrun::tuner::Algo::kCollNetChain) * POOLRUN_NCCL_PROTOS + p] = -1.0f;
    }
  }
  Choice choice;
  if (!ctx->table.choose(static_cast<Coll>(collType), nBytes, numPipeOps, 0, table, kV2Algos,
                         POOLRUN_NCCL_PROTOS, &choice)) {
    return kPoolrunNcclSuccess;
  }
  *algorithm = static_cast<int>(choice.cell.algo);
  *protocol = static_cast<int>(choice.cell.proto);
  if (choice.channels > 0 && nChannels != nullptr) *nChannels = choice.channels;
  return kPoolrunNcclSuccess;
}

}  // namespace

// The exported plugin structs. `extern` first: a const object at namespace scope would otherwise have
// internal linkage in C++ and NCCL's dlsym would not find it.
extern "C" {
__attribute__((visibility("default"))) extern const poolrunTunerV2 ncclTunerPlugin_v2;
__attribute__((visibility("default"))) extern const poolrunTunerV3 ncclTunerPlugin_v3;
__attribute__((visibility("default"))) extern const poolrunTunerV4 ncclTunerPlugin_v4;
__attribute__((visibility("default"))) extern const poolrunTunerV5 ncclTunerPlugin_v5;
__attribute__((visibility("default"))) extern const poolrunTunerV6 ncclTunerPlugin_v6;

const poolrunTunerV2 ncclTunerPlugin_v2 = {kPluginName, initV2, getCollInfoV2, finalize};
const poolrunTunerV3 ncclTunerPlugin_v3 = {kPluginName, initV2, getCollInfoV3, finalize};
const poolrunTunerV4 ncclTunerPlugin_v4 = {kPluginName, initV2, getCollInfoV4, finalize};
const poolrunTunerV5 ncclTunerPlugin_v5 = {kPluginName, initV5, getCollInfoV4, finalize};
// getChunkSize is optional (NULL): NCCL keeps its own chunk size.
const poolrunTunerV6 ncclTunerPlugin_v6 = {kPluginName, initV5, getCollInfoV4, finalize, nullptr};
}
