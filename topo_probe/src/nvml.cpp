#include "nvml.hpp"

#include "poolrun/topo/nvml_session.hpp"

#include <algorithm>
#include <map>

namespace poolrun::topo::detail {
namespace {

using nvml::Device;
using nvml::kSuccess;
using nvml::PciInfo;
using nvml::Return;

}  // namespace

std::optional<std::vector<NvmlGpu>> queryNvml(std::string& why) {
  nvml::Session session;
  if (!session.ok()) {
    why = session.why() + "; NVLink and GPU UUIDs are unknown";
    return std::nullopt;
  }
  auto getName = session.get<Return(Device, char*, unsigned)>("nvmlDeviceGetName");
  auto getUuid = session.get<Return(Device, char*, unsigned)>("nvmlDeviceGetUUID");
  auto getMemory = session.get<Return(Device, nvml::Memory*)>("nvmlDeviceGetMemoryInfo");
  auto getCc = session.get<Return(Device, int*, int*)>("nvmlDeviceGetCudaComputeCapability");
  auto linkState = session.get<Return(Device, unsigned, int*)>("nvmlDeviceGetNvLinkState");
  auto remotePci = session.get<Return(Device, unsigned, PciInfo*)>("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto remoteType = session.get<Return(Device, unsigned, int*)>("nvmlDeviceGetNvLinkRemoteDeviceType");
  std::vector<NvmlGpu> out;
  for (const nvml::Session::Gpu& found : session.gpus()) {
    Device dev = found.device;
    NvmlGpu g;
    g.pci = PciAddress::parse(found.bus_id).value_or(PciAddress{});
    char buf[128] = {};
    if (getName != nullptr && getName(dev, buf, sizeof buf) == kSuccess) g.name = buf;
    if (getUuid != nullptr && getUuid(dev, buf, sizeof buf) == kSuccess) g.uuid = buf;
    nvml::Memory mem{};
    if (getMemory != nullptr && getMemory(dev, &mem) == kSuccess) g.memory_bytes = mem.total;
    int major = 0, minor = 0;
    if (getCc != nullptr && getCc(dev, &major, &minor) == kSuccess) g.sm = major * 10 + minor;
    for (unsigned l = 0; linkState != nullptr && remotePci != nullptr && l < nvml::kMaxNvLinks; ++l) {
      int active = 0;
      if (linkState(dev, l, &active) != kSuccess || active == 0) continue;
      PciInfo remote{};
      if (remotePci(dev, l, &remote) != kSuccess) continue;
      NvmlLink link;
      link.remote = PciAddress::parse(remote.busId).value_or(PciAddress{});
      int type = -1;
      link.remote_is_gpu = remoteType != nullptr && remoteType(dev, l, &type) == kSuccess
                               ? type == nvml::kNvLinkRemoteGpu
                               : true;  // resolved against the GPU list in mergeNvml
      g.links.push_back(link);
    }
    out.push_back(std::move(g));
  }
  return out;
}

void mergeNvml(NodeTopology& topo, const std::vector<NvmlGpu>& gpus) {
  std::map<PciAddress, size_t> byPci;
  for (const Gpu& g : topo.gpus) byPci[g.pci] = g.index;
  for (const NvmlGpu& ng : gpus) {
    auto it = byPci.find(ng.pci);
    if (it == byPci.end()) continue;
    Gpu& g = topo.gpus[it->second];
    if (!ng.uuid.empty()) g.uuid = ng.uuid;
    if (!ng.name.empty()) g.model = ng.name;
    if (ng.memory_bytes != 0) g.memory_bytes = ng.memory_bytes;
    if (ng.sm != 0) g.sm = ng.sm;
    if (ng.links.empty()) continue;
    // NVML is the better witness for NVLink: replace what hwloc said.
    g.nvlinks.clear();
    g.nvswitch_links = 0;
    std::map<size_t, int> perPeer;
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
