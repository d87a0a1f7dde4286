// poold: serves a GPU pool for many nodes over HTTP/JSON. See pool/README.md.

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/etcd_leader.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/etcd_store.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/server.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/names.hpp"
#include "poolrun/topo/options.hpp"
#include "poolrun/topo/version.hpp"
#include "poolrun/pool/server_metrics.hpp"
#include "poolrun/pool/tokens.hpp"

namespace {

using poolrun::pool::Range;

// Ranges of poold's own options (the request limits are in poolrun/pool/limits.hpp).
constexpr Range<int> kThreadsRange{1, 1024};
constexpr Range<size_t> kMaxBodyRange{1024, size_t{1} << 30};
constexpr Range<int> kConnectionsRange{1, 1'000'000};
constexpr Range<int64_t> kRequestTimeoutRange{1, 3600};  // --header-timeout, --body-timeout
constexpr Range<int64_t> kIdleTimeoutRange{1, 86'400};
constexpr Range<int64_t> kIntervalRange{1, 3600};         // --heartbeat-interval
constexpr Range<int64_t> kEtcdTtlRange{2, 60};            // --etcd-ttl
constexpr Range<size_t> kEtcdTxnOpsRange{16, 1'000'000};  // --etcd-max-txn-ops

std::string usage() {
  const poolrun::pool::ServerOptions d;
  auto n = [](auto v) { return std::to_string(v); };
  auto s = [](std::chrono::milliseconds ms) { return std::to_string(ms.count() / 1000); };
  return "usage: poold --state DIR --token-file FILE [--listen HOST:PORT] [--cluster FILE]\n"
         "             [--sync normal|full] [--max-body BYTES] [--threads N] [--max-connections N]\n"
         "             [--max-connections-per-peer N] [--header-timeout SECONDS] [--body-timeout SECONDS]\n"
         "             [--idle-timeout SECONDS] [--max-ttl SECONDS] [--max-user-priority P]\n"
         "             [--max-queued-per-owner N]\n"
         "             [--heartbeat-interval SECONDS] [--node-timeout SECONDS] [--idle-utilization PERCENT]\n"
         "             [--idle-after SECONDS] [--reclaim-idle] [--reclaim-grace SECONDS]\n"
         "             [--preempt-grace SECONDS] [--min-runtime SECONDS] [--quotas FILE]\n"
         "             [--metrics-token-file FILE] [--metrics-allow ADDR[,ADDR...]]\n"
         "             [--metrics-host NAME[,NAME...]] [--history-interval SECONDS]\n"
         "             [--store sqlite|etcd://HOST:PORT[,HOST:PORT...] --advertise http://THIS:PORT\n"
         "              [--etcd-prefix /poolrun] [--etcd-ttl SECONDS] [--etcd-max-txn-ops N]]\n"
         "       poold --help | --version\n"
         "  --listen HOST:PORT  where to serve (default " +
         d.host + ":" + n(d.port) +
         "; port 0 picks a free port and prints it)\n"
         "  --state DIR         the pool's state (DIR/pool.sqlite, WAL); one poold per directory\n"
         "  --token-file FILE   one `TOKEN OWNER ROLE` line per token (ROLE user, admin, or node for\n"
         "                      an agent, OWNER its node; # comments); re-read when it changes\n"
         "  --cluster FILE      register the nodes of a cluster file at start (keeps their state)\n"
         "  --sync normal|full  SQLite synchronous mode: normal (default) survives a crash of poold,\n"
         "                      full also a power loss (an fsync per group commit)\n"
         "  --max-body BYTES    largest request body, however framed (default " +
         n(d.max_body_bytes) + ", " + n(kMaxBodyRange.min) + " to " + n(kMaxBodyRange.max) +
         ");\n"
         "                      larger ones get 413\n"
         "  --threads N         workers that run requests; a queued client's long poll holds one (default " +
         n(d.threads) + ", 1 to " + n(kThreadsRange.max) +
         ")\n"
         "  --max-connections N           open connections in total (default " +
         n(d.max_connections) +
         ")\n"
         "  --max-connections-per-peer N  open connections from one IP address (default " +
         n(d.max_connections_per_peer) +
         ")\n"
         "  --header-timeout SECONDS      from a request's first byte to its last header (default " +
         s(d.header_timeout) +
         ")\n"
         "  --body-timeout SECONDS        for a request's whole body (default " +
         s(d.body_timeout) +
         ")\n"
         "  --idle-timeout SECONDS        a kept-alive connection without a request is closed (default " +
         n(d.idle_timeout.count()) +
         ")\n"
         "  --max-ttl SECONDS             longest lease TTL a request may ask for (default " +
         n(d.max_ttl.count()) + ", at most " + n(poolrun::pool::kTtlSecondsRange.max) +
         ")\n"
         "  --max-user-priority P         highest priority of a user's request; administrators may use\n"
         "                                any from " +
         n(poolrun::pool::kPriorityRange.min) + " to " + n(poolrun::pool::kPriorityRange.max) + " (default " +
         n(d.max_user_priority) +
         ")\n"
         "  --max-queued-per-owner N      requests one owner may have in the queue; one more that does\n"
         "                                not fit now gets 429 (default " +
         n(d.max_queued_per_owner) + ", 1 to " + n(poolrun::pool::kMaxQueuedPerOwnerRange.max) +
         ")\n"
         "  --heartbeat-interval SECONDS  how often node agents send heartbeats (default " +
         n(d.live.heartbeat_interval.count()) +
         ")\n"
         "  --node-timeout SECONDS        a node whose agent is silent this long is unreachable\n"
         "                                (default 3 heartbeat intervals)\n"
         "  --idle-utilization PERCENT    a lease whose GPUs all stay under this ... (default " +
         n(static_cast<int>(d.live.idle_utilization * 100)) +
         ")\n"
         "  --idle-after SECONDS          ... this long is idle (default " +
         n(d.live.idle_after.count()) +
         "; 0: never idle)\n"
         "  --reclaim-idle                end idle leases (after a warning in their renewal) so that\n"
         "                                queued requests get the GPUs; off by default\n"
         "  --reclaim-grace SECONDS       from the warning to the end of an idle lease (default " +
         n(d.live.reclaim_grace.count()) +
         ")\n"
         "  --preempt-grace SECONDS       from a preemption's notice to the deadline by which the victim's\n"
         "                                job must have ended (default " +
         n(d.preempt.grace.count()) +
         ")\n"
         "  --min-runtime SECONDS         a lease younger than this is never preempted (default " +
         n(d.preempt.min_runtime.count()) +
         ")\n"
         "  --quotas FILE                 GPUs guaranteed and limits per group or owner, one line each:\n"
         "                                `group NAME guaranteed=N [limit=N] members=A,B`, `owner NAME\n"
         "                                guaranteed=N [limit=N]`, `default guaranteed=N [limit=N]`;\n"
         "                                re-read when it changes (docs/quotas.md)\n"
         "  --metrics-token-file FILE     a scrape token (its first word) that may read /metrics only;\n"
         "                                re-read when it changes\n"
         "  --metrics-allow ADDR[,ADDR...]  clients from these addresses or prefixes read /metrics\n"
         "                                without a token (10.0.0.0/8, 127.0.0.1/32, ::1/128; repeatable)\n"
         "  --metrics-host NAME[,NAME...]  a name such a client may scrape poold by, besides an IP\n"
         "                                address, localhost, the --listen host and this machine's name\n"
         "                                (any other Host is refused: DNS rebinding; repeatable)\n"
         "  --history-interval SECONDS    between samples of the dashboard's history charts (default " +
         n(d.history_interval.count()) + "; the last " + n(d.history_samples) +
         " are kept)\n"
         "  --store sqlite|etcd://...      where the pool's state lives: DIR/pool.sqlite (default), or an\n"
         "                                etcd cluster shared by poold replicas, of which one leads and\n"
         "                                the others wait to take over (docs/ha.md)\n"
         "  --advertise http://HOST:PORT  with etcd: the URL clients reach this replica at\n"
         "  --etcd-prefix PREFIX          with etcd: where the state is kept (default /poolrun)\n"
         "  --etcd-ttl SECONDS            with etcd: the leader's lease; a standby takes over this long\n"
         "                                after the leader dies (default 5, 2 to 60)\n"
         "  --etcd-max-txn-ops N          with etcd: etcd's --max-txn-ops (default 128, as etcd's); a "
         "change\n"
         "                                larger than one transaction takes is written in several\n"
         "  GET /healthz answers 200 `ok` without a token while poold serves, 503 once it stops\n"
         "environment:\n"
         "  POOLRUN_FIXTURES              where --cluster files' shared/fixtures/ topologies are\n";
}

// What a standby answers: 307 to the leader (the same path), or 503 while there is none; GET
// /healthz 503 too, so that a load balancer sends nothing here. Never the pool's state: a standby's
// would be stale.
poolrun::pool::HttpReply standbyReply(const poolrun::pool::HttpRequest& req, const std::string& leader,
                                      const std::string& etcdProblem) {
  using nlohmann::json;
  if (!etcdProblem.empty())
    return {503, json{{"error", "this poold replica is a standby and no replica can lead: " + etcdProblem +
                                    "; the pool accepts no change until etcd answers again"},
                      {"reason", "etcd_unavailable"}}
                     .dump()};
  if (leader.empty())
    return {503, json{{"error",
                       "this poold replica is a standby and the replicas have no leader yet (one takes over "
                       "within the etcd lease's TTL); retry in a second"},
                      {"reason", "no_leader"}}
                     .dump()};
  poolrun::pool::HttpReply r{req.segments == std::vector<std::string>{"healthz"} ? 503 : 307,
                             json{{"error", "this poold replica is a standby; the leader is " + leader},
                                  {"reason", "not_leader"},
                                  {"leader", leader}}
                                 .dump()};
  r.headers.push_back({"Location", leader + req.target});
  return r;
}

// A standby's server of redirects, stopped (and its thread joined) however main ends.
struct StandbyServer {
  std::unique_ptr<poolrun::pool::TokenStore> tokens;  // for /metrics
  std::unique_ptr<poolrun::pool::MetricsAccess> access;
  std::unique_ptr<poolrun::pool::HttpServer> server;
  std::thread thread;
  void stop() {
    if (!server) return;
    server->stop();
    thread.join();
    server.reset();
  }
  ~StandbyServer() { stop(); }
};

template <typename T>
T number(const std::string& option, const std::string& text, Range<T> range) {
  return poolrun::topo::parseOption<T>(option, text, range.min, range.max);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace poolrun;
  pool::ServerOptions opt;
  std::string cluster;
  std::optional<std::chrono::seconds> nodeTimeout;
  std::string store = "sqlite", etcdPrefix = "/poolrun", advertise;
  std::chrono::seconds etcdTtl(5);
  size_t etcdMaxTxnOps = pool::EtcdStore::kEtcdDefaultMaxTxnOps;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw badInput(a + " needs a value");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::cout << usage();
        return 0;
      } else if (a == "--version") {
        std::cout << topo::versionText("poold");
        return 0;
      } else if (a == "--listen") {
        std::string v = value();
        size_t colon = v.rfind(':');
        if (colon == std::string::npos) throw badInput("--listen '" + v + "': expected HOST:PORT");
        opt.host = v.substr(0, colon);
        opt.port = number("--listen " + v + ": port", v.substr(colon + 1), Range<int>{0, 65535});
      } else if (a == "--state") {
        opt.state_dir = value();
      } else if (a == "--token-file") {
        opt.token_file = value();
      } else if (a == "--cluster") {
        cluster = value();
      } else if (a == "--sync") {
        std::string v = value();
        if (v == "normal")
          opt.durability = pool::Durability::kNormal;
        else if (v == "full")
          opt.durability = pool::Durability::kFull;
        else
          throw badInput("--sync '" + v + "' (use normal or full)");
      } else if (a == "--max-body") {
        opt.max_body_bytes = number(a, value(), kMaxBodyRange);
      } else if (a == "--threads") {
        opt.threads = number(a, value(), kThreadsRange);
      } else if (a == "--max-connections") {
        opt.max_connections = number(a, value(), kConnectionsRange);
      } else if (a == "--max-connections-per-peer") {
        opt.max_connections_per_peer = number(a, value(), kConnectionsRange);
      } else if (a == "--header-timeout") {
        opt.header_timeout = std::chrono::seconds(number(a, value(), kRequestTimeoutRange));
      } else if (a == "--body-timeout") {
        opt.body_timeout = std::chrono::seconds(number(a, value(), kRequestTimeoutRange));
      } else if (a == "--idle-timeout") {
        opt.idle_timeout = std::chrono::seconds(number(a, value(), kIdleTimeoutRange));
      } else if (a == "--max-ttl") {
        opt.max_ttl = std::chrono::seconds(number(a, value(), pool::kTtlSecondsRange));
      } else if (a == "--max-user-priority") {
        opt.max_user_priority = number(a, value(), pool::kPriorityRange);
      } else if (a == "--max-queued-per-owner") {
        opt.max_queued_per_owner = number(a, value(), pool::kMaxQueuedPerOwnerRange);
      } else if (a == "--heartbeat-interval") {
        opt.live.heartbeat_interval = std::chrono::seconds(number(a, value(), kIntervalRange));
      } else if (a == "--history-interval") {
        opt.history_interval = std::chrono::seconds(number(a, value(), kIntervalRange));
      } else if (a == "--node-timeout") {
        nodeTimeout = std::chrono::seconds(number(a, value(), kIdleTimeoutRange));
      } else if (a == "--idle-utilization") {
        opt.live.idle_utilization = number(a, value(), Range<int>{0, 100}) / 100.0;
      } else if (a == "--idle-after") {
        opt.live.idle_after = std::chrono::seconds(number(a, value(), Range<int64_t>{0, 366 * 86'400}));
      } else if (a == "--reclaim-idle") {
        opt.live.reclaim_idle = true;
      } else if (a == "--reclaim-grace") {
        opt.live.reclaim_grace = std::chrono::seconds(number(a, value(), kIdleTimeoutRange));
      } else if (a == "--preempt-grace") {
        opt.preempt.grace = std::chrono::seconds(number(a, value(), pool::kPreemptGraceRange));
      } else if (a == "--min-runtime") {
        opt.preempt.min_runtime = std::chrono::seconds(number(a, value(), pool::kPreemptSecondsRange));
      } else if (a == "--quotas") {
        opt.quotas_file = value();
        try {
          pool::readQuotasFile(opt.quotas_file);
        } catch (const Error& e) {
          throw badInput(a + ": " + e.what());
        }
      } else if (a == "--metrics-token-file") {
        opt.metrics_token_file = value();
        try {
          pool::readScrapeToken(opt.metrics_token_file);
        } catch (const Error& e) {
          throw badInput(a + ": " + e.what());
        }
      } else if (a == "--metrics-allow") {
        std::string v = value();
        pool::parseAddressRanges(v, a);
        opt.metrics_allow.push_back(v);
      } else if (a == "--metrics-host") {
        const std::string v = value();
        for (size_t start = 0; start <= v.size();) {
          const size_t end = std::min(v.find(',', start), v.size());
          const std::string name = v.substr(start, end - start);
          if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                     "0123456789.-_") != std::string::npos)
            throw badInput("--metrics-host '" + topo::printable(v) + "': '" + topo::printable(name) +
                           "' is not a host name (letters, digits, '.', '-', '_'; several: a,b)");
          opt.metrics_hosts.push_back(name);
          start = end + 1;
        }
      } else if (a == "--store") {
        store = value();
        if (store != "sqlite") pool::parseEtcdUri(store);
      } else if (a == "--etcd-prefix") {
        etcdPrefix = value();
        if (!etcdPrefix.starts_with("/") || etcdPrefix.find_first_of(" \t\n") != std::string::npos)
          throw badInput("--etcd-prefix '" + etcdPrefix + "': expected a key prefix such as /poolrun");
      } else if (a == "--advertise") {
        advertise = value();
        opt.metrics_hosts.push_back(pool::parseHttpUri(advertise).host);
        if (!advertise.starts_with("http://"))
          throw badInput("--advertise '" + advertise + "': expected http://HOST:PORT");
      } else if (a == "--etcd-max-txn-ops") {
        etcdMaxTxnOps = number(a, value(), kEtcdTxnOpsRange);
      } else if (a == "--etcd-ttl") {
        etcdTtl = std::chrono::seconds(number(a, value(), kEtcdTtlRange));
      } else {
        throw badInput("unknown option '" + a + "'");
      }
    }
    opt.live.node_timeout = nodeTimeout.value_or(3 * opt.live.heartbeat_interval);
    if (opt.live.node_timeout <= opt.live.heartbeat_interval)
      throw badInput("--node-timeout " + std::to_string(opt.live.node_timeout.count()) +
                     " is not longer than the heartbeat interval (" +
                     std::to_string(opt.live.heartbeat_interval.count()) +
                     " s): every node would be unreachable between two heartbeats");
    // SIGTERM and SIGINT are taken by one thread with sigwait, never by a handler, so that
    // stopping the server runs in an ordinary thread.
    sigset_t stopSignals;
    sigemptyset(&stopSignals);
    sigaddset(&stopSignals, SIGTERM);
    sigaddset(&stopSignals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    // With etcd: campaign until this replica leads (a standby answers with redirects meanwhile), then
    // serve with the state fenced on the leadership; a replica that loses it exits (status 75)
    // and its supervisor starts it again as a standby.
    std::unique_ptr<pool::EtcdLeadership> leadership;
    std::atomic<pool::PoolServer*> running{nullptr};
    std::atomic<bool> stopRequested{false};
    std::shared_ptr<pool::EtcdClient> client, metricsEtcd;
    const pool::ServerMetrics processMetrics;  // a standby's start time and version
    if (store != "sqlite") {
      if (advertise.empty())
        throw badInput("--store " + store +
                       " needs --advertise http://HOST:PORT (the URL clients reach this "
                       "replica at, given to them by the other replicas)");
      client = std::make_shared<pool::EtcdClient>(pool::parseEtcdUri(store));
      // /metrics and /v1/replicas ask every member for its status: on connections of their own, so
      // that a member that does not answer holds up a scrape, never the campaign or a commit.
      metricsEtcd = std::make_shared<pool::EtcdClient>(pool::parseEtcdUri(store));
      leadership = std::make_unique<pool::EtcdLeadership>(client, etcdPrefix, advertise, etcdTtl);
    }
    std::thread([&, stopSignals] {
      int sig = 0;
      sigwait(&stopSignals, &sig);
      stopRequested = true;
      if (leadership) leadership->stop();
      if (pool::PoolServer* s = running.load()) s->stop();
    }).detach();
    // While it campaigns, the replica answers on its address with redirects to the leader, until
    // the pool's server is about to take the address over.
    std::mutex leaderMu;
    std::string leaderNow, etcdProblem;
    StandbyServer standby;
    if (leadership) {
      pool::HttpServerOptions h;
      h.host = opt.host;
      h.port = opt.port;
      h.workers = 4;
      h.max_connections = std::min(opt.max_connections, 1024);
      h.idle_timeout = std::chrono::milliseconds(5000);
      // A standby answers /metrics itself (its own series, poolrun_leader 0), with the leader's access
      // rules: Prometheus scrapes every replica, and a redirect stored the leader's series under each.
      auto warn = [](const std::string& w) { std::cerr << "poold: warning: " << w << "\n"; };
      standby.tokens = std::make_unique<pool::TokenStore>(opt.token_file, warn);
      std::vector<pool::AddressRange> allowed;
      for (const std::string& list : opt.metrics_allow)
        for (pool::AddressRange& r : pool::parseAddressRanges(list, "--metrics-allow")) allowed.push_back(r);
      standby.access =
          std::make_unique<pool::MetricsAccess>(opt.metrics_token_file, std::move(allowed),
                                                pool::metricsHostNames(opt.host, opt.metrics_hosts), warn);
      standby.server = std::make_unique<pool::HttpServer>(h, [&](const pool::HttpRequest& req) {
        if (req.segments == std::vector<std::string>{"metrics"})
          return pool::standbyMetricsReply(req, *standby.access, *standby.tokens, [&] {
            return pool::replicaSeries(false, metricsEtcd->status()) + processMetrics.renderProcess();
          });
        std::lock_guard<std::mutex> lock(leaderMu);
        return standbyReply(req, leaderNow, etcdProblem);
      });
      opt.port = standby.server->port();  // the leader serves where the standby did
      std::cout << "poold: standby, answering with redirects to the leader on http://" << opt.host << ":"
                << opt.port << std::endl;
      standby.thread = std::thread([&standby] { standby.server->run(); });
      std::optional<pool::EtcdFence> fence = leadership->campaign(
          [&](const std::string& leader) {
            {
              std::lock_guard<std::mutex> lock(leaderMu);
              leaderNow = leader == advertise ? "" : leader;  // until the leader serves here
              etcdProblem.clear();
            }
            if (leader == advertise)
              std::cerr << "poold: leading the pool in etcd " << store << " (prefix " << etcdPrefix << ")\n";
            else
              std::cerr << "poold: standby: "
                        << (leader.empty() ? "no leader yet" : "the leader is " + leader) << "\n";
          },
          [&](const std::string& why) {
            {
              std::lock_guard<std::mutex> lock(leaderMu);
              etcdProblem = why;
            }
            std::cerr << "poold: standby: " << why << "\n";
          },
          [](const std::string& why) {
            std::cerr << "poold: lost the leadership: " << why
                      << "; exiting so that no change is acknowledged by two leaders\n";
            std::_Exit(75);
          });
      if (!fence) {
        std::cerr << "poold: stopped (standby)\n";
        return 0;
      }
      opt.open_store = [client, etcdPrefix, fence, etcdMaxTxnOps] {
        return std::make_unique<pool::EtcdStore>(client, etcdPrefix, *fence, etcdMaxTxnOps);
      };
      opt.serving = [l = leadership.get()] { return l->leading(); };
      opt.replicas = [metricsEtcd, l = leadership.get(), advertise, store, etcdPrefix] {
        nlohmann::json out = {{"store", store + " (prefix " + etcdPrefix + ")"},
                              {"replicas", nlohmann::json::array()},
                              {"etcd", nlohmann::json::array()}};
        try {
          for (const std::string& url : l->replicas())
            out["replicas"].push_back({{"url", url}, {"leader", url == advertise}});
        } catch (const Error&) {  // etcd's members below say why
        }
        for (const pool::EtcdMemberStatus& m : metricsEtcd->status())
          out["etcd"].push_back({{"endpoint", m.endpoint},
                                 {"reachable", m.reachable},
                                 {"leader", m.reachable && m.member_id == m.leader_id},
                                 {"version", m.version},
                                 {"error", m.error}});
        return out.dump();
      };
      int64_t elections = 0;
      try {
        elections = leadership->countElection(*fence);
      } catch (const Error& e) {
        std::cerr << "poold: warning: " << e.what() << "\n";
      }
      const auto since = std::chrono::system_clock::now();
      opt.more_metrics = [elections, since, metricsEtcd] {
        const double t = std::chrono::duration<double>(since.time_since_epoch()).count();
        return pool::replicaSeries(true, metricsEtcd->status()) +
               "# HELP poolrun_leader_since_seconds When this replica took the lead (Unix time).\n"
               "# TYPE poolrun_leader_since_seconds gauge\npoolrun_leader_since_seconds " +
               std::to_string(t) +
               "\n# HELP poolrun_leader_elections_total Times a poold replica took the lead of this pool "
               "(its first start, then every failover or restart).\n"
               "# TYPE poolrun_leader_elections_total counter\npoolrun_leader_elections_total " +
               std::to_string(elections) + "\n";
      };
    }
    pool::PoolServer server(opt);
    if (!cluster.empty()) server.registerNodes(topo::readClusterFile(cluster).nodes);
    standby.stop();
    int port = server.bind();
    running = &server;
    if (stopRequested) server.stop();
    std::cout << "poold: listening on http://" << opt.host << ":" << port << std::endl;
    server.run();
    std::cerr << "poold: stopped\n";
    return 0;
  } catch (const Error& e) {
    std::cerr << "poold: error: " << e.what() << "\n";
    if (e.code() == ErrorCode::kBadInput) std::cerr << usage();
    return e.code() == ErrorCode::kBadInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "poold: error: " << e.what() << "\n";
    return 1;
  }
}
