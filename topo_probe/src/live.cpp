// Telling the file formats apart, the live probe, and the TopologySource implementations.

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>

#include "file_util.hpp"
#include "hwloc_source.hpp"
#include "nvml.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/nesting.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/sysfs.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::topo {
namespace {

// The first element name of an XML text, skipping the prolog, comments and doctype.
std::string firstElement(const std::string& text) {
  size_t pos = 0;
  while ((pos = text.find('<', pos)) != std::string::npos) {
    if (text.compare(pos, 4, "<!--") == 0) {
      size_t end = text.find("-->", pos + 4);
      if (end == std::string::npos) return "";
      pos = end + 3;
    } else if (text.compare(pos, 2, "<?") == 0 || text.compare(pos, 2, "<!") == 0) {
      pos = text.find('>', pos);
      if (pos == std::string::npos) return "";
    } else {
      size_t end = pos + 1;
      while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_' ||
                                   text[end] == '-' || text[end] == ':')) {
        ++end;
      }
      return text.substr(pos + 1, end - pos - 1);
    }
  }
  return "";
}

FileFormat detectFormatOf(const std::string& text, const std::string& name) {
  size_t i = text.find_first_not_of(" \t\r\n");
  if (i == std::string::npos) throw badInput(name + ": file is empty; expected hwloc XML, NCCL XML or JSON");
  if (text[i] == '{') return FileFormat::kJson;
  if (text[i] != '<') {
    throw badInput(name + ": not a topology file (expected hwloc XML, NCCL topology XML or poolrun JSON)");
  }
  std::string root = firstElement(text);
  if (root == "topology") return FileFormat::kHwlocXml;
  if (root == "system") return FileFormat::kNcclXml;
  if (root == "graphs") {
    throw badInput(name +
                   ": this is an NCCL graph file (NCCL_GRAPH_FILE, <graphs>), not a topology; give the "
                   "NCCL_TOPO_FILE (<system>) instead");
  }
  if (root.empty()) throw badInput(name + ": malformed XML: no root element (truncated?)");
  throw badInput(name + ": XML root element <" + root +
                 "> is not a topology (expected <topology> from hwloc or <system> from NCCL)");
}

NodeTopology readJsonText(const std::string& text, const std::string& name) {
  if (std::optional<size_t> at = common::jsonTooDeepAt(text, common::kMaxJsonDepth)) {
    throw badInput(name + ": JSON nests deeper than " + std::to_string(common::kMaxJsonDepth) +
                   " levels at byte " + std::to_string(*at) +
                   " (a poolrun topology nests 4; is it the right file?)");
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw badInput(name + ": malformed JSON at byte " + std::to_string(e.byte) + " (" + e.what() + ")");
  } catch (const nlohmann::json::exception& e) {
    // out_of_range 406: a number beyond a double ("1e999"). Its text without nlohmann's "[json...] ".
    std::string what = e.what();
    throw badInput(name + ": unusable JSON: " +
                   what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2) +
                   " (use a number a double can hold)");
  }
  return fromJson(doc, name);
}

class FileSource final : public TopologySource {
 public:
  explicit FileSource(std::filesystem::path file) : file_(std::move(file)) {}
  NodeTopology load() override { return readTopologyFile(file_); }
  std::string describe() const override { return "file " + file_.string(); }

 private:
  std::filesystem::path file_;
};

class LiveSource final : public TopologySource {
 public:
  explicit LiveSource(LiveOptions options) : options_(std::move(options)) {}
  NodeTopology load() override { return probeLive(options_); }
  std::string describe() const override {
    return "this machine (hwloc, sysfs " + options_.sysfs_root.string() + ")";
  }

 private:
  LiveOptions options_;
};

}  // namespace

FileFormat detectFormat(const std::filesystem::path& file) {
  return detectFormatOf(common::readRegularFile(file, common::kTopologyFileLimit, "topology files"),
                        file.string());
}

NodeTopology readTopologyFile(const std::filesystem::path& file) {
  std::string text = common::readRegularFile(file, common::kTopologyFileLimit, "topology files");
  std::string name = file.string();
  switch (detectFormatOf(text, name)) {
    case FileFormat::kHwlocXml:
      return readHwlocXmlString(text, name);
    case FileFormat::kNcclXml:
      return readNcclXmlString(text, name);
    case FileFormat::kJson:
      return readJsonText(text, name);
  }
  throw Error(ErrorCode::kInternal, "unreachable");
}

CpuCount countLocalCpus(const std::filesystem::path& sysfs_root) {
  std::filesystem::path cpuDir = sysfs_root / "devices" / "system" / "cpu";
  CpuCount count;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  count.threads = count.cores = static_cast<int>(std::max(online, 1L));
  try {
    CpuSet cpus = CpuSet::parseList(
        common::readRegularFile(cpuDir / "online", common::kSysfsFileLimit, "sysfs attributes"));
    std::set<std::string> cores;
    for (unsigned cpu : cpus.cpus()) {
      std::filesystem::path topology = cpuDir / ("cpu" + std::to_string(cpu)) / "topology";
      std::error_code ec;
      std::filesystem::path siblings = topology / "core_cpus_list";
      if (!std::filesystem::exists(siblings, ec)) siblings = topology / "thread_siblings_list";
      cores.insert(std::string(
          common::trim(common::readRegularFile(siblings, common::kSysfsFileLimit, "sysfs attributes"))));
    }
    if (!cpus.empty() && !cores.empty()) {
      count.threads = static_cast<int>(cpus.size());
      count.cores = static_cast<int>(cores.size());
    }
  } catch (const std::exception&) {
    // A container or an old kernel without these files: every online CPU counts as a core.
  }
  return count;
}

NodeTopology probeLive(const LiveOptions& options) {
  NodeTopology topo = detail::probeHwlocLive();
  std::vector<std::string> warnings;
  auto devices = readRdmaDevices(options.sysfs_root, warnings);
  mergeRdmaDevices(topo, devices);
  for (std::string& w : warnings) topo.warnings.push_back(std::move(w));
  if (options.use_nvml && !topo.gpus.empty()) {
    std::string why;
    if (auto gpus = detail::queryNvml(why)) {
      detail::mergeNvml(topo, *gpus);
    } else {
      topo.warnings.push_back(why);
    }
  }
  return topo;
}

std::unique_ptr<TopologySource> makeFileSource(std::filesystem::path file) {
  return std::make_unique<FileSource>(std::move(file));
}

std::unique_ptr<TopologySource> makeLiveSource(LiveOptions options) {
  return std::make_unique<LiveSource>(std::move(options));
}

}  // namespace poolrun::topo
