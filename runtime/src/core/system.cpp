#include "system.hpp"

#include <asm/unistd.h>

#if !POOLRUN_FREESTANDING
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#endif

namespace poolrun::runtime::core::sys {
namespace {

// The kernel's constants (the same on every Linux architecture poolrun-rank builds for).
constexpr long kAtCwd = -100;
constexpr long kReadOnlyCloseOnExec = 02000000;
constexpr long kMpolBind = 2;
constexpr long kProtReadWrite = 3, kMapPrivateAnonymous = 0x22;
#if !POOLRUN_FREESTANDING
static_assert(kAtCwd == AT_FDCWD && kReadOnlyCloseOnExec == (O_RDONLY | O_CLOEXEC));
static_assert(kProtReadWrite == (PROT_READ | PROT_WRITE) &&
              kMapPrivateAnonymous == (MAP_PRIVATE | MAP_ANONYMOUS));
#endif

template <class... A>
long call(long number, A... args) {
#if POOLRUN_FREESTANDING
  long a[6] = {static_cast<long>(args)...};
#if defined(__x86_64__)
  register long r10 __asm__("r10") = a[3];
  register long r8 __asm__("r8") = a[4];
  register long r9 __asm__("r9") = a[5];
  long result;
  __asm__ volatile("syscall"
                   : "=a"(result)
                   : "a"(number), "D"(a[0]), "S"(a[1]), "d"(a[2]), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return result;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = number;
  register long x0 __asm__("x0") = a[0];
  register long x1 __asm__("x1") = a[1];
  register long x2 __asm__("x2") = a[2];
  register long x3 __asm__("x3") = a[3];
  register long x4 __asm__("x4") = a[4];
  register long x5 __asm__("x5") = a[5];
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
#else
#error "poolrun-rank without a C library is built for x86_64 and aarch64 only"
#endif
#else
  long result = ::syscall(number, static_cast<long>(args)...);
  return result == -1 ? -errno : result;
#endif
}

template <class T>
long address(T* p) {
  return reinterpret_cast<long>(p);
}

}  // namespace

long openRead(const char* path) {
  return call(__NR_openat, kAtCwd, address(path), kReadOnlyCloseOnExec, 0);
}
long read(int fd, char* buffer, size_t size) {
  return call(__NR_read, fd, address(buffer), static_cast<long>(size));
}
long write(int fd, const char* buffer, size_t size) {
  return call(__NR_write, fd, address(buffer), static_cast<long>(size));
}
long close(int fd) {
  return call(__NR_close, fd);
}
long execve(const char* path, char* const argv[], char* const envp[]) {
  return call(__NR_execve, address(path), address(argv), address(envp));
}
long getAffinity(CpuMask& cpus) {
  cpus = CpuMask();
  return call(__NR_sched_getaffinity, 0, static_cast<long>(CpuMask::kBytes), address(cpus.words()));
}
long setAffinity(const CpuMask& cpus) {
  return call(__NR_sched_setaffinity, 0, static_cast<long>(CpuMask::kBytes), address(cpus.words()));
}
long bindMemory(const NodeMask& nodes) {
  // The kernel reads maxnode - 1 bits (libnuma and hwloc pass one more than they mean, too).
  return call(__NR_set_mempolicy, kMpolBind, address(nodes.words()), static_cast<long>(NodeMask::kSize + 1));
}
long getMemoryBinding(NodeMask& nodes) {
  nodes = NodeMask();
  int mode = 0;
  long r = call(__NR_get_mempolicy, address(&mode), address(nodes.words()),
                static_cast<long>(NodeMask::kSize + 1), 0, 0);
  if (r >= 0 && (mode & 0xff) != kMpolBind) nodes = NodeMask();  // the mode flags are in the high bits
  return r;
}
char* mapMemory(size_t size) {
  long r = call(__NR_mmap, 0, static_cast<long>(size), kProtReadWrite, kMapPrivateAnonymous, -1, 0);
  return r < 0 && r > -4096 ? nullptr : reinterpret_cast<char*>(r);
}
bool hostName(Line& out) {
  struct {
    char field[6][65];
  } names = {};
  if (call(__NR_uname, address(&names)) < 0) return false;
  out.add(names.field[1]);  // sysname, nodename, ...
  return true;
}
void exit(int status) {
  for (;;) call(__NR_exit_group, status);
}

namespace {
constexpr long kSigChld = 17, kWaitNoHang = 1, kSigBlock = 0, kSigSetMask = 2;
constexpr long kPrSetPdeathsig = 1, kPrSetChildSubreaper = 36;
constexpr long kPollIn = 1;
}  // namespace

long fork() {
  return call(__NR_clone, kSigChld, 0, 0, 0, 0);
}
long waitAny(int& status, bool block) {
  return call(__NR_wait4, -1, address(&status), block ? 0 : kWaitNoHang, 0);
}
long kill(long pid, int signal) {
  return call(__NR_kill, pid, signal);
}
long processId() {
  return call(__NR_getpid);
}
long parentId() {
  return call(__NR_getppid);
}
long becomeSubreaper() {
  return call(__NR_prctl, kPrSetChildSubreaper, 1, 0, 0, 0);
}
long dieWithParent(int signal) {
  return call(__NR_prctl, kPrSetPdeathsig, signal, 0, 0, 0);
}
long blockSignals(SignalSet block, SignalSet& old) {
  return call(__NR_rt_sigprocmask, kSigBlock, address(&block), address(&old), sizeof(SignalSet));
}
long setSignalMask(SignalSet mask) {
  return call(__NR_rt_sigprocmask, kSigSetMask, address(&mask), 0, sizeof(SignalSet));
}
long signalFd(SignalSet signals) {
  return call(__NR_signalfd4, -1, address(&signals), sizeof(SignalSet), kReadOnlyCloseOnExec);
}
long nextSignal(int fd, long timeoutMs) {
  struct {
    int fd;
    short events, revents;
  } poll = {fd, static_cast<short>(kPollIn), 0};
  struct {
    long seconds, nanoseconds;
  } limit = {timeoutMs / 1000, (timeoutMs % 1000) * 1000000};
  long ready = call(__NR_ppoll, address(&poll), 1, timeoutMs < 0 ? 0 : address(&limit), 0, 0);
  if (ready <= 0) return ready;
  unsigned info[32];  // struct signalfd_siginfo: 128 bytes, the signal's number first
  long got = call(__NR_read, fd, address(info), static_cast<long>(sizeof info));
  return got == static_cast<long>(sizeof info) ? static_cast<long>(info[0]) : (got < 0 ? got : 0);
}
long defaultAction(int signal) {
  struct {
    unsigned long handler, flags, restorer;
    SignalSet mask;
  } action = {0, 0, 0, 0};  // SIG_DFL
  return call(__NR_rt_sigaction, signal, address(&action), 0, sizeof(SignalSet));
}

Text readFile(const char* path, char* buffer, size_t size) {
  long fd = openRead(path);
  if (fd < 0) return {};
  size_t got = 0;
  long n = 1;
  while (n > 0 && got + 1 < size) {
    n = read(static_cast<int>(fd), buffer + got, size - 1 - got);
    if (n > 0) got += static_cast<size_t>(n);
  }
  close(static_cast<int>(fd));
  if (n != 0) return {};  // an error, or more than fits
  buffer[got] = '\0';
  return {buffer, got};
}

void describe(Line& out, long error) {
#if !POOLRUN_FREESTANDING
  out.add(std::strerror(static_cast<int>(-error)));
#else
  struct Reason {
    long error;
    const char* text;
  };
  static constexpr Reason kReasons[] = {{1, "Operation not permitted"},
                                        {2, "No such file or directory"},
                                        {3, "No such process"},
                                        {5, "Input/output error"},
                                        {7, "Argument list too long"},
                                        {8, "Exec format error"},
                                        {12, "Cannot allocate memory"},
                                        {13, "Permission denied"},
                                        {14, "Bad address"},
                                        {16, "Device or resource busy"},
                                        {19, "No such device"},
                                        {20, "Not a directory"},
                                        {21, "Is a directory"},
                                        {22, "Invalid argument"},
                                        {26, "Text file busy"},
                                        {30, "Read-only file system"},
                                        {36, "File name too long"},
                                        {38, "Function not implemented"},
                                        {40, "Too many levels of symbolic links"},
                                        {110, "Connection timed out"},
                                        {116, "Stale file handle"}};
  for (const Reason& r : kReasons) {
    if (r.error == -error) {
      out.add(r.text);
      return;
    }
  }
  out.add("Unknown error ").add(-error);
#endif
}

}  // namespace poolrun::runtime::core::sys

namespace poolrun::runtime::core {
namespace {

// A file of sysfs or procfs under `root` ("" for this machine) that holds a list ("0-3,8").
template <class Mask>
bool readList(Text root, Text path, Mask& out) {
  Line file;
  file.add(root).add(path);
  char text[65536];
  Text t = file.truncated() ? Text() : sys::readFile(file.c_str(), text, sizeof text);
  return t.isSet() && out.parseList(t);
}

Text readUnder(Text root, const char* path, char* buffer, size_t size) {
  Line file;
  file.add(root).add(path);
  return file.truncated() ? Text() : sys::readFile(file.c_str(), buffer, size);
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
  if (!readList(root_, "/sys/devices/system/cpu/online", online)) {
    sys::getAffinity(online);
    return online;
  }
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
  long r = sys::setAffinity(cpus);
  if (r < 0) sys::describe(why, r);
  return r >= 0;
}

CpuMask SystemBinder::boundCpus() {
  CpuMask cpus;
  sys::getAffinity(cpus);
  return cpus;
}

bool SystemBinder::bindMemory(const NodeMask& nodes, Line& why) {
  long r = sys::bindMemory(nodes);
  if (r < 0) sys::describe(why, r);
  return r >= 0;
}

NodeMask SystemBinder::boundMemory() {
  NodeMask nodes;
  if (sys::getMemoryBinding(nodes) < 0) nodes = NodeMask();
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
    Text state = sys::readFile(file.c_str(), text, sizeof text);
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
