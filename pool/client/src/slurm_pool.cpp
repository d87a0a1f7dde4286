// The Slurm pool: the allocation is the lease (see poolrun/pool/slurm.hpp).

#include "poolrun/pool/slurm.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "poolrun/common/text.hpp"
#include "poolrun/pool/queue_wait.hpp"
#include "poolrun/topo/hostlist.hpp"

namespace poolrun::pool::slurm {
namespace {

using common::firstLine;
using common::trim;

// "Key=Value" fields of one line of scontrol output (values end at whitespace).
std::map<std::string, std::string> fields(std::string_view line) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t end = i;
    while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
    std::string_view word = line.substr(i, end - i);
    size_t eq = word.find('=');
    if (eq != std::string_view::npos && eq > 0) out.emplace(word.substr(0, eq), word.substr(eq + 1));
    i = end;
  }
  return out;
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

std::string commandText(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

class SlurmPool : public PoolClient {
 public:
  SlurmPool(std::optional<std::string> partition, std::unique_ptr<SlurmSystem> system)
      : partition_(std::move(partition)), system_(std::move(system)) {}

  ~SlurmPool() override {
    for (const auto& [id, job] : active_) {
      try {
        system_->relinquish(job);
      } catch (...) {  // nothing more to do: the allocation ends when its helper sees us gone
      }
    }
  }

  Lease acquire(const LeaseRequest& request, const std::function<void(const QueueProgress&)>&) override {
    if (request.gpus <= 0) throw badInput("-n " + std::to_string(request.gpus) + ": at least one GPU");
    if (request.elastic())
      throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                      "-n " + std::to_string(request.gpus) + ":" + std::to_string(request.max_gpus) +
                          ": a Slurm allocation keeps its size, so " + describe() +
                          " has no elastic leases; ask for -n N");
    if (!partition_) return inside(request);
    return outside(request);
  }

  Lease renew(const std::string& id) override {
    auto it = leases_.find(id);
    if (it == leases_.end())
      throw PoolError(PoolFailure::kGone, ErrorCode::kNotFound, "no lease " + id + " in " + describe());
    return it->second;  // Slurm owns the lifetime: nothing to renew
  }

  Lease shrink(const std::string& id) override { return renew(id); }  // never elastic: nothing to shrink

  bool release(const std::string& id) override {
    bool held = leases_.erase(id) > 0;
    auto it = active_.find(id);
    if (it == active_.end()) return held;  // inside an allocation: Slurm ends it, not poolrun
    std::string job = it->second;
    active_.erase(it);
    system_->relinquish(job);
    return true;
  }

  topo::ClusterNode node(const std::string& name) override {
    // The launcher probes the allocated nodes itself (it knows the poolrun binary to run there).
    topo::ClusterNode n;
    n.name = name;
    return n;
  }

  std::string describe() const override { return partition_ ? "slurm:" + *partition_ : "slurm"; }
  RankSite rankSite() const override { return RankSite::kSlurmAllocation; }

 private:
  Lease inside(const LeaseRequest& request) {
    std::optional<std::string> job = system_->env("SLURM_JOB_ID");
    if (!job || job->empty()) job = system_->env("SLURM_JOBID");
    if (!job || job->empty())
      throw PoolError(PoolFailure::kNeverFits, ErrorCode::kBadInput,
                      "--pool slurm: SLURM_JOB_ID is not set, so this is not inside a Slurm allocation; "
                      "run poolrun inside `salloc --gpus-per-node=K` or an sbatch script, or use "
                      "--pool slurm:PARTITION to have poolrun ask Slurm for the GPUs");
    std::vector<std::pair<std::string, std::vector<size_t>>> nodes = allocationGpus(*job);
    Lease lease = select(*job, nodes, request);
    leases_[lease.id] = lease;
    return lease;
  }

  Lease outside(const LeaseRequest& request) {
    std::vector<std::string> args = sallocArguments(request, *partition_);
    SlurmSystem::Allocation a = system_->allocate(args);
    try {
      std::vector<std::pair<std::string, std::vector<size_t>>> nodes = jobGpus(a.job_id);
      Lease lease = select(a.job_id, nodes, request);
      lease.env = a.env;
      active_[lease.id] = a.job_id;
      leases_[lease.id] = lease;
      return lease;
    } catch (...) {
      system_->relinquish(a.job_id);
      throw;
    }
  }

  std::vector<std::pair<std::string, std::vector<size_t>>> jobGpus(const std::string& job) {
    SlurmSystem::Output o = system_->run({"scontrol", "show", "job", "-d", job});
    if (o.status != 0)
      throw Error(ErrorCode::kIo, "`scontrol show job -d " + job + "` failed (status " +
                                      std::to_string(o.status) + "): " + firstLine(o.err + o.out) +
                                      " (is slurmctld reachable, is SLURM_CONF right?)");
    return parseJobDetail(o.out).nodes;
  }

  // Inside an allocation: the job's GPUs per node, with the step's own where this is a step.
  std::vector<std::pair<std::string, std::vector<size_t>>> allocationGpus(const std::string& job) {
    std::vector<std::pair<std::string, std::vector<size_t>>> nodes;
    try {
      nodes = jobGpus(job);
    } catch (const Error&) {
      // No scontrol here: a one-node allocation still says everything in its variables.
      std::optional<std::string> list = system_->env("SLURM_JOB_NODELIST");
      std::optional<std::string> gpus = system_->env("SLURM_STEP_GPUS");
      if (!gpus) gpus = system_->env("SLURM_JOB_GPUS");
      if (!list || !gpus) throw;
      std::vector<std::string> hosts = topo::expandHostlist(*list);
      if (hosts.size() != 1) throw;
      return {{hosts[0], parseIndexList(*gpus)}};
    }
    std::optional<std::string> step = system_->env("SLURM_STEP_ID");
    std::optional<std::string> stepGpus = system_->env("SLURM_STEP_GPUS");
    std::optional<std::string> here = system_->env("SLURMD_NODENAME");
    if (step && stepGpus && here) {
      for (auto& [node, gpus] : nodes) {
        if (node == *here) gpus = parseIndexList(*stepGpus);
      }
    }
    return nodes;
  }

  Lease select(const std::string& job, const std::vector<std::pair<std::string, std::vector<size_t>>>& nodes,
               const LeaseRequest& request) {
    std::vector<GpuRef> all;
    for (const auto& [node, gpus] : nodes) {
      for (size_t g : gpus) all.push_back({node, g});
    }
    if (all.empty())
      throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                      "Slurm job " + job + " holds no GPUs (no gpu GRES on " +
                          (nodes.empty() ? std::string("its nodes") : nodes.front().first) +
                          "); ask Slurm for them, e.g. salloc --gpus-per-node=K");
    Lease lease;
    // One job directory per poolrun, also for several in one allocation: slurm-JOB-PID[-N].
    lease.id = "slurm-" + job + "-" + std::to_string(getpid()) +
               (acquired_ > 0 ? "-" + std::to_string(acquired_) : "");
    ++acquired_;
    lease.owner = request.owner;
    lease.job_name = request.job_name;
    lease.created = std::chrono::system_clock::now();
    lease.expires = lease.created + std::chrono::hours(24 * 365);
    lease.ttl = request.ttl;
    int need = request.gpus;
    for (const auto& [node, gpus] : nodes) {
      if (need == 0) break;
      if (request.gpus_per_node > 0 && static_cast<int>(gpus.size()) < request.gpus_per_node) continue;
      int take = request.gpus_per_node > 0 ? request.gpus_per_node : static_cast<int>(gpus.size());
      take = std::min(take, need);
      for (size_t i = 0; i < static_cast<size_t>(take); ++i) lease.gpus.push_back({node, gpus[i]});
      need -= take;
    }
    if (need > 0) {
      std::vector<GpuRef> sorted = all;
      throw PoolError(
          PoolFailure::kNeverFits, ErrorCode::kUnsupported,
          "-n " + std::to_string(request.gpus) +
              (request.gpus_per_node > 0 ? " --gpus-per-node " + std::to_string(request.gpus_per_node)
                                         : std::string()) +
              " does not fit in Slurm job " + job + ", which holds " + std::to_string(all.size()) +
              " GPU(s): " + formatGpus(sorted) +
              "; ask Slurm for more (salloc -N NODES --gpus-per-node=K) or lower -n");
    }
    return lease;
  }

