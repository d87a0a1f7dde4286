#pragma once

// PoolState: the whole pool as a value (inventory, leases, queue) and every rule that changes it.
// No I/O and no clock of its own: each operation takes `now`, so that tests drive time. Every
// implementation (embedded, poold) runs these rules and persists what they mark dirty.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "poolrun/pool/accounts.hpp"
#include "poolrun/pool/fairshare.hpp"
#include "poolrun/pool/job_book.hpp"
#include "poolrun/pool/membership.hpp"
#include "poolrun/pool/quotas.hpp"
#include "poolrun/pool/reservations.hpp"
#include "poolrun/pool/topology_book.hpp"
#include "poolrun/pool/types.hpp"
#include "poolrun/pool/usage.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/telemetry.hpp"

namespace poolrun::pool {

// Why a GPU is failed: an administrator's `poolctl fail`, or what its agent reported.
struct GpuFailure {
  std::string reason;  // "marked failed by an administrator", "XID 79 (fallen off the bus)", ...
  TimePoint time;
  bool operator==(const GpuFailure&) const = default;
};

// What a node's agent last said. In memory only: after a restart, poold waits a node timeout for
// the next heartbeat before it calls the node unreachable.
struct NodeLive {
  TimePoint last_heartbeat{};      // poold's clock; the epoch where none came since poold started
  TimePoint previous_heartbeat{};  // the one before it (the usage ledger's spans are poold's time)
  bool unreachable = false;
  std::vector<topo::GpuSample> gpus;  // per GPU index, from the last heartbeat (empty: none yet)
  std::vector<topo::NicPortSample> nics;
  std::map<size_t, std::vector<topo::GpuProcess>> foreign;     // GPUs running processes of no lease
  std::map<std::pair<size_t, uint64_t>, uint64_t> xid_counts;  // (GPU, XID): events since poold started
  // The GPUs the last heartbeat's reply asked MPS daemons for (nullopt: no reply since poold started).
  std::optional<std::set<size_t>> mps_asked;
  // What the agent's health checks last said (Heartbeat::health_failure; nullopt: nothing since
  // poold started): only a change drains or resumes the node.
  std::optional<std::string> health_failure;
};

struct PoolNode {
  std::string name;
  std::shared_ptr<const topo::NodeTopology> topology;
  topo::NodeLevels levels;             // its NVLink domain, block, leaf, rail group and spine
  std::optional<topo::Fabric> fabric;  // where the cluster file says; else topo::nodeFabrics decides
  std::map<std::string, std::string> labels;
  NodeState state = NodeState::kUp;
  // Why it drains, where its agent's health checks drained it ("health check failed: ..."); a node
  // an administrator drained has none, and its agent never resumes it.
  std::string drain_reason;
  bool drained_by_agent = false;
  std::set<size_t> failed;                      // failed GPU indexes
  std::map<size_t, GpuFailure> failures;        // why, per failed GPU (where known)
  std::map<size_t, uint64_t> ecc_acknowledged;  // uncorrected ECC counts an administrator accepted
  int64_t order = 0;                            // registration order: "pool order"
  std::string agent;          // the agent's version, for a node its agent registered; empty: no agent
  std::string launch;         // HOST:PORT where its agent starts jobs' daemons; empty: it does not
  std::string topology_hash;  // topologyHash(*topology), kept for heartbeats to compare with
  NodeLive live;

  // What a lease holds of the node, its units: GPUs 0 to gpuCount()-1, then the MIG compute
  // instances of its GPUs in MIG mode, unit gpuCount() + k being mig_units[k] (topo::migUnits).
  std::vector<topo::MigUnit> mig_units;
  // Per GPU, whether it is in MIG mode now or after its next reset (inMigMode), copied out of the
  // topology when it is set: placement asks it of every free GPU of the pool on every acquire, and
  // each GPU's topology entry is a cache miss of its own (PoolNode::setTopology).
  std::vector<char> gpu_in_mig{};
  void setTopology(std::shared_ptr<const topo::NodeTopology> t);
  // MIG layouts an administrator asked for (poolctl mig), per GPU: until its agent has made one,
  // the GPU and its instances take no new lease, and once no lease holds them the agent is asked.
  std::map<size_t, std::vector<std::string>> mig_layouts;

