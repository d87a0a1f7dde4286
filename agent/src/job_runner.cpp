// The detached jobs an agent runs (jobs.hpp).

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "poolrun/agent/jobs.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "user_process.hpp"

namespace poolrun::agent {
namespace {

pool::JobReport notStarted(std::string reason) {
  pool::JobReport r;
  r.kind = pool::JobReport::Kind::kEnded;
  r.exit.exit_status = 127;
  r.exit.reason = std::move(reason);
  return r;
}

// `value` as decimal text ending at `end`; where it begins. No allocator, no stdio: the watcher is a
// child of a threaded process that never execs.
char* decimal(char* end, long long value) {
  const bool negative = value < 0;
  unsigned long long v = negative ? 0ULL - static_cast<unsigned long long>(value) : value;
  do {
    *--end = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  if (negative) *--end = '-';
  return end;
}

// The job's watcher: leads the job's session (a cancel signals the group: the launcher and all it
// started; the watcher holds them blocked), starts the launcher, keeps none of the agent's files
// open, waits for the launcher and writes how it ended to `exitTmp`, renamed to `exitPath`.
[[noreturn]] void runWatcher(const ChildPlan& p, const char* exitTmp, const char* exitPath, int fd) {
  setsid();
  signal(SIGCHLD, SIG_DFL);
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  const pid_t launcher = fork();
  if (launcher == 0) runChild(p, fd);
  if (launcher < 0) failIn(fd, "cannot fork the job's launcher", nullptr);
  const int null = open("/dev/null", O_RDWR);
  if (null >= 0) dup2(null, 0), dup2(null, 1), dup2(null, 2);
  if (close_range(3, ~0U, 0) != 0)
    for (int f = 3; f < 4096; ++f) close(f);
  int status = 0;
  pid_t r;
  while ((r = waitpid(launcher, &status, 0)) < 0 && errno == EINTR) {
  }
  // exit_status=N signal=S; N is -1 where waitpid failed (the end is unknown).
  const long long code = r < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const long long sig = r >= 0 && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  char text[96];
  char* end = text + sizeof text;
  *--end = '\n';
  end = decimal(end, sig);
  static const char kSignal[] = " signal=", kStatus[] = "exit_status=";
  end -= sizeof kSignal - 1;
  memcpy(end, kSignal, sizeof kSignal - 1);
  end = decimal(end, code);
  end -= sizeof kStatus - 1;
  memcpy(end, kStatus, sizeof kStatus - 1);
  const int out = open(exitTmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out >= 0) {
    const size_t n = static_cast<size_t>(text + sizeof text - end);
    const bool whole = write(out, end, n) == static_cast<ssize_t>(n);
    fsync(out);
    close(out);
    if (whole) rename(exitTmp, exitPath);
  }
  _exit(0);
}

// The start of process `pid` in clock ticks after boot (/proc/PID/stat's 22nd field); 0 where it
// is gone or a zombie.
unsigned long long processStart(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command's name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  unsigned long long start = 0;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3 && field == "Z") return 0;
    if (i == 22) start = std::strtoull(field.c_str(), nullptr, 10);
  }
  return start;
}

// A record's job id: what poold gives (J12, J12_3), nothing that could name another file.
bool recordId(const std::string& id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

JobRunner::JobRunner(JobRunnerOptions options) : options_(std::move(options)) {
  takeBack();
}

void JobRunner::takeBack() {
  std::error_code ec;
  if (options_.records.empty() || !std::filesystem::is_directory(options_.records, ec)) return;
  for (const auto& entry : std::filesystem::directory_iterator(options_.records, ec)) {
    const std::filesystem::path file = entry.path();
    const std::string id = file.stem().string();
    // ID.exit.tmp: an end being written (a watcher alive now renames it) or never finished; not
    // an end either way, and removed with the job's records.
    if (!recordId(id) || (file.extension() != ".job" && file.extension() != ".exit")) continue;
    Watcher& w = watched_[id];
    if (file.extension() != ".job") continue;
    std::ifstream in(file);
    long long pid = 0;
    in >> pid >> w.start >> w.lease;
    if (!recordId(w.lease)) w.lease.clear();  // a damaged record names no cgroup
    if (pid > 0 && pid <= INT32_MAX) w.pid = static_cast<pid_t>(pid);
  }
}

bool JobRunner::alive(const Watcher& w) const {
  return w.pid > 0 && w.start != 0 && processStart(w.pid) == w.start;
}

pool::JobReport JobRunner::endOf(const std::string& id) const {
  pool::JobReport report;
  report.kind = pool::JobReport::Kind::kEnded;
  std::ifstream in(options_.records / (id + ".exit"));
  std::string status, sig;
  long long code = -1, number = 0;
  if (in >> status >> sig && status.starts_with("exit_status=") && sig.starts_with("signal=")) {
    code = std::strtoll(status.c_str() + 12, nullptr, 10);
    number = std::strtoll(sig.c_str() + 7, nullptr, 10);
  }
  if (code < 0 || code > 255 || number < 0 || number > 64) {
    report.exit.exit_status = 1;
    report.exit.reason = "the end of its launcher on node " + options_.node +
                         " was not recorded (its watcher was killed, or the node restarted)";
    return report;
  }
  report.exit.exit_status = static_cast<int>(code);
  report.exit.signal = static_cast<int>(number);
  return report;
}

// The job's launcher has ended: what it left in its lease's cgroup is killed, and the cgroup goes.
// One that cannot go yet (a process that will not die in time) is tried again at each reap().
void JobRunner::endCgroup(const std::string& lease, std::chrono::milliseconds limit) {
  if (!options_.cgroup || lease.empty()) return;
  const bool again = cgroups_left_.count(lease) > 0;
  try {
    LeaseCgroup cgroup(options_.cgroup_mounts, *options_.cgroup, options_.cgroup_parent, lease, {});
    if (const size_t killed = cgroup.destroy(limit); killed > 0)
      notes_.push_back("lease " + lease + ": " + std::to_string(killed) +
                       " processes outlived the job's launcher on node " + options_.node + ", killed" +
                       (again ? " (at a later try)" : ""));
    else if (again)
      notes_.push_back("lease " + lease + ": its cgroup on node " + options_.node + " is removed at last");
    cgroups_left_.erase(lease);
  } catch (const Error& e) {
    if (!again)
      notes_.push_back("lease " + lease + ": its cgroup on node " + options_.node +
                       " is left for now (tried again each second): " + e.what());
    cgroups_left_.insert(lease);
  }
}

namespace {

// GPU `gpu`'s minor number, from the NVIDIA driver's information file (Device Minor: N); nullopt
// where the driver says none.
std::optional<uint32_t> driverMinor(const std::filesystem::path& proc, const topo::Gpu& gpu) {
  std::ifstream in(proc / "driver" / "nvidia" / "gpus" / gpu.pci.str() / "information");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("Device Minor:")) continue;
    const unsigned long minor = std::strtoul(line.c_str() + 13, nullptr, 10);
    if (minor < 255) return static_cast<uint32_t>(minor);  // 255 is nvidiactl
  }
  return std::nullopt;
}

// The major of the driver's device `name` in PROC/devices ("nvidia-caps"); nullopt where none.
std::optional<uint32_t> charMajor(const std::filesystem::path& proc, const std::string& name) {
  std::ifstream in(proc / "devices");
  bool character = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("Character devices:")) character = true;
    if (line.starts_with("Block devices:")) character = false;
    std::istringstream words(line);
    unsigned long major = 0;
    std::string device;
    if (character && words >> major >> device && device == name && major < 4096)
      return static_cast<uint32_t>(major);
  }
  return std::nullopt;
}

