#include "nvml.hpp"

#include "poolrun/topo/nvml_session.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace poolrun::topo::detail {
namespace {

using nvml::Device;
using nvml::kSuccess;
using nvml::PciInfo;
using nvml::Return;

// Enough for any GPU NVML describes: an A100 or H100 holds at most 7 MIG devices. A driver (or a
// stand-in) that says more is not believed past this.
constexpr unsigned kMaxMigDevices = 64;

// NVML names profiles "MIG 1g.10gb"; nvidia-smi -L and CUDA users say "1g.10gb".
std::string profileName(const char* name, size_t size) {
  std::string s(name, strnlen(name, size));
  if (s.starts_with("MIG ")) s.erase(0, 4);
  return s;
}

// The name of a MIG device's profile. It is its compute instance's ("1c.3g.40gb" where the GPU
// instance is split), found from the ids the MIG device reports: the profile id an instance
// reports is matched against each profile's, never taken for a profile index (the two differ).
std::string computeProfileName(const nvml::Session& session, nvml::GpuInstance gi, unsigned ci) {
  auto ciById = session.get<Return(nvml::GpuInstance, unsigned, nvml::ComputeInstance*)>(
      "nvmlGpuInstanceGetComputeInstanceById");
  auto ciInfo =
      session.get<Return(nvml::ComputeInstance, nvml::ComputeInstanceInfo*)>("nvmlComputeInstanceGetInfo_v2");
  auto ciProfile =
      session.get<Return(nvml::GpuInstance, unsigned, unsigned, nvml::ComputeInstanceProfileInfoV2*)>(
          "nvmlGpuInstanceGetComputeInstanceProfileInfoV");
  nvml::ComputeInstance handle = nullptr;
  nvml::ComputeInstanceInfo info{};
  if (ciById == nullptr || ciInfo == nullptr || ciProfile == nullptr || ciById(gi, ci, &handle) != kSuccess ||
      ciInfo(handle, &info) != kSuccess)
    return "";
  for (unsigned p = 0; p < nvml::kComputeInstanceProfileCount; ++p) {
    nvml::ComputeInstanceProfileInfoV2 profile{};
    profile.version = nvml::kComputeInstanceProfileInfoV2Version;
    if (ciProfile(gi, p, nvml::kComputeInstanceShared, &profile) == kSuccess && profile.id == info.profileId)
      return profileName(profile.name, sizeof profile.name);
  }
  return "";
}

}  // namespace

// What NVML says of a GPU's MIG mode, the profiles it offers and the instances it holds. A GPU
// without MIG (or a driver without the calls) is not `capable`; a call that fails for one instance
// leaves that field unknown, and an index without a MIG device is skipped (the enumeration may have
// holes: nvmlDeviceGetMaxMigDeviceCount is an upper bound).
MigState queryMig(const nvml::Session& session, Device dev) {
  MigState mig;
  auto getMode = session.get<Return(Device, unsigned*, unsigned*)>("nvmlDeviceGetMigMode");
  unsigned current = 0, pending = 0;
  if (getMode == nullptr || getMode(dev, &current, &pending) != kSuccess) return mig;
  mig.capable = true;
  mig.enabled = current == nvml::kMigEnable;
  mig.pending = pending == nvml::kMigEnable;
  if (auto info = session.get<Return(Device, unsigned, nvml::GpuInstanceProfileInfoV2*)>(
          "nvmlDeviceGetGpuInstanceProfileInfoV")) {
    for (unsigned index = 0; index < nvml::kGpuInstanceProfileCount; ++index) {
      nvml::GpuInstanceProfileInfoV2 p{};
      p.version = nvml::kGpuInstanceProfileInfoV2Version;
      if (info(dev, index, &p) != kSuccess) continue;
      mig.profiles.push_back({p.id, profileName(p.name, sizeof p.name), static_cast<int>(p.sliceCount),
                              static_cast<int>(p.instanceCount), static_cast<int>(p.multiprocessorCount),
                              p.memorySizeMB << 20});
    }
  }
  if (!mig.enabled) return mig;
  auto maxCount = session.get<Return(Device, unsigned*)>("nvmlDeviceGetMaxMigDeviceCount");
  auto byIndex = session.get<Return(Device, unsigned, Device*)>("nvmlDeviceGetMigDeviceHandleByIndex");
  auto giId = session.get<Return(Device, unsigned*)>("nvmlDeviceGetGpuInstanceId");
  auto ciId = session.get<Return(Device, unsigned*)>("nvmlDeviceGetComputeInstanceId");
  auto getUuid = session.get<Return(Device, char*, unsigned)>("nvmlDeviceGetUUID");
  auto attributes = session.get<Return(Device, nvml::DeviceAttributes*)>("nvmlDeviceGetAttributes_v2");
  auto giById = session.get<Return(Device, unsigned, nvml::GpuInstance*)>("nvmlDeviceGetGpuInstanceById");
  auto giInfo = session.get<Return(nvml::GpuInstance, nvml::GpuInstanceInfo*)>("nvmlGpuInstanceGetInfo");
  unsigned most = 0;
  if (maxCount == nullptr || byIndex == nullptr || maxCount(dev, &most) != kSuccess) return mig;
  for (unsigned i = 0; i < std::min(most, kMaxMigDevices); ++i) {
    Device handle = nullptr;
    if (byIndex(dev, i, &handle) != kSuccess) continue;
    MigInstance inst;
    unsigned gi = 0, ci = 0;
    const bool ids =
        giId != nullptr && ciId != nullptr && giId(handle, &gi) == kSuccess && ciId(handle, &ci) == kSuccess;
    inst.gpu_instance = static_cast<int>(gi);
    inst.compute_instance = static_cast<int>(ci);
    char buf[nvml::kDeviceNameV2BufferSize] = {};
    if (getUuid != nullptr && getUuid(handle, buf, sizeof buf) == kSuccess)
      inst.uuid.assign(buf, strnlen(buf, sizeof buf));
    nvml::DeviceAttributes a{};
    if (attributes != nullptr && attributes(handle, &a) == kSuccess) {
      inst.sm = static_cast<int>(a.multiprocessorCount);
      inst.slices = static_cast<int>(a.gpuInstanceSliceCount);
      inst.memory_bytes = a.memorySizeMB << 20;
    }
    nvml::GpuInstance giHandle = nullptr;
    if (ids && giById != nullptr && giById(dev, gi, &giHandle) == kSuccess) {
      nvml::GpuInstanceInfo info{};
      if (giInfo != nullptr && giInfo(giHandle, &info) == kSuccess) inst.profile_id = info.profileId;
      inst.profile = computeProfileName(session, giHandle, ci);
    }
    if (inst.profile.empty()) {  // the GPU instance's profile, where the driver names no compute profile
      for (const MigProfile& p : mig.profiles)
        if (p.id == inst.profile_id && p.slices == inst.slices) inst.profile = p.name;
    }
    mig.instances.push_back(std::move(inst));
  }
  return mig;
}

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
    g.mig = queryMig(session, dev);
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
    g.mig = ng.mig;
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
