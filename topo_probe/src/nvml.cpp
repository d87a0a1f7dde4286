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

std::string applyMigLayout(const nvml::Session& session, Device dev,
                           const std::vector<std::string>& profiles) {
  using nvml::GpuInstance, nvml::ComputeInstance;
  auto getMode = session.get<Return(Device, unsigned*, unsigned*)>("nvmlDeviceGetMigMode");
  auto setMode = session.get<Return(Device, unsigned, Return*)>("nvmlDeviceSetMigMode");
  auto giProfile = session.get<Return(Device, unsigned, nvml::GpuInstanceProfileInfoV2*)>(
      "nvmlDeviceGetGpuInstanceProfileInfoV");
  auto gpuInstances =
      session.get<Return(Device, unsigned, GpuInstance*, unsigned*)>("nvmlDeviceGetGpuInstances");
  auto createGi = session.get<Return(Device, unsigned, GpuInstance*)>("nvmlDeviceCreateGpuInstance");
  auto destroyGi = session.get<Return(GpuInstance)>("nvmlGpuInstanceDestroy");
  auto ciProfile = session.get<Return(GpuInstance, unsigned, unsigned, nvml::ComputeInstanceProfileInfoV2*)>(
      "nvmlGpuInstanceGetComputeInstanceProfileInfoV");
  auto computeInstances = session.get<Return(GpuInstance, unsigned, ComputeInstance*, unsigned*)>(
      "nvmlGpuInstanceGetComputeInstances");
  auto createCi =
      session.get<Return(GpuInstance, unsigned, ComputeInstance*)>("nvmlGpuInstanceCreateComputeInstance");
  auto destroyCi = session.get<Return(ComputeInstance)>("nvmlComputeInstanceDestroy");
  if (!getMode || !setMode || !giProfile || !gpuInstances || !createGi || !destroyGi || !ciProfile ||
      !computeInstances || !createCi || !destroyCi)
    return "this driver's NVML lacks the MIG management calls (a driver of R450 or later has them)";
  const auto failed = [&](const std::string& what, Return r) {
    std::string text = what + ": " + session.errorText(r);
    if (r == nvml::kErrorNoPermission)
      text += "; changing MIG instances needs root (run poold-agent as root, or with CAP_SYS_ADMIN)";
    if (r == nvml::kErrorInUse) text += "; a process still runs on the GPU (nvidia-smi lists it)";
    return text;
  };

  // The mode first: turning it on may wait for a GPU reset, and then nothing else can be done.
  unsigned current = 0, pending = 0;
  if (Return r = getMode(dev, &current, &pending); r != kSuccess)
    return failed("cannot read the GPU's MIG mode (not a MIG GPU?)", r);
  if (current != nvml::kMigEnable) {
    Return activation = kSuccess;
    if (Return r = setMode(dev, nvml::kMigEnable, &activation); r != kSuccess)
      return failed("cannot turn MIG mode on", r);
    getMode(dev, &current, &pending);
    if (current != nvml::kMigEnable)
      return "MIG mode is on after the next GPU reset (pending): reset the GPU (nvidia-smi -r -i GPU, with "
             "no process on it), then ask for the layout again";
  }

  // Every profile by name, before anything changes.
  std::map<std::string, nvml::GpuInstanceProfileInfoV2> offered;
  for (unsigned index = 0; index < nvml::kGpuInstanceProfileCount; ++index) {
    nvml::GpuInstanceProfileInfoV2 p{};
    p.version = nvml::kGpuInstanceProfileInfoV2Version;
    if (giProfile(dev, index, &p) == kSuccess) offered[profileName(p.name, sizeof p.name)] = p;
  }
  for (const std::string& name : profiles) {
    if (offered.count(name)) continue;
    std::string names;
    for (const auto& [n, p] : offered) names += (names.empty() ? "" : ", ") + n;
    return "the GPU offers no MIG profile '" + name + "' (it offers " + (names.empty() ? "none" : names) +
           ")";
  }

  // The compute instances of every GPU instance, then the GPU instances.
  std::vector<GpuInstance> existing;
  for (const auto& [name, p] : offered) {
    std::vector<GpuInstance> found(64);
    unsigned count = static_cast<unsigned>(found.size());
    if (gpuInstances(dev, p.id, found.data(), &count) != kSuccess) continue;
    existing.insert(existing.end(), found.begin(), found.begin() + std::min<unsigned>(count, 64));
  }
  for (GpuInstance gi : existing) {
    for (unsigned index = 0; index < nvml::kComputeInstanceProfileCount; ++index) {
      nvml::ComputeInstanceProfileInfoV2 cp{};
      cp.version = nvml::kComputeInstanceProfileInfoV2Version;
      if (ciProfile(gi, index, nvml::kComputeInstanceShared, &cp) != kSuccess) continue;
      std::vector<ComputeInstance> cis(64);
      unsigned count = static_cast<unsigned>(cis.size());
      if (computeInstances(gi, cp.id, cis.data(), &count) != kSuccess) continue;
      for (unsigned k = 0; k < count && k < cis.size(); ++k)
        if (Return r = destroyCi(cis[k]); r != kSuccess)
          return failed("cannot destroy a compute instance", r);
    }
    if (Return r = destroyGi(gi); r != kSuccess) return failed("cannot destroy a GPU instance", r);
  }

  // The layout: a GPU instance of each profile, with one compute instance that spans it.
  for (const std::string& name : profiles) {
    GpuInstance gi = nullptr;
    if (Return r = createGi(dev, offered.at(name).id, &gi); r != kSuccess)
      return failed(
          "cannot create a " + name + " GPU instance" +
              (r == nvml::kErrorInsufficientResources ? " (the layout does not fit the GPU's slices)" : ""),
          r);
    unsigned best = 0, slices = 0;
    bool any = false;
    for (unsigned index = 0; index < nvml::kComputeInstanceProfileCount; ++index) {
      nvml::ComputeInstanceProfileInfoV2 cp{};
      cp.version = nvml::kComputeInstanceProfileInfoV2Version;
      if (ciProfile(gi, index, nvml::kComputeInstanceShared, &cp) != kSuccess) continue;
      if (!any || cp.sliceCount > slices) best = cp.id, slices = cp.sliceCount, any = true;
    }
    if (!any) return "the " + name + " GPU instance offers no compute instance profile";
    ComputeInstance ci = nullptr;
    if (Return r = createCi(gi, best, &ci); r != kSuccess)
      return failed("cannot create the compute instance of a " + name + " GPU instance", r);
  }
  return "";
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
