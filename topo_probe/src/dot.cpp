#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "poolrun/topo/writers.hpp"

namespace poolrun::topo {
namespace {

constexpr const char* kGpuColor = "#b7e07a";
constexpr const char* kNicColor = "#a6cee3";
constexpr const char* kNvLinkColor = "#4d7f00";

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// A multi-line label: each line escaped on its own, joined with DOT's "\n" line break.
std::string label(const std::vector<std::string>& lines) {
  std::string joined;
  for (const std::string& line : lines) {
    if (line.empty()) continue;
    if (!joined.empty()) joined += '\n';
    joined += line;
  }
  return quote(joined);
}

std::string pkgId(int os) {
  return quote("pkg" + std::to_string(os));
}
std::string numaId(int os) {
  return quote("numa" + std::to_string(os));
}
std::string switchId(size_t index) {
  return quote("sw" + std::to_string(index));
}
std::string gpuId(size_t index) {
  return quote(NodeTopology::gpuLabel(static_cast<int>(index)));
}
std::string nicId(const Nic& nic) {
  return quote("nic:" + nic.name);
}

std::string linkText(const PciLink& link) {
  if (link.speed_gts <= 0 || link.width <= 0) return "";
  return fmt::format("{:g} GT/s x{}", link.speed_gts, link.width);
}

// A NIC that cannot carry traffic: every port's state is known and none is up.
bool nicDown(const Nic& nic) {
  if (nic.ports.empty()) return false;
  return std::none_of(nic.ports.begin(), nic.ports.end(),
                      [](const NicPort& p) { return p.up() || p.state == PortState::kUnknown; });
}

// Where a node is drawn: the NUMA cluster, else the package cluster, else the top level. Both are
// os indexes of nodes and packages that exist in the topology, or kNone.
struct Locality {
  int numa = kNone;
  int package = kNone;
  bool known() const { return numa != kNone || package != kNone; }
};

class DotWriter {
 public:
  explicit DotWriter(const NodeTopology& topo) : topo_(topo) {}

  std::string write() {
    addPackagesAndNumaNodes();
    addSwitches();
    addGpus();
    addNics();
    addNvLinks();
    return render();
  }

 private:
  bool hasPackage(int os) const {
    return os != kNone && std::any_of(topo_.packages.begin(), topo_.packages.end(),
                                      [os](const Package& p) { return p.os_index == os; });
  }

  Locality locate(int numa, int package) const {
    Locality at;
    if (numa != kNone && topo_.numaNode(numa) != nullptr) {
      at.numa = numa;
      int numaPackage = topo_.numaNode(numa)->package;
      at.package = hasPackage(numaPackage) ? numaPackage : kNone;
      return at;
    }
    at.package = hasPackage(package) ? package : kNone;
    return at;
  }

  void place(const Locality& at, std::string statement) {
    if (at.numa != kNone) {
      inNuma_[at.numa].push_back(std::move(statement));
    } else if (at.package != kNone) {
      inPackage_[at.package].push_back(std::move(statement));
    } else {
      top_.push_back(std::move(statement));
    }
  }

  void edge(const std::string& a, const std::string& b, const std::string& attrs = "") {
    edges_.push_back(a + " -- " + b + (attrs.empty() ? "" : " [" + attrs + "]") + ";");
  }

  // What a node without a switch above it hangs from: its NUMA node, else its package.
  std::string cpuAnchor(const Locality& at) const {
    if (at.numa != kNone) return numaId(at.numa);
    if (at.package != kNone) return pkgId(at.package);
    return "";
  }

  bool validSwitch(size_t s) const { return s < topo_.switches.size(); }

  void addPackagesAndNumaNodes() {
    for (const Package& p : topo_.packages) {
      std::string name = "Package " + std::to_string(p.os_index);
      inPackage_[p.os_index].push_back(pkgId(p.os_index) + " [shape=box3d, label=" + quote(name) + "];");
    }
    for (const NumaNode& n : topo_.numa_nodes) {
      std::string name = "NUMA " + std::to_string(n.os_index);
      inNuma_[n.os_index].push_back(numaId(n.os_index) + " [shape=ellipse, label=" + quote(name) + "];");
      if (hasPackage(n.package)) edge(pkgId(n.package), numaId(n.os_index), "color=grey50");
    }
  }

