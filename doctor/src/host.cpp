// Host settings that slow collectives down without an error, and the installed MPI stack.

#include <fmt/format.h>
#include <hwloc.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string_view>

#include "checks.hpp"
#include "poolrun/common/text.hpp"

namespace poolrun::doctor::detail {
namespace fs = std::filesystem;
namespace {

// "always [madvise] never" -> "madvise"
std::string bracketed(const std::string& text) {
  size_t open = text.find('['), close = text.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return text;
  return text.substr(open + 1, close - open - 1);
}

void checkNumaBalancing(const Roots& roots, Report& report) {
  fs::path file = roots.proc / "sys" / "kernel" / "numa_balancing";
  auto value = readText(file);
  if (!value) {
    report.add({"host.numa_balancing", Status::kSkip, "kernel",
                "not present (" + file.string() + "): one NUMA node or a kernel without it", "", ""});
    return;
  }
  Check c{
      "host.numa_balancing", Status::kPass, "kernel", fmt::format("{} ({})", *value, file.string()), "", ""};
  if (*value != "0") {
    c.status = Status::kWarn;
    c.fix =
        "the kernel migrates the ranks' pages away from their NUMA node: sysctl -w kernel.numa_balancing=0";
  }
  report.add(c);
}

// "cpu0", "cpu12": a CPU's directory under /sys/devices/system/cpu (not cpufreq, cpuidle, ...).
bool isCpuDirectory(std::string_view name) {
  return name.size() > 3 && name.starts_with("cpu") &&
         name.find_first_not_of("0123456789", 3) == std::string_view::npos;
}

void checkGovernor(const Roots& roots, Report& report) {
  std::map<std::string, int> governors;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(roots.sys / "devices" / "system" / "cpu", ec)) {
    if (!isCpuDirectory(entry.path().filename().string())) continue;
    if (auto g = readText(entry.path() / "cpufreq" / "scaling_governor")) ++governors[*g];
  }
  fs::path where = roots.sys / "devices/system/cpu/cpu*/cpufreq/scaling_governor";
  if (governors.empty()) {
    report.add({"host.cpufreq", Status::kSkip, "CPUs",
                "no cpufreq governor (" + where.string() + "): the firmware or hypervisor sets the clocks",
                "", ""});
    return;
  }
  std::string list;
  for (const auto& [g, n] : governors)
    list += fmt::format("{}{} on {} CPU{}", list.empty() ? "" : ", ", g, n, n > 1 ? "s" : "");
  Check c{"host.cpufreq", Status::kPass, "CPUs", list + " (" + where.string() + ")", "", ""};
  if (governors.size() > 1 || governors.begin()->first != "performance") {
    c.status = Status::kWarn;
    c.fix =
        "CPU clocks drop between bursts and slow the proxy threads: cpupower frequency-set -g performance";
  }
  report.add(c);
}

void checkHugePages(const Roots& roots, Report& report) {
  fs::path dir = roots.sys / "kernel" / "mm" / "transparent_hugepage";
  auto enabled = readText(dir / "enabled");
  auto defrag = readText(dir / "defrag");
  if (!enabled) {
    report.add(
        {"host.thp", Status::kSkip, "kernel", "no transparent huge pages (" + dir.string() + ")", "", ""});
    return;
  }
  std::string e = bracketed(*enabled), d = defrag ? bracketed(*defrag) : "unknown";
  Check c{"host.thp", Status::kPass,
          "kernel",   fmt::format("enabled {}, defrag {} ({})", e, d, dir.string()),
          "",         ""};
  if (e == "always" && d == "always") {
    c.status = Status::kWarn;
    c.fix =
        "allocations stall in direct compaction: echo defer+madvise > "
        "/sys/kernel/mm/transparent_hugepage/defrag";
  }
  report.add(c);
}

// hwloc's release ("2.9.0"): the API version moves only when the API does (2.8.0 for 2.8 to 2.9
// and later), so it would name an older library than the one loaded. The library writes its
// release into the root object's "hwlocVersion" when it discovers this machine (a minimal
// topology here); one read from a file (HWLOC_XMLFILE) carries its exporter's instead: unknown.
std::string hwlocRelease() {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) return "";
  hwloc_topology_set_all_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_NONE);
  std::string release;
  if (hwloc_topology_load(topology) == 0 && hwloc_topology_is_thissystem(topology)) {
    const char* v = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topology), "hwlocVersion");
    if (v != nullptr) release = v;
  }
  hwloc_topology_destroy(topology);
  return release;
}

