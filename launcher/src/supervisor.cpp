#include "poolrun/launcher/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "poolrun/common/error.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/pool/client.hpp"

namespace poolrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

const int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

std::string signalName(int sig) {
  const char* d = strsignal(sig);
  return "signal " + std::to_string(sig) + (d != nullptr ? std::string(" (") + d + ")" : "");
}

// Starts mpirun the way posix_spawn does, sharing poolrun's memory until the exec (no copy of its
// page tables, no copy-on-write faults after), with what posix_spawn cannot do: PR_SET_PDEATHSIG.
// Everything the child needs is prepared here; the child makes system calls only.
class Spawn {
 public:
  Spawn(const SuperviseOptions& options, const sigset_t& mask, int stderrFd)
      : mask_(mask), stderrFd_(stderrFd), parent_(getpid()) {
    path_ = findExecutable(options.argv.at(0));
    for (const std::string& a : options.argv) argv_.push_back(const_cast<char*>(a.c_str()));
    argv_.push_back(nullptr);
    std::map<std::string, std::string> overrides(options.env.begin(), options.env.end());
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view kv(*e);
      if (!overrides.contains(std::string(kv.substr(0, kv.find('='))))) envp_.push_back(*e);
    }
    for (const auto& [k, v] : overrides) envText_.push_back(k + "=" + v);
    for (std::string& kv : envText_) envp_.push_back(kv.data());
    envp_.push_back(nullptr);
  }

  // The child's pid (it has exec'ed or failed to when this returns), or -1 with errno.
  pid_t start() {
    stack_.resize(64 * 1024);
    return clone(&Spawn::child, stack_.data() + stack_.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, this);
  }

  int execErrno = 0;  // set by the child when the exec failed (it then exits with 127)

 private:
  static int child(void* arg) {
    auto* self = static_cast<Spawn*>(arg);
    // mpirun gets its own process group (terminal signals reach poolrun only, which forwards them
    // once) and dies with poolrun.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self->parent_) _exit(127);
    sigprocmask(SIG_SETMASK, &self->mask_, nullptr);
    dup2(self->stderrFd_, STDERR_FILENO);
    execve(self->path_.c_str(), self->argv_.data(), self->envp_.data());
    self->execErrno = errno;
    _exit(127);
  }

  sigset_t mask_;
  int stderrFd_;
  pid_t parent_;
  std::string path_;
  std::vector<char*> argv_, envp_;
  std::vector<std::string> envText_;
  std::vector<char> stack_;
};

// The processes of /proc with their parents: pid -> ppid.
std::map<pid_t, pid_t> processParents() {
  std::map<pid_t, pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
    std::istringstream fields(close == std::string::npos ? "" : line.substr(close + 2));
    std::string state, ppid;
    if (fields >> state >> ppid)
      out[common::digitsValue(name)] = static_cast<pid_t>(common::digitsValue(ppid));
  }
  return out;
}

// The processes whose parent is this one: /proc/self/task/TID/children for every thread (a child
// is listed under the thread that started it, an orphan under the one the kernel chose), else, on a
// kernel without CONFIG_PROC_CHILDREN, every /proc/PID/stat whose parent field is this process.
std::set<pid_t> childProcesses() {
  std::set<pid_t> out;
  std::error_code ec;
  bool listed = false;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "children");
    if (!in) continue;
    listed = true;
    for (pid_t p; in >> p;) out.insert(p);
  }
  if (listed) return out;
  for (const auto& [pid, ppid] : processParents())
    if (ppid == getpid()) out.insert(pid);
  return out;
}

