#include "ha/etcd_replica.hpp"

#include <iostream>

#include <nlohmann/json.hpp>

#include "poolrun/pool/etcd_store.hpp"
#include "poolrun/pool/http_failures.hpp"

namespace poolrun::pool {

HttpReply standbyReply(const HttpRequest& req, const std::string& leader, const std::string& etcdProblem) {
  using nlohmann::json;
  if (!etcdProblem.empty())
    return refusal("etcd_unavailable",
                   "this poold replica is a standby and no replica can lead: " + etcdProblem +
                       "; the pool accepts no change until etcd answers again");
  if (leader.empty())
    return refusal("no_leader",
                   "this poold replica is a standby and the replicas have no leader yet (one takes over "
                   "within the etcd lease's TTL); retry in a second");
  // not_leader (503), with where the leader is; a redirect there (307) but for /healthz, whose
  // prober asks whether this replica serves.
  const bool health = req.segments == std::vector<std::string>{"healthz"};
  HttpReply r{health ? httpFailureNamed("not_leader").status : 307,
              json{{"error", "this poold replica is a standby; the leader is " + leader},
                   {"reason", "not_leader"},
                   {"leader", leader}}
                  .dump(-1, ' ', false, json::error_handler_t::replace)};
  r.headers.push_back({"Location", leader + req.target});
  return r;
}

EtcdReplica::EtcdReplica(const PooldOptions& options) : options_(options) {
  if (options_.advertise.empty())
    throw badInput("--store " + options_.store +
                   " needs --advertise http://HOST:PORT (the URL clients reach this "
                   "replica at, given to them by the other replicas)");
  client_ = std::make_shared<EtcdClient>(parseEtcdUri(options_.store), std::chrono::milliseconds(5000),
                                         options_.etcd_security);
  // /metrics and /v1/replicas ask every member for its status: on connections of their own, so
  // that a member that does not answer holds up a scrape, never the campaign or a commit.
  metrics_etcd_ = std::make_shared<EtcdClient>(parseEtcdUri(options_.store), std::chrono::milliseconds(5000),
                                               options_.etcd_security);
  leadership_ =
      std::make_unique<EtcdLeadership>(client_, options_.etcd_prefix, options_.advertise, options_.etcd_ttl);
}

EtcdReplica::~EtcdReplica() {
  stopStandby();
}

void EtcdReplica::stopStandby() {
  if (!standby_) return;
  standby_->stop();
  standby_thread_.join();
  standby_.reset();
}

// While it campaigns, the replica answers on its address with redirects to the leader, until the
// pool's server is about to take the address over.
void EtcdReplica::startStandby(ServerOptions& opt) {
  HttpServerOptions h;
  h.host = opt.host;
  h.port = opt.port;
  h.workers = 4;
  h.max_connections = std::min(opt.max_connections, 1024);
  h.idle_timeout = std::chrono::milliseconds(5000);
  h.tls_cert = opt.tls_cert_file;
  h.tls_key = opt.tls_key_file;
  h.tls_client_ca = opt.tls_client_ca_file;
  // A standby answers /metrics itself (its own series, poolrun_leader 0), with the leader's access
  // rules: Prometheus scrapes every replica, and a redirect stored the leader's series under each.
  auto warn = [](const std::string& w) { std::cerr << "poold: warning: " << w << "\n"; };
  h.warn = warn;
  tokens_ = std::make_unique<TokenStore>(opt.token_file, warn);
  std::vector<AddressRange> allowed;
  for (const std::string& list : opt.metrics_allow)
    for (AddressRange& r : parseAddressRanges(list, "--metrics-allow")) allowed.push_back(r);
  access_ = std::make_unique<MetricsAccess>(opt.metrics_token_file, std::move(allowed),
                                            metricsHostNames(opt.host, opt.metrics_hosts), warn);
  standby_ = std::make_unique<HttpServer>(h, [this](const HttpRequest& req) {
    if (req.segments == std::vector<std::string>{"metrics"})
      return standbyMetricsReply(req, *access_, *tokens_, [this] {
        return replicaSeries(false, metrics_etcd_->status()) + process_metrics_.renderProcess();
      });
    std::lock_guard<std::mutex> lock(leader_mu_);
    return standbyReply(req, leader_now_, etcd_problem_);
  });
  opt.port = standby_->port();  // the leader serves where the standby did
  std::cout << "poold: standby, answering with redirects to the leader on "
            << (opt.tls_cert_file.empty() ? "http://" : "https://") << opt.host << ":" << opt.port
            << std::endl;
  standby_thread_ = std::thread([this] { standby_->run(); });
}

bool EtcdReplica::lead(ServerOptions& opt) {
  startStandby(opt);
  const std::string& advertise = options_.advertise;
  std::optional<EtcdFence> fence = leadership_->campaign(
      [&](const std::string& leader) {
        {
          std::lock_guard<std::mutex> lock(leader_mu_);
          leader_now_ = leader == advertise ? "" : leader;  // until the leader serves here
          etcd_problem_.clear();
        }
        if (leader == advertise)
          std::cerr << "poold: leading the pool in etcd " << options_.store << " (prefix "
                    << options_.etcd_prefix << ")\n";
        else
          std::cerr << "poold: standby: " << (leader.empty() ? "no leader yet" : "the leader is " + leader)
                    << "\n";
      },
      [&](const std::string& why) {
        {
          std::lock_guard<std::mutex> lock(leader_mu_);
          etcd_problem_ = why;
        }
        std::cerr << "poold: standby: " << why << "\n";
      },
      [](const std::string& why) {
        std::cerr << "poold: lost the leadership: " << why
                  << "; exiting so that no change is acknowledged by two leaders\n";
        std::_Exit(75);
      });
  if (!fence) return false;
  serveAsLeader(opt, *fence);
  return true;
}

// The state fenced on the leadership, answers only while it lasts, the replicas' view and series.
void EtcdReplica::serveAsLeader(ServerOptions& opt, const EtcdFence& fence) {
  opt.open_store = [client = client_, prefix = options_.etcd_prefix, fence, ops = options_.etcd_max_txn_ops] {
    return std::make_unique<EtcdStore>(client, prefix, fence, ops);
  };
  opt.serving = [l = leadership_.get()] { return l->leading(); };
  opt.replicas = [etcd = metrics_etcd_, l = leadership_.get(), advertise = options_.advertise,
                  store = options_.store, prefix = options_.etcd_prefix] {
    nlohmann::json out = {{"store", store + " (prefix " + prefix + ")"},
                          {"replicas", nlohmann::json::array()},
                          {"etcd", nlohmann::json::array()}};
    try {
      for (const std::string& url : l->replicas())
        out["replicas"].push_back({{"url", url}, {"leader", url == advertise}});
    } catch (const Error&) {  // etcd's members below say why
    }
    for (const EtcdMemberStatus& m : etcd->status())
      out["etcd"].push_back({{"endpoint", m.endpoint},
                             {"reachable", m.reachable},
                             {"leader", m.reachable && m.member_id == m.leader_id},
                             {"version", m.version},
                             {"error", m.error}});
    return out.dump();
  };
  int64_t elections = 0;
  try {
    elections = leadership_->countElection(fence);
  } catch (const Error& e) {
    std::cerr << "poold: warning: " << e.what() << "\n";
  }
  const auto since = std::chrono::system_clock::now();
  opt.more_metrics = [elections, since, etcd = metrics_etcd_] {
    const double t = std::chrono::duration<double>(since.time_since_epoch()).count();
    return replicaSeries(true, etcd->status()) +
           "# HELP poolrun_leader_since_seconds When this replica took the lead (Unix time).\n"
           "# TYPE poolrun_leader_since_seconds gauge\npoolrun_leader_since_seconds " +
           std::to_string(t) +
           "\n# HELP poolrun_leader_elections_total Times a poold replica took the lead of this pool "
           "(its first start, then every failover or restart).\n"
           "# TYPE poolrun_leader_elections_total counter\npoolrun_leader_elections_total " +
           std::to_string(elections) + "\n";
  };
}

}  // namespace poolrun::pool
