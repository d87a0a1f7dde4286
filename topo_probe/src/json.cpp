// The "poolrun.topology/2" JSON document (and /1, read: the same without MIG).

#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "poolrun/common/error.hpp"
#include "poolrun/common/json_fields.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::topo {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

ojson optionalInt(int v) {
  return v == kNone ? ojson(nullptr) : ojson(v);
}

ojson optionalIndex(size_t v) {
  return v == kNoIndex ? ojson(nullptr) : ojson(v);
}

// A vector index read as an int (kNone where absent) and checked against -1 and the count.
size_t indexOf(int v) {
  return v == kNone ? kNoIndex : static_cast<size_t>(v);
}

std::string hex4(uint32_t v) {
  return common::hexNumber(v, 4);
}

std::string hex6(uint32_t v) {
  return common::hexNumber(v, 6);
}

// A measurement the source did not give (recorded as 0) is null in the JSON, not a zero a reader
// would take for a dead link; readers take null (and the 0 older files hold) as unknown.
template <typename T>
ojson known(T v) {
  return v > 0 ? ojson(v) : ojson(nullptr);
}

ojson linkJson(const PciLink& l) {
  return {{"speed_gts", known(l.speed_gts)}, {"width", known(l.width)}, {"gbyte_s", known(l.gbyte_s)}};
}

// A GPU's MIG state; null for a GPU without MIG.
ojson migJson(const MigState& m) {
  if (!m.capable) return nullptr;
  ojson profiles = ojson::array();
  for (const MigProfile& p : m.profiles)
    profiles.push_back({{"id", p.id},
                        {"name", p.name},
                        {"slices", p.slices},
                        {"max_instances", p.max_instances},
                        {"sm", p.sm},
                        {"memory_bytes", p.memory_bytes}});
  ojson instances = ojson::array();
  for (const MigInstance& i : m.instances)
    instances.push_back({{"gpu_instance", i.gpu_instance},
                         {"compute_instance", i.compute_instance},
                         {"profile", i.profile},
                         {"profile_id", i.profile_id},
                         {"slices", i.slices},
                         {"sm", i.sm},
                         {"memory_bytes", i.memory_bytes},
                         {"uuid", i.uuid}});
  return {{"enabled", m.enabled}, {"pending", m.pending}, {"profiles", profiles}, {"instances", instances}};
}

ojson placementJson(const PciPlacement& at) {
  return {{"switch", optionalIndex(at.switch_index)},
          {"host_bridge", optionalIndex(at.host_bridge)},
          {"numa", optionalInt(at.numa)},
          {"package", optionalInt(at.package)}};
}

// No GPU NVML describes has more MIG profiles or instances than this (an H100 offers about ten
// profiles and holds at most seven instances).
constexpr size_t kMaxMigEntries = 64;

std::string tooMany(size_t n) {
  return std::to_string(n) + " entries (at most " + std::to_string(kMaxMigEntries) + ")";
}

// No node has more GPUs or NICs than this (the largest hosts have 16 GPUs and about as many NIC
// ports). The bound is what keeps a node's GPU-and-NIC path matrix, which grows with the square of
// the count, small: a registration of 2,000 GPUs cost poold 12 s and 500 MiB.
constexpr size_t kMaxNodeDevices = 256;

// Reading: common::JsonFields with the defaults of this format (an absent or null field is 0, "",
// false or kNone: a source that does not know a value leaves it out) and its own types.
class Fields {
 public:
  Fields(const json& j, std::string where, const std::string& file)
      : f_(j, std::move(where),
           [&file](const std::string& message) { throw badInput(file + ": " + message); }) {}

  [[noreturn]] void fail(const std::string& what) const { f_.fail(what); }
  [[noreturn]] void failField(const char* key, const std::string& what) const { f_.failField(key, what); }

  const json& get(const char* key) const { return f_.need(key); }
  bool has(const char* key) const { return f_.has(key); }

