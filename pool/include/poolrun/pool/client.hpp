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

#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/error.hpp"
#include "poolrun/topo/topology.hpp"

namespace poolrun::pool {

// A unit of a lease: a whole GPU, a MIG compute instance (poolrun --mig), or an MPS share of a GPU
// (poolrun --share, --gpu-memory).
struct GpuRef {
  std::string node;
  // A whole GPU or a share: the GPU's index in its node's NodeTopology. A MIG instance: the pool's
  // unit number, gpus.size() + k for the k-th of topo::migUnits (its GPU and instance).
  size_t index = 0;
  std::string mig{};  // a MIG instance: its "MIG-..." UUID (what CUDA_VISIBLE_DEVICES takes); empty: a GPU
  // An MPS share: the percentage of the GPU's SMs its client may use (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE;
  // 0: not limited) and the device memory it may pin (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; 0: not
  // limited). Other leases may hold shares of the same GPU.
  int share_percent{};
  uint64_t share_memory{};
  bool share{};
  bool operator==(const GpuRef&) const = default;
  auto operator<=>(const GpuRef&) const = default;
};

// "n01:0-3,6 n02:0-7": GPUs (sorted by node, then index) in the compact form people read; a MIG
// instance is "n03:MIG-<uuid>", an MPS share "n04:2(25% 20 GiB)".
std::string formatGpus(const std::vector<GpuRef>& gpus);

struct LeaseRequest {
  int gpus = 0;
  int gpus_per_node = 0;  // 0: any split
  bool whole_nodes = false;
  std::string gpu_model;  // substring of the GPU model, empty: any
  uint64_t min_memory_bytes = 0;
  std::optional<topo::Fabric> fabric;
  std::map<std::string, std::string> labels;  // every label must match
  bool one_switch = false;                    // all nodes under one leaf switch
  int priority = 0;                           // higher first
  std::string owner;
  std::string job_name;
  std::optional<std::chrono::seconds> wait;  // nullopt: wait while the pool could ever satisfy it
  std::chrono::seconds ttl{60};
  std::optional<std::chrono::seconds> max_duration;
  bool no_reclaim = false;  // never reclaimed when idle (poold --reclaim-idle); administrators only
  // May be preempted by a waiting request of higher priority (after the pool's grace period). A
  // lease whose owner is over quota may be preempted whatever this says.
  bool preemptible = false;
  // Elastic (poolrun -n MIN:MAX): `gpus` is the least the lease holds, granted all or nothing;
  // max_gpus the most it grows to, while GPUs are free and nobody of equal or higher priority
  // waits. A request of higher priority shrinks it back towards `gpus` instead of preempting it.
  // 0: a lease of a fixed size. Not with whole_nodes; a multiple of gpus_per_node where given.
  int max_gpus = 0;
  // MIG (poolrun --mig PROFILE): `gpus` MIG compute instances of this profile ("1g.10gb", as
  // `nvidia-smi -L` names them) instead of whole GPUs, packed onto as few GPUs as possible. Not with
  // whole_nodes, gpus_per_node or max_gpus. Empty: whole GPUs.
  std::string mig_profile;
  // PROFILE+: an instance with at least the profile's SMs and memory will do (the smallest first).
  bool mig_or_larger = false;
  bool mig() const { return !mig_profile.empty(); }
  // An MPS share per rank (poolrun --share FRACTION, --gpu-memory BYTES): `gpus` shares, each on
  // a GPU of its own (NCCL takes one rank per GPU in a communicator), run by the node's MPS control
  // daemon. share_percent: the share of the GPU's SMs, 1 to 100 (0: not limited, counted as none);
  // share_memory_bytes: the device memory it may pin (0: share_percent of the GPU's memory). The
  // shares of one GPU belong to one owner (MPS serves one user's clients at a time) and add up to at
  // most 100 percent, the GPU's memory and kMaxMpsClients clients. Not with mig_profile,
  // whole_nodes, gpus_per_node or max_gpus.
  int share_percent = 0;
  uint64_t share_memory_bytes = 0;
  bool shared() const { return share_percent > 0 || share_memory_bytes > 0; }
  // The least time between the lease's creation or last change of size and its next growth: each
  // one restarts the job.
  std::chrono::seconds resize_interval{600};
  bool elastic() const { return max_gpus > 0; }
};

struct Lease {
  std::string id;
  std::string owner;
  std::string job_name;
  std::vector<GpuRef> gpus;  // sorted by node (pool order), then index
  int priority = 0;
  std::chrono::system_clock::time_point created;
  std::chrono::system_clock::time_point expires;
  std::chrono::seconds ttl{60};                                  // what a renewal extends the lease by
  std::optional<std::chrono::system_clock::time_point> max_end;  // created + max_duration
  // Variables the job's launcher must set for the job to run inside the lease (Slurm: the
  // allocation's SLURM_* variables where poolrun made the allocation); empty for other pools.
  std::map<std::string, std::string> env;
  bool no_reclaim = false;   // see LeaseRequest
  bool preemptible = false;  // see LeaseRequest
  // The time a preempted lease's holder has between the notice and the end (the pool's
  // --preempt-grace); zero where the pool never preempts.
  std::chrono::seconds preempt_grace{0};
  // Set once the pool has chosen the lease as a victim: the job must end by preempt_at, when the
  // pool ends the lease; preempt_reason says for whom ("ticket 12 of bob, priority 10, needs ...").
  std::optional<std::chrono::system_clock::time_point> preempt_at;
  std::string preempt_reason;
  int64_t preempted_for = 0;  // the queue ticket it was preempted for

