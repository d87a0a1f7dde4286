#pragma once

// The kernel, as the rank core uses it: Linux system calls, each returning what the kernel returns
// (>= 0, or -errno). poolrun-rank makes them itself where it is built without a C library; elsewhere
// they go through the C library's syscall().

#include "binding.hpp"
#include "bits.hpp"
#include "text.hpp"

namespace poolrun::runtime::core::sys {

long openRead(const char* path);
long read(int fd, char* buffer, size_t size);
long write(int fd, const char* buffer, size_t size);
long close(int fd);
long execve(const char* path, char* const argv[], char* const envp[]);
long getAffinity(CpuMask& cpus);
long setAffinity(const CpuMask& cpus);
long bindMemory(const NodeMask& nodes);  // set_mempolicy(MPOL_BIND): survives exec
long getMemoryBinding(NodeMask& nodes);  // the nodes of an MPOL_BIND policy; none for another policy
char* mapMemory(size_t size);            // zeroed anonymous memory; null when refused
bool hostName(Line& out);
[[noreturn]] void exit(int status);

// Processes and signals, for poolrun-rank's reaper (rank_main.cpp). Signal sets are the kernel's
// 64-bit masks (bit N-1 for signal N).
using SignalSet = unsigned long;
constexpr SignalSet signalBit(int signal) {
  return SignalSet{1} << (signal - 1);
}
long fork();                            // clone(SIGCHLD): 0 in the child, its pid here
long waitAny(int& status, bool block);  // wait4(-1): a child's pid, 0 (none yet), -ECHILD
long kill(long pid, int signal);
long processId();
long parentId();
long becomeSubreaper();          // prctl(PR_SET_CHILD_SUBREAPER): orphans below come here
long dieWithParent(int signal);  // prctl(PR_SET_PDEATHSIG)
long blockSignals(SignalSet block, SignalSet& old);
long setSignalMask(SignalSet mask);
long signalFd(SignalSet signals);  // signalfd4, close-on-exec
// The next signal from signalFd `fd` within `timeoutMs` (-1: no limit): its number, 0 on timeout.
long nextSignal(int fd, long timeoutMs);
long defaultAction(int signal);  // rt_sigaction(SIG_DFL)

// The file at `path`, NUL-terminated in `buffer`; an unset Text when it cannot be read or does not
// fit in `size` - 1 bytes (a cut list would name the wrong CPUs).
Text readFile(const char* path, char* buffer, size_t size);

// Appends the C library's words for -errno (as strerror gives them).
void describe(Line& out, long error);

// Errors this code tells apart.
inline constexpr long kNoEntry = -2, kNoExec = -8, kAccess = -13, kNoDevice = -19, kNotDir = -20,
                      kNameTooLong = -36, kTimedOut = -110, kStale = -116, kNoChild = -10;

}  // namespace poolrun::runtime::core::sys

namespace poolrun::runtime::core {

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