  std::optional<std::string> partition_;
  std::unique_ptr<SlurmSystem> system_;
  std::map<std::string, Lease> leases_;
  std::map<std::string, std::string> active_;  // lease id -> job id of allocations poolrun made
  int acquired_ = 0;
};

// ---- the real system ----

int statusOf(int raw) {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return -1;
}

bool waitFor(pid_t pid, std::chrono::milliseconds limit, int* status) {
  auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int raw = 0;
    pid_t r = waitpid(pid, &raw, WNOHANG);
    if (r == pid) {
      if (status != nullptr) *status = statusOf(raw);
      return true;
    }
    if (r < 0 && errno != EINTR) return true;  // not our child any more
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

[[noreturn]] void execOrDie(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::string msg = "poolrun: error: cannot run " + argv[0] + ": " + std::strerror(errno) +
                    " (install Slurm's client commands: apt-get install slurm-client)\n";
  ssize_t ignored = write(2, msg.data(), msg.size());
  (void)ignored;
  _exit(127);
}

class RealSlurm : public SlurmSystem {
 public:
  ~RealSlurm() override {
    for (auto& [job, a] : running_) stop(job, a);
  }

  std::optional<std::string> env(const std::string& name) const override {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }

  Output run(const std::vector<std::string>& argv) override {
    Output o;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return o;
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(out[0]), close(out[1]);
      return o;
    }
    pid_t pid = fork();
    if (pid == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
      execOrDie(argv);
    }
    close(out[1]);
    close(err[1]);
    if (pid < 0) {
      close(out[0]), close(err[0]);
      return o;
    }
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* dest[2] = {&o.out, &o.err};
    int open = 2;
    while (open > 0) {
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        char buf[4096];
        ssize_t n = read(fds[i].fd, buf, sizeof buf);
        if (n > 0) {
          dest[i]->append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open;
        }
      }
    }
    for (pollfd& f : fds) {
      if (f.fd >= 0) close(f.fd);
    }
    int raw = 0;
    while (waitpid(pid, &raw, 0) < 0 && errno == EINTR) {
    }
    o.status = statusOf(raw);
    return o;
  }

  Allocation allocate(const std::vector<std::string>& sallocArgs) override {
    int out[2], keep[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw Error(ErrorCode::kIo, "pipe: " + std::string(std::strerror(errno)));
    if (pipe2(keep, O_CLOEXEC) != 0) {
      close(out[0]), close(out[1]);
      throw Error(ErrorCode::kIo, "pipe: " + std::string(std::strerror(errno)));
    }
    // The command salloc runs: report the allocation's variables, then read its standard input, a
    // pipe only poolrun writes to, until poolrun closes it (release) or dies (the kernel closes it).
    // It then exits 0, so that salloc ends the job as COMPLETED and Slurm starts the next one at
    // once; a signal or scancel would record it as cancelled and leave the node to the next
    // scheduling pass.
    std::string helper = "env -0; printf '@poolrun-ready %s\\0' \"$$\"; read -r line; exit 0";
    std::vector<std::string> argv = sallocArgs;
    argv.insert(argv.end(), {"/bin/sh", "-c", helper});
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      // Its own process group (a Ctrl-C at the terminal is poolrun's to handle), and it hears of
      // poolrun's death: a pending request is then withdrawn (salloc revokes it on SIGTERM).
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);
      dup2(out[1], 1);
      dup2(keep[0], 0);  // no terminal: salloc must not take it over
      execOrDie(argv);
    }
    close(out[1]);
    close(keep[0]);
    if (pid < 0) {
      close(out[0]), close(keep[1]);
      throw Error(ErrorCode::kIo, "fork: " + std::string(std::strerror(errno)));
    }
    std::string data;
    Allocation a;
    pid_t helperPid = 0;
    for (;;) {
      // Looked at five times a second: a Ctrl-C while Slurm keeps the request pending (a
      // QueueInterruption caught it) ends salloc, which withdraws the request on SIGTERM.
      pollfd ready{out[0], POLLIN, 0};
      if (poll(&ready, 1, 200) == 0 || (ready.revents & (POLLIN | POLLHUP)) == 0) {
        if (pendingInterrupt() == 0) continue;
        close(out[0]);
        close(keep[1]);
        kill(pid, SIGTERM);
        if (!waitFor(pid, std::chrono::seconds(10), nullptr)) {
          kill(pid, SIGKILL);
          waitFor(pid, std::chrono::seconds(5), nullptr);
        }
        throw interrupted("withdrew the pending Slurm request (`" + commandText(sallocArgs) + "`)");
      }
      char buf[4096];
      ssize_t n = read(out[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      data.append(buf, static_cast<size_t>(n));
      size_t mark = data.find("@poolrun-ready ");
      if (mark != std::string::npos && data.find('\0', mark) != std::string::npos) {
        std::string pidText = data.substr(mark + 15, data.find('\0', mark) - mark - 15);
        helperPid = static_cast<pid_t>(std::atol(pidText.c_str()));
        data.resize(mark);
        break;
      }
    }
    close(out[0]);
    if (helperPid <= 0) {
      close(keep[1]);
      int status = -1;
      waitFor(pid, std::chrono::seconds(10), &status);
      throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                      "`" + commandText(sallocArgs) + "` ended (status " + std::to_string(status) +
                          ") without granting an allocation; its message is above (check the partition "
                          "with `sinfo`, and --wait)");
    }
    size_t start = 0;
    while (start < data.size()) {
      size_t end = data.find('\0', start);
      if (end == std::string::npos) end = data.size();
      std::string kv = data.substr(start, end - start);
      start = end + 1;
      size_t eq = kv.find('=');
      if (eq != std::string::npos && kv.starts_with("SLURM_")) a.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    a.job_id = a.env.count("SLURM_JOB_ID") ? a.env["SLURM_JOB_ID"] : a.env["SLURM_JOBID"];
    running_[a.job_id] = {pid, keep[1]};
    if (a.job_id.empty()) {
      stop("", running_[a.job_id]);
      running_.erase(a.job_id);
      throw Error(ErrorCode::kIo, "salloc's command saw no SLURM_JOB_ID; the allocation was given back");
    }
    return a;
  }

  void relinquish(const std::string& job) override {
    auto it = running_.find(job);
    if (it == running_.end()) return;
    stop(job, it->second);
    running_.erase(it);
  }

 private:
  struct Salloc {
    pid_t salloc = 0;
    int keep = -1;  // the write end of the command's standard input: open while the allocation is held
  };

  // Closes the command's input, so that it exits 0 and salloc completes the job itself. scancel
  // only where salloc did not end well (it could not tell the controller, or hangs), so that the
  // job is gone all the same.
  void stop(const std::string& job, const Salloc& s) {
    if (s.keep >= 0) close(s.keep);
    int status = -1;
    if (!waitFor(s.salloc, std::chrono::seconds(10), &status)) {
      if (!job.empty()) run({"scancel", job});
      kill(s.salloc, SIGKILL);
      waitFor(s.salloc, std::chrono::seconds(5), nullptr);
    } else if (status != 0 && !job.empty()) {
      run({"scancel", "--quiet", job});
    }
  }

  std::map<std::string, Salloc> running_;
};

}  // namespace

