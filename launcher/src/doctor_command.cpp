#include <unistd.h>

#include <boost/program_options.hpp>
#include <sstream>

#include "command_options.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/doctor/doctor.hpp"
#include "poolrun/launcher/commands.hpp"
#include "poolrun/launcher/slurm.hpp"

namespace po = boost::program_options;

namespace poolrun::launcher {
namespace {

constexpr const char* kDoctorUsage =
    "usage: poolrun doctor [--sysfs-root DIR] [--proc-root DIR] [--dev-root DIR] [--nic NIC[:PORT],...]\n"
    "                      [--mtu N] [--json] [--slurm]\n"
    "Checks this node for what makes NCCL jobs hang or run slow: RDMA ports, RoCE GIDs and MTU,\n"
    "GPUDirect RDMA (peer memory, PCIe ACS, IOMMU), host settings, Open MPI and UCX, GPU health.\n"
    "--slurm runs it on every node of the Slurm allocation it is in and prints one table\n"
    "(environment: SLURM_JOB_ID and SLURM_JOB_NODELIST, the allocation).\n"
    "Exit status: 0 when nothing FAILs, 1 when a check FAILs, 2 on a bad command line.\n";

// "mlx5_0,mlx5_1:2" -> ports (port 1 where none is named).
std::vector<doctor::PlannedPort> parseNics(const std::string& text) {
  std::vector<doctor::PlannedPort> out;
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    doctor::PlannedPort p;
    size_t colon = item.find(':');
    p.nic = item.substr(0, colon);
    if (colon != std::string::npos) {
      try {
        size_t used = 0;
        p.port = std::stoi(item.substr(colon + 1), &used);
        if (used != item.size() - colon - 1 || p.port < 1) throw std::invalid_argument("port");
      } catch (const std::exception&) {
        throw badInput("--nic '" + item + "': expected NIC or NIC:PORT with PORT 1 or more (e.g. mlx5_0:1)");
      }
    }
    if (p.nic.empty()) throw badInput("--nic '" + item + "': the NIC name is empty (e.g. mlx5_0:1)");
    out.push_back(p);
  }
  if (out.empty()) throw badInput("--nic '" + text + "': name at least one NIC (e.g. mlx5_0,mlx5_1)");
  return out;
}

}  // namespace

int doctorCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CommandOptions command("poolrun doctor options", {kDoctorUsage, "", ""});
  std::string sysRoot = "/sys", procRoot = "/proc", devRoot = "/dev", nics;
  int mtu = 9000;
  // clang-format off
  command.add()
      ("sysfs-root", po::value(&sysRoot)->value_name("DIR"), "read DIR instead of /sys")
      ("proc-root", po::value(&procRoot)->value_name("DIR"), "read DIR instead of /proc")
      ("dev-root", po::value(&devRoot)->value_name("DIR"), "read DIR instead of /dev")
      ("nic", po::value(&nics)->value_name("LIST"), "check only these RDMA ports (NIC or NIC:PORT, comma-separated)")
      ("mtu", po::value(&mtu)->value_name("N"), "the netdev MTU the RoCE fabric expects (default 9000)")
      ("json", "print a JSON document")
      ("slurm", "run on every node of this Slurm allocation (one srun task per node), one table");
  // clang-format on
  po::variables_map vm;
  if (std::optional<int> status = command.parse(args, vm, out, err)) return *status;
  try {
    if (mtu < 576 || mtu > 65535)
      throw badInput("--mtu " + std::to_string(mtu) + ": expected 576 to 65535 (e.g. 9000)");
    for (const auto& [option, dir] :
         {std::pair{"--sysfs-root", sysRoot}, {"--proc-root", procRoot}, {"--dev-root", devRoot}}) {
      std::error_code ec;
      if (!std::filesystem::is_directory(dir, ec))
        throw Error(ErrorCode::kNotFound, std::string(option) + " " + dir + ": not a directory");
    }
    if (vm.count("slurm")) {
      std::vector<std::string> passed;
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--slurm" || args[i] == "--json") continue;
        passed.push_back(args[i]);
      }
      std::error_code ec;
      std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
      std::unique_ptr<pool::slurm::SlurmSystem> slurm = pool::slurm::realSlurmSystem();
      doctor::Report report = doctorOnAllocation(*slurm, ec ? "poolrun" : self, passed, err);
      out << (vm.count("json") ? doctor::toJson(report) : doctor::toText(report));
      return report.failed() ? 1 : 0;
    }
    doctor::NodeSources sources;
    sources.roots = {sysRoot, procRoot, devRoot};
    // A replaced root stands for another machine: the GPUs and tools here would not be its own.
    bool thisMachine = sysRoot == "/sys" && procRoot == "/proc" && devRoot == "/dev";
    std::unique_ptr<doctor::GpuQuery> gpus = doctor::nvmlGpuQuery(sibling("poolrun-cuda-probe"));
    std::unique_ptr<doctor::ToolRunner> tools = doctor::processToolRunner();
    if (thisMachine) {
      sources.gpus = gpus.get();
      sources.tools = tools.get();
    }
    doctor::Scope scope;
    scope.jumbo_mtu = mtu;
    if (vm.count("nic")) {
      scope.planned = true;
      scope.ports = parseNics(nics);
    }
    doctor::Report report = doctor::checkNode(sources, scope);
    if (vm.count("json")) {
      out << doctor::toJson(report);
    } else {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      out << "poolrun doctor: " << host
          << (thisMachine ? "" : " (sysfs " + sysRoot + ", proc " + procRoot + ", dev " + devRoot + ")")
          << "\n";
      auto skipped = [&](const char* id) {
        return std::any_of(report.checks.begin(), report.checks.end(), [&](const doctor::Check& c) {
          return c.id == id && c.status == doctor::Status::kSkip;
        });
      };
      if (skipped("rdma") && (skipped("gpu") || !thisMachine)) {
        out << "Nothing to check for RDMA, RoCE or GPUDirect RDMA on this node: it has no RDMA device"
            << (thisMachine ? " and no GPU that NVML can see" : "") << ". Host checks follow.\n";
      }
      out << "\n" << doctor::toText(report);
    }
    return report.failed() ? 1 : 0;
  } catch (const std::exception& e) {
    return reportError(e, err);
  }
}

}  // namespace poolrun::launcher
