// Samples of a node's GPUs (NVML) and NIC ports (sysfs) for the node agent's heartbeats.

#include "poolrun/topo/telemetry.hpp"

#include <map>

#include "nvml.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/topo/nvml_session.hpp"
#include "poolrun/topo/sysfs.hpp"

namespace poolrun::topo {
namespace {

using nvml::Device;
using nvml::kSuccess;
using nvml::Return;

// A driver that keeps reporting events (a GPU in an XID storm) must not hold a sample up: the rest
// wait for the next one.
constexpr int kMaxEventsPerSample = 1024;
// Processes that start between the call that counts them and the call that lists them.
constexpr unsigned kProcessSlack = 8;
constexpr int kProcessTries = 3;

// The NVML calls the sampler makes; nullptr where the driver lacks one.
struct Calls {
  Return (*utilization)(Device, nvml::Utilization*) = nullptr;
  Return (*memory)(Device, nvml::Memory*) = nullptr;
  Return (*temperature)(Device, int, unsigned*) = nullptr;
  Return (*power)(Device, unsigned*) = nullptr;
  Return (*energy)(Device, unsigned long long*) = nullptr;
  Return (*ecc)(Device, int, int, unsigned long long*) = nullptr;
  Return (*retired_pending)(Device, int*) = nullptr;
  Return (*remapped)(Device, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  Return (*processes)(Device, unsigned*, nvml::ProcessInfo*) = nullptr;       // _v3, else _v2
  Return (*processes_v1)(Device, unsigned*, nvml::ProcessInfoV1*) = nullptr;  // drivers before 11.0
  Return (*event_set_create)(nvml::EventSet*) = nullptr;
  Return (*register_events)(Device, unsigned long long, nvml::EventSet) = nullptr;
  Return (*event_set_wait)(nvml::EventSet, nvml::EventData*, unsigned) = nullptr;
  Return (*event_set_free)(nvml::EventSet) = nullptr;

  explicit Calls(const nvml::Session& s) {
    utilization = s.get<Return(Device, nvml::Utilization*)>("nvmlDeviceGetUtilizationRates");
    memory = s.get<Return(Device, nvml::Memory*)>("nvmlDeviceGetMemoryInfo");
    temperature = s.get<Return(Device, int, unsigned*)>("nvmlDeviceGetTemperature");
    power = s.get<Return(Device, unsigned*)>("nvmlDeviceGetPowerUsage");
    energy = s.get<Return(Device, unsigned long long*)>("nvmlDeviceGetTotalEnergyConsumption");
    ecc = s.get<Return(Device, int, int, unsigned long long*)>("nvmlDeviceGetTotalEccErrors");
    retired_pending = s.get<Return(Device, int*)>("nvmlDeviceGetRetiredPagesPendingStatus");
    remapped = s.get<Return(Device, unsigned*, unsigned*, unsigned*, unsigned*)>("nvmlDeviceGetRemappedRows");
    processes =
        s.get<Return(Device, unsigned*, nvml::ProcessInfo*)>("nvmlDeviceGetComputeRunningProcesses_v3");
    if (processes == nullptr)
      processes =
          s.get<Return(Device, unsigned*, nvml::ProcessInfo*)>("nvmlDeviceGetComputeRunningProcesses_v2");
    if (processes == nullptr)
      processes_v1 =
          s.get<Return(Device, unsigned*, nvml::ProcessInfoV1*)>("nvmlDeviceGetComputeRunningProcesses");
    event_set_create = s.get<Return(nvml::EventSet*)>("nvmlEventSetCreate");
    register_events = s.get<Return(Device, unsigned long long, nvml::EventSet)>("nvmlDeviceRegisterEvents");
    event_set_wait = s.get<Return(nvml::EventSet, nvml::EventData*, unsigned)>("nvmlEventSetWait_v2");
    event_set_free = s.get<Return(nvml::EventSet)>("nvmlEventSetFree");
  }
};

// The compute processes of one GPU: counted, then listed into room for a few more.
template <typename Info>
Return listProcesses(Return (*call)(Device, unsigned*, Info*), Device dev, std::vector<GpuProcess>& out) {
  unsigned count = 0;
  Return r = call(dev, &count, nullptr);
  for (int attempt = 0; r == nvml::kErrorInsufficientSize && attempt < kProcessTries; ++attempt) {
    std::vector<Info> infos(count + kProcessSlack);
    count = static_cast<unsigned>(infos.size());
    r = call(dev, &count, infos.data());
    if (r == kSuccess) {
      for (unsigned i = 0; i < count && i < infos.size(); ++i) {
        unsigned long long used = infos[i].usedGpuMemory;
        out.push_back({infos[i].pid, used == nvml::kValueNotAvailable ? 0 : used});
      }
    }
  }
  return r;
}

}  // namespace

struct TelemetrySampler::Impl {
  NodeTopology topology;
  std::filesystem::path sysfs_root;
  nvml::Session session;
  Calls calls{session};
  // By position in topology.gpus:
  std::vector<Device> devices;       // nullptr where NVML does not list the GPU
  std::vector<std::string> setup;    // what failed once, at the start
  std::vector<std::string> uuids;    // NVML's, else the topology's
  std::map<Device, size_t> indexOf;  // NVML device -> position
  nvml::EventSet events = nullptr;

