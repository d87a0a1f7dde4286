#pragma once

// poold's engine: the pool for many nodes behind an HTTP/JSON API (see pool/README.md for the
// routes). State lives in memory and in DIR/pool.sqlite; every change is committed (group commit:
// the changes of concurrent requests share one transaction) before any reply that depends on it.

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/pool/state_store.hpp"
#include "poolrun/pool/store.hpp"

namespace poolrun::pool {

// Runs `fn` on the pool's state under its lock (a read: fn must not keep the reference).
using StateReader = std::function<void(const std::function<void(const PoolState&)>& fn)>;

// What a route's handler does with the pool's state, as its row of the route table declares: nothing
// (it takes no lock: the dashboard's files, the event log), reads it under the state's lock, or
// changes it (under the lock, and its reply waits for the change's commit; a long poll is one: a
// poll is a sign of life). A handler that takes more than its row says is refused as a bug in poold
// (500 internal), so the table is what the routes do.
enum class StateLock { kNone, kRead, kChange };

// A route that whoever builds the server adds to poold's API (the dashboard's: pool/dashboard):
// tried after poold's own, with the same token and role checks where `needs_token`.
struct ServerRoute {
  std::string method;       // "GET", ...; "*": any (the handler answers a method it does not take)
  std::string pattern;      // "/v1/history": a * is any one segment; "/" the root; "/ui/**": any rest
  bool needs_token = true;  // false: anyone's, served without a token, also while a replica does not lead
  std::string label;        // for metrics; empty: the pattern's first two segments
  // The reply to `req` from `who` (nobody, without a token). Throws as a route does (poolrun::Error
  // by its code: http_failures.hpp).
  std::function<HttpReply(const HttpRequest& req, const Caller& who, const StateReader& read)> handler;
  StateLock lock = StateLock::kRead;  // kNone where the handler never calls `read`
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 7450;  // 0: any free port (bind() returns it)
  std::filesystem::path state_dir;
  std::filesystem::path token_file;
  // The key launch credentials are signed with (launch_credential.hpp); empty: DIR/launch-key.pem,
  // made where there is none.
  std::filesystem::path launch_key_file;
  // HTTPS (HttpServerOptions has what each does): certificate and key, PEM files taken again when
  // they change; with a client CA, a node's token is taken only with a certificate for that node.
  std::filesystem::path tls_cert_file, tls_key_file, tls_client_ca_file;
  // MUNGE (munge_users.hpp): requests with `Authorization: MUNGE CREDENTIAL` are the credential's
  // user, decoded by the munged at munge_socket (empty: munge's default); administrators are the
  // members of admin_group (empty: none).
  bool munge = false;
  std::string munge_socket;
  std::string admin_group;
  Durability durability = Durability::kNormal;
  size_t max_body_bytes = size_t{1} << 20;  // however the body is framed (Content-Length or chunked)
  // Workers that run requests. Idle and slow connections hold none; a queued client's long poll
  // holds one for up to a second, so there are enough for many waiting clients and the renewals.
  int threads = 64;
  std::chrono::seconds stale_after{30};

  // Limits against hostile or broken clients. A connection past either count is closed at once.
  int max_connections = 4096;                       // open at once, in total
  int max_connections_per_peer = 1024;              // open at once from one IP address
  std::chrono::milliseconds header_timeout{10000};  // from a request's first byte to its last header
  std::chrono::milliseconds body_timeout{30000};    // for the whole body, once the headers are in
  std::chrono::seconds idle_timeout{60};            // a kept-alive connection with no request

  // What a client may ask for: longer TTLs get 400; priorities above max_user_priority are refused
  // for the `user` role (administrators may use any priority in the request's range).
  std::chrono::seconds max_ttl{3600};
  int max_user_priority = 100;
  // Entries one owner may have in the queue (PoolState::queuedBy): a request that would be queued
  // past it gets 429 (one that starts at once is granted). Counted from the stored queue, so a
  // restart or a failover keeps it.
  size_t max_queued_per_owner = 1000;

