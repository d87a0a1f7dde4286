// The launcher's Slurm parts: entering the allocation, the topology of allocated nodes, Slurm's GPU
// numbering, and the srun command line (see poolrun/launcher/slurm.hpp).

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "poolrun/common/error.hpp"
#include "poolrun/common/hash.hpp"
#include "poolrun/common/nesting.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/launcher/job_directory.hpp"
#include "poolrun/launcher/slurm.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/slurm.hpp"
#include "poolrun/topo/hostlist.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/writers.hpp"

extern char** environ;

namespace poolrun::launcher {
namespace {

using common::firstLine;

bool looksLikeClusterFile(const std::filesystem::path& file) {
  return file.extension() == ".toml";
}

// `srun` one task on each of `nodes` that prints its node name and its topology; the lines come
// back labelled with the task number (--label), whole (Slurm forwards lines of up to 1 KiB whole,
// and the topology JSON is indented).
std::map<std::string, std::string> probeNodes(pool::slurm::SlurmSystem& slurm,
                                              const std::vector<std::string>& nodes,
                                              const std::string& poolrun, std::ostream& err) {
  std::string n = std::to_string(nodes.size());
  std::string script =
      "printf '@poolrun-node %s\\n' \"$SLURMD_NODENAME\"; exec '" + poolrun + "' topo --format json";
  std::vector<std::string> argv = {"srun",
                                   "--nodelist=" + topo::compressHostlist(nodes),
                                   "--nodes=" + n,
                                   "--ntasks=" + n,
                                   "--ntasks-per-node=1",
                                   "--overlap",
                                   "--label",
                                   "--quiet",
                                   "/bin/sh",
                                   "-c",
                                   script};
  pool::slurm::SlurmSystem::Output o = slurm.run(argv);
  std::map<std::string, std::string> out = parseProbeOutput(o.out);
  if (o.status != 0) {
    err << "poolrun: warning: probing " << topo::compressHostlist(nodes) << " with srun ended with status "
        << o.status << ": " << firstLine(o.err) << "\n";
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> parseProbeOutput(const std::string& labelled) {
  std::map<int, std::string> byTask;
  std::map<int, std::string> nodeOf;
  size_t start = 0;
  while (start < labelled.size()) {
    size_t nl = labelled.find('\n', start);
    if (nl == std::string::npos) nl = labelled.size();
    std::string line = labelled.substr(start, nl - start);
    start = nl + 1;
    size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    std::string label = line.substr(0, colon);
    size_t first = label.find_first_not_of(' ');
    if (first == std::string::npos || label.find_first_not_of("0123456789", first) != std::string::npos)
      continue;
    int task = std::atoi(label.c_str() + first);
    std::string text = line.substr(colon + 2);
    if (text.starts_with("@poolrun-node ")) {
      nodeOf[task] = text.substr(14);
    } else {
      byTask[task] += text + "\n";
    }
  }
  std::map<std::string, std::string> out;
  for (const auto& [task, node] : nodeOf) out[node] = byTask[task];
  return out;
}

void enterAllocation(const pool::Lease& lease) {
  if (lease.env.empty()) return;
  std::vector<std::string> drop;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.starts_with("SLURM_") && kv.find('=') != std::string::npos)
      drop.push_back(kv.substr(0, kv.find('=')));
  }
  for (const std::string& k : drop) {
    if (k != "SLURM_CONF") unsetenv(k.c_str());
  }
  for (const auto& [k, v] : lease.env) setenv(k.c_str(), v.c_str(), 1);
}

void forgetSlurmGpuVariables(PlanRequest& request, const std::vector<std::string>& exports) {
  if (std::getenv("SLURM_JOB_ID") == nullptr && std::getenv("SLURM_JOBID") == nullptr) return;
  for (const char* var : {"CUDA_VISIBLE_DEVICES"}) {
    bool named = std::any_of(exports.begin(), exports.end(), [&](const std::string& x) {
      return x == var || x.starts_with(std::string(var) + "=");
    });
    if (!named) request.user_env.erase(var);
  }
}

std::vector<size_t> addSlurmGpus(topo::NodeTopology& topology, const std::vector<size_t>& allocated) {
  std::vector<size_t> added;
  if (allocated.empty()) return added;
  size_t top = *std::max_element(allocated.begin(), allocated.end());
  if (top > pool::kGpuIndexRange.max)
    throw Error(ErrorCode::kBadInput,
                "Slurm allocated GPU " + std::to_string(top) + ", beyond any node's GPUs (at most " +
                    std::to_string(pool::kGpuIndexRange.max + 1) + "); check the node's gres.conf");
  for (size_t i = topology.gpus.size(); i <= top; ++i) {
    topo::Gpu g;
    g.index = i;
    g.vendor = topo::kVendorNvidia;
    g.model = "GPU " + std::to_string(i) + " allocated by Slurm, not seen by the probe";
    topology.gpus.push_back(std::move(g));
    added.push_back(i);
  }
  return added;
}

std::vector<topo::ClusterNode> slurmNodes(const pool::Lease& lease, const SlurmTopologyOptions& options,
                                          std::ostream& err) {
  std::vector<std::string> names;
  std::map<std::string, std::vector<size_t>> gpus;
  for (const pool::GpuRef& g : lease.gpus) {
    if (names.empty() || names.back() != g.node) names.push_back(g.node);
    gpus[g.node].push_back(g.index);
  }
  std::map<std::string, topo::ClusterNode> known;
  // --topology: one file for every node, or a cluster file for the nodes it names.
  if (!options.topology_file.empty()) {
    std::filesystem::path file = options.topology_file;
    if (!std::filesystem::exists(file))
      throw Error(ErrorCode::kNotFound, "--topology " + file.string() +
                                            ": no such file (a topology file or a cluster file, e.g. "
                                            "topologies/*.xml or clusters/*.toml)");
    if (looksLikeClusterFile(file)) {
      topo::Cluster cluster = topo::readClusterFile(file);
      for (const std::string& n : names) {
        if (const topo::ClusterNode* c = cluster.node(n)) known[n] = *c;
      }
    } else {
      auto t = std::make_shared<topo::NodeTopology>(topo::readTopologyFile(file));
      for (const std::string& n : names) {
        topo::ClusterNode c;
        c.name = n;
        c.topology = t;
        c.topology_file = file;
        known[n] = c;
      }
    }
  }
  std::string poolrun = options.poolrun_binary;
  if (poolrun.empty()) {
    std::error_code ec;
    poolrun = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) poolrun = "poolrun";
  }
  // The cache: a probed topology per node and hardware (as slurmd reports it to Slurm).
  std::unique_ptr<pool::slurm::SlurmSystem> slurm = pool::slurm::realSlurmSystem();
  std::vector<std::string> toProbe;
  for (const std::string& n : names) {
    if (!known.count(n)) toProbe.push_back(n);
  }
  std::map<std::string, std::filesystem::path> cacheFile;
  std::map<std::string, int> nodeCpus;
  if (!toProbe.empty()) {
    pool::slurm::SlurmSystem::Output o =
        slurm->run({"scontrol", "show", "node", "-o", topo::compressHostlist(toProbe)});
    std::map<std::string, std::string> hardware;
    if (o.status == 0) {
      hardware = pool::slurm::parseNodeHardware(o.out);
      nodeCpus = pool::slurm::parseNodeCpus(o.out);
    }
    // A job with part of a node's CPUs is probed within its own CPUs (what hwloc sees in the
    // step), so that ranks are bound inside them; that view is cached under the node's hardware
    // and those CPUs (CPU_IDs), which every later job given the same CPUs sees alike.
    std::map<std::string, int> jobCpus;
    std::map<std::string, std::string> jobCpuIds;
    std::string job = pool::slurm::jobOfLease(lease.id);
    pool::slurm::SlurmSystem::Output jo = slurm->run({"scontrol", "show", "job", "-d", job});
    if (jo.status == 0) {
      try {
        pool::slurm::JobDetail detail = pool::slurm::parseJobDetail(jo.out);
        jobCpus = detail.cpus;
        jobCpuIds = detail.cpu_ids;
      } catch (const Error&) {  // no CPU counts: treat every node as whole
      }
    }
    // A cache others could write would hand poolrun their topology: used only where it is the user's.
    bool cached = true;
    try {
      makeOwnDirectory(options.cache_dir, "topology cache");
    } catch (const Error& e) {
      err << "poolrun: warning: not using the topology cache: " << e.what() << "\n";
      cached = false;
    }
    std::vector<std::string> missing;
    std::set<std::string> partial;
    for (const std::string& n : toProbe) {
      bool whole = !jobCpus.count(n) || !nodeCpus.count(n) || jobCpus[n] <= 0 || jobCpus[n] >= nodeCpus[n];
      if (!whole) partial.insert(n);
      auto hw = hardware.find(n);
      // Part of a node: cached only where Slurm names the CPUs (without them, no key tells views apart).
      if (cached && hw != hardware.end() && (whole || !jobCpuIds[n].empty())) {
        std::string key = whole ? hw->second : hw->second + " CPU_IDs=" + jobCpuIds[n];
        cacheFile[n] = options.cache_dir / (n + "-" + common::fnv1aHex(key).substr(0, 12) + ".json");
        if (std::filesystem::exists(cacheFile[n])) {
          try {
            topo::ClusterNode c;
            c.name = n;
            c.topology = std::make_shared<topo::NodeTopology>(topo::readTopologyFile(cacheFile[n]));
            c.topology_file = cacheFile[n];
            known[n] = c;
            continue;
          } catch (const std::exception& e) {
            err << "poolrun: warning: cached topology " << cacheFile[n].string() << " is unreadable ("
                << e.what() << "); probing " << n << " again\n";
          }
        }
      }
      if (!whole) {
        err << "poolrun: note: node " << n << ": the job holds " << jobCpus[n] << " of its " << nodeCpus[n]
            << " CPUs; probing it within them, so that ranks are bound to the job's CPUs\n";
      }
      missing.push_back(n);
    }
    if (!missing.empty()) {
      err << "poolrun: probing the topology of " << topo::compressHostlist(missing)
          << " with srun (one task per node; kept in " << options.cache_dir.string() << ")\n";
      std::map<std::string, std::string> probed = probeNodes(*slurm, missing, poolrun, err);
      for (const std::string& n : missing) {
        auto p = probed.find(n);
        if (p == probed.end())
          throw Error(ErrorCode::kUnsupported, "could not probe the topology of node " + n +
                                                   " (srun ran no probe there; is " + poolrun +
                                                   " installed at that path on the node?); give its topology "
                                                   "with --topology FILE");
        topo::NodeTopology t;
        try {
          if (common::jsonTooDeepAt(p->second, common::kMaxJsonDepth))
            throw badInput("its output nests deeper than " + std::to_string(common::kMaxJsonDepth) +
                           " levels");
          t = topo::fromJson(nlohmann::json::parse(p->second), "slurm-probe:" + n);
        } catch (const std::exception& e) {
          throw Error(ErrorCode::kUnsupported, "the probe of node " + n + " returned no topology (" +
                                                   std::string(e.what()).substr(0, 200) +
                                                   "); give its topology with --topology FILE");
        }
        // A whole node's probe that saw fewer CPUs than the node has (the step was confined) is
        // not the node's view; a part's is the view of those CPUs, whatever it counts.
        bool complete =
            partial.count(n) || !nodeCpus.count(n) || t.allCpus().size() >= static_cast<size_t>(nodeCpus[n]);
        if (cacheFile.count(n) && complete) {
          try {  // a cache: where it cannot be written, the node is probed again next time
            writeFileAtomically(cacheFile[n], p->second, std::nullopt, Durability::kSameBoot);
          } catch (const Error& e) {
            err << "poolrun: warning: " << e.what() << "\n";
          }
        }
        topo::ClusterNode c;
        c.name = n;
        c.topology = std::make_shared<topo::NodeTopology>(std::move(t));
        known[n] = c;
      }
    }
  }
  // Slurm's GPUs the topology does not show: trusted, bound as far as they can be.
  std::vector<topo::ClusterNode> out;
  for (const std::string& n : names) {
    topo::ClusterNode c = known[n];
    c.name = n;
    auto copy = std::make_shared<topo::NodeTopology>(*c.topology);
    size_t seen = copy->gpus.size();
    std::vector<size_t> added = addSlurmGpus(*copy, gpus[n]);
    if (!added.empty()) {
      std::vector<size_t> unseen;
      for (size_t g : gpus[n]) {
        if (g >= seen) unseen.push_back(g);
      }
      std::string list;
      for (size_t g : unseen) list += (list.empty() ? "" : ",") + std::to_string(g);
      bool given = !c.topology_file.empty() && c.topology_file.parent_path() != options.cache_dir;
      err << "poolrun: warning: node " << n << ": Slurm allocated GPU(s) " << list << " but its topology ("
          << (given ? c.topology_file.string() : std::string("probed on the node")) << ") shows " << seen
          << " GPU(s). Trusting Slurm: those ranks get their GPU by Slurm's index (CUDA_VISIBLE_DEVICES), "
             "cores from the whole node and the node's NICs without GPU locality; not bound: GPU-to-NIC "
             "and GPU-to-core locality, GPUDirect RDMA. Give the node's topology with --topology FILE to "
             "bind them by locality.\n";
    }
    c.topology = copy;
    out.push_back(std::move(c));
  }
  return out;
}

void renumberForConstrainedDevices(JobPlan& plan,
                                   const std::vector<std::pair<std::string, std::vector<size_t>>>& jobGpus) {
  std::map<std::string, std::vector<size_t>> byNode(jobGpus.begin(), jobGpus.end());
  for (RankPlan& r : plan.ranks) {
    if (r.user_won.count("CUDA_VISIBLE_DEVICES")) continue;
    const std::vector<size_t>& gpus = byNode[plan.nodeOf(r).name];
    auto it = std::find(gpus.begin(), gpus.end(), r.gpu);
    if (it == gpus.end()) continue;
    std::string local = std::to_string(it - gpus.begin());
    for (auto& [k, v] : r.env) {
      if (k == "CUDA_VISIBLE_DEVICES") v = local;
    }
  }
}

void applySlurmGpuNumbering(JobPlan& plan, const pool::Lease& lease, std::ostream& err) {
  std::unique_ptr<pool::slurm::SlurmSystem> slurm = pool::slurm::realSlurmSystem();
  pool::slurm::SlurmSystem::Output config = slurm->run({"scontrol", "show", "config"});
  if (config.status != 0 || !pool::slurm::parseConstrainDevices(config.out)) return;
  std::string job = pool::slurm::jobOfLease(lease.id);
  pool::slurm::SlurmSystem::Output o = slurm->run({"scontrol", "show", "job", "-d", job});
  if (o.status != 0) {
    err << "poolrun: warning: ConstrainDevices is on but `scontrol show job -d " << job
        << "` failed; CUDA_VISIBLE_DEVICES keeps Slurm's global indexes\n";
    return;
  }
  renumberForConstrainedDevices(plan, pool::slurm::parseJobDetail(o.out).nodes);
  err << "poolrun: note: ConstrainDevices is on: each rank's CUDA_VISIBLE_DEVICES counts from 0 among its "
         "node's GPUs of the job\n";
}

MpiCommand buildSrunCommand(const LaunchSpec& spec, const std::string& srun) {
  const JobPlan& plan = *spec.plan;
  MpiCommand cmd;
  // One line per rank, in rank order: where srun puts it.
  for (const RankPlan& r : plan.ranks) cmd.hostfile += plan.nodeOf(r).name + "\n";
  auto& a = cmd.argv;
  a = {srun,
       "--ntasks=" + std::to_string(plan.ranks.size()),
       "--nodes=" + std::to_string(plan.nodes.size()),
       "--distribution=arbitrary",  // the nodes come from SLURM_HOSTFILE, one line per rank
       "--cpu-bind=none",           // the rank wrapper binds each rank to its planned cores
       "--kill-on-bad-exit=1"};
  const char* mpiType = std::getenv("SLURM_MPI_TYPE");
  if (mpiType == nullptr || *mpiType == '\0') a.push_back("--mpi=pmix");
  cmd.env.emplace_back("SLURM_HOSTFILE", (spec.job_dir / "hostfile").string());
  for (const auto& [name, value] : spec.job_env) cmd.env.emplace_back(name, value);
  for (const std::string& x : spec.user_exports) {
    size_t eq = x.find('=');
    if (eq != std::string::npos) cmd.env.emplace_back(x.substr(0, eq), x.substr(eq + 1));
  }
  for (const auto& [k, v] : spec.user_mca) cmd.env.emplace_back("OMPI_MCA_" + k, v);
  if (plan.fabric != topo::Fabric::kTcp && std::none_of(spec.user_mca.begin(), spec.user_mca.end(),
                                                        [](const auto& kv) { return kv.first == "pml"; }))
    cmd.env.emplace_back("OMPI_MCA_pml", "ucx");
  a.push_back("--export=ALL");
  a.push_back(spec.rank_wrapper);
  a.insert(a.end(), spec.program.begin(), spec.program.end());
  return cmd;
}

doctor::Report doctorOnAllocation(pool::slurm::SlurmSystem& slurm, const std::string& poolrun,
                                  const std::vector<std::string>& doctor_args, std::ostream& err) {
  std::optional<std::string> job = slurm.env("SLURM_JOB_ID");
  std::optional<std::string> nodelist = slurm.env("SLURM_JOB_NODELIST");
  if (!job || !nodelist)
    throw badInput(
        "poolrun doctor --slurm checks the nodes of a Slurm allocation, but SLURM_JOB_ID is not set: run it "
        "in an "
        "allocation (salloc -N NODES poolrun doctor --slurm, or inside an sbatch script)");
  std::vector<std::string> nodes = topo::expandHostlist(*nodelist);
  std::string n = std::to_string(nodes.size());
  std::string command = "'" + poolrun + "' doctor --json";
  for (const std::string& a : doctor_args) command += " '" + a + "'";
  std::string script = "printf '@poolrun-node %s\\n' \"$SLURMD_NODENAME\"; exec " + command;
  err << "poolrun: running the doctor on " << *nodelist << " (job " << *job << ", one task per node)\n";
  pool::slurm::SlurmSystem::Output o =
      slurm.run({"srun", "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1", "--overlap", "--label",
                 "--quiet", "/bin/sh", "-c", script});
  std::map<std::string, std::string> reports = parseProbeOutput(o.out);
  doctor::Report all;
  for (const std::string& node : nodes) {
    auto it = reports.find(node);
    doctor::Report one;
    if (it == reports.end()) {
      one.add(
          {"doctor", doctor::Status::kFail, node,
           "no report from this node (srun status " + std::to_string(o.status) + ": " + firstLine(o.err) +
               ")",
           "check that " + poolrun + " exists at that path on the node and that srun can start tasks there",
           ""});
    } else {
      try {
        one = doctor::reportFromJson(it->second);
      } catch (const std::exception& e) {
        one.add({"doctor", doctor::Status::kFail, node, std::string("unreadable report: ") + e.what(),
                 "run poolrun doctor on the node by hand to see what it prints", ""});
      }
    }
    for (doctor::Check& c : one.checks) c.node = node;
    all.append(one);
  }
  return all;
}

}  // namespace poolrun::launcher