std::vector<size_t> parseIndexList(std::string_view text) {
  std::set<size_t> out;
  std::string t(trim(text));
  if (t.empty()) return {};
  size_t start = 0;
  while (start <= t.size()) {
    size_t comma = t.find(',', start);
    if (comma == std::string::npos) comma = t.size();
    std::string item(trim(std::string_view(t).substr(start, comma - start)));
    start = comma + 1;
    size_t dash = item.find('-');
    std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    size_t a = 0, b = 0;
    auto pa = std::from_chars(lo.data(), lo.data() + lo.size(), a);
    auto pb = std::from_chars(hi.data(), hi.data() + hi.size(), b);
    if (lo.empty() || hi.empty() || pa.ec != std::errc() || pa.ptr != lo.data() + lo.size() ||
        pb.ec != std::errc() || pb.ptr != hi.data() + hi.size() || b < a || b > kMaxSlurmIndex ||
        b - a > 65536)
      throw badInput("bad GPU index list '" + std::string(text) + "': '" + item +
                     "' is not N or N-M with N <= M <= " + std::to_string(kMaxSlurmIndex) +
                     " and at most 65536 apart (Slurm writes e.g. 0-1,3)");
    for (size_t v = a; v <= b; ++v) out.insert(v);
  }
  return {out.begin(), out.end()};
}