  // Detached jobs (poolrun/pool/job_book.hpp): the cap per owner, the retention, root.
  JobOptions jobs;
  // The usage ledger (poolrun/pool/usage.hpp): --account-interval, --usage-detail, --usage-retention.
  UsageOptions usage;
  // Heartbeats, node timeout, idle leases (poolrun/pool/state.hpp).
  LiveOptions live;
  PreemptOptions preempt;
  // Quotas (poolrun/pool/quotas.hpp): read at start (a bad file stops poold from starting) and
  // again whenever it changes (a bad version is named and the quotas before it kept). Empty: none.
  std::filesystem::path quotas_file;
  // The account tree, fair share and the priority's weights (poolrun/pool/accounts.hpp): read at
  // start and again whenever it changes, as the quotas file. Empty: none (the queue is ordered by
  // priority and arrival).
  std::filesystem::path accounts_file;

  // Who may read /metrics besides users and administrators: whoever sends the token of this file
  // (one token, which reads /metrics only), and clients from these addresses or prefixes
  // ("10.0.0.0/8", "127.0.0.1/32", "::1/128") without a token. A bad one throws kBadInput.
  std::filesystem::path metrics_token_file;
  std::vector<std::string> metrics_allow;
  // The names a client from a --metrics-allow address may send as its Host to read /metrics without
  // a token, besides an IP address, localhost, `host` and this machine's name (poold --metrics-host
  // and --advertise's host): a page of another site rebound to poold's address sends its own.
  std::vector<std::string> metrics_hosts;

  // The dashboard's history charts (GET /v1/history, added by addDashboard): a sample of the pool's
  // use every history_interval, the last history_samples kept in memory (56 bytes each: 6 hours at
  // 10 s in about 120 KiB). Not read by the server itself.
  std::chrono::seconds history_interval{10};
  size_t history_samples = 2160;
  // Where the pool's state lives: empty, DIR/pool.sqlite (with `durability`); else the store this
  // opens (poold --store etcd://: an EtcdStore fenced on this replica's leadership).
  std::function<std::unique_ptr<StateStore>()> open_store;
  // Whether this replica may answer now (etcd: it leads and its lease is current); empty: always.
  // While it may not, every request but GET /healthz gets 503 saying so: a replica that lost its
  // leadership serves nothing stale.
  std::function<bool()> serving;
  // More of /metrics (Prometheus text, whole lines with their HELP and TYPE): the replica's.
  std::function<std::string()> more_metrics;
  // GET /v1/replicas: {"store", "replicas": [{"url", "leader"}], "etcd": [{"endpoint", "reachable",
  // "leader", "version", "error"}]}; empty: 404 (one server, no replicas).
  std::function<std::string()> replicas;
  // More routes (the dashboard's), tried after poold's own, and what its ticker does besides its own
  // work, every 250 ms (the dashboard's history sampling).
  std::vector<ServerRoute> routes;
  std::vector<std::function<void(const StateReader& read)>> on_tick;
};

// Parses a token file: one `TOKEN OWNER ROLE` line per token, ROLE user, admin or node, `#`
// comments. TOKEN is 8 to 512 printable ASCII characters; OWNER letters, digits, '.', '_', '-'
// and '@' (role node: a node name).
// A malformed line is described as "FILE:LINE: what" in `warnings` and skipped; without
// `warnings`, it throws poolrun::Error (kBadInput) with that text instead.
std::map<std::string, Caller> parseTokenFile(const std::string& text, const std::string& file,
                                             std::vector<std::string>* warnings = nullptr);

class PoolServer {
 public:
  // Takes DIR/poold.lock (one poold per state directory), opens and loads the state, reads the
  // token file. Throws poolrun::Error naming what is wrong.
  explicit PoolServer(ServerOptions options);
  ~PoolServer();
  PoolServer(const PoolServer&) = delete;
  PoolServer& operator=(const PoolServer&) = delete;

  void registerNodes(const std::vector<topo::ClusterNode>& nodes);
  int bind();  // binds host:port; returns the port. Throws kIo when it cannot.
  void run();  // serves until stop()
  void stop();

  // Answers one request as the server would, without the network (tests and the fuzz target).
  HttpReply handle(const HttpRequest& request);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace poolrun::pool
