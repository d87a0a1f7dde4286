#pragma once

// Synthetic NodeTopology values for planner tests: a regular machine described by a few numbers.
// Switches are spread evenly over NUMA nodes, GPUs and NICs evenly over switches (in blocks),
// every NUMA node has `cores_per_numa` cores with `threads` hardware threads each
// (thread t of core c is CPU t * total_cores + c, as Linux numbers SMT siblings).

#include <optional>
#include <set>

#include "poolrun/topo/topology.hpp"

namespace poolrun::test {

struct SyntheticSpec {
  int numa = 2;
  int cores_per_numa = 16;
  int threads = 2;
  int switches = 4;
  int gpus = 8;
  int nics = 8;
  topo::LinkLayer layer = topo::LinkLayer::kInfiniBand;
  double rate_gbps = 400;
  std::optional<int> gid_index;       // RoCE v2 GID index of every Ethernet port
  std::set<int> down_nics;            // NIC indexes whose port is down
  std::set<int> ethernet_nics;        // NIC indexes with an Ethernet port whatever `layer` says
  int nvswitch_links = 18;            // 0: PCIe only
  std::optional<int> nics_on_switch;  // put every NIC on this switch instead of spreading them
};

topo::NodeTopology synthetic(const SyntheticSpec& spec);

// A GPU's MIG state for tests: `enabled` now, `pending` after the next reset, no profiles or
// instances yet.
topo::MigState migState(bool enabled, bool pending);
// One MIG device: GPU instance `gi`, compute instance `ci`, of `profile` (`profile_id`), `slices`,
// `sm` SMs and `memory_mib` MiB, named `uuid`.
topo::MigInstance migInstance(int gi, int ci, const std::string& profile, unsigned profile_id, int slices,
                              int sm, uint64_t memory_mib, const std::string& uuid);

}  // namespace poolrun::test
