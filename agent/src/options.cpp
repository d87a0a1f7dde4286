// poold-agent's command line (options.hpp), read as poold reads its own.

#include "poolrun/agent/options.hpp"

#include <algorithm>
#include <sstream>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/options.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/http_pool.hpp"

namespace poolrun::agent {

pool::ClientOptions linkOptions(const AgentOptions& o, const std::string& token) {
  pool::ClientOptions c;
  c.token = token;
  c.ca_file = o.ca_file.string();
  c.cert_file = o.cert_file.string();
  c.key_file = o.key_file.string();
  return c;
}

std::string agentUsage() {
  auto n = [](int64_t v) { return std::to_string(v); };
  return "usage: poold-agent --pool URI (--token-file FILE | (--join TOKEN | --join-file FILE)\n"
         "                   [--token-file FILE])\n"
         "                   [--node NAME] [--interval SECONDS]\n"
         "                   [--ca FILE] [--tls-cert FILE --tls-key FILE]\n"
         "                   [--from TOPOLOGY] [--sysfs-root DIR] [--proc-root DIR]\n"
         "                   [--dcgm-job-mapping-dir DIR] [--label KEY=VALUE]...\n"
         "                   [--nvlink-domain NAME] [--block NAME] [--switch NAME] [--rail-group NAME]\n"
         "                   [--spine NAME]\n"
         "                   [--mps-dir DIR] [--mps-control PROGRAM] [--poolrun PATH] [--job-dir DIR]\n"
         "                   [--cgroup auto|v1|v2|none] [--cgroup-parent NAME] [--lease-pids N]\n"
         "                   [--health-interval SECONDS]\n"
         "                   [--launch-listen HOST:PORT [--launch-advertise HOST:PORT]\n"
         "                    [--allow-root-launches] [--launch-min-uid N] [--simulated-node]]\n"
         "       poold-agent --help | --version\n"
         "Registers this node with poold and sends it a heartbeat with the GPUs' and NIC ports' telemetry\n"
         "every interval; keeps running while poold is down (see docs/agent.md).\n"
         "  --pool URI                  the poold to report to: http://HOST:PORT or https://HOST:PORT\n"
         "  --ca FILE                   https: the CAs to trust (PEM; default $POOLRUN_CA, else the\n"
         "                              system's)\n"
         "  --tls-cert FILE             https: this node's client certificate (PEM), for a poold that\n"
         "  --tls-key FILE              asks for one (--tls-client-ca), and its key (mode 0600);\n"
         "                              both read again before every registration\n"
         "  --token-file FILE           a token of role node (or admin) for this node, the first word of\n"
         "                              the file; read again before every registration\n"
         "  --join TOKEN                where the token file does not exist yet: join the pool with\n"
         "                              this one-time token (poolctl node-token create), once, and\n"
         "                              keep the credential this node makes in the token file (mode\n"
         "                              0600; default " +
         std::string(kJoinedTokenFile) +
         "); ignored once the file is there\n"
         "  --join-file FILE            the same, the join token read from FILE (its first word; owned\n"
         "                              by root or this user, writable by nobody else), so that it is\n"
         "                              not on the command line; read only while the node has not joined\n"
         "  --node NAME                 the node's name in the pool (default: the host name)\n"
         "  --interval SECONDS          between heartbeats (default 5, " +
         n(kIntervalRange.min) + " to " + n(kIntervalRange.max) +
         ")\n"
         "  --from TOPOLOGY             read the node's topology from a file (hwloc XML, NCCL topology\n"
         "                              XML or poolrun JSON) instead of probing this machine\n"
         "  --sysfs-root DIR            read NIC ports from DIR instead of /sys (DIR/class/infiniband/...);\n"
         "                              DIR is a folder called sys\n"
         "  --proc-root DIR             read processes' environments from DIR instead of /proc\n"
         "  --dcgm-job-mapping-dir DIR  write dcgm-exporter's job-mapping files there (its\n"
         "                              --hpc-job-mapping-dir): one per GPU index, naming the lease\n"
         "  --mps-dir DIR               where the MPS control daemons of GPUs with shares listen, one in\n"
         "                              DIR/gpuN each (default " +
         std::string(pool::kDefaultMpsDirectory) +
         "; poolrun's\n"
         "                              $POOLRUN_MPS_DIR must name the same)\n"
         "  --mps-control PROGRAM       the MPS control daemon (default nvidia-cuda-mps-control, on PATH)\n"
         "  --poolrun PATH              the launcher of detached jobs (default: poolrun beside poold-agent)\n"
         "  --job-dir DIR               where the detached jobs started here are recorded until poold has\n"
         "                              their ends, DIR/NODE/ID.job and ID.exit (default " +
         std::string(kDefaultJobDir) +
         "):\n"
         "                              a restarted agent reports what its jobs became from there\n"
         "  --cgroup auto|v1|v2|none    confine each lease's jobs to a cgroup of their own, refused the\n"
         "                              node's GPUs the lease does not hold and all killed at its end\n"
         "                              (default auto: v1 where a v1 devices hierarchy is mounted, else\n"
         "                              v2; none where the agent is not root or the node has neither)\n"
         "  --cgroup-parent NAME        the cgroup the leases' cgroups are made in, in each hierarchy\n"
         "                              (default poolrun)\n"
         "  --lease-pids N              at most N processes and threads in a lease's cgroup on this\n"
         "                              node (default: no limit; 1 to 4194304)\n"
         "  --health-interval SECONDS   run the doctor's checks of the node's GPUs and NIC ports at the\n"
         "                              start and every SECONDS while no lease holds any of its GPUs; a\n"
         "                              FAIL drains the node (in poold, with what failed), and a pass\n"
         "                              resumes a node they drained (default 0: never; 300 is a good\n"
         "                              choice once `poolrun doctor` passes on the node; " +
         n(kHealthIntervalRange.min) + " to " + n(kHealthIntervalRange.max) +
         ")\n"
         "  --launch-listen HOST:PORT   start jobs' daemons here for mpirun on a poold pool "
         "(docs/launch.md):\n"
         "                              a daemon runs as the lease's owner, in the lease's cgroup, only\n"
         "                              with a launch credential poold signed for this node (port 0: any\n"
         "                              free one). Without it, jobs reach this node over ssh\n"
         "  --launch-advertise HOST:PORT  the address launchers are told (default: the listening port at\n"
         "                              the address the agent's registration comes from)\n"
         "  --allow-root-launches       start the daemons of root's leases too (refused by default)\n"
         "  --launch-min-uid N          refuse the daemons of users below uid N, system accounts (default\n"
         "                              1000)\n"
         "  --simulated-node            daemons take the node's name as their host name (a UTS\n"
         "                              namespace): several simulated nodes on one machine\n"
         "  --nvlink-domain NAME        the node's multi-node NVLink domain (an NVL72 rack); by default\n"
         "                              its GPUs' NVML fabric cluster and clique where they have one\n"
         "  --block NAME, --switch NAME, --rail-group NAME, --spine NAME\n"
         "                              the node's block, leaf switch, rail group and spine: placement\n"
         "                              keeps a job under as few and as low as it can (docs/placement.md)\n"
         "  --label KEY=VALUE           a label of the node (repeatable)\n"
         "exit status: 0 when stopped (SIGTERM, SIGINT), 1 when poold refuses the node's registration\n"
         "document (400), 2 for a bad command line\n";
}

namespace {

void checkPool(const std::string& uri) {
  if (!pool::isPooldUri(uri))
    throw badInput("--pool '" + common::printable(uri) +
                   "': a node agent reports to a poold; give http://HOST:PORT or https://HOST:PORT");
  try {
    pool::parseHttpReplicas(uri);  // checks HOST:PORT; connects to nothing
  } catch (const Error& e) {
    throw badInput("--pool: " + std::string(e.what()));
  }
}

// The level an option names (--nvlink-domain: the NVLink domain, --rail-group: the rail group, ...),
// or null.
std::string* levelOption(topo::NodeLevels& levels, const std::string& option) {
  for (const topo::LevelField& level : topo::kLevelFields) {
    std::string name = "--" + std::string(level.key);
    std::replace(name.begin(), name.end(), '_', '-');
    if (option == name) return &(levels.*level.member);
  }
  return nullptr;
}

}  // namespace

AgentOptions parseAgentOptions(const std::vector<std::string>& args) {
  AgentOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw badInput(a + " needs a value (see --help)");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
      return o;
    } else if (a == "--version") {
      o.version = true;
      return o;
    } else if (a == "--pool") {
      o.pool = value();
      checkPool(o.pool);
    } else if (a == "--token-file") {
      o.token_file = value();
    } else if (a == "--join") {
      o.join = value();
      if (!pool::isSecretOf(pool::kJoinTokenPrefix, o.join))
        throw badInput("--join: that is not a join token (" + std::string(pool::kJoinTokenPrefix) +
                       " and 64 hex digits, as `poolctl node-token create` prints it)");
    } else if (a == "--join-file") {
      o.join_file = value();
    } else if (a == "--ca") {
      o.ca_file = value();
    } else if (a == "--tls-cert") {
      o.cert_file = value();
    } else if (a == "--tls-key") {
      o.key_file = value();
    } else if (a == "--node") {
      o.node = value();
      common::checkNodeName(o.node, "--node");
    } else if (a == "--interval") {
      o.interval = std::chrono::seconds(
          common::parseOption<int64_t>(a, value(), kIntervalRange.min, kIntervalRange.max));
    } else if (a == "--from") {
      o.from = value();
    } else if (a == "--sysfs-root") {
      o.sysfs_root = value();
    } else if (a == "--proc-root") {
      o.proc_root = value();
    } else if (a == "--dcgm-job-mapping-dir") {
      o.job_mapping_dir = value();
    } else if (a == "--mps-dir") {
      o.mps_dir = value();
      if (!o.mps_dir.is_absolute())
        throw badInput("--mps-dir '" + common::printable(o.mps_dir.string()) +
                       "': not an absolute path (MPS clients are given it as it is)");
    } else if (a == "--poolrun") {
      o.poolrun = value();
      if (!o.poolrun.is_absolute())
        throw badInput("--poolrun '" + common::printable(o.poolrun.string()) + "': not an absolute path");
    } else if (a == "--job-dir") {
      o.job_dir = value();
      if (!o.job_dir.is_absolute())
        throw badInput("--job-dir '" + common::printable(o.job_dir.string()) + "': not an absolute path");
    } else if (a == "--cgroup") {
      o.cgroup = value();
      if (o.cgroup != "auto" && o.cgroup != "v1" && o.cgroup != "v2" && o.cgroup != "none")
        throw badInput("--cgroup '" + common::printable(o.cgroup) + "': give auto, v1, v2 or none");
    } else if (a == "--cgroup-parent") {
      o.cgroup_parent = value();
      if (o.cgroup_parent.empty() || o.cgroup_parent.find('/') != std::string::npos ||
          o.cgroup_parent == "." || o.cgroup_parent == ".." || o.cgroup_parent.size() > 64)
        throw badInput("--cgroup-parent '" + common::printable(o.cgroup_parent) +
                       "': give one cgroup name (no '/', at most 64 bytes)");
    } else if (a == "--launch-listen") {
      o.launch_listen = value();
    } else if (a == "--launch-advertise") {
      o.launch_advertise = value();
      if (std::string why = pool::launchAddressProblem(o.launch_advertise);
          !why.empty() || o.launch_advertise.starts_with(":"))
        throw badInput("--launch-advertise '" + common::printable(o.launch_advertise) +
                       "': expected HOST:PORT" + (why.empty() ? "" : " (it " + why + ")"));
    } else if (a == "--launch-min-uid") {
      o.launch_min_uid = common::parseOption<int64_t>(a, value(), 1, 4294967294);
    } else if (a == "--allow-root-launches") {
      o.allow_root_launches = true;
    } else if (a == "--simulated-node") {
      o.simulated_node = true;
    } else if (a == "--health-interval") {
      o.health_interval = std::chrono::seconds(
          common::parseOption<int64_t>(a, value(), kHealthIntervalRange.min, kHealthIntervalRange.max));
    } else if (a == "--lease-pids") {
      o.lease_pids = common::parseOption<int64_t>(a, value(), 1, 4194304);
    } else if (a == "--mps-control") {
      o.mps_control = value();
      if (o.mps_control.empty()) throw badInput("--mps-control needs a program");
    } else if (std::string* level = levelOption(o.levels, a)) {
      *level = value();
      common::checkText(*level, common::kMaxLabelBytes, a);
    } else if (a == "--label") {
      std::string v = value();
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0)
        throw badInput("--label '" + common::printable(v) + "': expected KEY=VALUE");
      std::string key = v.substr(0, eq);
      common::checkText(key, common::kMaxLabelBytes, "--label key");
      common::checkText(v.substr(eq + 1), common::kMaxLabelBytes, "--label " + key + " value");
      if (!o.labels.emplace(key, v.substr(eq + 1)).second)
        throw badInput("--label " + common::printable(key) + " is given twice");
    } else {
      throw badInput("unknown option '" + common::printable(a) + "' (see --help)");
    }
  }
  if (o.pool.empty()) throw badInput("poold-agent needs --pool http://HOST:PORT (the poold to report to)");
  if (!o.join.empty() && !o.join_file.empty())
    throw badInput("--join and --join-file: give one or the other");
  if (o.token_file.empty() && (!o.join.empty() || !o.join_file.empty())) o.token_file = kJoinedTokenFile;
  // The join file is read where the node has not joined yet (an administrator may remove it after).
  if (std::error_code ec; !o.join_file.empty() && !std::filesystem::exists(o.token_file, ec)) {
    o.join = readTokenFile(o.join_file);
    if (!pool::isSecretOf(pool::kJoinTokenPrefix, o.join))
      throw badInput("--join-file " + o.join_file.string() + ": that is not a join token (" +
                     std::string(pool::kJoinTokenPrefix) +
                     " and 64 hex digits, as `poolctl node-token create` prints it)");
  }
  if (o.token_file.empty())
    throw badInput(
        "poold-agent needs --token-file FILE (a token of role node for this node), or --join TOKEN (a "
        "join token: poolctl node-token create)");
  if (o.ca_file.empty()) {
    const char* env = std::getenv("POOLRUN_CA");
    if (env != nullptr) o.ca_file = env;
  }
  if (o.cert_file.empty() != o.key_file.empty())
    throw badInput(o.cert_file.empty() ? "--tls-key without --tls-cert: give both"
                                       : "--tls-cert without --tls-key: give both");
  if (pool::parseHttpReplicas(o.pool).front().tls) {
    try {
      pool::openAgentLink(o.pool, linkOptions(o, ""));  // reads the files; connects to nothing
    } catch (const Error& e) {
      throw badInput(std::string(e.what()));
    }
  } else if (!o.cert_file.empty()) {
    throw badInput("--tls-cert with --pool " + common::printable(o.pool) +
                   ": a client certificate is for an https:// poold");
  }
  if (o.launch_listen.empty() &&
      (!o.launch_advertise.empty() || o.allow_root_launches || o.simulated_node || o.launch_min_uid != 1000))
    throw badInput(std::string(!o.launch_advertise.empty() ? "--launch-advertise"
                               : o.allow_root_launches     ? "--allow-root-launches"
                               : o.simulated_node          ? "--simulated-node"
                                                           : "--launch-min-uid") +
                   " without --launch-listen HOST:PORT: it is about the launch port");
  for (const auto& [option, dir] : {std::pair{"--sysfs-root", o.sysfs_root}, {"--proc-root", o.proc_root}}) {
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
      throw badInput(std::string(option) + " " + dir.string() + ": not a directory");
  }
  // The telemetry sampler reads ROOT/sys/class/infiniband, ROOT the parent of the folder given.
  if (!o.sysfs_root.empty() && o.sysfs_root.lexically_normal().parent_path().filename() != "sys" &&
      o.sysfs_root.lexically_normal().filename() != "sys")
    throw badInput("--sysfs-root " + o.sysfs_root.string() +
                   ": name a folder called sys, the /sys of a tree (ROOT/sys/class/infiniband/...)");
  return o;
}

std::string readTokenFile(const std::filesystem::path& file) {
  return pool::readClientToken(file, "the node's token");
}

}  // namespace poolrun::agent
