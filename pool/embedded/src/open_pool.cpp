// openPool: a pool by its URI (local, sim:FILE, http://, https://, slurm).

#include "poolrun/pool/open_pool.hpp"

#include "embedded.hpp"
#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/slurm.hpp"

namespace poolrun::pool {
namespace {

Error badUri(const std::string& uri, const std::string& why) {
  return badInput("bad pool URI '" + uri + "': " + why +
                  " (use local, sim:FILE, http://HOST:PORT, https://HOST:PORT, slurm or slurm:PARTITION)");
}
}  // namespace

std::unique_ptr<PoolControl> openPoolControl(const std::string& uri, const ClientOptions& options) {
  if (uri == "slurm" || uri.starts_with("slurm:"))
    throw badInput(
        "pool URI '" + uri +
        "': Slurm keeps its own queue and nodes, poolctl does not administer them; use squeue, sinfo "
        "and scontrol");
  if (uri.empty() || uri == "local") return openEmbeddedLocal(options);
  if (std::optional<std::string> file = simClusterFile(uri)) {
    if (file->empty()) throw badUri(uri, "no cluster file after 'sim:'");
    return openEmbeddedSim(*file, options);
  }
  if (isPooldUri(uri)) return openHttpPool(uri, parseHttpReplicas(uri), options);
  throw badUri(uri, "unknown kind");
}

std::optional<std::string> simClusterFile(const std::string& uri) {
  if (!uri.starts_with("sim:")) return std::nullopt;
  return uri.substr(4);
}

std::unique_ptr<PoolClient> openPool(const std::string& uri, const ClientOptions& options) {
  if (uri == "slurm" || uri.starts_with("slurm:")) return slurm::openSlurmPool(uri, slurm::realSlurmSystem());
  return openPoolControl(uri, options);
}

}  // namespace poolrun::pool
