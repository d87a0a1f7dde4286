// poolrun [options] -n N [--] PROGRAM [ARGS...]: the job flow, in its steps: read the options, open
// the pool and acquire a lease, plan on the leased GPUs, check the nodes (doctor), prepare the job
// directory and the launch, launch and supervise the ranks, release the lease.

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "agent_launch.hpp"
#include "command_options.hpp"
#include "job_retries.hpp"
#include "job_tuner.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/launcher/commands.hpp"
#include "poolrun/launcher/job_directory.hpp"
#include "poolrun/launcher/lease_keeper.hpp"
#include "poolrun/launcher/mpi.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/launcher/preflight.hpp"
#include "poolrun/launcher/slurm.hpp"
#include "poolrun/launcher/supervisor.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "poolrun/topo/hostlist.hpp"
#include "poolrun/topo/sources.hpp"
#include "run_options.hpp"

namespace poolrun::launcher {
namespace {

std::filesystem::path stateDir() {
  if (const char* d = std::getenv("POOLRUN_STATE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* d = std::getenv("XDG_STATE_HOME"); d != nullptr && *d != '\0')
    return std::filesystem::path(d) / "poolrun";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : "/tmp") / ".local/state/poolrun";
}

std::string hostName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// `mpirun --version` starts Open MPI's runtime libraries (tens of milliseconds), so its answer is
// kept in the state directory, keyed by the binary's path, size and modification time.
MpiInstall detectMpiCached(const std::string& mpirun, std::optional<MpiFlavor> forced) {
  if (forced) return detectMpi(mpirun, forced);
  std::string path = findExecutable(mpirun);
  std::error_code ec;
  auto real = std::filesystem::canonical(path, ec);
  if (ec) return detectMpi(mpirun, forced);
  auto size = std::filesystem::file_size(real, ec);
  auto mtime = std::filesystem::last_write_time(real, ec).time_since_epoch().count();
  std::string key = real.string() + " " + std::to_string(size) + " " + std::to_string(mtime);
  std::filesystem::path cache = stateDir() / "mpi-version";
  std::ifstream in(cache);
  std::string cachedKey, flavor, version;
  if (std::getline(in, cachedKey) && cachedKey == key && std::getline(in, flavor) &&
      std::getline(in, version)) {
    return {mpirun, flavor == "ompi5" ? MpiFlavor::kOmpi5 : MpiFlavor::kOmpi4, version};
  }
  MpiInstall found = detectMpi(mpirun, forced);
  try {  // a cache: where the state directory is not the user's own or not writable, asked again next time
    makeOwnDirectory(cache.parent_path(), "state directory");
    writeFileAtomically(cache, key + "\n" + toString(found.flavor) + "\n" + found.version + "\n",
                        std::nullopt, Durability::kSameBoot);
  } catch (const Error&) {
  }
  return found;
}

// Releases the lease on every way out of the scope.
class LeaseGuard {
 public:
  LeaseGuard(pool::PoolClient& pool, std::string id, std::ostream& err)
      : pool_(pool), id_(std::move(id)), err_(err) {}
  ~LeaseGuard() {
    try {
      pool_.release(id_);
    } catch (const std::exception& e) {
      err_ << "poolrun: warning: could not release lease " << id_ << " (" << e.what()
           << "); it expires at the end of its time to live\n";
    }
  }
  LeaseGuard(const LeaseGuard&) = delete;
  LeaseGuard& operator=(const LeaseGuard&) = delete;

 private:
  pool::PoolClient& pool_;
  std::string id_;
  std::ostream& err_;
};

// How long `lease` holds from `now`: until its expiry by this machine's clock, and never longer than
// its time to live (so that a pool whose clock runs ahead cannot make poolrun wait past the real
// expiry; one whose clock runs behind makes it give up early, never late).
std::chrono::milliseconds validFor(const pool::Lease& lease, std::chrono::system_clock::time_point now) {
  using std::chrono::milliseconds;
  auto left = std::max(std::chrono::duration_cast<milliseconds>(lease.expires - now), milliseconds(0));
  return lease.ttl.count() > 0 ? std::min(left, std::chrono::duration_cast<milliseconds>(lease.ttl)) : left;
}

// What a renewal's reply says the holder should know: nodes of the lease whose agent went quiet,
// and an idle lease's reclaim.
std::map<std::string, RenewReply::Notice> leaseNotices(const pool::Lease& lease,
                                                       std::chrono::system_clock::time_point now) {
  std::map<std::string, RenewReply::Notice> out;
  for (const std::string& node : lease.at_risk_nodes)
    out["node " + node] = {
        "warning: node " + node + " of lease " + lease.id +
            " is unreachable (its agent has stopped sending heartbeats); ranks there may be "
            "lost",
        "node " + node + " is reachable again"};
  if (lease.reclaim_at)
    out["reclaim"] = {"warning: lease " + lease.id + " is idle (its GPUs unused since " +
                          pool::formatLocalTime(lease.idle_since.value_or(now), now) +
                          "): the pool reclaims it at " + pool::formatLocalTime(*lease.reclaim_at, now) +
                          " unless its GPUs get busy",
                      "lease " + lease.id + " is busy again: the pool no longer reclaims it"};
  return out;
}

// How long a job has to end for its lease's growth: the pool's grace, as for a preemption, and
// never less than this.
constexpr std::chrono::seconds kLeastResizeGrace{10};

// An elastic lease whose GPUs are no longer those the job started on (`resizes` then): grown since,
// or under a shrink notice. The job ends by the deadline, to be restarted at the new size.
std::optional<PreemptNotice> resizeNotice(const pool::Lease& lease, int resizes,
                                          const std::vector<pool::GpuRef>& started,
                                          std::chrono::system_clock::time_point now) {
  if (!lease.elastic) return std::nullopt;
  // The pool took GPUs of the job back already (a shrink its holder did not hear of in time): they
  // are another lease's now, so the job stops at once.
  for (const pool::GpuRef& g : started)
    if (std::find(lease.gpus.begin(), lease.gpus.end(), g) == lease.gpus.end())
      return PreemptNotice{now,
                           "the pool has taken back GPUs the job runs on; it holds " +
                               std::to_string(lease.gpus.size()) + " GPUs now",
                           true};
  if (lease.shrink_at)
    return PreemptNotice{*lease.shrink_at,
                         lease.shrink_reason + "; " +
                             std::to_string(lease.gpus.size() - lease.shrink_gpus.size()) + " GPUs left",
                         true};
  if (lease.resizes == resizes) return std::nullopt;
  return PreemptNotice{now + std::max(lease.preempt_grace, kLeastResizeGrace),
                       "it holds " + std::to_string(lease.gpus.size()) + " GPUs now", true};
}

// One renewal, in the lease keeper's terms: the pool saying the lease is gone, or that it is not
// ours (401, 403), ends the job; anything else (no connection, a timeout, a 5xx) may pass.
// `resizes`: the elastic lease's count of changes when the job started.
RenewReply renewOnce(pool::PoolClient& pool, const std::string& id, int resizes,
                     const std::vector<pool::GpuRef>& started) {
  auto sent = std::chrono::system_clock::now();
  try {
    pool::Lease lease = pool.renew(id);
    RenewReply reply{RenewReply::Kind::kRenewed, validFor(lease, sent), "", leaseNotices(lease, sent)};
    if (lease.preempt_at)
      reply.preempted = PreemptNotice{*lease.preempt_at, lease.preempt_reason};
    else
      reply.preempted = resizeNotice(lease, resizes, started, sent);
    return reply;
  } catch (const pool::PoolError& e) {
    bool gone = e.failure() == pool::PoolFailure::kGone || e.failure() == pool::PoolFailure::kForbidden ||
                e.failure() == pool::PoolFailure::kUnauthorized;
    return {gone ? RenewReply::Kind::kGone : RenewReply::Kind::kUnreachable, {}, e.what(), {}};
  } catch (const std::exception& e) {
    return {RenewReply::Kind::kUnreachable, {}, e.what(), {}};
  }
}

// Where the job's ranks run: what the pool says of its nodes, and --simulate.
struct JobSite {
  pool::RankSite site = pool::RankSite::kThisMachine;
  bool simulated = false;  // every node runs here through poolrun-sim-agent (a sim: pool, --simulate)

  bool slurm() const { return site == pool::RankSite::kSlurmAllocation; }
  // Ranks run on machines other than this one: they check their own RDMA ports, and poolrun-rank
  // reaps what they leave running there (poolrun's own subreaper covers this machine).
  bool otherMachines() const { return !simulated && site != pool::RankSite::kThisMachine; }
};

// The launch as prepared in the job directory.
struct Launch {
  MpiCommand cmd;
  std::string command;           // the command file: what --dry-run prints
  std::filesystem::path script;  // run.sh
};

// Where the pool says its ranks run, with --simulate; checks the options that depend on it (Slurm:
// launcher/src/slurm_launch.cpp). Throws poolrun::Error (kBadInput).
JobSite jobSite(const pool::PoolClient& pool, RunOptions& o) {
  JobSite where{pool.rankSite(), pool.rankSite() == pool::RankSite::kSimulated || o.simulate};
  if (!where.slurm() && (o.srun || !o.topology_file.empty()))
    throw badInput(std::string(o.srun ? "--launcher srun" : "--topology") +
                   " needs --pool slurm or slurm:PARTITION (pool here: '" + o.pool + "')");
  if (o.launch == "agents" && where.site != pool::RankSite::kRemoteNodes)
    throw badInput(
        "--launch agents is for a poold pool's nodes, whose agents start the daemons (pool here: '" + o.pool +
        "'); leave it out");
  if (where.slurm() && o.simulate)
    throw badInput(
        "--simulate runs a pool's nodes on this machine; a Slurm allocation's nodes run under Slurm (pool "
        "here: '" +
        o.pool + "'); use --pool sim:FILE or an http:// pool");
  if (where.slurm() && (o.preemptible || o.requeue))
    throw badInput(std::string(o.preemptible ? "--preemptible" : "--requeue") +
                   " is for the pools poolrun manages (local, sim:FILE, http://); a Slurm allocation is "
                   "preempted and requeued by Slurm's own rules (its partition's PreemptMode, sbatch "
                   "--requeue) (pool here: '" +
                   o.pool + "')");
  if (where.slurm() && o.max_ranks > 0)
    throw badInput("-n " + std::to_string(o.request.ranks) + ":" + std::to_string(o.max_ranks) +
                   ": an elastic job is for the pools poolrun manages (local, sim:FILE, http://); a Slurm "
                   "allocation keeps its size (pool here: '" +
                   o.pool + "'); ask for -n N");
  if (where.slurm() && !o.mig_profile.empty())
    throw badInput("--mig " + o.mig_profile +
                   " is for the pools poolrun manages (local, sim:FILE, http://); in a Slurm allocation ask "
                   "Slurm for MIG devices (--gres=gpu:" +
                   o.mig_profile + ":N where gres.conf has them) (pool here: '" + o.pool + "')");
  // An MPS share needs its GPU's control daemon, which the node's poold-agent runs: only the nodes
  // of a poold pool have one (local and sim: pools have no agent; Slurm has its own MPS gres).
  if ((o.share_percent > 0 || o.share_memory_bytes > 0) && !pool::isPooldUri(o.pool))
    throw badInput(
        "--share and --gpu-memory are for a poold pool (http://HOST:PORT), whose nodes' poold-agent runs "
        "the MPS daemons the shares need" +
        std::string(where.slurm() ? "; in a Slurm allocation ask Slurm for MPS (--gres=mps:N where "
                                    "gres.conf has it)"
                                  : "; this pool has no agent (without one, start nvidia-cuda-mps-control "
                                    "yourself and run on whole GPUs)") +
        " (pool here: '" + o.pool + "')");
  if (where.slurm()) forgetSlurmGpuVariables(o.request, o.exports);
  return where;
}

// Waits in the pool's queue, saying where the request stands. Ctrl-C (or SIGTERM, SIGHUP) while
// queued withdraws the request, as salloc does (PoolError kInterrupted); the supervisor takes the
// signals from the launch on (signalfd).
pool::Lease acquireLease(pool::PoolClient& pool, const pool::LeaseRequest& request, std::ostream& err) {
  pool::QueueInterruption interruption;
  bool told = false;
  try {
    return pool.acquire(request, [&](const pool::QueueProgress& progress) {
      if (!told) err << "poolrun: waiting in the queue of " << pool.describe() << "\n";
      told = true;
      err << "poolrun: " << pool::formatQueueProgress(progress, std::chrono::system_clock::now()) << "\n";
    });
  } catch (const pool::PoolError& e) {
    // The pool names the field; the user typed the option.
    if (e.failure() != pool::PoolFailure::kForbidden || !request.no_reclaim) throw;
    throw pool::PoolError(
        e.failure(), e.code(),
        "--no-reclaim is for administrators (an administrator's token may set it): " + std::string(e.what()));
  }
}

// The leased nodes in the pool's order, each with its topology: the pool's record, or for a Slurm
// allocation (entered here) a probe of each node.
std::vector<topo::ClusterNode> leasedNodes(pool::PoolClient& pool, const pool::Lease& lease,
                                           const JobSite& where, const RunOptions& o, std::ostream& err) {
  if (where.slurm()) {
    enterAllocation(lease);
    return slurmNodes(lease, {o.topology_file, stateDir() / "slurm-topology", ""}, err);
  }
  std::vector<topo::ClusterNode> nodes;
  for (const pool::GpuRef& g : lease.gpus) {
    if (nodes.empty() || nodes.back().name != g.node) nodes.push_back(pool.node(g.node));
  }
  return nodes;
}

JobPlan planJob(const std::vector<topo::ClusterNode>& nodes, const pool::Lease& lease, const JobSite& where,
                const PlanRequest& request, std::ostream& err) {
  std::vector<NodeGrant> grants;
  for (const topo::ClusterNode& n : nodes) {
    NodeGrant grant;
    grant.node = &n;
    // A MIG instance's unit number past the node's GPUs: its GPU by topo::migUnits (the pool's
    // numbering), the instance by its UUID.
    const std::vector<topo::MigUnit> units = topo::migUnits(*n.topology);
    for (const pool::GpuRef& g : lease.gpus) {
      if (g.node != n.name) continue;
      const size_t count = n.topology->gpus.size();
      if (g.mig.empty()) {
        grant.gpus.push_back(g.index);
        if (g.share) grant.shares[g.index] = {g.share_percent, g.share_memory};
      } else if (g.index >= count && g.index - count < units.size()) {
        grant.gpus.push_back(units[g.index - count].gpu);
        grant.mig.push_back(g.mig);
      } else {
        throw Error(ErrorCode::kInternal, "lease " + lease.id + " holds MIG instance " + g.mig + " as unit " +
                                              std::to_string(g.index) + " of node " + n.name +
                                              ", which the pool's topology of the node does not have");
      }
    }
    grants.push_back(std::move(grant));
  }
  PlanRequest sized = request;
  if (lease.elastic) sized.ranks = static_cast<int>(lease.gpus.size());  // one rank per GPU it holds now
  JobPlan plan = makePlan(grants, sized);
  if (where.slurm()) applySlurmGpuNumbering(plan, lease, err);
  return plan;
}

// The doctor's pre-launch checks; false, after saying so, when they found what would make the job
// hang. This machine is checked through its /sys, other nodes by what their topology records.
bool doctorPasses(const JobPlan& plan, const JobSite& where, std::ostream& err) {
  const std::string here = hostName();
  doctor::Report report = preflight(plan, [&](const NodePlan& n) {
    return where.site == pool::RankSite::kThisMachine || (!where.simulated && n.name == here);
  });
  printPreflight(report, err);
  if (!report.failed()) return true;
  err << "poolrun: refusing to start: the doctor found " << report.count(doctor::Status::kFail)
      << " problem(s) that would make the job hang (above); fix them, or start anyway with --no-doctor\n";
  return false;
}

// The tuner configuration the job's ranks get, if any (nullopt: NCCL tunes itself, or the user's
// NCCL_TUNER_PLUGIN stays).
std::optional<nlohmann::ordered_json> jobTuner(const JobPlan& plan, const RunOptions& o, std::ostream& err) {
  if (!o.tuner || std::getenv("NCCL_TUNER_PLUGIN") != nullptr) return std::nullopt;
  nlohmann::ordered_json config = tunerConfig(plan);
  if (plan.nodes.size() == 1 || config["net"]["nics_per_node"].get<size_t>() > 0) return config;
  err << "poolrun: note: no NIC of the " << toString(plan.fabric)
      << " fabric is known on the leased nodes, so the tuner has no network to model: NCCL tunes itself\n";
  return std::nullopt;
}

// The one line that says which node mpirun could not start the job on, and what to do.
std::string unreachableLine(const DaemonFailure& f, const JobPlan& plan, const JobSite& where,
                            bool viaAgents) {
  std::vector<std::string> nodes;
  for (const NodePlan& n : plan.nodes) nodes.push_back(n.name);
  // A daemon that ran and was lost with its node or agent: not a setup to fix.
  if (f.reason.find("closed the connection before the daemon ended") != std::string::npos)
    return "mpirun lost the job's daemon on node " + f.node + " (" + f.reason + "); exit status " +
           std::to_string(kExitRefused);
  std::string line = "mpirun could not start the job on " +
                     (f.node.empty() ? "one of the leased nodes (" + topo::compressHostlist(nodes) + ")"
                                     : "node " + f.node) +
                     " (" + f.reason + ")";
  if (viaAgents)
    return line +
           ": the ranks on a poold pool's nodes are started by the nodes' agents (docs/launch.md), so " +
           "each leased node's poold-agent must run with --launch-listen and be reachable from here, or "
           "use " +
           "--launch ssh. Exit status " + std::to_string(kExitRefused);
  if (where.site == pool::RankSite::kRemoteNodes)
    return line +
           ": the ranks on a poold pool's nodes are started from here over ssh, so every leased node " +
           "must take ssh from this machine without a password (and have poolrun and Open MPI at the same " +
           "paths); on one machine, run the pool's nodes here with --simulate. Exit status " +
           std::to_string(kExitRefused);
  return line + "; exit status " + std::to_string(kExitRefused);
}

// The job directory's file a preemption's deadline is written to (Unix seconds), and how often a
// requeued job is restarted at most.
constexpr const char* kDeadlineFile = "preempt-deadline";
constexpr int kMaxRestarts = 10;

LaunchSpec launchSpec(const JobPlan& plan, const pool::Lease& lease, const JobSite& where,
                      const RunOptions& o, const JobDirectory& dir,
                      const std::optional<nlohmann::ordered_json>& tuner, int restart,
                      const std::filesystem::path& launchFile) {
  LaunchSpec spec;
  if (!launchFile.empty()) {
    spec.rsh_agent = sibling("poolrun-rsh");
    spec.launch_file = launchFile;
  }
  spec.plan = &plan;
  spec.job_dir = dir.path();
  spec.rank_wrapper = sibling("poolrun-rank");
  spec.program = o.program;
  spec.simulated = where.simulated;
  spec.sim_agent = sibling("poolrun-sim-agent");
  if (where.simulated) {
    topo::CpuCount here = topo::countLocalCpus();
    spec.local_cores = std::max(here.cores, 1);
    spec.local_threads = std::max(1, here.threads / spec.local_cores);
  }
  spec.user_mca = o.mca;
  spec.user_exports = o.exports;
  spec.tag_output = o.tag_output;
  spec.mpirun_args = o.mpirun_args;
  spec.job_env.emplace_back("POOLRUN_RANK_ENV", encodeRankEnv(plan, where.simulated));
  spec.job_env.emplace_back("POOLRUN_JOB_DIR", dir.path().string());
  spec.job_env.emplace_back("POOLRUN_LEASE", lease.id);
  // Nodes this process cannot read (a pool's or Slurm's remote nodes): each rank checks its own RDMA
  // ports before the program starts (poolrun-rank).
  if (!where.simulated && o.doctor && plan.fabric != topo::Fabric::kTcp)
    spec.job_env.emplace_back("POOLRUN_CHECK_PORTS", "1");
  // Where ranks run on other machines, poolrun-rank stays beside each program as its subreaper and
  // ends what it leaves running there. `-x POOLRUN_REAP=0` turns it off.
  if (where.otherMachines() && !o.request.user_env.count("POOLRUN_REAP"))
    spec.job_env.emplace_back("POOLRUN_REAP", "1");
  // What a preemption tells the ranks (docs/preemption.md): the file its deadline is written to
  // when the notice comes (an environment cannot change once the ranks run), the pool's grace, and
  // how often the job has been restarted (torchrun's variable too, for torch scripts).
  spec.job_env.emplace_back("POOLRUN_PREEMPT_DEADLINE_FILE", dir.file(kDeadlineFile).string());
  spec.job_env.emplace_back("POOLRUN_PREEMPT_GRACE", std::to_string(lease.preempt_grace.count()));
  for (const char* var : {"POOLRUN_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
    if (!o.request.user_env.count(var)) spec.job_env.emplace_back(var, std::to_string(restart));
  for (auto& kv : rendezvousVariables(plan, where.simulated, pickRendezvousPort(), o.request.user_env))
    spec.job_env.push_back(std::move(kv));
  if (tuner) {
    spec.job_env.emplace_back("NCCL_TUNER_PLUGIN", sibling("libnccl-tuner-poolrun.so"));
    spec.job_env.emplace_back("POOLRUN_TUNER_CONFIG", tuner->dump());
  }
  return spec;
}

// Writes what mpirun reads (hostfile, rankfile.mpi, tuner.json, rank-env.json) and the launch as it
// can be run again by hand: run.sh sets every variable and runs mpirun; the command file is the same
// for reading, the two JSON documents read from their files.
Launch writeLaunch(const JobDirectory& dir, MpiCommand cmd,
                   const std::optional<nlohmann::ordered_json>& tuner) {
  if (tuner) dir.write("tuner.json", tuner->dump(2) + "\n");
  dir.write("hostfile", cmd.hostfile);
  dir.write("rankfile.mpi", cmd.rankfile);
  std::map<std::string, std::string> fromFiles;
  for (const auto& [k, v] : cmd.env) {
    if (k == "POOLRUN_RANK_ENV") fromFiles[k] = dir.write("rank-env.json", v + "\n").string();
    if (k == "POOLRUN_TUNER_CONFIG") fromFiles[k] = dir.file("tuner.json").string();
  }
  Launch launch{std::move(cmd), "", {}};
  launch.command = readableCommand(launch.cmd, fromFiles);
  dir.write("command", launch.command);
  using std::filesystem::perms;
  launch.script = dir.write(
      "run.sh", launchScript(launch.cmd, std::filesystem::current_path()),
      perms::owner_all | perms::group_read | perms::group_exec | perms::others_read | perms::others_exec);
  return launch;
}

// The job directory with everything the launch needs: the plan's files, the tuner configuration,
// the mpirun (or srun) command and its files.
Launch prepareLaunch(pool::PoolClient& pool, const JobPlan& plan, const pool::Lease& lease,
                     const JobSite& where, const RunOptions& o, const JobDirectory& dir, int restart,
                     std::ostream& err) {
  dir.writePlan(plan);
  const std::optional<nlohmann::ordered_json> tuner = jobTuner(plan, o, err);
  const LaunchSpec spec = launchSpec(plan, lease, where, o, dir, tuner, restart,
                                     agentLaunchFile(pool, lease, plan, where.site, o, dir));
  return writeLaunch(
      dir, o.srun ? buildSrunCommand(spec) : buildMpiCommand(spec, detectMpiCached(o.mpirun, o.mpi_flavor)),
      tuner);
}

void printDryRun(const JobPlan& plan, const pool::Lease& lease, const pool::PoolClient& pool,
                 const JobSite& where, const JobDirectory& dir, const Launch& launch, std::ostream& out) {
  out << planTable(plan) << "\nlease " << lease.id << " from " << pool.describe() << " (released: dry run)\n"
      << "job directory: " << dir.path().string() << "\n\n"
      << "wrote " << launch.script.string()
      << ", which sets every variable below and runs mpirun; to run the job:\n"
      << "  sh " << shellJoin({launch.script.string()}) << "\n"
      << (where.simulated
              ? ""
              : "(nothing holds these GPUs for it then: the lease was released, and without poolrun "
                "no lease is taken)\n")
      << "\n"
      << launch.command;
}

// Runs the launch to its end while the lease is renewed on a thread of its own, retried until the
// lease's expiry when the pool cannot be reached (lease_keeper.hpp); says which rank failed first.
int superviseJob(pool::PoolClient& pool, const pool::Lease& lease, const JobPlan& plan, const Launch& launch,
                 const JobSite& where, const RunOptions& o, const JobDirectory& dir,
                 std::chrono::milliseconds ran_before, bool& preempted, bool& resized, RunFailure& failure,
                 std::ostream& err) {
  using std::chrono::milliseconds;
  SuperviseOptions so;
  so.argv = launch.cmd.argv;
  so.env = launch.cmd.env;
  if (o.timeout) so.timeout = *o.timeout;
  so.ran_before = ran_before;
  // A lease learns of its preemption at a renewal: renewed every quarter of the pool's grace (at
  // most every second), so that the notice leaves the job most of it. Any lease of a pool that
  // preempts may be a victim, --preemptible or not: one its owner holds beyond a quota's guarantee.
  milliseconds every = milliseconds(o.lease_ttl) / 3;
  if (lease.preempt_grace.count() > 0)
    every = std::min(every, std::max(milliseconds(1000), milliseconds(lease.preempt_grace) / 4));
  so.preempt_signal = o.preempt_signal;
  so.preempt_ranks_here = where.site == pool::RankSite::kThisMachine || where.simulated;
  so.preempted = [&](const PreemptNotice& notice) {
    auto unix = std::chrono::duration_cast<std::chrono::seconds>(notice.deadline.time_since_epoch());
    dir.write(kDeadlineFile, std::to_string(unix.count()) + "\n");
  };
  if (lease.preemptible && !so.preempt_ranks_here && o.preempt_signal != SIGUSR1 &&
      o.preempt_signal != SIGUSR2)
    err << "poolrun: note: the ranks run on other machines, where Open MPI's mpirun answers a preemption's "
        << (o.preempt_signal == SIGTERM  ? "SIGTERM"
            : o.preempt_signal == SIGINT ? "SIGINT"
                                         : "SIGHUP")
        << " by its own kill sequence (the ranks get SIGTERM a second later, SIGKILL a second after that): "
           "to keep the pool's grace, use --preempt-signal USR1 or USR2, which mpirun passes on as they "
           "are\n";
  LeaseKeeper keeper(lease.id, validFor(lease, std::chrono::system_clock::now()), every, [&] {
    RenewReply reply = renewOnce(pool, lease.id, lease.resizes, lease.gpus);
    // A running job's directory stays the newest: pruning (below) never takes it.
    std::error_code ec;
    if (reply.kind == RenewReply::Kind::kRenewed)
      std::filesystem::last_write_time(dir.path(), std::filesystem::file_time_type::clock::now(), ec);
    return reply;
  });
  so.lease = &keeper;
  so.started = [&] {
    pool.idle();
    // poolrun's own job directories: a week's, and always the 100 newest, looked at hourly.
    if (o.job_dir.empty())
      pruneJobDirs(stateDir() / "jobs", 100, std::chrono::hours(24 * 7), std::chrono::minutes(60));
  };
  SuperviseResult r = supervise(so, err);
  const bool viaAgents = std::any_of(launch.cmd.env.begin(), launch.cmd.env.end(),
                                     [](const auto& kv) { return kv.first == "POOLRUN_LAUNCH_FILE"; });
  if (r.unreachable)
    err << "poolrun: error: " << unreachableLine(*r.unreachable, plan, where, viaAgents) << "\n";
  // A preempted or resized job's ranks ended by the signal were sent it: no failure to report.
  bool expected = (r.preempted || r.resized) && r.failure && r.failure->signal != 0;
  if (r.failure && !expected && r.failure->rank >= 0 &&
      static_cast<size_t>(r.failure->rank) < plan.ranks.size()) {
    const RankPlan& rp = plan.ranks[static_cast<size_t>(r.failure->rank)];
    err << "poolrun: rank " << rp.rank << " on node " << plan.nodeOf(rp).name << " (GPU " << rp.gpu << ") "
        << (r.failure->signal != 0 ? "was killed by signal " + std::to_string(r.failure->signal)
                                   : "exited with code " + std::to_string(r.failure->exit_code))
        << "\n";
  }
  preempted = r.preempted;
  resized = r.resized;
  failure = runFailure(pool, lease, r);
  return r.exit_status;
}

// The exit status for an error that ended the flow, after printing it.
int failedToStart(const std::exception& e, std::ostream& err) {
  err << "poolrun: error: " << e.what() << "\n";
  const auto* pe = dynamic_cast<const Error*>(&e);
  return pe != nullptr && pe->code() == ErrorCode::kInternal ? 1 : kExitRefused;
}

// After a job stopped for its lease's change of size: PoolClient::shrink (the GPUs under a notice
// given back), retried while the pool cannot be reached, for at most half the lease's time to live
// (the keeper renewed it at most a third of it ago). nullopt, after saying why, where the lease is
// gone.
std::optional<pool::Lease> giveBack(pool::PoolClient& pool, const pool::Lease& lease, std::ostream& err) {
  const auto until = std::chrono::steady_clock::now() + lease.ttl / 2;
  for (bool told = false;;) {
    std::string why;
    try {
      return pool.shrink(lease.id);
    } catch (const pool::PoolError& e) {
      const bool gone = e.failure() == pool::PoolFailure::kGone ||
                        e.failure() == pool::PoolFailure::kForbidden ||
                        e.failure() == pool::PoolFailure::kUnauthorized;
      if (gone) {
        err << "poolrun: the job ended for its lease's change of size, and the lease is lost: " << e.what()
            << "\n";
        return std::nullopt;
      }
      why = e.what();
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (std::chrono::steady_clock::now() >= until) {
      err << "poolrun: the job ended for its lease's change of size, and the pool could not be reached since "
             "("
          << why << "): giving up\n";
      return std::nullopt;
    }
    if (!told)
      err << "poolrun: warning: cannot reach the pool to restart at the new size (" << why << "); retrying\n";
    told = true;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// Before any lease: the directories the job's files go to are the user's own (checkOwnDirectory),
// the state directory and its jobs/ made where missing. A --job-dir that does not exist yet is
// made and checked with the job's files.
void checkJobDirectories(const RunOptions& options) {
  if (options.job_dir.empty()) {
    makeOwnDirectory(stateDir(), "state directory");
    makeOwnDirectory(stateDir() / "jobs", "job directories' folder");
  } else if (std::error_code ec; std::filesystem::exists(options.job_dir, ec)) {
    checkOwnDirectory(options.job_dir, "job directory");
  }
}

// A detached job's launcher takes the lease its job was granted (docs/jobs.md). poold may be
// restarting or failing over as the agent starts it: an unreachable poold is tried again, with a
// warning, while the lease could still be alive (its TTL); any other refusal ends the launch.
pool::Lease adoptLease(pool::PoolClient& pool, const RunOptions& options, std::ostream& err) {
  const auto deadline = std::chrono::steady_clock::now() + options.lease_ttl;
  std::chrono::milliseconds wait(200);
  for (bool said = false;;) {
    try {
      return pool.renew(options.adopt_lease);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kIo || std::chrono::steady_clock::now() + wait >= deadline) throw;
      if (!said)
        err << "poolrun: warning: " << e.what() << "; trying again while lease " << options.adopt_lease
            << " may be alive (" << options.lease_ttl.count() << " s)\n";
      said = true;
      std::this_thread::sleep_for(wait);
      wait = std::min(wait * 2, std::chrono::milliseconds(2000));
    }
  }
}

// One run of the job: a lease, the plan, the doctor, the job directory, the launch, the release.
// An elastic lease's job is started again on the lease's GPUs each time it changes size, under the
// same lease. `dir_path`: the job directory, chosen by the first run (the first lease's) and kept by
// restarts; `restart` counts the starts before this one. `preempted`: whether the pool preempted it
// (not a program that exits 75 of its own accord).
int runJob(pool::PoolClient& pool, const JobSite& where, const RunOptions& options, int& restart,
           std::filesystem::path& dir_path, bool& preempted, RunFailure& failure, std::ostream& out,
           std::ostream& err) {
  // A detached job's launcher runs on the lease the pool granted its job (docs/jobs.md).
  pool::Lease lease = options.adopt_lease.empty() ? acquireLease(pool, leaseRequest(options), err)
                                                  : adoptLease(pool, options, err);
  LeaseGuard release(pool, lease.id, err);
  std::chrono::milliseconds ran{0};  // the job's time in its starts so far: --timeout spans them
  if (lease.elastic)
    err << "poolrun: elastic lease " << lease.id << ": " << lease.gpus.size() << " GPUs ("
        << options.request.ranks << " to " << options.max_ranks << ")\n";
  for (;;) {
    const std::vector<topo::ClusterNode> nodes = leasedNodes(pool, lease, where, options, err);
    PlanRequest request = options.request;
    if (options.placement.whole_nodes && lease.gpus.size() != static_cast<size_t>(request.ranks)) {
      // Whole nodes: a rank on every GPU they have, as many as -n asked for at least.
      if (restart == 0)
        err << "poolrun: note: --whole-nodes: the lease holds " << lease.gpus.size() << " GPUs on "
            << nodes.size() << (nodes.size() == 1 ? " node" : " nodes") << " for -n " << request.ranks
            << ": starting a rank on each\n";
      request.ranks = static_cast<int>(lease.gpus.size());
    }
    const JobPlan plan = planJob(nodes, lease, where, request, err);
    if (!where.slurm()) checkUserGpusWithinPlan(plan, "lease " + lease.id);  // Slurm numbers them its own way
    if (restart == 0)
      if (std::string note = ignoredShellVariablesNote(plan, options.shell_env); !note.empty())
        err << "poolrun: note: " << note << "\n";
    if (options.doctor && !doctorPasses(plan, where, err)) return kExitRefused;
    if (restart == 0 && std::find(plan.notes.begin(), plan.notes.end(), migNcclNote()) != plan.notes.end())
      err << "poolrun: note: " << migNcclNote() << "\n";

    const bool own_dir = options.job_dir.empty();  // poolrun's, under the state directory: marked, pruned
    if (dir_path.empty())
      dir_path = own_dir ? stateDir() / "jobs" / lease.id : std::filesystem::path(options.job_dir);
    // A dry run's directory is its product, synced; a launch's is read back by mpirun (job_directory.hpp).
    const JobDirectory dir(dir_path, options.dry_run ? Durability::kSynced : Durability::kSameBoot);
    if (own_dir) dir.write(kJobMarkerFile, dir_path.filename().string() + "\n");
    std::error_code ec;
    std::filesystem::remove(dir.file(kDeadlineFile), ec);  // an earlier run's notice is not this run's
    const Launch launch = prepareLaunch(pool, plan, lease, where, options, dir, restart, err);
    if (options.dry_run) {
      printDryRun(plan, lease, pool, where, dir, launch, out);
      return 0;
    }
    bool resized = false;
    const auto started = std::chrono::steady_clock::now();
    const int status =
        superviseJob(pool, lease, plan, launch, where, options, dir, ran, preempted, resized, failure, err);
    ran += std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    if (!resized) return status;
    // The job has left every GPU: those under a shrink notice go back now (a plain renewal where
    // none is pending), and the job starts again on what the lease holds then.
    std::optional<pool::Lease> next = giveBack(pool, lease, err);
    if (!next) return kExitLeaseLost;
    lease = std::move(*next);
    if (lease.preempt_at) {  // preempted meanwhile: that wins
      preempted = true;
      err << "poolrun: lease " << lease.id << " is " << lease.preempt_reason
          << " while the job ended for its change of size: it is not restarted\n";
      return kExitPreempted;
    }
    ++restart;
    err << "poolrun: restarting the job on " << lease.gpus.size() << " GPUs (" << pool::formatGpus(lease.gpus)
        << "; restart " << restart << "), in the same job directory " << dir.path().string() << "\n";
  }
}

}  // namespace

std::unique_ptr<pool::PoolClient> openJobPool(const RunOptions& o) {
  pool::ClientOptions copts;
  if (!o.token_file.empty()) {
    copts.token = pool::readClientToken(o.token_file, "your token");
  } else if (const char* t = std::getenv("POOLRUN_TOKEN")) {
    copts.token = t;
  }
  copts.ca_file = o.ca_file;
  if (const char* ca = std::getenv("POOLRUN_CA"); copts.ca_file.empty() && ca != nullptr) copts.ca_file = ca;
  copts.owner = pool::currentUser();
  return pool::openPool(o.pool, copts);
}

pool::LeaseRequest leaseRequest(const RunOptions& o) {
  pool::LeaseRequest lr;
  lr.gpus = o.request.ranks;
  lr.gpus_per_node = o.request.gpus_per_node;
  if (o.request.fabric != topo::Fabric::kTcp) lr.fabric = o.request.fabric;  // every node can do TCP
  lr.priority = o.priority;
  lr.account = o.placement.account;
  lr.reservation = o.placement.reservation;
  lr.no_reclaim = o.no_reclaim;
  lr.preemptible = o.preemptible;
  lr.max_gpus = o.max_ranks;
  lr.resize_interval = o.resize_interval;
  lr.mig_profile = o.mig_profile;
  lr.mig_or_larger = o.mig_or_larger;
  lr.share_percent = o.share_percent;
  lr.share_memory_bytes = o.share_memory_bytes;
  lr.whole_nodes = o.placement.whole_nodes;
  lr.gpu_model = o.placement.gpu_model;
  lr.min_memory_bytes = o.placement.min_memory_bytes;
  lr.labels = o.placement.labels;
  lr.exclude_nodes = o.placement.exclude_nodes;
  lr.one_switch = o.placement.one_switch;
  lr.owner = pool::currentUser();
  lr.job_name = o.job_name;
  lr.wait = o.wait;
  lr.ttl = o.lease_ttl;
  if (o.timeout) lr.max_duration = *o.timeout + o.lease_ttl;
  return lr;
}

int runCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  RunOptions options;
  if (std::optional<int> status = parseRunOptions(args, options, out, err)) return *status;
  if (options.detach) return submitDetached(options, out, err);
  try {
    checkJobDirectories(options);
    std::unique_ptr<pool::PoolClient> pool = openJobPool(options);
    const JobSite where = jobSite(*pool, options);
    std::filesystem::path dir;
    // --requeue: a preempted run is followed by the next, queued at once with the same request; the
    // lease of the one before has been released (the preemptor's start waits for it). `restart`
    // counts every start before the next (an elastic job's restarts too), `requeues` the requeues.
    // --retries: a failed run is followed by the next on a new lease, without the nodes that failed.
    for (int restart = 0, requeues = 0, retries = 0;; ++restart) {
      bool preempted = false;
      RunFailure failure;
      int status = runJob(*pool, where, options, restart, dir, preempted, failure, out, err);
      // A run that failed of itself (a detached job's launcher leaves what follows to its pool).
      if (failure.failed && options.adopt_lease.empty()) {
        if (!retryAfterFailure(failure, status, retries, options, dir, err)) return status;
        continue;
      }
      if (preempted && !options.requeue)
        err << "poolrun: the job was preempted and has ended; exit status " << status
            << " (try again later: rerun it, or give --requeue to have poolrun queue it again itself)\n";
      // A detached job's launcher ends: its pool requeues the job (a new lease, a new launcher).
      if (!preempted || !options.requeue || !options.adopt_lease.empty()) return status;
      if (requeues++ == kMaxRestarts) {
        err << "poolrun: not requeued: the job has been restarted " << kMaxRestarts
            << " times, the most --requeue does (exit status " << kExitPreempted << ")\n";
        return status;
      }
      err << "poolrun: requeued the preempted job (restart " << requeues << " of at most " << kMaxRestarts
          << "), with the same request and job directory " << dir.string() << "\n";
    }
  } catch (const pool::PoolError& e) {
    if (e.failure() != pool::PoolFailure::kInterrupted) return failedToStart(e, err);
    err << "poolrun: " << e.what() << "\n";  // the queued request was withdrawn
    return 128 + e.signal();
  } catch (const std::exception& e) {
    return failedToStart(e, err);
  }
}

}  // namespace poolrun::launcher