  size_t gpuCount() const { return topology ? topology->gpus.size() : 0; }
  // GPU `gpu`'s memory: the topology's, else what its agent's NVML last said (0: unknown).
  uint64_t memoryOf(size_t gpu) const {
    if (gpu < gpuCount() && topology->gpus[gpu].memory_bytes > 0) return topology->gpus[gpu].memory_bytes;
    return gpu < live.gpus.size() ? live.gpus[gpu].memory_total_bytes.value_or(0) : 0;
  }
  size_t unitCount() const { return gpuCount() + mig_units.size(); }
  bool isMigUnit(size_t unit) const { return unit >= gpuCount(); }
  // The GPU a unit is or is part of.
  size_t gpuOf(size_t unit) const { return unit < gpuCount() ? unit : mig_units[unit - gpuCount()].gpu; }
  // A MIG unit's compute instance (null for a whole GPU or a unit the node does not have).
  const topo::MigInstance* migInstance(size_t unit) const {
    if (unit < gpuCount() || unit >= unitCount()) return nullptr;
    const topo::MigUnit& u = mig_units[unit - gpuCount()];
    return &topology->gpus[u.gpu].mig.instances[u.instance];
  }
  // Whether placement may give unit `unit` to a lease: its GPU not failed, not busy outside the
  // pool, not waiting for a new MIG layout.
  bool placeable(size_t unit) const { return placeableOnceLaidOut(unit) && !mig_layouts.count(gpuOf(unit)); }
  // Whether it may be, once the MIG layout asked for its GPU is made (whether a request could ever
  // fit: the layout may have instances of its profile again).
  bool placeableOnceLaidOut(size_t unit) const {
    const size_t gpu = gpuOf(unit);
    return !failed.count(gpu) && !live.foreign.count(gpu);
  }
};

// Preemption: a waiting request that cannot fit otherwise ends leases of lower priority that
// may be preempted (LeaseRequest::preemptible), after a grace period. Every pool poolrun manages
// applies these rules: poold's options, and POOLRUN_PREEMPT_GRACE / POOLRUN_MIN_RUNTIME for the
// embedded pools.
struct PreemptOptions {
  std::chrono::seconds grace{120};        // from the notice to preempt_at, when the job must have ended
  std::chrono::seconds min_runtime{600};  // a lease younger than this is never a victim
  // After preempt_at, how long the pool still holds a lease whose holder has not released it (the
  // job being killed), before it ends the lease itself and the preemptor starts.
  std::chrono::seconds kill_margin{10};
};

// The live pool's rules (heartbeats, idle leases): poold's options.
struct LiveOptions {
  std::chrono::seconds heartbeat_interval{5};  // told to agents in every reply
  std::chrono::seconds node_timeout{15};       // no heartbeat for this long: the node is unreachable
  double idle_utilization = 0.05;              // a lease's GPUs all under this (0 to 1) ...
  std::chrono::seconds idle_after{1800};       // ... for this long: the lease is idle
  bool reclaim_idle = false;                   // poold --reclaim-idle: end idle leases ...
  std::chrono::seconds reclaim_grace{300};     // ... this long after the warning
};

struct QueueEntry {
  enum class Status { kWaiting, kGranted, kFailed };
  int64_t ticket = 0;
  LeaseRequest request;
  TimePoint enqueued;
  TimePoint heartbeat;  // last sign of life of the waiting client
  Status status = Status::kWaiting;
  std::string lease_id;  // kGranted
  std::string reason;    // kFailed
};

// What PoolState changed since the last takeDirty(): the rows a store must write.
struct Dirty {
  std::set<std::string> nodes;         // upsert, or delete where gone
  std::set<std::string> leases;        // upsert, or delete where gone
  std::set<std::string> new_leases;    // their GPUs must be inserted (a subset of `leases`)
  std::set<std::string> resized;       // their GPUs must be written again (a subset of `leases`)
  std::set<int64_t> queue;             // upsert, or delete where gone
  std::set<std::string> requests;      // remembered acquire request ids: upsert, or delete where gone
  std::set<std::string> join_tokens;   // by hash (membership.hpp): upsert, or delete where gone
  std::set<std::string> credentials;   // node credentials, by node: upsert, or delete where gone
  std::set<std::string> jobs;          // job records (job_book.hpp), by id: upsert, or delete where gone
  std::set<uint64_t> usage;            // usage ledger rows (usage.hpp), by id: upsert, or delete where gone
  std::set<std::string> reservations;  // by name (reservations.hpp): upsert, or delete where gone
  bool counters = false;
  bool empty() const {
    return nodes.empty() && leases.empty() && queue.empty() && requests.empty() && join_tokens.empty() &&
           credentials.empty() && jobs.empty() && usage.empty() && reservations.empty() && !counters;
  }
  void merge(const Dirty& other);
};

// A lease granted or ended, as the rules saw it: what poold's event log and metrics count.
struct LeaseEvent {
  // kPreempted: chosen as a victim (the lease holds on until its holder ends the job, or until
  // its preempt_at and PreemptOptions::kill_margin); it ends later as kReleased or kExpired.
  // kGrown, kShrinking, kShrunk: an elastic lease given more GPUs, told to give some back (a shrink
  // under notice), and after giving them back.
  enum class Kind { kGranted, kReleased, kExpired, kPreempted, kGrown, kShrinking, kShrunk };
  Kind kind = Kind::kGranted;
  Lease lease;             // as it was when granted or ended; as it is after a growth or shrink
  std::string reason;      // where the rule that ended it says more than its kind
  size_t gpus_before = 0;  // kGrown, kShrunk: how many GPUs it held before, ...
  TimePoint since{};       // ... since then (its creation, or the change before)
};

// What the live pool's rules saw happen to a node: its agent went quiet or came back, or a GPU
// failed by what the agent reported. For poold's event log.
struct NodeEvent {
  // kDrained: by its agent's health checks; kMaintenance: drained at a maintenance window's start
  enum class Kind { kUnreachable, kReachable, kGpuFailed, kDrained, kResumed, kMaintenance };
  Kind kind = Kind::kUnreachable;
  std::string node;
  size_t gpu = 0;      // kGpuFailed
  std::string reason;  // kGpuFailed, kDrained, kMaintenance: why; kUnreachable: since when nothing was heard
};

// What an acquire with a client request id got (poolrun and poolctl send one, and the same one
// again when they retry): the lease granted at once, or the queue ticket. Kept in the state file
// and in etcd, so that a retry whose first reply a restart or a failover lost gets that answer,
// not a second lease.
struct RememberedRequest {
  std::string lease;   // granted at once
  int64_t ticket = 0;  // else queued under this ticket
  TimePoint at;
  bool operator==(const RememberedRequest&) const = default;
};

struct SubmitResult {
  std::optional<Lease> lease;  // granted at once
  int64_t ticket = 0;          // else: queued under this ticket
  int position = 0;
};

struct PollResult {
  QueueEntry::Status status = QueueEntry::Status::kWaiting;
  int position = 0;
  std::optional<Lease> lease;
  std::string reason;  // kFailed: why
  // kWaiting: why it cannot start now (waitReason) and when it is planned to (plannedStart, where
  // the start is a time: not one that waits for leases without an end).
  std::string wait_reason;
  std::optional<TimePoint> planned_start;
};

struct NodeView;  // placement.hpp
struct Spread;    // placement.hpp
class Timeline;   // the scheduler's plan of when GPUs are busy (src/scheduler/timeline.hpp)

class PoolState {
 public:
  // --- inventory
  // Adds a node, or replaces the topology, switch, labels and fabric of a known one (its state,
  // failed GPUs and leases stay; a MIG instance a lease holds keeps it under its number in the new
  // topology, found by its UUID). Throws kBadInput for a node without a name, and for a topology
  // without a GPU or MIG instance a lease holds, unless `endLostInstances` (an agent's report: the
  // instance is gone): the leases holding such instances then end.
  // `topologyDoc`: topologyDoc(*node.topology) where the caller has it (empty: worked out here).
  void registerNode(const topo::ClusterNode& node, bool endLostInstances = false,
                    std::string topologyDoc = {});
  void setNodeState(const std::string& node, NodeState state);  // throws kNotFound
  // An administrator's failure of a GPU; throws kNotFound / kBadInput.
  void failGpu(const std::string& node, size_t index, TimePoint now);

