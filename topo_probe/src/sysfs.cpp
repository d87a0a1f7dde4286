// RDMA devices from /sys/class/infiniband (see sysfs.hpp). Every read is bounded and every failure
// becomes a warning: this runs on machines with no RDMA device, and on trees a user handed us.

#include "poolrun/topo/sysfs.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <system_error>
#include <tuple>
#include <type_traits>

#include "poolrun/common/error.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"

namespace poolrun::topo {
namespace fs = std::filesystem;
namespace {

using Warnings = std::vector<std::string>;
using Gid = std::array<uint16_t, 8>;

constexpr size_t kMaxAttributeBytes = 8192;  // sysfs attributes are at most a page
constexpr size_t kMaxEntries = 4096;         // per folder: devices, ports, GIDs, netdevs
constexpr size_t kMaxQuoted = 64;            // of a bad value, in a warning

using common::parseHex;
using common::trim;

// A value quoted for a warning, cut short: a hostile file must not make a warning of kilobytes.
std::string shown(std::string_view value) {
  std::string out = "'" + std::string(value.substr(0, kMaxQuoted));
  if (value.size() > kMaxQuoted) out += "...";
  return out + "'";
}

void warn(Warnings& warnings, const fs::path& path, const std::string& what) {
  warnings.push_back(path.string() + ": " + what);
}

// An attribute the device should have: a failure is a warning ("FILE: no such file (...)", "FILE is a
// FIFO, not a regular file (...)"). Only regular files are opened (a FIFO or a device node planted
// in a tree would block or never end), and at most kMaxAttributeBytes are read.
std::optional<std::string> requiredAttribute(const fs::path& file, Warnings& warnings) {
  std::string error;
  std::optional<std::string> text = common::readAttributeFile(file, kMaxAttributeBytes, false, &error);
  if (!text) warnings.push_back(error);
  return text;
}

// An attribute that is often absent for good reasons (GID slots, dev_port): no warning.
std::optional<std::string> optionalAttribute(const fs::path& file) {
  return common::readAttributeFile(file, kMaxAttributeBytes, false);
}

bool isFolder(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

// Sorted names in a folder, at most kMaxEntries of them; std::nullopt with `error` where the
// folder cannot be listed.
std::optional<std::vector<std::string>> listFolder(const fs::path& dir, std::string& error) {
  std::error_code ec;
  fs::file_status st = fs::status(dir, ec);
  if (ec || !fs::exists(st)) {
    error = "no such folder";
    return std::nullopt;
  }
  if (!fs::is_directory(st)) {
    error = "not a folder";
    return std::nullopt;
  }
  std::vector<std::string> names;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (names.size() == kMaxEntries) {
      error = "more than " + std::to_string(kMaxEntries) + " entries, read the first of them";
      break;
    }
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    error = "cannot list: " + ec.message();
    return std::nullopt;
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> listFolderOrWarn(const fs::path& dir, Warnings& warnings) {
  std::string error;
  std::optional<std::vector<std::string>> names = listFolder(dir, error);
  if (!error.empty()) warn(warnings, dir, error);
  return names ? std::move(*names) : std::vector<std::string>();
}

template <typename T>
std::optional<T> parseNumber(std::string_view text, int base = 10) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A folder entry named by a non-negative decimal number: a port or a GID index.
std::optional<int> parseIndex(std::string_view name) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return parseNumber<int>(name);
}

// Numbered entries of a folder in numeric order, with their names.
std::vector<std::pair<int, std::string>> numberedEntries(const std::vector<std::string>& names) {
  std::vector<std::pair<int, std::string>> out;
  for (const std::string& name : names) {
    if (std::optional<int> i = parseIndex(name)) out.emplace_back(*i, name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "fe80:0000:0000:0000:0002:c903:00f9:bfa1": eight groups of up to four hex digits.
std::optional<Gid> parseGid(std::string_view text) {
  text = trim(text);
  Gid gid{};
  for (size_t i = 0; i < gid.size(); ++i) {
    size_t colon = text.find(':');
    bool last = i + 1 == gid.size();
    if (last != (colon == std::string_view::npos)) return std::nullopt;
    std::string_view group = text.substr(0, colon);
    if (group.empty() || group.size() > 4) return std::nullopt;
    std::optional<uint16_t> value = parseNumber<uint16_t>(group, 16);
    if (!value) return std::nullopt;
    gid[i] = *value;
    if (!last) text.remove_prefix(colon + 1);
  }
  return gid;
}

// An unused slot: all zero, or (older mlx4 IB tables) the link-local prefix with a zero interface
// id. No usable GID has a zero interface id: it is the port GUID (IB) or an address (RoCE).
bool isUnusedGid(const Gid& gid) {
  return std::all_of(gid.begin() + 4, gid.end(), [](uint16_t g) { return g == 0; });
}

bool isIpv4Mapped(const Gid& gid) {
  return std::all_of(gid.begin(), gid.begin() + 5, [](uint16_t g) { return g == 0; }) && gid[5] == 0xffff;
}

std::optional<PciAddress> pciFromUevent(const fs::path& function) {
  std::optional<std::string> uevent = optionalAttribute(function / "uevent");
  if (!uevent) return std::nullopt;
  std::string_view rest = *uevent;
  constexpr std::string_view kKey = "PCI_SLOT_NAME=";
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = trim(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.starts_with(kKey)) return PciAddress::parse(trim(line.substr(kKey.size())));
  }
  return std::nullopt;
}

// The PCI function behind `<dev>/device`: the name of the folder its link leads to, else (trees
// written by tests, virtual functions in odd containers) PCI_SLOT_NAME in its uevent.
std::optional<PciAddress> pciOfFunction(const fs::path& function, Warnings& warnings) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(function, ec))) {
    fs::path target = fs::canonical(function, ec);
    if (ec) target = fs::read_symlink(function, ec);
    if (!ec) {
      if (std::optional<PciAddress> pci = PciAddress::parse(target.filename().string())) return pci;
    }
  }
  if (std::optional<PciAddress> pci = pciFromUevent(function)) return pci;
  warn(warnings, function, "no PCI address: not a link to a PCI function and no PCI_SLOT_NAME in its uevent");
  return std::nullopt;
}

void readPciFunction(const fs::path& deviceDir, SysfsRdmaDevice& d, Warnings& warnings) {
  fs::path function = deviceDir / "device";
  std::error_code ec;
  fs::file_status st = fs::status(function, ec);
  if (!fs::is_directory(st)) {
    warn(warnings, function,
         fs::exists(st) ? "not a folder (expected a link to the PCI function)"
                        : "no such file (expected a link to the PCI function; PCI address, NUMA node "
                          "and CPUs unknown)");
    return;
  }
  d.pci = pciOfFunction(function, warnings);

  auto hexAttribute = [&](const char* name, auto& out) {
    using T = std::remove_reference_t<decltype(out)>;
    fs::path file = function / name;
    std::optional<std::string> text = requiredAttribute(file, warnings);
    if (!text) return;
    if (std::optional<T> value = parseHex<T>(*text)) {
      out = *value;
    } else {
      warn(warnings, file, "bad value " + shown(*text) + " (expected a hex number such as 0x15b3)");
    }
  };
  hexAttribute("vendor", d.vendor);
  hexAttribute("device", d.device);
  hexAttribute("class", d.pci_class);

  fs::path numaFile = function / "numa_node";
  if (std::optional<std::string> text = requiredAttribute(numaFile, warnings)) {
    std::optional<int> numa = parseNumber<int>(*text);
    if (!numa || *numa < -1) {
      warn(warnings, numaFile, "bad value " + shown(*text) + " (expected a NUMA node number or -1)");
    } else {
      d.numa = *numa < 0 ? kNone : *numa;  // -1: the platform does not say
    }
  }

  fs::path cpusFile = function / "local_cpulist";
  if (std::optional<std::string> text = requiredAttribute(cpusFile, warnings)) {
    try {
      d.cpus = CpuSet::parseList(*text);
    } catch (const std::exception& e) {  // poolrun::Error for a malformed list
      warn(warnings, cpusFile, e.what());
    }
  }

  // No net/ folder is normal: an IB HCA without IPoIB, or the netdev moved to another namespace.
  std::string error;
  if (std::optional<std::vector<std::string>> names = listFolder(function / "net", error)) {
    d.netdevs = std::move(*names);
  }
}

// The 0-based port of a netdev: dev_port (since 3.15), else dev_id, which carried it before.
std::optional<int> portOfNetdev(const fs::path& netdev) {
  if (std::optional<std::string> text = optionalAttribute(netdev / "dev_port")) {
    return parseNumber<int>(*text);
  }
  if (std::optional<std::string> text = optionalAttribute(netdev / "dev_id")) {
    if (std::optional<uint16_t> id = parseHex<uint16_t>(*text)) return *id;
    return std::nullopt;
  }
  return std::nullopt;
}

void readGids(const fs::path& portDir, SysfsRdmaPort& p, Warnings& warnings) {
  fs::path gidDir = portDir / "gids";
  fs::path typesDir = portDir / "gid_attrs" / "types";
  fs::path ndevsDir = portDir / "gid_attrs" / "ndevs";
  bool haveTypes = isFolder(typesDir);
  bool haveNdevs = isFolder(ndevsDir);
  for (const auto& [index, name] : numberedEntries(listFolderOrWarn(gidDir, warnings))) {
    // Unused slots read as zeros or fail to read (types/ndevs): skip them without a word.
    std::optional<std::string> text = optionalAttribute(gidDir / name);
    if (!text) continue;
    std::optional<Gid> gid = parseGid(*text);
    if (!gid || isUnusedGid(*gid)) continue;
    SysfsGid g;
    g.index = index;
    g.gid = *text;
    if (haveTypes) g.type = optionalAttribute(typesDir / name).value_or("");
    if (haveNdevs) g.ndev = optionalAttribute(ndevsDir / name).value_or("");
    p.gids.push_back(std::move(g));
  }
  if (!haveTypes && p.port.link_layer == LinkLayer::kEthernet) {
    warn(warnings, typesDir,
         "no such folder (kernel before 4.4?): RoCE v2 GIDs cannot be told apart, no GID index chosen");
  }
}

SysfsRdmaPort readPort(const fs::path& portDir, int number, Warnings& warnings) {
  SysfsRdmaPort p;
  p.port.port = number;
  fs::path layerFile = portDir / "link_layer";
  if (std::optional<std::string> text = requiredAttribute(layerFile, warnings)) {
    p.port.link_layer = linkLayerFromString(*text);
    if (p.port.link_layer == LinkLayer::kUnspecified) {
      warn(warnings, layerFile, "unknown link layer " + shown(*text) + " (expected InfiniBand or Ethernet)");
    }
  }
  fs::path stateFile = portDir / "state";
  if (std::optional<std::string> text = requiredAttribute(stateFile, warnings)) {
    p.port.state = portStateFromString(*text);
    if (p.port.state == PortState::kUnknown) {
      warn(warnings, stateFile, "unknown port state " + shown(*text) + " (expected e.g. '4: ACTIVE')");
    }
  }
  fs::path rateFile = portDir / "rate";
  if (std::optional<std::string> text = requiredAttribute(rateFile, warnings)) {
    p.port.rate_gbps = parseRateGbps(*text);
    if (p.port.rate_gbps == 0) {
      warn(warnings, rateFile,
           "cannot parse rate " + shown(*text) + " (expected e.g. '100 Gb/sec (4X EDR)')");
    }
  }
  readGids(portDir, p, warnings);
  if (p.port.link_layer == LinkLayer::kEthernet) p.port.roce_v2_gid_index = findRoceV2Ipv4Gid(p.gids);
  return p;
}

// The netdev of a port: the one its RoCE GIDs are bound to; else the device's only netdev where it
// has one port; else the netdev whose dev_port is this port.
std::string netdevOfPort(const SysfsRdmaDevice& d, const SysfsRdmaPort& p, const fs::path& netDir) {
  if (p.port.roce_v2_gid_index) {
    for (const SysfsGid& g : p.gids) {
      if (g.index == *p.port.roce_v2_gid_index && !g.ndev.empty()) return g.ndev;
    }
  }
  for (const SysfsGid& g : p.gids) {
    if (!g.ndev.empty()) return g.ndev;
  }
  if (d.ports.size() == 1 && d.netdevs.size() == 1) return d.netdevs.front();
  for (const std::string& netdev : d.netdevs) {
    if (portOfNetdev(netDir / netdev) == p.port.port - 1) return netdev;
  }
  return "";
}

void readPorts(const fs::path& deviceDir, SysfsRdmaDevice& d, Warnings& warnings) {
  fs::path portsDir = deviceDir / "ports";
  for (const auto& [number, name] : numberedEntries(listFolderOrWarn(portsDir, warnings))) {
    if (number < 1) continue;  // ports count from 1
    d.ports.push_back(readPort(portsDir / name, number, warnings));
  }
  fs::path netDir = deviceDir / "device" / "net";
  for (SysfsRdmaPort& p : d.ports) p.port.netdev = netdevOfPort(d, p, netDir);
}

// mlx5_2 before mlx5_10.
bool naturalLess(const std::string& a, const std::string& b) {
  auto split = [](const std::string& s) {
    size_t d = s.size();
    while (d > 0 && s[d - 1] >= '0' && s[d - 1] <= '9') --d;
    std::string digits = s.substr(d);
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
    return std::make_tuple(s.substr(0, d), digits.size(), digits, s);
  };
  return split(a) < split(b);
}

Nic* findNic(NodeTopology& topo, const SysfsRdmaDevice& d, bool& byPci) {
  byPci = false;
  for (Nic& n : topo.nics) {
    if (n.name == d.name) return &n;
  }
  if (!d.pci) return nullptr;
  for (Nic& n : topo.nics) {
    if (n.pci == *d.pci) {
      byPci = true;
      return &n;
    }
  }
  return nullptr;
}

int packageOfNuma(const NodeTopology& topo, int numa) {
  const NumaNode* node = numa == kNone ? nullptr : topo.numaNode(numa);
  return node != nullptr ? node->package : kNone;
}

void updateNic(const NodeTopology& topo, Nic& nic, const SysfsRdmaDevice& d) {
  // sysfs knows the ports better than hwloc, but hwloc may have matched a netdev sysfs could not.
  if (!d.ports.empty()) {
    std::vector<NicPort> ports;
    for (const SysfsRdmaPort& sp : d.ports) {
      NicPort p = sp.port;
      auto old = std::find_if(nic.ports.begin(), nic.ports.end(),
                              [&](const NicPort& o) { return o.port == p.port; });
      if (old != nic.ports.end()) {
        if (p.netdev.empty()) p.netdev = old->netdev;
        if (p.link_layer == LinkLayer::kUnspecified) p.link_layer = old->link_layer;
        if (p.state == PortState::kUnknown) p.state = old->state;
        if (p.rate_gbps == 0) p.rate_gbps = old->rate_gbps;
      }
      ports.push_back(std::move(p));
    }
    nic.ports = std::move(ports);
  }
  if (nic.at.numa == kNone && d.numa != kNone) {
    nic.at.numa = d.numa;
    if (nic.at.package == kNone) nic.at.package = packageOfNuma(topo, d.numa);
  }
  if (nic.cpus.empty()) nic.cpus = d.cpus;
  if (nic.vendor == 0) nic.vendor = d.vendor;
  if (nic.device == 0) nic.device = d.device;
  if (nic.pci_class == 0) nic.pci_class = d.pci_class;
}

Nic newNic(const NodeTopology& topo, const SysfsRdmaDevice& d) {
  Nic n;
  n.name = d.name;
  n.pci = *d.pci;
  n.vendor = d.vendor;
  n.device = d.device;
  n.pci_class = d.pci_class;
  n.cpus = d.cpus;
  n.at.numa = d.numa;
  n.at.package = packageOfNuma(topo, d.numa);
  for (const SysfsRdmaPort& p : d.ports) n.ports.push_back(p.port);
  return n;
}

}  // namespace

std::vector<SysfsRdmaDevice> readRdmaDevices(const fs::path& root, std::vector<std::string>& warnings) {
  fs::path classDir = root / "class" / "infiniband";
  std::string error;
  std::optional<std::vector<std::string>> names = listFolder(classDir, error);
  if (!error.empty()) {
    warn(warnings, classDir,
         names ? error
               : error + " (no RDMA device on this machine, or the rdma/ib_core modules are not loaded)");
  }
  std::vector<SysfsRdmaDevice> devices;
  if (!names) return devices;
  for (const std::string& name : *names) {
    fs::path deviceDir = classDir / name;
    if (!isFolder(deviceDir)) {
      warn(warnings, deviceDir, "not a folder or a link to one, skipped");
      continue;
    }
    SysfsRdmaDevice d;
    d.name = name;
    readPciFunction(deviceDir, d, warnings);
    readPorts(deviceDir, d, warnings);
    devices.push_back(std::move(d));
  }
  std::sort(devices.begin(), devices.end(),
            [](const SysfsRdmaDevice& a, const SysfsRdmaDevice& b) { return naturalLess(a.name, b.name); });
  return devices;
}

double parseRateGbps(std::string_view text) {
  text = trim(text);
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::fixed);
  if (ec != std::errc() || !std::isfinite(value) || value <= 0) return 0;
  std::string_view unit = trim(text.substr(static_cast<size_t>(end - text.data())));
  return unit.starts_with("Gb/sec") ? value : 0;
}

std::optional<int> findRoceV2Ipv4Gid(const std::vector<SysfsGid>& gids) {
  std::optional<int> best;
  for (const SysfsGid& g : gids) {
    if (trim(g.type) != "RoCE v2") continue;
    std::optional<Gid> gid = parseGid(g.gid);
    if (!gid || !isIpv4Mapped(*gid)) continue;
    if (!best || g.index < *best) best = g.index;
  }
  return best;
}

void mergeRdmaDevices(NodeTopology& topo, const std::vector<SysfsRdmaDevice>& devices) {
  for (const SysfsRdmaDevice& d : devices) {
    bool byPci = false;
    if (Nic* nic = findNic(topo, d, byPci)) {
      if (byPci && nic->name.starts_with("pci:")) nic->name = d.name;
      updateNic(topo, *nic, d);
    } else if (d.pci) {
      topo.nics.push_back(newNic(topo, d));
    } else {
      topo.warnings.push_back(d.name + ": RDMA device left out of the topology: sysfs gives no PCI address");
    }
  }
  topo.normalize();
}

}  // namespace poolrun::topo
