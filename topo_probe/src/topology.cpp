#include "poolrun/topo/topology.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <limits>
#include <numeric>
#include <utility>

#include "poolrun/common/text.hpp"

namespace poolrun::topo {
namespace {

template <typename T>
bool parseHex(std::string_view text, T& out) {
  if (text.empty()) return false;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (ec != std::errc() || end != text.data() + text.size() || value > std::numeric_limits<T>::max())
    return false;
  out = static_cast<T>(value);
  return true;
}

}  // namespace

std::optional<PciAddress> PciAddress::parse(std::string_view text) {
  // [domain:]bus:device.function
  PciAddress a;
  size_t dot = text.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  std::string_view head = text.substr(0, dot);
  uint8_t fn = 0;
  if (!parseHex(text.substr(dot + 1), fn) || fn > 7) return std::nullopt;
  size_t c2 = head.rfind(':');
  if (c2 == std::string_view::npos) return std::nullopt;
  if (!parseHex(head.substr(c2 + 1), a.device) || a.device > 31) return std::nullopt;
  head = head.substr(0, c2);
  size_t c1 = head.rfind(':');
  std::string_view bus = c1 == std::string_view::npos ? head : head.substr(c1 + 1);
  if (!parseHex(bus, a.bus) || bus.size() > 2) return std::nullopt;
  if (c1 != std::string_view::npos) {
    std::string_view dom = head.substr(0, c1);
    // NCCL writes 64-bit domains for virtual devices; keep the low 32 bits of long ones.
    if (dom.size() > 8) {
      if (dom.size() > 16) return std::nullopt;
      dom = dom.substr(dom.size() - 8);
    }
    if (!parseHex(dom, a.domain)) return std::nullopt;
  }
  a.function = fn;
  return a;
}

std::string PciAddress::str() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, device, function);
  return buf;
}

std::string Path::str() const {
  switch (type) {
    case PathType::kNVLink:
      return "NV" + std::to_string(nvlinks);
    case PathType::kPIX:
      return "PIX";
    case PathType::kPXB:
      return "PXB";
    case PathType::kPHB:
      return "PHB";
    case PathType::kNODE:
      return "NODE";
    case PathType::kSYS:
      return "SYS";
  }
  return "SYS";
}

std::optional<Path> Path::parse(std::string_view text) {
  if (text == "PIX") return Path{PathType::kPIX};
  if (text == "PXB") return Path{PathType::kPXB};
  if (text == "PHB") return Path{PathType::kPHB};
  if (text == "NODE") return Path{PathType::kNODE};
  if (text == "SYS") return Path{PathType::kSYS};
  if (text.starts_with("NV") && text.size() > 2) {
    int n = 0;
    auto [end, ec] = std::from_chars(text.data() + 2, text.data() + text.size(), n);
    if (ec == std::errc() && end == text.data() + text.size() && n > 0) return Path{PathType::kNVLink, n};
  }
  return std::nullopt;
}

Path NodeTopology::pciPath(const PciPlacement& a, const PciPlacement& b) const {
  // Switch chains from the device upwards; the number of switches on the path decides PIX / PXB.
  auto chain = [this](size_t s) {
    std::vector<size_t> out;
    for (int guard = 0; s != kNoIndex && guard < 64; ++guard) {
      out.push_back(s);
      s = switches[s].parent;
    }
    return out;
  };
  std::vector<size_t> ca = chain(a.switch_index), cb = chain(b.switch_index);
  for (size_t i = 0; i < ca.size(); ++i) {
    for (size_t j = 0; j < cb.size(); ++j) {
      if (cb[j] == ca[i]) return Path{i + j == 0 ? PathType::kPIX : PathType::kPXB};
    }
  }
  if (a.host_bridge != kNoIndex && a.host_bridge == b.host_bridge) return Path{PathType::kPHB};
  if (a.numa != kNone && a.numa == b.numa) {
    // Without host bridges (NCCL XML) the CPU is the only thing in between.
    bool bridgesKnown = a.host_bridge != kNoIndex && b.host_bridge != kNoIndex;
    return Path{bridgesKnown ? PathType::kNODE : PathType::kPHB};
  }
  return Path{PathType::kSYS};
}

Path NodeTopology::gpuToGpu(size_t a, size_t b) const {
  const Gpu& ga = gpus[a];
  const Gpu& gb = gpus[b];
  int direct = 0;
  for (const NvLinkPeer& p : ga.nvlinks) {
    if (p.gpu == b) direct += p.count;
  }
  int viaSwitch = std::min(ga.nvswitch_links, gb.nvswitch_links);
  if (direct + viaSwitch > 0) return Path{PathType::kNVLink, std::max(direct, viaSwitch)};
  return pciPath(ga.at, gb.at);
}

Path NodeTopology::gpuToNic(size_t gpu, size_t nic) const {
  return pciPath(gpus[gpu].at, nics[nic].at);
}

Path NodeTopology::nicToNic(size_t a, size_t b) const {
  return pciPath(nics[a].at, nics[b].at);
}

