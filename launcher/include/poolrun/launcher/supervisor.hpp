#pragma once

// Runs mpirun and watches it: forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT (a second SIGINT within
// a few seconds kills it), ends it past a timeout, keeps the lease (lease_keeper.hpp), and reports
// which rank failed and how. mpirun dies with poolrun (PR_SET_PDEATHSIG). The calling process is a
// child subreaper (PR_SET_CHILD_SUBREAPER) while the job runs, so that whatever the job's processes
// leave behind on this machine (a daemon a rank started with setsid, the simulated cluster's
// daemons) becomes its child: nothing the job started here is left running when supervise()
// returns.
//
// A preempted lease (LeaseKeeper::News::preempted) ends the job by the pool's deadline: the
// supervisor calls SuperviseOptions::preempted (poolrun writes the deadline file), sends the job
// the preempt signal, prints one line, and kills the job (SIGKILL) at the deadline if it has not
// ended by then; the job's exit status is then kExitPreempted. Where the ranks run on this machine
// (a simulated cluster, the local pool) the signal goes to the ranks themselves, not to mpirun:
// Open MPI 4.1's mpirun answers SIGTERM, SIGINT and SIGHUP by its own kill sequence (SIGCONT, then
// SIGTERM and SIGKILL each odls_base_sigkill_timeout later, 1 s by default), which would cut the
// grace short; docs/preemption.md has what was measured.

#include <chrono>
#include <csignal>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "poolrun/launcher/lease_keeper.hpp"

namespace poolrun::launcher {

// Exit statuses poolrun itself returns (documented in the README).
inline constexpr int kExitUsage = 2;        // bad command line
inline constexpr int kExitTimeout = 124;    // --timeout ended the job
inline constexpr int kExitRefused = 125;    // poolrun refused to start: the request cannot be met
inline constexpr int kExitLeaseLost = 126;  // the lease was lost (gone, or expired unrenewed): job ended
inline constexpr int kExitPreempted = 75;   // the pool preempted the lease: try again later (EX_TEMPFAIL)

struct RankFailure {
  int rank = -1;
  std::string node;  // from mpirun's message where it names one
  int exit_code = 0;
  int signal = 0;
};

// What mpirun's (Open MPI 4.x or 5.x) error text says about the first failing rank.
std::optional<RankFailure> parseMpiFailure(const std::string& text);

// mpirun could not start its daemon on a node: its remote shell (ssh) failed there, or ORTE/PRRTE
// said it could not start (or lost) its daemons. `node` where a line names it, else empty;
// `reason` the remote shell's line ("ssh: Could not resolve hostname dgx01: Name or service not
// known"), or Open MPI's first line.
struct DaemonFailure {
  std::string node;
  std::string reason;
};
std::optional<DaemonFailure> parseDaemonFailure(const std::string& text);

struct SuperviseOptions {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  std::optional<std::chrono::milliseconds> timeout;
  // How long the job ran in its earlier starts (an elastic job's restarts): --timeout counts them.
  std::chrono::milliseconds ran_before{0};
  // The job's lease, or none: started with mpirun, stopped when it has gone; its lines are printed
  // and the job is ended when it reports the lease lost (exit status kExitLeaseLost).
  LeaseKeeper* lease = nullptr;
  std::function<void()> started;  // once mpirun runs: work that may wait (the pool's idle())
  std::chrono::milliseconds kill_grace{10000};
  // The signal a preempted job gets, and where it is sent: to the ranks on this machine (the
  // processes of the job whose environment has OMPI_COMM_WORLD_RANK and whose parent's has not;
  // mpirun itself where none is found), or to mpirun, which forwards SIGUSR1 and SIGUSR2 as they
  // are (ranks on other machines).
  int preempt_signal = SIGTERM;
  bool preempt_ranks_here = false;
  // Called with the notice before the signal is sent (poolrun writes the deadline file).
  std::function<void(const PreemptNotice&)> preempted;
};

struct SuperviseResult {
  int exit_status = 0;  // what poolrun should return
  std::optional<RankFailure> failure;
  int forwarded_signal = 0;  // the signal a user sent, if any
  bool timed_out = false;
  bool lease_lost = false;
  bool preempted = false;  // the pool preempted the lease and the job was ended for it
  bool resized = false;    // the elastic lease changed size and the job was ended to restart on it
  // mpirun could not start the job on a node (its exit status is then kExitRefused).
  std::optional<DaemonFailure> unreachable;
  // A node's daemon that could not start or was lost (its remote shell's line, mpirun's banner),
  // whatever else failed: the evidence poolrun --retries restarts the job without the node by.
  std::optional<DaemonFailure> lost;
};

// The file execvp would run for `name`: `name` itself where it has a slash, else the first
// executable one in PATH's directories; `name` where there is none (its exec then fails: ENOENT).
std::string findExecutable(const std::string& name);

// Starts argv and returns when it, its process group and every process it left behind on this
// machine are gone (the last killed with SIGKILL and reaped). Messages go to `err`. While it runs,
// it reaps every child of the calling process that exits.
SuperviseResult supervise(const SuperviseOptions& options, std::ostream& err);

}  // namespace poolrun::launcher