  // --- leases. `owner`/`admin` come from the caller's identity.
  // Validates the request (kBadInput), fails at once when the pool could never satisfy it
  // (PoolError kNeverFits), grants it when it fits now without delaying anyone queued, else
  // queues it (unless `queue` is false: then the ticket is 0 and nothing changes).
  SubmitResult submit(LeaseRequest request, TimePoint now, bool queue = true);
  // Status of a queued request; refreshes its heartbeat. A granted or failed entry is removed
  // once polled. Throws PoolError kGone for an unknown ticket.
  PollResult poll(int64_t ticket, TimePoint now);
  // Withdraws a queued request; a lease granted to it meanwhile is released. Idempotent.
  void cancel(int64_t ticket, TimePoint now);
  Lease renew(const std::string& id, const std::string& owner, bool admin, TimePoint now);
  // Idempotent: false when there was no such lease. PoolError kForbidden for another owner's.
  bool release(const std::string& id, const std::string& owner, bool admin, TimePoint now);
  // The holder of an elastic lease under a shrink notice has left its shrink_gpus: they go back
  // to the pool now (PoolClient::shrink). The lease as it is then; errors as renew's.
  Lease shrink(const std::string& id, const std::string& owner, bool admin, TimePoint now);
  // Expires leases, drops queue entries whose client went quiet for `stale_after`, and starts
  // what can start: a scheduling pass where anything changed since the last one (a lease ended,
  // a node or GPU changed state, the quotas), and at least every kReplanEvery for what time alone
  // changes (a lease past the minimum runtime becomes a possible victim).
  void tick(TimePoint now, std::chrono::seconds stale_after = std::chrono::seconds(30));
  static constexpr std::chrono::seconds kReplanEvery{5};
  // A whole scheduling pass now, whether or not anything changed (pool_bench measures it).
  void replan(TimePoint now) { schedule(now); }
  // Tests: plan every request by walking the pool, as requests with a maximum duration are, rather
  // than through the timeline's index of when GPUs are free for good, and every enqueue by a whole
  // pass rather than against the last pass's plan (each pair must agree).
  void setSlowScheduling(bool slow) { slow_scheduling_ = slow; }
  // Whole scheduling passes since the state was made. An enqueue that sorts behind every waiting
  // request runs none where the last pass's plan still holds: a flood of requests that cannot
  // start costs each a placement, not a pass over the queue.
  uint64_t schedulingPasses() const { return passes_; }

