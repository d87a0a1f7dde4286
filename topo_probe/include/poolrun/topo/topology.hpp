#pragma once

// NodeTopology: how one machine's CPUs, NUMA nodes, PCIe switches, GPUs and RDMA NICs are wired.
// It is a plain value: sources (live probe, hwloc XML, NCCL XML, JSON) produce it, writers (JSON,
// NCCL XML, matrix, DOT) and the planner consume it. Indexes into its vectors are its identities:
// size_t, with kNoIndex where there is none; OS indexes (NUMA nodes, packages) are ints, with kNone.

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/topo/cpuset.hpp"

namespace poolrun::topo {

// "Unknown" for the OS indexes and counts below, and "not attached" for the vector indexes; JSON
// writes both as null.
inline constexpr int kNone = -1;
inline constexpr size_t kNoIndex = std::numeric_limits<size_t>::max();
inline constexpr uint16_t kVendorNvidia = 0x10de;
inline constexpr uint16_t kVendorMellanox = 0x15b3;
inline constexpr uint16_t kVendorAmazon = 0x1d0f;
inline constexpr uint16_t kVendorAmd = 0x1002;
inline constexpr uint16_t kVendorIntel = 0x8086;

// A PCI function address, domain:bus:device.function.
struct PciAddress {
  uint32_t domain = 0;
  uint8_t bus = 0;
  uint8_t device = 0;
  uint8_t function = 0;

  // Accepts "dddd:bb:dd.f" and "bb:dd.f" (domain 0), any hex case, and NCCL's 16-digit domains.
  static std::optional<PciAddress> parse(std::string_view text);
  std::string str() const;  // lowercase "dddd:bb:dd.f"
  auto operator<=>(const PciAddress&) const = default;
};

// Path types between two devices, as nvidia-smi and NCCL name them, from closest to farthest.
enum class PathType { kNVLink, kPIX, kPXB, kPHB, kNODE, kSYS };

struct Path {
  PathType type = PathType::kSYS;
  int nvlinks = 0;  // with kNVLink: the number of links ("NV12")

