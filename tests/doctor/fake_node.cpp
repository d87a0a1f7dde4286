#include "fake_node.hpp"

#include <fstream>

namespace poolrun::doctor::test {
namespace fs = std::filesystem;
namespace {

// PCI paths under /sys/devices: root port / switch upstream / downstream / endpoint.
constexpr const char* kGpu0 = "pci0000:17/0000:17:01.0/0000:18:00.0/0000:1a:00.0/0000:1b:00.0";
constexpr const char* kNic0 = "pci0000:17/0000:17:01.0/0000:18:00.0/0000:1a:01.0/0000:1c:00.0";
constexpr const char* kGpu1 = "pci0000:97/0000:97:01.0/0000:98:00.0/0000:9a:00.0/0000:9b:00.0";
constexpr const char* kNic1 = "pci0000:97/0000:97:01.0/0000:98:00.0/0000:9a:01.0/0000:9c:00.0";

std::string bdfOf(const std::string& chain) {
  return chain.substr(chain.rfind('/') + 1);
}

}  // namespace

std::vector<uint8_t> FakeNode::configWithAcs(uint16_t control) {
  std::vector<uint8_t> c(4096, 0);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) c[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  };
  put32(0, 0x1af110b5);                                 // vendor/device of a PCIe switch port
  put32(0x100, 0x0001u | (1u << 16) | (0x148u << 20));  // AER, version 1, next at 0x148
  put32(0x148, 0x000Du | (1u << 16));                   // ACS, version 1, last
  put32(0x14c, 0x005fu | static_cast<uint32_t>(control) << 16);
  return c;
}