  // --- views
  const std::map<std::string, PoolNode>& nodeMap() const { return nodes_; }
  const std::map<std::string, Lease>& leaseMap() const { return leases_; }
  const std::map<int64_t, QueueEntry>& queueMap() const { return queue_; }
  // How many entries of the queue are `owner`'s (waiting, or granted or failed and not yet
  // collected by a poll): what poold's --max-queued-per-owner limits. Kept as the queue changes
  // (and rebuilt by loadQueueEntry after a restart): a lookup, not a walk over the queue.
  size_t queuedBy(const std::string& owner) const;
  std::vector<const PoolNode*> nodesInOrder() const;
  GpuState gpuState(const std::string& node, size_t index) const;
  const std::string* holder(const std::string& node, size_t index) const;  // lease id or null
  // Per GPU of `node` (one of this state's), its state and the lease holding it (null: none), as
  // gpuState and holder say, with the node's occupancy found once rather than by name per GPU (the
  // status and the dashboard ask it of every GPU of the pool).
  struct GpuUse {
    GpuState state = GpuState::kFree;
    const std::string* lease = nullptr;
  };
  void gpusOf(const PoolNode& node, std::vector<GpuUse>& out) const;
  PoolStatus status() const;
  std::vector<NodeInfo> nodeInfos() const;
  // What is wrong with the state's own bookkeeping, in words ("" when nothing): every lease's GPUs
  // held by it and by nothing else, the placement cache's counts. For tests and diagnostics.
  std::string checkInvariants() const;
  std::vector<Lease> leaseList() const;      // by creation time
  std::vector<QueueInfo> queueList() const;  // in queue order
  // When the last scheduling pass planned a waiting request to start (nullopt: it fits nowhere;
  // kNever: once leases without an end have ended).
  std::optional<TimePoint> plannedStart(int64_t ticket) const;
  // Why a waiting request cannot start now, in words: the GPUs it needs against the free ones that
  // match it, the shape where that is what fails, and the requests ahead of it:
  //   "needs 120 GPUs, 108 free; behind ticket 3"
  //   "needs 16 GPUs as 8 per node, 20 free that match, not in that shape"
  //   "needs 2 GPUs, 6 free, held for the requests ahead (with a maximum duration it could start
  //    in a gap); behind ticket 3"
  // Empty for a ticket that is not waiting. Cost: one pass over the pool's GPUs and one placement.
  std::string waitReason(int64_t ticket) const;
  uint64_t leasesGranted() const { return leases_granted_; }
  uint64_t leasesReclaimed() const { return leases_reclaimed_; }  // idle leases ended since start

  // --- quotas (quotas.hpp): what is borrowed may be preempted, limits hold requests back
  void setQuotas(Quotas quotas) {
    quotas_ = std::move(quotas);
    replan_ = true;
  }
  const Quotas& quotas() const { return quotas_; }
  std::vector<QuotaUse> quotaUse() const;  // in the quotas' order

  // --- reservations (reservations.hpp): nodes kept for a window, planned around by everyone else
  // Adds one, checked whole: a name not taken, nodes the pool has, a window that has not ended and
  // lasts at most kMaxReservationLength, no other reservation of one of its nodes overlapping it.
  // Throws kBadInput naming what is wrong.
  void reserve(Reservation r, TimePoint now);
  // Removes one (its leases keep their end); throws kNotFound for a name it does not know.
  void unreserve(const std::string& name);
  const std::map<std::string, Reservation, std::less<>>& reservations() const { return reservations_; }
  void loadReservation(Reservation r);

  // --- the account tree and fair share (accounts.hpp, fairshare.hpp): with accounts, requests are
  // charged to one and the queue is ordered by the multi-factor priority; without, by priority and
  // arrival
  void setAccounts(Accounts accounts);
  const Accounts& accounts() const { return accounts_; }
  // The fair-share factors as of `now` (`poolctl fairshare`); empty without accounts.
  FairShare fairShare(TimePoint now) const;
  FairShareReport fairShareReport(TimePoint now) const;

  // --- preemption
  void setPreemptOptions(const PreemptOptions& options) {
    preempt_ = options;
    replan_ = true;
  }
  const PreemptOptions& preemptOptions() const { return preempt_; }
  uint64_t leasesPreempted() const { return leases_preempted_; }  // leases chosen as victims since start
  uint64_t leasesResized() const { return leases_resized_; }      // elastic growths and shrinks since start

  // --- the live pool (pool/core/src/live.cpp)
  void setLiveOptions(const LiveOptions& options) { live_ = options; }
  const LiveOptions& liveOptions() const { return live_; }
  // A node registered by its agent: registerNode, the node known to have an agent, and what its
  // GPUs let start started.
  void registerAgentNode(const NodeRegistration& registration, TimePoint now);
  // Takes a heartbeat: the node's samples, GPUs failed by what they report, foreign processes, the
  // leases' last activity. Throws kNotFound for an unknown node; replies register_again where
  // the node's topology is not the one the agent names. Where it frees GPUs (a node back, a foreign
  // process gone), queued requests are planned at once, or with `planNow` false at the next tick
  // (poold's network thread takes heartbeats: a planning pass over the pool is not its work).
  HeartbeatReply heartbeat(const Heartbeat& heartbeat, TimePoint now, bool planNow = true);
  // When a lease's GPUs were last busy (its creation where never); nullopt for an unknown lease.
  std::optional<TimePoint> lastBusy(const std::string& lease) const;
  // Whether a lease is idle now (every GPU reports utilisation under the threshold for idle_after).
  bool idle(const Lease& lease, TimePoint now) const;
  // An administrator asks for GPU `gpu` of `node` to be split into GPU instances of `profiles` (with
  // a compute instance each): from now on the GPU and its instances take no new lease; once none is
  // held, the node's agent is asked (HeartbeatReply::mig_layouts) and says how it went in a
  // heartbeat: done, the request is gone and the new instances come with the agent's registration;
  // failed, the GPU is failed with the reason. Throws kNotFound (node), kBadInput (GPU index, a node
  // without an agent, a GPU that has no MIG, 0 or more than kMaxMigLayoutProfiles profiles).
  void setMigLayout(const std::string& node, size_t gpu, std::vector<std::string> profiles);
  // An administrator accepts what a node's GPUs report: clears their failures (manual ones too).
  void clearGpuFailures(const std::string& node);
  int64_t nextTicket() const { return next_ticket_; }