std::vector<size_t> parseGresIndexes(std::string_view gres) {
  std::set<size_t> out;
  // Items are separated by commas outside parentheses: gpu:a100:1(IDX:0),gpu:v100:1(IDX:3)
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= gres.size(); ++i) {
    if (i < gres.size() && gres[i] == '(') ++depth;
    if (i < gres.size() && gres[i] == ')') --depth;
    if (i < gres.size() && !(gres[i] == ',' && depth == 0)) continue;
    std::string_view item = gres.substr(start, i - start);
    start = i + 1;
    size_t colon = item.find_first_of(":(");
    if (trim(item.substr(0, colon)) != "gpu") continue;
    size_t idx = item.find("IDX:");
    if (idx == std::string_view::npos) continue;
    size_t close = item.find(')', idx);
    std::string_view list =
        item.substr(idx + 4, close == std::string_view::npos ? std::string_view::npos : close - idx - 4);
    if (trim(list) == "N/A") continue;
    for (size_t g : parseIndexList(list)) out.insert(g);
  }
  return {out.begin(), out.end()};
}

JobDetail parseJobDetail(std::string_view text) {
  JobDetail d;
  std::map<std::string, std::vector<size_t>> perNode;
  for (std::string_view line : lines(text)) {
    std::map<std::string, std::string> f = fields(line);
    if (f.count("JobId")) d.id = f["JobId"];
    if (f.count("JobState")) d.state = f["JobState"];
    if (f.count("Partition")) d.partition = f["Partition"];
    if (f.count("NodeList") && trim(line).starts_with("NodeList=")) d.node_list = f["NodeList"];
    // Detail lines: "Nodes=sn[01-02] CPU_IDs=0-3 Mem=0 GRES=gpu:2(IDX:0-1)" (GRES_IDX= before 18.08)
    if (f.count("Nodes") && trim(line).starts_with("Nodes=")) {
      std::string gres = f.count("GRES") ? f["GRES"] : f.count("GRES_IDX") ? f["GRES_IDX"] : "";
      std::vector<size_t> gpus = parseGresIndexes(gres);
      int cpus = 0;
      try {
        cpus = f.count("CPU_IDs") ? static_cast<int>(parseIndexList(f["CPU_IDs"]).size()) : 0;
      } catch (const Error&) {  // a form this reader does not know: count unknown
      }
      for (const std::string& n : topo::expandHostlist(f["Nodes"])) {
        perNode[n] = gpus;
        d.cpus[n] = cpus;
        if (f.count("CPU_IDs")) d.cpu_ids[n] = f["CPU_IDs"];
      }
    }
  }
  if (d.id.empty()) throw badInput("not a Slurm job record (no JobId=): '" + firstLine(text) + "'");
  if (d.node_list.empty() || d.node_list == "(null)") return d;
  for (const std::string& n : topo::expandHostlist(d.node_list)) {
    auto it = perNode.find(n);
    d.nodes.emplace_back(n, it == perNode.end() ? std::vector<size_t>{} : it->second);
  }
  return d;
}

