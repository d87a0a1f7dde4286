#include "system.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace poolrun::runtime::core {
namespace {

constexpr long kMpolBind = 2;  // <linux/mempolicy.h>; the C libraries have no set_mempolicy

// set_mempolicy(MPOL_BIND): survives exec. The kernel reads maxnode - 1 bits (libnuma and hwloc
// pass one more than they mean, too).
long setMemoryBinding(const NodeMask& nodes) {
  return syscall(SYS_set_mempolicy, kMpolBind, nodes.words(), NodeMask::kSize + 1);
}

// The nodes of an MPOL_BIND policy; none for another policy.
long getMemoryBinding(NodeMask& nodes) {
  int mode = 0;
  long r = syscall(SYS_get_mempolicy, &mode, nodes.words(), NodeMask::kSize + 1, 0, 0);
  if (r < 0 || (mode & 0xff) != kMpolBind) nodes = NodeMask();  // the mode flags are in the high bits
  return r;
}

}  // namespace

Text readFile(const char* path, char* buffer, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  size_t got = 0;
  ssize_t n = 1;
  while (n > 0 && got + 1 < size) {
    n = read(fd, buffer + got, size - 1 - got);
    if (n > 0) got += static_cast<size_t>(n);
  }
  close(fd);
  if (n != 0) return {};  // an error, or more than fits
  buffer[got] = '\0';
  return {buffer, got};
}

void describe(Line& out, int error) {
  out.add(strerror(error));
}

CpuMask currentCpus() {
  CpuMask cpus;
  sched_getaffinity(0, CpuMask::kBytes, reinterpret_cast<cpu_set_t*>(cpus.words()));
  return cpus;
}

}  // namespace poolrun::runtime::core

namespace poolrun::runtime::core {
namespace {

// A file of sysfs or procfs under `root` ("" for this machine) that holds a list ("0-3,8").
template <class Mask>
bool readList(Text root, Text path, Mask& out) {
  Line file;
  file.add(root).add(path);
  char text[65536];
  Text t = file.truncated() ? Text() : readFile(file.c_str(), text, sizeof text);
  return t.isSet() && out.parseList(t);
}

Text readUnder(Text root, const char* path, char* buffer, size_t size) {
  Line file;
  file.add(root).add(path);
  return file.truncated() ? Text() : readFile(file.c_str(), buffer, size);
}

}  // namespace

// The cpuset of this process's cgroup, from the nearest cgroup up its path that has one (a job
// step without the controller inherits its job's): v2 cpuset.{cpus,mems}.effective, v1
// cpuset.effective_{cpus,mems}. Nothing found: a kernel without cpusets.
const SystemBinder::Cpuset& SystemBinder::cpuset() {
  if (cpuset_.read) return cpuset_;
  cpuset_.read = true;
  char text[16384];
  Text cgroups = readUnder(root_, "/proc/self/cgroup", text, sizeof text);
  for (size_t at = 0; cgroups.isSet() && at < cgroups.size;) {
    size_t end = cgroups.find('\n', at);
    Text line = cgroups.sub(at, end - at);  // ID:CONTROLLERS:PATH
    at = end + 1;
    size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c2 >= line.size) continue;
    Text controllers = line.sub(c1 + 1, c2 - c1 - 1), path = line.sub(c2 + 1);
    bool v1 = false;  // the v1 hierarchy that has the cpuset controller
    for (size_t s = 0; s < controllers.size;) {
      size_t e = controllers.find(',', s);
      v1 = v1 || controllers.sub(s, e - s) == "cpuset";
      s = e + 1;
    }
    if (!controllers.empty() && !v1) continue;
    for (;;) {
      Line dir;
      dir.add(v1 ? "/sys/fs/cgroup/cpuset" : "/sys/fs/cgroup").add(path);
      Line cpus, mems;
      cpus.add(dir.text()).add(v1 ? "/cpuset.effective_cpus" : "/cpuset.cpus.effective");
      mems.add(dir.text()).add(v1 ? "/cpuset.effective_mems" : "/cpuset.mems.effective");
      if (!cpus.truncated() && readList(root_, cpus.text(), cpuset_.cpus) && !cpuset_.cpus.empty()) {
        cpuset_.has_cpus = true;
        cpuset_.has_mems = readList(root_, mems.text(), cpuset_.mems) && !cpuset_.mems.empty();
        return cpuset_;
      }
      if (path.empty() || path == "/") break;
      size_t slash = path.size;  // up to the parent cgroup
      while (slash > 0 && path[slash - 1] != '/') --slash;
      path.size = slash > 1 ? slash - 1 : slash;
    }
  }
  return cpuset_;
}

