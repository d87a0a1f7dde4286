#pragma once

// The subcommands of the `poolrun` binary. Each takes its arguments (without the subcommand name)
// and the streams to write to, and returns the process exit status: 0 success, 1 failure, 2 bad
// input or usage. User-facing errors are printed as one line "poolrun: error: ..." on `err`.

#include <ostream>
#include <string>
#include <vector>

namespace poolrun::launcher {

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
