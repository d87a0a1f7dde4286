#pragma once

// Binding a rank to its cores and its memory to their NUMA node, and checking that the kernel did
// what was asked. The machine sits behind `Binder` (the kernel here, a fake in the tests), so that
// every rule below is testable on any machine.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/runtime/rank_info.hpp"
#include "poolrun/topo/cpuset.hpp"

namespace poolrun::runtime {

class Binder {
 public:
  virtual ~Binder() = default;
  // The CPUs this process may use on this machine (a cgroup or container may allow fewer than exist).
  virtual topo::CpuSet machineCpus() = 0;
  // NUMA nodes by operating-system index, with their CPUs.
  virtual std::vector<std::pair<int, topo::CpuSet>> numaNodes() = 0;
  // Binds every thread of the process. Throws poolrun::Error (kIo) with the system's reason.
  virtual void bindCpus(const topo::CpuSet& cpus) = 0;
  virtual topo::CpuSet boundCpus() = 0;
  // Binds the future allocations of the calling (single-threaded) process to `nodes` (OS indexes);
  // the binding survives exec. Throws poolrun::Error (kIo).
  virtual void bindMemory(const std::vector<int>& nodes) = 0;
  // The nodes of the process's memory binding; empty when it has none (the system default).
  virtual std::vector<int> boundMemory() = 0;
};

// This machine, through the kernel, as poolrun-rank binds every rank: the CPUs its cgroup allows
// (cpuset.cpus.effective of the nearest cgroup that has one), its NUMA nodes from sysfs (those
// with memory that the cgroup allows), and binding by sched_setaffinity and set_mempolicy, which
// apply to the calling thread, the threads it starts afterwards and the program it execs. (An
// hwloc topology load for this would cost each rank a millisecond or more, far more on large
// nodes.) `root` is where /proc and /sys are read from: "" for this machine, a captured tree in
// tests; binding itself always acts on this process.
std::unique_ptr<Binder> systemBinder(const std::string& root = "");

struct BindingRequest {
  topo::CpuSet cpus;  // OS indexes on this machine
  int numa = -1;      // the planned memory node (OS index); -1: the nodes local to `cpus`
};

struct BindingResult {
  topo::CpuSet cpus;        // what the kernel says the process is bound to now
  std::vector<int> memory;  // its memory nodes now; empty: no binding (one NUMA node, or refused)
  bool cpus_as_planned = false;
  bool memory_as_planned = false;
  std::vector<std::string> problems;  // each says what was asked, what happened, and what to do
};

// Binds and reads the binding back. A machine with one NUMA node gets no memory binding (there is
// nothing to choose) and counts as bound as planned. Never throws for a refusal: it is a problem in
// the result, since a rank that runs unbound is slower, not wrong.
BindingResult applyBinding(Binder& binder, const BindingRequest& request);

// What poolrun-rank binds to, from the rank's variables: POOLRUN_CPUSET and POOLRUN_NUMA (a real
// node), else the CPUs Open MPI's rankfile bound the process to (`current`; the simulated cluster,
// whose planned cores are a fixture's). nullopt where POOLRUN_BIND=off. Throws poolrun::Error
// (kBadInput) naming a malformed POOLRUN_CPUSET, POOLRUN_NUMA or POOLRUN_BIND.
std::optional<BindingRequest> bindingRequest(const Environment& env, const topo::CpuSet& current);

}  // namespace poolrun::runtime