CpuMask SystemBinder::machineCpus() {
  CpuMask online;
  if (!readList(root_, "/sys/devices/system/cpu/online", online)) return currentCpus();
  return cpuset().has_cpus ? online & cpuset().cpus : online;
}

bool SystemBinder::numaNode(unsigned i, unsigned& index, CpuMask& cpus) {
  if (!read_) {
    read_ = true;
    numa_ = readList(root_, "/sys/devices/system/node/online", nodes_) && !nodes_.empty();
    // set_mempolicy takes only nodes that have memory and that the cgroup allows; the others are
    // not places to bind memory to.
    NodeMask withMemory;
    if (readList(root_, "/sys/devices/system/node/has_memory", withMemory)) nodes_ = nodes_ & withMemory;
    if (cpuset().has_mems) nodes_ = nodes_ & cpuset().mems;
  }
  if (!numa_) {  // a kernel without NUMA: one node of every CPU
    if (i > 0) return false;
    index = 0;
    cpus = machineCpus();
    return true;
  }
  unsigned node = nodes_.next(0);
  for (unsigned k = 0; k < i && node < NodeMask::kSize; ++k) node = nodes_.next(node + 1);
  if (node >= NodeMask::kSize) return false;
  Line path;
  path.add("/sys/devices/system/node/node").add(node).add("/cpulist");
  index = node;
  if (!readList(root_, path.text(), cpus)) cpus = CpuMask();  // a node of memory alone lists no CPU
  return true;
}

bool SystemBinder::bindCpus(const CpuMask& cpus, Line& why) {
  bool ok = sched_setaffinity(0, CpuMask::kBytes, reinterpret_cast<const cpu_set_t*>(cpus.words())) == 0;
  if (!ok) describe(why, errno);
  return ok;
}

CpuMask SystemBinder::boundCpus() {
  return currentCpus();
}

bool SystemBinder::bindMemory(const NodeMask& nodes, Line& why) {
  bool ok = setMemoryBinding(nodes) == 0;
  if (!ok) describe(why, errno);
  return ok;
}

NodeMask SystemBinder::boundMemory() {
  NodeMask nodes;
  getMemoryBinding(nodes);
  return nodes;
}

unsigned downPorts(Text ncclIbHca, Text sysfsRoot, ProblemSink& sink) {
  Text list = ncclIbHca;
  if (list.startsWith("^")) return 0;
  if (list.startsWith("=")) list = list.sub(1);
  while (sysfsRoot.size > 1 && sysfsRoot[sysfsRoot.size - 1] == '/') --sysfsRoot.size;
  unsigned found = 0;
  for (size_t at = 0; at < list.size;) {
    size_t end = list.find(',', at);
    Text item = list.sub(at, end - at);
    at = end + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    Text nic = item.sub(0, colon);
    Text port = colon == item.size ? Text("1") : item.sub(colon + 1);
    Line file;
    file.add(sysfsRoot)
        .add(sysfsRoot.empty() || sysfsRoot == "/" ? "" : "/")
        .add("class/infiniband/")
        .add(nic);
    file.add("/ports/");
    file.add(port).add("/state");
    char text[256];
    Text state = readFile(file.c_str(), text, sizeof text);
    while (state.size > 0 && (state[state.size - 1] == '\n' || state[state.size - 1] == ' ' ||
                              state[state.size - 1] == '\t' || state[state.size - 1] == '\r')) {
      --state.size;
    }
    Line problem;
    if (state.empty()) {
      problem.add(nic).add(" port ").add(port).add(" does not exist on this node (").add(file.text());
      problem.add(" cannot be read): check NCCL_IB_HCA and that the NIC's driver is loaded");
    } else if (state.startsWith("4:") || state.startsWith("5:")) {
      // "4: ACTIVE" and "5: ACTIVE_DEFER" carry traffic; DOWN, INIT (no subnet manager) and ARMED do not.
      continue;
    } else {
      problem.add(nic).add(" port ").add(port).add(" is ").add(state).add(" (").add(file.text());
      problem.add("): NCCL would hang connecting through it");
    }
    sink.problem(problem.text());
    ++found;
  }
  return found;
}

}  // namespace poolrun::runtime::core
