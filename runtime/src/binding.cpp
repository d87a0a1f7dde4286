#include "poolrun/runtime/binding.hpp"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "poolrun/topo/error.hpp"

namespace poolrun::runtime {
namespace {

std::string nodeList(const std::vector<int>& nodes) {
  std::string s;
  for (int n : nodes) s += (s.empty() ? "" : ",") + std::to_string(n);
  return s.empty() ? "none" : s;
}

class HwlocBitmap {
 public:
  HwlocBitmap() : map_(hwloc_bitmap_alloc()) {
    if (map_ == nullptr) throw Error(ErrorCode::kInternal, "hwloc_bitmap_alloc failed: out of memory");
  }
  ~HwlocBitmap() { hwloc_bitmap_free(map_); }
  HwlocBitmap(const HwlocBitmap&) = delete;
  HwlocBitmap& operator=(const HwlocBitmap&) = delete;
  hwloc_bitmap_t get() const { return map_; }

  static std::vector<unsigned> indexes(hwloc_const_bitmap_t map) {
    std::vector<unsigned> out;
    for (int i = hwloc_bitmap_first(map); i >= 0; i = hwloc_bitmap_next(map, i))
      out.push_back(static_cast<unsigned>(i));
    return out;
  }

 private:
  hwloc_bitmap_t map_;
};

class HwlocBinder final : public Binder {
 public:
  // Binding needs CPUs and NUMA nodes only, and poolrun-rank pays for this once per rank: hwloc's
  // plugins (PCI, OpenCL, GL; about 30 ms to load here) are kept out, and so are caches, cores and
  // packages. The program exec'd afterwards gets the environment it had.
  HwlocBinder() {
    const char* saved = std::getenv("HWLOC_PLUGINS_PATH");
    std::string previous = saved != nullptr ? saved : "";
    setenv("HWLOC_PLUGINS_PATH", "/nonexistent/poolrun-rank-needs-no-hwloc-plugin", 1);
    bool ok = hwloc_topology_init(&topo_) == 0;
    int err = errno;
    if (saved != nullptr) {
      setenv("HWLOC_PLUGINS_PATH", previous.c_str(), 1);
    } else {
      unsetenv("HWLOC_PLUGINS_PATH");
    }
    // hwloc's x86 backend runs CPUID on every PU in turn, moving the process onto each one to do so
    // (a migration per PU, and a trap to the hypervisor per CPUID in a VM) for CPU details binding
    // never reads. Where the build has no such backend the name is simply not found.
    if (ok) hwloc_topology_set_components(topo_, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
    ok = ok && hwloc_topology_set_all_types_filter(topo_, HWLOC_TYPE_FILTER_KEEP_NONE) == 0 &&
         hwloc_topology_load(topo_) == 0;
    if (!ok) {
      throw Error(ErrorCode::kIo, std::string("hwloc cannot read this machine's topology: ") +
                                      std::strerror(err != 0 ? err : errno));
    }
  }
  ~HwlocBinder() override { hwloc_topology_destroy(topo_); }
  HwlocBinder(const HwlocBinder&) = delete;
  HwlocBinder& operator=(const HwlocBinder&) = delete;

  topo::CpuSet machineCpus() override {
    return topo::CpuSet(HwlocBitmap::indexes(hwloc_topology_get_allowed_cpuset(topo_)));
  }
  std::vector<std::pair<int, topo::CpuSet>> numaNodes() override {
    std::vector<std::pair<int, topo::CpuSet>> out;
    for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
         n = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, n)) {
      out.emplace_back(static_cast<int>(n->os_index), topo::CpuSet(HwlocBitmap::indexes(n->cpuset)));
    }
    return out;
  }
  void bindCpus(const topo::CpuSet& cpus) override {
    HwlocBitmap set;
    for (unsigned c : cpus.cpus()) hwloc_bitmap_set(set.get(), c);
    if (hwloc_set_cpubind(topo_, set.get(), HWLOC_CPUBIND_PROCESS) != 0)
      throw Error(ErrorCode::kIo, std::strerror(errno));
  }
  topo::CpuSet boundCpus() override {
    HwlocBitmap set;
    if (hwloc_get_cpubind(topo_, set.get(), HWLOC_CPUBIND_PROCESS) != 0)
      throw Error(ErrorCode::kIo, std::strerror(errno));
    return topo::CpuSet(HwlocBitmap::indexes(set.get()));
  }
  void bindMemory(const std::vector<int>& nodes) override {
    HwlocBitmap set;
    for (int n : nodes) hwloc_bitmap_set(set.get(), static_cast<unsigned>(n));
    // Neither PROCESS nor THREAD: poolrun-rank is single-threaded, and Linux binds memory per
    // thread (set_mempolicy); the policy survives the exec of the program.
    if (hwloc_set_membind(topo_, set.get(), HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET) != 0)
      throw Error(ErrorCode::kIo, std::strerror(errno));
  }
  std::vector<int> boundMemory() override {
    HwlocBitmap set;
    hwloc_membind_policy_t policy{};
    if (hwloc_get_membind(topo_, set.get(), &policy, HWLOC_MEMBIND_BYNODESET) != 0 ||
        policy != HWLOC_MEMBIND_BIND) {
      return {};
    }
    std::vector<int> out;
    for (unsigned n : HwlocBitmap::indexes(set.get())) out.push_back(static_cast<int>(n));
    return out;
  }