  std::string str(const char* key, const std::string& fallback = "") const {
    return f_.string(key, fallback);
  }
  std::string requiredStr(const char* key) const { return f_.string(key); }
  int integer(const char* key, int fallback = kNone) const {
    return f_.integer(key, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), fallback);
  }
  double number(const char* key) const {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    return f_.number(key, -kInf, kInf, 0);
  }
  // A count or a measure that no hardware makes negative or past `max`: refused naming the range
  // rather than read as unknown (a negative rate) or kept (an SM version of -1, a rate of 1e308).
  int integerIn(const char* key, int min, int max, int fallback) const {
    return f_.integer(key, min, max, fallback);
  }
  double numberIn(const char* key, double max) const { return f_.number(key, 0, max, 0); }
  uint64_t u64(const char* key) const { return f_.integer<uint64_t>(key, 0, UINT64_MAX, 0); }
  bool boolean(const char* key) const { return f_.boolean(key, false); }
  uint32_t hex(const char* key) const {
    std::string s = str(key);
    if (s.empty()) return 0;
    std::optional<uint32_t> v = common::parseHex<uint32_t>(s);
    if (!v) f_.failField(key, common::shownJson(s) + " is not hexadecimal (such as 0x15b3)");
    return *v;
  }
  CpuSet cpus(const char* key) const {
    try {
      return CpuSet::parseList(str(key));
    } catch (const Error& e) {
      f_.failField(key, e.what());
    }
  }
  PciAddress pci(const char* key) const {
    std::string s = str(key);
    auto a = PciAddress::parse(s);
    if (!a) f_.failField(key, common::shownJson(s) + " is not a PCI address dddd:bb:dd.f");
    return *a;
  }
  const json& array(const char* key) const { return f_.optionalArray(key); }
  PciLink link() const {
    PciLink l;
    if (!has("link")) return l;
    Fields f(f_.object("link"));
    l.speed_gts = f.numberIn("speed_gts", 1000);  // GT/s per lane (PCIe 6 is 64)
    l.width = f.integerIn("width", 0, 64, 0);
    l.gbyte_s = f.numberIn("gbyte_s", 1e6);
    return l;
  }
  // A whole number from 0 up.
  template <typename T>
  T count(const char* key) const {
    return f_.integer<T>(key, 0, std::numeric_limits<T>::max(), 0);
  }
  MigState mig() const {
    MigState m;
    m.capable = true;
    m.enabled = boolean("enabled");
    m.pending = boolean("pending");
    const json& profiles = array("profiles");
    if (profiles.size() > kMaxMigEntries) failField("profiles", tooMany(profiles.size()));
    for (size_t i = 0; i < profiles.size(); ++i) {
      Fields f(f_.child(profiles[i], f_.element("profiles", i)));
      m.profiles.push_back({f.count<unsigned>("id"), f.str("name"), f.count<int>("slices"),
                            f.count<int>("max_instances"), f.count<int>("sm"), f.u64("memory_bytes")});
    }
    const json& instances = array("instances");
    if (instances.size() > kMaxMigEntries) failField("instances", tooMany(instances.size()));
    for (size_t i = 0; i < instances.size(); ++i) {
      Fields f(f_.child(instances[i], f_.element("instances", i)));
      MigInstance inst;
      inst.gpu_instance = f.count<int>("gpu_instance");
      inst.compute_instance = f.count<int>("compute_instance");
      inst.profile = f.str("profile");
      inst.profile_id = f.count<unsigned>("profile_id");
      inst.slices = f.count<int>("slices");
      inst.sm = f.count<int>("sm");
      inst.memory_bytes = f.u64("memory_bytes");
      inst.uuid = f.str("uuid");
      m.instances.push_back(std::move(inst));
    }
    return m;
  }
  PciPlacement placement(size_t switches, size_t bridges) const {
    PciPlacement at;
    const int sw = integer("switch");
    const int bridge = integer("host_bridge");
    at.numa = integer("numa");
    at.package = integer("package");
    if (sw != kNone && (sw < 0 || static_cast<size_t>(sw) >= switches)) {
      fail("switch " + std::to_string(sw) + " does not exist");
    }
    if (bridge != kNone && (bridge < 0 || static_cast<size_t>(bridge) >= bridges)) {
      fail("host_bridge " + std::to_string(bridge) + " does not exist");
    }
    at.switch_index = indexOf(sw);
    at.host_bridge = indexOf(bridge);
    return at;
  }

 private:
  explicit Fields(common::JsonFields f) : f_(std::move(f)) {}

  common::JsonFields f_;
};

std::string at(const char* what, size_t i) {
  return std::string(what) + "[" + std::to_string(i) + "]";
}

}  // namespace