bool parseConstrainDevices(std::string_view showConfig) {
  for (std::string_view line : lines(showConfig)) {
    std::string t(trim(line));
    if (!t.starts_with("ConstrainDevices")) continue;
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    std::string v(trim(std::string_view(t).substr(eq + 1)));
    return v == "yes" || v == "Yes" || v == "YES";
  }
  return false;
}

std::map<std::string, std::string> parseNodeHardware(std::string_view text) {
  std::map<std::string, std::string> out;
  for (std::string_view line : lines(text)) {
    std::map<std::string, std::string> f = fields(line);
    if (!f.count("NodeName")) continue;
    std::string key;
    for (const char* k :
         {"Arch", "Boards", "Sockets", "CoresPerSocket", "ThreadsPerCore", "CPUTot", "RealMemory", "Gres"}) {
      key += std::string(k) + "=" + (f.count(k) ? f[k] : "") + " ";
    }
    out[f["NodeName"]] = std::string(trim(key));
  }
  return out;
}

std::map<std::string, int> parseNodeCpus(std::string_view text) {
  std::map<std::string, int> out;
  for (std::string_view line : lines(text)) {
    std::map<std::string, std::string> f = fields(line);
    if (f.count("NodeName") && f.count("CPUTot")) out[f["NodeName"]] = std::atoi(f["CPUTot"].c_str());
  }
  return out;
}