  // --- acquire request ids (RememberedRequest): remembered for kRequestMemory, the newest
  // kMaxRememberedRequests at most.
  static constexpr std::chrono::seconds kRequestMemory{3600};
  static constexpr size_t kMaxRememberedRequests = 10000;
  const RememberedRequest* rememberedRequest(const std::string& id) const;
  void rememberRequest(const std::string& id, RememberedRequest request);
  const std::map<std::string, RememberedRequest>& requestMap() const { return requests_; }

  // --- nodes that join (membership.hpp): its rules, each change marked dirty.
  const Membership& membership() const { return members_; }
  const JoinToken& addJoinToken(const std::string& hash, const std::string& created_by, TimePoint now,
                                std::chrono::seconds life) {
    return members_.addToken(hash, created_by, now, life, dirty_);
  }
  bool joinNode(const std::string& tokenHash, const std::string& node, const std::string& credentialHash,
                TimePoint now) {
    return members_.join(tokenHash, node, credentialHash, now, dirty_);
  }
  const NodeCredential& revokeNode(const std::string& node, const std::string& by, TimePoint now) {
    return members_.revoke(node, by, now, dirty_);
  }

  // --- jobs the pool keeps (job_book.hpp; the rules in src/job_rules.cpp). A pending job whose
  // dependencies and array limit let it is queued by the next tick under a ticket that never goes
  // stale; once granted it runs: the agent of its lease's first node starts its launcher (jobWork)
  // and reports how it ended (jobEnded), which ends the job and its lease.
  void setJobOptions(const JobOptions& options) { job_options_ = options; }
  const JobOptions& jobOptions() const { return job_options_; }
  const JobBook& jobs() const { return jobs_; }
  // Stores a submitted job, one record per task of `array`, PENDING; the new ids. Throws as
  // JobBook::add, and as validateRequest for its lease request.
  std::vector<std::string> submitJob(JobSpec spec, const std::optional<JobArray>& array, TimePoint now);
  // Cancels the jobs `id` names (an array's number: every task) that have not ended: a pending one
  // at once, a running one by asking its agent to send `signal` to its launcher (it ends CANCELLED
  // when the agent reports its end). Throws kNotFound for an id the pool does not know, PoolError
  // kForbidden for another owner's job unless `admin`. The ids it cancelled or signalled.
  std::vector<std::string> cancelJob(const std::string& id, const std::string& by, bool admin, int signal,
                                     TimePoint now);
  // The running jobs whose launcher the agent of `node` is to start or signal.
  std::vector<const JobRecord*> jobWork(const std::string& node) const;
  // What the agent of `node` says of its job `id` (each throws kNotFound for a job that is not that
  // node's to run): its launcher holds a new credential (the SHA-256 `hash`; the last one no longer
  // counts), has started, has been sent the cancel's signal, has ended (ending the job, and its
  // lease where the launcher left it: for a report that comes again, nothing).
  void setJobCredential(const std::string& node, const std::string& id, const std::string& hash);
  void jobStarted(const std::string& node, const std::string& id, TimePoint now);
  void jobSignalled(const std::string& node, const std::string& id);
  void jobEnded(const std::string& node, const std::string& id, const JobExit& exit, TimePoint now);
  std::vector<JobEvent> takeJobEvents() { return jobs_.takeEvents(); }

  // --- the usage ledger (usage.hpp): rows opened, resized and closed with the leases, fed by the
  // heartbeats' samples, stored every UsageOptions::interval by accountUsage (poold's ticker).
  void setUsageOptions(const UsageOptions& options) {
    usage_options_ = options;
    usage_.setHalfLife(options.half_life);
  }
  const UsageOptions& usageOptions() const { return usage_options_; }
  const UsageLedger& usage() const { return usage_; }
  void accountUsage(TimePoint now);

  // --- persistence: stores load rows with these and write what takeDirty() names.
  void loadNode(PoolNode node);
  void loadLease(Lease lease);  // throws kInternal if a GPU is already held (never leased twice)
  void loadQueueEntry(QueueEntry entry);
  void loadCounters(uint64_t leases_granted, int64_t next_ticket);
  void loadRequest(const std::string& id, RememberedRequest request);
  void loadJoinToken(JoinToken token) { members_.loadToken(std::move(token)); }
  void loadCredential(NodeCredential credential) { members_.loadCredential(std::move(credential)); }
  void loadJob(JobRecord job) { jobs_.load(std::move(job)); }
  void loadNextJob(int64_t next) { jobs_.loadNextNumber(next); }
  void loadUsage(UsageRecord row) { usage_.load(std::move(row)); }
  void loadNextUsage(uint64_t next) { usage_.loadNextId(next); }
  // After the usage rows: the ledger's indexes built; rows of leases the state no longer has are
  // closed by the next accountUsage.
  void finishUsageLoad() {
    usage_.finishLoad();
    usage_unchecked_ = true;
  }
  Dirty takeDirty();
  void clear();

  // Queue waiting times of granted requests since the last call (for metrics).
  std::vector<double> takeWaitSeconds();
  // Leases granted, released and expired since the last call, in the order it happened.
  std::vector<LeaseEvent> takeLeaseEvents();
  std::vector<NodeEvent> takeNodeEvents();

