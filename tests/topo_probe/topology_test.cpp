#include "poolrun/topo/topology.hpp"

#include <gtest/gtest.h>

#include <functional>

namespace poolrun::topo {
namespace {

TEST(PciAddressTest, ParsesTheForms) {
  EXPECT_EQ(PciAddress::parse("0000:3b:00.0")->str(), "0000:3b:00.0");
  EXPECT_EQ(PciAddress::parse("3B:00.1")->str(), "0000:3b:00.1");
  EXPECT_EQ(PciAddress::parse("0101:00:00.0")->domain, 0x101u);
  EXPECT_EQ(PciAddress::parse("00000000000000aa:01:1f.7")->str(), "00aa:01:1f.7");
  for (const char* bad : {"", "3b:00", "zz:00.0", "0000:3b:20.0", "0000:3b:00.8", "0000:100:00.0", "::."}) {
    EXPECT_FALSE(PciAddress::parse(bad).has_value()) << bad;
  }
  EXPECT_LT(*PciAddress::parse("0000:03:00.0"), *PciAddress::parse("0000:03:00.1"));
  EXPECT_LT(*PciAddress::parse("0000:ff:00.0"), *PciAddress::parse("0001:00:00.0"));
}

TEST(PathTest, PrintsAndParsesNvidiaSmiNames) {
  for (const char* name : {"NV12", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"}) {
    auto p = Path::parse(name);
    ASSERT_TRUE(p.has_value()) << name;
    EXPECT_EQ(p->str(), name);
  }
  EXPECT_FALSE(Path::parse("NV").has_value());
  EXPECT_FALSE(Path::parse("NV0").has_value());
  EXPECT_FALSE(Path::parse("pix").has_value());
}

// Table-driven path classification on a hand-built tree:
//   numa0: host bridge 0 { switch 0 (root port) { switch 1 { switch 2 { gpu a } , gpu b, nic x } } }
//          host bridge 1 { nic y }
//   numa1: host bridge 2 { gpu c }
TEST(PathTest, ClassifiesPciPlacements) {
  NodeTopology t;
  t.host_bridges = {{"0000:[00-3f]", 0}, {"0000:[40-7f]", 0}, {"0000:[80-ff]", 1}};
  PciSwitch root;
  root.root_port = true;
  root.host_bridge = 0;
  PciSwitch sw1;
  sw1.parent = 0;
  sw1.host_bridge = 0;
  PciSwitch sw2;
  sw2.parent = 1;
  sw2.host_bridge = 0;
  t.switches = {root, sw1, sw2};
  PciPlacement a{2, 0, 0, 0}, b{1, 0, 0, 0}, x{1, 0, 0, 0}, y{kNoIndex, 1, 0, 0}, c{kNoIndex, 2, 1, 1};
  PciPlacement noBridges{kNoIndex, kNoIndex, 0, 0}, noBridges2{kNoIndex, kNoIndex, 0, 0};
  struct Case {
    PciPlacement p, q;
    const char* want;
  };
  for (const Case& k : {Case{b, x, "PIX"}, Case{a, x, "PXB"}, Case{a, b, "PXB"}, Case{a, y, "NODE"},
                        Case{b, c, "SYS"}, Case{y, c, "SYS"}, Case{noBridges, noBridges2, "PHB"}}) {
    EXPECT_EQ(t.pciPath(k.p, k.q).str(), k.want);
    EXPECT_EQ(t.pciPath(k.q, k.p).str(), k.want) << "symmetric";
  }
}

TEST(PathTest, NvLinkWinsOverPcie) {
  NodeTopology t;
  t.gpus.resize(3);
  for (int i = 0; i < 3; ++i) t.gpus[static_cast<size_t>(i)].index = i;
  t.gpus[0].nvlinks = {{1, "GPU1", 2}};
  t.gpus[1].nvlinks = {{0, "GPU0", 2}};
  EXPECT_EQ(t.gpuToGpu(0, 1).str(), "NV2");
  EXPECT_EQ(t.gpuToGpu(0, 2).str(), "SYS");
  t.gpus[0].nvswitch_links = 18;
  t.gpus[2].nvswitch_links = 12;
  EXPECT_EQ(t.gpuToGpu(0, 2).str(), "NV12");
}

TEST(NodeTopologyTest, NormalizeSortsGpusByBusAndRenumbersPeers) {
  NodeTopology t;
  Gpu g0, g1;
  g0.index = 0;
  g0.pci = *PciAddress::parse("0000:81:00.0");
  g0.nvlinks = {{1, "GPU1", 4}};
  g1.index = 1;
  g1.pci = *PciAddress::parse("0000:03:00.0");
  g1.nvlinks = {{0, "GPU0", 4}};
  t.gpus = {g0, g1};
  Nic n10, n2;
  n10.name = "mlx5_10";
  n2.name = "mlx5_2";
  t.nics = {n10, n2};
  t.normalize();
  EXPECT_EQ(t.gpus[0].pci.str(), "0000:03:00.0");
  EXPECT_EQ(t.gpus[0].nvlinks[0].peer, "GPU1");
  EXPECT_EQ(t.gpus[1].nvlinks[0].gpu, 0);
  EXPECT_EQ(t.nics[0].name, "mlx5_2");
}

TEST(NodeTopologyTest, PortStatesAndLinkLayersFromAnySpelling) {
  EXPECT_EQ(portStateFromString("4: ACTIVE\n"), PortState::kActive);
  EXPECT_EQ(portStateFromString("1: DOWN"), PortState::kDown);
  EXPECT_EQ(portStateFromString("active"), PortState::kActive);
  EXPECT_EQ(portStateFromString("2"), PortState::kInit);
  EXPECT_EQ(portStateFromString("weird"), PortState::kUnknown);
  EXPECT_EQ(linkLayerFromString("InfiniBand\n"), LinkLayer::kInfiniBand);
  EXPECT_EQ(linkLayerFromString("Ethernet"), LinkLayer::kEthernet);
  EXPECT_EQ(linkLayerFromString("Unspecified"), LinkLayer::kUnspecified);
}

TEST(NodeTopologyTest, ComputeCapabilityFromDeviceId) {
  EXPECT_EQ(smFromPciDevice(0x20b0), 80);  // A100
  EXPECT_EQ(smFromPciDevice(0x2330), 90);  // H100
  EXPECT_EQ(smFromPciDevice(0x2335), 90);  // H200
  EXPECT_EQ(smFromPciDevice(0x1db1), 70);  // V100
  EXPECT_EQ(smFromPciDevice(0x1eb8), 75);  // T4
  EXPECT_EQ(smFromPciDevice(0x0001), 0);
}

// GPUs of one board (device id), `count` of them, with no NVLink recorded.
NodeTopology boardNode(int count, uint16_t device, const std::string& source = "nccl-xml:/in/p4d.xml") {
  NodeTopology t;
  t.source = source;
  for (int i = 0; i < count; ++i) {
    Gpu g;
    g.index = i;
    g.pci = *PciAddress::parse("0000:" + std::to_string(10 + i) + ":00.0");
    g.vendor = kVendorNvidia;
    g.device = device;
    t.gpus.push_back(g);
  }
  return t;
}

struct NvlinkGap {
  const char* name;
  std::function<NodeTopology()> topology;
  std::vector<std::string> warnings;  // each a warning's start up to " records no NVLink"
};

class MissingNvlink : public ::testing::TestWithParam<NvlinkGap> {};

TEST_P(MissingNvlink, WarnsOnlyWhereSxmGpusHaveNoNvlinkRecorded) {
  std::vector<std::string> got = missingNvlinkWarnings(GetParam().topology());
  ASSERT_EQ(got.size(), GetParam().warnings.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].starts_with(GetParam().warnings[i] +
                                   " records no NVLink: paths between them show PCIe "
                                   "types (PIX to SYS) instead of NV#; "))
        << got[i];
  }
}

void PrintTo(const NvlinkGap& g, std::ostream* os) {
  *os << g.name << ", " << g.warnings.size() << " warning(s)";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MissingNvlink,
    ::testing::Values(NvlinkGap{"H100Sxm",
                                [] { return boardNode(8, 0x2330); },
                                {"GPUs 0-7 are H100 SXM5, which have NVLink, but /in/p4d.xml"}},
                      NvlinkGap{"H200Sxm",
                                [] { return boardNode(4, 0x2335, "hwloc-xml:h200.xml"); },
                                {"GPUs 0-3 are H200 SXM, which have NVLink, but h200.xml"}},
                      NvlinkGap{"V100Sxm2ByModelName",
                                [] {
                                  NodeTopology node = boardNode(2, 0);
                                  for (Gpu& g : node.gpus) g.model = "Tesla V100-SXM2-16GB";
                                  return node;
                                },
                                {"GPUs 0-1 are Tesla V100-SXM2-16GB, which have NVLink, but /in/p4d.xml"}},
                      NvlinkGap{"TwoBoards",
                                [] {
                                  NodeTopology node = boardNode(4, 0x20b0);
                                  for (int i = 2; i < 4; ++i)
                                    node.gpus[static_cast<size_t>(i)].device = 0x1db1;
                                  return node;
                                },
                                {"GPUs 0-1 are A100 SXM4, which have NVLink, but /in/p4d.xml",
                                 "GPUs 2-3 are V100 SXM2, which have NVLink, but /in/p4d.xml"}},
                      NvlinkGap{"LiveProbe",
                                [] { return boardNode(8, 0x20b2, "live"); },
                                {"GPUs 0-7 are A100 SXM4, which have NVLink, but the live probe"}},
                      NvlinkGap{"NoSource",
                                [] { return boardNode(2, 0x20b2, ""); },
                                {"GPUs 0-1 are A100 SXM4, which have NVLink, but the topology"}},
                      NvlinkGap{"NvlinkRecorded",
                                [] {
                                  NodeTopology node = boardNode(8, 0x2330);
                                  node.gpus[0].nvlinks.push_back({1, "GPU1", 18});
                                  return node;
                                },
                                {}},
                      NvlinkGap{"NvSwitchLinks",
                                [] {
                                  NodeTopology node = boardNode(8, 0x2330);
                                  node.gpus[3].nvswitch_links = 18;
                                  return node;
                                },
                                {}},
                      NvlinkGap{"NvSwitchFabric",
                                [] {
                                  NodeTopology node = boardNode(8, 0x2330);
                                  node.nvswitch = true;
                                  return node;
                                },
                                {}},
                      NvlinkGap{"PcieCards", [] { return boardNode(8, 0x2331); }, {}},  // H100 PCIe
                      NvlinkGap{"OneGpu", [] { return boardNode(1, 0x2330); }, {}},
                      NvlinkGap{"AmdGpus",
                                [] {
                                  NodeTopology node = boardNode(4, 0x2330);
                                  for (Gpu& g : node.gpus) g.vendor = kVendorAmd;
                                  return node;
                                },
                                {}}),
    [](const ::testing::TestParamInfo<NvlinkGap>& param) { return std::string(param.param.name); });

TEST(NodeTopologyTest, NvlinkBoardsByDeviceIdOrModel) {
  Gpu g;
  g.vendor = kVendorNvidia;
  g.device = 0x20b0;
  EXPECT_EQ(nvlinkBoard(g), "A100 SXM4");
  g.device = 0x20b5;  // A100 PCIe 80GB
  EXPECT_EQ(nvlinkBoard(g), "");
  g.model = "NVIDIA A100-SXM4-80GB";
  EXPECT_EQ(nvlinkBoard(g), "NVIDIA A100-SXM4-80GB");
  g.vendor = kVendorAmd;
  EXPECT_EQ(nvlinkBoard(g), "");
}

TEST(NodeTopologyTest, EfaByVendorAndDeviceId) {
  Nic n;
  n.vendor = kVendorAmazon;
  for (uint16_t id : std::initializer_list<uint16_t>{0xefa0, 0xefa1, 0xefa2, 0xefa3}) {
    n.device = id;
    EXPECT_TRUE(n.isEfa()) << std::hex << id;
  }
  n.device = 0xec20;  // ENA, AWS's Ethernet adapter
  EXPECT_FALSE(n.isEfa());
  n.vendor = kVendorMellanox;
  n.device = 0xefa0;
  EXPECT_FALSE(n.isEfa());
}

}  // namespace
}  // namespace poolrun::topo
