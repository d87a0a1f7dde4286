#pragma once

// poold-agent's command line:
//   poold-agent --pool URI --token-file FILE [--join TOKEN] [--ca FILE] [--tls-cert FILE --tls-key FILE]
//               [--node NAME] [--interval SECONDS]
//               [--from TOPOLOGY] [--sysfs-root DIR] [--proc-root DIR]
//               [--dcgm-job-mapping-dir DIR] [--switch NAME] [--label K=V]...
// Errors name the option and its value (poolrun::Error kBadInput); poold-agent prints them with the
// usage and exits with status 2.

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/limits.hpp"

namespace poolrun::agent {

inline constexpr pool::Range<int64_t> kIntervalRange{1, 3600};         // --interval, as poold reads it
inline constexpr pool::Range<int64_t> kHealthIntervalRange{0, 86400};  // --health-interval; 0: never

// Where a node that joins keeps its credential unless --token-file names another file (the unit's
// StateDirectory).
inline constexpr const char* kJoinedTokenFile = "/var/lib/poold-agent/node.token";

// Where the agent records the detached jobs it starts (the unit's StateDirectory).
inline constexpr const char* kDefaultJobDir = "/var/lib/poold-agent/jobs";

struct AgentOptions {
  std::string pool;                  // http://HOST:PORT
  std::filesystem::path token_file;  // with --join and none given: kJoinedTokenFile
  std::string join;                  // --join: a one-time join token (poolctl node-token create)
  std::filesystem::path join_file;   // --join-file: the join token read from there (not in `ps`)
  std::filesystem::path ca_file;     // https: --ca, else $POOLRUN_CA; empty: the system's CAs
  std::filesystem::path cert_file;   // https: --tls-cert, the node's client certificate
  std::filesystem::path key_file;    // --tls-key
  std::string node;                  // empty: the host name
  std::chrono::seconds interval{5};
  std::filesystem::path from;        // empty: probe this machine
  std::filesystem::path sysfs_root;  // empty: /sys
  std::filesystem::path proc_root;   // empty: /proc
  std::filesystem::path job_mapping_dir;
  std::filesystem::path mps_dir = pool::kDefaultMpsDirectory;  // --mps-dir
  std::string mps_control = "nvidia-cuda-mps-control";         // --mps-control
  std::filesystem::path poolrun;  // --poolrun: detached jobs' launcher; empty: beside poold-agent
  std::filesystem::path job_dir = kDefaultJobDir;  // --job-dir
  std::string cgroup = "auto";                     // --cgroup auto|v1|v2|none
  std::string cgroup_parent = "poolrun";           // --cgroup-parent
  int64_t lease_pids = 0;                          // --lease-pids: 0, no limit
  std::chrono::seconds health_interval{0};         // --health-interval; 0 (the default): none
  std::string launch_listen;                       // --launch-listen HOST:PORT; empty: no launch port
  std::string launch_advertise;                    // --launch-advertise; empty: the port, poold's view
  bool allow_root_launches = false;
  int64_t launch_min_uid = 1000;  // --launch-min-uid
  bool simulated_node = false;
  topo::NodeLevels levels;  // --nvlink-domain, --block, --switch, --rail-group, --spine
  std::map<std::string, std::string> labels;
  bool help = false;
  bool version = false;
};

// Reads `args` (without the program's name). --help and --version end the reading (the rest is not
// checked). Throws poolrun::Error (kBadInput): an unknown option, a missing value, an interval that
// is not a whole number in kIntervalRange, a pool that is not http://HOST:PORT, a node name or a
// label that poolrun's name rules refuse, a missing --pool or --token-file.
AgentOptions parseAgentOptions(const std::vector<std::string>& args);

// What the agent's link to poold is opened with: the token, the CA and the client certificate.
pool::ClientOptions linkOptions(const AgentOptions& o, const std::string& token);

// What --help prints, and what follows every usage error.
std::string agentUsage();

// The token of a token file: the first word of its first line that is not blank or a comment (`#`),
// as poolctl reads one. The file is read whole each call (at most common::kTokenFileLimit). Throws
// poolrun::Error naming the file.
std::string readTokenFile(const std::filesystem::path& file);

}  // namespace poolrun::agent