// A MIG capability's device node, from its access file in the driver's capabilities tree
// ("DeviceFileMinor: N").
std::optional<CharDevice> capability(const std::filesystem::path& access, std::optional<uint32_t> major) {
  if (!major) return std::nullopt;
  std::ifstream in(access);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("DeviceFileMinor:")) continue;
    const unsigned long minor = std::strtoul(line.c_str() + 16, nullptr, 10);
    if (minor < (1u << 20)) return CharDevice{*major, static_cast<uint32_t>(minor)};
  }
  return std::nullopt;
}

std::vector<JobRunnerOptions::MigUnitDevices> migUnitDevices(const topo::NodeTopology& topology,
                                                             const std::vector<uint32_t>& minors,
                                                             const std::filesystem::path& proc) {
  const std::optional<uint32_t> caps = charMajor(proc, "nvidia-caps");
  std::vector<JobRunnerOptions::MigUnitDevices> out;
  for (const topo::MigUnit& u : topo::migUnits(topology)) {
    const topo::MigInstance& i = topology.gpus[u.gpu].mig.instances[u.instance];
    const std::filesystem::path gi = proc / "driver" / "nvidia" / "capabilities" /
                                     ("gpu" + std::to_string(minors[u.gpu])) / "mig" /
                                     ("gi" + std::to_string(i.gpu_instance));
    out.push_back({u.gpu, capability(gi / "access", caps),
                   capability(gi / ("ci" + std::to_string(i.compute_instance)) / "access", caps)});
  }
  return out;
}

}  // namespace

