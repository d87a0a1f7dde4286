#include "support/synthetic.hpp"

namespace poolrun::test {

topo::NodeTopology synthetic(const SyntheticSpec& spec) {
  using namespace poolrun::topo;
  NodeTopology t;
  t.hostname = "synthetic";
  t.source = "synthetic";
  int totalCores = spec.numa * spec.cores_per_numa;
  for (int n = 0; n < spec.numa; ++n) {
    std::vector<unsigned> cpus;
    for (int c = n * spec.cores_per_numa; c < (n + 1) * spec.cores_per_numa; ++c) {
      std::vector<unsigned> core;
      for (int th = 0; th < spec.threads; ++th) {
        unsigned cpu = static_cast<unsigned>(th * totalCores + c);
        cpus.push_back(cpu);
        core.push_back(cpu);
      }
      t.cores.push_back(CpuSet(core));
    }
    NumaNode node;
    node.os_index = n;
    node.cpus = CpuSet(cpus);
    node.memory_bytes = uint64_t{256} << 30;
    node.package = n;
    t.numa_nodes.push_back(node);
    Package p;
    p.os_index = n;
    p.cpus = node.cpus;
    p.vendor = "GenuineIntel";
    t.packages.push_back(p);
    t.host_bridges.push_back({"0000:[00-ff]", n});
  }
  auto numaOfSwitch = [&](int s) { return s * spec.numa / std::max(spec.switches, 1); };
  for (int s = 0; s < spec.switches; ++s) {
    PciSwitch sw;
    sw.pci = PciAddress{0, static_cast<uint8_t>(0x10 + s * 0x10), 0, 0};
    sw.host_bridge = numaOfSwitch(s);
    sw.numa = numaOfSwitch(s);
    t.switches.push_back(sw);
  }
  auto place = [&](int i, int count, int base) {
    PciPlacement at;
    int s = spec.switches > 0 ? i * spec.switches / std::max(count, 1) : kNone;
    at.switch_index = s;
    at.numa = s != kNone ? numaOfSwitch(s) : 0;
    at.host_bridge = at.numa;
    at.package = at.numa;
    return std::make_pair(
        at, PciAddress{0, static_cast<uint8_t>(0x10 + std::max(s, 0) * 0x10 + base + i % 8), 0, 0});
  };
  for (int g = 0; g < spec.gpus; ++g) {
    auto [at, pci] = place(g, spec.gpus, 1);
    Gpu gpu;
    gpu.index = g;
    gpu.pci = pci;
    gpu.pci.function = 0;
    gpu.pci.device = static_cast<uint8_t>(g);
    gpu.vendor = kVendorNvidia;
    gpu.device = 0x2330;
    gpu.pci_class = 0x030200;
    gpu.sm = 90;
    gpu.at = at;
    gpu.cpus = t.numa_nodes[static_cast<size_t>(at.numa)].cpus;
    gpu.nvswitch_links = spec.nvswitch_links;
    t.gpus.push_back(gpu);
  }
  for (int n = 0; n < spec.nics; ++n) {
    auto [at, pci] = place(n, spec.nics, 9);
    if (spec.nics_on_switch) {
      at.switch_index = *spec.nics_on_switch;
      at.numa = numaOfSwitch(*spec.nics_on_switch);
      at.host_bridge = at.numa;
      at.package = at.numa;
    }
    Nic nic;
    nic.name = "mlx5_" + std::to_string(n);
    nic.pci = PciAddress{0, static_cast<uint8_t>(0x80 + n), 0, 0};
    nic.vendor = kVendorMellanox;
    nic.device = 0x1021;
    nic.at = at;
    nic.cpus = t.numa_nodes[static_cast<size_t>(at.numa)].cpus;
    NicPort port;
    port.port = 1;
    port.link_layer = spec.ethernet_nics.contains(n) ? LinkLayer::kEthernet : spec.layer;
    nic.pci_class = port.link_layer == LinkLayer::kInfiniBand ? 0x020700 : 0x020000;
    port.state = spec.down_nics.contains(n) ? PortState::kDown : PortState::kActive;
    port.rate_gbps = spec.rate_gbps;
    port.netdev = (port.link_layer == LinkLayer::kInfiniBand ? "ib" : "eth") + std::to_string(n);
    if (port.link_layer == LinkLayer::kEthernet) port.roce_v2_gid_index = spec.gid_index;
    nic.ports.push_back(port);
    t.nics.push_back(nic);
  }
  t.normalize();
  return t;
}

topo::MigState migState(bool enabled, bool pending) {
  topo::MigState m;
  m.capable = true;
  m.enabled = enabled;
  m.pending = pending;
  return m;
}

topo::MigInstance migInstance(int gi, int ci, const std::string& profile, unsigned profile_id, int slices,
                              int sm, uint64_t memory_mib, const std::string& uuid) {
  topo::MigInstance i;
  i.gpu_instance = gi;
  i.compute_instance = ci;
  i.profile = profile;
  i.profile_id = profile_id;
  i.slices = slices;
  i.sm = sm;
  i.memory_bytes = memory_mib << 20;
  i.uuid = uuid;
  return i;
}

}  // namespace poolrun::test
