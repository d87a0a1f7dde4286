// NCCL's topology XML (NCCL_TOPO_FILE): reading full dumps and sparse hint files, and writing a
// file that NCCL loads. In that format each <pci> bridge is one PCIe switch and each <cpu> one
// NUMA node; there are no host bridges.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <pugixml.hpp>
#include <set>
#include <sstream>

#include "file_util.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::topo {
namespace {

constexpr int kMaxDepth = 32;

// Attributes that NCCL 2.x writes or reads, per element. Anything else is most likely a typo
// (`busId` for `busid`) that would silently drop a device, so it is an error.
const std::map<std::string, std::set<std::string>, std::less<>>& knownAttributes() {
  static const std::map<std::string, std::set<std::string>, std::less<>> kKnown = {
      {"system", {"version"}},
      {"cpu", {"numaid", "affinity", "arch", "vendor", "familyid", "modelid", "host_hash"}},
      {"pci",
       {"busid", "class", "vendor", "device", "subsystem_vendor", "subsystem_device", "link_speed",
        "link_width", "keep"}},
      {"gpu", {"dev", "sm", "rank", "gdr", "keep"}},
      {"nvlink", {"target", "count", "tclass"}},
      {"c2c", {"bw", "count"}},
      {"nic", {"keep"}},
      {"net", {"name", "dev", "speed", "port", "latency", "guid", "maxconn", "gdr", "coll", "keep"}},
  };
  return kKnown;
}

class Reader {
 public:
  explicit Reader(std::string name) : name_(std::move(name)) {}

  NodeTopology read(const std::string& xml) {
    pugi::xml_document doc;
    pugi::xml_parse_result r = doc.load_buffer(xml.data(), xml.size());
    if (!r) {
      fail("malformed XML at line " + std::to_string(detail::lineOf(xml, r.offset)) + ": " + r.description());
    }
    pugi::xml_node root = doc.document_element();
    if (std::strcmp(root.name(), "graphs") == 0) {
      fail(
          "this is an NCCL graph file (NCCL_GRAPH_FILE, <graphs>), not a topology; give the NCCL_TOPO_FILE "
          "(<system>) instead");
    }
    if (std::strcmp(root.name(), "system") != 0) {
      fail("not an NCCL topology (root element <" + std::string(root.name()) + ">, expected <system>)");
    }
    checkAttributes(root);
    out_.source = "nccl-xml:" + name_;
    for (pugi::xml_node child : root.children()) {
      if (child.type() != pugi::node_element) continue;
      if (std::strcmp(child.name(), "cpu") != 0) {
        fail(where(child) + "unexpected <" + std::string(child.name()) + "> under <system> (expected <cpu>)");
      }
      readCpu(child);
    }
    if (out_.numa_nodes.empty()) fail("no <cpu> element: the file describes no NUMA node");
    resolveNvLinks();
    if (unclassified_ > 0) {
      out_.warnings.push_back(
          name_ + ": " + std::to_string(unclassified_) +
          " <pci> devices have no class and no <gpu>/<nic>; they are neither GPUs nor NICs here");
    }
    out_.normalize();
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw badInput(name_ + ": " + what); }

  static std::string where(pugi::xml_node node) {
    std::string busid = node.attribute("busid").as_string();
    return "<" + std::string(node.name()) + (busid.empty() ? "" : " busid=\"" + busid + "\"") + ">: ";
  }

  void checkAttributes(pugi::xml_node node) const {
    const auto& known = knownAttributes();
    auto it = known.find(node.name());
    if (it == known.end()) {
      fail(where(node) + "unknown element <" + std::string(node.name()) + ">");
    }
    std::set<std::string_view> seen;
    for (pugi::xml_attribute a : node.attributes()) {
      if (!seen.insert(a.name()).second)
        fail(where(node) + "attribute '" + std::string(a.name()) + "' appears twice");
      if (!it->second.contains(a.name())) {
        std::string list;
        for (const std::string& k : it->second) list += (list.empty() ? "" : ", ") + k;
        fail(where(node) + "unknown attribute '" + std::string(a.name()) + "' (known: " + list + ")");
      }
    }
  }

