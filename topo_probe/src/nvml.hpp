#pragma once

// NVML opened with dlopen, so that poolrun starts on machines without the NVIDIA driver. Only the
// few calls the prober needs: identity, memory and NVLink peers of each GPU.

#include <optional>
#include <string>
#include <vector>

#include "poolrun/topo/nvml_session.hpp"
#include "poolrun/topo/topology.hpp"

namespace poolrun::topo::detail {

struct NvmlLink {
  PciAddress remote;
  bool remote_is_gpu = false;  // else an NVSwitch (or the CPU on POWER)
};

struct NvmlGpu {
  PciAddress pci;
  std::string name;
  std::string uuid;
  uint64_t memory_bytes = 0;
  int sm = 0;
  std::vector<NvmlLink> links;  // active links only
  MigState mig;
};

// The GPUs NVML sees, or std::nullopt where NVML is absent or fails to initialise (`why` says).
std::optional<std::vector<NvmlGpu>> queryNvml(std::string& why);

// A GPU's MIG mode, profiles and compute instances as NVML reports them now (capable false where
// NVML does not answer the mode: not a MIG GPU).
MigState queryMig(const nvml::Session& session, nvml::Device dev);

// Makes GPU `dev`'s MIG layout `profiles` (GPU instance profile names, "3g.40gb", in order), each a
// GPU instance with one compute instance spanning it: turns MIG mode on where it is off, checks
// every name against the profiles the GPU offers, destroys the instances it has, creates the new
// ones. "" when done; else what failed and what to do (no privilege, a reset pending, a process on
// the GPU, a layout that does not fit), the GPU possibly part way (the caller fails it).
std::string applyMigLayout(const nvml::Session& session, nvml::Device dev,
                           const std::vector<std::string>& profiles);

// Adds what NVML knows (UUID, memory, model, NVLink peers, NVSwitch links, MIG) to the GPUs of
// `topo`.
void mergeNvml(NodeTopology& topo, const std::vector<NvmlGpu>& gpus);

}  // namespace poolrun::topo::detail
