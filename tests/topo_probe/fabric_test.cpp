// The fabric rule (fabric.hpp), table-driven over NIC inventories: which fabrics a node carries and
// which NICs serve each. tests/launcher/fabric_rule_test.cpp checks that the pool and the planner
// agree through it on every real-machine fixture.

#include "poolrun/topo/fabric.hpp"

#include <gtest/gtest.h>

#include <optional>

#include "poolrun/topo/sources.hpp"

namespace poolrun::topo {
namespace {

struct PortSpec {
  LinkLayer layer;
  PortState state;
  std::string netdev;
};

struct NicSpec {
  std::string name;
  uint16_t vendor;
  std::vector<PortSpec> ports;
};

NodeTopology nodeWith(const std::vector<NicSpec>& nics) {
  NodeTopology t;
  for (const NicSpec& s : nics) {
    Nic nic;
    nic.name = s.name;
    nic.vendor = s.vendor;
    int number = 1;
    for (const PortSpec& p : s.ports) {
      NicPort port;
      port.port = number++;
      port.link_layer = p.layer;
      port.state = p.state;
      port.netdev = p.netdev;
      nic.ports.push_back(port);
    }
    t.nics.push_back(nic);
  }
  return t;
}

std::string fabricsText(const NodeTopology& t, std::optional<Fabric> declared) {
  std::string out;
  for (Fabric f : nodeFabrics(t, declared)) out += (out.empty() ? "" : ",") + toString(f);
  return out;
}

// "mlx5_0:1 mlx5_1:2": the ports that serve `fabric`, by NIC name and port number.
std::string portsText(const NodeTopology& t, Fabric fabric) {
  std::string out;
  for (const NicPortRef& r : fabricPorts(t, fabric)) {
    out += (out.empty() ? "" : " ") + t.nics[r.nic].name + ":" +
           std::to_string(t.nics[r.nic].ports[r.port].port);
  }
  return out;
}

constexpr auto kIb = LinkLayer::kInfiniBand;
constexpr auto kEth = LinkLayer::kEthernet;
constexpr auto kNoLayer = LinkLayer::kUnspecified;
constexpr auto kUp = PortState::kActive;
constexpr auto kDown = PortState::kDown;
constexpr auto kNoState = PortState::kUnknown;

struct FabricCase {
  const char* name;
  std::vector<NicSpec> nics;
  std::optional<Fabric> declared;
  const char* fabrics;  // nodeFabrics
  const char* ib;       // fabricPorts for each fabric
  const char* roce;
  const char* tcp;
};

const FabricCase kCases[] = {
    {"InfiniBand",
     {{"mlx5_0", kVendorMellanox, {{kIb, kUp, "ib0"}}}},
     {},
     "ib,tcp",
     "mlx5_0:1",
     "",
     "mlx5_0:1"},
    {"RoCE",
     {{"mlx5_0", kVendorMellanox, {{kEth, kUp, "eth0"}}}},
     {},
     "roce,tcp",
     "",
     "mlx5_0:1",
     "mlx5_0:1"},
    // NCCL XML: a bare <pci> NIC, named by its address, with no port state.
    {"bare InfiniBand PCI function",
     {{"pci:0101:00:00.0", 0, {{kIb, kNoState, ""}}}},
     {},
     "ib,tcp",
     "pci:0101:00:00.0:1",
     "pci:0101:00:00.0:1",
     "pci:0101:00:00.0:1"},
    // NCCL XML <net name="eth0">: a socket interface, not an RDMA device.
    {"plain Ethernet", {{"eth0", 0, {{kEth, kUp, ""}}}}, {}, "tcp", "", "", "eth0:1"},
    {"mixed InfiniBand and RoCE",
     {{"mlx5_0", kVendorMellanox, {{kIb, kUp, "ib0"}}}, {"mlx5_1", kVendorMellanox, {{kEth, kUp, "eth1"}}}},
     {},
     "ib,roce,tcp",
     "mlx5_0:1",
     "mlx5_1:1",
     "mlx5_0:1 mlx5_1:1"},
    {"ports down", {{"mlx5_0", kVendorMellanox, {{kIb, kDown, "ib0"}}}}, {}, "tcp", "", "", ""},
    {"second port up",
     {{"mlx5_0", kVendorMellanox, {{kIb, kDown, "ib0"}, {kIb, kUp, "ib1"}}}},
     {},
     "ib,tcp",
     "mlx5_0:2",
     "",
     "mlx5_0:2"},
    // AWS EFA: neither InfiniBand nor RoCE; any fabric may place on it (the plugin drives it).
    {"EFA",
     {{"rdmap16s27", kVendorAmazon, {{kNoLayer, kUp, ""}}}},
     {},
     "tcp",
     "rdmap16s27:1",
     "rdmap16s27:1",
     "rdmap16s27:1"},
    // A cluster file's `fabric =` stands for the NICs; the ports that serve still come from them.
    {"declared ib", {{"eth0", 0, {{kEth, kUp, ""}}}}, Fabric::kIb, "ib,tcp", "", "", "eth0:1"},
    {"declared tcp",
     {{"mlx5_0", kVendorMellanox, {{kIb, kUp, "ib0"}}}},
     Fabric::kTcp,
     "tcp",
     "mlx5_0:1",
     "",
     "mlx5_0:1"},
    {"no NICs", {}, {}, "tcp", "", "", ""},
};

class FabricRuleTest : public ::testing::TestWithParam<FabricCase> {};

TEST_P(FabricRuleTest, FabricsAndPorts) {
  const FabricCase& c = GetParam();
  NodeTopology t = nodeWith(c.nics);
  EXPECT_EQ(fabricsText(t, c.declared), c.fabrics);
  for (Fabric f : {Fabric::kIb, Fabric::kRoce, Fabric::kTcp}) {
    EXPECT_EQ(nodeCarries(t, c.declared, f),
              fabricsText(t, c.declared).find(toString(f)) != std::string::npos)
        << toString(f);
  }
  EXPECT_EQ(portsText(t, Fabric::kIb), c.ib);
  EXPECT_EQ(portsText(t, Fabric::kRoce), c.roce);
  EXPECT_EQ(portsText(t, Fabric::kTcp), c.tcp);
}

INSTANTIATE_TEST_SUITE_P(Nics, FabricRuleTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<FabricCase>& param) {
                           std::string name = param.param.name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(FabricRule, NicAccess) {
  EXPECT_EQ(nicAccess(nodeWith({{"mlx5_0", kVendorMellanox, {{kIb, kUp, ""}}}}).nics[0]), NicAccess::kVerbs);
  EXPECT_EQ(nicAccess(nodeWith({{"eth0", 0, {{kEth, kUp, ""}}}}).nics[0]), NicAccess::kSocket);
  EXPECT_EQ(nicAccess(nodeWith({{"pci:0000:3b:00.0", 0, {{kIb, kNoState, ""}}}}).nics[0]),
            NicAccess::kOpaque);
  EXPECT_EQ(nicAccess(nodeWith({{"efa0", kVendorAmazon, {{kEth, kUp, ""}}}}).nics[0]), NicAccess::kOpaque);
  EXPECT_EQ(nicAccess(nodeWith({{"mlx5_0", kVendorMellanox, {{kNoLayer, kUp, ""}}}}).nics[0]),
            NicAccess::kOpaque);
}

// NCCL XML as Azure NDv4 writes it: bare InfiniBand PCI functions, no <net>, so no port state.
TEST(FabricRule, NcclXmlWithoutPortStateCarriesInfiniBand) {
  NodeTopology t = readNcclXmlString(R"(<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="AuthenticAMD" familyid="23" modelid="49">
    <pci busid="ffff:ff:01.0" class="0x060400" link_speed="16 GT/s" link_width="16">
      <pci busid="0001:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0101:00:00.0" class="0x020700" link_speed="16 GT/s" link_width="16"/>
    </pci>
  </cpu>
</system>)",
                                     "ndv4.xml");
  ASSERT_EQ(t.nics.size(), 1u);
  EXPECT_EQ(t.nics[0].ports.at(0).state, PortState::kUnknown);
  EXPECT_EQ(fabricsText(t, std::nullopt), "ib,tcp");
  EXPECT_EQ(portsText(t, Fabric::kIb), "pci:0101:00:00.0:1");
}

}  // namespace
}  // namespace poolrun::topo