ojson toJson(const NodeTopology& topo) {
  ojson doc;
  doc["schema"] = kTopologySchema;
  doc["hostname"] = topo.hostname;
  doc["source"] = topo.source;
  ojson packages = ojson::array();
  for (const Package& p : topo.packages) {
    packages.push_back({{"index", p.os_index},
                        {"cpuset", p.cpus.toList()},
                        {"vendor", p.vendor},
                        {"model", p.model},
                        {"family", optionalInt(p.family)},
                        {"model_number", optionalInt(p.model_number)}});
  }
  doc["packages"] = packages;
  ojson numa = ojson::array();
  for (const NumaNode& n : topo.numa_nodes) {
    numa.push_back({{"index", n.os_index},
                    {"cpuset", n.cpus.toList()},
                    {"memory_bytes", known(n.memory_bytes)},
                    {"package", optionalInt(n.package)}});
  }
  doc["numa_nodes"] = numa;
  ojson cores = ojson::array();
  for (const CpuSet& c : topo.cores) cores.push_back(c.toList());
  doc["cores"] = cores;
  ojson bridges = ojson::array();
  for (const HostBridge& b : topo.host_bridges)
    bridges.push_back({{"buses", b.buses}, {"numa", optionalInt(b.numa)}});
  doc["host_bridges"] = bridges;
  ojson switches = ojson::array();
  for (const PciSwitch& s : topo.switches) {
    switches.push_back({{"pci", s.pci.str()},
                        {"vendor_id", hex4(s.vendor)},
                        {"device_id", hex4(s.device)},
                        {"root_port", s.root_port},
                        {"parent", optionalIndex(s.parent)},
                        {"host_bridge", optionalIndex(s.host_bridge)},
                        {"numa", optionalInt(s.numa)},
                        {"link", linkJson(s.link)}});
  }
  doc["switches"] = switches;
  ojson gpus = ojson::array();
  for (const Gpu& g : topo.gpus) {
    ojson links = ojson::array();
    for (const NvLinkPeer& p : g.nvlinks) links.push_back({{"peer", p.peer}, {"count", p.count}});
    gpus.push_back({{"index", g.index},
                    {"pci", g.pci.str()},
                    {"vendor", vendorName(g.vendor)},
                    {"vendor_id", hex4(g.vendor)},
                    {"device_id", hex4(g.device)},
                    {"class", hex6(g.pci_class)},
                    {"cuda", g.isNvidia()},
                    {"model", g.model},
                    {"sm", g.sm == 0 ? ojson(nullptr) : ojson(g.sm)},
                    {"memory_bytes", known(g.memory_bytes)},
                    {"uuid", g.uuid.empty() ? ojson(nullptr) : ojson(g.uuid)},
                    {"numa", optionalInt(g.at.numa)},
                    {"cpuset", g.cpus.toList()},
                    {"placement", placementJson(g.at)},
                    {"link", linkJson(g.link)},
                    {"nvlinks", links},
                    {"nvswitch_links", g.nvswitch_links},
                    {"mig", migJson(g.mig)}});
  }
  doc["gpus"] = gpus;
  ojson nics = ojson::array();
  for (const Nic& n : topo.nics) {
    ojson ports = ojson::array();
    for (const NicPort& p : n.ports) {
      ports.push_back(
          {{"port", p.port},
           {"link_layer", toString(p.link_layer)},
           {"state", toString(p.state)},
           {"rate_gbps", known(p.rate_gbps)},
           {"netdev", p.netdev.empty() ? ojson(nullptr) : ojson(p.netdev)},
           {"roce_v2_gid_index", p.roce_v2_gid_index ? ojson(*p.roce_v2_gid_index) : ojson(nullptr)}});
    }
    nics.push_back({{"name", n.name},
                    {"pci", n.has_pci ? ojson(n.pci.str()) : ojson(nullptr)},
                    {"vendor", vendorName(n.vendor)},
                    {"vendor_id", hex4(n.vendor)},
                    {"device_id", hex4(n.device)},
                    {"class", hex6(n.pci_class)},
                    {"numa", optionalInt(n.at.numa)},
                    {"cpuset", n.cpus.toList()},
                    {"placement", placementJson(n.at)},
                    {"link", linkJson(n.link)},
                    {"ports", ports}});
  }
  doc["nics"] = nics;
  doc["nvswitch"] = topo.nvswitch;
  ojson paths = ojson::object();
  auto labelOfNic = [&](size_t i) { return topo.nics[i].name; };
  for (size_t a = 0; a < topo.gpus.size(); ++a) {
    ojson row = ojson::object();
    for (size_t b = 0; b < topo.gpus.size(); ++b) {
      if (a != b) row[NodeTopology::gpuLabel(static_cast<int>(b))] = topo.gpuToGpu(int(a), int(b)).str();
    }
    for (size_t n = 0; n < topo.nics.size(); ++n) row[labelOfNic(n)] = topo.gpuToNic(int(a), int(n)).str();
    paths[NodeTopology::gpuLabel(static_cast<int>(a))] = row;
  }
  for (size_t a = 0; a < topo.nics.size(); ++a) {
    ojson row = ojson::object();
    for (size_t g = 0; g < topo.gpus.size(); ++g) {
      row[NodeTopology::gpuLabel(static_cast<int>(g))] = topo.gpuToNic(int(g), int(a)).str();
    }
    for (size_t b = 0; b < topo.nics.size(); ++b) {
      if (a != b) row[labelOfNic(b)] = topo.nicToNic(int(a), int(b)).str();
    }
    paths[labelOfNic(a)] = row;
  }
  doc["paths"] = paths;
  doc["warnings"] = topo.warnings;
  return doc;
}

