#pragma once

// RDMA devices as Linux describes them under /sys/class/infiniband, read from a root that tests
// replace with a tree of their own (DIR stands in for /sys). Nothing here requires a device: a
// missing or unreadable file becomes a warning and a field left unknown.

#include <filesystem>
#include <string>
#include <vector>

#include "poolrun/topo/topology.hpp"

namespace poolrun::topo {

struct SysfsGid {
  int index = 0;
  std::string gid;   // "0000:0000:0000:0000:0000:ffff:c0a8:010e"
  std::string type;  // "RoCE v2", "IB/RoCE v1", or empty where gid_attrs is absent (kernel < 4.4)
  std::string ndev;  // netdev the GID is bound to, where known
};

struct SysfsRdmaPort {
  NicPort port;
  std::vector<SysfsGid> gids;  // non-zero entries only
};

struct SysfsRdmaDevice {
  std::string name;  // mlx5_0
  std::optional<PciAddress> pci;
  uint16_t vendor = 0;
  uint16_t device = 0;
  uint32_t pci_class = 0;
  int numa = kNone;
  CpuSet cpus;
  std::vector<std::string> netdevs;  // device/net/*
  std::vector<SysfsRdmaPort> ports;
};

// Every device under ROOT/class/infiniband. Warnings go to `warnings`.
std::vector<SysfsRdmaDevice> readRdmaDevices(const std::filesystem::path& root,
                                             std::vector<std::string>& warnings);

// "100 Gb/sec (4X EDR)" -> 100; "2.5 Gb/sec (1X SDR)" -> 2.5; 0 for anything else.
double parseRateGbps(std::string_view text);

// The RoCE v2 GID index that carries an IPv4 address (IPv4-mapped GID), if any.
std::optional<int> findRoceV2Ipv4Gid(const std::vector<SysfsGid>& gids);

// Updates the ports of the NICs that sysfs names and adds the ones the topology lacks (attached at
// their NUMA node, with no PCIe switch known).
void mergeRdmaDevices(NodeTopology& topo, const std::vector<SysfsRdmaDevice>& devices);

}  // namespace poolrun::topo
