#pragma once

// Binding a rank to its cores and its memory to their NUMA node, and checking that the kernel did
// what was asked, without the C++ library. The machine sits behind `Binder` (the kernel in
// system.hpp, a fake in the tests), so that every rule below is testable on any machine.

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

// Binds and reads the binding back. A machine with one NUMA node gets no memory binding (there is
// nothing to choose) and counts as bound as planned. A refusal is a problem in the result, each
// saying what was asked, what happened and what to do: a rank that runs unbound is slower, not wrong.
void applyBinding(Binder& binder, const BindingRequest& request, BindingResult& result);

enum class BindMode { kOn, kStrict, kOff };

// What to bind to, from POOLRUN_CPUSET and POOLRUN_NUMA (a real node), else `current`: the CPUs
// Open MPI's rankfile bound the process to (the simulated cluster, whose planned cores are a
// fixture's); `mode` from POOLRUN_BIND.
// False with the message in `error` when one of them is malformed.
bool bindingRequest(const Variables& env, const CpuMask& current, BindingRequest& request, BindMode& mode,
                    Line& error);

}  // namespace poolrun::runtime::core