  Impl(const NodeTopology& t, std::string root) : topology(t), sysfs_root(std::move(root)) {
    devices.assign(topology.gpus.size(), nullptr);
    setup.assign(topology.gpus.size(), "");
    for (const Gpu& g : topology.gpus) uuids.push_back(g.uuid);
    if (!session.ok()) return;
    auto getUuid = session.get<Return(Device, char*, unsigned)>("nvmlDeviceGetUUID");
    std::map<PciAddress, size_t> byPci;
    for (size_t i = 0; i < topology.gpus.size(); ++i) byPci[topology.gpus[i].pci] = i;
    for (const nvml::Session::Gpu& found : session.gpus()) {
      std::optional<PciAddress> pci = PciAddress::parse(found.bus_id);
      auto it = pci ? byPci.find(*pci) : byPci.end();
      if (it == byPci.end()) continue;  // a GPU the topology lacks: not this node's business
      devices[it->second] = found.device;
      indexOf[found.device] = it->second;
      char uuid[96] = {};
      if (getUuid != nullptr && getUuid(found.device, uuid, sizeof uuid) == kSuccess)
        uuids[it->second] = uuid;
    }
    registerXidEvents();
  }

  ~Impl() {
    if (events != nullptr && calls.event_set_free != nullptr) calls.event_set_free(events);
  }

  void registerXidEvents() {
    const char* lacking = calls.event_set_create == nullptr  ? "nvmlEventSetCreate"
                          : calls.register_events == nullptr ? "nvmlDeviceRegisterEvents"
                          : calls.event_set_wait == nullptr  ? "nvmlEventSetWait_v2"
                          : calls.event_set_free == nullptr  ? "nvmlEventSetFree"
                                                             : nullptr;
    if (lacking != nullptr) {
      for (std::string& s : setup) s = std::string("XID events: this driver lacks ") + lacking;
      return;
    }
    if (Return r = calls.event_set_create(&events); r != kSuccess) {
      events = nullptr;
      for (std::string& s : setup) s = "XID events: nvmlEventSetCreate failed: " + session.errorText(r);
      return;
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] == nullptr) continue;
      Return r = calls.register_events(devices[i], nvml::kEventTypeXidCriticalError, events);
      // A GPU without XID events (GeForce, some virtual GPUs) has none to report: not an error.
      if (r != kSuccess && r != nvml::kErrorNotSupported)
        setup[i] = "XID events: nvmlDeviceRegisterEvents failed: " + session.errorText(r);
    }
  }