  int intAttr(pugi::xml_node node, const char* attr, int fallback) const {
    pugi::xml_attribute a = node.attribute(attr);
    if (a.empty() || *a.value() == '\0') return fallback;
    std::string_view v = a.value();
    int value = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (ec != std::errc() || end != v.data() + v.size()) {
      fail(where(node) + "attribute " + attr + "=\"" + std::string(v) + "\" is not an integer");
    }
    return value;
  }

  uint32_t hexAttr(pugi::xml_node node, const char* attr) const {
    pugi::xml_attribute a = node.attribute(attr);
    if (a.empty() || *a.value() == '\0') return 0;
    std::string_view v = a.value();
    std::optional<uint32_t> value = common::parseHex<uint32_t>(v);
    if (!value)
      fail(where(node) + "attribute " + attr + "=\"" + std::string(v) + "\" is not a hexadecimal number");
    return *value;
  }

  PciAddress busid(pugi::xml_node node) const {
    std::string text = node.attribute("busid").as_string();
    if (text.empty()) fail(where(node) + "missing busid attribute");
    auto a = PciAddress::parse(text);
    if (!a) fail(where(node) + "bad busid \"" + text + "\" (expected dddd:bb:dd.f)");
    return *a;
  }

  PciLink link(pugi::xml_node node) const {
    PciLink l;
    std::string speed = node.attribute("link_speed").as_string();
    if (!speed.empty()) {
      double gts = 0;
      auto [end, ec] = std::from_chars(speed.data(), speed.data() + speed.size(), gts);
      if (ec == std::errc() && end != speed.data()) l.speed_gts = gts;
    }
    l.width = std::max(0, intAttr(node, "link_width", 0));
    if (l.speed_gts > 0 && l.width > 0) {
      double encoding = l.speed_gts >= 8 ? 128.0 / 130.0 : 0.8;
      l.gbyte_s = l.speed_gts * l.width * encoding / 8;
    }
    return l;
  }

  void readCpu(pugi::xml_node cpu) {
    checkAttributes(cpu);
    NumaNode numa;
    numa.os_index = intAttr(cpu, "numaid", static_cast<int>(out_.numa_nodes.size()));
    if (numa.os_index < 0 || numa.os_index > 4095) fail(where(cpu) + "numaid out of range");
    if (out_.numaNode(numa.os_index) != nullptr) {
      fail(where(cpu) + "numaid " + std::to_string(numa.os_index) + " appears twice");
    }
    try {
      std::string affinity = cpu.attribute("affinity").as_string();
      if (!affinity.empty()) numa.cpus = CpuSet::parseMask(affinity);
    } catch (const Error& e) {
      fail(where(cpu) + "affinity: " + e.what());
    }
    numa.package = numa.os_index;
    Package pkg;
    pkg.os_index = numa.os_index;
    pkg.cpus = numa.cpus;
    pkg.vendor = cpu.attribute("vendor").as_string();
    pkg.family = intAttr(cpu, "familyid", kNone);
    pkg.model_number = intAttr(cpu, "modelid", kNone);
    out_.numa_nodes.push_back(numa);
    out_.packages.push_back(pkg);
    PciPlacement at;
    at.numa = numa.os_index;
    at.package = numa.os_index;
    for (pugi::xml_node child : cpu.children()) {
      if (child.type() != pugi::node_element) continue;
      if (std::strcmp(child.name(), "pci") == 0) {
        readPci(child, at, numa.cpus, 0);
      } else if (std::strcmp(child.name(), "nic") == 0) {
        readNic(child, nullptr, at, numa.cpus);
      } else {
        fail(where(child) + "unexpected <" + std::string(child.name()) + "> under <cpu>");
      }
    }
  }