  void addSwitches() {
    const auto& switches = topo_.switches;
    switchAt_.assign(switches.size(), Locality{});
    for (size_t s = 0; s < switches.size(); ++s) {
      int numa = switches[s].numa;
      size_t hb = switches[s].host_bridge;
      if (numa == kNone && hb < topo_.host_bridges.size()) {
        numa = topo_.host_bridges[hb].numa;
      }
      switchAt_[s] = locate(numa, kNone);
    }
    // Switches without a locality of their own take the one of the devices below them...
    auto fromDevice = [&](const PciPlacement& at) {
      Locality device = locate(at.numa, at.package);
      size_t s = at.switch_index;
      for (size_t guard = 0; validSwitch(s) && guard < switches.size(); ++guard) {
        if (!switchAt_[s].known()) switchAt_[s] = device;
        s = switches[s].parent;
      }
    };
    for (const Gpu& g : topo_.gpus) fromDevice(g.at);
    for (const Nic& n : topo_.nics) fromDevice(n.at);
    // ...or of the switch above them.
    for (size_t pass = 0; pass < switches.size(); ++pass) {
      for (size_t s = 0; s < switches.size(); ++s) {
        size_t parent = switches[s].parent;
        if (!switchAt_[s].known() && validSwitch(parent)) switchAt_[s] = switchAt_[parent];
      }
    }

    for (size_t s = 0; s < switches.size(); ++s) {
      const PciSwitch& sw = switches[s];
      std::string kind = sw.root_port ? "root port" : "PCIe switch";
      place(switchAt_[s],
            switchId(s) + " [shape=box, label=" + label({kind, sw.pci.str(), linkText(sw.link)}) + "];");
      if (validSwitch(sw.parent) && sw.parent != s) {
        edge(switchId(sw.parent), switchId(s));
      } else if (std::string anchor = cpuAnchor(switchAt_[s]); !anchor.empty()) {
        edge(anchor, switchId(s));
      }
    }
  }

  Locality deviceAt(const PciPlacement& at) const {
    Locality where = locate(at.numa, at.package);
    if (!where.known() && validSwitch(at.switch_index)) return switchAt_[at.switch_index];
    return where;
  }

  // The edge from a device up to its switch, or to the CPU it hangs from directly.
  void attach(const std::string& id, const PciPlacement& at, const std::string& attrs) {
    if (validSwitch(at.switch_index)) {
      edge(switchId(at.switch_index), id, attrs);
    } else if (std::string anchor = cpuAnchor(deviceAt(at)); !anchor.empty()) {
      edge(anchor, id, attrs);
    }
  }

  void addGpus() {
    for (size_t i = 0; i < topo_.gpus.size(); ++i) {
      const Gpu& g = topo_.gpus[i];
      std::string text = label({NodeTopology::gpuLabel(i), g.model, g.pci.str()});
      place(deviceAt(g.at),
            gpuId(i) + " [shape=box, style=filled, fillcolor=" + quote(kGpuColor) + ", label=" + text + "];");
      attach(gpuId(i), g.at, "");
    }
  }

  void addNics() {
    for (const Nic& n : topo_.nics) {
      std::vector<std::string> lines{n.name, n.pci.str()};
      for (const NicPort& p : n.ports) {
        std::string line = "port " + std::to_string(p.port);
        if (!p.netdev.empty()) line += " (" + p.netdev + ")";
        std::string details;  // what the source knows of link layer, state and rate
        if (p.link_layer != LinkLayer::kUnspecified) details += " " + toString(p.link_layer);
        if (p.state != PortState::kUnknown) details += " " + toString(p.state);
        if (p.rate_gbps > 0) details += fmt::format(" {:g} Gb/s", p.rate_gbps);
        if (!details.empty()) line += ":" + details;
        lines.push_back(std::move(line));
      }
      bool down = nicDown(n);
      std::string style = down ? "style=\"filled,dashed\", color=grey50, fontcolor=grey40, fillcolor=grey90"
                               : "style=filled, fillcolor=" + quote(kNicColor);
      place(deviceAt(n.at), nicId(n) + " [shape=box, " + style + ", label=" + label(lines) + "];");
      attach(nicId(n), n.at, down ? "style=dashed, color=grey50" : "");
    }
  }

