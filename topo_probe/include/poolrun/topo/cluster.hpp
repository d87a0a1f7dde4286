#pragma once

// Cluster files: several machines described in TOML, one [[group]] per set of identical nodes.
// The planner, the pool's static inventory and the simulated cluster all read them.
//
//   [[group]]
//   nodes = "dgx[01-02]"          # Slurm hostlist syntax
//   topology = "dgx-h100.xml"     # relative to this file: hwloc XML, NCCL topology XML or topology JSON
//   switch = "leaf1"              # optional: leaf switch
//   rail_group = "a"              # optional
//   fabric = "ib"                 # optional: ib | roce | tcp, for topology files that do not say
//   labels = { rack = "r1" }      # optional
//
// A topology path under "shared/fixtures/" is looked up in $POOLRUN_FIXTURES instead when that
// variable is set, so that shipped cluster files find the fixtures wherever they are.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/topo/fabric.hpp"
#include "poolrun/topo/topology.hpp"

namespace poolrun::topo {

struct ClusterNode {
  std::string name;
  std::shared_ptr<const NodeTopology> topology;  // shared by the nodes of one group
  std::filesystem::path topology_file;
  std::string switch_name;  // leaf switch, empty where unknown
  std::string rail_group;
  std::optional<Fabric> fabric;
  std::map<std::string, std::string> labels;
};

struct Cluster {
  std::filesystem::path file;
  std::vector<ClusterNode> nodes;  // in file order
  const ClusterNode* node(const std::string& name) const;
};

// Reads a cluster file and every topology it names (each file once). Throws poolrun::Error with
// "FILE: what" on a malformed file, an unknown key, a duplicate node, or a topology file that is
// missing or bad.
Cluster readClusterFile(const std::filesystem::path& file);
Cluster readClusterString(const std::string& toml, const std::filesystem::path& file);

// A one-node cluster around a topology file (`poolrun plan --from FILE`).
Cluster singleNodeCluster(const std::filesystem::path& topologyFile);

}  // namespace poolrun::topo
