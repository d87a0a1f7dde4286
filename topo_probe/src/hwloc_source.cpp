// NodeTopology from an hwloc topology: a live one (I/O discovery on) or one imported from XML.

#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <pugixml.hpp>
#include <string_view>

#include "file_util.hpp"
#include "hwloc_source.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/nesting.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/topo/sources.hpp"

namespace poolrun::topo {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocTopology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

CpuSet toCpuSet(hwloc_const_bitmap_t bitmap) {
  std::vector<unsigned> cpus;
  if (bitmap != nullptr && !hwloc_bitmap_isfull(bitmap)) {
    unsigned i;
    hwloc_bitmap_foreach_begin(i, bitmap) {
      cpus.push_back(i);
    }
    hwloc_bitmap_foreach_end();
  }
  return CpuSet(std::move(cpus));
}

std::string info(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v != nullptr ? v : "";
}

int toInt(const std::string& s, int fallback = kNone) {
  try {
    return s.empty() ? fallback : std::stoi(s);
  } catch (const std::exception&) {
    return fallback;
  }
}

PciAddress pciOf(hwloc_obj_t obj) {
  PciAddress a;
  a.domain = obj->attr->pcidev.domain;
  a.bus = obj->attr->pcidev.bus;
  a.device = obj->attr->pcidev.dev;
  a.function = obj->attr->pcidev.func;
  return a;
}

PciLink linkOf(hwloc_obj_t obj) {
  PciLink link;
  link.gbyte_s = static_cast<double>(obj->attr->pcidev.linkspeed);
  return link;
}

bool isHostBridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

bool isPciBridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

// "mlx4_0", "mlx5_12": an RDMA device of the Mellanox mlx4 and mlx5 drivers, mlx<driver>_<index>.
bool isRdmaName(const char* name) {
  if (name == nullptr) return false;
  std::string_view rest = name;
  return common::takePrefix(rest, "mlx") && !common::takeDigits(rest).empty() &&
         common::takePrefix(rest, "_") && !common::takeDigits(rest).empty() && rest.empty();
}

// Number of bytes in a hwloc network "Address" (20 for IPoIB, 6 for Ethernet).
int addressBytes(const std::string& address) {
  if (address.empty()) return 0;
  return static_cast<int>(std::count(address.begin(), address.end(), ':')) + 1;
}

class Converter {
 public:
  Converter(hwloc_topology_t topo, NodeTopology& out) : topo_(topo), out_(out) {}

