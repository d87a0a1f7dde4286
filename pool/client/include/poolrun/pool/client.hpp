#pragma once

// What a pool user (poolrun, poolctl) sees of a GPU pool, whichever kind it is:
//   local        this node's GPUs, state in a SQLite file under the state directory, no daemon
//   http://H:P   a poold serving many nodes
//   sim:FILE     a simulated cluster described by a cluster file (leases in the state directory)
//   slurm, slurm:PARTITION   the Slurm allocation poolrun runs in, or one it asks Slurm for
//                (poolrun/pool/slurm.hpp; node() there names the node and leaves the topology to
//                the launcher, which probes the allocated nodes)
// Every implementation passes the same contract tests.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/types.hpp"
#include "poolrun/topo/cluster.hpp"

namespace poolrun::pool {

// The error a client raises when `request` did not fit within its --wait; `pool` names the pool,
// `reason` why it was still waiting (the last PollResult::wait_reason; "" where none was heard).
PoolError queueTimeout(const LeaseRequest& request, int position, const std::string& pool,
                       const std::string& reason = {});

// Where a queued request stands, as its client tells its caller while it waits.
struct QueueProgress {
  int64_t ticket = 0;
  int position = 0;                // 1: the head
  std::chrono::seconds waited{0};  // since the client queued it
  std::string reason;              // why it cannot start now (PoolState::waitReason); may be empty
  std::optional<std::chrono::system_clock::time_point> planned_start;  // where the scheduler has one
  // Whether the caller is told anything new, position, reason or planned start (waited aside).
  bool sameAs(const QueueProgress& other) const {
    return ticket == other.ticket && position == other.position && reason == other.reason &&
           planned_start == other.planned_start;
  }
};

// "queued at position 2 (ticket 18), waited 1:05: needs 120 GPUs, 108 free; behind ticket 3;
// planned start 12:04:31 (in 3:00)": what poolrun and poolctl print; times in local time.
std::string formatQueueProgress(const QueueProgress& progress, std::chrono::system_clock::time_point now);
// "0:42", "5:03", "1:02:03", "2-01:00:00": a duration as Slurm's squeue shows one (negative: 0:00).
std::string formatElapsed(std::chrono::seconds duration);
// "12:04:31" on the day of `now`, else "2026-12-02T09:00:00"; local time.
std::string formatLocalTime(std::chrono::system_clock::time_point t,
                            std::chrono::system_clock::time_point now);

// While one is in scope, SIGINT, SIGTERM and SIGHUP end a queued PoolClient::acquire rather than
// the process: the handler only records the signal; acquire sees it within a second (one poll),
// withdraws its queued request, releases a lease granted meanwhile, and throws PoolError
// kInterrupted with the signal and what it did ("withdrew the queued request (ticket 18)"), also
// where the process started with SIGINT or SIGTERM ignored (a script's background job); SIGHUP
// ignored (nohup) stays ignored. The previous dispositions come back when it goes; a
// signal it caught that no acquire acted on is raised again then, so that none is lost. One at a
// time per process; made and destroyed on the main thread.
class QueueInterruption {
 public:
  QueueInterruption();
  ~QueueInterruption();
  QueueInterruption(const QueueInterruption&) = delete;
  QueueInterruption& operator=(const QueueInterruption&) = delete;
};

// Where the ranks of a job on a pool's GPUs run: what a launcher needs to know of the pool's kind.
enum class RankSite {
  kThisMachine,      // local: the pool is this machine's GPUs
  kSimulated,        // sim:FILE: the nodes are simulated, and all of them run on this machine
  kSlurmAllocation,  // slurm: the nodes of a Slurm allocation, which the launcher enters and probes
  kRemoteNodes,      // http://: other machines, reached by mpirun's remote shell
};

// Per node of a lease, where its agent starts the job's daemon and the credential that lets it
// (POST /v1/leases/ID/launch; docs/launch.md).
struct LaunchNode {
  std::string node;
  std::string agent;       // HOST:PORT; empty where the node's agent starts no daemons
  std::string credential;  // common/launch_credential.hpp's text
};
struct LaunchCredentials {
  std::string lease;
  int64_t expires = 0;  // Unix seconds
  std::vector<LaunchNode> nodes;
};

class PoolClient {
 public:
  virtual ~PoolClient() = default;

