// The dispatcher: a request to its route, through the token's check and the caller's role, to the
// route's handler, and the reply's metrics. On the network thread only for a heartbeat (quick()).

#include <algorithm>
#include <stdexcept>

#include "poolrun/common/names.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/service.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

// The reply of a route whose handler returned `body`, with status `status`.
HttpReply replyOf(const Route& r, int status, const json& body) {
  if (r.spec.written) return {status, body.get<std::string>(), r.spec.written};
  return {status, dumpReply(body), "application/json"};
}

// The route this thread serves now; none outside a route (ticks, hooks, startup).
thread_local const Route* serving = nullptr;

// Marks the thread as serving `r` while it lives.
class Serving {
 public:
  explicit Serving(const Route& r) : before_(serving) { serving = &r; }
  ~Serving() { serving = before_; }
  Serving(const Serving&) = delete;
  Serving& operator=(const Serving&) = delete;

 private:
  const Route* before_;
};

const char* lockName(StateLock lock) {
  switch (lock) {
    case StateLock::kNone:
      return "kNone";
    case StateLock::kRead:
      return "kRead";
    case StateLock::kChange:
      return "kChange";
  }
  return "?";
}

// The route of the request's method and path, and what its * stood for; `allowed` gets the methods
// of the path, where it is known.
const Route* findRoute(const std::vector<Route>& routes, const HttpRequest& req,
                       std::vector<std::string>& params, std::string& allowed) {
  for (const Route& r : routes) {
    auto m = r.match(req.segments);
    if (!m) continue;
    if (allowed.find(r.spec.method) == std::string::npos)
      allowed += (allowed.empty() ? "" : ", ") + std::string(r.spec.method);
    if (r.spec.method != req.method && r.spec.method != "*") continue;
    params = std::move(*m);
    return &r;
  }
  return nullptr;
}

}  // namespace

void ServerCore::requireLock(StateLock needed) {
  if (serving == nullptr || serving->spec.lock >= needed) return;
  throw std::logic_error("poold's route " + serving->spec.method + " " + serving->spec.pattern +
                         " is declared StateLock::" + lockName(serving->spec.lock) + " but its handler " +
                         (needed == StateLock::kChange ? "changes" : "reads") +
                         " the pool's state: its row must say StateLock::" + lockName(needed));
}

// What the route answers, on a worker.
HttpReply ServerCore::replyTo(const Route& r, Context& c) {
  const Serving marked(r);
  if (r.spec.replies) return r.spec.replies(*this, c);
  json body = r.spec.handler(*this, c);
  return replyOf(r, c.status, body);
}

// A scrape of /metrics from an allowed address or with the scrape token is nobody (an empty
// owner). A refused token is never echoed, not even in part.
std::optional<Caller> ServerCore::authenticate(const HttpRequest& req, const Route& r, bool networkThread) {
  const bool scrape = r.label == "/metrics";
  if (scrape && metrics_access->allowsPeer(req.peer)) {
    if (metrics_access->allowsHost(req.host)) return Caller{};
    if (req.authorization.empty()) throw HttpError("forbidden", hostNotPooldMessage(req.host));
  }
  if (req.authorization == kMungeSameConnection) {
    if (!munge_users)
      throw HttpError("unauthorized",
                      "this poold takes no MUNGE credentials (poold --munge): use a token (--token-file or "
                      "POOLRUN_TOKEN)");
    if (std::optional<Caller> who = munge_users->ofConnection(req.connection)) return *who;
    throw HttpError("unauthorized",
                    "no MUNGE credential on this connection yet: its first request must carry one "
                    "(`Authorization: MUNGE CREDENTIAL`)");
  }
  if (req.authorization.rfind("MUNGE ", 0) == 0) {
    if (!munge_users)
      throw HttpError("unauthorized",
                      "this poold takes no MUNGE credentials (poold --munge): use a token (--token-file or "
                      "POOLRUN_TOKEN)");
    auto known = munge_users->identify(req.authorization.substr(6), req.method, req.target, req.connection);
    if (const Caller* who = std::get_if<Caller>(&known)) return *who;
    const MungeRefusal& refused = std::get<MungeRefusal>(known);
    throw HttpError(refused.reason, refused.message);
  }
  const std::string prefix = "Bearer ";
  if (req.authorization.rfind(prefix, 0) != 0 || req.authorization.size() == prefix.size())
    throw HttpError("unauthorized", std::string("no bearer token (send `Authorization: Bearer TOKEN`") +
                                        (munge_users ? ", or a MUNGE credential)" : ")"));
  std::string token = req.authorization.substr(prefix.size());
  std::optional<Caller> who = tokens->find(token);
  if (!who) {
    bool busy = false;
    who = nodeOfCredential(token, networkThread, busy);
    if (!who && !busy) who = launcherOfJob(token, networkThread, busy);
    if (busy) return std::nullopt;
  }
  if (who) {
    // With client certificates asked for (--tls-client-ca), a node's token alone is not enough: it
    // must come over a connection whose verified certificate names that node.
    if (who->node && !who->admin && !opt.tls_client_ca_file.empty() &&
        std::find(req.client_names.begin(), req.client_names.end(), who->owner) == req.client_names.end())
      throw HttpError(
          "forbidden",
          "the token of node " + who->owner + " (role node) must come with a client certificate for " +
              who->owner + " (poold --tls-client-ca); this connection presented " +
              (req.client_names.empty() ? std::string("none")
                                        : "one for " + common::printable(req.client_names.front())) +
              ": give poold-agent --tls-cert FILE --tls-key FILE");
    return who;
  }
  if (metrics_access->isScrapeToken(token)) {
    if (scrape) return Caller{};
    throw HttpError("forbidden", "the scrape token (poold --metrics-token-file) may read /metrics only");
  }
  throw HttpError("unauthorized",
                  "the token sent is not in poold's token file, nor a node credential of this pool");
}

