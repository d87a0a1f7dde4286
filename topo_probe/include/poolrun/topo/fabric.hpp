#pragma once

// The fabric rule: which fabrics a node carries and which of its NICs serve each. The pool (which
// nodes a lease for a fabric may get) and the planner (which fabric a job runs on, which NICs its
// ranks use) both decide by these functions and by nothing else, so that a node the pool grants for
// a fabric always plans on it, and a node that plans on a fabric is granted for it.
//
//   ib    a usable port whose link layer is InfiniBand (NCCL's IB transport)
//   roce  a usable Ethernet port of an RDMA (verbs) device: "mlx5_0", not "eth0"
//   tcp   every node (NCCL's socket transport needs no NIC of its own kind)
//
// A port is usable where it is up, or where the source records no port state (NCCL topology files
// list only the ports NCCL found; hwloc names netdevs without a state). A cluster file's `fabric =`
// stands for the topology: the node carries that fabric, and tcp.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "poolrun/topo/topology.hpp"

namespace poolrun::topo {

enum class Fabric { kIb, kRoce, kTcp };
std::string toString(Fabric fabric);
// "ib", "roce", "tcp"; throws poolrun::Error (kBadInput) naming the value otherwise.
Fabric fabricFromString(std::string_view text);

// How NCCL reaches a NIC.
enum class NicAccess {
  kVerbs,   // an RDMA device NCCL's IB transport opens by name (NCCL_IB_HCA, UCX_NET_DEVICES)
  kSocket,  // a network interface NCCL's socket transport names (NCCL_SOCKET_IFNAME)
  // Neither, or unnamed: AWS EFA (only through the aws-ofi-nccl net plugin), a NIC the source names
  // by its PCI address only ("pci:BUSID"), one whose only port has no link layer. Usable for
  // placement on any fabric; a plan sets no NCCL_IB_* or UCX variables for it.
  kOpaque,
};
NicAccess nicAccess(const Nic& nic);

// A device name of an RDMA driver ("mlx5_0", "rocep1s0f0", "irdma0", "bnxt_re0", "efa0", ...).
bool isRdmaDeviceName(std::string_view name);

// Up, or of unknown state (see above).
bool portUsable(const NicPort& port);

// Whether `port` of `nic` carries `fabric` (whether or not it is usable).
bool portCarries(const Nic& nic, const NicPort& port, Fabric fabric);

// The fabrics a node carries, most preferred first: a subset of ib, roce, then always tcp.
// `declared`: the cluster file's fabric for the node, which stands for its NICs.
std::vector<Fabric> nodeFabrics(const NodeTopology& topology, std::optional<Fabric> declared = std::nullopt);
bool nodeCarries(const NodeTopology& topology, std::optional<Fabric> declared, Fabric fabric);

// A NIC port by position: NodeTopology::nics[nic].ports[port].
struct NicPortRef {
  size_t nic = 0;
  size_t port = 0;
  bool operator==(const NicPortRef&) const = default;
};

// The ports that serve `fabric` on a node, in NIC order: of every NIC, its first usable port that
// carries the fabric, or for an opaque NIC its first usable port (NCCL treats each port as a device
// of its own anyway, so one per NIC).
std::vector<NicPortRef> fabricPorts(const NodeTopology& topology, Fabric fabric);

}  // namespace poolrun::topo