  void run() {
    hwloc_obj_t machine = hwloc_get_root_obj(topo_);
    out_.hostname = info(machine, "HostName");
    readPackages();
    readNumaNodes();
    readCores();
    for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_pcidev(topo_, obj)) != nullptr;) readPciDevice(obj);
    readNvLinks();
    out_.normalize();
  }

 private:
  void readPackages() {
    int n = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_PACKAGE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t obj = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, static_cast<unsigned>(i));
      Package p;
      p.os_index = obj->os_index == HWLOC_UNKNOWN_INDEX ? i : static_cast<int>(obj->os_index);
      p.cpus = toCpuSet(obj->cpuset);
      p.vendor = info(obj, "CPUVendor");
      p.model = info(obj, "CPUModel");
      p.family = toInt(info(obj, "CPUFamilyNumber"));
      p.model_number = toInt(info(obj, "CPUModelNumber"));
      out_.packages.push_back(std::move(p));
    }
    if (out_.packages.empty()) {
      Package p;
      p.cpus = toCpuSet(hwloc_get_root_obj(topo_)->cpuset);
      out_.packages.push_back(std::move(p));
    }
  }

  int packageOf(hwloc_obj_t obj) {
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, obj);
    if (pkg == nullptr && obj->type == HWLOC_OBJ_PACKAGE) pkg = obj;
    if (pkg != nullptr && pkg->os_index != HWLOC_UNKNOWN_INDEX) return static_cast<int>(pkg->os_index);
    return out_.packages.size() == 1 ? out_.packages[0].os_index : kNone;
  }

  void readNumaNodes() {
    int n = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t obj = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
      NumaNode node;
      node.os_index = obj->os_index == HWLOC_UNKNOWN_INDEX ? i : static_cast<int>(obj->os_index);
      node.cpus = toCpuSet(obj->cpuset);
      node.memory_bytes = obj->attr->numanode.local_memory;
      node.package = packageOf(obj);
      out_.numa_nodes.push_back(std::move(node));
    }
  }

  void readCores() {
    int n = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_CORE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t core = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
      CpuSet pus = toCpuSet(core->cpuset);
      if (!pus.empty()) out_.cores.push_back(std::move(pus));
    }
  }

  // NUMA node of an I/O object's locality: its non-I/O ancestor's single NUMA node.
  int numaOf(hwloc_obj_t obj) {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, obj);
    if (anc != nullptr && anc->nodeset != nullptr && hwloc_bitmap_weight(anc->nodeset) == 1) {
      return hwloc_bitmap_first(anc->nodeset);
    }
    return out_.numa_nodes.size() == 1 ? out_.numa_nodes[0].os_index : kNone;
  }

  PciPlacement placementOf(hwloc_obj_t dev) {
    PciPlacement at;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, dev);
    at.numa = numaOf(dev);
    at.package = anc != nullptr ? packageOf(anc) : kNone;
    std::vector<hwloc_obj_t> bridges;  // nearest first
    hwloc_obj_t host = nullptr;
    for (hwloc_obj_t p = dev->parent; p != nullptr && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
      if (isHostBridge(p)) {
        host = p;
        break;
      }
      if (isPciBridge(p)) bridges.push_back(p);
    }
    if (host != nullptr) at.host_bridge = hostBridgeIndex(host);
    // Depth below the host bridge: 1 = root port, even = switch upstream port, odd >= 3 = downstream
    // port (part of the switch above it), as NCCL pairs them.
    const size_t k = bridges.size();
    for (size_t j = 0; j < k; ++j) {
      size_t depth = k - j;
      if (depth == 1 || depth % 2 == 0) {
        at.switch_index = switchIndex(bridges, j, at);
        break;
      }
    }
    return at;
  }

  size_t hostBridgeIndex(hwloc_obj_t host) {
    auto it = hostBridges_.find(host);
    if (it != hostBridges_.end()) return it->second;
    HostBridge hb;
    char buf[48];
    std::snprintf(buf, sizeof buf, "%04x:[%02x-%02x]", host->attr->bridge.downstream.pci.domain,
                  host->attr->bridge.downstream.pci.secondary_bus,
                  host->attr->bridge.downstream.pci.subordinate_bus);
    hb.buses = buf;
    hb.numa = numaOf(host);
    out_.host_bridges.push_back(hb);
    size_t index = out_.host_bridges.size() - 1;
    hostBridges_[host] = index;
    return index;
  }

  // The switch node of bridges[j] (a root port or an upstream port), created with its parents.
  size_t switchIndex(const std::vector<hwloc_obj_t>& bridges, size_t j, const PciPlacement& at) {
    hwloc_obj_t obj = bridges[j];
    auto it = switches_.find(obj);
    if (it != switches_.end()) return it->second;
    const size_t k = bridges.size();
    const size_t depth = k - j;
    PciSwitch s;
    s.pci = pciOf(obj);
    s.vendor = obj->attr->pcidev.vendor_id;
    s.device = obj->attr->pcidev.device_id;
    s.root_port = depth == 1;
    s.host_bridge = at.host_bridge;
    s.numa = at.numa;
    s.link = linkOf(obj);
    if (depth >= 2) s.parent = switchIndex(bridges, depth == 2 ? k - 1 : j + 2, at);
    out_.switches.push_back(s);
    size_t index = out_.switches.size() - 1;
    switches_[obj] = index;
    return index;
  }

  void readPciDevice(hwloc_obj_t obj) {
    uint32_t cls = obj->attr->pcidev.class_id;  // 16-bit class<<8|subclass
    uint16_t vendor = obj->attr->pcidev.vendor_id;
    hwloc_obj_t ofdev = nullptr;
    bool coproc = false;
    std::vector<hwloc_obj_t> netdevs;
    for (hwloc_obj_t c = obj->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
      auto t = c->attr->osdev.type;
      if (t == HWLOC_OBJ_OSDEV_OPENFABRICS) ofdev = c;
      if (t == HWLOC_OBJ_OSDEV_NETWORK) {
        if (isRdmaName(c->name) && ofdev == nullptr) {
          ofdev = c;  // old exports list mlx4_0 as a network device
        } else {
          netdevs.push_back(c);
        }
      }
      if (t == HWLOC_OBJ_OSDEV_COPROC || t == HWLOC_OBJ_OSDEV_GPU) {
        if (c->name != nullptr &&
            (std::strncmp(c->name, "cuda", 4) == 0 || std::strncmp(c->name, "nvml", 4) == 0 ||
             std::strncmp(c->name, "rsmi", 4) == 0 || std::strncmp(c->name, "opencl", 6) == 0)) {
          coproc = true;
        }
      }
    }
    // 3D controllers are GPUs; VGA and other display controllers only with a compute OS device
    // (CUDA, NVML, OpenCL, ROCm SMI) or from NVIDIA, which leaves out BMC graphics (ASPEED, Matrox).
    bool display = (cls >> 8) == 0x03;
    bool gpu = display && (cls == 0x0302 || vendor == kVendorNvidia || coproc);
    bool ibClass = cls == 0x0207 || cls == 0x0c06;
    if (gpu) {
      readGpu(obj);
    } else if (ofdev != nullptr || ibClass) {
      readNic(obj, ofdev, netdevs);
    }
  }

  void readGpu(hwloc_obj_t obj) {
    Gpu g;
    g.pci = pciOf(obj);
    g.vendor = obj->attr->pcidev.vendor_id;
    g.device = obj->attr->pcidev.device_id;
    g.pci_class = static_cast<uint32_t>(obj->attr->pcidev.class_id) << 8;
    g.at = placementOf(obj);
    g.link = linkOf(obj);
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, obj);
    g.cpus = anc != nullptr ? toCpuSet(anc->cpuset) : CpuSet();
    g.model = info(obj, "PCIDevice");
    for (hwloc_obj_t c = obj->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
      if (std::string m = info(c, "GPUModel"); !m.empty()) g.model = m;
      if (std::string u = info(c, "NVIDIAUUID"); !u.empty()) g.uuid = u;
      if (std::string mem = info(c, "CUDAGlobalMemorySize"); !mem.empty() && g.memory_bytes == 0) {
        g.memory_bytes = static_cast<uint64_t>(std::stoull(mem)) << 10;
      }
      osdevToGpu_[c] = out_.gpus.size();
    }
    if (g.isNvidia()) g.sm = smFromPciDevice(g.device);
    pciToGpu_[obj] = out_.gpus.size();
    g.index = out_.gpus.size();
    out_.gpus.push_back(std::move(g));
  }

  void readNic(hwloc_obj_t obj, hwloc_obj_t ofdev, const std::vector<hwloc_obj_t>& netdevs) {
    Nic n;
    n.pci = pciOf(obj);
    n.name = ofdev != nullptr && ofdev->name != nullptr ? ofdev->name : "pci:" + n.pci.str();
    n.vendor = obj->attr->pcidev.vendor_id;
    n.device = obj->attr->pcidev.device_id;
    uint32_t cls = obj->attr->pcidev.class_id;
    n.pci_class = cls << 8;
    n.at = placementOf(obj);
    n.link = linkOf(obj);
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, obj);
    n.cpus = anc != nullptr ? toCpuSet(anc->cpuset) : CpuSet();

    LinkLayer classLayer = (cls == 0x0207 || cls == 0x0c06)                  ? LinkLayer::kInfiniBand
                           : (cls >> 8) == 0x02 && n.vendor != kVendorAmazon ? LinkLayer::kEthernet
                                                                             : LinkLayer::kUnspecified;
    // Ports: from the OpenFabrics device's PortNState infos, else one per netdev, else one.
    std::map<int, NicPort> ports;
    if (ofdev != nullptr) {
      for (unsigned i = 0; i < ofdev->infos_count; ++i) {
        std::string key = ofdev->infos[i].name;
        if (!key.starts_with("Port") || !key.ends_with("State")) continue;
        int port = toInt(key.substr(4, key.size() - 9));
        if (port <= 0) continue;
        ports[port].port = port;
        ports[port].state = portStateFromString(ofdev->infos[i].value);
      }
    }
    int next = 1;
    for (hwloc_obj_t nd : netdevs) {
      int port = toInt(info(nd, "Port"), kNone);
      if (port <= 0) port = ports.size() == 1 && netdevs.size() == 1 ? ports.begin()->first : next;
      next = port + 1;
      NicPort& p = ports[port];
      p.port = port;
      p.netdev = nd->name != nullptr ? nd->name : "";
      int bytes = addressBytes(info(nd, "Address"));
      p.link_layer = bytes == 20 ? LinkLayer::kInfiniBand : bytes == 6 ? LinkLayer::kEthernet : classLayer;
    }
    if (ports.empty()) ports[1].port = 1;
    for (auto& [num, p] : ports) {
      if (p.netdev.empty()) p.link_layer = classLayer;
      n.ports.push_back(p);
    }
    out_.nics.push_back(std::move(n));
  }

  // NVLinkBandwidth distances (MB/s): GPU<->GPU, GPU<->NVSwitch, GPU<->CPU.
  void readNvLinks() {
    unsigned nr = 0;
    hwloc_distances_s* dist[4];
    nr = 4;
    if (hwloc_distances_get_by_name(topo_, "NVLinkBandwidth", &nr, dist, 0) != 0) return;
    for (unsigned d = 0; d < std::min(nr, 4u); ++d) {
      readNvLinkMatrix(dist[d]);
      hwloc_distances_release(topo_, dist[d]);
    }
  }

  size_t gpuOfObj(hwloc_obj_t o) {
    if (auto it = osdevToGpu_.find(o); it != osdevToGpu_.end()) return it->second;
    if (auto it = pciToGpu_.find(o); it != pciToGpu_.end()) return it->second;
    return kNoIndex;
  }

  void readNvLinkMatrix(hwloc_distances_s* dist) {
    unsigned n = dist->nbobjs;
    for (unsigned i = 0; i < n; ++i) {
      size_t gi = gpuOfObj(dist->objs[i]);
      if (gi == kNoIndex) continue;
      Gpu& g = out_.gpus[gi];
      // hwloc counts 20 GB/s per NVLink1 link, 25 GB/s per later link, 50 GB/s from NVLink5.
      uint64_t perLink = g.sm == 60 ? 20000 : g.sm >= 100 ? 50000 : 25000;
      for (unsigned j = 0; j < n; ++j) {
        if (i == j) continue;
        uint64_t bw = dist->values[i * n + j];
        if (bw == 0) continue;
        int links = static_cast<int>((bw + perLink / 2) / perLink);
        if (links == 0) links = 1;
        hwloc_obj_t peer = dist->objs[j];
        size_t gj = gpuOfObj(peer);
        if (gj != kNoIndex) {
          g.nvlinks.push_back({gj, NodeTopology::gpuLabel(gj), links});
        } else if (peer->type == HWLOC_OBJ_PCI_DEVICE) {
          g.nvswitch_links += links;  // an NVSwitch (class 0x0680; some report no ids at all)
        } else if (peer->type == HWLOC_OBJ_PACKAGE) {
          g.nvlinks.push_back({kNoIndex, "cpu", links});
        }
      }
    }
    // NVSwitch links are reported per switch; merge the per-GPU peers into one entry.
    for (Gpu& g : out_.gpus) {
      if (g.nvswitch_links > 0) out_.nvswitch = true;
    }
  }

  hwloc_topology_t topo_;
  NodeTopology& out_;
  std::map<hwloc_obj_t, size_t> hostBridges_, switches_, osdevToGpu_, pciToGpu_;
};