std::optional<Caller> ServerCore::nodeOfCredential(const std::string& token, bool networkThread, bool& busy) {
  if (!isSecretOf(kNodeCredentialPrefix, token)) return std::nullopt;
  const std::string hash = secretHash(token);
  auto look = [&hash](const PoolState& s) -> std::optional<NodeCredential> {
    const NodeCredential* c = s.membership().credentialOf(hash);
    return c ? std::optional<NodeCredential>(*c) : std::nullopt;
  };
  std::optional<NodeCredential> found;
  if (networkThread) {
    auto tried = pool->tryRead(look);
    if (!tried) {
      busy = true;
      return std::nullopt;
    }
    found = std::move(*tried);
  } else {
    found = pool->read(look);
  }
  if (!found) return std::nullopt;
  if (!found->revoked_by.empty())
    throw HttpError("unauthorized",
                    "the credential of node " + found->node + " was revoked by " + found->revoked_by +
                        " at " + common::rfc3339(found->revoked) +
                        ": the node is cut off. To join it again, remove its token file "
                        "and give poold-agent --join a new token (poolctl node-token create)");
  Caller who;
  who.owner = found->node;
  who.node = true;
  who.via = "credential";
  return who;
}

std::optional<Caller> ServerCore::launcherOfJob(const std::string& token, bool networkThread, bool& busy) {
  if (!isSecretOf(kJobCredentialPrefix, token)) return std::nullopt;
  const std::string hash = secretHash(token);
  auto look = [&hash](const PoolState& s) -> std::optional<Caller> {
    const JobRecord* job = s.jobs().ofCredential(hash);
    if (job == nullptr) return std::nullopt;
    Caller who;
    who.owner = job->spec.owner;
    who.via = "job";
    who.job_lease = job->lease;
    return who;
  };
  if (!networkThread) return pool->read(look);
  auto tried = pool->tryRead(look);
  if (!tried) busy = true;
  return tried ? *tried : std::nullopt;
}

namespace {

// What a detached job's launcher may do with its credential: what poolrun does with its lease (read
// the pool's nodes and replicas, renew, shrink and release the lease, ask for its launch
// credentials), and nothing else.
bool launcherMay(const Caller& who, const Route& r, const std::vector<std::string>& params) {
  const std::string& p = r.spec.pattern;
  if (r.spec.method == "GET" && (p == "/v1/nodes/*" || p == "/v1/replicas" || p == "/v1/status")) return true;
  const bool leaseRoute = p == "/v1/leases/*/renew" || p == "/v1/leases/*/shrink" ||
                          p == "/v1/leases/*/launch" || (p == "/v1/leases/*" && r.spec.method == "DELETE");
  return leaseRoute && params.at(0) == who.job_lease;
}

}  // namespace