  // The XID events the driver has queued, by position of the GPU; the wait does not block.
  std::map<size_t, std::vector<XidEvent>> drainEvents(SampleTime now) {
    std::map<size_t, std::vector<XidEvent>> out;
    if (events == nullptr) return out;
    for (int n = 0; n < kMaxEventsPerSample; ++n) {
      nvml::EventData data{};
      if (calls.event_set_wait(events, &data, 0) != kSuccess) break;  // kErrorTimeout: none left
      if ((data.eventType & nvml::kEventTypeXidCriticalError) == 0) continue;
      auto it = indexOf.find(data.device);
      if (it != indexOf.end()) out[it->second].push_back({data.eventData, now});
    }
    return out;
  }

  GpuSample sample(size_t at, SampleTime now) {
    const Gpu& gpu = topology.gpus[at];
    GpuSample s;
    s.index = gpu.index;
    s.uuid = uuids[at];
    s.pci = gpu.pci.str();
    s.time = now;
    if (!session.ok()) {
      s.error = session.why();
      return s;
    }
    Device dev = devices[at];
    if (dev == nullptr) {
      s.error = "NVML does not list the GPU at " + s.pci +
                ": it may have fallen off the bus (see `nvidia-smi` and the kernel log for XID 79)";
      return s;
    }
    std::vector<std::string> errors;
    if (!setup[at].empty()) errors.push_back(setup[at]);
    // NOT_SUPPORTED: this GPU has no such counter, and the value stays empty without a word.
    auto check = [&](const char* what, const char* fn, auto call, auto&& use) {
      if (call == nullptr) {
        errors.push_back(std::string(what) + ": this driver lacks " + fn);
        return;
      }
      Return r = use();
      if (r != kSuccess && r != nvml::kErrorNotSupported)
        errors.push_back(std::string(what) + ": " + fn + " failed: " + session.errorText(r));
    };
    check("utilization", "nvmlDeviceGetUtilizationRates", calls.utilization, [&] {
      nvml::Utilization u{};
      Return r = calls.utilization(dev, &u);
      if (r == kSuccess) {
        s.sm_utilization = u.gpu / 100.0;
        s.memory_utilization = u.memory / 100.0;
      }
      return r;
    });
    check("memory", "nvmlDeviceGetMemoryInfo", calls.memory, [&] {
      nvml::Memory m{};
      Return r = calls.memory(dev, &m);
      if (r == kSuccess) {
        s.memory_used_bytes = m.used;
        s.memory_total_bytes = m.total;
      }
      return r;
    });
    check("temperature", "nvmlDeviceGetTemperature", calls.temperature, [&] {
      unsigned celsius = 0;
      Return r = calls.temperature(dev, nvml::kTemperatureGpu, &celsius);
      if (r == kSuccess) s.temperature_c = celsius;
      return r;
    });
    check("power", "nvmlDeviceGetPowerUsage", calls.power, [&] {
      unsigned milliwatts = 0;
      Return r = calls.power(dev, &milliwatts);
      if (r == kSuccess) s.power_w = milliwatts / 1000.0;
      return r;
    });
    check("energy", "nvmlDeviceGetTotalEnergyConsumption", calls.energy, [&] {
      unsigned long long millijoules = 0;
      Return r = calls.energy(dev, &millijoules);
      if (r == kSuccess) s.energy_mj = millijoules;
      return r;
    });
    check("ECC", "nvmlDeviceGetTotalEccErrors", calls.ecc, [&] {
      unsigned long long count = 0;
      Return r = calls.ecc(dev, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &count);
      if (r == kSuccess) s.ecc_uncorrected_volatile = count;
      return r;
    });
    check("retired pages", "nvmlDeviceGetRetiredPagesPendingStatus", calls.retired_pending, [&] {
      int pending = 0;
      Return r = calls.retired_pending(dev, &pending);
      if (r == kSuccess) s.retired_pages_pending = pending != 0;
      return r;
    });
    check("row remapping", "nvmlDeviceGetRemappedRows", calls.remapped, [&] {
      unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
      Return r = calls.remapped(dev, &corrected, &uncorrected, &pending, &failed);
      if (r == kSuccess) s.remapping_failure = failed != 0;
      return r;
    });
    if (calls.processes != nullptr) {
      check("processes", "nvmlDeviceGetComputeRunningProcesses_v3", calls.processes,
            [&] { return listProcesses(calls.processes, dev, s.processes); });
    } else {
      check("processes", "nvmlDeviceGetComputeRunningProcesses", calls.processes_v1,
            [&] { return listProcesses(calls.processes_v1, dev, s.processes); });
    }
    for (std::string& e : errors) s.error += (s.error.empty() ? "" : "; ") + e;
    return s;
  }
};