// hwloc's XML import through libxml2 crashes on some documents that are well-formed XML (hwloc
// 2.9's, on a `<!DOCTYPE topology>` without a system id: a segfault in every program that reads
// topology files); its own minimal parser refuses them and reads every export hwloc writes. hwloc
// reads the choice from the environment once, at its first import: set before that.
void useHwlocsOwnXmlParser() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("HWLOC_LIBXML_IMPORT", "0", 1); });
}

HwlocTopology newTopology() {
  useHwlocsOwnXmlParser();
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) != 0) throw Error(ErrorCode::kInternal, "hwloc_topology_init failed");
  HwlocTopology topo(t);
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
  return topo;
}

// The first element nested deeper than `maxDepth` below `root`, or an empty node. Iterative: the
// document may be nested far deeper than any stack.
pugi::xml_node tooDeep(pugi::xml_node root, int maxDepth) {
  pugi::xml_node node = root;
  int depth = 0;
  while (!node.empty()) {
    if (pugi::xml_node child = node.first_child(); !child.empty()) {
      node = child;
      if (++depth > maxDepth) return node;
      continue;
    }
    while (depth > 0 && node.next_sibling().empty()) {
      node = node.parent();
      --depth;
    }
    if (depth == 0) break;
    node = node.next_sibling();
  }
  return {};
}

