#include <boost/program_options.hpp>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command_options.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/launcher/commands.hpp"
#include "poolrun/launcher/job_directory.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/open_pool.hpp"

namespace po = boost::program_options;

namespace poolrun::launcher {
namespace {

constexpr const char* kPlanUsage =
    "usage: poolrun plan (--cluster FILE | --from TOPOLOGY) -n N [--gpus-per-node K] [--fabric "
    "auto|ib|roce|tcp]\n"
    "                    [--gdr auto|on|off] [--roce-tc N] [-x VAR=VALUE]... [--json] [--out DIR]\n"
    "Shows which GPU, NIC(s), cores and environment every rank would get.\n";

constexpr const char* kPlanEnvironment =
    "\nenvironment:\n"
    "  POOLRUN_POOL       sim:CLUSTER_FILE: that cluster file when neither --cluster nor --from is given\n"
    "  POOLRUN_FIXTURES   where cluster files' shared/fixtures/ topologies are\n"
    "  CUDA_VISIBLE_DEVICES, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ... (the variables a plan sets)\n"
    "                     set: not used, the plan's are (poolrun says which); -x VAR=VALUE wins\n";

}  // namespace

int planCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CommandOptions command("poolrun plan options", {kPlanUsage, "", kPlanEnvironment});
  std::string clusterFile, from, fabric = "auto", gdr = "auto", outDir;
  int ranks = 0, gpusPerNode = 0, roceTc = -1;
  std::vector<std::string> exports;
  // clang-format off
  command.add()
      ("cluster", po::value(&clusterFile)->value_name("FILE"), "the cluster file (TOML)")
      ("from", po::value(&from)->value_name("TOPOLOGY"), "plan on the one node this topology file describes")
      (",n", po::value(&ranks)->value_name("N"), "the number of ranks, one per GPU (-np N is the same)")
      ("gpus-per-node", po::value(&gpusPerNode)->value_name("K"), "GPUs to use on each node (default: all)")
      ("fabric", po::value(&fabric)->value_name("FABRIC"), "auto (default), ib, roce or tcp")
      ("gdr", po::value(&gdr)->value_name("MODE"), "GPUDirect RDMA: auto (PXB or closer), on (also PHB), off")
      ("roce-tc", po::value(&roceTc)->value_name("N"), "RoCE traffic class (NCCL_IB_TC)")
      (",x", po::value(&exports)->value_name("VAR=VALUE"),
       "a variable the ranks get, over what the plan sets")
      ("json", "print the poolrun.plan/1 document")
      ("out", po::value(&outDir)->value_name("DIR"),
       "write the job directory (plan.json, rankfile, topo-NODE.xml)");
  // clang-format on
  // The ranges of `poolrun` itself (run_command.cpp), so that a plan and a run refuse the same.
  command.ranges({{"-n", pool::kGpusRange.min, pool::kGpusRange.max},
                  {"gpus-per-node", 0, pool::kGpusPerNodeRange.max},
                  {"roce-tc", 0, 255}});
  po::variables_map vm;
  if (std::optional<int> status = command.parse(args, vm, out, err)) return *status;
  // A simulated pool's cluster file is the cluster to plan on, as poolrun would run there.
  const char* poolUri = std::getenv("POOLRUN_POOL");
  if (clusterFile.empty() && from.empty() && poolUri != nullptr)
    clusterFile = pool::simClusterFile(poolUri).value_or("");
  if (clusterFile.empty() == from.empty())
    return command.usageError("give exactly one of --cluster FILE and --from TOPOLOGY", err);
  if (!vm.count("-n")) return command.usageError("-n N is required (the number of ranks)", err);
  try {
    PlanRequest request;
    request.ranks = ranks;
    request.gpus_per_node = gpusPerNode;
    if (fabric != "auto") request.fabric = topo::fabricFromString(fabric);
    request.gdr = gdrModeFromString(gdr);
    if (vm.count("roce-tc")) request.roce_tc = roceTc;
    // What the user sets with -x wins over the plan; the shell's values do not (as poolrun runs it).
    const auto shell = shellPlannedVariables(exports);
    for (const std::string& x : exports) {
      size_t eq = x.find('=');
      if (eq == std::string::npos || eq == 0) throw badInput("-x '" + x + "': expected VAR=VALUE");
      request.user_env[x.substr(0, eq)] = x.substr(eq + 1);
    }
    topo::Cluster cluster =
        clusterFile.empty() ? topo::singleNodeCluster(from) : topo::readClusterFile(clusterFile);
    JobPlan plan = planOnCluster(cluster, request);
    if (std::string note = ignoredShellVariablesNote(plan, shell); !note.empty())
      err << "poolrun: note: " << note << "\n";
    if (!outDir.empty()) JobDirectory(outDir, Durability::kSynced).writePlan(plan);
    if (vm.count("json")) {
      out << planToJson(plan).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      out << planTable(plan);
      if (!outDir.empty()) out << "\njob directory: " << outDir << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    return reportError(e, err);
  }
}

}  // namespace poolrun::launcher
