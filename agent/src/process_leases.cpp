// Which lease a process on a GPU belongs to: POOLRUN_LEASE in its environment.

#include <set>
#include <string_view>

#include "poolrun/agent/agent.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"

namespace poolrun::agent {

std::optional<std::string> processLease(const std::filesystem::path& proc_root, uint32_t pid) {
  std::string environ;
  try {
    environ = common::readRegularFileHead(proc_root / std::to_string(pid) / "environ", kMaxEnvironBytes,
                                          "process environments");
  } catch (const Error&) {
    return std::nullopt;  // gone, or not ours to read: a process of no known lease
  }
  std::string_view rest = environ;
  // A read cut at the limit ends inside an entry: that entry may be cut short, so it does not count.
  const bool cut = environ.size() >= kMaxEnvironBytes;
  constexpr std::string_view kKey = "POOLRUN_LEASE=";
  while (!rest.empty()) {
    size_t end = rest.find('\0');
    if (end == std::string_view::npos && cut) break;
    std::string_view entry = rest.substr(0, end);
    if (entry.starts_with(kKey)) {
      std::string_view id = entry.substr(kKey.size());
      // As getenv, the first entry counts; an id poold would refuse names no lease.
      if (!common::leaseIdProblem(id).empty()) return std::nullopt;
      return std::string(id);
    }
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return std::nullopt;
}

bool isMpsServer(const std::filesystem::path& proc_root, uint32_t pid) {
  try {
    const std::string comm =
        common::readRegularFileHead(proc_root / std::to_string(pid) / "comm", 64, "process names");
    return comm.starts_with("nvidia-cuda-mps");
  } catch (const Error&) {
    return false;  // gone, or not ours to read
  }
}

std::map<uint32_t, std::string> processLeases(const std::vector<topo::GpuSample>& gpus,
                                              const std::filesystem::path& proc_root) {
  std::set<uint32_t> pids;
  for (const topo::GpuSample& g : gpus)
    for (const topo::GpuProcess& p : g.processes) pids.insert(p.pid);
  std::map<uint32_t, std::string> out;
  for (uint32_t pid : pids)
    if (std::optional<std::string> lease = processLease(proc_root, pid)) out.emplace(pid, std::move(*lease));
  return out;
}

}  // namespace poolrun::agent
