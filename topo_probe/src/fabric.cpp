#include "poolrun/topo/fabric.hpp"

#include <algorithm>

#include "poolrun/common/error.hpp"

namespace poolrun::topo {

std::string toString(Fabric fabric) {
  switch (fabric) {
    case Fabric::kIb:
      return "ib";
    case Fabric::kRoce:
      return "roce";
    case Fabric::kTcp:
      return "tcp";
  }
  return "tcp";
}

Fabric fabricFromString(std::string_view text) {
  if (text == "ib") return Fabric::kIb;
  if (text == "roce") return Fabric::kRoce;
  if (text == "tcp") return Fabric::kTcp;
  throw badInput("unknown fabric '" + std::string(text) + "' (use ib, roce or tcp)");
}

bool isRdmaDeviceName(std::string_view name) {
  static constexpr std::string_view kPrefixes[] = {"mlx",  "rocep", "ibp",   "irdma", "bnxt_re",
                                                   "qedr", "hns",   "erdma", "efa",   "rdmap",
                                                   "hfi1", "qib",   "ionic", "siw",   "rxe"};
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view p) { return name.starts_with(p); });
}

NicAccess nicAccess(const Nic& nic) {
  if (nic.vendor == kVendorAmazon || nic.name.starts_with("pci:") ||
      (nic.ports.size() == 1 && nic.ports[0].link_layer == LinkLayer::kUnspecified))
    return NicAccess::kOpaque;
  return isRdmaDeviceName(nic.name) ? NicAccess::kVerbs : NicAccess::kSocket;
}

bool portUsable(const NicPort& port) {
  return port.up() || port.state == PortState::kUnknown;
}

bool portCarries(const Nic& nic, const NicPort& port, Fabric fabric) {
  switch (fabric) {
    case Fabric::kIb:
      return port.link_layer == LinkLayer::kInfiniBand;
    case Fabric::kRoce:
      return port.link_layer == LinkLayer::kEthernet && nicAccess(nic) == NicAccess::kVerbs;
    case Fabric::kTcp:
      return !port.netdev.empty() || nicAccess(nic) == NicAccess::kSocket;
  }
  return false;
}

bool nodeCarries(const NodeTopology& topology, std::optional<Fabric> declared, Fabric fabric) {
  if (fabric == Fabric::kTcp) return true;
  if (declared) return *declared == fabric;
  return std::any_of(topology.nics.begin(), topology.nics.end(), [&](const Nic& nic) {
    return std::any_of(nic.ports.begin(), nic.ports.end(),
                       [&](const NicPort& p) { return portUsable(p) && portCarries(nic, p, fabric); });
  });
}

std::vector<Fabric> nodeFabrics(const NodeTopology& topology, std::optional<Fabric> declared) {
  std::vector<Fabric> out;
  for (Fabric f : {Fabric::kIb, Fabric::kRoce, Fabric::kTcp})
    if (nodeCarries(topology, declared, f)) out.push_back(f);
  return out;
}

std::vector<NicPortRef> fabricPorts(const NodeTopology& topology, Fabric fabric) {
  std::vector<NicPortRef> out;
  for (size_t n = 0; n < topology.nics.size(); ++n) {
    const Nic& nic = topology.nics[n];
    const bool opaque = nicAccess(nic) == NicAccess::kOpaque;
    for (size_t p = 0; p < nic.ports.size(); ++p) {
      if (portUsable(nic.ports[p]) && (opaque || portCarries(nic, nic.ports[p], fabric))) {
        out.push_back({n, p});
        break;
      }
    }
  }
  return out;
}

}  // namespace poolrun::topo