  static bool hasChild(pugi::xml_node node, const char* name) { return !node.child(name).empty(); }

  // Broadcom PEX Gen4/Gen5 switches show two levels that NCCL flattens into one.
  static int bcmGen(uint32_t vendor, uint32_t device, uint32_t subVendor) {
    if (vendor != 0x1000 || subVendor != 0x1000) return 0;
    if (device == 0xc010) return 4;
    if (device == 0xc030) return 5;
    return 0;
  }

  void readPci(pugi::xml_node pci, PciPlacement at, const CpuSet& cpus, int depth) {
    if (depth > kMaxDepth) fail(where(pci) + "PCI tree deeper than " + std::to_string(kMaxDepth) + " levels");
    checkAttributes(pci);
    PciAddress addr = busid(pci);
    uint32_t cls = hexAttr(pci, "class");
    uint32_t vendor = hexAttr(pci, "vendor");
    uint32_t device = hexAttr(pci, "device");
    bool bridge = (cls >> 8) == 0x0604 || (cls == 0 && hasChild(pci, "pci"));
    if (bridge) {
      int gen = bcmGen(vendor, device, hexAttr(pci, "subsystem_vendor"));
      bool merge = gen != 0 && at.switch_index != kNoIndex && switchGen_[at.switch_index] == gen;
      if (!merge) {
        PciSwitch s;
        s.pci = addr;
        s.vendor = static_cast<uint16_t>(vendor);
        s.device = static_cast<uint16_t>(device);
        s.parent = at.switch_index;
        s.numa = at.numa;
        s.link = link(pci);
        out_.switches.push_back(s);
        at.switch_index = out_.switches.size() - 1;
        switchGen_[at.switch_index] = gen;
      }
      for (pugi::xml_node child : pci.children()) {
        if (child.type() != pugi::node_element) continue;
        if (std::strcmp(child.name(), "pci") != 0) {
          fail(where(child) + "unexpected <" + std::string(child.name()) + "> under a PCI switch");
        }
        readPci(child, at, cpus, depth + 1);
      }
      return;
    }
    for (pugi::xml_node child : pci.children()) {
      if (child.type() != pugi::node_element) continue;
      std::string_view n = child.name();
      if (n != "gpu" && n != "nic")
        fail(where(child) + "unexpected <" + std::string(n) + "> under a PCI device");
    }
    bool gpu = (cls >> 16) == 0x03 || hasChild(pci, "gpu");
    bool nic = (cls >> 16) == 0x02 || hasChild(pci, "nic");
    if (cls != 0 &&
        ((hasChild(pci, "gpu") && (cls >> 16) != 0x03) || (hasChild(pci, "nic") && (cls >> 16) != 0x02))) {
      fail(where(pci) + "class " + common::hexNumber(cls, 6) + " does not match its <" +
           (hasChild(pci, "gpu") ? "gpu" : "nic") + "> (GPUs are 0x03xxxx, NICs 0x02xxxx)");
    }
    if (gpu && nic) fail(where(pci) + "a PCI device cannot be both a GPU and a NIC");
    if (gpu) {
      readGpu(pci, addr, cls, vendor, device, at, cpus);
    } else if (nic) {
      readNic(pci.child("nic"), &pci, at, cpus);
    } else if (cls == 0) {
      ++unclassified_;
    }
  }

