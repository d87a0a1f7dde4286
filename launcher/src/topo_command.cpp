#include <sys/wait.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command_options.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/launcher/commands.hpp"
#include "poolrun/launcher/job_directory.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/sysfs.hpp"
#include "poolrun/topo/writers.hpp"

namespace po = boost::program_options;

namespace poolrun::launcher {
namespace {

constexpr const char* kTopoUsage =
    "usage: poolrun topo [--from FILE] [--format matrix|json|nccl-xml|dot|svg] [--sysfs-root DIR] [-o FILE]\n"
    "Shows how this node's (or FILE's) GPUs, NICs, PCIe switches and NUMA nodes are wired.\n";

// Runs `dot -Tsvg` on the DOT text; the SVG, or an error naming what to install.
std::string renderSvg(const std::string& dotText) {
  char tmpl[] = "/tmp/poolrun-dot-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw Error(ErrorCode::kIo, "cannot create a temporary file for dot");
  std::string path = tmpl;
  if (write(fd, dotText.data(), dotText.size()) != static_cast<ssize_t>(dotText.size())) {
    close(fd);
    std::remove(path.c_str());
    throw Error(ErrorCode::kIo, "cannot write " + path);
  }
  close(fd);
  std::string cmd = "dot -Tsvg '" + path + "' 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string svg;
  int status = -1;
  if (pipe != nullptr) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) svg.append(buf, n);
    status = pclose(pipe);
  }
  std::remove(path.c_str());
  if (status != 0 || svg.empty()) {
    throw Error(ErrorCode::kUnsupported,
                "--format svg needs Graphviz's `dot` (apt-get install graphviz); or use --format dot");
  }
  return svg;
}

}  // namespace

int reportError(const std::exception& e, std::ostream& err) {
  err << "poolrun: error: " << e.what() << "\n";
  if (const auto* pe = dynamic_cast<const Error*>(&e)) {
    return pe->code() == ErrorCode::kBadInput || pe->code() == ErrorCode::kNotFound ? 2 : 1;
  }
  if (dynamic_cast<const po::error*>(&e) != nullptr) return 2;
  return 1;
}

int topoCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CommandOptions command("poolrun topo options", {kTopoUsage, "", ""});
  std::string from, format = "matrix", sysfsRoot, output;
  // clang-format off
  command.add()
      ("from", po::value(&from)->value_name("FILE"),
       "read the topology from FILE (hwloc XML, NCCL topology XML or poolrun JSON)")
      ("format", po::value(&format)->value_name("FORMAT"), "matrix (default), json, nccl-xml, dot or svg")
      ("sysfs-root", po::value(&sysfsRoot)->value_name("DIR"),
       "read RDMA ports from DIR instead of /sys (DIR/class/infiniband/...)")
      ("output,o", po::value(&output)->value_name("FILE"), "write to FILE instead of standard output");
  // clang-format on
  po::variables_map vm;
  if (std::optional<int> status = command.parse(args, vm, out, err)) return *status;
  static const char* kFormats[] = {"matrix", "json", "nccl-xml", "dot", "svg"};
  if (std::find(std::begin(kFormats), std::end(kFormats), format) == std::end(kFormats)) {
    return command.usageError("unknown --format '" + format + "' (use matrix, json, nccl-xml, dot or svg)",
                              err);
  }
  try {
    topo::NodeTopology t;
    if (!from.empty()) {
      t = topo::readTopologyFile(from);
      if (!sysfsRoot.empty()) {
        std::vector<std::string> warnings;
        topo::mergeRdmaDevices(t, topo::readRdmaDevices(sysfsRoot, warnings));
        t.warnings.insert(t.warnings.end(), warnings.begin(), warnings.end());
      }
    } else {
      topo::LiveOptions live;
      if (!sysfsRoot.empty()) live.sysfs_root = sysfsRoot;
      t = topo::probeLive(live);
    }
    for (const std::string& w : t.warnings) err << "poolrun: warning: " << w << "\n";
    for (const std::string& w : topo::missingNvlinkWarnings(t)) err << "poolrun: warning: " << w << "\n";
    std::string text;
    if (format == "matrix") {
      text = topo::toMatrix(t);
    } else if (format == "json") {
      text = topo::toJson(t).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    } else if (format == "nccl-xml") {
      text = topo::toNcclXml(t);
    } else if (format == "dot") {
      text = topo::toDot(t);
    } else {
      text = renderSvg(topo::toDot(t));
    }
    if (output.empty()) {
      out << text;
    } else {
      std::error_code ec;
      const auto type = std::filesystem::status(output, ec).type();
      if (type == std::filesystem::file_type::character || type == std::filesystem::file_type::fifo) {
        std::ofstream file(output, std::ios::binary);  // /dev/stdout, a pipe: written to, not replaced
        file << text;
        if (!file) throw Error(ErrorCode::kIo, output + ": cannot write to it");
      } else {
        // Whole or not at all, and never through a link planted at the name (job_directory.hpp).
        writeFileAtomically(output, text, std::nullopt, Durability::kSynced);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    return reportError(e, err);
  }
}

}  // namespace poolrun::launcher