  // All-or-nothing. Blocks while queued, up to request.wait, calling `queued` when the request is
  // queued, whenever its position, reason or planned start changes, and at least every 30 s.
  // Throws poolrun::Error: kUnsupported when the pool can never satisfy the request, kNotFound/kIo
  // on a pool that cannot be reached, a timeout error (kIo) with the last queue position when
  // `wait` runs out, and PoolError kInterrupted (see QueueInterruption).
  virtual Lease acquire(const LeaseRequest& request,
                        const std::function<void(const QueueProgress&)>& queued = {}) = 0;
  // Extends the lease by its ttl (never past max_duration). Throws when it is gone (expired/released).
  virtual Lease renew(const std::string& lease_id) = 0;
  // Idempotent: releasing a released or expired lease is not an error. Returns whether the lease
  // was held (false: already released, expired, or never granted).
  virtual bool release(const std::string& lease_id) = 0;
  // An elastic lease's holder has moved its job off the GPUs under a shrink notice
  // (Lease::shrink_gpus): the pool takes them back now instead of at shrink_at. Returns the lease
  // as it is then (unchanged where no shrink is pending). Throws as renew does.
  virtual Lease shrink(const std::string& lease_id) = 0;

  // Housekeeping that may wait for the disk, done by a launcher while its job runs, where waiting
  // costs the job nothing: the embedded pools checkpoint their file, so that the next launch
  // opens a short write-ahead log. Errors are swallowed: the next call tries again.
  virtual void idle() {}

  // A launch credential for each node of lease `lease_id`, for its owner. Throws kUnsupported where
  // the pool's nodes have no agents to start daemons (every pool but poold's), as renew otherwise.
  virtual LaunchCredentials launchCredentials(const std::string& lease_id);

  // The node as the pool knows it: name, topology, leaf switch, labels, fabric override.
  virtual topo::ClusterNode node(const std::string& name) = 0;
  virtual std::string describe() const = 0;  // "local (/var/lib/...)", "http://h:p", "sim:FILE"
  virtual RankSite rankSite() const = 0;
};

struct ClientOptions {
  std::string token;      // bearer token for http pools (POOLRUN_TOKEN or --token-file)
  std::string state_dir;  // empty: $POOLRUN_STATE_DIR, else the XDG state directory
  std::string owner;      // empty: the user name
  // Embedded pools (local, sim:) have no tokens: whoever can write the state file is trusted, so
  // the caller says its role. "admin" (the default) may release any lease and change the
  // inventory; "user" only its own leases. http pools take the role from the token file.
  std::string role = "admin";
  // https:// pools: the CAs to trust (PEM; --ca or POOLRUN_CA; empty: the system's), and a client
  // certificate with its key where poold asks for one (poold-agent --tls-cert/--tls-key).
  std::string ca_file, cert_file, key_file;
  // Without a token, http and https pools are sent a MUNGE credential per request, made by the
  // munged at this socket (empty: $POOLRUN_MUNGE_SOCKET, else munge's default), where libmunge is
  // there.
  std::string munge_socket;
};

// The user a client acts as where ClientOptions::owner is empty: $USER, else the password
// database's name for this uid, else "uidN".
std::string currentUser();

// A token is 8 to 512 printable ASCII characters (no space): what poold's token files accept, and
// what a client sends.
bool validToken(const std::string& token);
// What makes `token` invalid, for a message ("3 bytes", "20 bytes, with a character outside them").
std::string tokenProblem(const std::string& token);
// The token of a client's token file (--token-file): the first word of the first line that has one,
// `#` starting a comment; a regular file of at most common::kTokenFileLimit. `what` names the token
// in the error ("your token", "the node's token"). Throws poolrun::Error (kBadInput, kNotFound)
// naming the file, also for a token that validToken refuses and for a file that someone else could
// change (common::readSecretFile: owned by neither root nor the user, or writable by its group or
// others). A file its group or others may read is warned of on standard error, once per process.
std::string readClientToken(const std::filesystem::path& file, const std::string& what);

}  // namespace poolrun::pool