  void readGpu(pugi::xml_node pci, PciAddress addr, uint32_t cls, uint32_t vendor, uint32_t device,
               const PciPlacement& at, const CpuSet& cpus) {
    Gpu g;
    g.pci = addr;
    g.pci_class = cls != 0 ? cls : 0x030200;
    g.vendor = static_cast<uint16_t>(vendor != 0 ? vendor : kVendorNvidia);
    g.device = static_cast<uint16_t>(device);
    g.at = at;
    g.cpus = cpus;
    g.link = link(pci);
    if (g.isNvidia() && g.device != 0) g.sm = smFromPciDevice(g.device);
    pugi::xml_node gx = pci.child("gpu");
    if (!gx.empty()) {
      checkAttributes(gx);
      int sm = intAttr(gx, "sm", 0);
      if (sm < 0 || sm > 1000) fail(where(pci) + "<gpu sm=\"" + std::to_string(sm) + "\"> out of range");
      if (sm > 0) g.sm = sm;
      for (pugi::xml_node link : gx.children()) {
        if (link.type() != pugi::node_element) continue;
        checkAttributes(link);
        if (std::strcmp(link.name(), "nvlink") != 0) continue;  // <c2c> is the CPU link of Grace
        int count = intAttr(link, "count", 0);
        if (count < 0 || count > 1024) fail(where(pci) + "<nvlink count> out of range");
        uint32_t tclass = hexAttr(link, "tclass");
        std::string target = link.attribute("target").as_string();
        auto t = PciAddress::parse(target);
        if (!t) fail(where(pci) + "<nvlink target=\"" + target + "\"> is not a PCI address");
        if (tclass == 0x068000) {
          g.nvswitch_links += count;
        } else if (tclass == 0x068001 || tclass == 0x060000) {
          g.nvlinks.push_back({kNoIndex, "cpu", count});
        } else if (*t != addr) {
          pendingLinks_.push_back({out_.gpus.size(), *t, count});
        }
      }
    }
    g.index = out_.gpus.size();
    out_.gpus.push_back(std::move(g));
  }

  // `nic` may be empty (a bare NIC <pci>); `pci` is null for a <nic> directly under <cpu>.
  void readNic(pugi::xml_node nic, const pugi::xml_node* pci, const PciPlacement& at, const CpuSet& cpus) {
    Nic base;
    base.at = at;
    base.cpus = cpus;
    if (pci != nullptr) {
      base.pci = busid(*pci);
      base.pci_class = hexAttr(*pci, "class");
      base.vendor = static_cast<uint16_t>(hexAttr(*pci, "vendor"));
      base.device = static_cast<uint16_t>(hexAttr(*pci, "device"));
      base.link = link(*pci);
    } else {
      base.has_pci = false;
    }
    LinkLayer layer = (base.pci_class >> 8) == 0x0207                     ? LinkLayer::kInfiniBand
                      : base.vendor == kVendorAmazon                      ? LinkLayer::kUnspecified
                      : (base.pci_class >> 8) == 0x0200 || pci == nullptr ? LinkLayer::kEthernet
                                                                          : LinkLayer::kUnspecified;
    std::vector<Nic> found;
    if (!nic.empty()) {
      checkAttributes(nic);
      for (pugi::xml_node net : nic.children()) {
        if (net.type() != pugi::node_element) continue;
        if (std::strcmp(net.name(), "net") != 0) fail(where(net) + "unexpected element under <nic>");
        checkAttributes(net);
        std::string name = net.attribute("name").as_string();
        if (name.empty()) fail("<net> without a name attribute");
        if (!std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
          fail("<net name> must be a device name of printable ASCII characters");
        }
        NicPort port;
        port.port = std::max(1, intAttr(net, "port", 1));
        port.state = PortState::kActive;  // NCCL lists the ports it found active
        port.rate_gbps = intAttr(net, "speed", 0) / 1000.0;
        port.link_layer = layer;
        auto same = std::find_if(found.begin(), found.end(), [&](const Nic& n) { return n.name == name; });
        if (same == found.end()) {
          found.push_back(base);
          found.back().name = name;
          same = found.end() - 1;
        }
        same->ports.push_back(port);
      }
    }
    if (found.empty()) {
      if (pci == nullptr) fail("<nic> under <cpu> without a <net>: nothing names the NIC");
      found.push_back(base);
      found.back().name = "pci:" + base.pci.str();
      NicPort port;
      port.link_layer = layer;
      found.back().ports.push_back(port);
    }
    for (Nic& n : found) {
      if (out_.nicByName(n.name) != nullptr) fail("NIC " + n.name + " appears twice");
      out_.nics.push_back(std::move(n));
    }
  }