std::vector<std::string> sallocArguments(const LeaseRequest& request, const std::string& partition) {
  if (partition.empty()) throw badInput("--pool slurm: (no partition); use slurm:PARTITION, e.g. slurm:gpu");
  std::vector<std::string> a = {"salloc", "--partition=" + partition};
  std::string name = request.job_name.empty() ? "poolrun" : request.job_name;
  a.push_back("--job-name=" + name);
  int nodes = 1;
  if (request.gpus_per_node > 0) {
    if (request.gpus % request.gpus_per_node != 0)
      throw badInput("-n " + std::to_string(request.gpus) + " is not a multiple of --gpus-per-node " +
                     std::to_string(request.gpus_per_node) +
                     ": Slurm allocates the same GPUs on every node; use a multiple");
    nodes = request.gpus / request.gpus_per_node;
    a.push_back("--nodes=" + std::to_string(nodes));
    a.push_back("--ntasks-per-node=" + std::to_string(request.gpus_per_node));
    a.push_back("--gpus-per-node=" + std::to_string(request.gpus_per_node));
  } else {
    // One task per GPU, wherever Slurm finds them.
    a.push_back("--ntasks=" + std::to_string(request.gpus));
    a.push_back("--gpus-per-task=1");
  }
  if (request.whole_nodes) a.push_back("--exclusive");
  if (!request.exclude_nodes.empty())
    a.push_back("--exclude=" +
                topo::compressHostlist({request.exclude_nodes.begin(), request.exclude_nodes.end()}));
  if (request.max_duration) {
    long minutes = static_cast<long>(std::ceil(static_cast<double>(request.max_duration->count()) / 60.0));
    a.push_back("--time=" + std::to_string(std::max(1L, minutes)));
  }
  // Several nodes: under one leaf switch where the site describes its switches (topology/tree),
  // waiting for that at most as long as the request may wait at all (5 minutes by default).
  if (nodes > 1 || request.one_switch) {
    long wait = request.wait ? std::min<long>(request.wait->count(), 300) : 300;
    a.push_back("--switches=1@" + std::to_string(wait / 60) + ":" + (wait % 60 < 10 ? "0" : "") +
                std::to_string(wait % 60));
  }
  if (request.wait) a.push_back("--immediate=" + std::to_string(std::max<long>(1, request.wait->count())));
  return a;
}

std::string jobOfLease(const std::string& leaseId) {
  if (!leaseId.starts_with("slurm-")) return "";
  return leaseId.substr(6, leaseId.find('-', 6) - 6);
}

std::unique_ptr<SlurmSystem> realSlurmSystem() {
  return std::make_unique<RealSlurm>();
}

std::unique_ptr<PoolClient> openSlurmPool(const std::string& uri, std::unique_ptr<SlurmSystem> system) {
  if (uri == "slurm") return std::make_unique<SlurmPool>(std::nullopt, std::move(system));
  if (uri.starts_with("slurm:")) {
    std::string partition = uri.substr(6);
    if (partition.empty() || partition.find_first_of(" \t,/") != std::string::npos)
      throw badInput("bad pool URI '" + uri + "': expected slurm:PARTITION (a partition name from `sinfo`)");
    return std::make_unique<SlurmPool>(partition, std::move(system));
  }
  throw badInput("bad pool URI '" + uri + "': use slurm or slurm:PARTITION");
}

}  // namespace poolrun::pool::slurm
