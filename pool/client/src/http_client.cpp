// PoolClient for a poold: JSON over HTTP with a bearer token.

#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "poolrun/common/http_connection.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/nesting.hpp"
#include "poolrun/common/tls_client.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/http_failures.hpp"
#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/munge.hpp"
#include "poolrun/pool/queue_wait.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/pool/usage_json.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A path segment as RFC 3986 lets it through unchanged: unreserved characters as they are, every
// other byte %XX. Names and lease ids are checked before they get here, but a segment must never be
// able to end the path, start a query or a header line ("L1\r\nX-Injected: 1").
std::string segment(std::string_view text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += c;
    } else {
      unsigned char b = static_cast<unsigned char>(c);
      out += '%';
      out += hex[b >> 4];
      out += hex[b & 0xf];
    }
  }
  // "." and ".." are path steps, not names.
  if (out == ".") return "%2E";
  if (out == "..") return "%2E%2E";
  return out;
}

struct Timeouts {
  milliseconds connect{5000}, io{30000};  // HttpConnection's defaults
};

// How long a call keeps trying the replicas of a pool that has several (poold --store etcd):
// longer than a failover takes (the leader's etcd lease, 5 s by default, and the standby's poll).
constexpr milliseconds kFailoverBudget(15000);

// Both a pool client and a node agent's link: one connection, one way to call poold. With several
// replicas, the connection is to the one that last answered as the leader; a call that finds it
// gone (no connection, 503 not_leader or no_leader) tries the next, and follows a standby's
// redirect (307) to the leader where that is a replica it knows.
class HttpPool : public PoolControl, public AgentLink {
 public:
  HttpPool(std::string uri, std::vector<HttpAddress> replicas, const ClientOptions& options)
      : uri_(std::move(uri)),
        token_(options.token),
        replicas_(std::move(replicas)),
        named_(replicas_.size()) {
    if (token_.empty()) useMunge(options.munge_socket);
    // The files are read now: a wrong --ca is said before anything is asked of the pool.
    if (!replicas_.empty() && replicas_.front().tls)
      tls_ = common::tlsClient({options.ca_file, options.cert_file, options.key_file});
    // Sent as it is in a header: a control character or a byte past ASCII would corrupt the
    // request, and poold knows no token outside these bounds (a --token-file is checked as read).
    if (!token_.empty() && !validToken(token_))
      throw badInput("the token for " + uri_ + " (from POOLRUN_TOKEN) must be 8 to 512 printable ASCII " +
                     "characters, not " + tokenProblem(token_) +
                     "; set it to the token poold gave you, or use --token-file");
    connect(0);
  }

