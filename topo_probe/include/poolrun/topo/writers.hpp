#pragma once

// Text forms of a NodeTopology.

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "poolrun/topo/topology.hpp"

namespace poolrun::topo {

// Written as /2 (MIG added to each GPU); /1 documents are still read (no MIG in them).
inline constexpr const char* kTopologySchema = "poolrun.topology/2";
inline constexpr const char* kTopologySchemaV1 = "poolrun.topology/1";

// The "poolrun.topology/2" document (a stable interface: see topo_probe/README.md).
nlohmann::ordered_json toJson(const NodeTopology& topo);
// The inverse of toJson(). Throws poolrun::Error (kBadInput) naming the field on a bad document.
NodeTopology fromJson(const nlohmann::json& doc, const std::string& name);

// NCCL_TOPO_FILE XML. NCCL has no NODE path type: devices under one <cpu> without a common
// switch read back as PHB.
std::string toNcclXml(const NodeTopology& topo);

// `nvidia-smi topo -m` style matrix of GPUs and NICs with CPU and NUMA affinity and a legend.
std::string toMatrix(const NodeTopology& topo);

// Graphviz DOT: packages, NUMA nodes, switches, GPUs, NICs and NVLinks.
std::string toDot(const NodeTopology& topo);

}  // namespace poolrun::topo