  // Elastic leases: the request it was granted for (its bounds, gpus to max_gpus, and the shape it
  // grows and shrinks in), and what the pool did to its size.
  std::optional<LeaseRequest> elastic;
  int resizes = 0;  // how often the pool has changed its GPUs: a holder restarts its job on a change
  std::chrono::system_clock::time_point resized;  // the last change; `created` where none
  // A shrink under notice: the pool takes `shrink_gpus` back at shrink_at (the job must have left
  // them by then: it is restarted on the others), or earlier when the holder calls
  // PoolClient::shrink. shrink_reason says for whom, as preempt_reason does.
  std::vector<GpuRef> shrink_gpus;
  std::optional<std::chrono::system_clock::time_point> shrink_at;
  std::string shrink_reason;
  int64_t shrunk_for = 0;  // the queue ticket it shrinks for

  // What the pool tells the holder in a renewal's reply and in listings (not stored):
  std::vector<std::string> at_risk_nodes;  // nodes of the lease whose agent has gone quiet
  std::optional<std::chrono::system_clock::time_point> idle_since;  // idle: GPUs unused since then
  std::optional<std::chrono::system_clock::time_point> reclaim_at;  // when the pool ends it as idle
};

// Why a pool call failed, where the caller acts on the reason (poolctl maps it to exit status).
enum class PoolFailure {
  kOther,         // see Error::code()
  kNeverFits,     // the pool can never satisfy the request as it stands (failed GPUs, too few nodes)
  kTimeout,       // the request did not fit within LeaseRequest::wait
  kUnauthorized,  // 401: no token, or one the pool does not know
  kForbidden,     // 403: the token's owner or role may not do this
  kGone,          // renew of a lease that expired, was released or never existed
  kInterrupted,   // a signal (PoolError::signal()) ended a queued wait; the request was withdrawn
};

// A poolrun::Error with the reason a pool refused; thrown by every PoolClient.
class PoolError : public Error {
 public:
  PoolError(PoolFailure failure, ErrorCode code, const std::string& message, int position = 0, int signal = 0)
      : Error(code, message), failure_(failure), position_(position), signal_(signal) {}
  PoolFailure failure() const noexcept { return failure_; }
  int position() const noexcept { return position_; }  // kTimeout: the last queue position
  int signal() const noexcept { return signal_; }      // kInterrupted: the signal's number

 private:
  PoolFailure failure_;
  int position_;
  int signal_;
};

// Sets request.mig_profile (and mig_or_larger, for a trailing '+') from an option's text: a MIG
// profile as nvidia-smi names it, "1g.10gb", "3g.40gb+", "1g.20gb+me". Throws kBadInput naming
// `option` and the text where it is empty, over 64 bytes, or has characters no profile has.
void setMigProfile(LeaseRequest& request, std::string_view text, const std::string& option);
// Sets request.share_percent from an option's text (poolrun --share): a fraction of a GPU, "0.25",
// or a percentage, "25%", from 1% to the whole GPU. Throws kBadInput naming `option` and the text.
void setSharePercent(LeaseRequest& request, std::string_view text, const std::string& option);
// Sets request.share_memory_bytes from an option's text (poolrun --gpu-memory): bytes, or a whole
// number with a binary unit: "512M", "10G", "10GiB", "1T" (at most 1 PiB). Throws kBadInput.
void setShareMemory(LeaseRequest& request, std::string_view text, const std::string& option);

// The placement options poolctl acquire and poolrun share, with one wording of their errors
// (kBadInput naming `option` and the text): --model TEXT (a substring of the GPU model, text as
// the name rules take it), --min-memory-gib G (whole GiB, at most kMinMemoryBytesRange), --label
// KEY=VALUE (repeatable; a key given twice takes the last).
void setGpuModel(LeaseRequest& request, std::string_view text, const std::string& option);
void setMinMemoryGib(LeaseRequest& request, std::string_view text, const std::string& option);
void addLabel(LeaseRequest& request, std::string_view text, const std::string& option);

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
};

// The user a client acts as where ClientOptions::owner is empty: $USER, else the password
// database's name for this uid, else "uidN".
std::string currentUser();

// Opens a pool by URI. Throws poolrun::Error (kBadInput) naming the URI when it is malformed. The
// `local` pool opens on any machine (so that status and leases work); acquiring from it on a
// machine without GPUs throws PoolError kNeverFits "no GPUs on this node; use --pool sim:FILE".
std::unique_ptr<PoolClient> openPool(const std::string& uri, const ClientOptions& options = {});

// A token is 8 to 512 printable ASCII characters (no space): what poold's token files accept, and
// what a client sends.
bool validToken(const std::string& token);
// What makes `token` invalid, for a message ("3 bytes", "20 bytes, with a character outside them").
std::string tokenProblem(const std::string& token);
// The token of a client's token file (--token-file): the first word of the first line that has one,
// `#` starting a comment; a regular file of at most topo::kTokenFileLimit. `what` names the token
// in the error ("your token", "the node's token"). Throws poolrun::Error (kBadInput, kNotFound)
// naming the file, also for a token that validToken refuses and for a file that someone else could
// change (topo::readSecretFile: owned by neither root nor the user, or writable by its group or
// others). A file its group or others may read is warned of on standard error, once per process.
std::string readClientToken(const std::filesystem::path& file, const std::string& what);

// The cluster file of a `sim:FILE` URI (FILE, possibly empty); nullopt for the other kinds.
std::optional<std::string> simClusterFile(const std::string& uri);

}  // namespace poolrun::pool