  Lease acquire(const LeaseRequest& request,
                const std::function<void(const QueueProgress&)>& queued) override {
    const auto start = Steady::now();
    // The request id makes a retried POST (its reply lost on a reused connection) idempotent.
    json body = toJson(request);
    body["request_id"] = newLeaseId();
    json reply;
    try {
      reply = call("POST", "/v1/leases", body);
    } catch (const PoolError& e) {  // 409 not_now: wait_s 0 and it does not fit now
      if (e.failure() == PoolFailure::kTimeout) throw queueTimeout(request, e.position(), uri_);
      throw;
    }
    if (reply.contains("lease")) return keepUnlessInterrupted(leaseFromJson(reply["lease"]));
    int64_t ticket = reply.value("ticket", int64_t{0});
    const uint64_t movesAtSubmit = moves_;
    int position = reply.value("position", 0);
    if (ticket == 0) throw queueTimeout(request, position, uri_);  // a poold before 409 not_now
    const std::string path = "/v1/queue/" + segment(std::to_string(ticket));
    ProgressPacer pacer;
    // The first poll answers at once, so that the caller hears the reason and planned start; the
    // next ones wait up to a second for a change, so that a signal is seen within about a second.
    milliseconds slice(0);
    std::string reason;  // the last poll's: a --wait that runs out says why it waited
    for (;;) {
      if (pendingInterrupt() != 0) {
        std::string did = "withdrew the queued request (ticket " + std::to_string(ticket) + ")";
        try {
          call("DELETE", path, nullptr);
        } catch (const Error& e) {
          did = "could not withdraw the queued request (ticket " + std::to_string(ticket) + ": " + e.what() +
                "; poold drops it 30 s after its last poll)";
        }
        throw interrupted(did);
      }
      if (request.wait) {
        auto left = std::chrono::duration_cast<milliseconds>(*request.wait - (Steady::now() - start));
        if (left <= milliseconds(0)) {
          call("DELETE", path, nullptr);
          throw queueTimeout(request, position, uri_, reason);
        }
        slice = std::min(slice, left);
      }
      json p;
      const auto asked = Steady::now();
      const int before = position;
      try {
        p = call("GET",
                 path + "?wait_ms=" + std::to_string(slice.count()) + "&position=" + std::to_string(position),
                 nullptr);
      } catch (const PoolError& e) {
        // The leader that granted the ticket, and removed it as the grant was polled, died before
        // its reply came: the new leader knows no such ticket. The request starts again (the lease
        // granted then, which nobody holds, expires at its TTL).
        if (e.code() != ErrorCode::kNotFound || moves_ == movesAtSubmit) throw;
        return acquire(request, queued);
      }
      // A poll answered at once with nothing new, where it asked to wait: poold had no long poll to
      // spare (its workers are for renewals and acquires first); the next one a little later.
      const bool atOnce = slice > milliseconds(0) && Steady::now() - asked < milliseconds(100);
      slice = milliseconds(1000);
      std::string status = p.value("status", "");
      if (status == "granted") return keepUnlessInterrupted(leaseFromJson(p.at("lease")));
      if (status == "failed")
        throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported, p.value("error", "request failed"));
      position = p.value("position", position);
      QueueProgress progress{
          ticket, position, std::chrono::duration_cast<seconds>(Steady::now() - start),
          p.contains("reason") && p["reason"].is_string() ? p["reason"].get<std::string>() : "",
          std::nullopt};
      try {
        if (p.contains("planned_start_ms") && p["planned_start_ms"].is_number_integer())
          progress.planned_start = fromMillis(p["planned_start_ms"].get<int64_t>());
      } catch (const Error&) {  // a time out of range: no planned start to tell
      }
      reason = progress.reason;
      if (queued && pacer.due(progress, Steady::now())) queued(progress);
      if (atOnce && position == before) std::this_thread::sleep_for(milliseconds(250));
    }
  }

  // A launcher retries a renewal that does not get through until the lease expires (README, poolrun
  // step 4): an attempt is kept short, so that the next one comes while the lease still holds.
  Lease renew(const std::string& id) override {
    return leaseFromJson(call("POST", "/v1/leases/" + segment(id) + "/renew", json::object(),
                              {milliseconds(2000), milliseconds(5000)})
                             .at("lease"));
  }
  Lease shrink(const std::string& id) override {
    return leaseFromJson(call("POST", "/v1/leases/" + segment(id) + "/shrink", json::object(),
                              {milliseconds(2000), milliseconds(5000)})
                             .at("lease"));
  }
  bool release(const std::string& id) override {
    json reply = call("DELETE", "/v1/leases/" + segment(id), nullptr);
    // An older poold's reply may lack "released": then the lease counts as held.
    return !(reply.is_object() && reply.contains("released") && reply["released"].is_boolean()) ||
           reply["released"].get<bool>();
  }
  topo::ClusterNode node(const std::string& name) override {
    return clusterNodeFromJson(call("GET", "/v1/nodes/" + segment(name), nullptr));
  }
  std::string describe() const override { return uri_; }
  RankSite rankSite() const override { return RankSite::kRemoteNodes; }

  PoolStatus status() override { return statusFromJson(call("GET", "/v1/status", nullptr)); }
  std::vector<NodeInfo> nodes() override {
    std::vector<NodeInfo> out;
    for (const json& n : call("GET", "/v1/nodes", nullptr)) out.push_back(nodeInfoFromJson(n));
    return out;
  }
  std::vector<Lease> leases() override {
    std::vector<Lease> out;
    for (const json& l : call("GET", "/v1/leases", nullptr)) out.push_back(leaseFromJson(l));
    return out;
  }
  std::vector<QueueInfo> queue() override {
    std::vector<QueueInfo> out;
    for (const json& q : call("GET", "/v1/queue", nullptr)) out.push_back(queueInfoFromJson(q));
    return out;
  }
  std::vector<QuotaUse> quotas() override {
    std::vector<QuotaUse> out;
    for (const json& q : call("GET", "/v1/quotas", nullptr)) out.push_back(quotaUseFromJson(q));
    return out;
  }
  void registerNodes(const std::vector<topo::ClusterNode>& nodes) override {
    // One node per request keeps every body far below poold's size limit.
    for (const topo::ClusterNode& n : nodes)
      call("POST", "/v1/nodes", json{{"nodes", json::array({toJson(n)})}});
  }
  void drain(const std::string& node) override {
    call("POST", "/v1/nodes/" + segment(node) + "/drain", json::object());
  }
  void resume(const std::string& node) override {
    call("POST", "/v1/nodes/" + segment(node) + "/resume", json::object());
  }
  std::optional<PoolReplicas> replicas() override {
    json doc;
    try {
      doc = call("GET", "/v1/replicas", nullptr);
    } catch (const PoolError& e) {
      if (e.code() == ErrorCode::kNotFound) return std::nullopt;  // one server
      throw;
    }
    PoolReplicas out;
    out.store = doc.value("store", "");
    for (const json& r : doc.value("replicas", json::array()))
      out.replicas.push_back({r.value("url", ""), r.value("leader", false)});
    for (const json& m : doc.value("etcd", json::array()))
      out.etcd.push_back({m.value("endpoint", ""), m.value("reachable", false), m.value("leader", false),
                          m.value("version", ""), m.value("error", "")});
    return out;
  }
  void failGpu(const std::string& node, size_t index) override {
    call("POST", "/v1/nodes/" + segment(node) + "/gpus/" + segment(std::to_string(index)) + "/fail",
         json::object());
  }
  void setMigLayout(const std::string& node, size_t gpu, const std::vector<std::string>& profiles) override {
    call("POST", "/v1/nodes/" + segment(node) + "/gpus/" + segment(std::to_string(gpu)) + "/mig",
         json{{"profiles", profiles}});
  }

  JoinTokenMade createJoinToken(std::chrono::seconds life) override {
    json r = call("POST", "/v1/node-tokens", json{{"expires_s", life.count()}});
    return {r.value("token", ""), r.value("id", ""), r.value("expires", "")};
  }
  NodeTokens nodeTokens() override {
    json doc = call("GET", "/v1/node-tokens", nullptr);
    NodeTokens out;
    for (const json& t : doc.value("tokens", json::array()))
      out.tokens.push_back({t.value("id", ""), t.value("created_by", ""), t.value("created", ""),
                            t.value("expires", ""), t.value("state", ""), t.value("node", ""),
                            t.value("used", "")});
    for (const json& n : doc.value("nodes", json::array()))
      out.nodes.push_back({n.value("node", ""), n.value("joined", ""), n.value("token", ""),
                           n.value("revoked_by", ""), n.value("revoked", "")});
    return out;
  }
  void revokeNode(const std::string& node) override {
    call("DELETE", "/v1/nodes/" + segment(node) + "/credential", nullptr);
  }

  // A node agent retries what does not get through, at its own pace: an attempt is kept short.
  void registerNode(const NodeRegistration& registration) override {
    call("POST", "/v1/nodes/" + segment(registration.node.name) + "/register", toJson(registration),
         {milliseconds(2000), milliseconds(10000)});
  }
  bool join(const std::string& node, const std::string& token, const std::string& credential) {
    json reply =
        call("POST", "/v1/nodes/" + segment(node) + "/join",
             json{{"token", token}, {"credential", credential}}, {milliseconds(2000), milliseconds(10000)});
    return !reply.value("again", false);
  }
  std::string launchKey(const std::string& node) override {
    return call("GET", "/v1/nodes/" + segment(node) + "/launch-key", nullptr,
                {milliseconds(2000), milliseconds(10000)})
        .at("key")
        .get<std::string>();
  }
  LaunchCredentials launchCredentials(const std::string& id) override {
    const json reply = call("POST", "/v1/leases/" + segment(id) + "/launch", json::object());
    LaunchCredentials out;
    out.lease = reply.at("lease").get<std::string>();
    out.expires = reply.at("expires").get<int64_t>();
    for (const json& n : reply.at("nodes"))
      out.nodes.push_back({n.at("node").get<std::string>(),
                           n.at("agent").is_string() ? n.at("agent").get<std::string>() : "",
                           n.at("credential").get<std::string>()});
    return out;
  }
  NodeJobWork jobWork(const std::string& node) override {
    return nodeJobWorkFromJson(call("GET", "/v1/nodes/" + segment(node) + "/jobs", nullptr,
                                    {milliseconds(2000), milliseconds(10000)}));
  }
  bool awaitJobs(const std::string& node, milliseconds wait) override {
    const json reply =
        call("GET", "/v1/nodes/" + segment(node) + "/jobs/wait?wait_ms=" + std::to_string(wait.count()),
             nullptr, {milliseconds(2000), wait + milliseconds(10000)});
    return reply.value("work", false);
  }
  void reportJob(const std::string& node, const std::string& id, const JobReport& report) override {
    call("POST", "/v1/nodes/" + segment(node) + "/jobs/" + segment(id), toJson(report),
         {milliseconds(2000), milliseconds(10000)});
  }

  SubmittedJob submitJob(const JobSubmission& job) override {
    const json reply = call("POST", "/v1/jobs", toJson(job));
    SubmittedJob out;
    out.id = reply.at("job").get<std::string>();
    out.tasks = reply.at("tasks").get<std::vector<std::string>>();
    return out;
  }
  std::vector<JobView> jobs(const JobQuery& q) override {
    std::string query;
    auto add = [&query](const char* key, const std::string& value) {
      if (!value.empty()) query += (query.empty() ? "?" : "&") + std::string(key) + "=" + segment(value);
    };
    add("user", q.user);
    add("state", q.state);
    add("name", q.name);
    if (q.ended) add("ended", "true");
    if (q.ended_after) add("ended_after_ms", std::to_string(toMillis(*q.ended_after)));
    if (q.ended_before) add("ended_before_ms", std::to_string(toMillis(*q.ended_before)));
    return jobViews(call("GET", "/v1/jobs" + query, nullptr));
  }
  std::vector<UsageTotals> usage(const UsageQuery& q) override {
    std::string target = "/v1/usage?by=" + toString(q.by);
    if (q.since != TimePoint{}) target += "&since_ms=" + std::to_string(toMillis(q.since));
    if (q.until != kNever) target += "&until_ms=" + std::to_string(toMillis(q.until));
    const json reply = call("GET", target, nullptr);
    std::vector<UsageTotals> out;
    for (const json& row : reply.at("rows")) out.push_back(usageTotalsFromJson(row));
    return out;
  }
  FairShareReport fairShare() override {
    return fairShareReportFromJson(call("GET", "/v1/fairshare", nullptr));
  }
  std::vector<Reservation> reservations() override {
    const json reply = call("GET", "/v1/reservations", nullptr);
    std::vector<Reservation> out;
    for (const json& r : reply) out.push_back(reservationFromJson(r));
    return out;
  }
  Reservation reserve(const ReservationRequest& r) override {
    json body = {{"name", r.name},
                 {"nodes", r.nodes},
                 {"duration_s", r.duration.count()},
                 {"users", r.users},
                 {"accounts", r.accounts}};
    if (r.start) body["start_ms"] = toMillis(*r.start);
    return reservationFromJson(call("POST", "/v1/reservations", body));
  }
  void unreserve(const std::string& name) override {
    call("DELETE", "/v1/reservations/" + segment(name), nullptr);
  }
  std::vector<JobView> job(const std::string& id) override {
    return jobViews(call("GET", "/v1/jobs/" + segment(id), nullptr));
  }
  std::vector<std::string> cancelJob(const std::string& id, int signal) override {
    return call("POST", "/v1/jobs/" + segment(id) + "/cancel", json{{"signal", signal}})
        .at("cancelled")
        .get<std::vector<std::string>>();
  }

  HeartbeatReply heartbeat(const Heartbeat& heartbeat) override {
    return heartbeatReplyFromJson(call("POST", "/v1/nodes/" + segment(heartbeat.node) + "/heartbeat",
                                       toJson(heartbeat), {milliseconds(2000), milliseconds(5000)}));
  }

 private:
  static std::vector<JobView> jobViews(json docs) {
    std::vector<JobView> out;
    for (json& doc : docs) {
      JobView v;
      if (doc.contains("planned_start_ms") && doc["planned_start_ms"].is_number_integer())
        v.planned_start = fromMillis(doc["planned_start_ms"].get<int64_t>());
      v.wait_reason = doc.value("wait_reason", "");
      if (doc.contains("usage")) v.usage = usageTotalsFromJson(doc["usage"]);
      doc.erase("planned_start_ms");
      doc.erase("wait_reason");
      doc.erase("usage");
      v.record = jobFromJson(doc);
      out.push_back(std::move(v));
    }
    return out;
  }

  // A lease granted as a signal came is given back at once.
  Lease keepUnlessInterrupted(const Lease& lease) {
    if (pendingInterrupt() == 0) return lease;
    try {
      release(lease.id);
    } catch (const Error& e) {
      throw interrupted("could not release lease " + lease.id + ", granted as the wait was interrupted (" +
                        e.what() + "; it expires at the end of its ttl)");
    }
    throw interrupted("released lease " + lease.id + " (granted as the wait was interrupted)");
  }

  void connect(size_t replica) {
    current_ = replica;
    connection_ =
        std::make_unique<HttpConnection>(replicas_[replica].host, replicas_[replica].port, token_, tls_);
    if (authorizer_) connection_->setAuthorizer(authorizer_);
  }

  // No token: each request carries a MUNGE credential made for it, where this node runs munged.
  // Where none can be made, the request goes without, and a refusal (401) says why.
  void useMunge(std::string socket) {
    if (socket.empty()) {
      const char* env = std::getenv("POOLRUN_MUNGE_SOCKET");
      if (env != nullptr) socket = env;
    }
    std::string why;
    std::shared_ptr<Munge> munge = Munge::open(why);
    if (!munge) {
      munge_problem_ = why;
      return;
    }
    // A credential with a connection's first request; the connection's later requests are its
    // user's (poold remembers whose it is), which spares a munged round trip on each side.
    authorizer_ = [this, munge, socket](const std::string& method, const std::string& target,
                                        bool first) -> std::string {
      same_connection_ = !first && munge_problem_.empty();
      if (same_connection_) return kMungeSameConnection;
      try {
        munge_problem_.clear();
        return "MUNGE " + munge->encode(mungePayload(method, target), socket);
      } catch (const Error& e) {
        munge_problem_ = e.what();
        return "";
      }
    };
  }

  // The index of `a` among the replicas known; replicas_.size() where it is none of them.
  size_t known(const HttpAddress& a) const {
    for (size_t i = 0; i < replicas_.size(); ++i)
      if (replicas_[i].host == a.host && replicas_[i].port == a.port && replicas_[i].tls == a.tls) return i;
    return replicas_.size();
  }

  // The replica a redirect from `at` names. The token goes only to the replicas the user named and
  // to those a named replica that leads lists (GET /v1/replicas) for the same pool: a redirect to any
  // other origin is refused, never followed (a standby, or anything in its place, could otherwise
  // send the token anywhere).
  size_t replicaOf(const std::string& location, const std::string& at, const std::string& method,
                   const std::string& path) {
    // A path alone is the same origin; "//host/..." is another host's.
    if (location.starts_with("/") && !location.starts_with("//")) return current_;
    const size_t slash = location.find("//") == std::string::npos
                             ? std::string::npos
                             : location.find('/', location.find("//") + 2);
    const std::string origin = location.substr(0, slash);
    std::optional<HttpAddress> a;
    try {
      if (isPooldUri(origin)) a = parseHttpUri(origin);
    } catch (const Error&) {
    }
    if (a && tls_ && !a->tls)
      throw PoolError(
          PoolFailure::kOther, ErrorCode::kIo,
          at + " redirected " + method + " " + path.substr(0, path.find('?')) + " to '" +
              common::printable(location.substr(0, 200)) +
              "', plain HTTP: not followed, so that the token does not cross the network in clear");
    if (a && known(*a) < replicas_.size()) return known(*a);
    if (a && listedByALeader(*a)) {
      replicas_.push_back(*a);
      return replicas_.size() - 1;
    }
    throw PoolError(PoolFailure::kOther, ErrorCode::kIo,
                    at + " redirected " + method + " " + path.substr(0, path.find('?')) + " to '" +
                        common::printable(location.substr(0, 200)) + "', which is no replica named in " +
                        uri_ +
                        " nor one the pool's leader lists: not followed, so that the token is not sent "
                        "there; if it is a replica of this pool, name it in --pool (or POOLRUN_POOL) "
                        "with the others");
  }

  // Whether a named replica that leads (it answers GET /v1/replicas itself; a standby redirects)
  // lists `a` among the replicas of its pool.
  bool listedByALeader(const HttpAddress& a) {
    for (size_t i = 0; i < named_; ++i) {
      try {
        HttpConnection c(replicas_[i].host, replicas_[i].port, token_, tls_);
        if (authorizer_) c.setAuthorizer(authorizer_);
        c.connect_timeout = milliseconds(2000);
        c.io_timeout = milliseconds(5000);
        HttpResponse r = c.request("GET", "/v1/replicas", "");
        if (r.status != 200) continue;
        for (const json& replica : json::parse(r.body).value("replicas", json::array())) {
          HttpAddress listed = parseHttpUri(replica.value("url", ""));
          if (listed.host == a.host && listed.port == a.port && listed.tls == a.tls) return true;
        }
      } catch (const std::exception&) {  // unreachable, not JSON, a bad URL: no list from it
      }
    }
    return false;
  }

  // Every call is safe to repeat: reads, release, renew and the admin commands are idempotent,
  // acquire carries a request id that poold answers again with the same lease.
  json call(const std::string& method, const std::string& path, const json& body, Timeouts timeouts = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    const HttpResponse reply = send(method, path, body.is_null() ? std::string() : body.dump(), timeouts);
    return readReply(method, path, reply);
  }

  // The request to the replica that answers it (mu_ held): across a failover, a standby's redirect,
  // an election, for up to kFailoverBudget.
  HttpResponse send(const std::string& method, const std::string& path, const std::string& text,
                    Timeouts timeouts) {
    const bool several = replicas_.size() > 1;
    // The budget is the whole call's, whatever one attempt's timeout: a failover is waited for up to
    // kFailoverBudget (docs/ha.md), not up to the 30 s an attempt may take.
    const auto deadline = Steady::now() + kFailoverBudget;
    const std::string budget =
        std::to_string(std::chrono::duration_cast<seconds>(kFailoverBudget).count()) + " s";
    const size_t from = current_;
    std::string why;      // why the call left the replica it started on
    std::string refusal;  // what the last replica that answered 503 said
    HttpResponse reply;
    int redirects = 0;
    bool renewedMunge = false;  // a new connection made for a forgotten MUNGE user
    for (int attempt = 0, round = 0;; ++attempt) {
      connection_->connect_timeout = timeouts.connect;
      connection_->io_timeout = timeouts.io;
      const std::string at = originOf(replicas_[current_]);
      try {
        reply = connection_->request(method, path, text);
      } catch (const HttpFailed& e) {
        // A refused certificate, or a server that speaks no TLS: trying again will not cure it.
        if (e.kind() == HttpFailed::Kind::kRefused)
          throw PoolError(PoolFailure::kOther, ErrorCode::kIo, "cannot use poold at " + at + ": " + e.what());
        // A kept-alive connection can fail once where a fresh one succeeds.
        if (attempt == 0 && e.kind() == HttpFailed::Kind::kTransfer) continue;
        if (several && Steady::now() >= deadline && !refusal.empty())
          throw PoolError(
              PoolFailure::kOther, ErrorCode::kIo,
              "no replica of the pool at " + uri_ + " could answer within " + budget + ": " + refusal);
        if (!several || Steady::now() >= deadline)
          throw PoolError(PoolFailure::kOther, ErrorCode::kIo,
                          "cannot reach poold at " + (several ? uri_ + " (last " + at + ")" : uri_) + " (" +
                              e.what() + "); is it running and listening there?");
        if (why.empty()) why = at + ": " + e.what();
        if ((++round) % replicas_.size() == 0) std::this_thread::sleep_for(milliseconds(200));
        // A standby may redirect to a leader that just died (its key outlives it by the TTL).
        redirects = 0;
        connect((current_ + 1) % replicas_.size());
        continue;
      }
      // A connection poold no longer knows the MUNGE user of (it forgot it, or it is another poold
      // now): once more on a new connection, whose first request carries a credential.
      if (reply.status == 401 && same_connection_ && !renewedMunge) {
        renewedMunge = true;
        connect(current_);
        continue;
      }
      // A standby names the leader: 307 to it, or 503 while there is none.
      if ((reply.status == 307 || reply.status == 308) && !reply.location.empty() && ++redirects <= 5 &&
          Steady::now() < deadline) {
        connect(replicaOf(reply.location, at, method, path));
        continue;
      }
      // 503 from a replica: no_leader (an election is under way: wait for it, even with one URL),
      // not_leader (a leader whose etcd lease lapsed) and etcd_unavailable (a standby that cannot
      // reach etcd): try the other replicas.
      if (reply.status == 503 && Steady::now() < deadline) {
        std::string reason;
        try {
          json doc = json::parse(reply.body);
          reason = doc.value("reason", "");
          if (reason == "no_leader" || reason == "not_leader" || reason == "etcd_unavailable")
            refusal = at + ": " + doc.value("error", "");
        } catch (const json::exception&) {
        }
        if (reason == "no_leader" || (several && (reason == "not_leader" || reason == "etcd_unavailable"))) {
          if (why.empty()) why = at + ": " + reason;
          if (reason == "no_leader" || (++round) % replicas_.size() == 0)
            std::this_thread::sleep_for(milliseconds(200));
          connect((current_ + 1) % replicas_.size());
          continue;
        }
      }
      // Refused to the end of the budget: by every replica (or the one, with no leader).
      if (reply.status == 503 && !refusal.empty() && Steady::now() >= deadline)
        throw PoolError(
            PoolFailure::kOther, ErrorCode::kIo,
            "no replica of the pool at " + uri_ + " could answer within " + budget + ": " + refusal);
      break;
    }
    // One line when the pool's leader moved under a client that had one (a renewal across a
    // failover), not when a first call finds the leader.
    if (current_ != from && !why.empty()) ++moves_;
    if (current_ != from && answered_ && !why.empty())
      std::cerr << "poolrun: the pool's leader is now " << originOf(replicas_[current_]) << " (" << why
                << ")\n";
    answered_ = true;
    return reply;
  }

  // The reply's JSON document where its status is 2xx; else the PoolError of its row of the table of
  // failures (http_failures.hpp), as poold sent it.
  json readReply(const std::string& method, const std::string& path, const HttpResponse& reply) const {
    json doc;
    try {
      // A reply nested past any the API sends is not read as JSON (nor dumped, which recurses).
      if (common::jsonTooDeepAt(reply.body, common::kMaxJsonDepth))
        doc = json{
            {"error", "a reply nested deeper than " + std::to_string(common::kMaxJsonDepth) + " levels"}};
      else
        doc = reply.body.empty() ? json(nullptr) : json::parse(reply.body);
    } catch (const json::exception&) {
      doc = json{{"error", reply.body}};
    }
    if (reply.status >= 200 && reply.status < 300) return doc;
    auto member = [&](const char* key) {
      return doc.is_object() && doc.contains(key) && doc[key].is_string() ? doc[key].get<std::string>() : "";
    };
    const int position = doc.is_object() && doc.contains("position") && doc["position"].is_number_integer()
                             ? doc["position"].get<int>()
                             : 0;
    const std::string where = originOf(replicas_[current_]) + " refused " + method + " " +
                              path.substr(0, path.find('?')) + " (" + std::to_string(reply.status) + "): ";
    std::string message = member("error").empty() ? reply.body : member("error");
    if (reply.status == 401 && token_.empty() && !munge_problem_.empty())
      message += " (no token given, and no MUNGE credential: " + munge_problem_ + ")";
    throw errorOfReply(reply.status, member("reason"), where, message, position);
  }

  std::string uri_;
  std::string token_;
  std::mutex mu_;
  std::vector<HttpAddress> replicas_;  // the named ones first, then those their leader listed
  size_t named_ = 0;
  size_t current_ = 0;
  bool answered_ = false;  // a call got a reply: a later move to another replica is a failover
  uint64_t moves_ = 0;     // calls that left their replica for another
  std::shared_ptr<const SecureTransport> tls_;  // https:// replicas
  HttpConnection::Authorizer authorizer_;       // MUNGE, where there is no token
  std::string munge_problem_;                   // why no MUNGE credential went with the last request
  bool same_connection_ = false;                // the last request said kMungeSameConnection
  std::unique_ptr<HttpConnection> connection_;
};

}  // namespace