FakeNode::FakeNode(Fabric fabric) : fabric_(fabric) {
  for (const char* chain : {kGpu0, kNic0, kGpu1, kNic1}) {
    std::string bdf = bdfOf(chain);
    bool gpu = bdf == "0000:1b:00.0" || bdf == "0000:9b:00.0";
    addFunction(chain, gpu ? "0x10de" : "0x15b3",
                gpu ? "0x030200" : (fabric == Fabric::kIb ? "0x020700" : "0x020000"));
  }
  for (const char* bdf : {"0000:1a:00.0", "0000:1a:01.0", "0000:9a:00.0", "0000:9a:01.0"})
    setAcsControl(bdf, 0);
  for (const char* bdf : {"0000:1b:00.0", "0000:1c:00.0", "0000:9b:00.0", "0000:9c:00.0"})
    setIommu(bdf, "identity");

  int index = 0;
  for (const char* chain : {kNic0, kNic1}) {
    std::string nic = "mlx5_" + std::to_string(index);
    std::string netdev =
        fabric == Fabric::kIb ? "ibp" + std::to_string(index) : "ens" + std::to_string(index) + "np0";
    fs::path dev = fs::path("sys/devices") / chain / "infiniband" / nic;
    fs::create_directories(path() / dev);
    fs::create_directory_symlink("../../../" + bdfOf(chain), path() / dev / "device");
    fs::create_directories(path() / "sys/class/infiniband");
    fs::create_directory_symlink("../../devices/" + std::string(chain) + "/infiniband/" + nic,
                                 path() / "sys/class/infiniband" / nic);
    write("sys/devices/" + std::string(chain) + "/net/" + netdev + "/type",
          fabric == Fabric::kIb ? "32\n" : "1\n");
    fs::create_directories(path() / "sys/class/net");
    fs::create_directory_symlink("../../devices/" + std::string(chain) + "/net/" + netdev,
                                 path() / "sys/class/net" / netdev);
    write("sys/class/net/" + netdev + "/operstate", "up\n");
    write("sys/class/net/" + netdev + "/mtu", fabric == Fabric::kIb ? "4092\n" : "9000\n");
    FakePort port;
    if (fabric == Fabric::kRoce) {
      port.link_layer = "Ethernet";
      port.rate = "200 Gb/sec (2X HDR)";
    }
    setPort(nic, port);
    write("sys/class/infiniband_verbs/uverbs" + std::to_string(index) + "/ibdev", nic + "\n");
    write("dev/infiniband/uverbs" + std::to_string(index), "");
    ++index;
  }
  write("proc/self/limits",
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max open files            1048576              1048576              files     \n"
        "Max locked memory         unlimited            unlimited            bytes     \n");
  write("proc/modules",
        "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
        "nvidia 56508416 245 nvidia_uvm,nvidia_peermem,nvidia_modeset, Live 0x0000000000000000 (POE)\n"
        "mlx5_ib 458752 0 - Live 0x0000000000000000\n");
  write("proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
  write("proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n");
  write("proc/sys/kernel/numa_balancing", "0\n");
  for (int cpu = 0; cpu < 4; ++cpu)
    write("sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpufreq/scaling_governor", "performance\n");
  write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  write("sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never\n");
}

Roots FakeNode::roots() const {
  return {path() / "sys", path() / "proc", path() / "dev"};
}

void FakeNode::write(const std::string& relative, const std::string& content) const {
  fs::create_directories((path() / relative).parent_path());
  std::ofstream(path() / relative, std::ios::binary | std::ios::trunc) << content;
}

void FakeNode::remove(const std::string& relative) const {
  fs::remove_all(path() / relative);
}

void FakeNode::addFunction(const std::string& chain, const std::string& vendor,
                           const std::string& cls) const {
  fs::path sofar = "sys/devices";
  fs::create_directories(path() / "sys/bus/pci/devices");
  size_t start = chain.find('/') + 1;
  sofar /= chain.substr(0, start - 1);
  while (start < chain.size() + 1) {
    size_t end = chain.find('/', start);
    if (end == std::string::npos) end = chain.size();
    std::string bdf = chain.substr(start, end - start);
    sofar /= bdf;
    bool endpoint = end == chain.size();
    write((sofar / "vendor").string(), (endpoint ? vendor : "0x10b5") + "\n");
    write((sofar / "device").string(),
          endpoint ? (vendor == "0x10de" ? "0x2330\n" : "0x1021\n") : "0xc010\n");
    write((sofar / "class").string(), (endpoint ? cls : "0x060400") + "\n");
    write((sofar / "numa_node").string(), chain.starts_with("pci0000:17") ? "0\n" : "1\n");
    write((sofar / "local_cpulist").string(), chain.starts_with("pci0000:17") ? "0-31\n" : "32-63\n");
    write((sofar / "config").string(), std::string(4096, '\0'));
    fs::path link = path() / "sys/bus/pci/devices" / bdf;
    if (!fs::exists(fs::symlink_status(link)))
      fs::create_directory_symlink(fs::path("../../..") / sofar.lexically_relative("sys"), link);
    start = end + 1;
  }
}

void FakeNode::setPort(const std::string& nic, const FakePort& port) const {
  std::string dir = "sys/class/infiniband/" + nic + "/ports/1/";
  remove(dir);
  write(dir + "link_layer", port.link_layer + "\n");
  write(dir + "state", port.state + "\n");
  write(dir + "phys_state", port.phys_state + "\n");
  write(dir + "rate", port.rate + "\n");
  std::string netdev = fabric_ == Fabric::kIb ? "ibp" + nic.substr(5) : "ens" + nic.substr(5) + "np0";
  if (port.link_layer == "InfiniBand") {
    write(dir + "gids/0", "fe80:0000:0000:0000:b859:9f03:00d3:1a2" + nic.substr(5) + "\n");
    write(dir + "gid_attrs/types/0", "IB/RoCE v1\n");
    return;
  }
  const char* types[] = {"IB/RoCE v1", "RoCE v2", "IB/RoCE v1", "RoCE v2"};
  std::string v4 = port.ipv4_gid ? "0000:0000:0000:0000:0000:ffff:0a00:000" + nic.substr(5)
                                 : "fe80:0000:0000:0000:0000:0000:0000:0000";
  const std::string gids[] = {"fe80:0000:0000:0000:0a42:a1ff:fe10:000" + nic.substr(5),
                              "fe80:0000:0000:0000:0a42:a1ff:fe10:000" + nic.substr(5), v4, v4};
  for (int i = 0; i < 4; ++i) {
    write(dir + "gids/" + std::to_string(i), gids[i] + "\n");
    write(dir + "gid_attrs/types/" + std::to_string(i), std::string(types[i]) + "\n");
    write(dir + "gid_attrs/ndevs/" + std::to_string(i), netdev + "\n");
  }
}

void FakeNode::setAcsControl(const std::string& bdf, uint16_t control) const {
  std::vector<uint8_t> bytes = configWithAcs(control);
  std::ofstream(path() / "sys/bus/pci/devices" / bdf / "config", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void FakeNode::truncateConfig(const std::string& bdf, size_t bytes) const {
  fs::resize_file(path() / "sys/bus/pci/devices" / bdf / "config", bytes);
}

void FakeNode::setIommu(const std::string& bdf, const std::string& type) const {
  fs::path device = path() / "sys/bus/pci/devices" / bdf;
  std::string group = bdf.substr(5, 2);
  write("sys/kernel/iommu_groups/" + group + "/type", type + "\n");
  fs::remove(device / "iommu_group");
  fs::create_directory_symlink(
      fs::relative(path() / "sys/kernel/iommu_groups" / group, fs::canonical(device)),
      device / "iommu_group");
}

}  // namespace poolrun::doctor::test