void confineJobs(JobRunnerOptions& options, const std::string& cgroup, const std::string& parent,
                 const topo::NodeTopology& topology, const std::filesystem::path& proc, std::ostream& log) {
  options.cgroup_mounts = readCgroupMounts();
  options.cgroup_parent = parent;
  const CgroupMounts& m = options.cgroup_mounts;
  if (cgroup == "v1" && !m.controllers.count("devices"))
    throw badInput("--cgroup v1: this node mounts no cgroup v1 devices hierarchy (/proc/self/mountinfo)");
  if (cgroup == "v2" && m.unified.empty())
    throw badInput("--cgroup v2: this node mounts no cgroup2 hierarchy (/proc/self/mountinfo)");
  if (cgroup == "v1") options.cgroup = CgroupVersion::kV1;
  if (cgroup == "v2") options.cgroup = CgroupVersion::kV2;
  std::string unusable;
  if (cgroup == "auto" && geteuid() == 0) {
    options.cgroup = defaultCgroupVersion(m);
    // Auto confines where the node lets it: a cgroup made and removed (a device program loaded on
    // v2), else the jobs run unconfined, with a warning (a container's read-only cgroups).
    try {
      if (options.cgroup) {
        LeaseCgroup probe(m, *options.cgroup, parent, "probe-" + std::to_string(getpid()),
                          {{{kNvidiaMajor, 254}}, {}});
        probe.destroy(std::chrono::seconds(5));
        // The parent too where no lease's cgroup is in it (an agent that never runs a job leaves none).
        for (const auto& folder : probe.folders()) rmdir(folder.parent_path().c_str());
      }
    } catch (const Error& e) {
      options.cgroup.reset();
      unusable = e.what();
    }
  }
  for (const topo::Gpu& g : topology.gpus)
    options.gpu_minors.push_back(driverMinor(proc, g).value_or(static_cast<uint32_t>(g.index)));
  options.mig_units = migUnitDevices(topology, options.gpu_minors, proc);
  if (options.cgroup)
    log << "poold-agent: each lease's jobs are confined to a cgroup of their own (cgroup "
        << (options.cgroup == CgroupVersion::kV1 ? "v1" : "v2") << ", under " << parent << ")" << std::endl;
  else if (cgroup != "none")
    log << "poold-agent: warning: leases are not confined to their GPUs ("
        << (geteuid() != 0      ? "the agent is not root"
            : !unusable.empty() ? unusable
                                : "this node mounts no cgroup hierarchy it can use")
        << ")" << std::endl;
}

