#pragma once

// The subcommands of the `poolrun` binary. Each takes its arguments (without the subcommand name)
// and the streams to write to, and returns the process exit status: 0 success, 1 failure, 2 bad
// input or usage. User-facing errors are printed as one line "poolrun: error: ..." on `err`.

#include <ostream>
#include <string>
#include <vector>

namespace poolrun::launcher {

// The subcommands, one line each, as `poolrun --help` and `poolrun help` list them.
inline constexpr const char* kCommandList =
    "commands:\n"
    "  topo     show how this node's GPUs, NICs, PCIe switches and NUMA nodes are wired\n"
    "  plan     show which GPU, NIC(s), cores and environment every rank of a job would get\n"
    "  doctor   check this node for what makes NCCL jobs hang or run slow (ports, GIDs, GPUDirect RDMA)\n"
    "  tuner    explain the NCCL tuner plugin's choices; calibrate it from nccl-tests logs\n"
    "Run `poolrun COMMAND --help` for the options of a command, `poolrun --version` for the versions.\n";

// poolrun topo [--from FILE] [--format matrix|json|nccl-xml|dot|svg] [--sysfs-root DIR] [-o FILE]
int topoCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// poolrun plan (--cluster FILE | --from TOPOLOGY) -n N [--gpus-per-node K] [--fabric F] [--json] [--out D]
int planCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// poolrun tuner explain --config FILE [...] | poolrun tuner calibrate --config FILE LOG...
int tunerCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// poolrun doctor [--sysfs-root DIR] [--proc-root DIR] [--dev-root DIR] [--nic LIST] [--mtu N] [--json]
int doctorCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// poolrun [options] -n N [--] PROGRAM [ARGS...]: run a job (see run_command.cpp for the options).
int runCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Exit status for an exception escaping a command, after printing it.
int reportError(const std::exception& e, std::ostream& err);

}  // namespace poolrun::launcher
