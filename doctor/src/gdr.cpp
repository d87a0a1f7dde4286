// GPUDirect RDMA: the peer-memory module (or dma-buf), PCIe ACS on the bridges between each GPU
// and its NIC, and IOMMU translation.

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "checks.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/doctor/pci_config.hpp"

namespace poolrun::doctor::detail {
namespace fs = std::filesystem;
namespace {

fs::path pciDevice(const Roots& roots, const topo::PciAddress& pci) {
  return roots.sys / "bus" / "pci" / "devices" / pci.str();
}

// The PCI functions from the root port down to `pci` (the device last), from the device's place
// under /sys/devices; empty where the tree does not say.
std::vector<std::pair<topo::PciAddress, fs::path>> pciChain(const Roots& roots, const topo::PciAddress& pci) {
  std::error_code ec;
  fs::path real = fs::canonical(pciDevice(roots, pci), ec);
  if (ec) return {};
  std::vector<std::pair<topo::PciAddress, fs::path>> chain;
  fs::path sofar;
  for (const fs::path& part : real) {
    sofar /= part;
    if (auto a = topo::PciAddress::parse(part.string())) chain.emplace_back(*a, sofar);
  }
  if (chain.empty() || chain.back().first != pci) return {};
  return chain;
}

std::string modulesLoaded(const Roots& roots) {
  std::string found;
  for (const char* module : {"nvidia_peermem", "nv_peer_mem"}) {
    if (auto modules = readText(roots.proc / "modules")) {
      std::istringstream lines(*modules);
      std::string line;
      while (std::getline(lines, line)) {
        if (line.substr(0, line.find(' ')) == module)
          return fmt::format("{} loaded ({})", module, (roots.proc / "modules").string());
      }
    }
    std::error_code ec;
    if (fs::is_directory(roots.sys / "module" / module, ec))
      return fmt::format("{} loaded ({})", module, (roots.sys / "module" / module).string());
  }
  return found;
}

// "6.1.0-18-amd64" -> {6, 1}
std::pair<int, int> kernelVersion(const std::string& release) {
  int major = 0, minor = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &major, &minor) != 2) return {0, 0};
  return {major, minor};
}

// The NVIDIA driver's major version in /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open
// Kernel Module for x86_64  550.54.15  Release Build"): after "Module", text without digits, the
// architecture if any, white space, then major.minor; 0 where no "Module" is followed so.
int driverMajorVersion(std::string_view text) {
  constexpr auto npos = std::string_view::npos;
  for (size_t at = text.find("Module"); at != npos; at = text.find("Module", at + 1)) {
    std::string_view rest = text.substr(at + 6);
    size_t digit = rest.find_first_of("0123456789");
    if (digit == npos || digit == 0) continue;
    // The first digit is the version's, after white space, or in the architecture's name.
    std::string_view version = rest.substr(digit - 1);
    if (!common::isSpace(rest[digit - 1])) {
      version = {};
      for (std::string_view arch : {"x86_64", "aarch64", "ppc64le"}) {
        size_t letters = arch.find_first_of("0123456789");
        if (digit >= letters && rest.substr(digit - letters).starts_with(arch))
          version = rest.substr(digit - letters + arch.size());
      }
    }
    std::string_view major;
    if (common::takeSpace(version).empty() || (major = common::takeDigits(version)).empty() ||
        !common::takePrefix(version, ".") || common::takeDigits(version).empty())
      continue;
    return common::digitsValue(major);
  }
  return 0;
}

void checkPeerMemory(const Roots& roots, Report& report) {
  Check c{"gdr.peermem", Status::kPass, "node", modulesLoaded(roots), "", ""};
  if (!c.evidence.empty()) {
    report.add(c);
    return;
  }
  std::string release = readText(roots.proc / "sys" / "kernel" / "osrelease").value_or("");
  std::string driver = readText(roots.proc / "driver" / "nvidia" / "version").value_or("");
  auto [kmajor, kminor] = kernelVersion(release);
  bool kernelDmabuf = kmajor > 5 || (kmajor == 5 && kminor >= 12);
  bool openModule = driver.find("Open Kernel Module") != std::string::npos;
  int driverMajor = driverMajorVersion(driver);
  if (kernelDmabuf && openModule && driverMajor >= 515) {
    c.evidence = fmt::format("no peer-memory module, but dma-buf: kernel {}, NVIDIA open kernel module {}",
                             release, driverMajor);
    report.add(c);
    return;
  }
  c.status = Status::kWarn;
  std::string why =
      driver.empty()  ? "no NVIDIA driver version in " + (roots.proc / "driver/nvidia/version").string()
      : !openModule   ? "the NVIDIA driver is the proprietary module (no dma-buf)"
      : !kernelDmabuf ? fmt::format("kernel {} is older than 5.12 (no dma-buf)", release)
                      : fmt::format("NVIDIA driver {} is older than 515 (no dma-buf)", driverMajor);
  c.evidence = fmt::format("neither nvidia_peermem nor nv_peer_mem is loaded ({}); {}",
                           (roots.proc / "modules").string(), why);
  c.fix =
      "GPUDirect RDMA is off and NCCL stages through host memory: modprobe nvidia_peermem (and load it at "
      "boot)";
  report.add(c);
}