TelemetrySampler::TelemetrySampler(const NodeTopology& topology, std::string sysfs_root)
    : impl_(std::make_unique<Impl>(topology, std::move(sysfs_root))) {}

TelemetrySampler::~TelemetrySampler() = default;

std::vector<std::optional<MigState>> TelemetrySampler::mig() const {
  std::vector<std::optional<MigState>> out(impl_->devices.size());
  if (!impl_->session.ok()) return out;
  for (size_t i = 0; i < impl_->devices.size(); ++i)
    if (impl_->devices[i] != nullptr) out[i] = detail::queryMig(impl_->session, impl_->devices[i]);
  return out;
}

std::string TelemetrySampler::applyMigLayout(size_t gpu, const std::vector<std::string>& profiles) {
  if (!impl_->session.ok()) return "NVML is not open here: " + impl_->session.why();
  if (gpu >= impl_->devices.size() || impl_->devices[gpu] == nullptr)
    return "NVML does not list GPU " + std::to_string(gpu) + " of this node";
  return detail::applyMigLayout(impl_->session, impl_->devices[gpu], profiles);
}

bool TelemetrySampler::nvmlOk() const {
  return impl_->session.ok();
}

const std::string& TelemetrySampler::nvmlWhy() const {
  return impl_->session.why();
}

std::vector<GpuSample> TelemetrySampler::gpus() {
  SampleTime now = std::chrono::system_clock::now();
  std::map<size_t, std::vector<XidEvent>> xids = impl_->drainEvents(now);
  std::vector<GpuSample> out;
  out.reserve(impl_->topology.gpus.size());
  for (size_t at = 0; at < impl_->topology.gpus.size(); ++at) {
    GpuSample s = impl_->sample(at, now);
    if (auto it = xids.find(at); it != xids.end()) s.xid_events = std::move(it->second);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<NicPortSample> TelemetrySampler::nics() const {
  SampleTime now = std::chrono::system_clock::now();
  std::filesystem::path classDir = impl_->sysfs_root / "sys" / "class" / "infiniband";
  std::vector<NicPortSample> out;
  for (const Nic& nic : impl_->topology.nics) {
    std::vector<int> ports;
    for (const NicPort& p : nic.ports) ports.push_back(p.port);
    if (ports.empty()) ports.push_back(1);
    for (int port : ports) {
      NicPortSample s;
      s.nic = nic.name;
      s.port = port;
      s.time = now;
      std::filesystem::path dir = classDir / nic.name / "ports" / std::to_string(port);
      if (auto state = common::readAttributeFile(dir / "state", common::kSysfsFileLimit, false))
        s.state = portStateFromString(*state);
      if (auto rate = common::readAttributeFile(dir / "rate", common::kSysfsFileLimit, false))
        s.rate_gbps = parseRateGbps(*rate);
      out.push_back(std::move(s));
    }
  }
  return out;
}

bool xidFailsGpu(uint64_t xid) {
  return xid == 48 || xid == 79;
}

}  // namespace poolrun::topo