 private:
  struct Occupancy {
    std::vector<std::string> holder;  // per unit: lease id, empty when free (or shared)
    // GPUs shared through MPS: per GPU index, the leases holding a share of it (holder empty).
    std::map<size_t, std::vector<std::string>> sharers;
    bool unheld(size_t i) const { return (i >= holder.size() || holder[i].empty()) && !sharers.count(i); }
  };
  // What the MPS shares of a GPU take of it (PoolState::shareRoom).
  struct ShareUse {
    int percent = 0;
    uint64_t memory = 0;
    int clients = 0;
    const std::string* owner = nullptr;  // of the shares (one owner per GPU); null: none
    TimePoint end = TimePoint::min();    // the latest end of their leases
  };
  ShareUse shareUse(const Occupancy& held, size_t gpu) const;
  // The nodes that could take one share of `request` per GPU (defined in src/node_views.hpp).
  template <class FreeGpu>
  std::vector<NodeView> shareViews(const LeaseRequest& request, FreeGpu freeGpu, bool everUsable,
                                   std::optional<TimePoint> endBy) const;
  // Adds or removes lease `id`'s share of GPU `gpu` of `node`.
  void addSharer(const std::string& node, size_t gpu, const std::string& id);
  void removeSharer(const std::string& node, size_t gpu, const std::string& id);
  void schedule(TimePoint now);
  // What the last scheduling pass planned (scheduler/schedule.cpp): its timeline of promises, victims and
  // quota book, kept so that an enqueue of a request that sorts behind every waiting one plans that request
  // alone against it instead of the whole queue again (a flood of requests that cannot start cost a pass over
  // the queue each). Dropped by every change it does not know of: plan_epoch_ (a GPU taken or given back, a
  // node added), replan_, time past its first lease end.
  struct PassPlan;
  struct KeptPlan {
    std::unique_ptr<PassPlan> plan;
    KeptPlan();
    ~KeptPlan();
    // A copy of the state has leases of its own: nothing the plan points at.
    KeptPlan(const KeptPlan&);
    KeptPlan& operator=(const KeptPlan&);
    KeptPlan(KeptPlan&&) noexcept;
    KeptPlan& operator=(KeptPlan&&) noexcept;
  };
  KeptPlan kept_plan_;
  uint64_t plan_epoch_ = 0;
  uint64_t passes_ = 0;
  size_t waiting_count_ = 0;  // entries of queue_ that wait
  // The kept plan, where `request` (enqueued now, ticket the newest) may be planned against it.
  PassPlan* keptPlanFor(const LeaseRequest& request, TimePoint now);
  std::vector<const QueueEntry*> waitingInOrder() const;
  // The multi-factor priority: the fair-share factors as of the last pass (refreshPriorities), so
  // that the queue's order holds from one pass to the next.
  struct Priorities {
    TimePoint at{};
    FairShare shares;
    int pool_gpus = 0;
  };
  void refreshPriorities(TimePoint now);
  // Sets the account a request is charged to (Accounts::accountFor), or refuses one where the pool
  // has no accounts file.
  void chargeAccount(LeaseRequest& request) const;
  // Reservations' rules (src/reservations.cpp): a request for one checked at submit; a request for
  // one placed on its free GPUs inside its window; others kept off reserved nodes they would run
  // into the window of (now: dropReserved; on the timeline: holdReservations); windows ended and
  // maintenance windows begun (tickReservations).
  void checkReservation(const LeaseRequest& request, TimePoint now) const;
  void scheduleReserved(const QueueEntry& entry, PassPlan& pass, TimePoint now);
  void dropReserved(std::vector<NodeView>& views, const LeaseRequest& request, TimePoint now) const;
  void holdReservations(Timeline& timeline, TimePoint now) const;
  void tickReservations(TimePoint now);
  // nullopt where the request's owner and account have no factor in the snapshot (a user new to
  // the default account: the next pass counts it).
  std::optional<PriorityFactors> factorsOf(const LeaseRequest& request, TimePoint enqueued) const;
  // What orders a waiting request where the pool has accounts: its factors' score, else (its owner
  // no longer in its account) its priority's part alone.
  double scoreOf(const QueueEntry& entry) const;
  Lease grant(const LeaseRequest& request, std::vector<GpuRef> gpus, TimePoint now);
  // A waiting request's lease, granted now: the entry marked granted, its wait kept for metrics.
  Lease grantQueued(const QueueEntry& entry, const std::vector<GpuRef>& gpus, TimePoint now);
  void dropLease(const std::string& id, TimePoint now, LeaseEvent::Kind end = LeaseEvent::Kind::kReleased,
                 std::string reason = {});
  bool everFits(const LeaseRequest& request) const;
  // --placement strict (docs/placement.md): the spread of the request's placement on the pool as if
  // no lease were held, which no placement of it may exceed; nullopt for best effort, or where it
  // could never fit. placeFor: place() held to it.
  std::optional<Spread> strictLimit(const LeaseRequest& request) const;
  std::optional<std::vector<GpuRef>> placeFor(std::span<const NodeView> views,
                                              const LeaseRequest& request) const;
  // The leases that may be preempted now (preemptible, not yet under notice, past the minimum
  // runtime), the smallest first, then the youngest.
  // What each quota's owners hold, and which of their leases are borrowed (the youngest, beyond
  // the guarantee). Empty without quotas.
  struct QuotaBook {
    std::map<const Quota*, int> used;
    std::set<const Lease*> borrowed;
  };
  QuotaBook quotaBook() const;
  std::vector<const Lease*> victimCandidates(TimePoint now, const QuotaBook& book) const;
  // Chooses and notifies the victims that let `entry` start now (whole leases out of
  // `candidates`: borrowed ones first where its owner is within its guarantee, else of lower
  // priority; the fewest GPUs, then the youngest); false where none would make room.
  // `elastic`: the elastic leases, whose GPUs beyond their minimum are taken (a shrink) before any
  // whole lease.
  bool preemptFor(const QueueEntry& entry, Timeline& timeline, const std::vector<const Lease*>& candidates,
                  const std::vector<const Lease*>& elastic, const QuotaBook& book, TimePoint now);
  // The queue's part of a scheduling pass; `waiting`: the highest priority of a request it left
  // waiting (held back by a quota's limit aside); `grantedElastic`: the elastic leases it granted.
  // `plan`: the pass's (its timeline made once some request waits), or the kept one for an enqueue.
  void scheduleQueue(const std::vector<const QueueEntry*>& order, PassPlan& plan, std::optional<int>& waiting,
                     std::vector<std::string>& grantedElastic, TimePoint now);
  // scheduleQueue's steps (scheduler/schedule.cpp): an MPS share, started now or left waiting; the
  // pass's timeline, victims and elastic leases, made once some request has to wait; a request
  // planned on the timeline (started now, promised GPUs later, or preempting for it); a request the
  // pool can no longer satisfy; a grant counted in the quota book.
  void scheduleShare(const QueueEntry& entry, PassPlan& plan, std::optional<int>& waiting, TimePoint now);
  void startTimeline(PassPlan& plan, TimePoint now);
  void scheduleOnTimeline(const QueueEntry& entry, PassPlan& plan, std::optional<int>& waiting,
                          TimePoint now);
  void failQueued(const QueueEntry& entry);
  void countGranted(const Lease& lease, QuotaBook& book) const;
  class EarliestStart;  // where and when a request fits on the timeline (scheduler/schedule.cpp)
  class Preemption;     // preemptFor's choice of victims for one request (scheduler/preemption.cpp)
  // Elastic leases (elastic.cpp): each grown towards its maximum where GPUs are free, its resize
  // interval has passed and nobody of equal or higher priority waits (`waiting`, above).
  void growElastic(TimePoint now, std::optional<int> waiting, QuotaBook& book);
  // Grows `lease` by what is free now in its shape, within its owner's quota limit (`book` counts
  // the lease and is kept up to date); `resize`: a change to a running job (counted, and its
  // interval restarts), not the grant's own. Whether it grew.
  bool growNow(Lease& lease, QuotaBook& book, TimePoint now, bool resize);
  // The GPUs `lease` could grow by now, in the shape it asked for, at most `most` of them.
  std::vector<GpuRef> growthFor(const Lease& lease, int most) const;
  // Gives the GPUs under a shrink notice back (the holder's shrink, or the notice's end).
  void applyShrink(Lease& lease, TimePoint now, const std::string& why);
  // Sorts `gpus` by pool order and index.
  void poolOrder(std::vector<GpuRef>& gpus) const;
  // Why `request` may not start now for its quota's limit ("" when it may).
  std::string overLimit(const LeaseRequest& request, const QuotaBook& book) const;
  Occupancy& occupancy(const std::string& node);