namespace {

Error noJoinTokens() {
  return badInput("only a poold (--pool http://HOST:PORT or https://HOST:PORT) has nodes that join");
}

Error noJobs() {
  return badInput("only a poold (--pool http://HOST:PORT or https://HOST:PORT) keeps detached jobs");
}

}  // namespace

PoolControl::SubmittedJob PoolControl::submitJob(const JobSubmission&) {
  throw noJobs();
}
std::vector<JobView> PoolControl::jobs(const JobQuery&) {
  throw noJobs();
}
std::vector<JobView> PoolControl::job(const std::string&) {
  throw noJobs();
}
std::vector<std::string> PoolControl::cancelJob(const std::string&, int) {
  throw noJobs();
}
std::vector<UsageTotals> PoolControl::usage(const UsageQuery&) {
  throw badInput(
      "this pool keeps no usage ledger (Slurm's is sreport): a poold's (--pool http://HOST:PORT) and the "
      "embedded pools' do");
}
namespace {
Error noReservations() {
  return badInput(
      "this pool keeps no reservations (Slurm's are scontrol's): a poold's (--pool http://HOST:PORT) "
      "and the embedded pools' do");
}
}  // namespace
std::vector<Reservation> PoolControl::reservations() {
  throw noReservations();
}
Reservation PoolControl::reserve(const ReservationRequest&) {
  throw noReservations();
}
void PoolControl::unreserve(const std::string&) {
  throw noReservations();
}
FairShareReport PoolControl::fairShare() {
  throw badInput(
      "this pool has no account tree (Slurm's is sshare): a poold's (--pool http://HOST:PORT, --accounts) "
      "and "
      "the embedded pools' (POOLRUN_ACCOUNTS) do");
}
std::string AgentLink::launchKey(const std::string&) {
  throw Error(ErrorCode::kUnsupported, "this link to the pool carries no launch key");
}
LaunchCredentials PoolClient::launchCredentials(const std::string&) {
  throw Error(
      ErrorCode::kUnsupported,
      "this pool's nodes have no agents to start a job's daemons: use --launch ssh (the default here)");
}
NodeJobWork AgentLink::jobWork(const std::string&) {
  throw Error(ErrorCode::kUnsupported, "this link to the pool carries no jobs");
}
bool AgentLink::awaitJobs(const std::string&, std::chrono::milliseconds) {
  throw Error(ErrorCode::kUnsupported, "this link to the pool carries no jobs");
}
void AgentLink::reportJob(const std::string&, const std::string&, const JobReport&) {
  throw Error(ErrorCode::kUnsupported, "this link to the pool carries no jobs");
}

