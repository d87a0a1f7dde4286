#pragma once

// What the launcher adds when the pool is Slurm (`--pool slurm`, `--pool slurm:PARTITION`):
// entering the allocation, the topology of every allocated node (a --topology file, the cache in
// the state directory, or a probe on the node itself: one task per node), Slurm's GPU numbering,
// and `--launcher srun`.

#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "poolrun/doctor/report.hpp"
#include "poolrun/launcher/mpi.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/slurm.hpp"
#include "poolrun/topo/cluster.hpp"

namespace poolrun::launcher {

// Makes this process (and so mpirun or srun) run inside the lease's allocation: where poolrun made
// the allocation, every SLURM_* variable of the environment is replaced by the allocation's.
void enterAllocation(const pool::Lease& lease);

// Inside a Slurm job, CUDA_VISIBLE_DEVICES in poolrun's environment is Slurm's (set for the batch
// step or a step), not the user's choice: it must not override the plan. It counts as the user's
// only when named with -x.
void forgetSlurmGpuVariables(PlanRequest& request, const std::vector<std::string>& exports);

struct SlurmTopologyOptions {
  // --topology FILE: a topology file (hwloc XML, NCCL XML, topology JSON) for every allocated node,
  // or a cluster file (TOML) for the nodes it names; other nodes are probed. Empty: probe all.
  std::string topology_file;
  std::filesystem::path cache_dir;  // probed topologies, per node and hardware
  std::string poolrun_binary;       // what each node runs to probe itself; empty: this binary
};

// The allocated nodes of `lease` in its order, each with its topology. A node that can neither be
// probed nor found in --topology is an error naming it. Where a topology shows fewer GPUs than
// Slurm allocated, the missing ones are added (addSlurmGpus) and `err` says what is not bound.
std::vector<topo::ClusterNode> slurmNodes(const pool::Lease& lease, const SlurmTopologyOptions& options,
                                          std::ostream& err);

// The output of the probe step (`srun --label`, each task printing "@poolrun-node NAME" and then its
// topology JSON): node name -> its JSON text. Lines of different tasks may interleave.
std::map<std::string, std::string> parseProbeOutput(const std::string& labelled);

// Adds GPUs numbered from the topology's GPU count up to the largest of `allocated` (Slurm's
// indexes on the node), with nothing known but their index: no PCI address, no NUMA node, no NIC
// path. Returns the indexes added.
std::vector<size_t> addSlurmGpus(topo::NodeTopology& topology, const std::vector<size_t>& allocated);

// With ConstrainDevices (cgroup.conf) a step sees only its node's GPUs of the job, renumbered from
// 0 in index order: CUDA_VISIBLE_DEVICES becomes the GPU's position in `jobGpus` of its node
// (unless the user set it). `jobGpus`: per node, the job's GPU indexes there.
void renumberForConstrainedDevices(JobPlan& plan,
                                   const std::vector<std::pair<std::string, std::vector<size_t>>>& jobGpus);

// Asks Slurm (scontrol) whether devices are constrained and, if so, renumbers (above). Notes go to `err`.
void applySlurmGpuNumbering(JobPlan& plan, const pool::Lease& lease, std::ostream& err);

// `--launcher srun`: the srun command that starts every rank where the plan puts it
// (--distribution=arbitrary with SLURM_HOSTFILE), through the rank wrapper, which applies the
// rank's plan (SLURM_PROCID is its rank). -x VAR=VALUE and --mca KEY VALUE become environment
// variables (OMPI_MCA_KEY). The hostfile text is written to the job directory by the caller.
MpiCommand buildSrunCommand(const LaunchSpec& spec, const std::string& srun = "srun");

// `poolrun doctor --slurm`: runs `POOLRUN doctor --json DOCTOR_ARGS...` on every node of the
// allocation this process is in (one srun task per node) and gathers one report, each check naming
// its node. A node that gives no report is a FAIL saying so. Throws poolrun::Error (kBadInput)
// outside an allocation.
doctor::Report doctorOnAllocation(pool::slurm::SlurmSystem& slurm, const std::string& poolrun,
                                  const std::vector<std::string>& doctor_args, std::ostream& err);

}  // namespace poolrun::launcher
