#pragma once

// `poolrun doctor`: checks a node before it is trusted with a job, for what makes NCCL jobs hang
// or run slow without an error: RDMA ports that are down or trained slow, locked-memory limits,
// missing verbs devices, RoCE GIDs that do not route, MTUs, GPUDirect RDMA off, PCIe ACS
// redirecting peer-to-peer traffic, IOMMU translation, host settings and GPU health.
//
// Every check reads /sys, /proc and /dev under roots that tests replace, runs tools (ompi_info,
// ucx_info) through a ToolRunner and asks GPUs through a GpuQuery, so that each verdict is
// testable on a machine without GPUs or NICs.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/doctor/report.hpp"
#include "poolrun/topo/topology.hpp"

namespace poolrun::doctor {

struct Roots {
  std::filesystem::path sys = "/sys";
  std::filesystem::path proc = "/proc";
  std::filesystem::path dev = "/dev";
};

// A NIC port a plan uses, and the GID index NCCL will use on it (RoCE; the user's
// NCCL_IB_GID_INDEX where set, else what the plan chose; nullopt: NCCL picks).
struct PlannedPort {
  std::string nic;
  int port = 1;
  std::optional<int> gid_index;
};

// A GPU and the NIC it will reach by GPUDirect RDMA.
struct GdrPair {
  topo::PciAddress gpu;
  std::string nic;
};

// What to check. The whole node (`poolrun doctor`), or only what a plan uses (the launcher).
struct Scope {
  bool planned = false;
  std::vector<PlannedPort> ports;  // planned: these ports; else every RDMA port of the node
  std::vector<GdrPair> gdr;        // planned: these pairs; else every GPU with every NIC
  int jumbo_mtu = 9000;            // the netdev MTU a RoCE fabric expects
};

// One GPU's health as NVML reports it; nullopt where the GPU or the driver does not say.
struct GpuHealth {
  int index = 0;
  std::string pci;  // "0000:18:00.0"
  std::optional<bool> persistence;
  std::optional<uint64_t> ecc_uncorrected;  // volatile (since the driver loaded)
  std::optional<bool> retired_pages_pending;
  std::optional<bool> row_remap_pending;
  std::optional<bool> row_remap_failed;
  std::optional<uint64_t> clock_event_reasons;  // NVML's clocks event (throttle) reason bits
  int nvlinks_up = 0;
  int nvlinks_down = 0;  // links that exist and are not active
  // Multi-Instance GPU, where the GPU has it: the mode now and after the next GPU reset, and the
  // MIG devices NVML lists in MIG mode.
  std::optional<bool> mig_enabled;
  std::optional<bool> mig_pending;
  int mig_instances = 0;
  // Whether CUDA opens each of those MIG devices (poolrun-cuda-probe): per UUID, "" where it does,
  // else what CUDA said. Empty with `mig_cuda_skipped` saying why where CUDA could not be asked.
  std::map<std::string, std::string> mig_cuda;
  std::string mig_cuda_skipped;
};

class GpuQuery {
 public:
  virtual ~GpuQuery() = default;
  // Every GPU's health, or nullopt with `why` where no GPU can be asked (no driver, no NVML).
  virtual std::optional<std::vector<GpuHealth>> health(std::string& why) = 0;
};
// NVML through dlopen; absent NVML is a reason, not an error. The MIG devices NVML lists are put to
// CUDA by `cudaProbe` (poolrun-cuda-probe: the path, or a name found on PATH).
std::unique_ptr<GpuQuery> nvmlGpuQuery(std::string cudaProbe = "poolrun-cuda-probe");

class ToolRunner {
 public:
  virtual ~ToolRunner() = default;
  // The standard output of `argv`, or nullopt where it cannot be run or fails.
  virtual std::optional<std::string> run(const std::vector<std::string>& argv) = 0;
};
// Runs tools as child processes, found through PATH.
std::unique_ptr<ToolRunner> processToolRunner();

struct NodeSources {
  Roots roots;
  GpuQuery* gpus = nullptr;     // nullptr: no GPU health checks
  ToolRunner* tools = nullptr;  // nullptr: no Open MPI / UCX checks
  bool host = true;             // NUMA balancing, CPU governor, THP, hwloc
};

// Checks a node through its /sys, /proc and /dev (the real ones or a test's tree). Never throws
// for what it reads: unreadable files become WARN or SKIP with the reason.
Report checkNode(const NodeSources& sources, const Scope& scope);

// Judges a node from its topology alone (a simulated node's fixture, a pool's inventory): the port
// states, rates and RoCE GIDs it records. What the topology does not record is not judged.
Report checkTopology(const topo::NodeTopology& topology, const Scope& scope);

}  // namespace poolrun::doctor
