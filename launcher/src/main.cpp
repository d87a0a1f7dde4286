// poolrun: take GPUs from a pool, bind every rank to its GPU, NIC and cores, run the job.

#include <iostream>
#include <string>
#include <vector>

#include "poolrun/launcher/commands.hpp"
#include "poolrun/topo/version.hpp"

namespace {

constexpr const char* kUsage =
    "usage: poolrun [options] -n N [--] PROGRAM [ARGS...]   run a job (poolrun --help)\n"
    "       poolrun COMMAND [options]\n"
    "       poolrun --version\n"
    "\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help") {
    (args.empty() ? std::cerr : std::cout) << kUsage << poolrun::launcher::kCommandList;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << poolrun::topo::versionText("poolrun");
    return 0;
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
  std::cerr << "poolrun: error: unknown command '" << command << "'\n"
            << kUsage << poolrun::launcher::kCommandList;
  return 2;
}
