// poolrun [options] -n N [--] PROGRAM [ARGS...]: lease, plan, job directory, mpirun, supervision,
// release.

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "option_checks.hpp"
#include "poolrun/launcher/commands.hpp"
#include "poolrun/launcher/lease_keeper.hpp"
#include "poolrun/launcher/mpi.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/launcher/preflight.hpp"
#include "poolrun/launcher/slurm.hpp"
#include "poolrun/launcher/supervisor.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/topo/error.hpp"
#include "poolrun/topo/names.hpp"
#include "poolrun/topo/regular_file.hpp"
#include "poolrun/topo/sources.hpp"

namespace po = boost::program_options;

namespace poolrun::launcher {
namespace {

constexpr const char* kRunUsage =
    "usage: poolrun [options] -n N [--] PROGRAM [ARGS...]\n"
    "Takes N GPUs from the pool, binds every rank to its GPU, NIC(s) and cores, runs PROGRAM under\n"
    "Open MPI and gives the GPUs back however the job ends.\n";

constexpr const char* kRunHelpTail =
    "\nmpirun options: --mca KEY VALUE is passed through; --mpirun-arg ARG passes any other.\n"
    "\n"
    "environment:\n"
    "  POOLRUN_POOL        the pool when --pool is not given (default local)\n"
    "  POOLRUN_TOKEN       the bearer token for http pools when --token-file is not given\n"
    "  POOLRUN_STATE_DIR   state directory: local and sim: pools, job directories, caches (else\n"
    "                      $XDG_STATE_HOME/poolrun, else $HOME/.local/state/poolrun)\n"
    "  POOLRUN_FIXTURES    where cluster files' shared/fixtures/ topologies are\n"
    "  USER                the owner of the lease in local and sim: pools\n"
    "  NCCL_TUNER_PLUGIN   set: NCCL keeps your plugin and poolrun's tuner is not used\n"
    "  CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, NCCL_IB_HCA, NCCL_IB_DISABLE, NCCL_IB_GID_INDEX,\n"
    "  NCCL_IB_TC, NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ, NCCL_SOCKET_IFNAME, UCX_NET_DEVICES, RANK,\n"
    "  WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE\n"
    "                      set: yours wins over the plan's for every rank (as -x VAR=VALUE does)\n"
    "  SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_STEP_GPUS, SLURM_MPI_TYPE, ...\n"
    "                      --pool slurm: the allocation poolrun runs in\n"
    "\n"
    "exit status: the first failing rank's code (128+N for signal N); 124 timeout; 125 refused to start;\n"
    "126 lease lost; 2 bad command line.\n";

// --pool's default: $POOLRUN_POOL, else this node's GPUs (as poolctl).
std::string defaultPool() {
  const char* p = std::getenv("POOLRUN_POOL");
  return p != nullptr && *p != '\0' ? p : "local";
}

std::filesystem::path selfDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : exe.parent_path();
}

// A binary or library built next to poolrun (build tree) or installed beside it.
std::string sibling(const std::string& name) {
  std::filesystem::path dir = selfDir();
  for (const char* sub : {".", "../runtime", "../launcher", "../nccl_tuner", "../lib", "../bin"}) {
    std::filesystem::path p = dir / sub / name;
    if (std::filesystem::exists(p)) return std::filesystem::weakly_canonical(p).string();
  }
  return name;  // from PATH
}

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
  std::filesystem::create_directories(cache.parent_path(), ec);
  std::ofstream(cache) << key << "\n" << toString(found.flavor) << "\n" << found.version << "\n";
  return found;
}