void checkAcs(const Roots& roots, const std::vector<std::pair<topo::PciAddress, std::string>>& pairs,
              const std::map<std::string, topo::PciAddress>& nicPci, Report& report) {
  std::map<topo::PciAddress, fs::path> bridges;     // every bridge between a GPU and its NIC
  std::map<topo::PciAddress, std::string> between;  // bridge -> "GPU ... and NIC"
  std::vector<std::string> unknownPaths;
  for (const auto& [gpu, nic] : pairs) {
    auto nicAt = nicPci.find(nic);
    if (nicAt == nicPci.end()) continue;
    auto a = pciChain(roots, gpu);
    auto b = pciChain(roots, nicAt->second);
    if (a.empty() || b.empty()) {
      unknownPaths.push_back(gpu.str() + "-" + nic);
      continue;
    }
    size_t common = 0;
    while (common < a.size() && common < b.size() && a[common].first == b[common].first) ++common;
    for (const auto* chain : {&a, &b}) {
      for (size_t i = common; i + 1 < chain->size(); ++i) {
        bridges.emplace((*chain)[i].first, (*chain)[i].second);
        between.emplace((*chain)[i].first, "GPU " + gpu.str() + " and " + nic);
      }
    }
  }
  if (!unknownPaths.empty()) {
    report.add(
        {"gdr.acs", Status::kWarn, unknownPaths.front() + (unknownPaths.size() > 1 ? " and others" : ""),
         fmt::format("the PCI path of {} GPU-NIC pair{} is unknown ({} is not a link into /sys/devices)",
                     unknownPaths.size(), unknownPaths.size() > 1 ? "s" : "",
                     (roots.sys / "bus/pci/devices").string()),
         "check the bridges by hand: lspci -vvv | grep -A2 'Access Control'", ""});
  }
  int redirecting = 0;
  std::vector<std::string> unreadable;
  for (const auto& [bdf, dir] : bridges) {
    fs::path config = dir / "config";
    std::vector<uint8_t> bytes = readBytes(config, kExtendedConfigSize);
    AcsResult acs = findAcs(bytes);
    if (acs.lookup == AcsLookup::kUnreadable) {
      unreadable.push_back(fmt::format("{} ({} bytes)", bdf.str(), bytes.size()));
      continue;
    }
    if (acs.lookup == AcsLookup::kFound && acs.acs.redirectsPeerToPeer()) {
      ++redirecting;
      report.add(
          {"gdr.acs", Status::kFail, bdf.str(),
           fmt::format("ACS control 0x{:04x} at 0x{:x}: {}; between {} ({})", acs.acs.control,
                       acs.acs.offset + 6, acs.acs.describeControl(), between[bdf], config.string()),
           fmt::format("peer-to-peer traffic goes up to the CPU and GPUDirect RDMA can hang: setpci -s {} "
                       "ECAP_ACS+0x6.w=0000 (at every boot), or turn ACS off in the BIOS",
                       bdf.str()),
           ""});
    }
  }
  if (!unreadable.empty()) {
    report.add({"gdr.acs", Status::kWarn,
                fmt::format("{} bridge{}", unreadable.size(), unreadable.size() > 1 ? "s" : ""),
                fmt::format("cannot read the extended configuration space of {}{}: it needs root",
                            unreadable.front(),
                            unreadable.size() > 1 ? fmt::format(" and {} more", unreadable.size() - 1) : ""),
                "run `sudo poolrun doctor` to check PCIe ACS", ""});
  }
  if (redirecting == 0 && bridges.size() > unreadable.size()) {
    report.add({"gdr.acs", Status::kPass,
                fmt::format("{} bridge{}", bridges.size() - unreadable.size(),
                            bridges.size() - unreadable.size() > 1 ? "s" : ""),
                "no ACS redirect between any GPU and its NIC", "", ""});
  } else if (bridges.empty() && unknownPaths.empty() && !pairs.empty()) {
    report.add({"gdr.acs", Status::kPass, "node", "no PCI bridge between the GPUs and their NICs", "", ""});
  }
}