CpuSet NodeTopology::allCpus() const {
  CpuSet all;
  for (const Package& p : packages) all = all | p.cpus;
  for (const NumaNode& n : numa_nodes) all = all | n.cpus;
  return all;
}

std::vector<CpuSet> NodeTopology::coresOrCpus() const {
  if (!cores.empty()) return cores;
  std::vector<CpuSet> out;
  CpuSet all = allCpus();
  for (unsigned cpu : all.cpus()) out.push_back(CpuSet({cpu}));
  return out;
}

const NumaNode* NodeTopology::numaNode(int os_index) const {
  for (const NumaNode& n : numa_nodes) {
    if (n.os_index == os_index) return &n;
  }
  return nullptr;
}

const Nic* NodeTopology::nicByName(const std::string& name) const {
  for (const Nic& n : nics) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

void NodeTopology::normalize() {
  std::vector<size_t> order(gpus.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [this](size_t x, size_t y) { return gpus[x].pci < gpus[y].pci; });
  std::vector<size_t> newIndex(gpus.size());
  std::vector<Gpu> sorted;
  for (size_t i = 0; i < order.size(); ++i) {
    newIndex[order[i]] = i;
    sorted.push_back(std::move(gpus[order[i]]));
  }
  gpus = std::move(sorted);
  for (size_t i = 0; i < gpus.size(); ++i) {
    gpus[i].index = i;
    for (NvLinkPeer& p : gpus[i].nvlinks) {
      if (p.gpu != kNoIndex) {
        p.gpu = newIndex[p.gpu];
        p.peer = gpuLabel(p.gpu);
      }
    }
    std::sort(gpus[i].nvlinks.begin(), gpus[i].nvlinks.end(),
              [](const NvLinkPeer& x, const NvLinkPeer& y) { return x.peer < y.peer; });
    if (gpus[i].nvswitch_links > 0) nvswitch = true;
  }
  // mlx5_2 before mlx5_10: compare the trailing number numerically.
  auto key = [](const std::string& s) {
    size_t d = s.size();
    while (d > 0 && std::isdigit(static_cast<unsigned char>(s[d - 1]))) --d;
    long n = d < s.size() && s.size() - d < 9 ? std::stol(s.substr(d)) : -1;
    return std::make_pair(s.substr(0, d), n);
  };
  std::stable_sort(nics.begin(), nics.end(), [&](const Nic& x, const Nic& y) {
    auto kx = key(x.name), ky = key(y.name);
    return kx != ky ? kx < ky : x.name < y.name;
  });
  std::sort(packages.begin(), packages.end(),
            [](const Package& x, const Package& y) { return x.os_index < y.os_index; });
  std::sort(numa_nodes.begin(), numa_nodes.end(),
            [](const NumaNode& x, const NumaNode& y) { return x.os_index < y.os_index; });
}

std::string toString(LinkLayer layer) {
  switch (layer) {
    case LinkLayer::kInfiniBand:
      return "infiniband";
    case LinkLayer::kEthernet:
      return "ethernet";
    case LinkLayer::kUnspecified:
      return "unspecified";
  }
  return "unspecified";
}

std::string toString(PortState state) {
  switch (state) {
    case PortState::kDown:
      return "down";
    case PortState::kInit:
      return "init";
    case PortState::kArmed:
      return "armed";
    case PortState::kActive:
      return "active";
    case PortState::kActiveDefer:
      return "active_defer";
    case PortState::kUnknown:
      return "unknown";
  }
  return "unknown";
}

LinkLayer linkLayerFromString(std::string_view text) {
  std::string s = common::lower(common::trim(text));
  if (s == "infiniband" || s == "ib") return LinkLayer::kInfiniBand;
  if (s == "ethernet" || s == "roce" || s == "eth") return LinkLayer::kEthernet;
  return LinkLayer::kUnspecified;
}

PortState portStateFromString(std::string_view text) {
  std::string s = common::lower(common::trim(text));
  // sysfs: "4: ACTIVE"; hwloc: "4"; JSON: "active"
  size_t colon = s.find(':');
  std::string num = colon == std::string::npos ? s : s.substr(0, colon);
  std::string name = colon == std::string::npos ? s : s.substr(colon + 1);
  while (!name.empty() && name.front() == ' ') name.erase(0, 1);
  if (name == "down" || num == "1") return PortState::kDown;
  if (name == "init" || num == "2") return PortState::kInit;
  if (name == "armed" || num == "3") return PortState::kArmed;
  if (name == "active" || num == "4") return PortState::kActive;
  if (name == "active_defer" || num == "5") return PortState::kActiveDefer;
  return PortState::kUnknown;
}

int smFromPciDevice(uint16_t device) {
  struct Range {
    uint16_t first, last;
    int sm;
  };
  // NVIDIA data-center device ids by generation (from the PCI id database).
  static constexpr Range kRanges[] = {
      {0x15f0, 0x15ff, 60},   // P100
      {0x1db0, 0x1dbf, 70},   // V100
      {0x1df0, 0x1dff, 70},   // V100 PCIe/SXM variants
      {0x1eb0, 0x1ebf, 75},   // T4
      {0x20b0, 0x20bf, 80},   // A100, A800
      {0x20f0, 0x20ff, 80},   // A100 variants
      {0x2230, 0x223f, 86},   // A10, A40 (A10G 0x2237)
      {0x2320, 0x233f, 90},   // H100, H800, H200 (0x2335)
      {0x2340, 0x234f, 90},   // GH200
      {0x2900, 0x29ff, 100},  // B200, GB200
  };
  for (const Range& r : kRanges) {
    if (device >= r.first && device <= r.last) return r.sm;
  }
  return 0;
}

std::string vendorName(uint16_t vendor) {
  switch (vendor) {
    case kVendorNvidia:
      return "NVIDIA";
    case kVendorAmd:
      return "AMD";
    case kVendorIntel:
      return "Intel";
    case kVendorMellanox:
      return "Mellanox";
    case kVendorAmazon:
      return "Amazon";
    default:
      break;
  }
  return common::hexNumber(vendor, 4);
}

std::string nvlinkBoard(const Gpu& gpu) {
  if (!gpu.isNvidia()) return "";
  // SXM and HGX boards by PCI device id (names from pci.ids, pciutils/pciids c1c12547). PCIe cards
  // (A100 PCIe 0x20b5, H100 PCIe 0x2331, H100/H200 NVL) may have NVLink bridges or none: not here.
  static constexpr std::pair<uint16_t, const char*> kBoards[] = {
      {0x15f9, "P100 SXM2"}, {0x1db0, "V100 SXM2"}, {0x1db1, "V100 SXM2"}, {0x1db5, "V100 SXM2"},
      {0x1db8, "V100 SXM3"}, {0x1dbd, "V100 SXM2"}, {0x1df5, "V100 SXM2"}, {0x20b0, "A100 SXM4"},
      {0x20b2, "A100 SXM4"}, {0x20b3, "A100 SXM4"}, {0x20bd, "A800 SXM4"}, {0x20f3, "A800 SXM4"},
      {0x2324, "H800 SXM5"}, {0x2329, "H20 SXM5"},  {0x2330, "H100 SXM5"}, {0x2335, "H200 SXM"},
      {0x2337, "H100 SXM5"}, {0x2338, "H100 SXM5"}, {0x2339, "H100 SXM5"}, {0x2901, "B200"},
      {0x2909, "B200"},      {0x3182, "B300 SXM6"},
  };
  for (const auto& [device, board] : kBoards) {
    if (gpu.device == device) return board;
  }
  return gpu.model.find("SXM") != std::string::npos ? gpu.model : "";
}

std::vector<std::string> missingNvlinkWarnings(const NodeTopology& topo) {
  if (topo.nvswitch) return {};
  for (const Gpu& g : topo.gpus) {
    if (!g.nvlinks.empty() || g.nvswitch_links > 0) return {};  // the source does record NVLink
  }
  std::map<std::string, std::vector<unsigned>> boards;  // board -> GPU indexes
  for (const Gpu& g : topo.gpus) {
    if (std::string board = nvlinkBoard(g); !board.empty())
      boards[board].push_back(static_cast<unsigned>(g.index));
  }
  std::string from = topo.source;
  for (const char* prefix : {"hwloc-xml:", "nccl-xml:", "json:"}) {
    if (from.starts_with(prefix)) from.erase(0, std::string_view(prefix).size());
  }
  const bool live = topo.source == "live";
  if (live) from = "the live probe";
  if (from.empty()) from = "the topology";
  std::vector<std::string> out;
  for (const auto& [board, gpus] : boards) {
    if (gpus.size() < 2) continue;
    out.push_back("GPUs " + CpuSet(gpus).toList() + " are " + board + ", which have NVLink, but " + from +
                  " records no NVLink: paths between them show PCIe types (PIX to SYS) instead of NV#; " +
                  (live ? "check that NVML loads (the driver's libnvidia-ml.so.1), through which the probe "
                          "reads NVLink, or give a topology with NVLink information (NCCL_TOPO_DUMP_FILE)"
                        : "give a topology with NVLink information (poolrun topo --format json on the node, "
                          "or NCCL_TOPO_DUMP_FILE)"));
  }
  return out;
}

std::vector<MigUnit> migUnits(const NodeTopology& topology) {
  std::vector<MigUnit> units;
  for (const Gpu& gpu : topology.gpus) {
    if (!gpu.mig.enabled) continue;
    const size_t first = units.size();
    for (size_t i = 0; i < gpu.mig.instances.size(); ++i) units.push_back({gpu.index, i});
    std::sort(units.begin() + static_cast<std::ptrdiff_t>(first), units.end(), [&](MigUnit a, MigUnit b) {
      const MigInstance& x = gpu.mig.instances[a.instance];
      const MigInstance& y = gpu.mig.instances[b.instance];
      return std::pair(x.gpu_instance, x.compute_instance) < std::pair(y.gpu_instance, y.compute_instance);
    });
  }
  return units;
}

}  // namespace poolrun::topo
