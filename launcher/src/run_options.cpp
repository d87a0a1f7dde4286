// The options of `poolrun [options] -n N [--] PROGRAM [ARGS...]` (run_options.hpp).

#include "run_options.hpp"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "command_options.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/options.hpp"
#include "poolrun/launcher/commands.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/pool/jobs.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/request_options.hpp"
#include "script_options.hpp"

namespace po = boost::program_options;

namespace poolrun::launcher {
namespace {

constexpr const char* kRunUsage =
    "usage: poolrun [options] -n N [--] PROGRAM [ARGS...]\n"
    "Takes N GPUs from the pool, binds every rank to its GPU, NIC(s) and cores, runs PROGRAM under\n"
    "Open MPI and gives the GPUs back however the job ends.\n";

constexpr const char* kRunHelpTail =
    "\nmpirun options: --mca KEY VALUE is passed through; --mpirun-arg ARG passes any other.\n"
    "\njob scripts: a PROGRAM that starts with #! may hold options in '#POOLRUN' lines before its first\n"
    "command (as #SBATCH lines); the command line's win (poolrun --detach -n 8 job.sh).\n"
    "\n"
    "environment:\n"
    "  POOLRUN_POOL        the pool when --pool is not given (default local)\n"
    "  POOLRUN_TOKEN       the bearer token for http and https pools when --token-file is not given\n"
    "  POOLRUN_CA          the CAs of an https pool (PEM) when --ca is not given (else the system's)\n"
    "  POOLRUN_MUNGE_SOCKET  without a token, the munged that makes this user's MUNGE credential for an\n"
    "                      http or https pool (default /run/munge/munge.socket.2)\n"
    "  POOLRUN_STATE_DIR   state directory: local and sim: pools, job directories, caches (else\n"
    "                      $XDG_STATE_HOME/poolrun, else $HOME/.local/state/poolrun)\n"
    "  POOLRUN_FIXTURES    where cluster files' shared/fixtures/ topologies are\n"
    "  USER                the owner of the lease in local and sim: pools\n"
    "  POOLRUN_PREEMPT_GRACE, POOLRUN_MIN_RUNTIME, POOLRUN_QUOTAS\n"
    "                      local and sim: pools' preemption grace and minimum runtime (seconds)\n"
    "                      and quotas file (poold's --preempt-grace, --min-runtime, --quotas)\n"
    "  POOLRUN_MPS_DIR     --share: where the nodes' agents run the MPS daemons (default\n"
    "                      /run/poolrun/mps; the agents' --mps-dir)\n"
    "  NCCL_TUNER_PLUGIN   set: NCCL keeps your plugin and poolrun's tuner is not used\n"
    "  CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, NCCL_IB_HCA, NCCL_IB_DISABLE, NCCL_IB_GID_INDEX,\n"
    "  NCCL_IB_TC, NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ, NCCL_SOCKET_IFNAME, UCX_NET_DEVICES, RANK,\n"
    "  WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE\n"
    "                      the plan sets these for each rank; your shell's are not used (poolrun\n"
    "                      says which); -x VAR=VALUE overrides the plan (-x VAR passes your value)\n"
    "  SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_STEP_GPUS, SLURM_MPI_TYPE, ...\n"
    "                      --pool slurm: the allocation poolrun runs in\n"
    "\n"
    "exit status: the first failing rank's code (128+N for signal N); 75 preempted (docs/preemption.md);\n"
    "124 timeout; 125 refused to start; 126 lease lost; 2 bad command line.\n";

// What --preempt-signal takes: signals a job can catch that reach its ranks.
constexpr std::pair<const char*, int> kPreemptSignals[] = {
    {"TERM", SIGTERM}, {"INT", SIGINT}, {"HUP", SIGHUP}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};

// --pool's default: $POOLRUN_POOL, else this node's GPUs (as poolctl).
std::string defaultPool() {
  const char* p = std::getenv("POOLRUN_POOL");
  return p != nullptr && *p != '\0' ? p : "local";
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
    if (const po::option_description* d = takesNextValue(a, opts)) {
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

// The option of `opts` that the words of `options` from `at` name, and how many words it takes
// (splitProgram's forms: --name=VALUE, --flag, -n VALUE, -nVALUE).
std::pair<const po::option_description*, size_t> optionAt(const std::vector<std::string>& options, size_t at,
                                                          const po::options_description& opts) {
  const std::string& a = options[at];
  if (const po::option_description* d = takesNextValue(a, opts)) return {d, 2};
  const std::string name = a.starts_with("--") ? a.substr(2, a.find('=') - 2) : a.substr(0, 2);
  return {opts.find_nothrow(name, false), 1};
}

// The options of PROGRAM's #POOLRUN lines (script_options.hpp) before those of the command line,
// which win: an option given on both is the command line's, where it takes one value; the values of
// a repeatable option (--label, -x, --mpirun-arg, --mca) are the script's and then the command
// line's. Throws po::error naming the script's line for what it cannot take.
void addScriptOptions(const std::string& program, const po::options_description& opts,
                      std::vector<std::string>& options,
                      std::vector<std::pair<std::string, std::string>>& mca) {
  const std::vector<ScriptOption> lines = readScriptOptions(program);
  if (lines.empty()) return;
  std::set<const po::option_description*> given;
  for (size_t i = 0; i < options.size();) {
    const auto [d, words] = optionAt(options, i, opts);
    given.insert(d);
    i += words;
  }
  std::vector<std::string> fromScript;
  std::vector<std::pair<std::string, std::string>> scriptMca;
  for (const ScriptOption& line : lines) {
    std::vector<std::string> words, program2;
    try {
      for (size_t i = 0; i < line.words.size() && line.words[i].starts_with("-");) {
        const std::string& w = line.words[i];
        if (w == "--mca" || w == "-np" || w == "--np") {  // splitProgram's own
          i += w == "--mca" ? 3 : 2;
          continue;
        }
        const auto [d, n] = optionAt(line.words, i, opts);
        if (d == nullptr) throw po::error("unrecognised option '" + common::printable(w) + "'");
        i += n;
      }
      splitProgram(line.words, opts, words, program2, scriptMca);
      if (!program2.empty())
        throw po::error("'" + common::printable(program2[0]) +
                        "' is not an option (#POOLRUN lines hold options; the program is the script)");
      po::command_line_parser(words).options(opts).run();  // unknown options, missing values
    } catch (const po::error& e) {
      throw po::error(line.where + ": " + e.what());
    }
    for (size_t i = 0; i < words.size();) {
      const auto [d, n] = optionAt(words, i, opts);
      const bool repeatable = dynamic_cast<const po::typed_value<std::vector<std::string>>*>(
                                  d == nullptr ? nullptr : d->semantic().get()) != nullptr;
      if (repeatable || !given.count(d))
        fromScript.insert(fromScript.end(), words.begin() + static_cast<ptrdiff_t>(i),
                          words.begin() + static_cast<ptrdiff_t>(i + n));
      i += n;
    }
  }
  options.insert(options.begin(), fromScript.begin(), fromScript.end());
  mca.insert(mca.begin(), scriptMca.begin(), scriptMca.end());
}

// The checks Boost cannot do, on the values it read; throws poolrun::Error (kBadInput).
void checkValues(const po::variables_map& vm, const std::string& tuner, const std::string& mpiFlavor,
                 const std::string& launcher, const std::string& preemptSignal, RunOptions& o) {
  if (tuner != "on" && tuner != "off") throw badInput("--tuner '" + tuner + "': use on or off");
  o.tuner = tuner == "on";
  if (mpiFlavor == "ompi4")
    o.mpi_flavor = MpiFlavor::kOmpi4;
  else if (mpiFlavor == "ompi5")
    o.mpi_flavor = MpiFlavor::kOmpi5;
  else if (mpiFlavor != "auto")
    throw badInput("--mpi-flavor '" + mpiFlavor + "': use auto, ompi4 or ompi5");
  if (o.launch != "auto" && o.launch != "agents" && o.launch != "ssh")
    throw badInput("--launch '" + common::printable(o.launch) + "': use auto, agents or ssh");
  // The shell's values of what the plan sets never override it (a stray WORLD_SIZE=1 or
  // CUDA_VISIBLE_DEVICES=3); only -x does. They are named once the plan is made.
  o.shell_env = shellPlannedVariables(o.exports);
  for (const std::string& x : o.exports) {
    size_t eq = x.find('=');
    std::string var = x.substr(0, eq);
    if (var.empty()) throw badInput("-x '" + x + "': expected VAR or VAR=VALUE");
    if (eq != std::string::npos) {
      o.request.user_env[var] = x.substr(eq + 1);
    } else if (const char* v = std::getenv(var.c_str())) {
      o.request.user_env[var] = v;
    }
  }
  std::optional<int> sig = preemptSignalFromString(preemptSignal);
  if (!sig)
    throw badInput(
        "--preempt-signal '" + common::printable(preemptSignal) +
        "': use TERM (the default), INT, HUP, USR1 or USR2, by name (SIGTERM, TERM) or number (15, "
        "2, 1, 10, 12); a job cannot catch KILL or STOP, so it would get no grace");
  o.preempt_signal = *sig;
  if (launcher != "mpirun" && launcher != "srun")
    throw badInput("--launcher '" + launcher + "': use mpirun or srun");
  o.srun = launcher == "srun";
  if (o.srun && (vm.count("tag-output") || !o.mpirun_args.empty()))
    throw badInput(std::string(vm.count("tag-output") ? "--tag-output" : "--mpirun-arg") +
                   " is for mpirun, and --launcher srun starts the ranks with srun: use -x and --mca, or "
                   "--launcher mpirun");
  common::checkText(o.job_name, common::kMaxJobNameBytes, "--name");
}

}  // namespace

std::optional<int> preemptSignalFromString(const std::string& text) {
  std::string name;
  for (char c : text) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.starts_with("SIG")) name.erase(0, 3);
  for (const auto& [n, number] : kPreemptSignals)
    if (name == n || text == std::to_string(number)) return number;
  return std::nullopt;
}

namespace {

// -n N, or -n MIN:MAX for an elastic job.
void parseRanks(const std::string& text, RunOptions& o) {
  const size_t colon = text.find(':');
  if (colon != std::string::npos && (colon == 0 || colon + 1 == text.size()))
    throw badInput("-n '" + common::printable(text) + "': MIN:MAX needs both numbers (-n 4:16, say)");
  o.request.ranks =
      common::parseOption<int>("-n", text.substr(0, colon), pool::kGpusRange.min, pool::kGpusRange.max);
  if (colon == std::string::npos) return;
  o.max_ranks =
      common::parseOption<int>("-n", text.substr(colon + 1), pool::kGpusRange.min, pool::kGpusRange.max);
  if (o.max_ranks < o.request.ranks)
    throw badInput("-n '" + common::printable(text) + "': MIN:MAX with MAX at least MIN");
}

// --mem-per-gpu SIZE: a whole number with K, M (the default), G or T (powers of 1024), as Slurm's.
uint64_t parseMemPerGpu(const std::string& text) {
  const auto bad = [&] {
    return badInput("--mem-per-gpu '" + common::printable(text) +
                    "': give a size such as 4096 (MiB), 512M, 80G, more than 0 and at most 16T");
  };
  size_t digits = 0;
  while (digits < text.size() && digits < 12 && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  if (digits == 0 || text.size() > digits + 1) throw bad();
  const uint64_t number = std::stoull(text.substr(0, digits));
  int shift = 20;
  if (text.size() == digits + 1) {
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
    shift = unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : unit == 'T' ? 40 : -1;
    if (shift < 0) throw bad();
  }
  if (number == 0 || number > (pool::kMaxMemPerGpu >> shift)) throw bad();
  return number << shift;
}

// The options of detached jobs make sense with --detach alone, and --detach with a poold alone.
void checkDetachOptions(const po::variables_map& vm, const RunOptions& o) {
  for (const char* name : {"output", "error", "chdir", "export", "dependency", "array", "mem-per-gpu"})
    if (vm.count(name) && !o.detach)
      throw badInput(std::string("--") + name + " is for a detached job: add --detach");
  if (!o.detach) return;
  if (o.retries > 0)
    throw badInput(
        "--retries with --detach: not yet (the pool restarts a detached job only after a "
        "preemption, with --requeue); run the job in the foreground to have it restarted after a "
        "failure");
  if (!pool::isPooldUri(o.pool))
    throw badInput(
        "--detach needs a pool that keeps jobs: a poold (--pool http://HOST:PORT or "
        "https://HOST:PORT; pool here: '" +
        o.pool + "')");
  for (const char* name : {"dry-run", "adopt-lease"})
    if (vm.count(name)) throw badInput(std::string("--detach with --") + name + ": give one or the other");
  if (vm.count("dependency")) pool::parseDependencies(o.dependency);
  if (vm.count("array")) pool::parseArray(o.array);
}

}  // namespace

std::optional<int> parseRunOptions(const std::vector<std::string>& args, RunOptions& o, std::ostream& out,
                                   std::ostream& err) {
  CommandOptions command("poolrun options",
                         {kRunUsage, std::string("\n") + kCommandList + "\n", kRunHelpTail});
  long wait = 0, leaseTtl = o.lease_ttl.count(), timeout = 0, resizeInterval = o.resize_interval.count();
  std::string ranks, mig, share, gpuMemory, model, minMemory, memPerGpu, retries, account, reservation,
      placement;
  std::vector<std::string> labels, excluded;
  std::string fabric = "auto", gdr = "auto", tuner = "on", mpiFlavor = "auto", launcher = "mpirun",
              preemptSignal = "TERM";
  o.pool = defaultPool();
  // clang-format off
  command.add()
      (",n", po::value(&ranks)->value_name("N|MIN:MAX"),
       "the number of ranks, one per GPU (-np N is the same); MIN:MAX: an elastic job, restarted at each "
       "size its lease takes between MIN and MAX")
      ("resize-interval", po::value(&resizeInterval)->value_name("SECONDS"),
       "an elastic job grows (and is restarted) at most this often (default 600)")
      ("pool", po::value(&o.pool)->value_name("URI"),
       "local (default, or $POOLRUN_POOL), http://HOST:PORT or https://HOST:PORT (or several replicas: "
       "https://A:PORT,https://B:PORT), "
       "sim:CLUSTER_FILE, slurm, slurm:PARTITION")
      ("gpus-per-node", po::value(&o.request.gpus_per_node)->value_name("K"), "GPUs per node (default: any split)")
      ("whole-nodes", "whole nodes only: every GPU of each node the lease takes")
      ("model", po::value(&model)->value_name("TEXT"), "only GPUs whose model contains TEXT (H100, A100-SXM4-80GB)")
      ("min-memory-gib", po::value(&minMemory)->value_name("G"), "only GPUs with at least G GiB of memory")
      ("label", po::value(&labels)->value_name("KEY=VALUE"), "only nodes with that label (repeatable)")
      ("one-switch", "only nodes under one leaf switch")
      ("placement", po::value(&placement)->value_name("strict|best-effort"),
       "best-effort (default): as few NVLink domains, leaves and spines as the free GPUs allow; strict: wait "
       "rather than cross more than an empty pool would (docs/placement.md)")
      ("exclude", po::value(&excluded)->value_name("NODES"), "never these nodes (n01,n[05-08]; repeatable)")
      ("mig", po::value(&mig)->value_name("PROFILE"),
       "one MIG instance of PROFILE (1g.10gb, 3g.40gb; PROFILE+: that or larger) per rank instead of a GPU, "
       "packed onto as few GPUs as possible (docs/mig.md)")
      ("share", po::value(&share)->value_name("FRACTION"),
       "an MPS share of a GPU per rank instead of a whole GPU: 0.25 or 25% of its SMs (and, without "
       "--gpu-memory, of its memory); shares of other jobs of yours may run beside it (docs/mps.md)")
      ("gpu-memory", po::value(&gpuMemory)->value_name("BYTES"),
       "an MPS share with this much device memory per rank (512M, 10G); with --share, its memory")
      ("priority", po::value(&o.priority)->value_name("P"), "queue priority (higher first)")
      ("reservation", po::value(&reservation)->value_name("R"),
       "lease inside reservation R: its nodes, from its start, ending with it (docs/reservations.md)")
      ("account", po::value(&account)->value_name("A"),
       "the account the job is charged to (the pool's accounts file; default: your default account)")
      ("no-reclaim", "(admin) never end the lease as idle (poold --reclaim-idle); a user's token is refused")
      ("preemptible", "a waiting request of higher priority may preempt the lease, after the pool's grace")
      ("preempt-signal", po::value(&preemptSignal)->value_name("SIG"),
       "what a preempted job is sent: TERM (default), INT, HUP, USR1 or USR2; SIGKILL at the deadline")
      ("requeue", "a preempted job is queued again with the same request and job directory, and restarted")
      ("retries", po::value(&retries)->value_name("N"),
       "a job that fails (a rank exits non-zero, a node's agent or daemon is lost, a GPU fails) is "
       "restarted at once, up to N times, on a lease without the nodes that failed (default 0; 0 to 100)")
      ("wait", po::value(&wait)->value_name("SECONDS"),
       "seconds to wait in the queue (default: while the pool could ever fit it)")
      ("name", po::value(&o.job_name)->value_name("NAME"), "job name (default: the program's)")
      ("fabric", po::value(&fabric)->value_name("FABRIC"), "auto (default), ib, roce or tcp")
      ("gdr", po::value(&gdr)->value_name("MODE"), "GPUDirect RDMA: auto (default), on, off")
      ("roce-tc", po::value<int>()->value_name("N"), "RoCE traffic class (NCCL_IB_TC)")
      ("tuner", po::value(&tuner)->value_name("on|off"),
       "on (default): NCCL uses poolrun's tuner plugin; off")
      (",x", po::value(&o.exports)->value_name("VAR[=VALUE]"), "a variable for every rank (wins over the plan)")
      ("tag-output", "prefix every line the ranks print with their rank (mpirun --tag-output)")
      ("mpirun-arg", po::value(&o.mpirun_args)->value_name("ARG"),
       "give ARG to mpirun as it is (repeatable: --mpirun-arg -x --mpirun-arg A=1)")
      ("mpi-flavor", po::value(&mpiFlavor)->value_name("FLAVOR"), "auto (default), ompi4 or ompi5")
      ("mpirun", po::value(&o.mpirun)->value_name("PATH"), "the mpirun (or prterun) binary")
      ("dry-run", "print the plan and the command, write the job directory with its run.sh; start nothing")
      ("simulate", "run the leased nodes on this machine, as a sim: pool's are (to try a pool's job here)")
      ("launch", po::value(&o.launch)->value_name("auto|agents|ssh"),
       "how a poold pool's nodes start the job's daemons: through their agents with a credential poold "
       "signs (no ssh keys), over ssh, or auto (default: the agents where each node's starts daemons)")
      ("no-doctor", "start even when the pre-launch checks find a port, GID or GPUDirect problem")
      ("job-dir", po::value(&o.job_dir)->value_name("DIR"), "job directory (default: under the state directory)")
      ("lease-ttl", po::value(&leaseTtl)->value_name("SECONDS"),
       "lease time to live, renewed at a third of it (default 60)")
      ("timeout", po::value(&timeout)->value_name("SECONDS"), "end the job after SECONDS")
      ("token-file", po::value(&o.token_file)->value_name("FILE"),
       "bearer token for http and https pools (default: $POOLRUN_TOKEN)")
      ("ca", po::value(&o.ca_file)->value_name("FILE"),
       "the CAs to trust for an https pool, PEM (default: $POOLRUN_CA, else the system's)")
      ("topology", po::value(&o.topology_file)->value_name("FILE"),
       "slurm pools: topology (or cluster) file of nodes not to probe")
      ("launcher", po::value(&launcher)->value_name("NAME"), "mpirun (default) or srun (slurm pools)")
      ("detach", "submit the job to the pool (a poold) and return at once, printing its id; the pool "
       "runs it when GPUs are free (docs/jobs.md)")
      ("output", po::value(&o.output)->value_name("FILE"),
       "--detach: the job's output (default poolrun-%j.out in its directory; %j job, %a array task, "
       "%u user, %x name)")
      ("error", po::value(&o.error)->value_name("FILE"), "--detach: the job's error output (default: with --output)")
      ("chdir", po::value(&o.chdir)->value_name("DIR"), "--detach: the job's directory (default: this one)")
      ("export", po::value(&o.export_mode)->value_name("ALL|NONE|VAR,..."),
       "--detach: the environment the job gets: all of this one (default, less what the plan sets), "
       "none, or the variables named")
      ("dependency", po::value(&o.dependency)->value_name("LIST"),
       "--detach: afterok:ID[:ID],afterany:ID,afternotok:ID,singleton")
      ("array", po::value(&o.array)->value_name("SPEC"),
       "--detach: one job per index, 0-99 or 1,3,5-7 or 0-15:4, %N for at most N at once "
       "($POOLRUN_ARRAY_TASK_ID in every rank)")
      ("mem-per-gpu", po::value(&memPerGpu)->value_name("SIZE"),
       "--detach: the most memory the job's processes on a node may use, per GPU it leases there "
       "(SIZE[K|M|G|T], default M; enforced by the node's agent)")
      ("adopt-lease", po::value(&o.adopt_lease)->value_name("LEASE"),
       "(poold-agent) run on this lease, granted to a detached job, instead of acquiring one");
  // clang-format on
  command.ranges(
      {{"gpus-per-node", 0, pool::kGpusPerNodeRange.max},
       {"priority", pool::kPriorityRange.min, pool::kPriorityRange.max},
       {"wait", 0, pool::kWaitSecondsRange.max},
       {"roce-tc", 0, 255},
       {"resize-interval", pool::kResizeIntervalSecondsRange.min, pool::kResizeIntervalSecondsRange.max},
       {"lease-ttl", 3, pool::kTtlSecondsRange.max},
       {"timeout", 0, pool::kMaxDurationSecondsRange.max - pool::kTtlSecondsRange.max}});
  std::vector<std::string> optionArgs;
  try {
    splitProgram(args, command.options(), optionArgs, o.program, o.mca);
    // A launcher an agent starts for a detached job has the script's options on its command line.
    const bool adopted = std::any_of(optionArgs.begin(), optionArgs.end(),
                                     [](const std::string& a) { return a.starts_with("--adopt-lease"); });
    if (!o.program.empty() && !adopted) addScriptOptions(o.program[0], command.options(), optionArgs, o.mca);
  } catch (const po::error& e) {
    return command.usageError(e.what(), err);
  } catch (const Error& e) {
    return command.usageError(e.what(), err);
  }
  po::variables_map vm;
  if (std::optional<int> status = command.parse(optionArgs, vm, out, err)) return status;
  o.option_args = optionArgs;
  if (!vm.count("-n") || o.program.empty())
    return command.usageError(o.program.empty() ? "no PROGRAM to run" : "-n N is required", err);
  try {
    parseRanks(ranks, o);
    if (vm.count("resize-interval") && o.max_ranks == 0)
      throw badInput("--resize-interval is for an elastic job (-n MIN:MAX); -n " + ranks +
                     " is of a fixed size");
    o.resize_interval = std::chrono::seconds(resizeInterval);
    if (vm.count("mig")) {
      pool::LeaseRequest parsed;
      pool::setMigProfile(parsed, mig, "--mig");
      o.mig_profile = parsed.mig_profile;
      o.mig_or_larger = parsed.mig_or_larger;
      if (o.max_ranks > 0)
        throw badInput("--mig with -n " + ranks +
                       ": MIG leases are not elastic; give -n N (one instance per rank)");
      if (o.request.gpus_per_node > 0)
        throw badInput(
            "--mig with --gpus-per-node: MIG instances are packed onto the fewest GPUs; drop "
            "--gpus-per-node");
    }
    if (vm.count("share") || vm.count("gpu-memory")) {
      pool::LeaseRequest parsed;
      if (vm.count("share")) pool::setSharePercent(parsed, share, "--share");
      if (vm.count("gpu-memory")) pool::setShareMemory(parsed, gpuMemory, "--gpu-memory");
      o.share_percent = parsed.share_percent;
      o.share_memory_bytes = parsed.share_memory_bytes;
      const std::string what = vm.count("share") ? "--share " + share : "--gpu-memory " + gpuMemory;
      if (vm.count("mig"))
        throw badInput(what + " with --mig: a MIG instance is not shared through MPS; give one or the other");
      if (o.max_ranks > 0)
        throw badInput(what + " with -n " + ranks +
                       ": MPS leases are not elastic; give -n N (one share per rank)");
      if (o.request.gpus_per_node > 0)
        throw badInput(
            what + " with --gpus-per-node: shares are packed onto the fewest nodes; drop --gpus-per-node");
    }
    if (const char* dir = std::getenv("POOLRUN_MPS_DIR"); dir != nullptr && *dir != '\0') {
      if (*dir != '/')
        throw badInput("POOLRUN_MPS_DIR '" + common::printable(dir) +
                       "': not an absolute path; give the directory poold-agent's --mps-dir names");
      o.request.mps_dir = dir;
    }
    // The same options, names and errors as poolctl acquire's (pool/client.hpp).
    o.placement.whole_nodes = vm.count("whole-nodes") > 0;
    o.placement.one_switch = vm.count("one-switch") > 0;
    if (vm.count("placement")) pool::setPlacement(o.placement, placement, "--placement");
    if (vm.count("model")) pool::setGpuModel(o.placement, model, "--model");
    if (vm.count("account")) pool::setAccount(o.placement, account, "--account");
    if (vm.count("reservation")) pool::setReservation(o.placement, reservation, "--reservation");
    if (vm.count("min-memory-gib")) pool::setMinMemoryGib(o.placement, minMemory, "--min-memory-gib");
    for (const std::string& label : labels) pool::addLabel(o.placement, label, "--label");
    for (const std::string& nodes : excluded) pool::addExcludedNodes(o.placement, nodes, "--exclude");
    if (vm.count("retries")) o.retries = common::parseOption<int>("--retries", retries, 0, kMaxRetries);
    if (fabric != "auto") o.request.fabric = topo::fabricFromString(fabric);
    o.request.gdr = gdrModeFromString(gdr);
    if (vm.count("roce-tc")) o.request.roce_tc = vm["roce-tc"].as<int>();
    if (vm.count("wait")) o.wait = std::chrono::seconds(wait);
    o.lease_ttl = std::chrono::seconds(leaseTtl);
    if (timeout > 0) o.timeout = std::chrono::seconds(timeout);
    o.tag_output = vm.count("tag-output") > 0;
    o.dry_run = vm.count("dry-run") > 0;
    o.simulate = vm.count("simulate") > 0;
    o.doctor = vm.count("no-doctor") == 0;
    o.no_reclaim = vm.count("no-reclaim") > 0;
    o.preemptible = vm.count("preemptible") > 0;
    o.requeue = vm.count("requeue") > 0;
    o.detach = vm.count("detach") > 0;
    if (vm.count("mem-per-gpu")) o.mem_per_gpu = parseMemPerGpu(memPerGpu);
    checkDetachOptions(vm, o);
    checkValues(vm, tuner, mpiFlavor, launcher, preemptSignal, o);
    if (o.job_name.empty()) o.job_name = std::filesystem::path(o.program[0]).filename().string();
  } catch (const Error& e) {
    return command.usageError(e.what(), err);
  }
  return std::nullopt;
}

}  // namespace poolrun::launcher