  void resolveNvLinks() {
    for (const PendingLink& l : pendingLinks_) {
      auto peer =
          std::find_if(out_.gpus.begin(), out_.gpus.end(), [&](const Gpu& g) { return g.pci == l.target; });
      if (peer == out_.gpus.end()) {
        out_.warnings.push_back(name_ + ": NVLink to " + l.target.str() + ", which is not a GPU in the file");
        continue;
      }
      out_.gpus[l.gpu].nvlinks.push_back({peer->index, NodeTopology::gpuLabel(peer->index), l.count});
    }
  }

  struct PendingLink {
    size_t gpu;
    PciAddress target;
    int count;
  };

  std::string name_;
  NodeTopology out_;
  std::map<size_t, int> switchGen_;
  std::vector<PendingLink> pendingLinks_;
  int unclassified_ = 0;
};

// ---- writer ----

// NCCL wants a generation name ("16 GT/s") and a width; hwloc only knows GB/s, so pick the
// x16 generation closest to it.
void setLink(pugi::xml_node pci, const PciLink& link) {
  double gts = link.speed_gts;
  int width = link.width;
  if ((gts == 0 || width == 0) && link.gbyte_s > 0) {
    width = 16;
    double perLane = link.gbyte_s * 8 / 16;
    static constexpr double kGens[] = {2.5, 5, 8, 16, 32, 64};
    gts = kGens[0];
    for (double g : kGens) {
      double usable = g * (g >= 8 ? 128.0 / 130.0 : 0.8);
      if (std::abs(usable - perLane) < std::abs(gts * (gts >= 8 ? 128.0 / 130.0 : 0.8) - perLane)) gts = g;
    }
  }
  if (gts == 0 || width == 0) return;
  std::ostringstream speed;
  speed << gts << " GT/s";
  pci.append_attribute("link_speed") = speed.str().c_str();
  pci.append_attribute("link_width") = width;
}

// A <pci> element: busid, class, then vendor and device where known, as NCCL writes them.
pugi::xml_node appendPci(pugi::xml_node parent, const PciAddress& busid, uint32_t cls, uint16_t vendor,
                         uint16_t device) {
  pugi::xml_node pci = parent.append_child("pci");
  pci.append_attribute("busid") = busid.str().c_str();
  pci.append_attribute("class") = common::hexNumber(cls, 6).c_str();
  if (vendor != 0) pci.append_attribute("vendor") = common::hexNumber(vendor, 4).c_str();
  if (device != 0) pci.append_attribute("device") = common::hexNumber(device, 4).c_str();
  return pci;
}

// Collects what pugixml saves.
struct StringWriter : pugi::xml_writer {
  std::string text;
  void write(const void* data, size_t size) override { text.append(static_cast<const char*>(data), size); }
};

class Writer {
 public:
  explicit Writer(const NodeTopology& topo) : topo_(topo) {}

  std::string write() {
    pugi::xml_node system = doc_.append_child("system");
    system.append_attribute("version") = 1;
    std::vector<int> numas;
    for (const NumaNode& n : topo_.numa_nodes) numas.push_back(n.os_index);
    if (numas.empty()) numas.push_back(0);
    size_t words = 1;
    for (const NumaNode& n : topo_.numa_nodes) {
      if (!n.cpus.empty()) words = std::max<size_t>(words, n.cpus.cpus().back() / 32 + 1);
    }
    for (int numa : numas) writeCpu(system, numa, numa == numas.front(), words);
    StringWriter out;
    doc_.save(out, "  ", pugi::format_indent | pugi::format_no_declaration, pugi::encoding_utf8);
    // pugixml ends an empty element with " />"; NCCL's parser (src/graph/xml.cc, xmlGetNode) reads
    // the space as the start of one more attribute, with an empty name. No attribute value holds
    // " />\n" (pugixml writes a newline in one as "&#10;"), so this changes only the tags' ends.
    std::string& text = out.text;
    for (size_t at = text.find(" />\n"); at != std::string::npos; at = text.find(" />\n", at))
      text.erase(at, 1);
    return std::move(text);
  }