// This process as a child subreaper (PR_SET_CHILD_SUBREAPER) for the job's time: a process of the
// job whose parent exits is given to it instead of init, so that at the end the job's leftovers are
// all its children, found and ended without knowing how they hid (a new session, a double fork).
// Children this process had before the job (Slurm's salloc holding the allocation) are left alone.
class Subreaper {
 public:
  Subreaper() : before_(childProcesses()) {
    int was = 0;
    prctl(PR_GET_CHILD_SUBREAPER, &was);
    was_ = was != 0;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  ~Subreaper() {
    if (!was_) prctl(PR_SET_CHILD_SUBREAPER, 0);
  }
  Subreaper(const Subreaper&) = delete;
  Subreaper& operator=(const Subreaper&) = delete;

  // Reaps the job's orphans that have ended, so that none waits as a zombie until the job's end.
  void reap(pid_t keep) const {
    for (pid_t p : childProcesses()) {
      if (p != keep && !before_.contains(p)) waitpid(p, nullptr, WNOHANG);
    }
  }

  // Kills (SIGKILL) and reaps every child of the job's, in rounds: a killed process's own children
  // become this one's in turn. A process the kernel cannot end at once (uninterruptible sleep) is
  // given up on after a few seconds, with a warning.
  void endOrphans(std::ostream& err) const {
    auto deadline = Clock::now() + std::chrono::seconds(5);
    for (;;) {
      std::set<pid_t> left;
      for (pid_t p : childProcesses()) {
        if (before_.contains(p)) continue;
        if (waitpid(p, nullptr, WNOHANG) != p) left.insert(p);
      }
      if (left.empty()) return;
      if (Clock::now() > deadline) {
        err << "poolrun: warning: " << left.size() << " process(es) of the job (pid " << *left.begin()
            << "...) did not end on SIGKILL within 5 s; they may be waiting on a device or a file system\n";
        return;
      }
      for (pid_t p : left) kill(p, SIGKILL);
      poll(nullptr, 0, 2);
    }
  }

 private:
  std::set<pid_t> before_;
  bool was_ = false;
};

// Whether the process's environment names an MPI rank (Open MPI 4.x and 5.x set OMPI_COMM_WORLD_RANK
// in every rank's). A process that cannot be read (gone, another user's) does not.
bool hasRankVariable(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  constexpr std::string_view kVar = "OMPI_COMM_WORLD_RANK=";
  for (std::string entry; std::getline(in, entry, '\0');)
    if (entry.starts_with(kVar)) return true;
  return false;
}

// The job's ranks on this machine: descendants of this process whose environment names a rank and
// whose parent's does not (mpirun and its daemons do not; what a rank starts inherits it). One walk
// of /proc: a few milliseconds, once per preemption.
std::vector<pid_t> ranksHere() {
  std::map<pid_t, pid_t> parents = processParents();
  std::multimap<pid_t, pid_t> children;
  for (const auto& [pid, ppid] : parents) children.emplace(ppid, pid);
  std::vector<pid_t> ranks, todo{getpid()};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    auto [from, to] = children.equal_range(p);
    for (auto it = from; it != to; ++it) {
      pid_t c = it->second;
      if (hasRankVariable(c) && !hasRankVariable(p))
        ranks.push_back(c);  // what it started is its own business: it gets no signal of ours
      else
        todo.push_back(c);
    }
  }
  return ranks;
}

// The rank whose environment `pid` has (OMPI_COMM_WORLD_RANK), or -1.
int rankOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  constexpr std::string_view kVar = "OMPI_COMM_WORLD_RANK=";
  for (std::string entry; std::getline(in, entry, '\0');)
    if (entry.starts_with(kVar)) return common::digitsValue(std::string_view(entry).substr(kVar.size()));
  return -1;
}

// "pid 4242 (sleep, left by rank 1)": a process of the job as a line names it.
std::string processText(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  const int rank = rankOf(pid);
  return "pid " + std::to_string(pid) + " (" + (comm.empty() ? "?" : comm) +
         (rank >= 0 ? ", left by rank " + std::to_string(rank) : "") + ")";
}

