// poolrun-rank: the wrapper poolrun starts in front of every rank. It exports the rank's variables
// from its plan (POOLRUN_RANK_ENV), binds the process to its cores and its memory to their NUMA node
// and checks that the binding took, exports the variables torch.distributed expects, and execs the
// program, so that programs that never link poolrun get their GPU, NIC, binding and rank variables.
//
//   poolrun-rank PROGRAM [ARGS...]
//
// It runs once per rank before the program, so it is built on the rank core (core/), which needs no
// C library: where the build allows, poolrun-rank has none (freestanding.cpp starts it). glibc's own
// start-up (its CPU feature probes, each a trap to the hypervisor in a VM) cost each rank more than
// everything poolrun-rank does.

#include "rank_main.hpp"
#include "core/binding.hpp"
#include "core/rank_env.hpp"
#include "core/rank_info.hpp"
#include "core/system.hpp"

namespace poolrun::runtime::core {
namespace {

// Memory for the environment poolrun-rank builds, taken once from the kernel.
class Arena {
 public:
  explicit Arena(size_t size) : base_(sys::mapMemory(size)), size_(base_ == nullptr ? 0 : size) {}
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
  sys::write(2, text.c_str(), text.text().size);
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
    sys::hostName(line);
  }
  return line.add(": ");
}

// One NUMA node (or a kernel without NUMA): /sys/devices/system/node/online names at most one.
bool singleNumaNode() {
  char online[256];
  Text t = sys::readFile("/sys/devices/system/node/online", online, sizeof online);
  return !t.isSet() || (t.find(',') == t.size && t.find('-') == t.size);
}

// Binds as the plan says; returns false where POOLRUN_BIND=strict and the binding did not take.
bool bind(Environ& env, int rank) {
  CpuMask current;
  sys::getAffinity(current);
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

// execvp(): PATH searched for a name without '/', a script without "#!" run by /bin/sh.
int run(char** argv, char** envp, const Environ& env, Arena& arena) {
  Text program = argv[0];
  long error = sys::kNoEntry;
  // Returns whether a later directory of PATH may still hold the program.
  auto attempt = [&](const char* path) {
    long r = sys::execve(path, argv, envp);
    if (r == sys::kNoExec) {  // as execvp does: a script without "#!"
      size_t argc = 0;
      while (argv[argc] != nullptr) ++argc;
      char** shell = reinterpret_cast<char**>(arena.take((argc + 2) * sizeof(char*)));
      if (shell != nullptr) {
        shell[0] = const_cast<char*>("/bin/sh");
        shell[1] = const_cast<char*>(path);
        for (size_t k = 1; k <= argc; ++k) shell[k + 1] = argv[k];
        sys::execve("/bin/sh", shell, envp);
      }
    }
    // EACCES is remembered over "not found", as execvp reports it.
    if (r == sys::kAccess || error != sys::kAccess) error = r;
    return r == sys::kNoEntry || r == sys::kNotDir || r == sys::kAccess || r == sys::kNoDevice ||
           r == sys::kTimedOut || r == sys::kStale || r == sys::kNameTooLong;
  };
  if (program.empty()) {
    error = sys::kNoEntry;
  } else if (program.find('/') < program.size) {
    attempt(argv[0]);
  } else {
    Text path = env.get("PATH");
    if (!path.isSet()) path = "/bin:/usr/bin";
    for (size_t at = 0; at <= path.size;) {
      size_t end = path.find(':', at);
      Text dir = path.sub(at, end - at);
      at = end + 1;
      static constinit LongLine file;
      file.clear();
      file.add(dir.empty() ? Text(".") : dir).add("/").add(program);
      if (file.truncated()) {
        if (error != sys::kAccess) error = sys::kNameTooLong;
        continue;
      }
      if (!attempt(file.c_str())) break;
    }
  }
  Line line;
  line.add("error: cannot run ").quoted(program).add(": ");
  sys::describe(line, error);
  say(line.add(" (check the program's path and that it is executable on every node)").text());
  return 127;
}

// The signals a launcher sends a rank, passed on to the program.
constexpr int kForwarded[] = {1 /*HUP*/,   2 /*INT*/,   3 /*QUIT*/,  10 /*USR1*/,
                              12 /*USR2*/, 15 /*TERM*/, 18 /*CONT*/, 20 /*TSTP*/};
constexpr int kSigChld = 17, kSigKill = 9, kSigTerm = 15;

// The children this process has now (the program, and orphans of its that were reparented here).
// /proc/PID/task/PID/children; false where the kernel does not list them.
bool children(long pid, LongLine& out) {
  Line path;
  path.add("/proc/").add(pid).add("/task/").add(pid).add("/children");
  static char text[65536];
  Text t = sys::readFile(path.c_str(), text, sizeof text);
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
    if (parseNumber(pids.sub(at, end - at), (1L << 22), pid) && pid > 1) sys::kill(pid, signal);
    at = end + 1;
  }
}

// Runs the program as a child and stays beside it as a child subreaper (POOLRUN_REAP=1, which
// poolrun sets for every rank): signals the launcher sends are passed on, and when the program
// ends, whatever it left running on this node (a daemon that did `setsid sleep 100 &`, reparented
// here rather than to init) is sent SIGTERM, then SIGKILL after a second, and reaped. Then this
// process ends as the program did: its exit code, or the same signal. Costs one fork per rank
// (runtime/README.md has the figure); a SIGKILL of this process leaves the program to die with it
// (PR_SET_PDEATHSIG) but its orphans to init.
int reapBeside(char** argv, char** envp, const Environ& env, Arena& arena) {
  sys::SignalSet watched = sys::signalBit(kSigChld), old = 0;
  for (int sig : kForwarded) watched |= sys::signalBit(sig);
  long me = sys::processId();
  // Each step, and what failed: without all of them nothing can stand beside the program, which
  // then runs in this process as without reaping.
  const char* failed = nullptr;
  long error = 0, fd = -1, child = -1;
  auto step = [&](long result, const char* call) {
    if (result < 0) failed = call, error = result;
    return result >= 0;
  };
  bool blocked = false;
  if (step(sys::becomeSubreaper(), "prctl(PR_SET_CHILD_SUBREAPER)") &&
      (blocked = step(sys::blockSignals(watched, old), "rt_sigprocmask")) &&
      step(fd = sys::signalFd(watched), "signalfd4"))
    step(child = sys::fork(), "clone");
  if (child == 0) {
    sys::setSignalMask(old);
    sys::dieWithParent(kSigKill);
    if (sys::parentId() != me) sys::exit(127);  // this process is already gone
    return run(argv, envp, env, arena);
  }
  if (failed != nullptr) {
    if (fd >= 0) sys::close(static_cast<int>(fd));
    if (blocked) sys::setSignalMask(old);
    Line line;
    line.add("warning: cannot stay beside the program to end what it leaves running (").add(failed).add(": ");
    sys::describe(line, error);
    say(line.add("); running it as it is (-x POOLRUN_REAP=0 skips the reaper)").text());
    return run(argv, envp, env, arena);
  }
  int status = 0;
  bool running = true;
  while (running) {
    long sig = sys::nextSignal(static_cast<int>(fd), -1);
    if (sig == kSigChld || sig <= 0) {
      int s = 0;
      for (long pid; (pid = sys::waitAny(s, false)) > 0;) {
        if (pid == child) {
          status = s;
          running = false;
        }
      }
    } else {
      sys::kill(child, static_cast<int>(sig));
    }
  }
  // What the program left: SIGTERM, a second's grace, then SIGKILL; reaped as they go. Where no
  // child is left (wait4 says so: the common case), /proc is not read at all.
  static constinit LongLine left;
  int none = 0;
  bool orphans = sys::waitAny(none, false) != sys::kNoChild;
  for (int round = 0; orphans && round < 2 && children(me, left) && !left.empty(); ++round) {
    signalAll(left.text(), round == 0 ? kSigTerm : kSigKill);
    for (long waited = 0; waited < 1000 && children(me, left) && !left.empty(); waited += 50) {
      int s = 0;
      while (sys::waitAny(s, false) > 0) {
      }
      if (children(me, left) && !left.empty()) sys::nextSignal(static_cast<int>(fd), 50);
    }
  }
  for (int s = 0; sys::waitAny(s, false) > 0;) {
  }
  int termination = status & 0x7f;
  if (termination == 0) return (status >> 8) & 0xff;
  sys::defaultAction(termination);
  sys::setSignalMask(old & ~sys::signalBit(termination));
  sys::kill(me, termination);
  return 128 + termination;
}

}  // namespace

int rankMain(int argc, char** argv, char** envp) {
  if (argc < 2) {
    Text usage = "usage: poolrun-rank PROGRAM [ARGS...] (started by poolrun in front of every rank)\n";
    sys::write(2, usage.data, usage.size);
    return 2;
  }
  size_t count = 0, bytes = 0;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e, ++count) bytes += length(*e);
  // The plan's variables and their copies (a variable takes at least 6 bytes of the document), and
  // the arguments of /bin/sh for a script.
  size_t arenaSize = 2 * bytes + (count + static_cast<size_t>(argc) + 2) * sizeof(char*) + 256 * 1024;
  Arena arena(arenaSize);
  if (!arena.ok()) {
    Line line;
    line.add("error: the kernel refused ").add(arenaSize).add(" bytes for the rank's environment (");
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
  if (env.get("POOLRUN_REAP") == "1") {
    env.unset("POOLRUN_REAP");
    return reapBeside(argv + 1, env.envp(), env, arena);
  }
  return run(argv + 1, env.envp(), env, arena);
}

}  // namespace poolrun::runtime::core