void checkIommu(const Roots& roots, const std::set<topo::PciAddress>& devices, Report& report) {
  std::vector<std::string> translated;
  std::set<std::string> modes;
  for (const topo::PciAddress& pci : devices) {
    fs::path group = pciDevice(roots, pci) / "iommu_group";
    std::error_code ec;
    if (!fs::exists(group, ec)) {
      modes.insert("no IOMMU group");
      continue;
    }
    std::string type = readText(group / "type").value_or("unknown");
    modes.insert(type);
    if (type.starts_with("DMA"))
      translated.push_back(
          fmt::format("{} (group {}: {})", pci.str(), fs::read_symlink(group, ec).filename().string(), type));
  }
  if (devices.empty()) return;
  if (translated.empty()) {
    std::string list;
    for (const std::string& m : modes) list += (list.empty() ? "" : ", ") + m;
    report.add({"gdr.iommu", Status::kPass, fmt::format("{} devices", devices.size()),
                "IOMMU does not translate GPU or NIC DMA (" + list + ")", "", ""});
    return;
  }
  std::string list;
  for (size_t i = 0; i < translated.size() && i < 3; ++i) list += (i == 0 ? "" : ", ") + translated[i];
  if (translated.size() > 3) list += fmt::format(" and {} more", translated.size() - 3);
  report.add(
      {"gdr.iommu", Status::kWarn, fmt::format("{} of {} devices", translated.size(), devices.size()),
       "the IOMMU translates DMA of " + list,
       "peer-to-peer DMA between GPU and NIC then goes through the IOMMU (slow, or blocked): boot with "
       "iommu=pt (intel_iommu=on iommu=pt / amd_iommu=on iommu=pt)",
       ""});
}

}  // namespace

std::vector<topo::PciAddress> pciGpus(const Roots& roots) {
  std::vector<topo::PciAddress> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(roots.sys / "bus" / "pci" / "devices", ec)) {
    auto pci = topo::PciAddress::parse(entry.path().filename().string());
    if (!pci) continue;
    std::string vendor = readText(entry.path() / "vendor").value_or("");
    std::string cls = readText(entry.path() / "class").value_or("");
    if (vendor == "0x10de" && cls.starts_with("0x03")) out.push_back(*pci);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void checkGdr(const Roots& roots, const std::vector<topo::SysfsRdmaDevice>& devices, const Scope& scope,
              Report& report) {
  std::map<std::string, topo::PciAddress> nicPci;
  for (const topo::SysfsRdmaDevice& d : devices) {
    if (d.pci) nicPci[d.name] = *d.pci;
  }
  std::vector<std::pair<topo::PciAddress, std::string>> pairs;
  if (scope.planned) {
    for (const GdrPair& p : scope.gdr) pairs.emplace_back(p.gpu, p.nic);
    if (pairs.empty()) return;
  } else {
    std::vector<topo::PciAddress> gpus = pciGpus(roots);
    if (gpus.empty()) {
      report.add({"gdr", Status::kSkip, "node",
                  "no NVIDIA GPU on the PCI bus (" + (roots.sys / "bus/pci/devices").string() + ")", "", ""});
      return;
    }
    // GPUDirect RDMA only pays between a GPU and a NIC under one host bridge; NCCL does not use
    // it across the CPU by default (NCCL_NET_GDR_LEVEL).
    for (const topo::PciAddress& g : gpus) {
      auto gpuChain = pciChain(roots, g);
      for (const auto& [nic, pci] : nicPci) {
        auto nicChain = pciChain(roots, pci);
        bool unknown = gpuChain.empty() || nicChain.empty();
        if (unknown || gpuChain.front().second.parent_path() == nicChain.front().second.parent_path())
          pairs.emplace_back(g, nic);
      }
    }
  }
  checkPeerMemory(roots, report);
  checkAcs(roots, pairs, nicPci, report);
  std::set<topo::PciAddress> endpoints;
  for (const auto& [gpu, nic] : pairs) {
    endpoints.insert(gpu);
    if (auto it = nicPci.find(nic); it != nicPci.end()) endpoints.insert(it->second);
  }
  checkIommu(roots, endpoints, report);
}

}  // namespace poolrun::doctor::detail