// Where every rank of the job on this machine has ended and only what they started remains (given
// to this process, their subreaper: `orphans`), the line that says so, naming them; "" otherwise.
// mpirun waits for every copy of a rank's output to close, so a `sleep &` of a rank that exited
// keeps the job "running" after its ranks are gone.
std::string leftBehindLine(const std::set<pid_t>& orphans, const std::vector<pid_t>& ranks) {
  std::vector<pid_t> left;
  for (pid_t r : ranks) {
    if (!orphans.contains(r)) return "";  // a rank still runs under mpirun's daemon
    left.push_back(r);
  }
  if (left.empty()) return "";
  std::string named;
  for (size_t i = 0; i < left.size() && i < 3; ++i) named += (i > 0 ? ", " : "") + processText(left[i]);
  if (left.size() > 3) named += " and " + std::to_string(left.size() - 3) + " more";
  return "the job's ranks have ended, but what they started has not: " + named +
         (left.size() == 1 ? " still holds" : " still hold") + " the job's output open";
}

// "SIGTERM"; "signal 40" where the C library has no name.
std::string signalAbbrev(int sig) {
  const char* a = sigabbrev_np(sig);
  return a != nullptr ? std::string("SIG") + a : "signal " + std::to_string(sig);
}

// The pool's reason as the line says it: "for ticket 12 of bob (priority 10, 8 GPUs)".
std::string preemptedFor(const std::string& reason) {
  if (reason.empty()) return "";
  if (reason.starts_with("preempted ")) return " " + reason.substr(10);
  return " (" + reason + ")";
}

using common::takeDigits;
using common::takePrefix;
using common::takeSpace;
using common::takeWord;

int toInt(std::string_view digits) {
  return common::digitsValue(digits);
}

// "process rank 1 with PID 1234 on node n1 exited on signal 9 (Killed)"
std::optional<RankFailure> signalFailure(std::string_view text) {
  constexpr std::string_view kStart = "process rank ";
  for (size_t at = text.find(kStart); at != std::string_view::npos; at = text.find(kStart, at + 1)) {
    std::string_view rest = text.substr(at + kStart.size());
    std::string_view rank = takeDigits(rest), node, sig;
    if (rank.empty() || !takePrefix(rest, " with PID ") || takeDigits(rest).empty() ||
        !takePrefix(rest, " on node ") || (node = takeWord(rest)).empty() ||
        !takePrefix(rest, " exited on signal ") || (sig = takeDigits(rest)).empty())
      continue;
    RankFailure f;
    f.rank = toInt(rank);
    f.node = std::string(node);
    f.signal = toInt(sig);
    return f;
  }
  return std::nullopt;
}

// "]\n  Exit code:    3": the end of the process name whose `rank` was read, then the exit code on a
// later line.
std::optional<RankFailure> exitBelow(std::string_view rank, std::string_view rest) {
  if (rank.empty() || !takePrefix(rest, "]") || takeSpace(rest).find('\n') == std::string_view::npos ||
      !takePrefix(rest, "Exit code:"))
    return std::nullopt;
  takeSpace(rest);
  std::string_view code = takeDigits(rest);
  if (code.empty()) return std::nullopt;
  RankFailure f;
  f.rank = toInt(rank);
  f.exit_code = toInt(code);
  return f;
}

// "Process name: [[48101,1],1]\n  Exit code:    3" (4.x), "[prterun-host-123@1,1]" (5.x): the
// rank after the job id ("48101,1", "prterun-host-123@1"), whose last part follows ',' or '@'; with
// `plain`, "[NAME,1]" where NAME has neither ',' nor ']'.
std::optional<RankFailure> exitFailure(std::string_view text, bool plain) {
  constexpr std::string_view kStart = "Process name:";
  for (size_t at = text.find(kStart); at != std::string_view::npos; at = text.find(kStart, at + 1)) {
    std::string_view rest = text.substr(at + kStart.size());
    takeSpace(rest);
    if (!takePrefix(rest, "[")) continue;
    if (plain) {
      size_t comma = rest.find_first_of(",]");
      if (comma == 0 || comma == std::string_view::npos || rest[comma] != ',') continue;
      rest.remove_prefix(comma + 1);
      std::string_view rank = takeDigits(rest);
      if (auto f = exitBelow(rank, rest)) return f;
      continue;
    }
    // The job id ends at a ',' or '@' before the first ']', followed by digits, "]," or "," and the
    // rank: the rightmost such one.
    for (size_t sep = std::min(rest.find(']'), rest.size()); sep-- > 0;) {
      if (rest[sep] != ',' && rest[sep] != '@') continue;
      std::string_view tail = rest.substr(sep + 1);
      if (takeDigits(tail).empty()) continue;
      takePrefix(tail, "]");
      if (!takePrefix(tail, ",")) continue;
      std::string_view rank = takeDigits(tail);
      if (auto f = exitBelow(rank, tail)) return f;
    }
  }
  return std::nullopt;
}