JoinTokenMade PoolControl::createJoinToken(std::chrono::seconds) {
  throw noJoinTokens();
}
NodeTokens PoolControl::nodeTokens() {
  throw noJoinTokens();
}
void PoolControl::revokeNode(const std::string&) {
  throw noJoinTokens();
}

std::unique_ptr<PoolControl> openHttpPool(const std::string& uri, std::vector<HttpAddress> replicas,
                                          const ClientOptions& options) {
  return std::make_unique<HttpPool>(uri, std::move(replicas), options);
}

std::unique_ptr<AgentLink> openAgentLink(const std::string& uri, const ClientOptions& options) {
  if (!isPooldUri(uri))
    throw badInput("pool URI '" + uri +
                   "': a node agent reports to a poold (http://HOST:PORT or https://HOST:PORT)");
  return std::make_unique<HttpPool>(uri, parseHttpReplicas(uri), options);  // several: replicas on etcd
}

bool joinPool(const std::string& uri, const ClientOptions& options, const std::string& node,
              const std::string& token, const std::string& credential) {
  if (!isPooldUri(uri))
    throw badInput("pool URI '" + uri + "': a node joins a poold (http://HOST:PORT or https://HOST:PORT)");
  ClientOptions anonymous = options;
  anonymous.token.clear();
  return HttpPool(uri, parseHttpReplicas(uri), anonymous).join(node, token, credential);
}

std::unique_ptr<AgentLink> openAgentLink(const std::string& uri, const std::string& token) {
  ClientOptions options;
  options.token = token;
  return openAgentLink(uri, options);
}

}  // namespace poolrun::pool
