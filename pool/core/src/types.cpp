#include "poolrun/pool/types.hpp"

#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "poolrun/common/hash.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::pool {

std::string formatGpus(const std::vector<GpuRef>& gpus) {
  std::string out;
  for (size_t i = 0; i < gpus.size();) {
    size_t j = i;
    std::string part = gpus[i].node + ":";
    bool first = true;
    while (j < gpus.size() && gpus[j].node == gpus[i].node) {
      if (!gpus[j].mig.empty() || gpus[j].share) {  // a MIG instance: by the UUID its rank is given
        const GpuRef& g = gpus[j];
        part += (first ? "" : ",") +
                (g.share ? std::to_string(g.index) + "(" +
                               (g.share_percent > 0 ? std::to_string(g.share_percent) + "%" : "") +
                               (g.share_percent > 0 && g.share_memory > 0 ? " " : "") +
                               (g.share_memory > 0 ? common::byteSizeText(g.share_memory) : "") + ")"
                         : g.mig);
        first = false;
        ++j;
        continue;
      }
      size_t k = j;
      while (k + 1 < gpus.size() && gpus[k + 1].node == gpus[j].node && gpus[k + 1].mig.empty() &&
             !gpus[k + 1].share && gpus[k + 1].index == gpus[k].index + 1)
        ++k;
      part += (first ? "" : ",") + std::to_string(gpus[j].index) +
              (k > j ? "-" + std::to_string(gpus[k].index) : "");
      first = false;
      j = k + 1;
    }
    out += (out.empty() ? "" : " ") + part;
    i = j;
  }
  return out;
}

std::string toString(NodeState state) {
  switch (state) {
    case NodeState::kUp:
      return "up";
    case NodeState::kDraining:
      return "draining";
    case NodeState::kDown:
      return "down";
  }
  return "up";
}

std::string toString(GpuState state) {
  switch (state) {
    case GpuState::kFree:
      return "free";
    case GpuState::kLeased:
      return "leased";
    case GpuState::kFailed:
      return "failed";
    case GpuState::kForeign:
      return "foreign";
    case GpuState::kMig:
      return "mig";
  }
  return "free";
}

GpuState gpuStateFromString(std::string_view text) {
  if (text == "leased") return GpuState::kLeased;
  if (text == "failed") return GpuState::kFailed;
  if (text == "foreign") return GpuState::kForeign;
  if (text == "mig") return GpuState::kMig;
  return GpuState::kFree;
}

NodeState nodeStateFromString(std::string_view text) {
  if (text == "up") return NodeState::kUp;
  if (text == "draining") return NodeState::kDraining;
  if (text == "down") return NodeState::kDown;
  throw badInput("unknown node state '" + std::string(text) + "' (use up, draining or down)");
}

std::string topologyDoc(const topo::NodeTopology& topology) {
  // Where the topology was read from, and what its reader warned of, are not part of it: the
  // reader of a registration names its own source and has no warnings.
  nlohmann::ordered_json doc = topo::toJson(topology);
  doc.erase("source");
  doc.erase("warnings");
  return doc.dump();
}

std::string topologyHash(const topo::NodeTopology& topology) {
  return common::fnv1aHex(topologyDoc(topology));
}

std::string newLeaseId() {
  thread_local std::mt19937_64 rng{
      std::random_device{}() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  static const char* hex = "0123456789abcdef";
  uint64_t v = rng();
  std::string id = "L";
  for (int i = 0; i < 16; ++i) id += hex[(v >> (4 * i)) & 0xf];
  return id;
}

}  // namespace poolrun::pool
