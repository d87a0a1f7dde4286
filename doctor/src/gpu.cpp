// GPU health from NVML: persistence mode, uncorrected ECC errors, retired pages and row remapping,
// clocks held down by the hardware, a MIG mode change waiting for a reset, MIG devices CUDA cannot
// open, and NVLinks down.

#include <fmt/format.h>

#include <algorithm>

#include "checks.hpp"
#include "poolrun/topo/nvml_session.hpp"

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
    if (g.mig_enabled && g.mig_pending) {
      const bool enabled = *g.mig_enabled, pending = *g.mig_pending;
      Check c{"gpu.mig", enabled == pending ? Status::kPass : Status::kWarn, subject, "", "", ""};
      if (enabled != pending) {
        c.evidence = fmt::format("MIG mode {} now, {} after the next GPU reset",
                                 enabled ? "enabled" : "disabled", pending ? "enabled" : "disabled");
        c.fix = fmt::format(
            "until the reset no whole-GPU request gets it: reset the GPU when it is idle "
            "(nvidia-smi -r -i {}) or reboot the node",
            g.index);
      } else {
        c.evidence = enabled ? fmt::format("MIG mode enabled, {} MIG device{}", g.mig_instances,
                                           g.mig_instances == 1 ? "" : "s")
                             : "MIG mode disabled";
      }
      report.add(c);
    }
    if (!g.mig_cuda.empty() || !g.mig_cuda_skipped.empty()) {
      std::vector<std::string> unseen;
      for (const auto& [uuid, said] : g.mig_cuda)
        if (!said.empty()) unseen.push_back(said);
      Check c{"gpu.mig_cuda", Status::kPass, subject, "", "", ""};
      if (!g.mig_cuda_skipped.empty()) {
        c.status = Status::kSkip;
        c.evidence = "CUDA not asked: " + g.mig_cuda_skipped;
      } else if (unseen.empty()) {
        c.evidence = fmt::format("CUDA opens each of its {} MIG device{}", g.mig_cuda.size(),
                                 g.mig_cuda.size() == 1 ? "" : "s");
      } else {
        c.status = Status::kFail;
        std::string list;
        for (const std::string& u : unseen) list += (list.empty() ? "" : "; ") + u;
        c.evidence = fmt::format("{} of its {} MIG devices that NVML lists CUDA cannot open: {}",
                                 unseen.size(), g.mig_cuda.size(), list);
        c.fix =
            "a job given such a device fails at its first CUDA call: check that nvidia-smi -L lists it and "
            "that the CUDA driver matches the kernel module (a driver update without a reboot), then make "
            "the layout again (poolctl mig NODE:GPU --profiles ...)";
      }
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

using topo::nvml::Device;
using topo::nvml::kSuccess;
using topo::nvml::Return;
constexpr int kUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatile = 0;     // NVML_VOLATILE_ECC

// What poolrun-cuda-probe says of each MIG device in `uuids`, into `g` (mig_cuda, or
// mig_cuda_skipped with why).
void askCuda(const std::string& probe, const std::vector<std::string>& uuids, GpuHealth& g) {
  if (uuids.empty()) return;
  std::vector<std::string> argv{probe};
  argv.insert(argv.end(), uuids.begin(), uuids.end());
  std::optional<std::string> out = processToolRunner()->run(argv);
  if (!out || out->starts_with("no CUDA driver")) {
    g.mig_cuda_skipped =
        !out ? probe + " could not be run (install it beside poolrun)" : out->substr(0, out->find('\n'));
    return;
  }
  for (const std::string& uuid : uuids) {
    const size_t at = out->find(uuid + ": ");
    if (at == std::string::npos) {
      g.mig_cuda[uuid] = uuid + ": " + probe + " said nothing of it";
      continue;
    }
    const size_t end = out->find('\n', at);
    const std::string line = out->substr(at, end == std::string::npos ? std::string::npos : end - at);
    g.mig_cuda[uuid] = line == uuid + ": ok" ? "" : line;
  }
}

class NvmlGpuQuery final : public GpuQuery {
 public:
  explicit NvmlGpuQuery(std::string probe) : probe_(std::move(probe)) {}

  std::optional<std::vector<GpuHealth>> health(std::string& why) override {
    topo::nvml::Session session;
    if (!session.ok()) {
      why = session.why();
      return std::nullopt;
    }
    auto persistence = session.get<Return(Device, int*)>("nvmlDeviceGetPersistenceMode");
    auto ecc = session.get<Return(Device, int, int, unsigned long long*)>("nvmlDeviceGetTotalEccErrors");
    auto retiredPending = session.get<Return(Device, int*)>("nvmlDeviceGetRetiredPagesPendingStatus");
    auto remapped =
        session.get<Return(Device, unsigned*, unsigned*, unsigned*, unsigned*)>("nvmlDeviceGetRemappedRows");
    auto reasons = session.get<Return(Device, unsigned long long*)>("nvmlDeviceGetCurrentClocksEventReasons");
    if (reasons == nullptr)
      reasons = session.get<Return(Device, unsigned long long*)>("nvmlDeviceGetCurrentClocksThrottleReasons");
    auto linkState = session.get<Return(Device, unsigned, int*)>("nvmlDeviceGetNvLinkState");
    auto migMode = session.get<Return(Device, unsigned*, unsigned*)>("nvmlDeviceGetMigMode");
    auto migCount = session.get<Return(Device, unsigned*)>("nvmlDeviceGetMaxMigDeviceCount");
    auto migByIndex = session.get<Return(Device, unsigned, Device*)>("nvmlDeviceGetMigDeviceHandleByIndex");
    auto getUuid = session.get<Return(Device, char*, unsigned)>("nvmlDeviceGetUUID");
    std::vector<GpuHealth> out;
    int index = 0;
    for (const topo::nvml::Session::Gpu& found : session.gpus()) {
      Device dev = found.device;
      GpuHealth g;
      g.index = index++;
      g.pci = found.bus_id;
      int flag = 0;
      if (persistence != nullptr && persistence(dev, &flag) == kSuccess) g.persistence = flag != 0;
      unsigned long long errors = 0;
      if (ecc != nullptr && ecc(dev, kUncorrected, kVolatile, &errors) == kSuccess)
        g.ecc_uncorrected = errors;
      if (retiredPending != nullptr && retiredPending(dev, &flag) == kSuccess)
        g.retired_pages_pending = flag != 0;
      unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
      if (remapped != nullptr && remapped(dev, &corrected, &uncorrected, &pending, &failed) == kSuccess) {
        g.row_remap_pending = pending != 0;
        g.row_remap_failed = failed != 0;
      }
      unsigned long long bits = 0;
      if (reasons != nullptr && reasons(dev, &bits) == kSuccess) g.clock_event_reasons = bits;
      unsigned current = 0, next = 0;
      if (migMode != nullptr && migMode(dev, &current, &next) == kSuccess) {
        g.mig_enabled = current == topo::nvml::kMigEnable;
        g.mig_pending = next == topo::nvml::kMigEnable;
        unsigned most = 0;
        if (*g.mig_enabled && migCount != nullptr && migByIndex != nullptr &&
            migCount(dev, &most) == kSuccess) {
          std::vector<std::string> uuids;
          for (unsigned i = 0; i < std::min(most, 64u); ++i) {  // an upper bound: indexes may be empty
            Device mig = nullptr;
            if (migByIndex(dev, i, &mig) != kSuccess) continue;
            ++g.mig_instances;
            char uuid[96] = {};
            if (getUuid != nullptr && getUuid(mig, uuid, sizeof uuid) == kSuccess && uuid[0] != '\0')
              uuids.emplace_back(uuid);
          }
          askCuda(probe_, uuids, g);
        }
      }
      for (unsigned l = 0; linkState != nullptr && l < topo::nvml::kMaxNvLinks; ++l) {
        int active = 0;
        if (linkState(dev, l, &active) != kSuccess) continue;  // the link does not exist
        ++(active != 0 ? g.nvlinks_up : g.nvlinks_down);
      }
      out.push_back(std::move(g));
    }
    return out;
  }

 private:
  std::string probe_;
};

}  // namespace

std::unique_ptr<GpuQuery> nvmlGpuQuery(std::string cudaProbe) {
  return std::make_unique<NvmlGpuQuery>(std::move(cudaProbe));
}

}  // namespace poolrun::doctor