// The tuner configuration ("poolrun.tuner/1") for the job's hardware.
nlohmann::ordered_json tunerConfig(const JobPlan& plan) {
  const RankPlan& r0 = plan.ranks.front();
  const topo::NodeTopology& t = *plan.nodeOf(r0).node.topology;
  const topo::Gpu& gpu = t.gpus[static_cast<size_t>(r0.gpu)];
  int links = gpu.nvswitch_links;
  for (const topo::NvLinkPeer& p : gpu.nvlinks) links += p.gpu != topo::kNoIndex ? p.count : 0;
  double perLink = gpu.sm >= 100 ? 50 : gpu.sm == 60 ? 20 : 25;  // GB/s per link and direction
  std::set<std::string> nics;
  bool gdr = true;
  for (const RankPlan& r : plan.ranks) {
    if (r.node_index != 0) break;
    for (const NicChoice& n : r.nics) nics.insert(n.name);
    gdr = gdr && r.gdr;
  }
  std::string vendor = t.packages.empty() ? "" : t.packages.front().vendor;
  return {{"schema", "poolrun.tuner/1"},
          {"fabric", toString(plan.fabric)},
          {"nodes", plan.nodes.size()},
          {"gpus_per_node", plan.nodes.front().ranks},
          {"gpu",
           {{"sm", gpu.sm},
            {"nvlink_gbyte_s", links * perLink},
            {"nvswitch", t.nvswitch},
            {"nvls", t.nvswitch && gpu.sm >= 90}}},
          {"net",
           {{"nics_per_node", nics.size()},
            {"nic_gbit_s", r0.nics.empty() ? 0.0 : r0.nics.front().rate_gbps},
            {"gdr", gdr && !nics.empty()},
            {"sharp", false}}},
          {"cpu_vendor", vendor == "AuthenticAMD"   ? "amd"
                         : vendor == "GenuineIntel" ? "intel"
                                                    : "other"}};
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

// One renewal, in the lease keeper's terms: the pool saying the lease is gone, or that it is not
// ours (401, 403), ends the job; anything else (no connection, a timeout, a 5xx) may pass.
RenewReply renewOnce(pool::PoolClient& pool, const std::string& id) {
  auto sent = std::chrono::system_clock::now();
  try {
    return {RenewReply::Kind::kRenewed, validFor(pool.renew(id), sent), ""};
  } catch (const pool::PoolError& e) {
    bool gone = e.failure() == pool::PoolFailure::kGone || e.failure() == pool::PoolFailure::kForbidden ||
                e.failure() == pool::PoolFailure::kUnauthorized;
    return {gone ? RenewReply::Kind::kGone : RenewReply::Kind::kUnreachable, {}, e.what()};
  } catch (const std::exception& e) {
    return {RenewReply::Kind::kUnreachable, {}, e.what()};
  }
}

// Splits the command line at the program: options before it, PROGRAM [ARGS...] after.
void splitProgram(const std::vector<std::string>& args, const po::options_description& opts,
                  std::vector<std::string>& options, std::vector<std::string>& program,
                  std::vector<std::pair<std::string, std::string>>& mca) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;
    if (a == "-np" || a == "--np") {  // mpirun's spelling of -n
      if (i + 1 >= args.size() || args[i + 1] == "--") missingValue(a, opts.find("-n", false));
      options.insert(options.end(), {"-n", args[++i]});
      continue;
    }
    if (a == "--mca") {
      if (i + 2 >= args.size()) throw po::error("--mca needs two values: KEY VALUE (an MCA parameter)");
      mca.emplace_back(args[i + 1], args[i + 2]);
      i += 2;
      continue;
    }
    options.push_back(a);
    std::string name = a.starts_with("--") ? a.substr(2) : a.substr(0, 2);
    if (a.find('=') != std::string::npos || (!a.starts_with("--") && a.size() > 2)) continue;
    const po::option_description* d = opts.find_nothrow(name, false);
    if (d != nullptr && d->semantic()->max_tokens() > 0) {
      if (i + 1 >= args.size() || args[i + 1] == "--") missingValue(a, *d);
      // As --name=VALUE, so that a value starting with '-' (--mpirun-arg --report-bindings) stays one.
      if (a.starts_with("--"))
        options.back() += "=" + args[++i];
      else
        options.push_back(args[++i]);
    }
  }
  program.assign(args.begin() + static_cast<ptrdiff_t>(std::min(i, args.size())), args.end());
}

}  // namespace

int runCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  po::options_description opts("poolrun options");
  int ranks = 0, gpusPerNode = 0, priority = 0, roceTc = -1;
  double wait = -1, leaseTtl = 60, timeout = 0;
  std::string poolUri = defaultPool(), fabric = "auto", gdr = "auto", tuner = "on", name, mpiFlavor = "auto",
              mpirun = "mpirun", jobDir, tokenFile, topologyFile, launcher = "mpirun";
  std::vector<std::string> exports, mpirunArgs;
  // clang-format off
  opts.add_options()
      ("help,h", "show this help")
      (",n", po::value(&ranks)->value_name("N"), "the number of ranks, one per GPU (-np N is the same)")
      ("pool", po::value(&poolUri)->value_name("URI"),
       "local (default, or $POOLRUN_POOL), http://HOST:PORT, sim:CLUSTER_FILE, slurm, slurm:PARTITION")
      ("gpus-per-node", po::value(&gpusPerNode)->value_name("K"), "GPUs per node (default: any split)")
      ("priority", po::value(&priority)->value_name("P"), "queue priority (higher first)")
      ("wait", po::value(&wait)->value_name("SECONDS"),
       "seconds to wait in the queue (default: while the pool could ever fit it)")
      ("name", po::value(&name)->value_name("NAME"), "job name (default: the program's)")
      ("fabric", po::value(&fabric)->value_name("FABRIC"), "auto (default), ib, roce or tcp")
      ("gdr", po::value(&gdr)->value_name("MODE"), "GPUDirect RDMA: auto (default), on, off")
      ("roce-tc", po::value(&roceTc)->value_name("N"), "RoCE traffic class (NCCL_IB_TC)")
      ("tuner", po::value(&tuner)->value_name("on|off"),
       "on (default): NCCL uses poolrun's tuner plugin; off")
      (",x", po::value(&exports)->value_name("VAR[=VALUE]"), "a variable for every rank (wins over the plan)")
      ("tag-output", "prefix every line the ranks print with their rank (mpirun --tag-output)")
      ("mpirun-arg", po::value(&mpirunArgs)->value_name("ARG"),
       "give ARG to mpirun as it is (repeatable: --mpirun-arg -x --mpirun-arg A=1)")
      ("mpi-flavor", po::value(&mpiFlavor)->value_name("FLAVOR"), "auto (default), ompi4 or ompi5")
      ("mpirun", po::value(&mpirun)->value_name("PATH"), "the mpirun (or prterun) binary")
      ("dry-run", "print the plan and the command, write the job directory with its run.sh; start nothing")
      ("simulate", "run the leased nodes on this machine, as a sim: pool's are (to try a pool's job here)")
      ("no-doctor", "start even when the pre-launch checks find a port, GID or GPUDirect problem")
      ("job-dir", po::value(&jobDir)->value_name("DIR"), "job directory (default: under the state directory)")
      ("lease-ttl", po::value(&leaseTtl)->value_name("SECONDS"),
       "lease time to live, renewed at a third of it (default 60)")
      ("timeout", po::value(&timeout)->value_name("SECONDS"), "end the job after SECONDS")
      ("token-file", po::value(&tokenFile)->value_name("FILE"),
       "bearer token for http pools (default: $POOLRUN_TOKEN)")
      ("topology", po::value(&topologyFile)->value_name("FILE"),
       "slurm pools: topology (or cluster) file of nodes not to probe")
      ("launcher", po::value(&launcher)->value_name("NAME"), "mpirun (default) or srun (slurm pools)");
  // clang-format on
  std::vector<std::string> optionArgs, program;
  std::vector<std::pair<std::string, std::string>> mca;
  po::variables_map vm;
  try {
    splitProgram(args, opts, optionArgs, program, mca);
    po::parsed_options parsed = po::command_line_parser(optionArgs).options(opts).run();
    checkNumericOptions(parsed,
                        {{"-n", pool::kGpusRange.min, pool::kGpusRange.max},
                         {"gpus-per-node", 0, pool::kGpusPerNodeRange.max},
                         {"priority", pool::kPriorityRange.min, pool::kPriorityRange.max},
                         {"wait", 0, pool::kWaitSecondsRange.max},
                         {"roce-tc", 0, 255},
                         {"lease-ttl", 3, pool::kTtlSecondsRange.max},
                         {"timeout", 0, pool::kMaxDurationSecondsRange.max - pool::kTtlSecondsRange.max}});
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    err << "poolrun: error: " << e.what() << "\n" << kRunUsage;
    return kExitUsage;
  } catch (const Error& e) {
    err << "poolrun: error: " << e.what() << "\n" << kRunUsage;
    return kExitUsage;
  }
  if (vm.count("help")) {
    out << kRunUsage << "\n" << kCommandList << "\n" << opts << kRunHelpTail;
    return 0;
  }
  if (!vm.count("-n") || program.empty()) {
    err << "poolrun: error: " << (program.empty() ? "no PROGRAM to run" : "-n N is required") << "\n"
        << kRunUsage;
    return kExitUsage;
  }
  // The rest of the options, before anything starts: a bad value is a bad command line.
  PlanRequest request;
  std::optional<MpiFlavor> flavor;
  try {
    request.ranks = ranks;
    request.gpus_per_node = gpusPerNode;
    if (fabric != "auto") request.fabric = topo::fabricFromString(fabric);
    request.gdr = gdrModeFromString(gdr);
    if (vm.count("roce-tc")) request.roce_tc = roceTc;
    if (tuner != "on" && tuner != "off") throw badInput("--tuner '" + tuner + "': use on or off");
    if (mpiFlavor == "ompi4")
      flavor = MpiFlavor::kOmpi4;
    else if (mpiFlavor == "ompi5")
      flavor = MpiFlavor::kOmpi5;
    else if (mpiFlavor != "auto")
      throw badInput("--mpi-flavor '" + mpiFlavor + "': use auto, ompi4 or ompi5");
    for (const std::string& var : plannedVariables()) {
      if (const char* v = std::getenv(var.c_str())) request.user_env[var] = v;
    }
    for (const std::string& x : exports) {
      size_t eq = x.find('=');
      std::string var = x.substr(0, eq);
      if (var.empty()) throw badInput("-x '" + x + "': expected VAR or VAR=VALUE");
      if (eq != std::string::npos) {
        request.user_env[var] = x.substr(eq + 1);
      } else if (const char* v = std::getenv(var.c_str())) {
        request.user_env[var] = v;
      }
    }
    if (launcher != "mpirun" && launcher != "srun")
      throw badInput("--launcher '" + launcher + "': use mpirun or srun");
    if (launcher == "srun" && (vm.count("tag-output") || !mpirunArgs.empty()))
      throw badInput(std::string(vm.count("tag-output") ? "--tag-output" : "--mpirun-arg") +
                     " is for mpirun, and --launcher srun starts the ranks with srun: use -x and --mca, or "
                     "--launcher mpirun");
    topo::checkText(name, topo::kMaxJobNameBytes, "--name");
  } catch (const Error& e) {
    err << "poolrun: error: " << e.what() << "\n" << kRunUsage;
    return kExitUsage;
  }
  try {
    pool::ClientOptions copts;
    if (!tokenFile.empty()) {
      std::istringstream tf(topo::readRegularFile(tokenFile, topo::kTokenFileLimit, "token files"));
      if (!(tf >> copts.token)) throw badInput("--token-file " + tokenFile + ": cannot read a token from it");
    } else if (const char* t = std::getenv("POOLRUN_TOKEN")) {
      copts.token = t;
    }
    copts.owner = pool::currentUser();
    // Slurm (launcher/src/slurm_launch.cpp): --topology and --launcher srun need a Slurm pool.
    const bool slurm = isSlurmPool(poolUri);
    if (!slurm && (launcher == "srun" || !topologyFile.empty()))
      throw badInput(std::string(launcher == "srun" ? "--launcher srun" : "--topology") +
                     " needs --pool slurm or slurm:PARTITION (pool here: '" + poolUri + "')");
    if (slurm) forgetSlurmGpuVariables(request, exports);
    if (slurm && vm.count("simulate"))
      throw badInput(
          "--simulate runs a pool's nodes on this machine; a Slurm allocation's nodes run under "
          "Slurm (pool here: '" +
          poolUri + "'); use --pool sim:FILE or an http:// pool");
    std::unique_ptr<pool::PoolClient> pool = pool::openPool(poolUri, copts);
    // A sim: pool's nodes, or any pool's with --simulate, run here through poolrun-sim-agent.
    bool simulated = poolUri.starts_with("sim:") || vm.count("simulate") > 0;

    pool::LeaseRequest lr;
    lr.gpus = ranks;
    lr.gpus_per_node = gpusPerNode;
    if (request.fabric != topo::Fabric::kTcp) lr.fabric = request.fabric;  // every node can do TCP
    lr.priority = priority;
    lr.owner = copts.owner;
    lr.job_name = name.empty() ? std::filesystem::path(program[0]).filename().string() : name;
    if (wait >= 0) lr.wait = std::chrono::seconds(static_cast<long>(wait));
    lr.ttl = std::chrono::seconds(static_cast<long>(leaseTtl));
    if (timeout > 0)
      lr.max_duration = std::chrono::seconds(static_cast<long>(timeout) + static_cast<long>(leaseTtl));
    pool::Lease lease;
    try {
      // Ctrl-C (or SIGTERM, SIGHUP) while queued withdraws the request, as salloc does; the
      // supervisor takes the signals from here on (signalfd).
      pool::QueueInterruption interruption;
      bool told = false;
      lease = pool->acquire(lr, [&](const pool::QueueProgress& progress) {
        if (!told) err << "poolrun: waiting in the queue of " << pool->describe() << "\n";
        told = true;
        err << "poolrun: " << pool::formatQueueProgress(progress, std::chrono::system_clock::now()) << "\n";
      });
    } catch (const pool::PoolError& e) {
      if (e.failure() != pool::PoolFailure::kInterrupted) throw;
      err << "poolrun: " << e.what() << "\n";
      return 128 + e.signal();
    }
    LeaseGuard guard(*pool, lease.id, err);

    // The leased GPUs, node by node in the pool's order.
    std::vector<topo::ClusterNode> nodes;
    std::vector<NodeGrant> grants;
    if (slurm) {
      enterAllocation(lease);
      nodes = slurmNodes(lease, {topologyFile, stateDir() / "slurm-topology", ""}, err);
    }
    for (const pool::GpuRef& g : lease.gpus) {
      if (slurm) break;
      if (nodes.empty() || nodes.back().name != g.node) nodes.push_back(pool->node(g.node));
    }
    for (const topo::ClusterNode& n : nodes) {
      NodeGrant grant;
      grant.node = &n;
      for (const pool::GpuRef& g : lease.gpus) {
        if (g.node == n.name) grant.gpus.push_back(g.index);
      }
      grants.push_back(std::move(grant));
    }
    JobPlan plan = makePlan(grants, request);
    if (slurm) applySlurmGpuNumbering(plan, lease, err);
    if (!vm.count("no-doctor")) {
      // This machine is checked through its /sys; other nodes by what their topology records.
      bool local = poolUri == "local";
      std::string here = hostName();
      doctor::Report report =
          preflight(plan, [&](const NodePlan& n) { return local || (!simulated && n.name == here); });
      printPreflight(report, err);
      if (report.failed()) {
        err << "poolrun: refusing to start: the doctor found " << report.count(doctor::Status::kFail)
            << " problem(s) that would make the job hang (above); fix them, or start anyway with "
               "--no-doctor\n";
        return kExitRefused;
      }
    }

    std::filesystem::path dir =
        jobDir.empty() ? stateDir() / "jobs" / lease.id : std::filesystem::path(jobDir);
    writeJobDir(plan, dir);
    LaunchSpec spec;
    spec.plan = &plan;
    spec.job_dir = dir;
    spec.rank_wrapper = sibling("poolrun-rank");
    spec.program = program;
    spec.simulated = simulated;
    spec.sim_agent = sibling("poolrun-sim-agent");
    if (simulated) {
      topo::CpuCount here = topo::countLocalCpus();
      spec.local_cores = std::max(here.cores, 1);
      spec.local_threads = std::max(1, here.threads / spec.local_cores);
    }
    spec.user_mca = mca;
    spec.user_exports = exports;
    spec.tag_output = vm.count("tag-output") > 0;
    spec.mpirun_args = mpirunArgs;
    spec.job_env.emplace_back("POOLRUN_RANK_ENV", encodeRankEnv(plan, simulated));
    spec.job_env.emplace_back("POOLRUN_JOB_DIR", dir.string());
    spec.job_env.emplace_back("POOLRUN_LEASE", lease.id);
    // Nodes this process cannot read (a pool's or Slurm's remote nodes): each rank checks its own
    // RDMA ports before the program starts (poolrun-rank).
    if (!simulated && !vm.count("no-doctor") && plan.fabric != topo::Fabric::kTcp)
      spec.job_env.emplace_back("POOLRUN_CHECK_PORTS", "1");
    // Where ranks run on nodes other than this one, poolrun-rank stays beside each program as its
    // subreaper and ends what it leaves running there (poolrun's own subreaper covers this node and
    // the simulated cluster). `-x POOLRUN_REAP=0` turns it off.
    if (!simulated && poolUri != "local" && !request.user_env.count("POOLRUN_REAP"))
      spec.job_env.emplace_back("POOLRUN_REAP", "1");
    for (auto& kv : rendezvousVariables(plan, simulated, pickRendezvousPort(), request.user_env))
      spec.job_env.push_back(std::move(kv));
    const char* userPlugin = std::getenv("NCCL_TUNER_PLUGIN");
    if (tuner == "on" && userPlugin == nullptr) {
      nlohmann::ordered_json config = tunerConfig(plan);
      bool netKnown = plan.nodes.size() == 1 || config["net"]["nics_per_node"].get<size_t>() > 0;
      if (netKnown) {
        writeJobFile(dir / "tuner.json", config.dump(2) + "\n");
        spec.job_env.emplace_back("NCCL_TUNER_PLUGIN", sibling("libnccl-tuner-poolrun.so"));
        spec.job_env.emplace_back("POOLRUN_TUNER_CONFIG", config.dump());
      } else {
        err << "poolrun: note: no NIC of the " << toString(plan.fabric)
            << " fabric is known on the leased nodes, so the tuner has no network to model: NCCL tunes "
               "itself\n";
      }
    }
    MpiCommand cmd =
        launcher == "srun" ? buildSrunCommand(spec) : buildMpiCommand(spec, detectMpiCached(mpirun, flavor));
    writeJobFile(dir / "hostfile", cmd.hostfile);
    writeJobFile(dir / "rankfile.mpi", cmd.rankfile);
    // The launch as it can be run again by hand: run.sh sets every variable and runs mpirun; the
    // command file is the same for reading, the two JSON documents read from their files.
    std::map<std::string, std::string> fromFiles;
    for (const auto& [k, v] : cmd.env) {
      if (k == "POOLRUN_RANK_ENV") {
        writeJobFile(dir / "rank-env.json", v + "\n");
        fromFiles[k] = (dir / "rank-env.json").string();
      } else if (k == "POOLRUN_TUNER_CONFIG") {
        fromFiles[k] = (dir / "tuner.json").string();
      }
    }
    const std::string command = readableCommand(cmd, fromFiles);
    writeJobFile(dir / "command", command);
    const std::filesystem::path script = dir / "run.sh";
    // Synced for a dry run, whose product it is; a launch's own copy is a record, and the sync would
    // cost it about 4 ms (plan.hpp).
    using std::filesystem::perms;
    writeJobFileAtomically(
        script, launchScript(cmd, std::filesystem::current_path()),
        perms::owner_all | perms::group_read | perms::group_exec | perms::others_read | perms::others_exec,
        vm.count("dry-run") > 0);

    if (vm.count("dry-run")) {
      out << planTable(plan) << "\nlease " << lease.id << " from " << pool->describe()
          << " (released: dry run)\n"
          << "job directory: " << dir.string() << "\n\n"
          << "wrote " << script.string()
          << ", which sets every variable below and runs mpirun; to run the job:\n"
          << "  sh " << shellJoin({script.string()}) << "\n"
          << (simulated
                  ? ""
                  : "(nothing holds these GPUs for it then: the lease was released, and without poolrun "
                    "no lease is taken)\n")
          << "\n"
          << command;
      return 0;
    }

    SuperviseOptions so;
    so.argv = cmd.argv;
    so.env = cmd.env;
    if (timeout > 0) so.timeout = std::chrono::milliseconds(static_cast<long>(timeout * 1000));
    // Renewed on a thread of its own, retried until the lease's expiry when the pool cannot be
    // reached (lease_keeper.hpp, README step 4).
    LeaseKeeper keeper(lease.id, validFor(lease, std::chrono::system_clock::now()),
                       std::chrono::milliseconds(static_cast<long>(leaseTtl * 1000 / 3)), [&] {
                         RenewReply reply = renewOnce(*pool, lease.id);
                         // A running job's directory stays the newest: pruning (below) never takes it.
                         std::error_code ec;
                         if (reply.kind == RenewReply::Kind::kRenewed)
                           std::filesystem::last_write_time(
                               dir, std::filesystem::file_time_type::clock::now(), ec);
                         return reply;
                       });
    so.lease = &keeper;
    so.started = [&] {
      pool->idle();
      // poolrun's own job directories: a week's, and always the 100 newest, looked at hourly
      // (README, poolrun step 2).
      if (jobDir.empty())
        pruneJobDirs(stateDir() / "jobs", 100, std::chrono::hours(24 * 7), std::chrono::minutes(60));
    };
    SuperviseResult r = supervise(so, err);
    if (r.failure && r.failure->rank >= 0 && static_cast<size_t>(r.failure->rank) < plan.ranks.size()) {
      const RankPlan& rp = plan.ranks[static_cast<size_t>(r.failure->rank)];
      err << "poolrun: rank " << rp.rank << " on node " << plan.nodeOf(rp).name << " (GPU " << rp.gpu << ") "
          << (r.failure->signal != 0 ? "was killed by signal " + std::to_string(r.failure->signal)
                                     : "exited with code " + std::to_string(r.failure->exit_code))
          << "\n";
    }
    return r.exit_status;
  } catch (const std::exception& e) {
    err << "poolrun: error: " << e.what() << "\n";
    const auto* pe = dynamic_cast<const Error*>(&e);
    return pe != nullptr && pe->code() == ErrorCode::kInternal ? 1 : kExitRefused;
  }
}

}  // namespace poolrun::launcher
