// poolrun: take GPUs from a pool, bind every rank to its GPU, NIC and cores, run the job.

#include <iostream>
#include <string>
#include <vector>

#include "poolrun/launcher/commands.hpp"

namespace {

constexpr const char* kUsage =
    "usage: poolrun [options] -n N [--] PROGRAM [ARGS...]   run a job (poolrun --help)\n"
    "       poolrun <command> [options]\n"
    "\n"
    "commands:\n"
    "  topo     show how this node's GPUs, NICs, PCIe switches and NUMA nodes are wired\n"
    "  plan     show which GPU, NIC(s), cores and environment every rank of a job would get\n"
    "  doctor   check this node for what makes NCCL jobs hang or run slow (ports, GIDs, GPUDirect RDMA)\n"
    "  tuner    explain the NCCL tuner plugin's choices; calibrate it from nccl-tests logs\n"
    "\n"
    "Run `poolrun <command> --help` for the options of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help") {
    (args.empty() ? std::cerr : std::cout) << kUsage;
    return args.empty() ? 2 : 0;
  }
  std::string command = args[0];
  if (command.starts_with("-")) return poolrun::launcher::runCommand(args, std::cout, std::cerr);
  args.erase(args.begin());
  try {
    if (command == "topo") return poolrun::launcher::topoCommand(args, std::cout, std::cerr);
    if (command == "plan") return poolrun::launcher::planCommand(args, std::cout, std::cerr);
    if (command == "doctor") return poolrun::launcher::doctorCommand(args, std::cout, std::cerr);
    if (command == "tuner") return poolrun::launcher::tunerCommand(args, std::cout, std::cerr);
  } catch (const std::exception& e) {
    return poolrun::launcher::reportError(e, std::cerr);
  }
  std::cerr << "poolrun: error: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