// hwloc's own XML errors are terse; check the document first so that the user learns the line.
// hwloc's importer recurses once per level: the depth is bounded here.
void validateHwlocXml(const std::string& xml, const std::string& name) {
  pugi::xml_document doc;
  pugi::xml_parse_result r = doc.load_buffer(xml.data(), xml.size());
  if (!r) {
    throw badInput(name + ": malformed XML at line " + std::to_string(detail::lineOf(xml, r.offset)) + ": " +
                   r.description());
  }
  pugi::xml_node root = doc.document_element();
  if (std::strcmp(root.name(), "topology") != 0) {
    throw badInput(name + ": not an hwloc topology (root element <" + std::string(root.name()) +
                   ">, expected <topology>)");
  }
  std::string version = root.attribute("version").as_string();
  if (!version.empty() && std::atoi(version.c_str()) >= 3) {
    throw badInput(name + ": hwloc XML version " + version +
                   " needs hwloc 3; this build reads versions 1.x and 2.x (export it again with "
                   "`lstopo --of xml` from hwloc 2)");
  }
  if (root.child("object").empty()) {
    throw badInput(name + ": hwloc XML has no <object> (an empty or truncated export)");
  }
  if (pugi::xml_node deep = tooDeep(root, common::kMaxXmlDepth); !deep.empty()) {
    throw badInput(name + ": XML nests deeper than " + std::to_string(common::kMaxXmlDepth) +
                   " levels at line " + std::to_string(detail::lineOf(xml, deep.offset_debug())) +
                   " (hwloc exports of real machines nest about 15; is it the right file?)");
  }
}

}  // namespace

