#include "poolrun/topo/nvml_session.hpp"

namespace poolrun::topo::nvml {

Session::Session() : lib_("libnvidia-ml.so.1") {
  if (!lib_) {
    why_ = "NVML (libnvidia-ml.so.1) is not installed: no NVIDIA driver on this node";
    return;
  }
  auto init = get<Return()>("nvmlInit_v2");
  if (init == nullptr || get<Return(unsigned*)>("nvmlDeviceGetCount_v2") == nullptr ||
      get<Return(unsigned, Device*)>("nvmlDeviceGetHandleByIndex_v2") == nullptr) {
    why_ = "NVML is too old (no nvmlInit_v2 or nvmlDeviceGetCount_v2)";
    return;
  }
  if (Return r = init(); r != kSuccess) {
    why_ = "NVML failed to initialise (" + errorText(r) + "): is the NVIDIA driver loaded?";
    return;
  }
  initialised_ = true;
}

Session::~Session() {
  if (!initialised_) return;
  if (auto shutdown = get<Return()>("nvmlShutdown")) shutdown();
}

std::vector<Session::Gpu> Session::gpus() const {
  std::vector<Gpu> out;
  if (!initialised_) return out;
  auto count = get<Return(unsigned*)>("nvmlDeviceGetCount_v2");
  auto byIndex = get<Return(unsigned, Device*)>("nvmlDeviceGetHandleByIndex_v2");
  auto pciInfo = get<Return(Device, PciInfo*)>("nvmlDeviceGetPciInfo_v3");
  if (pciInfo == nullptr) pciInfo = get<Return(Device, PciInfo*)>("nvmlDeviceGetPciInfo_v2");
  unsigned n = 0;
  if (count(&n) != kSuccess) return out;
  for (unsigned i = 0; i < n; ++i) {
    Gpu g;
    if (byIndex(i, &g.device) != kSuccess) continue;
    PciInfo pci{};
    if (pciInfo != nullptr && pciInfo(g.device, &pci) == kSuccess) g.bus_id = pci.busId;
    out.push_back(std::move(g));
  }
  return out;
}

std::string Session::errorText(Return r) const {
  std::string code = "NVML error " + std::to_string(r);
  auto text = get<const char*(Return)>("nvmlErrorString");
  const char* said = text != nullptr ? text(r) : nullptr;
  return said != nullptr && *said != '\0' ? std::string(said) + " (" + code + ")" : code;
}

}  // namespace poolrun::topo::nvml
