#pragma once

// One cgroup per lease on a node (docs/confinement.md): the processes of a lease's job on this node
// are in it, may not open the node's GPUs the lease does not hold, may start at most so many
// processes, and are all killed when the lease ends, however they were started or forked.
//
// cgroup v2: a cgroup under the cgroup2 mount, its devices decided by a BPF_PROG_TYPE_CGROUP_DEVICE
// program attached to it, cgroup.kill at the end. cgroup v1: a cgroup in each of the devices, pids
// and freezer hierarchies, devices.deny lines, and the freezer holding every process still while
// each is killed. Both need root; every error says which file refused what.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace poolrun::agent {

// A character device, as a cgroup names it.
struct CharDevice {
  uint32_t major = 0, minor = 0;
  bool operator==(const CharDevice&) const = default;
};

// NVIDIA's GPU device nodes: /dev/nvidiaN is character 195:N (N the GPU's minor number).
inline constexpr uint32_t kNvidiaMajor = 195;

// Where this node's cgroup hierarchies are mounted.
struct CgroupMounts {
  std::filesystem::path unified;                             // the cgroup2 mount; empty where none
  std::map<std::string, std::filesystem::path> controllers;  // a v1 controller's hierarchy
};
// From a mountinfo file (/proc/self/mountinfo).
CgroupMounts readCgroupMounts(const std::filesystem::path& mountinfo = "/proc/self/mountinfo");

enum class CgroupVersion { kV1, kV2 };
// Which version confines leases where the administrator did not say: v1 where a v1 devices hierarchy
// is mounted (a hybrid node's cgroup2 mount holds no processes' controllers), else v2; nullopt where
// the node has neither.
std::optional<CgroupVersion> defaultCgroupVersion(const CgroupMounts& mounts);

// What a lease's processes may do.
struct Confinement {
  std::vector<CharDevice> deny;     // devices they may not open: the node's GPUs the lease does not hold
  std::optional<int64_t> pids_max;  // at most so many processes and threads
  std::optional<uint64_t> memory_max =
      {};  // at most so many bytes of memory (past it, the kernel's OOM killer)
};

// The leases with a cgroup under PARENT now, in any hierarchy `version` uses (the folders whose name
// is a lease id; others, such as a probe's, are not leases'). Throws poolrun::Error (kIo) where a
// hierarchy's PARENT exists but cannot be read.
std::set<std::string> leaseCgroupNames(const CgroupMounts& mounts, CgroupVersion version,
                                       const std::string& parent);

class LeaseCgroup {
 public:
  // Makes (or takes again, after an agent's restart) cgroup PARENT/NAME in each hierarchy `version`
  // uses and sets `confinement` on it; one left frozen (an agent killed in destroy()) is thawed. Throws
  // poolrun::Error (kIo) naming the file and what it refused; nothing is left made where it throws.
  LeaseCgroup(const CgroupMounts& mounts, CgroupVersion version, const std::string& parent,
              const std::string& name, const Confinement& confinement);
  // Leaves the cgroup as it is: destroy() ends it.
  ~LeaseCgroup() = default;
  LeaseCgroup(LeaseCgroup&&) = default;
  LeaseCgroup& operator=(LeaseCgroup&&) = default;

  // The files a process joins the cgroup by (its pid written to each): a child writes "0" to them
  // between fork and exec.
  const std::vector<std::filesystem::path>& procsFiles() const { return procs_; }
  void add(pid_t pid) const;
  // The processes in it now.
  std::vector<pid_t> pids() const;
  // Kills every process in it and waits, up to `limit`, until none is left, then removes it.
  // Returns the number of processes killed; throws poolrun::Error (kIo) where some outlived
  // `limit` (the cgroup is then left, to be destroyed again).
  size_t destroy(std::chrono::milliseconds limit);

  CgroupVersion version() const { return version_; }
  // The cgroup's folders, one per hierarchy (v1) or the one (v2).
  const std::vector<std::filesystem::path>& folders() const { return folders_; }

 private:
  CgroupVersion version_;
  std::vector<std::filesystem::path> folders_;  // the devices (or v2) folder first
  std::vector<std::filesystem::path> procs_;
  std::filesystem::path freezer_;  // v1, where the freezer hierarchy is mounted
};

}  // namespace poolrun::agent
