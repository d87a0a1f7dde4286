#pragma once

// Opening a pool by its URI, whichever kind it is (client.hpp lists them): the embedded pools
// (local, sim:FILE) here, the HTTP and Slurm clients through their layer.

#include <memory>
#include <optional>
#include <string>

#include "poolrun/pool/client.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/topo/cluster.hpp"

namespace poolrun::pool {

// Opens a pool by URI. Throws poolrun::Error (kBadInput) naming the URI when it is malformed. The
// `local` pool opens on any machine (so that status and leases work); acquiring from it on a
// machine without GPUs throws PoolError kNeverFits "no GPUs on this node; use --pool sim:FILE".
std::unique_ptr<PoolClient> openPool(const std::string& uri, const ClientOptions& options = {});

// openPool() with the inventory and administration interface.
std::unique_ptr<PoolControl> openPoolControl(const std::string& uri, const ClientOptions& options = {});

// The state directory: options.state_dir, else $POOLRUN_STATE_DIR, else $XDG_STATE_HOME/poolrun,
// else ~/.local/state/poolrun. Created when missing.
std::string stateDirectory(const ClientOptions& options);

// The cluster file of a `sim:FILE` URI (FILE, possibly empty); nullopt for the other kinds.
std::optional<std::string> simClusterFile(const std::string& uri);

// This node as the pool knows it: probed (topo::probeLive) and named by the topology's host name,
// else gethostname's. What the `local` pool holds and `poolctl register` adds without --cluster.
topo::ClusterNode thisNode();

}  // namespace poolrun::pool