void checkHwloc(Report& report) {
  unsigned v = hwloc_get_api_version();
  auto api = [](unsigned x) { return fmt::format("{}.{}.{}", x >> 16, (x >> 8) & 0xff, x & 0xff); };
  std::string release = hwlocRelease();
  Check c{"host.hwloc",
          Status::kPass,
          "hwloc",
          "library " + (release.empty() ? std::string("of unknown release (HWLOC_XMLFILE set?)") : release) +
              " (API " + api(v) + "; built against " + HWLOC_VERSION + ", API " + api(HWLOC_API_VERSION) +
              ")",
          "",
          ""};
  if ((v >> 16) != (HWLOC_API_VERSION >> 16)) {
    c.status = Status::kFail;
    c.fix = "the hwloc library is another major version than poolrun was built with: rebuild poolrun";
  }
  report.add(c);
}

// "key:value" lines of `ompi_info --parsable`: the value of the first line starting with `key:`.
std::optional<std::string> parsableValue(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with(key + ":")) return line.substr(key.size() + 1);
  }
  return std::nullopt;
}

// The version in `ucx_info -v` output ("# Library version: 1.15.0"): the first "version", in any
// case, followed by ':', '=' or spaces and major.minor, with .patch where there is one.
std::optional<std::string> ucxVersion(std::string_view text) {
  using common::takeDigits;
  using common::takePrefix;
  std::string folded = common::lower(text);
  for (size_t at = folded.find("version"); at != std::string::npos; at = folded.find("version", at + 1)) {
    std::string_view rest = text.substr(at + 7);
    size_t separators = std::min(rest.find_first_not_of(": ="), rest.size());
    if (separators == 0) continue;
    rest.remove_prefix(separators);
    std::string_view version = rest;
    if (takeDigits(rest).empty() || !takePrefix(rest, ".") || takeDigits(rest).empty()) continue;
    std::string_view patch = rest;
    if (takePrefix(patch, ".") && !takeDigits(patch).empty()) rest = patch;
    return std::string(version.substr(0, version.size() - rest.size()));
  }
  return std::nullopt;
}

}  // namespace

void checkHost(const Roots& roots, Report& report) {
  checkNumaBalancing(roots, report);
  checkGovernor(roots, report);
  checkHugePages(roots, report);
  checkHwloc(report);
}

void checkTools(ToolRunner& tools, bool rdma, bool gpus, Report& report) {
  auto ompi = tools.run({"ompi_info", "--parsable", "--all"});
  std::optional<std::string> version = ompi ? parsableValue(*ompi, "ompi:version:full") : std::nullopt;
  if (!version) {
    report.add({"host.openmpi", Status::kFail, "ompi_info", "ompi_info cannot be run or names no version",
                "install Open MPI (apt-get install openmpi-bin) or put its bin folder on PATH", ""});
  } else {
    auto cudaValue = parsableValue(*ompi, "mca:opal:base:param:opal_built_with_cuda_support:value");
    if (!cudaValue) cudaValue = parsableValue(*ompi, "mca:mpi:base:param:mpi_built_with_cuda_support:value");
    std::string cuda = cudaValue.value_or("unknown");
    bool ucx = ompi->find("mca:pml:ucx:") != std::string::npos;
    Check c{"host.openmpi",
            Status::kPass,
            "Open MPI",
            fmt::format("{}, CUDA support {}, UCX PML {}", *version, cuda, ucx ? "yes" : "no"),
            "",
            ""};
    if (rdma && !ucx) {
      c.status = Status::kWarn;
      c.fix = "this Open MPI has no UCX PML, so MPI traffic uses TCP: install one built with UCX";
    } else if (gpus && cuda != "true") {
      c.status = Status::kWarn;
      c.fix = "MPI calls on GPU buffers will fail (NCCL is unaffected): use an Open MPI built --with-cuda";
    }
    report.add(c);
  }
  auto ucx = tools.run({"ucx_info", "-v"});
  std::optional<std::string> ucxVersionText = ucx ? ucxVersion(*ucx) : std::nullopt;
  if (ucxVersionText) {
    report.add({"host.ucx", Status::kPass, "UCX", "version " + *ucxVersionText, "", ""});
  } else {
    report.add({"host.ucx", rdma ? Status::kWarn : Status::kSkip, "ucx_info",
                "ucx_info cannot be run or names no version" +
                    std::string(rdma ? "" : " (no RDMA device: UCX unused)"),
                rdma ? "install UCX's tools (apt-get install ucx-utils) to see the UCX version" : "", ""});
  }
}

}  // namespace poolrun::doctor::detail
