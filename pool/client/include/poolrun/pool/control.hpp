#pragma once

// What people and scripts see of a pool beyond leasing (poolctl): the inventory, the leases, the
// queue, and the administrator's commands. Every pool kind implements it.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/client.hpp"
#include "poolrun/pool/fairshare.hpp"
#include "poolrun/pool/jobs.hpp"
#include "poolrun/pool/quotas.hpp"
#include "poolrun/pool/reservations.hpp"
#include "poolrun/pool/types.hpp"
#include "poolrun/pool/usage.hpp"

namespace poolrun::pool {

// Nodes that join (docs/pool.md): a join token as poold made it (the token is shown this once), the
// tokens it keeps and the nodes that joined, times as RFC 3339 text.
struct JoinTokenMade {
  std::string token;
  std::string id;  // what `poolctl node-token list` names it by
  std::string expires;
};
struct JoinTokenInfo {
  std::string id, created_by, created, expires;
  std::string state;       // "unused", "used" or "expired"
  std::string node, used;  // used: by which node, when
};
struct JoinedNode {
  std::string node, joined, token;  // token: the id of the join token it used
  std::string revoked_by, revoked;  // empty while its credential is good
};
struct NodeTokens {
  std::vector<JoinTokenInfo> tokens;
  std::vector<JoinedNode> nodes;
};

struct JobSubmission;  // job_json.hpp

// Jobs the pool keeps (docs/jobs.md): a job as `poolctl jobs` and `poolctl job` show it: its record,
// and while it is queued, when the pool plans to start it and why it waits.
struct JobView {
  JobRecord record;
  std::optional<TimePoint> planned_start;
  std::string wait_reason;           // poolctl job's detail
  std::optional<UsageTotals> usage;  // what its leases used (the usage ledger), where it ran
};

// Which jobs a list holds (GET /v1/jobs's query): every field given must match. `ended`: the jobs
// that have ended for good alone (poolctl history), `ended_after`/`ended_before`: those that ended
// in [after, before).
struct JobQuery {
  std::string user, state, name;
  bool ended = false;
  std::optional<TimePoint> ended_after = {}, ended_before = {};
};

class PoolControl : public PoolClient {
 public:
  virtual PoolStatus status() = 0;
  virtual std::vector<NodeInfo> nodes() = 0;
  virtual std::vector<Lease> leases() = 0;
  virtual std::vector<QueueInfo> queue() = 0;
  virtual std::vector<QuotaUse> quotas() = 0;  // use against each quota (empty without quotas)
  // Administrator commands (PoolError kForbidden for a user).
  // Adds nodes, or updates the topology, switch and labels of known ones (keeping their state).
  virtual void registerNodes(const std::vector<topo::ClusterNode>& nodes) = 0;
  virtual void drain(const std::string& node) = 0;   // no new leases; existing ones run on
  virtual void resume(const std::string& node) = 0;  // back to up
  virtual void failGpu(const std::string& node, size_t index) = 0;
  // Asks for GPU `gpu` of `node` to be split into GPU instances of `profiles`, made by the node's
  // agent once no lease holds the GPU or its instances (PoolState::setMigLayout; docs/mig.md).
  virtual void setMigLayout(const std::string& node, size_t gpu,
                            const std::vector<std::string>& profiles) = 0;
  // The replicas and etcd's health; nullopt for a pool of one server (SQLite, the embedded pools).
  virtual std::optional<PoolReplicas> replicas() { return std::nullopt; }
  // Nodes that join (a poold's; other pools throw kBadInput): a one-time join token living `life`,
  // the tokens and joined nodes, and a node's credential revoked (its next request is refused).
  virtual JoinTokenMade createJoinToken(std::chrono::seconds life);
  virtual NodeTokens nodeTokens();
  virtual void revokeNode(const std::string& node);
  // Jobs the pool keeps (a poold's; other pools throw kBadInput saying so): submitted (the job's id
  // and its tasks' ids), listed (?user=&state=&name=, as the query's fields), looked at (an array's
  // number: every task), cancelled (the ids cancelled or signalled).
  struct SubmittedJob {
    std::string id;
    std::vector<std::string> tasks;
  };
  virtual SubmittedJob submitJob(const JobSubmission& job);
  virtual std::vector<JobView> jobs(const JobQuery& query);
  virtual std::vector<JobView> job(const std::string& id);
  virtual std::vector<std::string> cancelJob(const std::string& id, int signal);
  // The usage ledger's report (a poold's; other pools throw kBadInput saying so): one line per
  // owner, account, job, node or GPU model, the most allocated first.
  virtual std::vector<UsageTotals> usage(const UsageQuery& query);
  // The account tree's fair-share factors (a poold's and the embedded pools'; others throw
  // kBadInput): docs/fairshare.md.
  virtual FairShareReport fairShare();
  // Reservations (a poold's and the embedded pools'; others throw kBadInput): docs/reservations.md.
  // Making and removing one is an administrator's.
  struct ReservationRequest {
    std::string name;
    std::string nodes;                // a host list: n[01-04],n07
    std::optional<TimePoint> start;   // nullopt: now
    std::chrono::seconds duration{};  // its length
    std::vector<std::string> users, accounts;
  };
  virtual std::vector<Reservation> reservations();
  virtual Reservation reserve(const ReservationRequest& request);
  virtual void unreserve(const std::string& name);
};

}  // namespace poolrun::pool
