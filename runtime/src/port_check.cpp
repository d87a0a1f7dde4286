#include "poolrun/runtime/port_check.hpp"

#include "core/system.hpp"
#include "core_adapters.hpp"

namespace poolrun::runtime {

std::vector<std::string> downPorts(const std::string& nccl_ib_hca, const std::filesystem::path& sysfs_root) {
  struct Collect final : core::ProblemSink {
    std::vector<std::string> lines;
    void problem(core::Text line) override { lines.push_back(hostedString(line)); }
  } sink;
  const std::string& root = sysfs_root.native();
  core::downPorts(coreText(nccl_ib_hca), coreText(root), sink);
  return std::move(sink.lines);
}

}  // namespace poolrun::runtime