 private:
  // Devices of unknown locality go under the first <cpu>.
  bool belongs(int numa, bool first, const PciPlacement& at) const {
    int n = at.numa;
    if (n == kNone && at.package != kNone) {
      for (const NumaNode& node : topo_.numa_nodes) {
        if (node.package == at.package) {
          n = node.os_index;
          break;
        }
      }
    }
    return n == numa || (first && (n == kNone || topo_.numaNode(n) == nullptr));
  }

  void writeCpu(pugi::xml_node system, int numa, bool first, size_t words) {
    const NumaNode* node = topo_.numaNode(numa);
    const Package* pkg = nullptr;
    for (const Package& p : topo_.packages) {
      if (node != nullptr && p.os_index == node->package) pkg = &p;
    }
    pugi::xml_node cpu = system.append_child("cpu");
    cpu.append_attribute("numaid") = numa;
    if (node != nullptr && !node->cpus.empty())
      cpu.append_attribute("affinity") = node->cpus.toMask(words).c_str();
    if (pkg != nullptr && !pkg->vendor.empty()) {
      cpu.append_attribute("arch") = "x86_64";
      cpu.append_attribute("vendor") = pkg->vendor.c_str();
      if (pkg->family != kNone) cpu.append_attribute("familyid") = pkg->family;
      if (pkg->model_number != kNone) cpu.append_attribute("modelid") = pkg->model_number;
    }
    for (size_t s = 0; s < topo_.switches.size(); ++s) {
      const PciSwitch& sw = topo_.switches[s];
      PciPlacement at;
      at.numa = sw.numa;
      if (sw.parent == kNoIndex && belongs(numa, first, at)) writeSwitch(cpu, s);
    }
    writeDevicesAt(cpu, kNoIndex, numa, first);
    for (const Nic& n : topo_.nics) {
      if (!n.has_pci && belongs(numa, first, n.at)) writeNet(cpu, n);
    }
  }

  void writeSwitch(pugi::xml_node parent, size_t s) {
    const PciSwitch& sw = topo_.switches[s];
    pugi::xml_node pci = parent.append_child("pci");
    pci.append_attribute("busid") = sw.pci.str().c_str();
    pci.append_attribute("class") = "0x060400";
    if (sw.vendor != 0) {
      pci.append_attribute("vendor") = common::hexNumber(sw.vendor, 4).c_str();
      pci.append_attribute("device") = common::hexNumber(sw.device, 4).c_str();
    }
    setLink(pci, sw.link);
    for (size_t c = 0; c < topo_.switches.size(); ++c) {
      if (topo_.switches[c].parent == s) writeSwitch(pci, c);
    }
    writeDevicesAt(pci, s, kNone, false);
  }

  // GPUs and NICs under switch `s`, or (s == kNoIndex) directly under NUMA node `numa`.
  void writeDevicesAt(pugi::xml_node parent, size_t s, int numa, bool first) {
    auto here = [&](const PciPlacement& at) {
      return s != kNoIndex ? at.switch_index == s : at.switch_index == kNoIndex && belongs(numa, first, at);
    };
    for (const Gpu& g : topo_.gpus) {
      if (here(g.at)) writeGpu(parent, g);
    }
    for (const Nic& n : topo_.nics) {
      if (n.has_pci && here(n.at)) writeNic(parent, n);
    }
  }

