#pragma once

// The checks, grouped as the report shows them. Each appends its verdicts to a Report.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/doctor/doctor.hpp"
#include "poolrun/topo/sysfs.hpp"

namespace poolrun::doctor::detail {

// A small file's text without the white space around it, or nullopt with the reason in `why`.
std::optional<std::string> readText(const std::filesystem::path& file, std::string* why = nullptr);
// Up to `limit` bytes of a binary file (a PCI configuration space); empty where unreadable.
std::vector<uint8_t> readBytes(const std::filesystem::path& file, size_t limit);

// What the port checks need to know of one port, from sysfs or from a topology.
struct PortFacts {
  std::string nic;
  int port = 1;
  std::string kind;  // "15b3:101b" (vendor:device), for comparing rates with like ports
  topo::LinkLayer link_layer = topo::LinkLayer::kUnspecified;
  topo::PortState state = topo::PortState::kUnknown;
  std::string state_text;  // "4: ACTIVE"
  std::string phys_state;  // "5: LinkUp"; empty where unknown
  double rate_gbps = 0;
  std::string rate_text;  // "400 Gb/sec (4X NDR)"
  std::string netdev;
  std::string net_dir;                   // /sys/class/net/NETDEV, live only
  std::optional<std::string> operstate;  // of the netdev, live only
  std::optional<int> mtu;
  std::optional<int> roce_v2_gid;  // the RoCE v2 GID index with an IPv4 address
  bool gids_known = false;         // the GID table was read (live) or recorded (topology)
  std::string where;               // the port's folder, or the topology's source

  std::string subject() const { return nic + "/" + std::to_string(port); }
};

std::vector<PortFacts> livePorts(const Roots& roots, const std::vector<topo::SysfsRdmaDevice>& devices);
std::vector<PortFacts> topologyPorts(const topo::NodeTopology& topology);

// rdma.port, rdma.rate, roce.gid, roce.mtu, roce.netdev over the ports in `scope`.
void checkPorts(const std::vector<PortFacts>& ports, const Scope& scope, Report& report);
// rdma.uverbs: a verbs device node for each NIC, present and accessible.
void checkVerbs(const Roots& roots, const std::vector<std::string>& nics, Report& report);
// rdma.memlock: the locked-memory limit RDMA registration runs into.
void checkMemlock(const Roots& roots, Report& report);
// gdr.peermem, gdr.acs, gdr.iommu.
void checkGdr(const Roots& roots, const std::vector<topo::SysfsRdmaDevice>& devices, const Scope& scope,
              Report& report);
// host.numa_balancing, host.cpufreq, host.thp, host.hwloc.
void checkHost(const Roots& roots, Report& report);
// host.openmpi, host.ucx.
void checkTools(ToolRunner& tools, bool rdma, bool gpus, Report& report);
// gpu.*: persistence, ECC, retired pages / row remapping, clocks, NVLink.
void checkGpus(GpuQuery& query, Report& report);

// NVIDIA GPUs on the PCI bus (vendor 0x10de, display class): their addresses.
std::vector<topo::PciAddress> pciGpus(const Roots& roots);

}  // namespace poolrun::doctor::detail
