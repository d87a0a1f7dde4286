#pragma once

// The rank core's reads of /proc and /sys and its binding of this process, through the C library
// (musl, linked statically, in poolrun-rank; glibc elsewhere), still without allocating or throwing.

#include "binding.hpp"
#include "bits.hpp"
#include "text.hpp"

namespace poolrun::runtime::core {

// The file at `path`, NUL-terminated in `buffer`; an unset Text when it cannot be read or does not
// fit in `size` - 1 bytes (a cut list would name the wrong CPUs).
Text readFile(const char* path, char* buffer, size_t size);

// Appends the C library's words for `error` (an errno value).
void describe(Line& out, int error);

// The CPUs this thread may run on, as sched_getaffinity says.
CpuMask currentCpus();

// This machine: the CPUs its cgroup allows, its NUMA nodes from sysfs (those with memory that the
// cgroup allows), binding by system calls. Binding applies to the calling thread, the threads it
// starts afterwards and the program it execs: poolrun-rank has one thread.
class SystemBinder final : public Binder {
 public:
  // `root`: where /proc and /sys are read from ("" for this machine; a captured tree in tests).
  explicit SystemBinder(Text root = Text("")) : root_(root) {}

  CpuMask machineCpus() override;
  bool numaNode(unsigned i, unsigned& index, CpuMask& cpus) override;
  bool bindCpus(const CpuMask& cpus, Line& why) override;
  CpuMask boundCpus() override;
  bool bindMemory(const NodeMask& nodes, Line& why) override;
  NodeMask boundMemory() override;

 private:
  struct Cpuset {
    CpuMask cpus;
    NodeMask mems;
    bool has_cpus = false, has_mems = false, read = false;
  };
  const Cpuset& cpuset();

  Text root_;
  Cpuset cpuset_;
  NodeMask nodes_;
  bool read_ = false;
  bool numa_ = false;  // sysfs lists NUMA nodes
};

// One line per port of `ncclIbHca` (NCCL's syntax: "=mlx5_0:1,mlx5_1"; port 1 where none is named)
// that is not ACTIVE under SYSFS_ROOT/class/infiniband. An exclusion list ("^...") names none.
class ProblemSink {
 public:
  virtual void problem(Text line) = 0;

 protected:
  ~ProblemSink() = default;
};
unsigned downPorts(Text ncclIbHca, Text sysfsRoot, ProblemSink& sink);

}  // namespace poolrun::runtime::core
