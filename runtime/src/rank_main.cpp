// poolrun-rank: the wrapper poolrun starts in front of every rank. It exports the rank's variables
// from its plan (POOLRUN_RANK_ENV), binds the process to its cores and its memory to their NUMA node
// and checks that the binding took, exports the variables torch.distributed expects, and execs the
// program, so that programs that never link poolrun get their GPU, NIC, binding and rank variables.
//
//   poolrun-rank PROGRAM [ARGS...]
//
// It runs once per rank before the program, so it is built on the rank core (core/), which
// allocates nothing and needs no C++ library, and linked statically against musl where the build
// has it (runtime/CMakeLists.txt): no loader, no relocations, no CPU probing at start-up.

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/binding.hpp"
#include "core/rank_env.hpp"
#include "core/rank_info.hpp"
#include "core/system.hpp"

namespace poolrun::runtime::core {
namespace {

// Memory for the environment poolrun-rank builds, taken once.
class Arena {
 public:
  explicit Arena(size_t size) : base_(static_cast<char*>(malloc(size))), size_(base_ == nullptr ? 0 : size) {}
  ~Arena() { free(base_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  bool ok() const { return base_ != nullptr; }
  char* take(size_t n) {
    n = (n + 7) & ~size_t{7};
    if (n > size_ - used_) return nullptr;
    char* p = base_ + used_;
    used_ += n;
    return p;
  }

 private:
  char* base_;
  size_t size_;
  size_t used_ = 0;
};

// The environment the program gets: the one poolrun-rank was given, with the plan's variables set.
class Environ final : public Variables, public VariableSink {
 public:
  Environ(char** envp, size_t capacity, Arena& arena) : arena_(arena) {
    entries_ = reinterpret_cast<char**>(arena.take((capacity + 1) * sizeof(char*)));
    capacity_ = entries_ == nullptr ? 0 : capacity;
    for (; envp != nullptr && *envp != nullptr && count_ < capacity_; ++envp) entries_[count_++] = *envp;
  }

  Text get(const char* name) const override {
    size_t i = find(name);
    if (i == count_) return {};
    return entries_[i] + length(name) + 1;
  }
  bool set(Text name, Text value) override {
    char* entry = arena_.take(name.size + value.size + 2);
    if (entry == nullptr) return false;
    for (size_t k = 0; k < name.size; ++k) entry[k] = name[k];
    entry[name.size] = '=';
    for (size_t k = 0; k < value.size; ++k) entry[name.size + 1 + k] = value[k];
    entry[name.size + 1 + value.size] = '\0';
    size_t i = find(name);
    if (i == count_) {
      if (count_ == capacity_) return false;
      ++count_;
    }
    entries_[i] = entry;
    return true;
  }
  bool set(const char* name, long value) {
    Line digits;
    digits.add(value);
    return set(name, digits.text());
  }
  // Every copy of `name`, the others keeping their order.
  void unset(const char* name) {
    size_t kept = 0;
    for (size_t i = 0; i < count_; ++i) {
      if (!(Text(entries_[i]).startsWith(name) && entries_[i][length(name)] == '='))
        entries_[kept++] = entries_[i];
    }
    count_ = kept;
  }
  // NULL-terminated, for execve.
  char** envp() {
    entries_[count_] = nullptr;
    return entries_;
  }

 private:
  size_t find(Text name) const {
    for (size_t i = 0; i < count_; ++i) {
      if (Text(entries_[i]).startsWith(name) && entries_[i][name.size] == '=') return i;
    }
    return count_;
  }

  Arena& arena_;
  char** entries_ = nullptr;
  size_t count_ = 0;
  size_t capacity_ = 0;
};

constinit BindingResult bindingResult;  // 7 KiB, kept off the stack

// One line to stderr, in one write so that the lines of a node's ranks do not interleave.
void say(Text line) {
  Line text;
  text.add("poolrun-rank: ").add(line.sub(0, Line::kCapacity - 64)).add("\n");
  ssize_t written = write(2, text.c_str(), text.text().size);
  (void)written;  // nowhere left to say it
}

// The rank Open MPI (or another PMIx launcher) gave this process.
int worldRank(const Environ& env) {
  static constexpr const char* kRankVariables[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                                   "SLURM_PROCID"};
  for (const char* var : kRankVariables) {
    long r = 0;
    if (parseNumber(env.get(var), (1L << 30) - 1, r)) return static_cast<int>(r);
  }
  return -1;
}

// "rank R on NODE: " before a message about this rank.
Line& about(Line& line, const Environ& env, int rank) {
  line.add("rank ").add(rank).add(" on ");
  if (Text node = env.get("POOLRUN_NODE"); !node.empty()) {
    line.add(node);
  } else {
    char host[256] = {};
    line.add(gethostname(host, sizeof host - 1) == 0 ? host : "this node");
  }
  return line.add(": ");
}

// One NUMA node (or a kernel without NUMA): /sys/devices/system/node/online names at most one.
bool singleNumaNode() {
  char online[256];
  Text t = readFile("/sys/devices/system/node/online", online, sizeof online);
  return !t.isSet() || (t.find(',') == t.size && t.find('-') == t.size);
}

// Binds as the plan says; returns false where POOLRUN_BIND=strict and the binding did not take.
bool bind(Environ& env, int rank) {
  CpuMask current = currentCpus();
  BindingRequest request;
  BindMode mode = BindMode::kOn;
  Line error;
  if (!bindingRequest(env, current, request, mode, error)) {
    Line line;
    say(about(line.add("error: "), env, rank).add(error.text()).text());
    return false;
  }
  if (mode == BindMode::kOff) return true;
  // Open MPI's rankfile has bound this process already where the plan names no cores of this
  // machine (the simulated cluster), and with one NUMA node there is no memory to place.
  static constinit LongLine cpus;  // any binding's list in full (64 KiB, off the stack)
  cpus.clear();
  if (!env.get("POOLRUN_CPUSET").isSet() && request.numa < 0 && singleNumaNode()) {
    request.cpus.addList(cpus);
    env.set("POOLRUN_BOUND_CPUS", cpus.text());
    env.set("POOLRUN_BOUND_MEMORY", "");
    return true;
  }
  SystemBinder machine;
  applyBinding(machine, request, bindingResult);
  const BindingResult& result = bindingResult;
  result.cpus.addList(cpus);
  env.set("POOLRUN_BOUND_CPUS", cpus.text());
  static constinit LongLine memory;
  memory.clear();
  for (unsigned n = result.memory.next(0); n < NodeMask::kSize; n = result.memory.next(n + 1))
    memory.add(memory.empty() ? "" : ",").add(n);
  env.set("POOLRUN_BOUND_MEMORY", memory.text());
  bool strict = mode == BindMode::kStrict;
  for (unsigned i = 0; i < result.problems.count; ++i) {
    Line line;
    say(about(line.add(strict ? "error: " : "warning: "), env, rank)
            .add(result.problems.items[i].text())
            .text());
  }
  return !strict || result.problems.count == 0;
}

// On real nodes the launcher asks each rank to look at its own RDMA ports before the program
// starts: a port that is down would hang the whole job in NCCL's setup.
bool portsUp(const Environ& env, int rank) {
  struct Report final : ProblemSink {
    const Environ& env;
    int rank;
    Report(const Environ& e, int r) : env(e), rank(r) {}
    void problem(Text p) override {
      Line line;
      about(line.add("error: "), env, rank)
          .add(p)
          .add("; run `poolrun doctor` there, or start with --no-doctor");
      say(line.text());
    }
  } report(env, rank);
  Text hca = env.get("NCCL_IB_HCA");
  Text root = env.get("POOLRUN_SYSFS_ROOT");
  return !hca.isSet() || downPorts(hca, root.isSet() ? root : Text("/sys"), report) == 0;
}

// An MPS share (poolrun --share): the GPU's MPS control daemon must run before CUDA starts here, or
// CUDA runs the program without MPS and without the share's limits. The node's agent starts it once
// poold tells it the GPU has shares, within a heartbeat or two of the grant: wait for the PID file
// the daemon writes in its pipe directory, at most POOLRUN_MPS_WAIT seconds.
bool mpsDaemonRuns(const Environ& env, int rank) {
  Text wait = env.get("POOLRUN_MPS_WAIT"), dir = env.get("CUDA_MPS_PIPE_DIRECTORY");
  long seconds = 0;
  if (!wait.isSet() || !dir.isSet() || !parseNumber(wait, 86400, seconds)) return true;
  Line pidFile;
  pidFile.add(dir).add("/nvidia-cuda-mps-control.pid");
  for (long waited = 0; access(pidFile.c_str(), F_OK) != 0; waited += 100) {
    if (waited >= seconds * 1000) {
      Line line;
      about(line.add("error: "), env, rank)
          .add("no MPS control daemon in ")
          .add(dir)
          .add(" after ")
          .add(seconds)
          .add(" s (no ")
          .add(pidFile.text())
          .add(
              "): is poold-agent running on this node, with --mps-dir naming the directory of "
              "$POOLRUN_MPS_DIR? "
              "`poolctl nodes` shows why a GPU failed");
      say(line.text());
      return false;
    }
    struct timespec tenth = {0, 100'000'000};
    nanosleep(&tenth, nullptr);
  }
  return true;
}

// The program, found as execvp finds it (PATH in order, past files it may not execute). A file
// without "#!" is run by /bin/sh: glibc's execvp does that itself, musl's leaves it to the shell,
// whose `exec` runs such a file as a script.
int run(char** argv, char** envp) {
  environ = envp;  // the PATH execvp searches is the program's
  execvp(argv[0], argv);
  int error = errno;
  if (error == ENOEXEC) {
    size_t argc = 0;
    while (argv[argc] != nullptr) ++argc;
    char** shell = static_cast<char**>(malloc((argc + 4) * sizeof(char*)));
    if (shell != nullptr) {
      shell[0] = const_cast<char*>("sh");
      shell[1] = const_cast<char*>("-c");
      shell[2] = const_cast<char*>("exec \"$0\" \"$@\"");
      for (size_t k = 0; k <= argc; ++k) shell[k + 3] = argv[k];
      execv("/bin/sh", shell);
      free(shell);
    }
  }
  Line line;
  line.add("error: cannot run ").quoted(argv[0]).add(": ");
  describe(line, error);
  say(line.add(" (check the program's path and that it is executable on every node)").text());
  return 127;
}

// The signals a launcher sends a rank, passed on to the program.
constexpr int kForwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM, SIGCONT, SIGTSTP};

// The children this process has now (the program, and orphans of its that were reparented here).
// /proc/PID/task/PID/children; false where the kernel does not list them.
bool children(long pid, LongLine& out) {
  Line path;
  path.add("/proc/").add(pid).add("/task/").add(pid).add("/children");
  static char text[65536];
  Text t = readFile(path.c_str(), text, sizeof text);
  if (!t.isSet()) return false;
  while (!t.empty() && (t[t.size - 1] == ' ' || t[t.size - 1] == '\n')) t = t.sub(0, t.size - 1);
  out.clear();
  out.add(t);
  return true;
}

void signalAll(Text pids, int signal) {
  for (size_t at = 0; at < pids.size;) {
    size_t end = pids.find(' ', at);
    long pid = 0;
    if (parseNumber(pids.sub(at, end - at), (1L << 22), pid) && pid > 1)
      kill(static_cast<pid_t>(pid), signal);
    at = end + 1;
  }
}

// The next signal from signalfd `fd` within `timeoutMs` (-1: no limit): its number, 0 on timeout.
int nextSignal(int fd, long timeoutMs) {
  pollfd ready = {fd, POLLIN, 0};
  timespec limit = {timeoutMs / 1000, (timeoutMs % 1000) * 1000000};
  if (ppoll(&ready, 1, timeoutMs < 0 ? nullptr : &limit, nullptr) <= 0) return 0;
  signalfd_siginfo info;
  return read(fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info) ? static_cast<int>(info.ssi_signo)
                                                                           : 0;
}

// Every child that has ended, reaped; the program's status in `status` if it is one of them.
void reapEnded(pid_t program, int& status, bool& running) {
  int s = 0;
  for (pid_t pid; (pid = waitpid(-1, &s, WNOHANG)) > 0;) {
    if (pid == program) status = s, running = false;
  }
}

// Runs the program as a child and stays beside it as a child subreaper (POOLRUN_REAP=1, which
// poolrun sets for every rank): signals the launcher sends are passed on, and when the program
// ends, whatever it left running on this node (a daemon that did `setsid sleep 100 &`, reparented
// here rather than to init) is sent SIGTERM, then SIGKILL after a second, and reaped. Then this
// process ends as the program did: its exit code, or the same signal. Costs one fork per rank
// (runtime/README.md has the figure); a SIGKILL of this process leaves the program to die with it
// (PR_SET_PDEATHSIG) but its orphans to init.
int reapBeside(char** argv, char** envp) {
  sigset_t watched, old;
  sigemptyset(&watched);
  sigaddset(&watched, SIGCHLD);
  for (int sig : kForwarded) sigaddset(&watched, sig);
  pid_t me = getpid();
  // Each step, and what failed: without all of them nothing can stand beside the program, which
  // then runs in this process as without reaping.
  const char* failed = nullptr;
  int error = 0, fd = -1;
  pid_t child = -1;
  auto step = [&](long result, const char* call) {
    if (result < 0) failed = call, error = errno;
    return result >= 0;
  };
  bool blocked = false;
  if (step(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)") &&
      (blocked = step(sigprocmask(SIG_BLOCK, &watched, &old), "sigprocmask")) &&
      step(fd = signalfd(-1, &watched, SFD_CLOEXEC), "signalfd"))
    step(child = fork(), "fork");
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != me) _exit(127);  // this process is already gone
    return run(argv, envp);
  }
  if (failed != nullptr) {
    if (fd >= 0) close(fd);
    if (blocked) sigprocmask(SIG_SETMASK, &old, nullptr);
    Line line;
    line.add("warning: cannot stay beside the program to end what it leaves running (").add(failed).add(": ");
    describe(line, error);
    say(line.add("); running it as it is (-x POOLRUN_REAP=0 skips the reaper)").text());
    return run(argv, envp);
  }
  int status = 0;
  for (bool running = true; running;) {
    int sig = nextSignal(fd, -1);
    if (sig == SIGCHLD || sig == 0) {
      reapEnded(child, status, running);
    } else {
      kill(child, sig);
    }
  }
  // What the program left: SIGTERM, a second's grace, then SIGKILL; reaped as they go. Where no
  // child is left (waitpid says so: the common case), /proc is not read at all.
  static constinit LongLine left;
  bool orphans = !(waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD);
  bool ignored = true;
  int none = 0;
  for (int round = 0; orphans && round < 2 && children(me, left) && !left.empty(); ++round) {
    signalAll(left.text(), round == 0 ? SIGTERM : SIGKILL);
    for (long waited = 0; waited < 1000 && children(me, left) && !left.empty(); waited += 50) {
      reapEnded(child, none, ignored);
      if (children(me, left) && !left.empty()) nextSignal(fd, 50);
    }
  }
  reapEnded(child, none, ignored);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  int termination = WTERMSIG(status);
  signal(termination, SIG_DFL);
  sigdelset(&old, termination);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  kill(me, termination);
  return 128 + termination;
}

int rankMain(int argc, char** argv, char** envp) {
  if (argc < 2) {
    say("usage: poolrun-rank PROGRAM [ARGS...] (started by poolrun in front of every rank)");
    return 2;
  }
  size_t count = 0, bytes = 0;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e, ++count) bytes += length(*e);
  // The plan's variables and their copies (a variable takes at least 6 bytes of the document).
  size_t arenaSize = 2 * bytes + (count + 2) * sizeof(char*) + 256 * 1024;
  Arena arena(arenaSize);
  if (!arena.ok()) {
    Line line;
    line.add("error: no memory for the rank's environment, ").add(arenaSize).add(" bytes (");
    say(line.add(count)
            .add(" variables): check the node's free memory and the job's memory limit (ulimit -v)")
            .text());
    return 127;
  }
  Environ env(envp, count + bytes / 6 + 64, arena);
  Text doc = env.get("POOLRUN_RANK_ENV");
  int rank = worldRank(env);
  if (doc.isSet()) {
    if (rank < 0) {
      say("error: no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK); start it through poolrun or "
          "mpirun");
      return 127;
    }
    char* scratch = arena.take(doc.size + 1);
    Line error;
    if (scratch == nullptr || !rankVariables(doc, rank, scratch, env, error)) {
      Line line;
      line.add("error: rank ")
          .add(rank)
          .add(": ")
          .add(scratch == nullptr ? Text("out of memory") : error.text());
      say(line.text());
      return 127;
    }
    env.set("RANK", rank);
    env.unset("POOLRUN_RANK_ENV");
  }
  RankInfo info;
  Line error;
  if (!rankInfo(env, info, error)) {
    Line line;
    say(about(line.add("error: "), env, rank).add(error.text()).text());
    return 127;
  }
  torchVariables(info, env);
  if (env.get("POOLRUN_CHECK_PORTS") == "1" && !portsUp(env, rank)) return 125;
  // Binding is the plan's: a program started by plain mpirun keeps the binding mpirun gave it.
  if (doc.isSet() && !bind(env, rank)) return 127;
  if (!mpsDaemonRuns(env, rank)) return 127;
  if (env.get("POOLRUN_REAP") == "1") {
    env.unset("POOLRUN_REAP");
    return reapBeside(argv + 1, env.envp());
  }
  return run(argv + 1, env.envp());
}

}  // namespace
}  // namespace poolrun::runtime::core

int main(int argc, char** argv) {
  return poolrun::runtime::core::rankMain(argc, argv, environ);
}
