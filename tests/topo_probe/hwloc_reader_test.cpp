// The hwloc XML reader on machines the tests describe (tests/support/hwloc_xml.hpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/hwloc_xml.hpp"

namespace poolrun::topo {
namespace {

namespace hx = poolrun::test::hwloc;

// Package 0: a PCIe switch with GPU + IB NIC, a GPU on its own root port, and (second host bridge)
// a RoCE NIC whose port is down. Package 1: a GPU on a root port, a BMC VGA device, and a GPU and
// NIC behind two levels of switches.
std::string testMachine() {
  std::string ibAddr = "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:0b:0c";
  std::string pkg0 = hx::hostBridge(
      "0000:[00-0f]",
      hx::pciBridge(
          "0000:00:01.0", 1,
          hx::pciBridge(
              "0000:01:00.0", 2,
              hx::pciBridge("0000:02:00.0", 3,
                            hx::pciDev("0000:03:00.0", "0302", "10de:20b0",
                                       hx::osdev("cuda0", 5,
                                                 {{"GPUModel", "NVIDIA A100-SXM4-40GB"},
                                                  {"CUDAGlobalMemorySize", "41943040"}}))) +
                  hx::pciBridge("0000:02:01.0", 3,
                                hx::pciDev("0000:04:00.0", "0207", "15b3:101b",
                                           hx::osdev("ib0", 2, {{"Address", ibAddr}, {"Port", "1"}}) +
                                               hx::osdev("mlx5_0", 3, {{"Port1State", "4"}}))))) +
          hx::pciBridge("0000:00:02.0", 1, hx::pciDev("0000:05:00.0", "0302", "10de:20b0")));
  pkg0 += hx::hostBridge(
      "0000:[10-1f]", hx::pciBridge("0000:10:01.0", 1,
                                    hx::pciDev("0000:11:00.0", "0200", "15b3:1017",
                                               hx::osdev("enp17s0f0", 2, {{"Address", "0c:42:a1:00:00:01"}}) +
                                                   hx::osdev("mlx5_1", 3, {{"Port1State", "1"}}))));
  std::string pkg1 = hx::hostBridge(
      "0000:[80-8f]", hx::pciBridge("0000:80:01.0", 1, hx::pciDev("0000:81:00.0", "0302", "10de:2330")) +
                          hx::pciBridge("0000:80:02.0", 1, hx::pciDev("0000:82:00.0", "0300", "1a03:2000")));
  pkg1 += hx::hostBridge(
      "0000:[90-9f]",
      hx::pciBridge(
          "0000:90:01.0", 1,
          hx::pciBridge(
              "0000:91:00.0", 2,
              hx::pciBridge("0000:92:00.0", 3,
                            hx::pciBridge("0000:93:00.0", 4,
                                          hx::pciBridge("0000:94:00.0", 5,
                                                        hx::pciDev("0000:95:00.0", "0302", "10de:2330")))) +
                  hx::pciBridge("0000:92:01.0", 3,
                                hx::pciDev("0000:96:00.0", "0207", "15b3:1021",
                                           hx::osdev("mlx5_2", 3, {{"Port1State", "4"}}))))));
  return hx::machine({{4, pkg0}, {4, pkg1}});
}

class HwlocReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { topo = readHwlocXmlString(testMachine(), "test.xml"); }
  NodeTopology topo;
};

TEST_F(HwlocReaderTest, FindsGpusInBusOrderAndSkipsDisplayControllers) {
  ASSERT_EQ(topo.gpus.size(), 4u);  // the ASPEED VGA device is not a GPU
  EXPECT_EQ(topo.gpus[0].pci.str(), "0000:03:00.0");
  EXPECT_EQ(topo.gpus[1].pci.str(), "0000:05:00.0");
  EXPECT_EQ(topo.gpus[2].pci.str(), "0000:81:00.0");
  EXPECT_EQ(topo.gpus[3].pci.str(), "0000:95:00.0");
  EXPECT_EQ(topo.gpus[0].model, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(topo.gpus[0].memory_bytes, 41943040ull << 10);
  EXPECT_EQ(topo.gpus[0].sm, 80);
  EXPECT_EQ(topo.gpus[2].sm, 90);
  EXPECT_EQ(topo.gpus[0].at.numa, 0);
  EXPECT_EQ(topo.gpus[2].at.numa, 1);
  EXPECT_EQ(topo.gpus[2].cpus.toList(), "4-7");
  EXPECT_EQ(topo.hostname, "testnode");
}

TEST_F(HwlocReaderTest, FindsNicsWithPortsAndLinkLayers) {
  ASSERT_EQ(topo.nics.size(), 3u);
  const Nic& ib = topo.nics[0];
  EXPECT_EQ(ib.name, "mlx5_0");
  ASSERT_EQ(ib.ports.size(), 1u);
  EXPECT_EQ(ib.ports[0].link_layer, LinkLayer::kInfiniBand);
  EXPECT_EQ(ib.ports[0].state, PortState::kActive);
  EXPECT_EQ(ib.ports[0].netdev, "ib0");
  const Nic& roce = topo.nics[1];
  EXPECT_EQ(roce.name, "mlx5_1");
  EXPECT_EQ(roce.ports[0].link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(roce.ports[0].state, PortState::kDown);
  EXPECT_FALSE(roce.ports[0].up());
}

TEST_F(HwlocReaderTest, ClassifiesPathsLikeNvidiaSmi) {
  auto path = [&](int gpu, const char* nic) {
    for (size_t n = 0; n < topo.nics.size(); ++n) {
      if (topo.nics[n].name == nic) return topo.gpuToNic(gpu, static_cast<int>(n)).str();
    }
    return std::string("missing");
  };
  EXPECT_EQ(path(0, "mlx5_0"), "PIX");   // one switch
  EXPECT_EQ(path(1, "mlx5_0"), "PHB");   // two root ports of one host bridge
  EXPECT_EQ(path(0, "mlx5_1"), "NODE");  // two host bridges of one NUMA node
  EXPECT_EQ(path(2, "mlx5_0"), "SYS");   // across sockets
  EXPECT_EQ(path(3, "mlx5_2"), "PXB");   // two levels of switches
  EXPECT_EQ(topo.gpuToGpu(0, 1).str(), "PHB");
  EXPECT_EQ(topo.gpuToGpu(2, 3).str(), "NODE");
}

// Old hwloc exports list an RDMA device (mlx4_0) among the network devices of its PCI function:
// such a name, "mlx<card>_<port>", makes an Ethernet-class function a NIC; no other name does.
TEST(HwlocReaderNames, RdmaNamesAmongNetworkDevices) {
  const std::vector<std::pair<std::string, bool>> names = {
      {"mlx4_0", true},   {"mlx12_34", true}, {"mlx4", false},   {"mlx_0", false}, {"mlx4_", false},
      {"mlx4_0a", false}, {"xmlx4_0", false}, {"mlx4-0", false}, {"eth0", false},  {"mlx4_0 ", false}};
  std::string io;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string bus = "1" + std::to_string(i);
    io +=
        hx::pciBridge("0000:00:" + bus + ".0", 1,
                      hx::pciDev("0000:" + bus + ":00.0", "0200", "15b3:1003", hx::osdev(names[i].first, 2)));
  }
  NodeTopology topo = readHwlocXmlString(hx::machine({{2, hx::hostBridge("0000:[00-ff]", io)}}), "old.xml");
  std::vector<std::string> nics, expected;
  for (const Nic& nic : topo.nics) nics.push_back(nic.name);
  for (const auto& [name, rdma] : names) {
    if (rdma) expected.push_back(name);
  }
  std::sort(nics.begin(), nics.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(nics, expected);
}

TEST(HwlocReaderErrors, RejectsHwloc3WithAClearMessage) {
  std::string xml = testMachine();
  xml.replace(xml.find("version=\"2.0\""), 13, "version=\"3.0\"");
  try {
    readHwlocXmlString(xml, "v3.xml");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_NE(std::string(e.what()).find("v3.xml: hwloc XML version 3.0 needs hwloc 3"), std::string::npos)
        << e.what();
  }
}

TEST(HwlocReaderErrors, TruncatedXmlNamesFileAndLine) {
  std::string xml = testMachine();
  xml.resize(xml.size() / 2);
  try {
    readHwlocXmlString(xml, "cut.xml");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_NE(std::string(e.what()).find("cut.xml: malformed XML at line"), std::string::npos) << e.what();
  }
}

TEST(HwlocReaderErrors, EmptyTopologyElement) {
  EXPECT_THROW(readHwlocXmlString("<topology version=\"2.0\"></topology>", "empty.xml"), Error);
}

}  // namespace
}  // namespace poolrun::topo
