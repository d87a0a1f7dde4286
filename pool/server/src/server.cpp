// poold's engine: PoolServer over ServerCore (server_core.hpp), whose dispatcher (dispatch.cpp) serves
// the route tables of routes/; and the HTTP server's limits.

#include "poolrun/pool/server.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <iostream>

#include "poolrun/pool/accounts.hpp"
#include "poolrun/pool/quotas.hpp"
#include "routes/routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

// Raises the soft limit on open files to the hard one, and keeps the connection limit within it
// (with room for the state file, the token file and the listening socket).
int connectionsWithinFileLimit(int wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return wanted;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  if (lim.rlim_cur == RLIM_INFINITY) return wanted;
  auto room = static_cast<int64_t>(lim.rlim_cur) - 64;
  if (room >= wanted) return wanted;
  int allowed = static_cast<int>(std::max<int64_t>(room, 16));
  std::cerr << "poold: warning: --max-connections " << wanted << " is over what the open-file limit allows ("
            << lim.rlim_cur << "): serving at most " << allowed << " connections (raise `ulimit -n`)\n";
  return allowed;
}

// A route of ServerOptions::routes as a row of the dispatcher's table.
RouteSpec routeOf(const ServerRoute& extra) {
  RouteSpec spec{extra.method, extra.pattern, extra.needs_token ? Role::kUser : Role::kAnyone, extra.lock,
                 "",           nullptr};
  spec.replies = [handler = extra.handler](ServerCore& m, Context& c) {
    return handler(c.req, c.who, m.reader());
  };
  spec.label = extra.label;
  return spec;
}

}  // namespace

struct PoolServer::Impl : ServerCore {
  using ServerCore::ServerCore;
};

PoolServer::PoolServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& m = *impl_;
  if (m.opt.state_dir.empty()) throw badInput("poold needs --state DIR");
  if (m.opt.token_file.empty()) throw badInput("poold needs --token-file FILE");
  std::error_code ec;
  std::filesystem::create_directories(m.opt.state_dir, ec);
  if (ec) throw Error(ErrorCode::kIo, m.opt.state_dir.string() + ": cannot create (" + ec.message() + ")");
  std::filesystem::path lock = m.opt.state_dir / "poold.lock";
  m.lock_fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (m.lock_fd < 0)
    throw Error(ErrorCode::kIo, lock.string() + ": cannot open poold's lock file (" + std::strerror(errno) +
                                    "); it must be a regular file poold may write (is it a folder?)");
  if (flock(m.lock_fd, LOCK_EX | LOCK_NB) != 0)
    throw Error(
        ErrorCode::kIo,
        lock.string() + ": another poold serves this state directory; stop it or use another --state");
  m.tokens = std::make_unique<TokenStore>(
      m.opt.token_file, [](const std::string& w) { std::cerr << "poold: warning: " << w << "\n"; });
  auto warn = [](const std::string& w) { std::cerr << "poold: warning: " << w << "\n"; };
  m.launch_signer = std::make_unique<common::LaunchSigner>(common::LaunchSigner::loadOrCreate(
      m.opt.launch_key_file.empty() ? m.opt.state_dir / "launch-key.pem" : m.opt.launch_key_file));
  if (m.opt.munge) {
    std::string why;
    std::shared_ptr<Munge> munge = Munge::open(why);
    if (!munge) throw badInput("--munge: " + why);
    // A connection's MUNGE user outlives its idle time: poold closes it first.
    m.munge_users = std::make_unique<MungeUsers>(munge, m.opt.munge_socket, m.opt.admin_group,
                                                 m.opt.idle_timeout + std::chrono::minutes(1));
  }
  std::vector<AddressRange> allowed;
  for (const std::string& list : m.opt.metrics_allow)
    for (AddressRange& r : parseAddressRanges(list, "--metrics-allow")) allowed.push_back(std::move(r));
  m.metrics_access = std::make_unique<MetricsAccess>(m.opt.metrics_token_file, std::move(allowed),
                                                     metricsHostNames(m.opt.host, m.opt.metrics_hosts), warn);
  m.pool = std::make_unique<CommittedState>(
      m.opt.open_store ? m.opt.open_store()
                       : std::make_unique<Store>(m.opt.state_dir / "pool.sqlite", m.opt.durability));
  EventLogOptions events;
  events.file = m.opt.state_dir / "events.jsonl";
  m.events = std::make_unique<EventLog>(events, warn);
  Quotas quotas;
  if (!m.opt.quotas_file.empty()) {
    struct stat st {};
    if (stat(m.opt.quotas_file.c_str(), &st) == 0) m.quotas_watch = common::FileWatch(common::identityOf(st));
    quotas = readQuotasFile(m.opt.quotas_file);
  }
  Accounts accounts;
  if (!m.opt.accounts_file.empty()) {
    struct stat st {};
    if (stat(m.opt.accounts_file.c_str(), &st) == 0)
      m.accounts_watch = common::FileWatch(common::identityOf(st));
    accounts = readAccountsFile(m.opt.accounts_file);
  }
  m.pool->mutate([&m, &quotas, &accounts](PoolState& s, TimePoint) {
    s.setLiveOptions(m.opt.live);
    s.setPreemptOptions(m.opt.preempt);
    s.setJobOptions(m.opt.jobs);
    s.setUsageOptions(m.opt.usage);
    s.setQuotas(std::move(quotas));
    s.setAccounts(std::move(accounts));
    return 0;
  });
  for (const auto& table : {statusRoutes(), nodeRoutes(), agentRoutes(), memberRoutes(), jobRoutes(),
                            usageRoutes(), reservationRoutes(), leaseRoutes(), queueRoutes(), eventRoutes()})
    for (const RouteSpec& spec : table) m.routes.emplace_back(spec);
  for (const ServerRoute& extra : m.opt.routes) m.routes.emplace_back(routeOf(extra));
}

