#pragma once

// Cluster files: several machines described in TOML, one [[group]] per set of identical nodes.
// The planner, the pool's static inventory and the simulated cluster all read them.
//
//   [[group]]
//   nodes = "dgx[01-02]"          # Slurm hostlist syntax
//   topology = "dgx-h100.xml"     # relative to this file: hwloc XML, NCCL topology XML or topology JSON
//   nvlink_domain = "rack1"       # optional: the multi-node NVLink domain (an NVL72 rack)
//   block = "b1"                  # optional: Slurm's topology/block unit
//   switch = "leaf1"              # optional: leaf switch
//   rail_group = "a"              # optional: nodes whose rail k NICs share rail k's leaf
//   spine = "spine1"              # optional
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

// Where a node sits above itself (docs/placement.md), each level a name, empty where the level is
// absent or unknown. Placement keeps a job inside as few and as low levels as it can: one NVLink
// domain, one block, one leaf (or rail group), one spine.
struct NodeLevels {
  std::string nvlink_domain;  // nodes whose GPUs share NVSwitches (multi-node NVLink: an NVL72 rack)
  std::string block;          // Slurm's topology/block: nodes its administrator wants placed together
  std::string switch_name;    // the leaf switch ("switch" in files and JSON)
  std::string rail_group;     // rail-optimised fabrics: nodes whose rail k NICs share rail k's leaf
  std::string spine;          // the spine above the leaves
  bool operator==(const NodeLevels&) const = default;
};

// Each level's name in cluster files, JSON and the state file, lowest first.
struct LevelField {
  const char* key;
  std::string NodeLevels::*member;
};
inline constexpr LevelField kLevelFields[] = {{"nvlink_domain", &NodeLevels::nvlink_domain},
                                              {"block", &NodeLevels::block},
                                              {"switch", &NodeLevels::switch_name},
                                              {"rail_group", &NodeLevels::rail_group},
                                              {"spine", &NodeLevels::spine}};

// The most GPUs one NVLink domain joins: NVLink 5's switch system connects at most 576 GPUs
// (NVIDIA's GB200 NVL72 and NVLink Switch pages). A larger domain in a file is a mistake.
inline constexpr size_t kMaxNvlinkDomainGpus = 576;

// Where two nodes of one NVLink domain disagree on the levels above it (its nodes share one block
// and one spine): what is wrong, naming both; empty where they agree.
std::string domainConflict(const std::string& node, const NodeLevels& levels, const std::string& other,
                           const NodeLevels& otherLevels);

struct ClusterNode {
  std::string name;
  std::shared_ptr<const NodeTopology> topology;  // shared by the nodes of one group
  std::filesystem::path topology_file;
  NodeLevels levels;
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
