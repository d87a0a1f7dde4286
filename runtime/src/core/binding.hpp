#pragma once

// Binding a rank to its cores and its memory to their NUMA node, without a C library
// (poolrun/runtime/binding.hpp has the rules and the C++ interface).

#include "bits.hpp"
#include "text.hpp"

namespace poolrun::runtime::core {

// The machine: the kernel (system.hpp), an adapter of the C++ interface, or a fake in the tests.
class Binder {
 public:
  virtual CpuMask machineCpus() = 0;
  // The `i`-th NUMA node (its OS index and CPUs); false past the last.
  virtual bool numaNode(unsigned i, unsigned& index, CpuMask& cpus) = 0;
  // False with the system's reason in `why`.
  virtual bool bindCpus(const CpuMask& cpus, Line& why) = 0;
  virtual CpuMask boundCpus() = 0;
  virtual bool bindMemory(const NodeMask& nodes, Line& why) = 0;
  // Empty where the process has no memory binding.
  virtual NodeMask boundMemory() = 0;

 protected:
  ~Binder() = default;
};

struct BindingRequest {
  CpuMask cpus;
  unsigned beyond = 0;  // planned CPUs past what a Linux kernel can have (counted, not in `cpus`)
  Text list;            // the plan's cpulist as written, for messages; unset: `cpus`'s
  int numa = -1;        // -1: the nodes local to `cpus`
};

struct Problems {
  static constexpr unsigned kMax = 6;  // applyBinding() finds at most this many
  Line items[kMax];
  unsigned count = 0;

  Line& add() { return items[count < kMax ? count++ : kMax - 1]; }
};

struct BindingResult {
  CpuMask cpus;
  NodeMask memory;
  bool cpus_as_planned = false;
  bool memory_as_planned = false;
  Problems problems;
};

void applyBinding(Binder& binder, const BindingRequest& request, BindingResult& result);

enum class BindMode { kOn, kStrict, kOff };

// What to bind to, from POOLRUN_CPUSET and POOLRUN_NUMA (else `current`); `mode` from POOLRUN_BIND.
// False with the message in `error` when one of them is malformed.
bool bindingRequest(const Variables& env, const CpuMask& current, BindingRequest& request, BindMode& mode,
                    Line& error);

}  // namespace poolrun::runtime::core