namespace detail {

NodeTopology convertHwloc(hwloc_topology_t topo, const std::string& source) {
  NodeTopology out;
  out.source = source;
  Converter(topo, out).run();
  return out;
}

}  // namespace detail

NodeTopology readHwlocXmlString(const std::string& xml, const std::string& name) {
  validateHwlocXml(xml, name);
  HwlocTopology topo = newTopology();
  if (hwloc_topology_set_xmlbuffer(topo.get(), xml.data(), static_cast<int>(xml.size()) + 1) != 0 ||
      hwloc_topology_load(topo.get()) != 0) {
    throw badInput(name + ": hwloc could not import this XML (" + std::strerror(errno) +
                   "); check it loads with `HWLOC_LIBXML_IMPORT=0 lstopo-no-graphics -i " + name +
                   "`, or export it again with `lstopo --of xml`");
  }
  return detail::convertHwloc(topo.get(), "hwloc-xml:" + name);
}

NodeTopology readHwlocXml(const std::filesystem::path& file) {
  return readHwlocXmlString(common::readRegularFile(file, common::kTopologyFileLimit, "topology files"),
                            file.string());
}

namespace detail {

NodeTopology probeHwlocLive() {
  HwlocTopology topo = newTopology();
  if (hwloc_topology_load(topo.get()) != 0) {
    throw Error(ErrorCode::kIo, std::string("hwloc could not probe this machine: ") + std::strerror(errno));
  }
  NodeTopology out = convertHwloc(topo.get(), "live");
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) out.hostname = host;
  return out;
}

}  // namespace detail
}  // namespace poolrun::topo
