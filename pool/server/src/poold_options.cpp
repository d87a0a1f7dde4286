#include "poolrun/pool/poold_options.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <functional>
#include <map>

#include "poolrun/common/names.hpp"
#include "poolrun/common/options.hpp"
#include "poolrun/pool/accounts.hpp"
#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/etcd_store.hpp"
#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/munge_users.hpp"
#include "poolrun/pool/quotas.hpp"
#include "poolrun/pool/server_metrics.hpp"
#include "poolrun/pool/tokens.hpp"
#include "tls_context.hpp"

namespace poolrun::pool {
namespace {

// Ranges of poold's own options (the request limits are in poolrun/pool/limits.hpp).
constexpr Range<int> kThreadsRange{1, 1024};
constexpr Range<size_t> kMaxBodyRange{1024, size_t{1} << 30};
constexpr Range<int> kConnectionsRange{1, 1'000'000};
constexpr Range<int64_t> kRequestTimeoutRange{1, 3600};  // --header-timeout, --body-timeout
constexpr Range<int64_t> kIdleTimeoutRange{1, 86'400};
constexpr Range<int64_t> kIntervalRange{1, 3600};         // --heartbeat-interval
constexpr Range<int64_t> kEtcdTtlRange{2, 60};            // --etcd-ttl
constexpr Range<size_t> kEtcdTxnOpsRange{16, 1'000'000};  // --etcd-max-txn-ops

// The synopsis, and the options of the HTTP server and of requests.
std::string serverHelp(const ServerOptions& d) {
  auto n = [](auto v) { return std::to_string(v); };
  auto s = [](std::chrono::milliseconds ms) { return std::to_string(ms.count() / 1000); };
  return "usage: poold --state DIR --token-file FILE [--listen HOST:PORT] [--cluster FILE]\n"
         "             [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]] [--insecure-http]\n"
         "             [--munge [--munge-socket PATH] [--admin-group GROUP]]\n"
         "             [--sync normal|full] [--max-body BYTES] [--threads N] [--max-connections N]\n"
         "             [--max-connections-per-peer N] [--header-timeout SECONDS] [--body-timeout SECONDS]\n"
         "             [--idle-timeout SECONDS] [--max-ttl SECONDS] [--max-user-priority P]\n"
         "             [--max-queued-per-owner N] [--max-jobs-per-owner N] [--job-retention SECONDS]\n"
         "             [--allow-root-jobs] [--launch-key FILE]\n"
         "             [--account-interval SECONDS] [--usage-detail SECONDS] [--usage-retention SECONDS]\n"
         "             [--heartbeat-interval SECONDS] [--node-timeout SECONDS] [--idle-utilization PERCENT]\n"
         "             [--idle-after SECONDS] [--reclaim-idle] [--reclaim-grace SECONDS]\n"
         "             [--preempt-grace SECONDS] [--min-runtime SECONDS] [--quotas FILE]\n"
         "             [--accounts FILE] [--fairshare-half-life SECONDS]\n"
         "             [--metrics-token-file FILE] [--metrics-allow ADDR[,ADDR...]]\n"
         "             [--metrics-host NAME[,NAME...]] [--history-interval SECONDS]\n"
         "             [--store sqlite|etcd[s]://HOST:PORT[,HOST:PORT...] --advertise http[s]://THIS:PORT\n"
         "              [--etcd-prefix /poolrun] [--etcd-ttl SECONDS] [--etcd-max-txn-ops N]\n"
         "              [--etcd-ca FILE] [--etcd-cert FILE --etcd-key FILE]\n"
         "              [--etcd-user NAME --etcd-password-file FILE]]\n"
         "       poold --help | --version\n"
         "  --listen HOST:PORT  where to serve (default " +
         d.host + ":" + n(d.port) +
         "; port 0 picks a free port and prints it)\n"
         "  --state DIR         the pool's state (DIR/pool.sqlite, WAL); one poold per directory\n"
         "  --tls-cert FILE     serve HTTPS with this certificate (PEM, the chain after it) and the key\n"
         "  --tls-key FILE      of --tls-key (PEM, readable by poold's user only); both taken again when\n"
         "                      they change. Clients then use https://HOST:PORT and --ca FILE\n"
         "  --tls-client-ca FILE  ask clients for a certificate this CA signed: a node's token is then\n"
         "                      taken only with a certificate for that node (poold-agent --tls-cert)\n"
         "  --munge             take MUNGE credentials: a user of the cluster needs no token (poolrun and\n"
         "                      poolctl send one where they have none); --munge-socket PATH: poold's\n"
         "                      munged (default /run/munge/munge.socket.2); --admin-group GROUP: its\n"
         "                      members are administrators\n"
         "  --insecure-http     serve plain HTTP on an address other than loopback: tokens and all the\n"
         "                      pool's traffic then cross the network in clear (refused without it)\n"
         "  --launch-key FILE   the Ed25519 key (PEM) poold signs launch credentials with: what lets an\n"
         "                      agent start a job's daemon on its node (default DIR/launch-key.pem, made\n"
         "                      at the first start; the replicas of one pool share one file)\n"
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
         n(d.max_ttl.count()) + ", at most " + n(kTtlSecondsRange.max) +
         ")\n"
         "  --max-user-priority P         highest priority of a user's request; administrators may use\n"
         "                                any from " +
         n(kPriorityRange.min) + " to " + n(kPriorityRange.max) + " (default " + n(d.max_user_priority) +
         ")\n"
         "  --max-queued-per-owner N      requests one owner may have in the queue; one more that does\n"
         "                                not fit now gets 429 (default " +
         n(d.max_queued_per_owner) + ", 1 to " + n(kMaxQueuedPerOwnerRange.max) +
         ")\n"
         "  --max-jobs-per-owner N        detached jobs one owner may have pending or running (an array\n"
         "                                counts its tasks; default " +
         n(d.jobs.max_active_per_owner) + ", 1 to " + n(kMaxQueuedPerOwnerRange.max) +
         ")\n"
         "  --job-retention SECONDS       how long ended jobs' records are kept (default " +
         n(d.jobs.retention.count()) +
         ")\n"
         "  --allow-root-jobs             let detached jobs run as root (refused by default)\n"
         "  --account-interval SECONDS    how often running leases' usage is stored (default " +
         n(d.usage.interval.count()) +
         ", 10 to 86400):\n"
         "                                what a kill -9 of poold may lose of it\n"
         "  --usage-detail SECONDS        usage rows are kept per lease this long, then per day (default " +
         n(d.usage.detail.count()) +
         ")\n"
         "  --usage-retention SECONDS     usage rows are kept this long (default " +
         n(d.usage.retention.count()) + "); each owner's total stays\n";
}

// The options of node agents, idle leases, preemption, quotas, metrics and the dashboard.
std::string liveHelp(const ServerOptions& d) {
  auto n = [](auto v) { return std::to_string(v); };
  return "  --heartbeat-interval SECONDS  how often node agents send heartbeats (default " +
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
         "  --accounts FILE               the account tree, fair share and the priority's weights (TOML);\n"
         "                                re-read when it changes (docs/fairshare.md)\n"
         "  --fairshare-half-life SECONDS  fair share's usage halves in this time (default " +
         n(d.usage.half_life.count()) +
         ")\n"
         "  --metrics-token-file FILE     a scrape token (its first word) that may read /metrics only;\n"
         "                                re-read when it changes\n"
         "  --metrics-allow ADDR[,ADDR...]  clients from these addresses or prefixes read /metrics\n"
         "                                without a token (10.0.0.0/8, 127.0.0.1/32, ::1/128; repeatable)\n"
         "  --metrics-host NAME[,NAME...]  a name such a client may scrape poold by, besides an IP\n"
         "                                address, localhost, the --listen host and this machine's name\n"
         "                                (any other Host is refused: DNS rebinding; repeatable)\n"
         "  --history-interval SECONDS    between samples of the dashboard's history charts (default " +
         n(d.history_interval.count()) + "; the last " + n(d.history_samples) + " are kept)\n";
}

// The replicas' options (etcd) and the environment.
std::string replicaHelp() {
  return "  --store sqlite|etcd://...      where the pool's state lives: DIR/pool.sqlite (default), or an\n"
         "                                etcd cluster shared by poold replicas, of which one leads and\n"
         "                                the others wait to take over (docs/ha.md)\n"
         "  --advertise http://HOST:PORT  with etcd: the URL clients reach this replica at\n"
         "  --etcd-prefix PREFIX          with etcd: where the state is kept (default /poolrun)\n"
         "  --etcd-ttl SECONDS            with etcd: the leader's lease; a standby takes over this long\n"
         "                                after the leader dies (default 5, 2 to 60)\n"
         "  --etcd-max-txn-ops N          with etcd: etcd's --max-txn-ops (default 128, as etcd's); a "
         "change\n"
         "                                larger than one transaction takes is written in several\n"
         "  --etcd-ca FILE                with etcd over TLS (etcds://, or any --etcd-ca/cert/key): the\n"
         "                                CAs of the members' certificates (PEM; default the system's)\n"
         "  --etcd-cert FILE, --etcd-key FILE  poold's client certificate for etcd --client-cert-auth\n"
         "                                (with --etcd-user: no CommonName, etcd's gateway refuses one)\n"
         "  --etcd-user NAME, --etcd-password-file FILE  etcd's authentication: the user and the file of\n"
         "                                its password (first line; mode 0600), read again at each login\n"
         "  GET /healthz answers 200 `ok` without a token while poold serves, 503 once it stops\n"
         "environment:\n"
         "  POOLRUN_FIXTURES              where --cluster files' shared/fixtures/ topologies are\n";
}

template <typename T>
T number(const std::string& option, const std::string& text, Range<T> range) {
  return common::parseOption<T>(option, text, range.min, range.max);
}

std::chrono::seconds secondsIn(const std::string& option, const std::string& text, Range<int64_t> range) {
  return std::chrono::seconds(number(option, text, range));
}

// An option's effect on the options read so far, given its value (none for a flag).
using Setter = std::function<void(PooldOptions&, const std::string& option, const std::string& value)>;
struct OptionRow {
  bool takes_value;
  Setter set;
};

void listen(PooldOptions& o, const std::string&, const std::string& v) {
  size_t colon = v.rfind(':');
  if (colon == std::string::npos) throw badInput("--listen '" + v + "': expected HOST:PORT");
  o.server.host = v.substr(0, colon);
  o.server.port = number("--listen " + v + ": port", v.substr(colon + 1), Range<int>{0, 65535});
}

void sync(PooldOptions& o, const std::string&, const std::string& v) {
  if (v == "normal")
    o.server.durability = Durability::kNormal;
  else if (v == "full")
    o.server.durability = Durability::kFull;
  else
    throw badInput("--sync '" + v + "' (use normal or full)");
}

void quotas(PooldOptions& o, const std::string& a, const std::string& v) {
  o.server.quotas_file = v;
  try {
    readQuotasFile(o.server.quotas_file);
  } catch (const Error& e) {
    throw badInput(a + ": " + e.what());
  }
}

void accounts(PooldOptions& o, const std::string& a, const std::string& v) {
  o.server.accounts_file = v;
  try {
    readAccountsFile(o.server.accounts_file);
  } catch (const Error& e) {
    throw badInput(a + ": " + e.what());
  }
}

void metricsToken(PooldOptions& o, const std::string& a, const std::string& v) {
  o.server.metrics_token_file = v;
  try {
    readScrapeToken(o.server.metrics_token_file);
  } catch (const Error& e) {
    throw badInput(a + ": " + e.what());
  }
}

void metricsHosts(PooldOptions& o, const std::string&, const std::string& v) {
  for (size_t start = 0; start <= v.size();) {
    const size_t end = std::min(v.find(',', start), v.size());
    const std::string name = v.substr(start, end - start);
    if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                               "0123456789.-_") != std::string::npos)
      throw badInput("--metrics-host '" + common::printable(v) + "': '" + common::printable(name) +
                     "' is not a host name (letters, digits, '.', '-', '_'; several: a,b)");
    o.server.metrics_hosts.push_back(name);
    start = end + 1;
  }
}

void etcdPrefix(PooldOptions& o, const std::string&, const std::string& v) {
  o.etcd_prefix = v;
  if (!v.starts_with("/") || v.find_first_of(" \t\n") != std::string::npos)
    throw badInput("--etcd-prefix '" + v + "': expected a key prefix such as /poolrun");
}

void advertise(PooldOptions& o, const std::string&, const std::string& v) {
  o.advertise = v;
  o.server.metrics_hosts.push_back(parseHttpUri(v).host);
}

// Whether `host` (an IP literal, as --listen takes) is this machine's loopback: 127/8, ::1, or
// IPv4's loopback mapped into IPv6. 0.0.0.0 and :: are every address, not loopback.
bool isLoopback(const std::string& host) {
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

// MUNGE's options: libmunge there, the administrators' group known.
void checkMunge(const ServerOptions& s) {
  if (!s.munge) {
    if (!s.munge_socket.empty() || !s.admin_group.empty())
      throw badInput(std::string(s.admin_group.empty() ? "--munge-socket" : "--admin-group") +
                     " is for MUNGE users: give --munge too");
    return;
  }
  std::string why;
  std::shared_ptr<Munge> munge = Munge::open(why);
  if (!munge) throw badInput("--munge: " + why);
  MungeUsers check(munge, s.munge_socket, s.admin_group);
}

// The etcd options together; the files read now (an EtcdClient made and dropped connects to nothing).
void checkEtcdSecurity(const PooldOptions& o) {
  const EtcdSecurity& e = o.etcd_security;
  const bool any = e.tls() || !e.user.empty() || !e.password_file.empty();
  if (!any) return;
  if (o.store == "sqlite")
    throw badInput(
        "--etcd-ca, --etcd-cert, --etcd-key, --etcd-user and --etcd-password-file are for --store "
        "etcds://...: this poold keeps its state in SQLite");
  if (e.cert_file.empty() != e.key_file.empty())
    throw badInput(e.cert_file.empty() ? "--etcd-key without --etcd-cert: give both"
                                       : "--etcd-cert without --etcd-key: give both");
  if (e.password_file.empty() != e.user.empty())
    throw badInput(e.user.empty() ? "--etcd-password-file without --etcd-user: give both"
                                  : "--etcd-user without --etcd-password-file: give both");
  try {
    EtcdClient check(parseEtcdUri(o.store), std::chrono::milliseconds(1000), e);
  } catch (const Error& err) {
    throw badInput(err.what());
  }
}

// The TLS options together: read now, so that a wrong file stops poold before it opens its state.
void checkTls(PooldOptions& o) {
  ServerOptions& s = o.server;
  const bool tls = !s.tls_cert_file.empty() || !s.tls_key_file.empty();
  if (tls && (s.tls_cert_file.empty() || s.tls_key_file.empty()))
    throw badInput(s.tls_cert_file.empty()
                       ? "--tls-key without --tls-cert: give both (the certificate and its key)"
                       : "--tls-cert without --tls-key: give both (the certificate and its key)");
  if (!s.tls_client_ca_file.empty() && !tls)
    throw badInput(
        "--tls-client-ca needs --tls-cert and --tls-key: client certificates are asked for over HTTPS");
  if (tls) {
    if (o.insecure_http) throw badInput("--insecure-http with --tls-cert: choose one (HTTPS, or plain HTTP)");
    try {
      TlsServerContext check({s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file},
                             [](const std::string&) {});
    } catch (const Error& e) {
      throw badInput(e.what());
    }
  } else if (!isLoopback(s.host) && !o.insecure_http) {
    throw badInput("--listen " + s.host + ":" + std::to_string(s.port) +
                   " without TLS: bearer tokens would cross the network in clear; give --tls-cert FILE "
                   "--tls-key FILE, or --insecure-http to serve plain HTTP anyway");
  }
  if (!o.advertise.empty() && o.advertise.starts_with("https://") != tls)
    throw badInput(
        "--advertise " + o.advertise + " says " + (tls ? "http" : "https") + " but this poold serves " +
        (tls ? "HTTPS (--tls-cert): advertise https://" : "plain HTTP (no --tls-cert): advertise http://") +
        "HOST:PORT");
}

// --account-interval (10 s to a day), --fairshare-half-life (a minute to ten years), --usage-detail
// and --usage-retention (a day to 100 years).
void usageOption(PooldOptions& o, const std::string& a, const std::string& v) {
  const Range<int64_t> age{86'400, int64_t{36'600} * 86'400};
  if (a == "--account-interval")
    o.server.usage.interval = secondsIn(a, v, Range<int64_t>{10, 86'400});
  else if (a == "--fairshare-half-life")
    o.server.usage.half_life = secondsIn(a, v, Range<int64_t>{60, 3660 * 86'400});
  else if (a == "--usage-detail")
    o.server.usage.detail = secondsIn(a, v, age);
  else
    o.server.usage.retention = secondsIn(a, v, age);
}

// Every option but --help, --version and --node-timeout (which depends on the heartbeat interval).
const std::map<std::string, OptionRow>& optionTable() {
  using O = PooldOptions;
  using S = const std::string&;
  static const std::map<std::string, OptionRow> table = {
      {"--listen", {true, listen}},
      {"--state", {true, [](O& o, S, S v) { o.server.state_dir = v; }}},
      {"--token-file", {true, [](O& o, S, S v) { o.server.token_file = v; }}},
      {"--launch-key", {true, [](O& o, S, S v) { o.server.launch_key_file = v; }}},
      {"--tls-cert", {true, [](O& o, S, S v) { o.server.tls_cert_file = v; }}},
      {"--tls-key", {true, [](O& o, S, S v) { o.server.tls_key_file = v; }}},
      {"--tls-client-ca", {true, [](O& o, S, S v) { o.server.tls_client_ca_file = v; }}},
      {"--insecure-http", {false, [](O& o, S, S) { o.insecure_http = true; }}},
      {"--munge", {false, [](O& o, S, S) { o.server.munge = true; }}},
      {"--munge-socket", {true, [](O& o, S, S v) { o.server.munge_socket = v; }}},
      {"--admin-group", {true, [](O& o, S, S v) { o.server.admin_group = v; }}},
      {"--cluster", {true, [](O& o, S, S v) { o.cluster = v; }}},
      {"--sync", {true, sync}},
      {"--max-body", {true, [](O& o, S a, S v) { o.server.max_body_bytes = number(a, v, kMaxBodyRange); }}},
      {"--threads", {true, [](O& o, S a, S v) { o.server.threads = number(a, v, kThreadsRange); }}},
      {"--max-connections",
       {true, [](O& o, S a, S v) { o.server.max_connections = number(a, v, kConnectionsRange); }}},
      {"--max-connections-per-peer",
       {true, [](O& o, S a, S v) { o.server.max_connections_per_peer = number(a, v, kConnectionsRange); }}},
      {"--header-timeout",
       {true, [](O& o, S a, S v) { o.server.header_timeout = secondsIn(a, v, kRequestTimeoutRange); }}},
      {"--body-timeout",
       {true, [](O& o, S a, S v) { o.server.body_timeout = secondsIn(a, v, kRequestTimeoutRange); }}},
      {"--idle-timeout",
       {true, [](O& o, S a, S v) { o.server.idle_timeout = secondsIn(a, v, kIdleTimeoutRange); }}},
      {"--max-ttl", {true, [](O& o, S a, S v) { o.server.max_ttl = secondsIn(a, v, kTtlSecondsRange); }}},
      {"--max-user-priority",
       {true, [](O& o, S a, S v) { o.server.max_user_priority = number(a, v, kPriorityRange); }}},
      {"--max-queued-per-owner",
       {true, [](O& o, S a, S v) { o.server.max_queued_per_owner = number(a, v, kMaxQueuedPerOwnerRange); }}},
      {"--max-jobs-per-owner",
       {true,
        [](O& o, S a, S v) { o.server.jobs.max_active_per_owner = number(a, v, kMaxQueuedPerOwnerRange); }}},
      {"--job-retention",
       {true,
        [](O& o, S a, S v) {
          o.server.jobs.retention = secondsIn(a, v, Range<int64_t>{60, 3660 * 86'400});
        }}},
      {"--allow-root-jobs", {false, [](O& o, S, S) { o.server.jobs.allow_root = true; }}},
      {"--account-interval", {true, usageOption}},
      {"--usage-detail", {true, usageOption}},
      {"--usage-retention", {true, usageOption}},
      {"--heartbeat-interval",
       {true, [](O& o, S a, S v) { o.server.live.heartbeat_interval = secondsIn(a, v, kIntervalRange); }}},
      {"--history-interval",
       {true, [](O& o, S a, S v) { o.server.history_interval = secondsIn(a, v, kIntervalRange); }}},
      {"--idle-utilization",
       {true,
        [](O& o, S a, S v) {
          o.server.live.idle_utilization = number(a, v, Range<int>{0, 100}) / 100.0;
        }}},
      {"--idle-after",
       {true,
        [](O& o, S a, S v) {
          o.server.live.idle_after = secondsIn(a, v, Range<int64_t>{0, 366 * 86'400});
        }}},
      {"--reclaim-idle", {false, [](O& o, S, S) { o.server.live.reclaim_idle = true; }}},
      {"--reclaim-grace",
       {true, [](O& o, S a, S v) { o.server.live.reclaim_grace = secondsIn(a, v, kIdleTimeoutRange); }}},
      {"--preempt-grace",
       {true, [](O& o, S a, S v) { o.server.preempt.grace = secondsIn(a, v, kPreemptGraceRange); }}},
      {"--min-runtime",
       {true, [](O& o, S a, S v) { o.server.preempt.min_runtime = secondsIn(a, v, kPreemptSecondsRange); }}},
      {"--quotas", {true, quotas}},
      {"--accounts", {true, accounts}},
      {"--fairshare-half-life", {true, usageOption}},
      {"--metrics-token-file", {true, metricsToken}},
      {"--metrics-allow",
       {true,
        [](O& o, S a, S v) {
          parseAddressRanges(v, a);
          o.server.metrics_allow.push_back(v);
        }}},
      {"--metrics-host", {true, metricsHosts}},
      {"--store",
       {true,
        [](O& o, S, S v) {
          o.store = v;
          if (v != "sqlite") parseEtcdUri(v);
        }}},
      {"--etcd-prefix", {true, etcdPrefix}},
      {"--etcd-ca", {true, [](O& o, S, S v) { o.etcd_security.ca_file = v; }}},
      {"--etcd-cert", {true, [](O& o, S, S v) { o.etcd_security.cert_file = v; }}},
      {"--etcd-key", {true, [](O& o, S, S v) { o.etcd_security.key_file = v; }}},
      {"--etcd-user", {true, [](O& o, S, S v) { o.etcd_security.user = v; }}},
      {"--etcd-password-file", {true, [](O& o, S, S v) { o.etcd_security.password_file = v; }}},
      {"--advertise", {true, advertise}},
      {"--etcd-max-txn-ops",
       {true, [](O& o, S a, S v) { o.etcd_max_txn_ops = number(a, v, kEtcdTxnOpsRange); }}},
      {"--etcd-ttl", {true, [](O& o, S a, S v) { o.etcd_ttl = secondsIn(a, v, kEtcdTtlRange); }}},
  };
  return table;
}

}  // namespace

PooldOptions::PooldOptions() : etcd_max_txn_ops(EtcdStore::kEtcdDefaultMaxTxnOps) {}

std::string pooldUsage() {
  const ServerOptions d;
  return serverHelp(d) + liveHelp(d) + replicaHelp();
}

PooldOptions parsePooldOptions(const std::vector<std::string>& args) {
  PooldOptions o;
  std::optional<std::chrono::seconds> nodeTimeout;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw badInput(a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h" || a == "--version") {
      o.action = a == "--version" ? PooldOptions::Action::kVersion : PooldOptions::Action::kHelp;
      return o;
    }
    if (a == "--node-timeout") {
      nodeTimeout = secondsIn(a, value(), kIdleTimeoutRange);
      continue;
    }
    auto row = optionTable().find(a);
    if (row == optionTable().end()) throw badInput("unknown option '" + a + "'");
    if (row->second.takes_value)
      row->second.set(o, a, value());
    else
      row->second.set(o, a, "");
  }
  LiveOptions& live = o.server.live;
  live.node_timeout = nodeTimeout.value_or(3 * live.heartbeat_interval);
  if (live.node_timeout <= live.heartbeat_interval)
    throw badInput("--node-timeout " + std::to_string(live.node_timeout.count()) +
                   " is not longer than the heartbeat interval (" +
                   std::to_string(live.heartbeat_interval.count()) +
                   " s): every node would be unreachable between two heartbeats");
  const UsageOptions& usage = o.server.usage;
  if (usage.detail > usage.retention)
    throw badInput("--usage-detail " + std::to_string(usage.detail.count()) +
                   " is longer than --usage-retention " + std::to_string(usage.retention.count()) +
                   ": rows would be forgotten before they are folded into days; give a detail no longer than "
                   "the retention");
  checkTls(o);
  checkEtcdSecurity(o);
  checkMunge(o.server);
  return o;
}

}  // namespace poolrun::pool
