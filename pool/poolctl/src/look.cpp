// poolctl's commands that look at the pool: status, nodes, leases, queue, quota and top.

#include <iomanip>
#include <optional>

#include "poolctl.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/poolctl_top.hpp"
#include "poolrun/pool/queue_wait.hpp"
#include "view_text.hpp"

namespace poolrun::pool::ctl {

using nlohmann::json;

namespace {

using view::orDash;

// The columns squeue users look for: what waits, one per line (leases: leaseTable).
void printQueueTable(const std::vector<QueueInfo>& queue, TimePoint now) {
  std::cout << std::left << std::setw(5) << "POS" << std::setw(8) << "TICKET" << std::setw(16) << "JOB"
            << std::setw(12) << "OWNER" << std::setw(6) << "GPUS" << std::setw(6) << "PRIO" << std::setw(11)
            << "WAITED" << std::setw(11) << "START"
            << "REASON\n";
  for (const QueueInfo& q : queue)
    std::cout << std::setw(5) << q.position << std::setw(8) << q.ticket << std::setw(16) << orDash(q.job_name)
              << std::setw(12) << q.owner << std::setw(6) << q.gpus << std::setw(6) << q.priority
              << std::setw(11)
              << formatElapsed(std::chrono::duration_cast<std::chrono::seconds>(now - q.enqueued))
              << std::setw(11) << (q.planned_start ? formatLocalTime(*q.planned_start, now) : "-")
              << orDash(q.reason) << "\n";
}

void printQuotaTable(const std::vector<QuotaUse>& quotas) {
  std::cout << std::left << std::setw(24) << "QUOTA" << std::setw(24) << "MEMBERS" << std::setw(12)
            << "GUARANTEED" << std::setw(7) << "LIMIT" << std::setw(6) << "USED" << std::setw(10)
            << "BORROWED"
            << "WAITING\n";
  for (const QuotaUse& q : quotas) {
    std::string members;
    for (const std::string& m : q.quota.members) members += (members.empty() ? "" : ",") + m;
    std::string name =
        toString(q.quota.kind) + (q.quota.kind == Quota::Kind::kDefault ? "" : " " + q.quota.name);
    std::cout << std::setw(24) << name << std::setw(24) << orDash(members) << std::setw(12)
              << q.quota.guaranteed << std::setw(7) << (q.quota.limit ? std::to_string(*q.quota.limit) : "-")
              << std::setw(6) << q.used << std::setw(10) << q.borrowed << q.waiting << "\n";
  }
}

// `poolctl status` of a pool on etcd: a line per replica, then per etcd member.
//   replicas (etcd://e1:2379,... (prefix /poolrun)):
//     http://a:7450  leader
//     http://b:7450  standby
//   etcd:
//     e1:2379  answers, etcd's leader, 3.4.23
//     e2:2379  unreachable: cannot connect to e2:2379: Connection refused
std::string replicaLines(const PoolReplicas& r) {
  std::string out = "replicas (" + r.store + "):\n";
  for (const auto& replica : r.replicas)
    out += "  " + replica.url + "  " + (replica.leader ? "leader" : "standby") + "\n";
  int reachable = 0;
  for (const auto& m : r.etcd) reachable += m.reachable;
  out += "etcd: " + std::to_string(reachable) + " of " + std::to_string(r.etcd.size()) + " members answer" +
         (2 * reachable > static_cast<int>(r.etcd.size()) ? "" : " (no quorum: the pool accepts no change)") +
         "\n";
  for (const auto& m : r.etcd)
    out += "  " + m.endpoint + "  " +
           (m.reachable ? std::string("answers") + (m.leader ? ", etcd's leader" : "") + ", " + m.version
                        : "unreachable: " + m.error) +
           "\n";
  return out;
}

}  // namespace

int statusCommand(const Command& c) {
  PoolStatus s = c.pool().status();
  std::optional<PoolReplicas> replicas = c.pool().replicas();
  if (!c.json) {
    std::cout << statusLine(c.pool().describe(), s) << "\n";
    if (replicas) std::cout << replicaLines(*replicas);
    return 0;
  }
  json out = toJson(s);
  if (replicas) {
    out["replicas"] = json::array();
    for (const auto& r : replicas->replicas)
      out["replicas"].push_back({{"url", r.url}, {"leader", r.leader}});
    out["etcd"] = json::array();
    for (const auto& m : replicas->etcd)
      out["etcd"].push_back({{"endpoint", m.endpoint},
                             {"reachable", m.reachable},
                             {"leader", m.leader},
                             {"version", m.version},
                             {"error", m.error}});
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

int nodesCommand(const Command& c) {
  std::vector<NodeInfo> nodes = c.pool().nodes();
  if (c.json) {
    printJsonList(nodes);
  } else {
    for (const std::string& line : nodeTable(nodes, std::chrono::system_clock::now()))
      std::cout << line << "\n";
  }
  return 0;
}

int leasesCommand(const Command& c) {
  std::vector<Lease> leases = c.pool().leases();
  if (c.json) {
    printJsonList(leases);
  } else if (leases.empty()) {
    std::cout << "no leases\n";
  } else {
    for (const std::string& line : leaseTable(leases, std::chrono::system_clock::now()))
      std::cout << line << "\n";
  }
  return 0;
}

int queueCommand(const Command& c) {
  bool explain = false;
  for (const std::string& a : c.args) {
    if (a != "--explain")
      throw badInput("queue takes --explain (each factor of each request's priority), not '" +
                     common::printable(a) + "'");
    explain = true;
  }
  std::vector<QueueInfo> queue = c.pool().queue();
  if (c.json) {
    printJsonList(queue);  // with each request's factors where the pool has accounts
  } else if (queue.empty()) {
    std::cout << "queue empty\n";
  } else {
    printQueueTable(queue, std::chrono::system_clock::now());
    if (explain) printQueueFactors(queue, c.pool());
  }
  return 0;
}

int quotaCommand(const Command& c) {
  if (!c.args.empty()) throw badInput("quota takes no arguments");
  std::vector<QuotaUse> quotas = c.pool().quotas();
  if (c.json)
    printJsonList(quotas);
  else if (quotas.empty())
    std::cout << "no quotas (poold --quotas FILE sets them)\n";
  else
    printQuotaTable(quotas);
  return 0;
}

int topCommandOf(const Command& c) {
  if (c.json) throw badInput("top draws text; for JSON use status, nodes, leases and queue with --json");
  TopOptions options = parseTopOptions(c.args);
  return topCommand(options, c.pool());
}

}  // namespace poolrun::pool::ctl
