#pragma once

// Where a NodeTopology comes from. Every source produces the same value; the live probe and the
// readers of files are interchangeable behind TopologySource.
//
// Errors: a file that is missing, malformed or not a topology throws poolrun::Error with code
// kBadInput or kNotFound and a one-line message "FILE: what is wrong". Anything a source could
// not read but can do without (a sysfs file, NVML) becomes a warning in NodeTopology::warnings.

#include <filesystem>
#include <memory>
#include <string>

#include "poolrun/topo/topology.hpp"

namespace poolrun::topo {

class TopologySource {
 public:
  virtual ~TopologySource() = default;
  virtual NodeTopology load() = 0;
  virtual std::string describe() const = 0;
};

enum class FileFormat { kHwlocXml, kNcclXml, kJson };

// Reads the file's first element or character to tell the formats apart. Throws for a file that
// is none of them (e.g. NCCL's graph XML) with a message saying what it looks like.
FileFormat detectFormat(const std::filesystem::path& file);

// hwloc XML (1.x and 2.0 formats) through the hwloc library, which imports both.
NodeTopology readHwlocXml(const std::filesystem::path& file);
NodeTopology readHwlocXmlString(const std::string& xml, const std::string& name);
// NCCL_TOPO_FILE format: full dumps (<gpu>, <nic>) and sparse hint files (bare <pci>).
NodeTopology readNcclXml(const std::filesystem::path& file);
NodeTopology readNcclXmlString(const std::string& xml, const std::string& name);
// Any of the three, by detectFormat().
NodeTopology readTopologyFile(const std::filesystem::path& file);

struct LiveOptions {
  std::filesystem::path sysfs_root = "/sys";  // stands in for /sys (DIR/class/infiniband/...)
  bool use_nvml = true;                       // NVLink and UUIDs through NVML where present
};

// This machine: hwloc with I/O discovery, RDMA ports from sysfs, NVML when present.
NodeTopology probeLive(const LiveOptions& options = {});

// The cores and hardware threads of this machine, from ROOT/devices/system/cpu (online CPUs and
// their thread siblings), without the cost of a topology probe. Falls back to the online CPU
// count, each CPU a core, where sysfs does not say.
struct CpuCount {
  int cores = 1;
  int threads = 1;
};
CpuCount countLocalCpus(const std::filesystem::path& sysfs_root = "/sys");

std::unique_ptr<TopologySource> makeFileSource(std::filesystem::path file);
std::unique_ptr<TopologySource> makeLiveSource(LiveOptions options = {});

}  // namespace poolrun::topo