  std::string str() const;
  static std::optional<Path> parse(std::string_view text);
  bool operator==(const Path&) const = default;
};

// PCIe link of a device or switch port, where known (0 = unknown).
struct PciLink {
  double speed_gts = 0;  // per lane, GT/s (2.5, 5, 8, 16, 32, 64)
  int width = 0;         // lanes
  double gbyte_s = 0;    // usable bandwidth, GB/s, as hwloc reports it
  bool operator==(const PciLink&) const = default;
};

struct Package {
  int os_index = 0;
  CpuSet cpus;
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  std::string model;   // "Intel(R) Xeon(R) Platinum 8480+"
  int family = kNone;
  int model_number = kNone;
  bool operator==(const Package&) const = default;
};

struct NumaNode {
  int os_index = 0;
  CpuSet cpus;  // empty for CPU-less (GPU memory) NUMA nodes
  uint64_t memory_bytes = 0;
  int package = kNone;  // Package::os_index
  bool operator==(const NumaNode&) const = default;
};

// A PCI root complex (hwloc "HostBridge"). NCCL XML records none.
struct HostBridge {
  std::string buses;  // "0000:[00-0f]"
  int numa = kNone;   // NumaNode::os_index of its locality, where it is one NUMA node
  bool operator==(const HostBridge&) const = default;
};

// A PCIe switch (the upstream port and its downstream ports as one node, as NCCL models it), or a
// CPU root port that devices hang from directly.
struct PciSwitch {
  PciAddress pci;  // the upstream port (or the root port)
  uint16_t vendor = 0;
  uint16_t device = 0;
  bool root_port = false;
  size_t parent = kNoIndex;       // index into NodeTopology::switches
  size_t host_bridge = kNoIndex;  // index into NodeTopology::host_bridges
  int numa = kNone;
  PciLink link;
  bool operator==(const PciSwitch&) const = default;
};

// Where a PCI device sits: the chain to the CPU that path classification walks.
struct PciPlacement {
  size_t switch_index = kNoIndex;  // nearest switch above the device (NodeTopology::switches)
  size_t host_bridge = kNoIndex;   // NodeTopology::host_bridges
  int numa = kNone;                // NumaNode::os_index, kNone where the locality spans several
  int package = kNone;             // Package::os_index
  bool operator==(const PciPlacement&) const = default;
};

struct NvLinkPeer {
  size_t gpu = kNoIndex;  // peer GPU index, or kNoIndex for a non-GPU peer
  std::string peer;       // "GPU3", "nvswitch", "cpu"
  int count = 0;          // links
  bool operator==(const NvLinkPeer&) const = default;
};

// Multi-Instance GPU: a GPU in MIG mode is split into GPU instances (slices of its memory and SMs),
// each with one or more compute instances; CUDA sees each compute instance as a device of its own,
// named by its "MIG-..." UUID (CUDA_VISIBLE_DEVICES takes it; a process sees one instance).
struct MigProfile {       // a GPU instance profile the GPU offers
  unsigned id = 0;        // NVML's device-unique profile id (nvidia-smi mig -lgip)
  std::string name;       // "1g.10gb", "3g.40gb", "1g.10gb+me"
  int slices = 0;         // of the GPU's 7 (or 8) compute slices
  int max_instances = 0;  // how many of it the whole GPU holds
  int sm = 0;             // streaming multiprocessors
  uint64_t memory_bytes = 0;
  bool operator==(const MigProfile&) const = default;
};

struct MigInstance {         // a compute instance: what a rank is given
  int gpu_instance = 0;      // the GPU instance id
  int compute_instance = 0;  // the compute instance id within it
  std::string profile;       // the name nvidia-smi -L prints: "1g.10gb", "1c.3g.40gb"
  unsigned profile_id = 0;   // the GPU instance's profile (MigProfile::id)
  int slices = 0;            // the GPU instance's slices
  int sm = 0;
  uint64_t memory_bytes = 0;
  std::string uuid;  // "MIG-..."
  bool operator==(const MigInstance&) const = default;
};

struct MigState {
  bool capable = false;  // NVML answers the MIG mode of this GPU (A100, H100, H200, ...)
  bool enabled = false;  // the current mode
  bool pending = false;  // the mode after the next GPU reset
  std::vector<MigProfile> profiles;
  std::vector<MigInstance> instances;  // in NVML's MIG device order
  // A mode change waits for a GPU reset: the GPU is neither whole nor split as asked.
  bool resetPending() const { return capable && enabled != pending; }
  bool operator==(const MigState&) const = default;
};

struct Gpu {
  size_t index = 0;  // position in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)
  PciAddress pci;
  uint16_t vendor = 0;
  uint16_t device = 0;
  uint32_t pci_class = 0;  // 24-bit class code, e.g. 0x030200
  std::string model;       // "NVIDIA H100 80GB HBM3", where known
  int sm = 0;              // compute capability x10 (80, 90, 100), 0 where unknown or not NVIDIA
  uint64_t memory_bytes = 0;
  std::string uuid;
  CpuSet cpus;  // local CPUs
  PciPlacement at;
  PciLink link;
  std::vector<NvLinkPeer> nvlinks;
  int nvswitch_links = 0;  // links to NVSwitches (all GPUs on the switch fabric are reachable)
  MigState mig;            // where NVML reports it (the live probe, a poolrun.topology/2 file)

  bool isNvidia() const { return vendor == kVendorNvidia; }
  bool operator==(const Gpu&) const = default;
};

enum class LinkLayer { kInfiniBand, kEthernet, kUnspecified };
enum class PortState { kUnknown, kDown, kInit, kArmed, kActive, kActiveDefer };

struct NicPort {
  int port = 1;
  LinkLayer link_layer = LinkLayer::kUnspecified;
  PortState state = PortState::kUnknown;
  double rate_gbps = 0;  // 0 where unknown
  std::string netdev;
  std::optional<int> roce_v2_gid_index;  // Ethernet ports: the RoCE v2 GID with an IPv4 address

  bool up() const { return state == PortState::kActive || state == PortState::kActiveDefer; }
  bool operator==(const NicPort&) const = default;
};

struct Nic {
  std::string name;  // RDMA device ("mlx5_3"), or "pci:BUSID" where the source names none
  PciAddress pci;
  bool has_pci = true;  // false for a NIC the source names without a PCI function (NCCL <nic> under <cpu>)
  uint16_t vendor = 0;
  uint16_t device = 0;
  uint32_t pci_class = 0;
  CpuSet cpus;
  PciPlacement at;
  PciLink link;
  std::vector<NicPort> ports;