Confinement confinementOf(const JobRunnerOptions& options, const pool::JobLaunch& launch) {
  const size_t gpus = options.gpu_minors.size();
  std::vector<bool> held(gpus, false), unitHeld(options.mig_units.size(), false);
  for (size_t unit : launch.gpus) {
    if (unit < gpus) {
      held[unit] = true;
    } else if (unit - gpus < options.mig_units.size() && options.mig_units[unit - gpus].gpu < gpus) {
      unitHeld[unit - gpus] = true;
      held[options.mig_units[unit - gpus].gpu] = true;  // a MIG instance needs its GPU's node
    }
  }
  Confinement c;
  c.pids_max = options.lease_pids;
  if (launch.memory_bytes > 0) c.memory_max = launch.memory_bytes;
  for (size_t g = 0; g < gpus; ++g)
    if (!held[g]) c.deny.push_back({kNvidiaMajor, options.gpu_minors[g]});
  // The capabilities of the units it does not hold, less those it needs (a GPU instance shared by
  // a compute instance it holds).
  std::vector<CharDevice> allowed;
  for (size_t k = 0; k < unitHeld.size(); ++k)
    for (const auto& cap : {options.mig_units[k].gpu_instance, options.mig_units[k].compute_instance})
      if (cap && unitHeld[k]) allowed.push_back(*cap);
  for (size_t k = 0; k < unitHeld.size(); ++k)
    for (const auto& cap : {options.mig_units[k].gpu_instance, options.mig_units[k].compute_instance})
      if (cap && !unitHeld[k] && std::find(allowed.begin(), allowed.end(), *cap) == allowed.end() &&
          std::find(c.deny.begin(), c.deny.end(), *cap) == c.deny.end())
        c.deny.push_back(*cap);
  return c;
}

void JobRunner::reported(const std::string& id) {
  std::error_code ec;
  for (const char* ext : {".job", ".exit", ".exit.tmp"})
    std::filesystem::remove(options_.records / (id + ext), ec);
}

std::string JobRunner::checkUser(const pool::JobLaunch& l, Account& account) const {
  const std::optional<UserAccount> user = lookUpUser(l.owner);
  if (!user)
    return "user " + l.owner + " is not known on node " + options_.node +
           " (its password database has no such user): the job runs as the user who submitted it";
  if (user->uid != l.uid)
    return "user " + l.owner + " is uid " + std::to_string(user->uid) + " on node " + options_.node +
           ", but uid " + std::to_string(l.uid) +
           " where the job was submitted: the nodes' password databases " + "must agree";
  if (user->uid == 0 && !l.allow_root)
    return "the job would run as root, which this pool refuses (poold --allow-root-jobs allows it)";
  if (geteuid() != 0 && geteuid() != user->uid)
    return "poold-agent on node " + options_.node + " runs as uid " + std::to_string(geteuid()) +
           " and can run jobs of that user alone, not of " + l.owner + ": run poold-agent as root";
  account.login_env = user->login_env;
  account.groups = user->groups;
  return "";
}