NodeTopology fromJson(const json& doc, const std::string& name) {
  Fields top(doc, "", name);
  std::string schema = top.str("schema");
  if (schema != kTopologySchema && schema != kTopologySchemaV1) {
    top.fail("schema is \"" + schema + "\", expected \"" + kTopologySchema + "\" (or \"" + kTopologySchemaV1 +
             "\")");
  }
  auto checkDeviceCount = [&top](const char* key, size_t n) {
    if (n > kMaxNodeDevices)
      top.failField(key, std::to_string(n) + " entries, more than a node may have (at most " +
                             std::to_string(kMaxNodeDevices) + ")");
  };
  NodeTopology t;
  t.hostname = top.str("hostname");
  t.source = "json:" + name;
  const json& packages = top.array("packages");
  for (size_t i = 0; i < packages.size(); ++i) {
    Fields f(packages[i], at("packages", i), name);
    Package p;
    p.os_index = f.integer("index", static_cast<int>(i));
    p.cpus = f.cpus("cpuset");
    p.vendor = f.str("vendor");
    p.model = f.str("model");
    p.family = f.integer("family");
    p.model_number = f.integer("model_number");
    t.packages.push_back(std::move(p));
  }
  const json& numa = top.array("numa_nodes");
  for (size_t i = 0; i < numa.size(); ++i) {
    Fields f(numa[i], at("numa_nodes", i), name);
    NumaNode n;
    n.os_index = f.integer("index", static_cast<int>(i));
    n.cpus = f.cpus("cpuset");
    n.memory_bytes = f.u64("memory_bytes");
    n.package = f.integer("package");
    t.numa_nodes.push_back(std::move(n));
  }
  const json& cores = top.array("cores");
  for (size_t i = 0; i < cores.size(); ++i) {
    if (!cores[i].is_string()) top.fail("cores[" + std::to_string(i) + "] must be a cpulist string");
    try {
      t.cores.push_back(CpuSet::parseList(cores[i].get<std::string>()));
    } catch (const Error& e) {
      top.fail("cores[" + std::to_string(i) + "]: " + e.what());
    }
  }
  const json& bridges = top.array("host_bridges");
  for (size_t i = 0; i < bridges.size(); ++i) {
    Fields f(bridges[i], at("host_bridges", i), name);
    t.host_bridges.push_back({f.str("buses"), f.integer("numa")});
  }
  const json& switches = top.array("switches");
  for (size_t i = 0; i < switches.size(); ++i) {
    Fields f(switches[i], at("switches", i), name);
    PciSwitch s;
    s.pci = f.pci("pci");
    s.vendor = static_cast<uint16_t>(f.hex("vendor_id"));
    s.device = static_cast<uint16_t>(f.hex("device_id"));
    s.root_port = f.boolean("root_port");
    const int parent = f.integer("parent");
    // Parents come first, so a parent index below i also rules out cycles.
    if (parent != kNone && (parent < 0 || static_cast<size_t>(parent) >= i)) {
      f.fail("parent " + std::to_string(parent) + " must name an earlier switch");
    }
    const int bridge = f.integer("host_bridge");
    if (bridge != kNone && (bridge < 0 || static_cast<size_t>(bridge) >= bridges.size())) {
      f.fail("host_bridge " + std::to_string(bridge) + " does not exist");
    }
    s.parent = indexOf(parent);
    s.host_bridge = indexOf(bridge);
    s.numa = f.integer("numa");
    s.link = f.link();
    t.switches.push_back(s);
  }
  const json& gpus = top.array("gpus");
  checkDeviceCount("gpus", gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i) {
    Fields f(gpus[i], at("gpus", i), name);
    Gpu g;
    g.index = i;
    // A GPU's index is its place in the list (PCI order): one that says otherwise is a document
    // edited by hand or damaged, and leases and heartbeats name GPUs by index.
    if (f.has("index") &&
        f.integerIn("index", 0, static_cast<int>(kMaxNodeDevices), 0) != static_cast<int>(i))
      f.failField("index", std::to_string(f.integer("index")) + " is not the GPU's place in the list (" +
                               std::to_string(i) + "): GPUs are listed in index order");
    g.pci = f.pci("pci");
    g.vendor = static_cast<uint16_t>(f.hex("vendor_id"));
    g.device = static_cast<uint16_t>(f.hex("device_id"));
    g.pci_class = f.hex("class");
    g.model = f.str("model");
    g.sm = f.integerIn("sm", 0, 1000, 0);  // 90 for Hopper, 100 for Blackwell
    g.memory_bytes = f.u64("memory_bytes");
    g.uuid = f.str("uuid");
    g.cpus = f.cpus("cpuset");
    g.at = f.has("placement") ? Fields(f.get("placement"), at("gpus", i) + ".placement", name)
                                    .placement(t.switches.size(), t.host_bridges.size())
                              : PciPlacement{};
    if (!f.has("placement")) g.at.numa = f.integer("numa");
    g.link = f.link();
    const json& links = f.array("nvlinks");
    for (size_t l = 0; l < links.size(); ++l) {
      Fields lf(links[l], at("gpus", i) + "." + at("nvlinks", l), name);
      NvLinkPeer p;
      p.peer = lf.str("peer");
      p.count = lf.integerIn("count", 0, 256, 0);
      if (p.peer.starts_with("GPU")) {
        try {
          p.gpu = std::stoul(p.peer.substr(3));  // "-1" wraps: past the end, refused below
        } catch (const std::exception&) {
          lf.fail("bad peer \"" + p.peer + "\"");
        }
        if (p.gpu >= gpus.size()) lf.fail("peer " + p.peer + " does not exist");
      }
      g.nvlinks.push_back(p);
    }
    g.nvswitch_links = f.integerIn("nvswitch_links", 0, 256, 0);
    if (f.has("mig")) g.mig = Fields(f.get("mig"), at("gpus", i) + ".mig", name).mig();
    t.gpus.push_back(std::move(g));
  }
  const json& nics = top.array("nics");
  checkDeviceCount("nics", nics.size());
  for (size_t i = 0; i < nics.size(); ++i) {
    Fields f(nics[i], at("nics", i), name);
    Nic n;
    n.name = f.requiredStr("name");
    if (n.name.empty()) f.failField("name", "\"\" is empty (every NIC has a name)");
    n.has_pci = f.has("pci");
    if (n.has_pci) n.pci = f.pci("pci");
    n.vendor = static_cast<uint16_t>(f.hex("vendor_id"));
    n.device = static_cast<uint16_t>(f.hex("device_id"));
    n.pci_class = f.hex("class");
    n.cpus = f.cpus("cpuset");
    n.at = f.has("placement") ? Fields(f.get("placement"), at("nics", i) + ".placement", name)
                                    .placement(t.switches.size(), t.host_bridges.size())
                              : PciPlacement{};
    if (!f.has("placement")) n.at.numa = f.integer("numa");
    n.link = f.link();
    const json& ports = f.array("ports");
    for (size_t p = 0; p < ports.size(); ++p) {
      Fields pf(ports[p], at("nics", i) + "." + at("ports", p), name);
      NicPort port;
      port.port = pf.integerIn("port", 1, 255, 1);
      port.link_layer = linkLayerFromString(pf.str("link_layer"));
      port.state = portStateFromString(pf.str("state"));
      port.rate_gbps = pf.numberIn("rate_gbps", 1e6);  // Gb/s (one NIC port: 800 today)
      port.netdev = pf.str("netdev");
      if (pf.has("roce_v2_gid_index")) port.roce_v2_gid_index = pf.integer("roce_v2_gid_index");
      n.ports.push_back(port);
    }
    t.nics.push_back(std::move(n));
  }
  t.nvswitch = top.boolean("nvswitch");
  t.normalize();
  return t;
}

}  // namespace poolrun::topo