  // An AWS Elastic Fabric Adapter (1d0f:efa0 to efa3, the ids NCCL XML and hwloc record): neither
  // InfiniBand nor RoCE, and no socket interface. NCCL reaches it only through the aws-ofi-nccl net
  // plugin, which also decides GPUDirect RDMA over it.
  bool isEfa() const { return vendor == kVendorAmazon && (device & 0xfff0) == 0xefa0; }
  bool operator==(const Nic&) const = default;
};

struct NodeTopology {
  std::string hostname;
  std::string source;  // "live", "hwloc-xml:PATH", "nccl-xml:PATH", "json:PATH"
  std::vector<Package> packages;
  std::vector<NumaNode> numa_nodes;
  // Cores in hwloc's logical order, each with its hardware threads (OS indexes). Empty where the
  // source does not say (NCCL XML): then every CPU counts as a core of its own.
  std::vector<CpuSet> cores;
  std::vector<HostBridge> host_bridges;
  std::vector<PciSwitch> switches;
  std::vector<Gpu> gpus;              // sorted by PCI address; Gpu::index == position
  std::vector<Nic> nics;              // sorted by name
  bool nvswitch = false;              // an NVSwitch fabric connects the GPUs
  std::vector<std::string> warnings;  // what the source could not read, for the user

  // Label of a device in matrices and JSON "paths": "GPU<index>" or the NIC's name.
  static std::string gpuLabel(size_t index) { return "GPU" + std::to_string(index); }

  // Path between two GPUs, a GPU and a NIC, two NICs (indexes into gpus / nics).
  Path gpuToGpu(size_t a, size_t b) const;
  Path gpuToNic(size_t gpu, size_t nic) const;
  Path nicToNic(size_t a, size_t b) const;
  Path pciPath(const PciPlacement& a, const PciPlacement& b) const;

  // The CPUs of the whole node.
  CpuSet allCpus() const;
  // Cores (see `cores`), or one per CPU where the source named no cores.
  std::vector<CpuSet> coresOrCpus() const;
  const NumaNode* numaNode(int os_index) const;
  const Nic* nicByName(const std::string& name) const;

  // Sorts GPUs by PCI address and renumbers them, sorts NICs by name, fixes NVLink peer labels.
  void normalize();
  bool operator==(const NodeTopology&) const = default;
};

// A MIG compute instance as a unit a pool leases: the GPU it is part of and its place in that
// GPU's MigState::instances.
struct MigUnit {
  size_t gpu = 0;
  size_t instance = 0;
  bool operator==(const MigUnit&) const = default;
};
// Every compute instance of the GPUs in MIG mode now, by GPU index, then GPU instance id, then
// compute instance id: an order that depends on the layout alone (not on NVML's device order), so
// that a pool numbering its units by it finds the same numbers in the same layout.
std::vector<MigUnit> migUnits(const NodeTopology& topology);

std::string toString(LinkLayer layer);
std::string toString(PortState state);
LinkLayer linkLayerFromString(std::string_view text);  // sysfs or JSON spelling
PortState portStateFromString(std::string_view text);  // "4: ACTIVE", "active", "4"

// Compute capability (x10) of an NVIDIA PCI device id, 0 where unknown.
int smFromPciDevice(uint16_t device);
// "NVIDIA", "AMD", "Intel", "Mellanox", "Amazon" or the hex id.
std::string vendorName(uint16_t vendor);

// The board of an NVIDIA GPU that is always wired with NVLink ("A100 SXM4", "H100 SXM5", "V100
// SXM2", "B200", ...), from its PCI device id (pci.ids names) or, for an id the table lacks, a model
// name with "SXM" in it; empty for PCIe cards, other vendors and unknown ids.
std::string nvlinkBoard(const Gpu& gpu);

// What the topology under-describes that changes paths: where GPUs that are always wired with
// NVLink (nvlinkBoard) number two or more and the source records no NVLink at all (no <nvlink>
// in NCCL XML, no NVLinkBandwidth distances in hwloc XML, no NVML on a live probe), one warning
// per board: "GPUs 0-7 are A100 SXM4, which have NVLink, but FILE records no NVLink: ...". Paths
// between those GPUs then read as PCIe types (PIX to SYS). Computed from the value, not stored in
// NodeTopology::warnings, so that a file written and read again says it once.
std::vector<std::string> missingNvlinkWarnings(const NodeTopology& topo);

}  // namespace poolrun::topo