pool::JobReport JobRunner::start(const pool::JobLaunch& l) {
  if (watched_.count(l.id)) return {};
  Account account;
  if (std::string why = checkUser(l, account); !why.empty()) return notStarted(why);
  if (access(options_.poolrun.c_str(), X_OK) != 0)
    return notStarted("node " + options_.node + " has no launcher at " + options_.poolrun.string() +
                      " (poold-agent --poolrun PATH)");
  // The lease's cgroup on this node, made before the launcher starts and joined by it.
  std::optional<LeaseCgroup> cgroup;
  if (options_.cgroup) {
    try {
      cgroup.emplace(options_.cgroup_mounts, *options_.cgroup, options_.cgroup_parent, l.lease,
                     confinementOf(options_, l));
    } catch (const Error& e) {
      return notStarted("cannot confine the job to its lease on node " + options_.node + ": " + e.what() +
                        " (poold-agent --cgroup)");
    }
  }
  // What does not start leaves no cgroup behind.
  auto fail = [&](const std::string& why) {
    if (cgroup) endCgroup(l.lease, std::chrono::seconds(5));
    return notStarted(why);
  };
  // argv: poolrun --pool URI --adopt-lease LEASE COMMAND...
  std::vector<std::string> args = {options_.poolrun.string(), "--pool", options_.pool, "--adopt-lease",
                                   l.lease};
  args.insert(args.end(), l.command.begin(), l.command.end());
  std::vector<std::string> env = l.env;
  for (const std::string& login : account.login_env) {
    const std::string_view name(login.data(), login.find('=') + 1);
    if (std::none_of(env.begin(), env.end(), [&](const std::string& e) { return e.starts_with(name); }))
      env.push_back(login);
  }
  env.push_back("POOLRUN_TOKEN=" + l.credential);
  env.push_back("POOLRUN_JOB_ID=" + l.id);
  if (l.task) env.push_back("POOLRUN_ARRAY_TASK_ID=" + std::to_string(*l.task));
  if (!options_.ca_file.empty()) env.push_back("POOLRUN_CA=" + options_.ca_file.string());
  ChildPlan plan;
  plan.uid = l.uid;
  plan.gid = l.gid;
  plan.groups = account.groups;
  plan.umask = static_cast<mode_t>(l.umask & 0777);
  plan.cwd = l.cwd.c_str();
  plan.output = l.output.c_str();
  plan.error = l.error == l.output ? nullptr : l.error.c_str();
  plan.point(args, env, cgroup ? &cgroup->procsFiles() : nullptr);
  std::error_code ec;
  std::filesystem::create_directories(options_.records, ec);
  if (ec || access(options_.records.c_str(), W_OK) != 0)
    return fail("poold-agent on node " + options_.node + " cannot keep its job records in " +
                options_.records.string() + (ec ? ": " + ec.message() : ": not writable") +
                " (poold-agent --job-dir)");
  std::filesystem::permissions(options_.records, std::filesystem::perms::owner_all, ec);
  const std::string exitPath = (options_.records / (l.id + ".exit")).string();
  const std::string exitTmp = exitPath + ".tmp";
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fail(std::string("cannot make a pipe: ") + strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return fail(std::string("cannot fork: ") + strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    runWatcher(plan, exitTmp.c_str(), exitPath.c_str(), fds[1]);
  }
  close(fds[1]);
  std::string why;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    why.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (!why.empty()) {
    waitpid(pid, nullptr, 0);
    reported(l.id);
    return fail(why + " (on node " + options_.node + ", as " + l.owner + ")");
  }
  const Watcher w{cgroup ? l.lease : "", pid, processStart(pid), true};
  watched_[l.id] = w;
  std::ofstream record(options_.records / (l.id + ".job"));
  record << w.pid << " " << w.start << " " << w.lease << "\n";
  return {};
}

bool JobRunner::signal(const std::string& id, int sig) {
  auto it = watched_.find(id);
  if (it == watched_.end() || !(it->second.child || alive(it->second))) return false;
  kill(-it->second.pid, sig);
  return true;
}

std::vector<std::pair<std::string, pool::JobReport>> JobRunner::reap() {
  std::vector<std::pair<std::string, pool::JobReport>> out;
  for (auto it = watched_.begin(); it != watched_.end();) {
    const Watcher& w = it->second;
    if (w.child) {
      const pid_t r = waitpid(w.pid, nullptr, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) {
        ++it;
        continue;
      }
    } else if (alive(w)) {
      ++it;
      continue;
    }
    out.emplace_back(it->first, endOf(it->first));
    endCgroup(w.lease, std::chrono::seconds(5));
    it = watched_.erase(it);
  }
  for (const std::string& lease : std::vector<std::string>(cgroups_left_.begin(), cgroups_left_.end()))
    endCgroup(lease, std::chrono::milliseconds(200));
  return out;
}

}  // namespace poolrun::agent
