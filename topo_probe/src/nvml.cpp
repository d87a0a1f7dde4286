#include "nvml.hpp"

#include "poolrun/topo/dynamic_library.hpp"

#include <algorithm>
#include <map>

namespace poolrun::topo::detail {
namespace {

// The slice of NVML's C ABI used here (nvml.h is not needed to build).
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kMaxNvLinks = 18;
struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
enum NvmlRemoteType { kRemoteGpu = 0, kRemoteIbmNpu = 1, kRemoteSwitch = 2 };

}  // namespace

std::optional<std::vector<NvmlGpu>> queryNvml(std::string& why) {
  DynamicLibrary lib("libnvidia-ml.so.1");
  if (!lib) {
    why = "NVML (libnvidia-ml.so.1) is not installed; NVLink and GPU UUIDs are unknown";
    return std::nullopt;
  }
  auto init = lib.get<NvmlReturn()>("nvmlInit_v2");
  auto shutdown = lib.get<NvmlReturn()>("nvmlShutdown");
  auto count = lib.get<NvmlReturn(unsigned*)>("nvmlDeviceGetCount_v2");
  auto byIndex = lib.get<NvmlReturn(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
  auto pciInfo = lib.get<NvmlReturn(NvmlDevice, NvmlPciInfo*)>("nvmlDeviceGetPciInfo_v3");
  if (pciInfo == nullptr) pciInfo = lib.get<NvmlReturn(NvmlDevice, NvmlPciInfo*)>("nvmlDeviceGetPciInfo_v2");
  auto getName = lib.get<NvmlReturn(NvmlDevice, char*, unsigned)>("nvmlDeviceGetName");
  auto getUuid = lib.get<NvmlReturn(NvmlDevice, char*, unsigned)>("nvmlDeviceGetUUID");
  auto getMemory = lib.get<NvmlReturn(NvmlDevice, NvmlMemory*)>("nvmlDeviceGetMemoryInfo");
  auto getCc = lib.get<NvmlReturn(NvmlDevice, int*, int*)>("nvmlDeviceGetCudaComputeCapability");
  auto linkState = lib.get<NvmlReturn(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkState");
  auto remotePci =
      lib.get<NvmlReturn(NvmlDevice, unsigned, NvmlPciInfo*)>("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto remoteType = lib.get<NvmlReturn(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkRemoteDeviceType");
  if (init == nullptr || count == nullptr || byIndex == nullptr || pciInfo == nullptr) {
    why = "NVML is too old (missing nvmlInit_v2 or nvmlDeviceGetPciInfo); NVLink and GPU UUIDs are unknown";
    return std::nullopt;
  }
  if (NvmlReturn r = init(); r != kNvmlSuccess) {
    why = "NVML failed to initialise (error " + std::to_string(r) + "); is the NVIDIA driver loaded?";
    return std::nullopt;
  }
  std::vector<NvmlGpu> out;
  unsigned n = 0;
  if (count(&n) == kNvmlSuccess) {
    for (unsigned i = 0; i < n; ++i) {
      NvmlDevice dev = nullptr;
      NvmlPciInfo pci{};
      if (byIndex(i, &dev) != kNvmlSuccess || pciInfo(dev, &pci) != kNvmlSuccess) continue;
      NvmlGpu g;
      g.pci = PciAddress::parse(pci.busId).value_or(PciAddress{});
      char buf[128] = {};
      if (getName != nullptr && getName(dev, buf, sizeof buf) == kNvmlSuccess) g.name = buf;
      if (getUuid != nullptr && getUuid(dev, buf, sizeof buf) == kNvmlSuccess) g.uuid = buf;
      NvmlMemory mem{};
      if (getMemory != nullptr && getMemory(dev, &mem) == kNvmlSuccess) g.memory_bytes = mem.total;
      int major = 0, minor = 0;
      if (getCc != nullptr && getCc(dev, &major, &minor) == kNvmlSuccess) g.sm = major * 10 + minor;
      for (unsigned l = 0; linkState != nullptr && remotePci != nullptr && l < kMaxNvLinks; ++l) {
        int active = 0;
        if (linkState(dev, l, &active) != kNvmlSuccess || active == 0) continue;
        NvmlPciInfo remote{};
        if (remotePci(dev, l, &remote) != kNvmlSuccess) continue;
        NvmlLink link;
        link.remote = PciAddress::parse(remote.busId).value_or(PciAddress{});
        int type = -1;
        link.remote_is_gpu = remoteType != nullptr && remoteType(dev, l, &type) == kNvmlSuccess
                                 ? type == kRemoteGpu
                                 : true;  // resolved against the GPU list in mergeNvml
        g.links.push_back(link);
      }
      out.push_back(std::move(g));
    }
  }
  if (shutdown != nullptr) shutdown();
  return out;
}

void mergeNvml(NodeTopology& topo, const std::vector<NvmlGpu>& gpus) {
  std::map<PciAddress, int> byPci;
  for (const Gpu& g : topo.gpus) byPci[g.pci] = g.index;
  for (const NvmlGpu& ng : gpus) {
    auto it = byPci.find(ng.pci);
    if (it == byPci.end()) continue;
    Gpu& g = topo.gpus[static_cast<size_t>(it->second)];
    if (!ng.uuid.empty()) g.uuid = ng.uuid;
    if (!ng.name.empty()) g.model = ng.name;
    if (ng.memory_bytes != 0) g.memory_bytes = ng.memory_bytes;
    if (ng.sm != 0) g.sm = ng.sm;
    if (ng.links.empty()) continue;
    // NVML is the better witness for NVLink: replace what hwloc said.
    g.nvlinks.clear();
    g.nvswitch_links = 0;
    std::map<int, int> perPeer;
    for (const NvmlLink& l : ng.links) {
      auto peer = byPci.find(l.remote);
      if (l.remote_is_gpu && peer != byPci.end()) {
        ++perPeer[peer->second];
      } else {
        ++g.nvswitch_links;
      }
    }
    for (auto [peer, n] : perPeer) g.nvlinks.push_back({peer, NodeTopology::gpuLabel(peer), n});
  }
  topo.normalize();
}

}  // namespace poolrun::topo::detail