  // The nodes in pool order, each with its occupancy, and where each node's name is in that order:
  // rebuilt only when a node is added or the pool cleared. Every placement decision walks them
  // (sorting the nodes and looking each one's occupancy up by name on every acquire cost a
  // 100,000-GPU pool milliseconds under the state lock).
  struct Slot {
    const PoolNode* node;
    const Occupancy* held;
  };
  struct SlotCache {
    std::vector<Slot> slots;
    std::unordered_map<std::string_view, size_t> index;  // node name: its place in `slots`
    // Per slot, how many GPUs no lease holds, kept up to date by grant and dropLease: placement
    // skips a full node without touching it (most nodes of a busy pool; visiting each cost a
    // 100,000-GPU pool a cache miss or three per node on every acquire).
    std::vector<uint32_t> unheld;
    bool stale = true;
    SlotCache() = default;
    // A copy of the state has maps of its own: its cache is rebuilt on first use.
    SlotCache(const SlotCache&) {}
    SlotCache& operator=(const SlotCache&) {
      *this = SlotCache();
      return *this;
    }
    SlotCache& operator=(SlotCache&& other) noexcept {
      slots = std::move(other.slots);
      index = std::move(other.index);
      unheld = std::move(other.unheld);
      stale = true;
      return *this;
    }
  };
  const std::vector<Slot>& slots() const;
  void slotsChanged() {
    slot_cache_.stale = true;
    ++plan_epoch_;
  }
  void heldChanged(const std::string& node, bool held);  // one GPU of `node` taken or given back
  static uint32_t freeCount(const Occupancy& o);         // GPUs no lease holds
  mutable SlotCache slot_cache_;