// Whether the caller's role may call the route: a node's token its own node's agent routes only.
void ServerCore::authorize(const Caller& who, const Route& r, const std::vector<std::string>& params) const {
  if (!who.job_lease.empty() && !launcherMay(who, r, params))
    throw HttpError("forbidden",
                    "the credential of a detached job's launcher is for its lease " + who.job_lease +
                        " alone (renew, shrink, release, launch) and the pool's nodes; it may not " +
                        (std::string(r.spec.what).empty() ? r.spec.method + " " + r.spec.pattern
                                                          : std::string(r.spec.what)));
  const bool agent = r.spec.role == Role::kAgent;
  if (who.node != agent && !who.admin)
    throw HttpError("forbidden", who.node ? "the token of node " + who.owner +
                                                " (role node) may only register and heartbeat that node"
                                          : "owner " + who.owner + " (role user) may not " + r.spec.what +
                                                "; the node's agent (role node) or an administrator may");
  if (agent && who.node && params.at(0) != who.owner)
    throw HttpError("forbidden", "the token of node " + who.owner + " (role node) may not speak for node " +
                                     common::printable(params.at(0)));
  if (r.spec.role == Role::kAdmin) PoolService(who).requireAdmin(r.spec.what);
}

// On the network thread, where nothing may wait: heartbeats, applied there when the state's lock
// is free (2,500 a second at 12,500 nodes; each would cost two hand-overs between threads, more
// than the heartbeat itself). Every other request goes to the workers, and so does a heartbeat of
// more than kQuickBodyBytes (an 8-GPU node's is about 5 KB): a node's token must not let its
// holder keep the network thread reading megabytes.
QuickAnswer ServerCore::quick(const HttpRequest& req) {
  constexpr size_t kQuickBodyBytes = 64 * 1024;
  const bool heartbeat = req.method == "POST" && req.segments.size() == 4 && req.segments[0] == "v1" &&
                         req.segments[1] == "nodes" && req.segments[3] == "heartbeat" &&
                         req.body.size() <= kQuickBodyBytes;
  return heartbeat ? answer(req, true) : QuickAnswer{};
}

QuickAnswer ServerCore::answer(const HttpRequest& req, bool networkThread) {
  auto start = Steady::now();
  HttpReply reply;
  std::string label = "unmatched";
  try {
    std::vector<std::string> params;
    std::string allowed;
    const Route* found = findRoute(routes, req, params, allowed);
    if (networkThread && (found == nullptr || !found->spec.quick)) return {};
    if (found == nullptr) {
      if (!allowed.empty())
        throw HttpError(
            "method_not_allowed",
            "method " + common::printable(req.method) + " is not allowed here (" + allowed + " is)",
            {{"Allow", allowed}});
      throw HttpError("not_found", "no such API path (the routes are listed in docs/pool.md, \"HTTP API\")");
    }
    label = found->label;
    if (found->spec.role == Role::kAnyone) {
      const Caller nobody;
      Context ctx{req, nobody, params};
      return {observed(req.method, label, replyTo(*found, ctx), start), nullptr};
    }
    if (opt.serving && !opt.serving())
      throw HttpError(
          "not_leader",
          "this poold replica no longer leads the pool (its etcd lease lapsed); retry on another");
    std::optional<Caller> known = authenticate(req, *found, networkThread);
    if (!known) return {};  // a node credential, and the state's lock is busy: a worker answers
    const Caller& who = *known;
    authorize(who, *found, params);
    Context ctx{req, who, params};
    if (!networkThread) {
      reply = replyTo(*found, ctx);
    } else {
      QuickBody body = [&] {
        const Serving marked(*found);
        return found->spec.quick(*this, ctx);
      }();
      if (std::holds_alternative<std::monostate>(body)) return {};
      if (auto* finish = std::get_if<std::function<json()>>(&body))
        return {std::nullopt, [this, found, status = ctx.status, method = req.method, label, start,
                               finish = std::move(*finish)] {
                  HttpReply r;
                  try {
                    r = replyOf(*found, status, finish());
                  } catch (...) {
                    r = replyForError(std::current_exception());
                  }
                  return observed(method, label, std::move(r), start);
                }};
      reply = replyOf(*found, ctx.status, std::get<json>(body));
    }
  } catch (...) {
    reply = replyForError(std::current_exception());
  }
  if (reply.status == 401) reply.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"poold\"");
  return {observed(req.method, label, std::move(reply), start), nullptr};
}

HttpReply ServerCore::observed(const std::string& sent, const std::string& label, HttpReply reply,
                               Steady::time_point start) {
  // Labels are fixed words only: a client's method or path never makes a new series.
  const std::string method = sent == "GET" || sent == "POST" || sent == "DELETE" ? sent : "other";
  metrics.observeRequest(method, label, reply.status,
                         std::chrono::duration<double>(Steady::now() - start).count());
  return reply;
}

}  // namespace poolrun::pool
