#pragma once

#include <hwloc.h>

#include <string>

#include "poolrun/topo/topology.hpp"

namespace poolrun::topo::detail {

NodeTopology convertHwloc(hwloc_topology_t topo, const std::string& source);
NodeTopology probeHwlocLive();

}  // namespace poolrun::topo::detail