  void addNvLinks() {
    const size_t n = topo_.gpus.size();
    // Links per direction; a pair is drawn once, with the larger count where the two sides disagree.
    std::map<std::pair<size_t, size_t>, int> directed;
    std::vector<int> nvswitchLinks(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const Gpu& g = topo_.gpus[i];
      nvswitchLinks[i] = g.nvswitch_links;
      for (const NvLinkPeer& p : g.nvlinks) {
        if (p.count <= 0) continue;
        if (p.gpu < n && p.gpu != i) {
          directed[{i, p.gpu}] += p.count;
        } else if (p.gpu == kNoIndex && p.peer == "cpu") {
          Locality at = deviceAt(g.at);
          std::string cpu = at.package != kNone ? pkgId(at.package) : quote("cpu");
          if (at.package == kNone) needCpuNode_ = true;
          edge(gpuId(i), cpu, nvLinkAttrs(p.count));
        } else if (p.gpu == kNoIndex && p.peer == "nvswitch" && g.nvswitch_links == 0) {
          nvswitchLinks[i] += p.count;
        }
      }
    }
    for (const auto& [pair, count] : directed) {
      auto [a, b] = pair;
      auto reverse = directed.find({b, a});
      if (reverse != directed.end() && b < a) continue;  // drawn from the other side
      int links = reverse == directed.end() ? count : std::max(count, reverse->second);
      edge(gpuId(std::min(a, b)), gpuId(std::max(a, b)), nvLinkAttrs(links));
    }
    for (size_t i = 0; i < n; ++i) {
      if (nvswitchLinks[i] <= 0) continue;
      needNvSwitch_ = true;
      edge(gpuId(i), quote("nvswitch"), nvLinkAttrs(nvswitchLinks[i]));
    }
  }

  static std::string nvLinkAttrs(int count) {
    return "style=bold, penwidth=2, color=" + quote(kNvLinkColor) +
           ", label=" + quote("NV" + std::to_string(count));
  }

  std::string render() const {
    std::string out = "graph " + quote("topology") + " {\n";
    out += "  graph [fontname=Helvetica";
    if (!topo_.hostname.empty()) out += ", labelloc=t, label=" + quote(topo_.hostname);
    out += "];\n  node [fontname=Helvetica, fontsize=10];\n  edge [fontname=Helvetica, fontsize=9];\n";

    auto body = [&out](const std::vector<std::string>& lines, const std::string& indent) {
      for (const std::string& line : lines) out += indent + line + "\n";
    };
    auto numaCluster = [&](const NumaNode& n, const std::string& indent) {
      std::string mem = n.memory_bytes > 0
                            ? fmt::format("{:.1f} GiB", static_cast<double>(n.memory_bytes) / (1ull << 30))
                            : "";
      out += indent + "subgraph " + quote("cluster_numa" + std::to_string(n.os_index)) + " {\n";
      out += indent + "  label=" +
             label({"NUMA " + std::to_string(n.os_index),
                    n.cpus.empty() ? "no CPUs" : "CPUs " + n.cpus.toList(), mem}) +
             ";\n";
      auto it = inNuma_.find(n.os_index);
      if (it != inNuma_.end()) body(it->second, indent + "  ");
      out += indent + "}\n";
    };

    for (const Package& p : topo_.packages) {
      out += "  subgraph " + quote("cluster_pkg" + std::to_string(p.os_index)) + " {\n";
      out += "    label=" +
             label({"Package " + std::to_string(p.os_index), p.model,
                    p.cpus.empty() ? "" : "CPUs " + p.cpus.toList()}) +
             ";\n";
      auto it = inPackage_.find(p.os_index);
      if (it != inPackage_.end()) body(it->second, "    ");
      for (const NumaNode& n : topo_.numa_nodes) {
        if (n.package == p.os_index) numaCluster(n, "    ");
      }
      out += "  }\n";
    }
    for (const NumaNode& n : topo_.numa_nodes) {
      if (!hasPackage(n.package)) numaCluster(n, "  ");
    }
    body(top_, "  ");
    if (needNvSwitch_) out += "  " + quote("nvswitch") + " [shape=hexagon, label=\"NVSwitch\"];\n";
    if (needCpuNode_) out += "  " + quote("cpu") + " [shape=box3d, label=\"CPU\"];\n";
    // Edges last, so that every node is first seen inside its cluster.
    body(edges_, "  ");
    out += "}\n";
    return out;
  }

  const NodeTopology& topo_;
  std::map<int, std::vector<std::string>> inNuma_;
  std::map<int, std::vector<std::string>> inPackage_;
  std::vector<std::string> top_;
  std::vector<std::string> edges_;
  std::vector<Locality> switchAt_;
  bool needNvSwitch_ = false;
  bool needCpuNode_ = false;
};

}  // namespace

std::string toDot(const NodeTopology& topo) {
  return DotWriter(topo).write();
}

}  // namespace poolrun::topo
