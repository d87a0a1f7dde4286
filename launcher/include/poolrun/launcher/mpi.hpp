#pragma once

// The Open MPI command line for a plan: the installed flavour (4.x mpirun, 5.x mpirun/prterun)
// decides the syntax; the plan decides the hosts, the rankfile and every rank's environment.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "poolrun/launcher/plan.hpp"

namespace poolrun::launcher {

enum class MpiFlavor { kOmpi4, kOmpi5 };
std::string toString(MpiFlavor flavor);

struct MpiInstall {
  std::string mpirun;  // path or name of the binary
  MpiFlavor flavor = MpiFlavor::kOmpi4;
  std::string version;  // "4.1.4"
};

// Runs `mpirun --version` to learn the flavour. `forced` skips the detection. Throws
// poolrun::Error (kNotFound) naming the binary when it cannot be run, (kUnsupported) when it is not
// Open MPI 4 or 5.
MpiInstall detectMpi(const std::string& mpirun, std::optional<MpiFlavor> forced);
// The flavour in `mpirun --version` output, if it is Open MPI.
std::optional<std::pair<MpiFlavor, std::string>> parseMpiVersion(const std::string& output);

struct LaunchSpec {
  const JobPlan* plan = nullptr;
  std::filesystem::path job_dir;
  std::string rank_wrapper;  // poolrun-rank
  std::vector<std::string> program;
  // Simulated cluster: every node runs here, started by this agent, over loopback.
  bool simulated = false;
  std::string sim_agent;
  // The nodes' daemons started by their agents (docs/launch.md): poolrun-rsh as mpirun's remote
  // shell, reading the nodes' agents and credentials from launch_file. Empty: ssh, or sim_agent.
  std::string rsh_agent;
  std::filesystem::path launch_file;
  int local_cores = 1;  // cores (or hardware threads) of this machine the sim rankfile maps onto
  int local_threads = 1;
  // Variables every rank gets (-x NAME, value set in mpirun's environment).
  std::vector<std::pair<std::string, std::string>> job_env;
  // The user's pass-through: -x VAR[=VALUE] and --mca KEY VALUE.
  std::vector<std::string> user_exports;
  std::vector<std::pair<std::string, std::string>> user_mca;
  // Every line of the ranks' output prefixed with its rank (4.x --tag-output, 5.x --output tag).
  bool tag_output = false;
  // --mpirun-arg: options given to mpirun verbatim, after poolrun's own, before the program.
  std::vector<std::string> mpirun_args;
};

struct MpiCommand {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // set in mpirun's environment
  std::string hostfile, rankfile;                        // text written to the job directory
};

// The command for `spec`; pure but for reading $SHELL (the caller writes hostfile and rankfile into
// the job directory).
MpiCommand buildMpiCommand(const LaunchSpec& spec, const MpiInstall& mpi);

// Whether Open MPI's launcher knows `shell` (a path or null) well enough to word a remote command for
// it without a warning: sh, bash, zsh, ksh, csh, tcsh.
bool openMpiKnowsShell(const char* shell);

// The POOLRUN_RANK_ENV document of a plan (see poolrun/runtime/rank_env.hpp for the format). For a
// simulated cluster it adds POOLRUN_PLANNED_CPUSET, the cores the plan chose on the real node;
// otherwise POOLRUN_CPUSET and POOLRUN_NUMA, the cores and memory node poolrun-rank binds the rank to.
std::string encodeRankEnv(const JobPlan& plan, bool simulated);

// The rendezvous torch.distributed's env:// initialisation needs, the same for every rank of the job:
// MASTER_ADDR (rank 0's node; 127.0.0.1 on a simulated cluster, whose nodes all run on this machine)
// and MASTER_PORT (`port`), and for a simulated job GLOO_SOCKET_IFNAME=lo (where poolrun's
// environment has none). A variable in `user_env` (the user's -x) wins and is left out.
std::vector<std::pair<std::string, std::string>> rendezvousVariables(
    const JobPlan& plan, bool simulated, int port, const std::map<std::string, std::string>& user_env);
// A TCP port the kernel reports free on this machine now (bound to port 0, then closed), picked once
// per job for MASTER_PORT; 29500 (torchrun's default) where the kernel gives none. On a real cluster
// rank 0 runs on another node, where the port is very probably but not surely free: -x MASTER_PORT=N
// chooses it.
int pickRendezvousPort();

// `a b 'c d'`: the command as a shell would need it.
std::string shellJoin(const std::vector<std::string>& argv);

// `cmd` as a POSIX shell script (the job directory's run.sh): every variable of `cmd.env` exported,
// its value quoted as it is, a `cd` to `workdir` (where poolrun ran: the program's relative paths),
// then `exec` of `cmd.argv`. `sh run.sh` starts the job as poolrun would, from the same job
// directory (its hostfile and rankfile), without poolrun's lease and supervision.
std::string launchScript(const MpiCommand& cmd, const std::filesystem::path& workdir);
// `cmd` for people (the job directory's command file, what --dry-run prints): one `VAR=VALUE \`
// line per variable, then the command. A variable named in `from_files` is read from that file
// (`VAR="$(cat FILE)"`), so that long JSON values stay readable; the text runs as printed.
std::string readableCommand(const MpiCommand& cmd, const std::map<std::string, std::string>& from_files);

}  // namespace poolrun::launcher