  void writeGpu(pugi::xml_node parent, const Gpu& g) {
    pugi::xml_node pci =
        appendPci(parent, g.pci, g.pci_class != 0 ? g.pci_class : 0x030200, g.vendor, g.device);
    setLink(pci, g.link);
    // NCCL requires dev, sm, rank and gdr on a <gpu>; without a known sm the bare <pci> is the hint.
    if (!g.isNvidia() || g.sm == 0) return;
    pugi::xml_node gpu = pci.append_child("gpu");
    gpu.append_attribute("dev") = g.index;
    gpu.append_attribute("sm") = g.sm;
    gpu.append_attribute("rank") = g.index;
    gpu.append_attribute("gdr") = 1;
    auto nvlink = [&](const std::string& target, int count, const char* tclass) {
      pugi::xml_node link = gpu.append_child("nvlink");
      link.append_attribute("target") = target.c_str();
      link.append_attribute("count") = count;
      link.append_attribute("tclass") = tclass;
    };
    if (g.nvswitch_links > 0) nvlink("ffff:ff:00.0", g.nvswitch_links, "0x068000");
    for (const NvLinkPeer& p : g.nvlinks) {
      if (p.gpu != kNoIndex) {
        nvlink(topo_.gpus[p.gpu].pci.str(), p.count, "0x030200");
      } else if (p.peer == "cpu") {
        nvlink(g.pci.str(), p.count, "0x068001");
      }
    }
  }

  void writeNic(pugi::xml_node parent, const Nic& n) {
    uint32_t cls = n.pci_class;
    if ((cls >> 16) != 0x02) {  // NCCL knows NICs by class 0x02xxxx (old HCAs report 0x0c06, 0x0280)
      bool ib = !n.ports.empty() && n.ports.front().link_layer == LinkLayer::kInfiniBand;
      cls = ib ? 0x020700 : 0x020000;
    }
    pugi::xml_node pci = appendPci(parent, n.pci, cls, n.vendor, n.device);
    setLink(pci, n.link);
    if (!n.name.starts_with("pci:")) writeNet(pci, n);
  }

  void writeNet(pugi::xml_node parent, const Nic& n) {
    pugi::xml_node nic = parent.append_child("nic");
    int dev = static_cast<int>(&n - topo_.nics.data());
    // Only what the topology knows. NCCL (2.28, src/graph/topo.cc, ncclTopoProcessNet) fills a
    // <net> it finds in NCCL_TOPO_FILE with xmlInitAttr*, which sets an attribute only where the
    // file leaves it out: latency, speed, port, guid, maxconn and gdr then come from the NIC
    // itself. What the file does give wins: speed="0" is read as 10 Gb/s (ncclTopoAddNet: "if
    // (mbps <= 0) mbps = 10000"), guid="0x0" on every NIC makes them one ASIC and one rail
    // (ncclTopoAddNetAsic, ncclTopoGetNetDevKey), and a gdr guessed from the vendor overrides
    // NCCL's own GPUDirect RDMA probe.
    for (const NicPort& p : n.ports) {
      pugi::xml_node net = nic.append_child("net");
      net.append_attribute("name") = n.name.c_str();
      net.append_attribute("dev") = dev;
      if (p.rate_gbps > 0)
        net.append_attribute("speed") = static_cast<long long>(std::llround(p.rate_gbps * 1000));
      net.append_attribute("port") = p.port;
    }
  }

  const NodeTopology& topo_;
  pugi::xml_document doc_;
};

}  // namespace

NodeTopology readNcclXmlString(const std::string& xml, const std::string& name) {
  return Reader(name).read(xml);
}

NodeTopology readNcclXml(const std::filesystem::path& file) {
  return readNcclXmlString(common::readRegularFile(file, common::kTopologyFileLimit, "topology files"),
                           file.string());
}

std::string toNcclXml(const NodeTopology& topo) {
  return Writer(topo).write();
}

}  // namespace poolrun::topo
