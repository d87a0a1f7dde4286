// readRdmaDevices() on fake /sys trees written the way Linux lays them out (values from real
// machines: see shared/fixtures/rdma), and mergeRdmaDevices() on small topologies.

#include "poolrun/topo/sysfs.hpp"

#include <unistd.h>
#include "poolrun/topo/sources.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"
#include "support/test_names.hpp"

namespace poolrun::topo {
namespace {

namespace fs = std::filesystem;
using poolrun::test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

struct PciFunction {
  std::string vendor = "0x15b3";
  std::string device = "0x101b";  // ConnectX-6
  std::string pci_class = "0x020700";
  std::string numa = "1";
  std::string cpus = "8-15";
  std::vector<std::string> netdevs;
};

void writeFunction(const TempDir& sys, const fs::path& function, const PciFunction& f) {
  sys.write(function / "vendor", f.vendor + "\n");
  sys.write(function / "device", f.device + "\n");
  sys.write(function / "class", f.pci_class + "\n");
  sys.write(function / "numa_node", f.numa + "\n");
  sys.write(function / "local_cpulist", f.cpus + "\n");
  for (const std::string& netdev : f.netdevs) sys.write(function / "net" / netdev / "type", "1\n");
}

// The real layout: class/infiniband/DEV -> ../../devices/.../BDF/infiniband/DEV and, inside it,
// device -> ../../../BDF. Returns DEV's folder relative to the root.
fs::path linkedDevice(const TempDir& sys, const std::string& name, const fs::path& function,
                      const PciFunction& f) {
  writeFunction(sys, function, f);
  fs::path dev = function / "infiniband" / name;
  fs::create_directories(sys.path() / dev);
  fs::create_directory_symlink(fs::path("../../..") / function.filename(), sys.path() / dev / "device");
  fs::create_directories(sys.path() / "class" / "infiniband");
  fs::create_directory_symlink(fs::path("../..") / dev, sys.path() / "class" / "infiniband" / name);
  return dev;
}

// The form a test tree may take instead: plain folders, the PCI address only in device/uevent.
fs::path plainDevice(const TempDir& sys, const std::string& name, const std::string& bdf,
                     const PciFunction& f) {
  fs::path dev = fs::path("class") / "infiniband" / name;
  writeFunction(sys, dev / "device", f);
  sys.write(dev / "device" / "uevent", "DRIVER=mlx5_core\nPCI_CLASS=20000\nPCI_SLOT_NAME=" + bdf + "\n");
  return dev;
}

fs::path writePort(const TempDir& sys, const fs::path& dev, int port, const std::string& layer,
                   const std::string& state, const std::string& rate) {
  fs::path dir = dev / "ports" / std::to_string(port);
  sys.write(dir / "link_layer", layer + "\n");
  sys.write(dir / "state", state + "\n");
  sys.write(dir / "rate", rate + "\n");
  sys.write(dir / "phys_state", "5: LinkUp\n");
  return dir;
}

// One GID slot; an empty type or ndev leaves that gid_attrs file out (unused slot, IB port).
void writeGid(const TempDir& sys, const fs::path& port, int index, const std::string& gid,
              const std::string& type = "", const std::string& ndev = "") {
  std::string i = std::to_string(index);
  sys.write(port / "gids" / i, gid + "\n");
  if (!type.empty()) sys.write(port / "gid_attrs" / "types" / i, type + "\n");
  if (!ndev.empty()) sys.write(port / "gid_attrs" / "ndevs" / i, ndev + "\n");
}

constexpr const char* kZeroGid = "0000:0000:0000:0000:0000:0000:0000:0000";
constexpr const char* kLinkLocal = "fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d";
constexpr const char* kIpv4Mapped = "0000:0000:0000:0000:0000:ffff:c0a8:010e";  // 192.168.1.14

bool anyContains(const std::vector<std::string>& warnings, const std::string& a, const std::string& b) {
  for (const std::string& w : warnings) {
    if (w.find(a) != std::string::npos && w.find(b) != std::string::npos) return true;
  }
  return false;
}

TEST(SysfsReadTest, InfiniBandPortActiveAt200WithIpoibNetdev) {
  TempDir sys;
  PciFunction f;
  f.netdevs = {"ibp130s0"};
  fs::path dev = linkedDevice(sys, "mlx5_0", "devices/pci0000:80/0000:80:02.0/0000:82:00.0", f);
  fs::path port = writePort(sys, dev, 1, "InfiniBand", "4: ACTIVE", "200 Gb/sec (4X HDR)");
  writeGid(sys, port, 0, "fe80:0000:0000:0000:b859:9f03:00d3:1a2e", "IB/RoCE v1");
  writeGid(sys, port, 1, kZeroGid);                                   // unused slot
  writeGid(sys, port, 2, "fe80:0000:0000:0000:0000:0000:0000:0000");  // unused, as old mlx4 shows it

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices = readRdmaDevices(sys.path(), warnings);

  EXPECT_THAT(warnings, IsEmpty());
  ASSERT_THAT(devices, SizeIs(1));
  const SysfsRdmaDevice& d = devices[0];
  EXPECT_EQ(d.name, "mlx5_0");
  ASSERT_TRUE(d.pci.has_value());
  EXPECT_EQ(d.pci->str(), "0000:82:00.0");
  EXPECT_EQ(d.vendor, kVendorMellanox);
  EXPECT_EQ(d.device, 0x101b);
  EXPECT_EQ(d.pci_class, 0x020700u);
  EXPECT_EQ(d.numa, 1);
  EXPECT_EQ(d.cpus.toList(), "8-15");
  EXPECT_THAT(d.netdevs, ElementsAre("ibp130s0"));
  ASSERT_THAT(d.ports, SizeIs(1));
  const NicPort& p = d.ports[0].port;
  EXPECT_EQ(p.port, 1);
  EXPECT_EQ(p.link_layer, LinkLayer::kInfiniBand);
  EXPECT_EQ(p.state, PortState::kActive);
  EXPECT_TRUE(p.up());
  EXPECT_DOUBLE_EQ(p.rate_gbps, 200);
  EXPECT_EQ(p.netdev, "ibp130s0");
  EXPECT_FALSE(p.roce_v2_gid_index.has_value());
  ASSERT_THAT(d.ports[0].gids, SizeIs(1));
  EXPECT_EQ(d.ports[0].gids[0].index, 0);
  EXPECT_EQ(d.ports[0].gids[0].gid, "fe80:0000:0000:0000:b859:9f03:00d3:1a2e");
  EXPECT_EQ(d.ports[0].gids[0].type, "IB/RoCE v1");
}

// The usual ConnectX RoCE table: link-local at 0/1, the IPv4 address at 2 (v1) and 3 (v2).
TEST(SysfsReadTest, RoceV2PicksTheIpv4MappedV2GidAtIndex3) {
  TempDir sys;
  PciFunction f;
  f.pci_class = "0x020000";
  f.numa = "-1";  // the platform does not say
  // No device/net: the netdev lives in another network namespace; the GIDs still name it.
  fs::path dev = plainDevice(sys, "mlx5_2", "0000:41:00.0", f);
  fs::path port = writePort(sys, dev, 1, "Ethernet", "4: ACTIVE", "100 Gb/sec (4X EDR)");
  writeGid(sys, port, 0, kLinkLocal, "IB/RoCE v1", "enp65s0f0np0");
  writeGid(sys, port, 1, kLinkLocal, "RoCE v2", "enp65s0f0np0");
  writeGid(sys, port, 2, kIpv4Mapped, "IB/RoCE v1", "enp65s0f0np0");
  writeGid(sys, port, 3, kIpv4Mapped, "RoCE v2", "enp65s0f0np0");
  writeGid(sys, port, 4, kZeroGid);

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices = readRdmaDevices(sys.path(), warnings);

  EXPECT_THAT(warnings, IsEmpty());
  ASSERT_THAT(devices, SizeIs(1));
  const SysfsRdmaDevice& d = devices[0];
  ASSERT_TRUE(d.pci.has_value());
  EXPECT_EQ(d.pci->str(), "0000:41:00.0");  // from uevent
  EXPECT_EQ(d.numa, kNone);
  EXPECT_EQ(d.pci_class, 0x020000u);
  EXPECT_THAT(d.netdevs, IsEmpty());
  ASSERT_THAT(d.ports, SizeIs(1));
  EXPECT_EQ(d.ports[0].port.link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(d.ports[0].port.roce_v2_gid_index, 3);
  EXPECT_EQ(d.ports[0].port.netdev, "enp65s0f0np0");
  ASSERT_THAT(d.ports[0].gids, SizeIs(4));
  EXPECT_EQ(d.ports[0].gids[3].type, "RoCE v2");
  EXPECT_EQ(d.ports[0].gids[3].ndev, "enp65s0f0np0");
}

// Some NICs put the IPv4 RoCE v2 GID at index 1: the prober scans instead of assuming 3.
TEST(SysfsReadTest, RoceV2Ipv4GidAtIndex1) {
  TempDir sys;
  PciFunction f;
  f.netdevs = {"eth1"};
  fs::path dev = linkedDevice(sys, "mlx5_1", "devices/pci0000:00/0000:00:01.0/0000:01:00.1", f);
  fs::path port = writePort(sys, dev, 1, "Ethernet", "4: ACTIVE", "25 Gb/sec (1X EDR)");
  writeGid(sys, port, 0, kIpv4Mapped, "IB/RoCE v1", "eth1");
  writeGid(sys, port, 1, kIpv4Mapped, "RoCE v2", "eth1");
  writeGid(sys, port, 2, kLinkLocal, "IB/RoCE v1", "eth1");
  writeGid(sys, port, 3, kLinkLocal, "RoCE v2", "eth1");

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices = readRdmaDevices(sys.path(), warnings);

  EXPECT_THAT(warnings, IsEmpty());
  ASSERT_THAT(devices, SizeIs(1));
  EXPECT_EQ(devices[0].pci->str(), "0000:01:00.1");
  ASSERT_THAT(devices[0].ports, SizeIs(1));
  EXPECT_EQ(devices[0].ports[0].port.roce_v2_gid_index, 1);
  EXPECT_EQ(devices[0].ports[0].port.netdev, "eth1");
  EXPECT_DOUBLE_EQ(devices[0].ports[0].port.rate_gbps, 25);
}

TEST(SysfsReadTest, DownPortIsDown) {
  TempDir sys;
  PciFunction f;
  f.netdevs = {"ib0"};
  fs::path dev = plainDevice(sys, "mlx5_3", "0000:c1:00.0", f);
  fs::path port = writePort(sys, dev, 1, "InfiniBand", "1: DOWN", "10 Gb/sec (4X SDR)");
  writeGid(sys, port, 0, "fe80:0000:0000:0000:b859:9f03:00d3:1a2f");

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices = readRdmaDevices(sys.path(), warnings);

  EXPECT_THAT(warnings, IsEmpty());
  ASSERT_THAT(devices, SizeIs(1));
  ASSERT_THAT(devices[0].ports, SizeIs(1));
  EXPECT_EQ(devices[0].ports[0].port.state, PortState::kDown);
  EXPECT_FALSE(devices[0].ports[0].port.up());
  EXPECT_EQ(devices[0].ports[0].port.netdev, "ib0");
}

// The values of shared/fixtures/rdma/sysfs_mlx4_0_connectx3-fdr-ib_hwloc-tarball.txt (kernel of
// 2013: no gid_attrs/), plus a second device whose Ethernet port has an IPv4 GID it cannot type.
TEST(SysfsReadTest, Pre44KernelWithoutGidAttrs) {
  TempDir sys;
  PciFunction cx3;
  cx3.device = "0x1003";
  cx3.pci_class = "0x028000";
  cx3.netdevs = {"ib0"};
  fs::path mlx4 = linkedDevice(sys, "mlx4_0", "devices/pci0000:80/0000:80:02.2/0000:82:00.0", cx3);
  fs::path ib = writePort(sys, mlx4, 1, "InfiniBand", "4: ACTIVE", "56 Gb/sec (4X FDR)");
  writeGid(sys, ib, 0, "fe80:0000:0000:0000:0002:c903:00f9:bfa1");
  writeGid(sys, ib, 1, "fe80:0000:0000:0000:0000:0000:0000:0000");
  writeGid(sys, ib, 2, "fe80:0000:0000:0000:0000:0000:0000:0000");
  PciFunction en = cx3;
  en.netdevs = {"eth2"};
  fs::path mlx4e = linkedDevice(sys, "mlx4_1", "devices/pci0000:80/0000:80:03.0/0000:84:00.0", en);
  fs::path eth = writePort(sys, mlx4e, 1, "Ethernet", "4: ACTIVE", "40 Gb/sec (4X QDR)");
  writeGid(sys, eth, 0, kLinkLocal);
  writeGid(sys, eth, 1, kIpv4Mapped);

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices;
  ASSERT_NO_THROW(devices = readRdmaDevices(sys.path(), warnings));

  ASSERT_THAT(devices, SizeIs(2));
  const SysfsRdmaDevice& d = devices[0];
  EXPECT_EQ(d.name, "mlx4_0");
  EXPECT_EQ(d.pci->str(), "0000:82:00.0");
  EXPECT_EQ(d.device, 0x1003);
  EXPECT_EQ(d.pci_class, 0x028000u);
  ASSERT_THAT(d.ports, SizeIs(1));
  EXPECT_DOUBLE_EQ(d.ports[0].port.rate_gbps, 56);
  EXPECT_EQ(d.ports[0].port.netdev, "ib0");
  ASSERT_THAT(d.ports[0].gids, SizeIs(1));
  EXPECT_EQ(d.ports[0].gids[0].type, "");
  EXPECT_FALSE(d.ports[0].port.roce_v2_gid_index.has_value());

  const SysfsRdmaDevice& e = devices[1];
  ASSERT_THAT(e.ports, SizeIs(1));
  EXPECT_EQ(e.ports[0].port.link_layer, LinkLayer::kEthernet);
  EXPECT_THAT(e.ports[0].gids, SizeIs(2));
  EXPECT_FALSE(e.ports[0].port.roce_v2_gid_index.has_value());
  EXPECT_EQ(e.ports[0].port.netdev, "eth2");
  // Only the Ethernet port misses its GID types; an IB port has no use for them.
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("mlx4_1/ports/1/gid_attrs/types: "));
  EXPECT_THAT(warnings[0], HasSubstr("kernel before 4.4"));
}

TEST(SysfsReadTest, MissingFilesAreWarnings) {
  TempDir sys;
  fs::path dev = "class/infiniband/mlx5_4";  // no device link at all
  fs::path port = dev / "ports" / "1";
  sys.write(port / "link_layer", "InfiniBand\n");
  sys.write(port / "state", "4: ACTIVE\n");  // no rate
  writeGid(sys, port, 0, "fe80:0000:0000:0000:b859:9f03:00d3:1a30");
  fs::path noPorts = "class/infiniband/mlx5_5";
  writeFunction(sys, noPorts / "device", PciFunction{});  // a folder, no link, no uevent

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices;
  ASSERT_NO_THROW(devices = readRdmaDevices(sys.path(), warnings));

  ASSERT_THAT(devices, SizeIs(2));
  const SysfsRdmaDevice& d = devices[0];
  EXPECT_EQ(d.name, "mlx5_4");
  EXPECT_FALSE(d.pci.has_value());
  EXPECT_EQ(d.numa, kNone);
  EXPECT_TRUE(d.cpus.empty());
  ASSERT_THAT(d.ports, SizeIs(1));
  EXPECT_EQ(d.ports[0].port.state, PortState::kActive);
  EXPECT_EQ(d.ports[0].port.rate_gbps, 0);
  EXPECT_TRUE(anyContains(warnings, (sys.path() / dev / "device").string() + ": ", "no such file"));
  EXPECT_TRUE(anyContains(warnings, (sys.path() / port / "rate").string() + ": ", "no such file"));

  const SysfsRdmaDevice& e = devices[1];
  EXPECT_FALSE(e.pci.has_value());
  EXPECT_EQ(e.numa, 1);  // the rest of the function is still read
  EXPECT_THAT(e.ports, IsEmpty());
  EXPECT_TRUE(anyContains(warnings, (sys.path() / noPorts / "device").string() + ": ", "no PCI address"));
  EXPECT_TRUE(anyContains(warnings, (sys.path() / noPorts / "ports").string() + ": ", "no such folder"));
  EXPECT_THAT(warnings, SizeIs(4));
}

// Whatever a tree holds, reading it ends, and ends in warnings.
TEST(SysfsReadTest, HostileFilesAreWarnings) {
  TempDir sys;
  PciFunction f;
  f.numa = "banana";
  f.cpus = "0-zz";
  f.vendor = "0x115b3";  // does not fit 16 bits
  fs::path dev = plainDevice(sys, "mlx5_6", "0000:82:00.0", f);
  fs::path port = dev / "ports" / "1";
  sys.write(port / "link_layer", std::string(1 << 20, 'E'));           // 1 MiB
  fs::create_directories(sys.path() / port / "state");                 // a folder where a file belongs
  ASSERT_EQ(::mkfifo((sys.path() / port / "rate").c_str(), 0600), 0);  // would block a plain read
  fs::create_directory_symlink("loop", sys.path() / "class/infiniband/loop");
  sys.write("class/infiniband/README", "not a device\n");

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices;
  ASSERT_NO_THROW(devices = readRdmaDevices(sys.path(), warnings));

  ASSERT_THAT(devices, SizeIs(1));
  const SysfsRdmaDevice& d = devices[0];
  EXPECT_EQ(d.vendor, 0);
  EXPECT_EQ(d.numa, kNone);
  EXPECT_TRUE(d.cpus.empty());
  ASSERT_THAT(d.ports, SizeIs(1));
  EXPECT_EQ(d.ports[0].port.link_layer, LinkLayer::kUnspecified);
  EXPECT_EQ(d.ports[0].port.state, PortState::kUnknown);
  EXPECT_EQ(d.ports[0].port.rate_gbps, 0);
  fs::path root = sys.path();
  EXPECT_TRUE(anyContains(warnings, (root / dev / "device/vendor").string(), "0x115b3"));
  EXPECT_TRUE(anyContains(warnings, (root / dev / "device/numa_node").string(), "banana"));
  EXPECT_TRUE(anyContains(warnings, (root / dev / "device/local_cpulist").string(), "0-zz"));
  EXPECT_TRUE(anyContains(warnings, (root / port / "link_layer").string(),
                          "kernel attribute files are at most 8 KiB"));
  EXPECT_TRUE(anyContains(warnings, (root / port / "state").string(), " is a directory, not a regular file"));
  EXPECT_TRUE(anyContains(warnings, (root / port / "rate").string(), "not a regular file"));
  EXPECT_TRUE(anyContains(warnings, (root / "class/infiniband/loop").string(), "skipped"));
  EXPECT_TRUE(anyContains(warnings, (root / "class/infiniband/README").string(), "skipped"));
  for (const std::string& w : warnings) EXPECT_LT(w.size(), 512u) << w;
}

// The dev machine: no RDMA device, no class/infiniband.
TEST(SysfsReadTest, NoInfinibandFolderIsEmptyWithOneWarning) {
  TempDir sys;
  sys.write("class/net/eth0/type", "1\n");

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices = readRdmaDevices(sys.path(), warnings);

  EXPECT_THAT(devices, IsEmpty());
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr((sys.path() / "class/infiniband").string() + ": no such folder"));
}

// mlx4 (ConnectX-3 VPI) shows both ports under one device and one PCI function; here port 1 is
// IB and port 2 Ethernet. The netdevs are told apart by their port: ib0 by dev_port, eth2 by
// dev_id (what kernels before 3.15 had). "eth2" sorts first, so taking the first netdev fails.
TEST(SysfsReadTest, DualPortMlx4WithOneIbAndOneEthernetPort) {
  TempDir sys;
  PciFunction f;
  f.device = "0x1003";
  f.pci_class = "0x028000";
  f.netdevs = {"eth2", "ib0"};
  fs::path function = "devices/pci0000:00/0000:00:03.0/0000:05:00.0";
  fs::path dev = linkedDevice(sys, "mlx4_0", function, f);
  sys.write(function / "net/ib0/dev_port", "0\n");
  sys.write(function / "net/eth2/dev_id", "0x1\n");
  fs::path ib = writePort(sys, dev, 1, "InfiniBand", "4: ACTIVE", "56 Gb/sec (4X FDR)");
  writeGid(sys, ib, 0, "fe80:0000:0000:0000:0002:c903:00f9:bfa1", "IB/RoCE v1");
  fs::path eth = writePort(sys, dev, 2, "Ethernet", "4: ACTIVE", "40 Gb/sec (4X QDR)");
  writeGid(sys, eth, 0, kLinkLocal, "IB/RoCE v1");
  writeGid(sys, eth, 1, kLinkLocal, "RoCE v2");
  writeGid(sys, eth, 2, kIpv4Mapped, "IB/RoCE v1");
  writeGid(sys, eth, 3, kIpv4Mapped, "RoCE v2");

  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices = readRdmaDevices(sys.path(), warnings);

  EXPECT_THAT(warnings, IsEmpty());
  ASSERT_THAT(devices, SizeIs(1));
  const SysfsRdmaDevice& d = devices[0];
  EXPECT_EQ(d.pci->str(), "0000:05:00.0");
  EXPECT_THAT(d.netdevs, ElementsAre("eth2", "ib0"));
  ASSERT_THAT(d.ports, SizeIs(2));
  EXPECT_EQ(d.ports[0].port.port, 1);
  EXPECT_EQ(d.ports[0].port.link_layer, LinkLayer::kInfiniBand);
  EXPECT_EQ(d.ports[0].port.netdev, "ib0");
  EXPECT_FALSE(d.ports[0].port.roce_v2_gid_index.has_value());
  EXPECT_DOUBLE_EQ(d.ports[0].port.rate_gbps, 56);
  EXPECT_EQ(d.ports[1].port.port, 2);
  EXPECT_EQ(d.ports[1].port.link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(d.ports[1].port.netdev, "eth2");
  EXPECT_EQ(d.ports[1].port.roce_v2_gid_index, 3);
  EXPECT_DOUBLE_EQ(d.ports[1].port.rate_gbps, 40);
}

TEST(SysfsReadTest, DevicesComeInNaturalOrder) {
  TempDir sys;
  for (const char* name : {"mlx5_10", "mlx5_2", "mlx5_1"}) {
    writePort(sys, fs::path("class/infiniband") / name, 1, "InfiniBand", "4: ACTIVE", "400 Gb/sec (4X NDR)");
  }
  std::vector<std::string> warnings;
  std::vector<SysfsRdmaDevice> devices = readRdmaDevices(sys.path(), warnings);
  ASSERT_THAT(devices, SizeIs(3));
  EXPECT_EQ(devices[0].name, "mlx5_1");
  EXPECT_EQ(devices[1].name, "mlx5_2");
  EXPECT_EQ(devices[2].name, "mlx5_10");
}

SysfsRdmaDevice sysfsDevice(const std::string& name, const std::string& bdf, int numa, const NicPort& port) {
  SysfsRdmaDevice d;
  d.name = name;
  d.pci = PciAddress::parse(bdf);
  d.vendor = kVendorMellanox;
  d.device = 0x101b;
  d.pci_class = 0x020700;
  d.numa = numa;
  d.cpus = CpuSet::parseList(numa == 0 ? "0-7" : "8-15");
  d.ports.push_back(SysfsRdmaPort{port, {}});
  return d;
}

TEST(SysfsMergeTest, UpdatesKnownNicsAndAddsTheOthers) {
  NodeTopology topo;
  topo.packages.resize(2);
  topo.packages[1].os_index = 1;
  topo.numa_nodes = {NumaNode{0, CpuSet::parseList("0-7"), 0, 0},
                     NumaNode{1, CpuSet::parseList("8-15"), 0, 1}};
  topo.switches.push_back(PciSwitch{});
  // hwloc saw the function but no OpenFabrics device: it names the NIC by its bus id.
  Nic unnamed;
  unnamed.name = "pci:0000:82:00.0";
  unnamed.pci = *PciAddress::parse("0000:82:00.0");
  unnamed.at = PciPlacement{0, kNoIndex, kNone, kNone};
  unnamed.ports = {NicPort{1, LinkLayer::kInfiniBand, PortState::kUnknown, 0, "ib0", std::nullopt}};
  Nic named;
  named.name = "mlx5_1";
  named.pci = *PciAddress::parse("0000:03:00.0");
  named.at = PciPlacement{kNoIndex, kNoIndex, 0, 0};
  named.cpus = CpuSet::parseList("0-3");
  topo.nics = {unnamed, named};

  NicPort ib{1, LinkLayer::kInfiniBand, PortState::kActive, 200, "", std::nullopt};
  NicPort roce{1, LinkLayer::kEthernet, PortState::kActive, 100, "enp3s0np0", 3};
  NicPort fresh{1, LinkLayer::kInfiniBand, PortState::kDown, 400, "ibp193s0", std::nullopt};
  SysfsRdmaDevice noPci = sysfsDevice("scif0", "", kNone, ib);
  std::vector<SysfsRdmaDevice> devices = {
      sysfsDevice("mlx5_0", "0000:82:00.0", 1, ib),
      sysfsDevice("mlx5_1", "0000:99:00.0", 1, roce),  // matched by name, not by address
      sysfsDevice("mlx5_2", "0000:c1:00.0", 1, fresh),
      noPci,
  };

  mergeRdmaDevices(topo, devices);

  ASSERT_THAT(topo.nics, SizeIs(3));
  const Nic& n0 = topo.nics[0];
  EXPECT_EQ(n0.name, "mlx5_0");  // renamed from pci:0000:82:00.0
  EXPECT_EQ(n0.pci.str(), "0000:82:00.0");
  EXPECT_EQ(n0.at.switch_index, 0);  // hwloc's placement kept
  EXPECT_EQ(n0.at.numa, 1);          // unknown to hwloc, filled from sysfs
  EXPECT_EQ(n0.at.package, 1);
  EXPECT_EQ(n0.cpus.toList(), "8-15");
  ASSERT_THAT(n0.ports, SizeIs(1));
  EXPECT_EQ(n0.ports[0].state, PortState::kActive);
  EXPECT_DOUBLE_EQ(n0.ports[0].rate_gbps, 200);
  EXPECT_EQ(n0.ports[0].netdev, "ib0");  // sysfs named none: hwloc's kept

  const Nic& n1 = topo.nics[1];
  EXPECT_EQ(n1.name, "mlx5_1");
  EXPECT_EQ(n1.pci.str(), "0000:03:00.0");
  EXPECT_EQ(n1.at.numa, 0);            // known: kept
  EXPECT_EQ(n1.cpus.toList(), "0-3");  // known: kept
  EXPECT_THAT(n1.ports, ElementsAre(roce));

  const Nic& n2 = topo.nics[2];
  EXPECT_EQ(n2.name, "mlx5_2");
  EXPECT_EQ(n2.pci.str(), "0000:c1:00.0");
  EXPECT_EQ(n2.vendor, kVendorMellanox);
  EXPECT_EQ(n2.device, 0x101b);
  EXPECT_EQ(n2.pci_class, 0x020700u);
  EXPECT_EQ(n2.cpus.toList(), "8-15");
  EXPECT_EQ(n2.at, (PciPlacement{kNoIndex, kNoIndex, 1, 1}));
  EXPECT_THAT(n2.ports, ElementsAre(fresh));

  ASSERT_THAT(topo.warnings, SizeIs(1));
  EXPECT_THAT(topo.warnings[0], HasSubstr("scif0"));
}

TEST(SysfsMergeTest, NewNicOnUnknownNumaNodeHasNoPackage) {
  NodeTopology topo;
  NicPort port{1, LinkLayer::kEthernet, PortState::kActive, 25, "eth0", std::nullopt};
  mergeRdmaDevices(topo, {sysfsDevice("rxe0", "0000:00:05.0", kNone, port)});
  ASSERT_THAT(topo.nics, SizeIs(1));
  EXPECT_EQ(topo.nics[0].at, (PciPlacement{kNoIndex, kNoIndex, kNone, kNone}));
  EXPECT_THAT(topo.nics[0].ports, ElementsAre(port));
}

struct RateCase {
  const char* text;
  double gbps;
};

void PrintTo(const RateCase& c, std::ostream* os) {
  *os << '"' << c.text << '"';
}

class SysfsRateTest : public ::testing::TestWithParam<RateCase> {};

TEST_P(SysfsRateTest, Parses) {
  EXPECT_DOUBLE_EQ(parseRateGbps(GetParam().text), GetParam().gbps);
}

INSTANTIATE_TEST_SUITE_P(
    SysfsRates, SysfsRateTest,
    ::testing::Values(RateCase{"100 Gb/sec (4X EDR)", 100}, RateCase{"2.5 Gb/sec (1X SDR)", 2.5},
                      RateCase{"400 Gb/sec (4X NDR)", 400}, RateCase{"56 Gb/sec (4X FDR)", 56},
                      RateCase{"200 Gb/sec (4X HDR)\n", 200}, RateCase{"800 Gb/sec (4X XDR)", 800},
                      RateCase{"40 Gb/sec (4X)", 40}, RateCase{"", 0}, RateCase{"fast", 0},
                      RateCase{"Gb/sec", 0}, RateCase{"100", 0}, RateCase{"100 Mb/sec", 0},
                      RateCase{"-100 Gb/sec (4X EDR)", 0}, RateCase{"0 Gb/sec", 0}, RateCase{"inf Gb/sec", 0},
                      RateCase{"nan Gb/sec", 0}),
    [](const ::testing::TestParamInfo<RateCase>& p) {
      std::string_view text = p.param.text;
      if (text.empty()) return std::string("empty");
      return std::string(text.starts_with('-') ? "minus_" : "") + poolrun::test::testName(text);
    });

struct RoceCase {
  const char* name;
  std::vector<SysfsGid> gids;
  std::optional<int> expected;
};

void PrintTo(const RoceCase& c, std::ostream* os) {
  *os << c.name;
}

class SysfsRoceGidTest : public ::testing::TestWithParam<RoceCase> {};

TEST_P(SysfsRoceGidTest, FindsTheLowestIpv4MappedV2Gid) {
  EXPECT_EQ(findRoceV2Ipv4Gid(GetParam().gids), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    SysfsTables, SysfsRoceGidTest,
    ::testing::Values(
        RoceCase{"empty", {}, std::nullopt},
        RoceCase{
            "v1Only", {{0, kLinkLocal, "IB/RoCE v1", ""}, {1, kIpv4Mapped, "IB/RoCE v1", ""}}, std::nullopt},
        RoceCase{"v2LinkLocalOnly", {{1, kLinkLocal, "RoCE v2", ""}}, std::nullopt},
        RoceCase{"untyped", {{3, kIpv4Mapped, "", ""}}, std::nullopt},
        RoceCase{"trailingNewline", {{5, kIpv4Mapped, "RoCE v2 \n", ""}}, 5},
        RoceCase{"lowestOfUnsorted", {{7, kIpv4Mapped, "RoCE v2", ""}, {3, kIpv4Mapped, "RoCE v2", ""}}, 3},
        RoceCase{"upperCaseHex", {{2, "0000:0000:0000:0000:0000:FFFF:0A00:0001", "RoCE v2", ""}}, 2},
        RoceCase{"globalIpv6", {{2, "2001:0db8:0000:0000:0000:ffff:0a00:0001", "RoCE v2", ""}}, std::nullopt},
        RoceCase{"malformed", {{2, "0000:0000:0000:0000:0000:ffff:0a00", "RoCE v2", ""}}, std::nullopt}),
    [](const ::testing::TestParamInfo<RoceCase>& param) { return std::string(param.param.name); });

// countLocalCpus(): cores are the distinct thread-sibling sets of the online CPUs.
TEST(CountLocalCpusTest, HyperthreadedCoresAndFallbacks) {
  TempDir sys;
  sys.write("devices/system/cpu/online", "0-3\n");
  for (int cpu = 0; cpu < 4; ++cpu) {
    std::string siblings = cpu % 2 == 0 ? "0,2\n" : "1,3\n";
    sys.write("devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/core_cpus_list", siblings);
  }
  CpuCount count = countLocalCpus(sys.path());
  EXPECT_EQ(count.cores, 2);
  EXPECT_EQ(count.threads, 4);

  // Kernels before 5.3 name the file thread_siblings_list.
  TempDir old;
  old.write("devices/system/cpu/online", "0-2\n");
  for (int cpu = 0; cpu < 3; ++cpu)
    old.write("devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list",
              std::to_string(cpu) + "\n");
  count = countLocalCpus(old.path());
  EXPECT_EQ(count.cores, 3);
  EXPECT_EQ(count.threads, 3);

  // No sysfs at all: every online CPU is a core.
  TempDir none;
  count = countLocalCpus(none.path());
  EXPECT_EQ(count.cores, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_EQ(count.threads, count.cores);
}

}  // namespace
}  // namespace poolrun::topo
