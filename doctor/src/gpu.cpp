// GPU health from NVML: persistence mode, uncorrected ECC errors, retired pages and row remapping,
// clocks held down by the hardware, and NVLinks down.

#include <fmt/format.h>

#include "checks.hpp"
#include "poolrun/topo/dynamic_library.hpp"

namespace poolrun::doctor {
namespace detail {
namespace {

// NVML clocks event reasons that mean the hardware is protecting itself (nvml.h names them
// HwSlowdown, SwThermalSlowdown, HwThermalSlowdown, HwPowerBrakeSlowdown).
constexpr uint64_t kHwSlowdown = 0x8;
constexpr uint64_t kSwThermal = 0x20;
constexpr uint64_t kHwThermal = 0x40;
constexpr uint64_t kPowerBrake = 0x80;

std::string throttleNames(uint64_t reasons) {
  std::string out;
  for (auto [bit, name] :
       {std::pair{kHwSlowdown, "hardware slowdown"}, std::pair{kSwThermal, "software thermal"},
        std::pair{kHwThermal, "hardware thermal"}, std::pair{kPowerBrake, "power brake"}}) {
    if ((reasons & bit) != 0) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

}  // namespace

void checkGpus(GpuQuery& query, Report& report) {
  std::string why;
  auto gpus = query.health(why);
  if (!gpus) {
    report.add({"gpu", Status::kSkip, "node", why, "", ""});
    return;
  }
  if (gpus->empty()) {
    report.add({"gpu", Status::kSkip, "node", "NVML sees no GPU", "", ""});
    return;
  }
  for (const GpuHealth& g : *gpus) {
    std::string subject = fmt::format("GPU{} {}", g.index, g.pci);
    if (g.persistence) {
      Check c{"gpu.persistence",
              *g.persistence ? Status::kPass : Status::kWarn,
              subject,
              *g.persistence ? "persistence mode on" : "persistence mode off",
              "",
              ""};
      if (!*g.persistence)
        c.fix =
            "every job start pays the driver's initialisation: nvidia-smi -pm 1 (or run nvidia-persistenced)";
      report.add(c);
    }
    if (g.ecc_uncorrected) {
      Check c{"gpu.ecc",
              *g.ecc_uncorrected == 0 ? Status::kPass : Status::kFail,
              subject,
              fmt::format("{} uncorrected ECC error{} since the driver loaded", *g.ecc_uncorrected,
                          *g.ecc_uncorrected == 1 ? "" : "s"),
              "",
              ""};
      if (*g.ecc_uncorrected != 0)
        c.fix = "drain the node and reset the GPU (nvidia-smi -r); replace it if errors return";
      report.add(c);
    }
    if (g.row_remap_failed.value_or(false)) {
      report.add({"gpu.retired_pages", Status::kFail, subject, "a row remapping failed",
                  "the GPU's memory cannot be repaired: drain the node and replace the GPU", ""});
    } else if (g.row_remap_pending.value_or(false) || g.retired_pages_pending.value_or(false)) {
      report.add({"gpu.retired_pages", Status::kWarn, subject,
                  g.row_remap_pending.value_or(false) ? "a row remapping is pending"
                                                      : "a page retirement is pending",
                  "reset the GPU (nvidia-smi -r) or reboot to apply it", ""});
    } else if (g.row_remap_pending || g.retired_pages_pending) {
      report.add({"gpu.retired_pages", Status::kPass, subject, "no pending page retirement or row remapping",
                  "", ""});
    }
    if (g.clock_event_reasons) {
      std::string names = throttleNames(*g.clock_event_reasons);
      Check c{"gpu.clocks",
              names.empty() ? Status::kPass : Status::kWarn,
              subject,
              fmt::format("clocks event reasons 0x{:x}{}", *g.clock_event_reasons,
                          names.empty() ? "" : " (" + names + ")"),
              "",
              ""};
      if (!names.empty())
        c.fix = "the GPU holds its clocks down: check cooling, power supply and nvidia-smi -q -d PERFORMANCE";
      report.add(c);
    }
    if (g.nvlinks_up + g.nvlinks_down > 0) {
      Check c{
          "gpu.nvlink",
          g.nvlinks_down == 0 ? Status::kPass : Status::kWarn,
          subject,
          fmt::format("{} NVLink{} up, {} down", g.nvlinks_up, g.nvlinks_up == 1 ? "" : "s", g.nvlinks_down),
          "",
          ""};
      if (g.nvlinks_down != 0)
        c.fix =
            "NCCL routes over fewer links: check nvidia-smi nvlink -s and the fabric manager; reset or drain";
      report.add(c);
    }
  }
}

}  // namespace detail

namespace {

// The slice of NVML's C ABI used here.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kMaxNvLinks = 18;
constexpr int kUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatile = 0;     // NVML_VOLATILE_ECC
struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

class NvmlGpuQuery final : public GpuQuery {
 public:
  std::optional<std::vector<GpuHealth>> health(std::string& why) override {
    topo::DynamicLibrary lib("libnvidia-ml.so.1");
    if (!lib) {
      why = "no NVML (libnvidia-ml.so.1): no NVIDIA driver on this node";
      return std::nullopt;
    }
    auto init = lib.get<NvmlReturn()>("nvmlInit_v2");
    auto shutdown = lib.get<NvmlReturn()>("nvmlShutdown");
    auto count = lib.get<NvmlReturn(unsigned*)>("nvmlDeviceGetCount_v2");
    auto byIndex = lib.get<NvmlReturn(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
    auto pciInfo = lib.get<NvmlReturn(NvmlDevice, NvmlPciInfo*)>("nvmlDeviceGetPciInfo_v3");
    auto persistence = lib.get<NvmlReturn(NvmlDevice, int*)>("nvmlDeviceGetPersistenceMode");
    auto ecc = lib.get<NvmlReturn(NvmlDevice, int, int, unsigned long long*)>("nvmlDeviceGetTotalEccErrors");
    auto retiredPending = lib.get<NvmlReturn(NvmlDevice, int*)>("nvmlDeviceGetRetiredPagesPendingStatus");
    auto remapped = lib.get<NvmlReturn(NvmlDevice, unsigned*, unsigned*, unsigned*, unsigned*)>(
        "nvmlDeviceGetRemappedRows");
    auto reasons =
        lib.get<NvmlReturn(NvmlDevice, unsigned long long*)>("nvmlDeviceGetCurrentClocksEventReasons");
    if (reasons == nullptr)
      reasons =
          lib.get<NvmlReturn(NvmlDevice, unsigned long long*)>("nvmlDeviceGetCurrentClocksThrottleReasons");
    auto linkState = lib.get<NvmlReturn(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkState");
    if (init == nullptr || count == nullptr || byIndex == nullptr) {
      why = "NVML is too old (no nvmlInit_v2)";
      return std::nullopt;
    }
    if (NvmlReturn r = init(); r != kNvmlSuccess) {
      why = fmt::format("NVML failed to initialise (error {}): is the NVIDIA driver loaded?", r);
      return std::nullopt;
    }
    std::vector<GpuHealth> out;
    unsigned n = 0;
    if (count(&n) == kNvmlSuccess) {
      for (unsigned i = 0; i < n; ++i) {
        NvmlDevice dev = nullptr;
        if (byIndex(i, &dev) != kNvmlSuccess) continue;
        GpuHealth g;
        g.index = static_cast<int>(i);
        NvmlPciInfo pci{};
        if (pciInfo != nullptr && pciInfo(dev, &pci) == kNvmlSuccess) g.pci = pci.busId;
        int flag = 0;
        if (persistence != nullptr && persistence(dev, &flag) == kNvmlSuccess) g.persistence = flag != 0;
        unsigned long long errors = 0;
        if (ecc != nullptr && ecc(dev, kUncorrected, kVolatile, &errors) == kNvmlSuccess)
          g.ecc_uncorrected = errors;
        if (retiredPending != nullptr && retiredPending(dev, &flag) == kNvmlSuccess)
          g.retired_pages_pending = flag != 0;
        unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
        if (remapped != nullptr &&
            remapped(dev, &corrected, &uncorrected, &pending, &failed) == kNvmlSuccess) {
          g.row_remap_pending = pending != 0;
          g.row_remap_failed = failed != 0;
        }
        unsigned long long bits = 0;
        if (reasons != nullptr && reasons(dev, &bits) == kNvmlSuccess) g.clock_event_reasons = bits;
        for (unsigned l = 0; linkState != nullptr && l < kMaxNvLinks; ++l) {
          int active = 0;
          if (linkState(dev, l, &active) != kNvmlSuccess) continue;  // the link does not exist
          ++(active != 0 ? g.nvlinks_up : g.nvlinks_down);
        }
        out.push_back(std::move(g));
      }
    }
    if (shutdown != nullptr) shutdown();
    return out;
  }
};

}  // namespace

std::unique_ptr<GpuQuery> nvmlGpuQuery() {
  return std::make_unique<NvmlGpuQuery>();
}

}  // namespace poolrun::doctor