  std::map<std::string, PoolNode> nodes_;
  std::map<std::string, Occupancy> occupancy_;
  std::map<std::string, Lease> leases_;
  std::set<std::string> elastic_leases_;  // the ids of leases_ that are elastic (growElastic's)
  std::map<int64_t, QueueEntry> queue_;
  std::unordered_map<std::string, size_t> queued_by_owner_;  // queuedBy(): entries of queue_ per owner
  // Every change to queue_'s entries goes through these two, which keep queued_by_owner_.
  void enqueue(QueueEntry entry);
  void dequeue(std::map<int64_t, QueueEntry>::iterator it);
  std::map<std::string, RememberedRequest> requests_;
  std::set<std::pair<TimePoint, std::string>> requests_by_time_;  // the same, oldest first
  void forgetRequests(TimePoint now);  // those past kRequestMemory, and the oldest beyond the most
  uint64_t leases_granted_ = 0;
  int64_t next_ticket_ = 1;
  int64_t next_order_ = 0;
  TopologyBook topologies_;  // the nodes' topologies, one copy per kind of node
  Dirty dirty_;
  Membership members_;
  JobBook jobs_;
  JobOptions job_options_;
  UsageLedger usage_;
  UsageOptions usage_options_;
  bool usage_unchecked_ = false;  // loaded, and its running rows not yet matched to the leases
  // The ledger's side of a lease granted or resized (its rows hold what it holds now), and of a
  // GPU's sample (what the GPU did, for the leases holding it); live.cpp.
  void accountLease(const Lease& lease, TimePoint now);
  void accountSample(const PoolNode& node, const Occupancy& held, const topo::GpuSample& before,
                     const topo::GpuSample& sample, TimePoint now);
  // The tick's part for jobs (job_rules.cpp): before its pass, pending jobs queued where they may
  // start, their entries kept from going stale, running ones whose lease ended without them; after
  // it, grants and failures of queued jobs taken into their records.
  void advanceJobs(TimePoint now);
  void collectJobGrants(TimePoint now);
  void advancePendingJob(const JobBook::Key& key, TimePoint now);
  void advanceRunningJob(const JobBook::Key& key, TimePoint now);
  // The job `id` as the agent of `node` may speak of it (throws kNotFound otherwise).
  const JobRecord& nodesJob(const std::string& node, const std::string& id) const;
  std::vector<double> wait_seconds_;
  std::vector<LeaseEvent> lease_events_;
  std::vector<NodeEvent> node_events_;
  std::map<int64_t, TimePoint> planned_;
  bool replan_ = true;  // something changed that a scheduling pass should see
  bool slow_scheduling_ = false;
  TimePoint last_pass_{};  // when the last one ran

  // The live pool.
  // Throws kBadInput for a heartbeat that names a GPU the node does not have (a sample, an MPS
  // error), or an MPS error for a GPU poold never asked a daemon for (without shares).
  void checkHeartbeat(const PoolNode& node, const Heartbeat& hb) const;
  // A heartbeat's parts (live.cpp): the agent's MIG layouts and MPS daemons, and one GPU's sample;
  // each says whether GPUs may have been freed for queued requests.
  bool takeAgentResults(PoolNode& node, const Heartbeat& hb, TimePoint now);
  bool takeHealth(PoolNode& node, const Heartbeat& hb);
  bool takeSample(PoolNode& node, const Occupancy& held, const Heartbeat& hb, const topo::GpuSample& sample,
                  TimePoint now);
  void updateLiveness(TimePoint now);
  void reclaimIdle(TimePoint now);
  Lease withLiveView(const Lease& lease, TimePoint now) const;  // at_risk_nodes, idle_since, reclaim_at
  PreemptOptions preempt_;
  Quotas quotas_;
  std::map<std::string, Reservation, std::less<>> reservations_;
  // Per node, the names of the reservations that keep it: dropReserved asks it of each free node.
  std::unordered_map<std::string, std::vector<std::string>> reserved_on_;
  // Each NVLink domain's nodes: a registration that would make a domain too large, or put its nodes
  // under two blocks or spines, is refused (checkDomain).
  std::map<std::string, std::set<std::string>> domain_nodes_;
  void indexDomain(const PoolNode& node, bool add);
  void checkDomain(const topo::ClusterNode& cn) const;
  void indexReservation(const Reservation& r, bool add);
  Accounts accounts_;
  Priorities priorities_;
  uint64_t leases_preempted_ = 0;
  uint64_t leases_resized_ = 0;
  LiveOptions live_;
  uint64_t leases_reclaimed_ = 0;
  TimePoint view_time_{};  // the latest `now` a tick or heartbeat brought (leaseList's idle times)
  std::map<std::string, TimePoint> last_busy_;   // per lease
  std::map<std::string, TimePoint> reclaim_at_;  // per idle lease warned of its reclaim
  // Lease id: how the pool ended it ("reclaimed: its GPUs were idle ...", "preempted for ..."),
  // for its holder's next renewal. At most 10,000 kept (beyond, the holder hears only "gone").
  std::map<std::string, std::string> ended_by_pool_;
  void endedByPool(const std::string& id, std::string why);
};

// What validateRequest judges: kWhole, the request a pool is asked (at submit); kFieldsAlone, each
// field of a client's request body alone (poold's reader: the owner comes later, from its token, and
// the fields together are judged at submit).
enum class RequestCheck { kWhole, kFieldsAlone };
// The one check of a request's numbers and names: throws kBadInput for a request that cannot be
// valid, naming the field as the API names it ("field 'ttl_s': 0 is out of range (1 to 86400)"),
// its value and what it may be. Every number against its range in limits.hpp (requestFieldRange);
// the MIG profile's text; with kFieldsAlone (a client's body) also the TTL's most (a day), the
// owner, job name, GPU model and labels as topo/names.hpp's rules take them; with kWhole the
// owner given and the fields together (gpus a multiple of gpus_per_node, MIG and MPS shapes,
// elastic bounds). A request made in its pool's own process (an embedded pool's caller checked
// its options) may hold a longer lease, and a text from elsewhere that the views replace.
void validateRequest(const LeaseRequest& request, RequestCheck check = RequestCheck::kWhole);

}  // namespace poolrun::pool