// srun (--launcher srun): "srun: error: sn01: task 1: Exited with exit code 7",
// "srun: error: sn01: tasks 1-2: Killed" (the signal's strsignal() text). The first such line
// decides: nullopt where it says neither.
std::optional<RankFailure> srunFailure(std::string_view text) {
  constexpr std::string_view kStart = "srun: error: ";
  for (size_t at = text.find(kStart); at != std::string_view::npos; at = text.find(kStart, at + 1)) {
    std::string_view rest = text.substr(at + kStart.size());
    std::string_view node = takeWord(rest);
    if (node.size() < 2 || !node.ends_with(':') || !takePrefix(rest, " task")) continue;
    node.remove_suffix(1);
    takePrefix(rest, "s");
    std::string_view rank;
    if (!takePrefix(rest, " ") || (rank = takeDigits(rest)).empty()) continue;
    rest.remove_prefix(std::min(rest.find_first_not_of("-,0123456789"), rest.size()));
    std::string_view how = rest.substr(0, rest.find('\n'));
    if (!takePrefix(how, ": ") || how.empty()) continue;
    RankFailure f;
    f.node = std::string(node);
    f.rank = toInt(rank);
    constexpr std::string_view kCode = "Exited with exit code ";
    for (size_t c = how.find(kCode); c != std::string_view::npos; c = how.find(kCode, c + 1)) {
      std::string_view after = how.substr(c + kCode.size());
      std::string_view code = takeDigits(after);
      if (code.empty()) continue;
      f.exit_code = toInt(code);
      return f;
    }
    for (int sig = 1; sig < 32; ++sig) {
      const char* name = strsignal(sig);
      if (name != nullptr && how.starts_with(name)) {
        f.signal = sig;
        return f;
      }
    }
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::string findExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* env = std::getenv("PATH");
  std::string_view dirs = env != nullptr ? env : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = std::min(dirs.find(':', start), dirs.size());
    std::string dir(dirs.substr(start, end - start));
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return name;
}

std::optional<RankFailure> parseMpiFailure(const std::string& text) {
  if (auto f = signalFailure(text)) return f;
  if (auto f = exitFailure(text, false)) return f;
  if (auto f = exitFailure(text, true)) return f;
  return srunFailure(text);
}

std::optional<DaemonFailure> parseDaemonFailure(const std::string& text) {
  std::optional<DaemonFailure> banner;
  std::string_view all = text;
  while (!all.empty()) {
    const size_t end = all.find('\n');
    std::string_view line = all.substr(0, end);
    all = end == std::string_view::npos ? std::string_view() : all.substr(end + 1);
    std::string_view rest = line;
    auto named = [&](std::string_view node) {
      return DaemonFailure{std::string(node), std::string(common::trim(line))};
    };
    // poolrun-rsh's: "poolrun: cannot start the job's daemon on node N: why", or "lost the job's daemon".
    if (takePrefix(rest, "poolrun: cannot start the job's daemon on node ") ||
        takePrefix(rest, "poolrun: lost the job's daemon on node "))
      return DaemonFailure{std::string(rest.substr(0, rest.find(':'))),
                           std::string(common::trim(rest.substr(std::min(rest.size(), rest.find(':') + 2))))};
    // ssh's own lines: "ssh: Could not resolve hostname N: ...", "ssh: connect to host N port 22: ...".
    if (takePrefix(rest, "ssh: Could not resolve hostname ") || takePrefix(rest, "ssh: connect to host "))
      return named(rest.substr(0, std::min(rest.find(':'), rest.find(' '))));
    // "user@N: Permission denied (publickey,password)."
    if (size_t at = line.find(": Permission denied ("); at != std::string_view::npos) {
      std::string_view who = line.substr(0, at);
      if (who.find(' ') == std::string_view::npos) return named(who.substr(who.find('@') + 1));
    }
    if (line.starts_with("Host key verification failed")) return named("");
    if (!banner && (line.find("was unable to reliably start one or more daemons") != std::string_view::npos ||
                    line.find("has lost communication with a remote daemon") != std::string_view::npos))
      banner = DaemonFailure{"", std::string(common::trim(line))};
  }
  return banner;
}

SuperviseResult supervise(const SuperviseOptions& options, std::ostream& err) {
  sigset_t mask, old;
  sigemptyset(&mask);
  for (int s : kForwarded) sigaddset(&mask, s);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &old);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  int errPipe[2];
  if (sfd < 0 || pipe2(errPipe, O_CLOEXEC) != 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    throw Error(ErrorCode::kIo, std::string("cannot set up process supervision: ") + std::strerror(errno));
  }
  // The renewal thread starts with the job's signals blocked, so that they reach the signalfd only.
  LeaseKeeper* lease = options.lease;
  try {
    if (lease != nullptr) lease->start();
  } catch (...) {
    for (int fd : {errPipe[0], errPipe[1], sfd}) close(fd);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  // What the job's processes leave behind when their parents exit (a rank's `setsid daemon &`, the
  // Open MPI daemons once mpirun has gone) becomes this process's child rather than init's.
  Subreaper subreaper;
  Spawn spawn(options, old, errPipe[1]);
  pid_t child = spawn.start();
  if (child < 0) {
    int e = errno;
    for (int fd : {errPipe[0], errPipe[1], sfd}) close(fd);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (lease != nullptr) lease->stop();
    throw Error(ErrorCode::kIo, std::string("cannot start mpirun: clone: ") + std::strerror(e));
  }
  if (spawn.execErrno != 0) {
    err << "poolrun: error: cannot run " << options.argv[0] << ": " << std::strerror(spawn.execErrno)
        << "; check that it is installed and in PATH (or name it: --mpirun PATH)\n";
  }
  setpgid(child, child);  // also here, so that the group exists before any signal is forwarded
  close(errPipe[1]);
  // Signals and mpirun's output wait in the signalfd and the pipe meanwhile.
  if (options.started) options.started();

  SuperviseResult result;
  std::string errText;  // mpirun's stderr, kept for the failure report (bounded)
  auto start = Clock::now();
  // When --timeout ends the job: its earlier starts count.
  const auto timeoutAt = [&] { return start + *options.timeout - options.ran_before; };
  std::optional<Clock::time_point> killAt, lastInt;
  bool exited = false;
  int status = 0;
  bool pipeOpen = true;

  auto terminate = [&](const std::string& why) {
    if (!killAt) {
      kill(child, SIGTERM);
      killAt = Clock::now() + options.kill_grace;
      err << "poolrun: " << why << "\n";
    }
  };

  // The pool's notice: the preempt signal now, SIGKILL at the deadline. A job already ending (its
  // timeout, a lost lease) ends as it was, by the deadline at the latest.
  bool preemptKill = false;
  auto tellDeadline = [&](const PreemptNotice& notice) {
    if (!options.preempted) return;
    try {
      options.preempted(notice);
    } catch (const std::exception& e) {
      err << "poolrun: warning: " << e.what() << "\n";
    }
  };
  auto preempt = [&](const PreemptNotice& notice, Clock::time_point now) {
    // On this machine's clocks; a notice that comes late (a pool unreachable meanwhile) still gives
    // the job a moment.
    auto sysNow = std::chrono::system_clock::now();
    auto deadline = std::max(now + std::chrono::duration_cast<Clock::duration>(notice.deadline - sysNow),
                             now + std::chrono::seconds(1));
    if (killAt) {
      // A preemption while the job ends for a change of size: it ends for the preemption, and the
      // ranks are told the preemption's deadline where it comes first.
      if (!notice.resize && result.resized) {
        result.resized = false;
        result.preempted = true;
        err << "poolrun: lease " << lease->id() << " is preempted" << preemptedFor(notice.reason)
            << " while the job ends for its change of size: it is not restarted\n";
        if (deadline < *killAt) tellDeadline(notice);
      }
      killAt = std::min(*killAt, deadline);
      return;
    }
    (notice.resize ? result.resized : result.preempted) = true;
    tellDeadline(notice);
    std::vector<pid_t> ranks;
    if (options.preempt_ranks_here) ranks = ranksHere();
    for (pid_t r : ranks) kill(r, options.preempt_signal);
    if (ranks.empty()) kill(child, options.preempt_signal);
    killAt = deadline;
    preemptKill = true;
    auto left =
        std::chrono::duration_cast<std::chrono::seconds>(deadline - now + std::chrono::milliseconds(500));
    const std::string sent = "sent " + signalAbbrev(options.preempt_signal) + " to the job, ";
    err << "poolrun: lease " << lease->id()
        << (notice.resize
                ? " changes size (" + notice.reason + "): " + sent +
                      "to restart it at the new size; it is killed at "
                : " is preempted" + preemptedFor(notice.reason) + ": " + sent + "which is killed at ")
        << pool::formatLocalTime(
               sysNow + std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - now),
               sysNow)
        << " (in " << left.count() << " s)\n";
  };

  while (!exited || pipeOpen) {
    auto now = Clock::now();
    auto deadline = now + std::chrono::seconds(1);
    if (!exited) {
      if (lease != nullptr && !result.lease_lost) deadline = std::min(deadline, lease->expiry());
      if (options.timeout) deadline = std::min(deadline, timeoutAt());
      if (killAt) deadline = std::min(deadline, *killAt);
    }
    int waitMs = static_cast<int>(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()));
    pollfd fds[3] = {{sfd, POLLIN, 0},
                     {pipeOpen ? errPipe[0] : -1, POLLIN, 0},
                     {lease != nullptr && !exited ? lease->fd() : -1, POLLIN, 0}};
    int n = poll(fds, 3, exited ? 200 : waitMs);
    if (n < 0 && errno != EINTR) break;
    if (fds[1].revents & (POLLIN | POLLHUP)) {
      char buf[4096];
      ssize_t got = read(errPipe[0], buf, sizeof buf);
      if (got <= 0) {
        pipeOpen = false;
      } else {
        err.write(buf, got);
        err.flush();
        if (errText.size() < (1u << 20)) errText.append(buf, static_cast<size_t>(got));
      }
    }
    if (exited && n == 0) break;  // mpirun is gone and its stderr has been quiet
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {
        int sig = static_cast<int>(si.ssi_signo);
        if (sig == SIGCHLD) {
          // mpirun, or an orphan of the job that ended (reaped now, not left a zombie for the
          // whole job). One SIGCHLD may stand for several children.
          if (!exited && waitpid(child, &status, WNOHANG) == child) exited = true;
          subreaper.reap(child);
          continue;
        }
        if (exited) continue;
        result.forwarded_signal = sig;
        if (sig == SIGINT && lastInt && Clock::now() - *lastInt < std::chrono::seconds(3)) {
          err << "poolrun: second interrupt: killing the job\n";
          kill(-child, SIGKILL);
          continue;
        }
        if (sig == SIGINT) lastInt = Clock::now();
        err << "poolrun: forwarding " << signalName(sig) << " to mpirun"
            << (sig == SIGINT ? " (Ctrl-C again within 3 s kills it)" : "") << "\n";
        kill(child, sig);
      }
    }
    if (exited) continue;
    now = Clock::now();
    if (options.timeout && now >= timeoutAt() && !result.timed_out) {
      result.timed_out = true;
      std::set<pid_t> orphans = childProcesses();
      orphans.erase(child);
      const std::string left = leftBehindLine(orphans, ranksHere());
      terminate("the job ran past --timeout " + std::to_string(options.timeout->count() / 1000) +
                " s: ending it" + (left.empty() ? "" : " (" + left + ")"));
    }
    if (lease != nullptr) {
      LeaseKeeper::News news = lease->take(now);
      for (const std::string& line : news.lines) err << "poolrun: " << line << "\n";
      if (news.preempted) preempt(*news.preempted, now);
      if (news.lost && !result.lease_lost) {
        result.lease_lost = true;
        terminate(*news.lost);
      }
    }
    if (killAt && now >= *killAt) {
      if (preemptKill) {
        std::set<pid_t> orphans = childProcesses();
        orphans.erase(child);
        if (std::string left = leftBehindLine(orphans, ranksHere()); !left.empty())
          err << "poolrun: " << left << " at the " << (result.resized ? "resize's" : "preemption's")
              << " deadline: killing it (SIGKILL)\n";
        else
          err << "poolrun: the " << (result.resized ? "resized" : "preempted")
              << " job had not ended by its deadline: killing it (SIGKILL)\n";
        // The ranks here at once (each leads a process group of its own under Open MPI's daemons),
        // rather than when the daemons notice that mpirun has gone.
        if (options.preempt_ranks_here)
          for (pid_t r : ranksHere())
            if (kill(-r, SIGKILL) != 0) kill(r, SIGKILL);
        preemptKill = false;
      }
      kill(-child, SIGKILL);
      killAt = now + std::chrono::hours(1);
    }
  }
  if (!exited) waitpid(child, &status, 0);
  if (lease != nullptr) lease->stop();
  kill(-child, SIGKILL);  // anything of the job still in mpirun's process group
  subreaper.endOrphans(err);
  close(errPipe[0]);
  close(sfd);
  sigprocmask(SIG_SETMASK, &old, nullptr);

  // Which rank failed, and how, from mpirun's (or srun's) report; a clean exit has none to look
  // for (and compiling the patterns would cost every job about a millisecond).
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    result.failure = parseMpiFailure(errText);
    result.lost = parseDaemonFailure(errText);
    if (!result.failure) result.unreachable = result.lost;
  }
  // A job stopped for its lease's change of size is restarted only where nothing else ended it:
  // the user's signal, --timeout or the lease's loss win.
  if (result.resized && (result.forwarded_signal != 0 || result.timed_out || result.lease_lost))
    result.resized = false;
  if (result.preempted || result.resized) {
    result.exit_status = kExitPreempted;  // whatever the ranks made of the signal
  } else if (result.timed_out) {
    result.exit_status = kExitTimeout;
  } else if (result.lease_lost) {
    result.exit_status = kExitLeaseLost;
  } else if (result.unreachable) {
    result.exit_status = kExitRefused;  // no rank ran: the job could not start
  } else if (result.failure) {
    result.exit_status = result.failure->signal != 0
                             ? 128 + std::min(result.failure->signal, 127)  // a status is a byte
                             : (result.failure->exit_code != 0 ? result.failure->exit_code : 1);
  } else if (WIFEXITED(status)) {
    result.exit_status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_status = 128 + WTERMSIG(status);
  }
  // A job the user interrupted ends as the signal says, whatever mpirun made of it.
  if (result.forwarded_signal != 0 && !result.timed_out && !result.lease_lost) {
    result.exit_status = 128 + result.forwarded_signal;
  }
  return result;
}

}  // namespace poolrun::launcher