PoolServer::~PoolServer() {
  stop();
  if (impl_->ticker.joinable()) impl_->ticker.join();
  impl_->http.reset();  // joins the workers before the state they use goes
}

void PoolServer::registerNodes(const std::vector<topo::ClusterNode>& nodes) {
  impl_->mutate([&](PoolState& s, TimePoint now) {
    for (const auto& n : nodes) {
      auto it = s.nodeMap().find(n.name);
      bool same = it != s.nodeMap().end() && it->second.topology && *it->second.topology == *n.topology &&
                  it->second.levels == n.levels && it->second.labels == n.labels &&
                  it->second.fabric == n.fabric;
      if (!same) s.registerNode(n);
    }
    s.tick(now, impl_->opt.stale_after);
    return 0;
  });
}

int PoolServer::bind() {
  Impl& m = *impl_;
  HttpServerOptions h;
  h.host = m.opt.host;
  h.port = m.opt.port;
  h.workers = m.opt.threads;
  h.max_body_bytes = m.opt.max_body_bytes;
  h.max_connections = connectionsWithinFileLimit(m.opt.max_connections);
  h.max_connections_per_peer = std::min(m.opt.max_connections_per_peer, h.max_connections);
  h.header_timeout = m.opt.header_timeout;
  h.body_timeout = m.opt.body_timeout;
  h.idle_timeout = m.opt.idle_timeout;
  h.write_timeout = m.opt.body_timeout;
  h.tls_cert = m.opt.tls_cert_file;
  h.tls_key = m.opt.tls_key_file;
  h.tls_client_ca = m.opt.tls_client_ca_file;
  h.warn = [](const std::string& w) { std::cerr << "poold: warning: " << w << "\n"; };
  m.http = std::make_unique<HttpServer>(
      h, [&m](const HttpRequest& req) { return m.handle(req); },
      [&m](const HttpRequest& req) { return m.quick(req); });
  return m.http->port();
}

void PoolServer::run() {
  Impl& m = *impl_;
  if (!m.http) bind();
  m.ticker = std::thread([&m] {
    std::unique_lock<std::mutex> lock(m.stop_mu);
    while (!m.stopping) {
      m.stop_cv.wait_for(lock, std::chrono::milliseconds(250));
      if (m.stopping) break;
      lock.unlock();
      m.reloadQuotas();
      m.reloadAccounts();
      m.mutate([&m](PoolState& s, TimePoint now) {
        s.tick(now, m.opt.stale_after);
        // The ledger's running rows stored every --account-interval (and at the first tick: rows
        // a restart found without their lease are closed).
        if (now - m.last_account >= m.opt.usage.interval || now < m.last_account) {
          s.accountUsage(now);
          m.last_account = now;
        }
        return 0;
      });
      m.metrics.observeWaits(m.pool->takeWaitSeconds());
      m.runTickHooks();
      lock.lock();
    }
  });
  m.http->run();
  stop();
  if (m.ticker.joinable()) m.ticker.join();
  // The ledger's running rows stored as they are now: a clean stop loses no use or energy, and
  // /metrics' counters start again where they were.
  try {
    m.mutate([](PoolState& s, TimePoint now) {
      s.accountUsage(now);
      return 0;
    });
  } catch (const std::exception& e) {
    std::cerr << "poold: warning: the usage ledger's last checkpoint was not stored: " << e.what() << "\n";
  }
}

HttpReply PoolServer::handle(const HttpRequest& request) {
  return impl_->handle(request);
}

void PoolServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->stop_mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  impl_->pool->wakeAll();
  if (impl_->events) impl_->events->wakeAll();
  if (impl_->http) impl_->http->stop();
}

}  // namespace poolrun::pool