 private:
  hwloc_topology_t topo_ = nullptr;
};

}  // namespace

std::unique_ptr<Binder> hwlocBinder() {
  return std::make_unique<HwlocBinder>();
}

BindingResult applyBinding(Binder& binder, const BindingRequest& request) {
  BindingResult result;
  topo::CpuSet machine = binder.machineCpus();
  topo::CpuSet target = request.cpus & machine;
  if (target.size() != request.cpus.size()) {
    result.problems.push_back("planned cores " + request.cpus.toList() +
                              " are not all usable here (this process may use " + machine.toList() +
                              "); check the node's topology file or the container's cpuset");
  }
  if (target.empty()) {
    result.cpus = binder.boundCpus();
    result.problems.push_back("no planned core is usable here: the rank runs on " + result.cpus.toList() +
                              " unbound");
  } else {
    try {
      binder.bindCpus(target);
    } catch (const Error& e) {
      result.problems.push_back("binding to cores " + target.toList() + " was refused: " + e.what());
    }
    result.cpus = binder.boundCpus();
    result.cpus_as_planned = target.size() == request.cpus.size() && result.cpus == request.cpus;
    if (result.cpus != target) {
      result.problems.push_back("asked for cores " + target.toList() + ", the kernel says " +
                                result.cpus.toList() +
                                " (a cgroup, a container or another tool restricts the binding)");
    }
  }

  auto numa = binder.numaNodes();
  if (numa.size() <= 1) {
    result.memory_as_planned = true;  // one memory node: nothing to choose
    return result;
  }
  std::vector<int> nodes;
  bool planned =
      std::any_of(numa.begin(), numa.end(), [&](const auto& n) { return n.first == request.numa; });
  if (request.numa >= 0 && planned) {
    nodes.push_back(request.numa);
  } else {
    if (request.numa >= 0) {
      result.problems.push_back("planned NUMA node " + std::to_string(request.numa) +
                                " does not exist here; memory goes to the nodes of the bound cores");
    }
    for (const auto& [index, cpus] : numa) {
      if (cpus.intersects(result.cpus)) nodes.push_back(index);
    }
  }
  if (nodes.empty()) return result;
  try {
    binder.bindMemory(nodes);
  } catch (const Error& e) {
    result.problems.push_back("binding memory to NUMA node " + nodeList(nodes) + " was refused: " + e.what() +
                              " (in a container this needs CAP_SYS_NICE); memory is placed by first touch");
  }
  result.memory = binder.boundMemory();
  result.memory_as_planned = result.memory == nodes && (request.numa < 0 || planned);
  if (result.memory != nodes && result.problems.empty()) {
    result.problems.push_back("asked to bind memory to NUMA node " + nodeList(nodes) + ", the kernel says " +
                              nodeList(result.memory));
  }
  return result;
}

std::optional<BindingRequest> bindingRequest(const Environment& env, const topo::CpuSet& current) {
  auto get = [&](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  std::string mode = get("POOLRUN_BIND");
  if (mode == "off") return std::nullopt;
  if (!mode.empty() && mode != "on" && mode != "strict") {
    throw badInput("POOLRUN_BIND='" + mode + "': use on (the default: warn when the binding did not take), " +
                   "strict (fail the rank) or off");
  }
  BindingRequest request;
  std::string cpus = get("POOLRUN_CPUSET");
  if (cpus.empty()) {
    request.cpus = current;
  } else {
    try {
      request.cpus = topo::CpuSet::parseList(cpus);
    } catch (const Error&) {
      throw badInput("POOLRUN_CPUSET='" + cpus + "' is not a cpulist like 0-3,8 (it is written by poolrun)");
    }
  }
  if (std::string numa = get("POOLRUN_NUMA"); !numa.empty()) {
    int n = -1;
    auto [end, ec] = std::from_chars(numa.data(), numa.data() + numa.size(), n);
    if (ec != std::errc() || end != numa.data() + numa.size() || n < 0) {
      throw badInput("POOLRUN_NUMA='" + numa + "' is not a NUMA node index (it is written by poolrun)");
    }
    request.numa = n;
  }
  return request;
}

}  // namespace poolrun::runtime
