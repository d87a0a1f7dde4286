// poold's engine: the routes of the API over the committed state, the token store, metrics and
// the HTTP server (each in its own file), and the mapping of errors to HTTP statuses.

#include "poolrun/pool/server.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <deque>
#include <iostream>
#include <set>
#include <sstream>
#include <variant>

#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/committed_state.hpp"
#include "poolrun/pool/dashboard.hpp"
#include "poolrun/pool/event_log.hpp"
#include "poolrun/pool/heartbeat_reader.hpp"
#include "poolrun/pool/http_failures.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/live_metrics.hpp"
#include "poolrun/pool/server_metrics.hpp"
#include "poolrun/pool/service.hpp"
#include "poolrun/pool/tokens.hpp"
#include "poolrun/topo/names.hpp"
#include "poolrun/topo/nesting.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using Clock = std::chrono::system_clock;
using Steady = std::chrono::steady_clock;

// A request the server refuses, with its HTTP status.
struct HttpError {
  int status;
  std::string message;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers = {};  // beyond the usual ("Allow")
};

HttpError badRequest(const std::string& message) {
  return {400, message, "bad_request"};
}

// Replies never fail to serialise: text a client sent that is not UTF-8 is replaced.
std::string dumpReply(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A whole decimal number in [min, max] from a path segment or query value.
int64_t integerIn(const std::string& text, const char* what, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && p == text.data() + text.size() && v >= min && v <= max) return v;
  throw badRequest(std::string("bad ") + what + " '" + text + "': expected a whole number from " +
                   std::to_string(min) + " to " + std::to_string(max));
}

// Where the request's path matches `pattern` ("v1/leases/*/renew": * is any one segment), the
// segments that * stood for.
std::optional<std::vector<std::string>> match(const std::vector<std::string>& segments,
                                              const std::vector<std::string>& pattern) {
  if (segments.size() != pattern.size()) return std::nullopt;
  std::vector<std::string> params;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == "*")
      params.push_back(segments[i]);
    else if (pattern[i] != segments[i])
      return std::nullopt;
  }
  return params;
}

std::vector<std::string> splitPattern(const std::string& pattern) {
  std::vector<std::string> out;
  for (size_t start = 1; start <= pattern.size();) {
    size_t end = std::min(pattern.find('/', start), pattern.size());
    out.push_back(pattern.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

HttpReply errorReply(int status, const std::string& message, const std::string& reason) {
  return {status, dumpReply(json{{"error", message}, {"reason", reason}}), "application/json"};
}

// The reply for what a handler threw.
HttpReply replyForError(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const HttpError& e) {
    HttpReply reply = errorReply(e.status, e.message, e.reason);
    reply.headers = e.headers;
    return reply;
  } catch (const PoolError& e) {
    const HttpFailure& f = httpFailureFor(e.failure(), e.code());
    return errorReply(f.status, e.what(), std::string(f.reason));
  } catch (const Error& e) {
    const HttpFailure& f = httpFailureFor(PoolFailure::kOther, e.code());
    return errorReply(f.status, e.what(), std::string(f.reason));
  } catch (const json::exception& e) {
    return errorReply(400, std::string("bad request body: ") + e.what(), "bad_request");
  } catch (const std::exception& e) {
    return errorReply(500, std::string("internal error: ") + e.what(), "internal");
  } catch (...) {
    return errorReply(500, "internal error", "internal");
  }
}

json parseBody(const std::string& body) {
  if (auto at = topo::jsonTooDeepAt(body, topo::kMaxJsonDepth))
    throw badRequest("request body nests deeper than " + std::to_string(topo::kMaxJsonDepth) +
                     " levels (at byte " + std::to_string(*at) + ")");
  // A key given twice in one object is refused, as the heartbeat reader refuses it: the parser
  // would keep the last, and a client (or a proxy) reading the first would disagree with poold.
  std::vector<std::set<std::string>> keys;
  auto once = [&keys](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second) {
      throw badRequest("field '" + topo::printable(parsed.get<std::string>()) +
                       "' given twice in one object: send each field once");
    }
    return true;
  };
  try {
    return json::parse(body, once);
  } catch (const json::parse_error& e) {
    throw badRequest(std::string("malformed JSON: ") + e.what());
  } catch (const json::out_of_range& e) {  // a number past a double ("1e400")
    throw badRequest(std::string("malformed JSON: a number out of range: ") + e.what());
  }
}

// The body of a request that takes no fields (renew, shrink, drain, resume, fail): none, or an
// empty JSON object. Anything else is refused rather than ignored: a field the client thinks counts
// (a ttl_s on a renewal) would silently not.
void takesNoFields(const std::string& body) {
  if (body.empty()) return;
  const json doc = parseBody(body);
  if (!doc.is_object() || !doc.empty())
    throw badRequest("this request takes no fields: send no body, or {} (got " +
                     topo::printable(body.substr(0, 80)) + (body.size() > 80 ? "..." : "") + ")");
}

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

}  // namespace

struct PoolServer::Impl {
  struct Context {
    const HttpRequest& req;
    const Caller& who;
    const std::vector<std::string>& params;
    int status = 200;
  };
  // A quick route's answer on the network thread: none (the state's lock is busy: a worker runs the
  // route's handler instead), the body, or the rest to finish on a worker (a commit to wait for).
  using QuickBody = std::variant<std::monostate, json, std::function<json()>>;

  struct Route {
    std::string method;
    std::string label;  // for metrics: the pattern with its first two segments
    std::vector<std::string> pattern;
    bool admin_only;
    std::string what;  // what a user may not do, for the 403
    std::function<json(Context&)> handler;
    bool agent = false;  // a node agent's route: for the node's own token (or an administrator's)
    // Where set, the handler's result is a JSON string holding the reply's body, already written,
    // of this content type (the routes whose replies are written without nlohmann's DOM).
    const char* written = nullptr;
    // Where set, what the network thread may do with the request (PoolServer::Impl::quick).
    std::function<QuickBody(Context&)> quick;
  };

  ServerOptions opt;
  int lock_fd = -1;
  std::unique_ptr<TokenStore> tokens;
  std::unique_ptr<CommittedState> pool;
  ServerMetrics metrics;
  std::unique_ptr<MetricsAccess> metrics_access;
  std::unique_ptr<EventLog> events;
  std::vector<Route> routes;
  std::unique_ptr<HttpServer> http;
  PoolHistory history;
  std::mutex snapshot_mu;  // the last GET /v1/dashboard, shared by the requests of half a second
  std::string snapshot;
  Steady::time_point snapshot_at;

  // Long polls (queue tickets, the event log) hold a worker while they wait. At most a quarter of
  // the workers wait at once, and at most a quarter of those for one owner; a poll past either
  // answers at once, as with wait_ms=0 (its client asks again), so that waiting clients cannot
  // take the workers that renewals, acquires and releases need.
  std::mutex long_poll_mu;
  int long_polls = 0;
  std::map<std::string, int> long_polls_by_owner;
  class LongPollSlot {
   public:
    LongPollSlot(Impl& impl, const std::string& owner) : impl_(impl), owner_(owner) {
      const int most = std::max(1, impl_.opt.threads / 4), mostPerOwner = std::max(1, most / 4);
      std::lock_guard<std::mutex> lock(impl_.long_poll_mu);
      int& mine = impl_.long_polls_by_owner[owner_];
      held_ = impl_.long_polls < most && mine < mostPerOwner;
      if (held_) {
        ++impl_.long_polls;
        ++mine;
      } else if (mine == 0) {
        impl_.long_polls_by_owner.erase(owner_);
      }
    }
    ~LongPollSlot() {
      if (!held_) return;
      std::lock_guard<std::mutex> lock(impl_.long_poll_mu);
      --impl_.long_polls;
      if (--impl_.long_polls_by_owner[owner_] == 0) impl_.long_polls_by_owner.erase(owner_);
    }
    LongPollSlot(const LongPollSlot&) = delete;
    LongPollSlot& operator=(const LongPollSlot&) = delete;
    // How long the poll may wait: what it asked, up to 5 s, where it holds a slot; else not at all.
    std::chrono::milliseconds wait(int64_t askedMs) const {
      return std::chrono::milliseconds(held_ ? std::min<int64_t>(askedMs, kLongestPollMs) : 0);
    }

   private:
    static constexpr int64_t kLongestPollMs = 5000;
    Impl& impl_;
    std::string owner_;
    bool held_ = false;
  };

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::thread ticker;
  topo::FileWatch quotas_watch;  // of the quotas file

  explicit Impl(ServerOptions o)
      : opt(std::move(o)), history(opt.history_interval, std::max<size_t>(1, opt.history_samples)) {}

  // Reads the quotas file again when it changed; keeps the quotas before it when it cannot.
  void reloadQuotas() {
    if (opt.quotas_file.empty()) return;
    try {
      std::optional<Quotas> q =
          quotas_watch.readIfChanged(opt.quotas_file, [this] { return readQuotasFile(opt.quotas_file); });
      if (!q) return;  // unchanged, or being written: read it at a later tick
      pool->mutate([&](PoolState& s, TimePoint now) {
        s.setQuotas(std::move(*q));
        s.tick(now, opt.stale_after);
        return 0;
      });
      std::cerr << "poold: quotas read again from " << opt.quotas_file.string() << "\n";
    } catch (const std::exception& e) {
      std::cerr << "poold: warning: " << e.what() << "; keeping the quotas read before\n";
    }
  }
  void sampleHistory() {
    const TimePoint now = Clock::now();
    if (history.due(now)) history.add(pool->read([&](const PoolState& s) { return historySample(s, now); }));
  }

  // Also when PoolServer's constructor throws after taking the lock (a bad token or state file).
  // The state file is closed before the lock goes, so that the next poold opens it only then.
  ~Impl() {
    http.reset();
    events.reset();
    pool.reset();
    if (lock_fd >= 0) close(lock_fd);
  }

  // Who sends the request. A scrape of /metrics from an allowed address or with the scrape token
  // is nobody (an empty owner). A refused token is never echoed, not even in part.
  Caller authenticate(const HttpRequest& req, const Route& r) {
    const bool scrape = r.label == "/metrics";
    if (scrape && metrics_access->allowsPeer(req.peer)) {
      if (metrics_access->allowsHost(req.host)) return {};
      if (req.authorization.empty()) throw HttpError{403, hostNotPooldMessage(req.host), "forbidden"};
    }
    const std::string prefix = "Bearer ";
    if (req.authorization.rfind(prefix, 0) != 0 || req.authorization.size() == prefix.size())
      throw HttpError{401, "no bearer token (send `Authorization: Bearer TOKEN`)", "unauthorized"};
    std::string token = req.authorization.substr(prefix.size());
    if (std::optional<Caller> who = tokens->find(token)) return *who;
    if (metrics_access->isScrapeToken(token)) {
      if (scrape) return {};
      throw HttpError{403, "the scrape token (poold --metrics-token-file) may read /metrics only",
                      "forbidden"};
    }
    throw HttpError{401, "the token sent is not in poold's token file", "unauthorized"};
  }

  // GET /healthz: 200 while poold serves and its state answers, 503 once it stops.
  HttpReply health() {
    {
      std::lock_guard<std::mutex> lock(stop_mu);
      if (stopping) return {503, "poold is stopping\n", "text/plain; charset=utf-8"};
    }
    pool->read([](const PoolState&) { return 0; });  // the state's lock is not held for good
    return {200, "ok\n", "text/plain; charset=utf-8"};
  }

  // Publishes the events recorded up to `seq` (none: 0) when it goes, after the change's commit.
  struct Publish {
    EventLog& log;
    uint64_t seq = 0;
    ~Publish() { log.publish(seq); }
  };

  // fn as a change that records the events it caused: the leases it granted and ended (PoolState
  // reports them) and what fn recorded. Recorded under the state's lock (so in its order), published
  // (`publish`, set here) once the change is committed.
  template <typename F>
  auto recording(F& fn, CommittedState::Clean& clean, uint64_t& publish) {
    return [this, &fn, &clean, &publish](PoolState& s, TimePoint now) {
      const uint64_t before = events->lastRecorded();
      try {
        auto result = fn(s, now);
        publish = recordLeaseEvents(s, now);
        // An event of this change is published once the changes before it are committed; a change
        // that waits for none publishes nothing (the events recorded so far are theirs).
        if (publish != before)
          clean = CommittedState::Clean::kEarlier;
        else if (clean == CommittedState::Clean::kNothing)
          publish = 0;
        return result;
      } catch (...) {
        publish = recordLeaseEvents(s, now);
        throw;
      }
    };
  }

  // A change to the state, as CommittedState::mutate, with the events it caused.
  template <typename F>
  auto mutate(F&& fn, CommittedState::Clean clean = CommittedState::Clean::kEarlier) {
    Publish publish{*events};
    return pool->mutate(recording(fn, clean, publish.seq), clean);
  }

  // A change applied by tryMutate: settle() returns its result once it is committed (waiting for
  // that where `waits()`) and publishes its events.
  template <typename R>
  struct Applied {
    Impl* server;
    CommittedState::Applied<R> change;
    uint64_t publish = 0;
    bool waits() const { return change.wait; }
    R settle() {
      Publish published{*server->events, publish};
      return server->pool->settle(std::move(change));
    }
  };

  // As mutate, where the state's lock is free now (else nullopt, fn not run), without waiting.
  template <typename F>
  auto tryMutate(F&& fn, CommittedState::Clean clean)
      -> std::optional<Applied<decltype(fn(std::declval<PoolState&>(), TimePoint()))>> {
    uint64_t publish = 0;
    auto change = pool->tryApply(recording(fn, clean, publish), clean);
    if (!change) return std::nullopt;
    return Applied<decltype(fn(std::declval<PoolState&>(), TimePoint()))>{this, std::move(*change), publish};
  }

  uint64_t recordLeaseEvents(PoolState& s, TimePoint now) {
    for (const LeaseEvent& e : s.takeLeaseEvents()) {
      metrics.observeLease(e, now);
      events->record(leaseEventKind(e.kind), leaseEventFields(e, now), now);
    }
    for (const NodeEvent& e : s.takeNodeEvents()) {
      if (e.kind == NodeEvent::Kind::kGpuFailed)
        events->record("gpu_failed",
                       {{"node", e.node}, {"index", e.gpu}, {"reason", e.reason}, {"by", "agent"}}, now);
      else
        events->record("node_state",
                       {{"node", e.node},
                        {"state", e.kind == NodeEvent::Kind::kUnreachable ? "unreachable" : "up"},
                        {"by", "heartbeats"},
                        {"reason", e.reason}},
                       now);
    }
    return events->lastRecorded();
  }

  // An administrator's failure of a GPU, in the event log where it was not failed already. Throws as
  // PoolState::failGpu.
  void failByAdmin(PoolState& s, const std::string& name, size_t index, const std::string& by,
                   TimePoint now) {
    auto node = s.nodeMap().find(name);
    const bool changes =
        node != s.nodeMap().end() && index < node->second.gpuCount() && !node->second.failed.count(index);
    s.failGpu(name, index, now);
    if (changes)
      events->record(
          "gpu_failed",
          {{"node", name}, {"index", index}, {"reason", "marked failed by an administrator"}, {"by", by}},
          now);
  }

  void route(const std::string& method, const std::string& pattern, bool adminOnly, const std::string& what,
             std::function<json(Context&)> handler) {
    std::vector<std::string> p = splitPattern(pattern);
    std::string label = "/" + p[0] + (p.size() > 1 ? "/" + p[1] : "");
    routes.push_back(
        {method, label, std::move(p), adminOnly, what, std::move(handler), false, nullptr, nullptr});
  }

  HttpReply handle(const HttpRequest& req) { return std::move(*answer(req, false).reply); }

  // On the network thread, where nothing may wait: heartbeats, applied there when the state's lock
  // is free (2,500 a second at 12,500 nodes; each would cost two hand-overs between threads, more
  // than the heartbeat itself). Every other request goes to the workers, and so does a heartbeat of
  // more than kQuickBodyBytes (an 8-GPU node's is about 5 KB): a node's token must not let its
  // holder keep the network thread reading megabytes.
  QuickAnswer quick(const HttpRequest& req) {
    constexpr size_t kQuickBodyBytes = 64 * 1024;
    const bool heartbeat = req.method == "POST" && req.segments.size() == 4 && req.segments[0] == "v1" &&
                           req.segments[1] == "nodes" && req.segments[3] == "heartbeat" &&
                           req.body.size() <= kQuickBodyBytes;
    return heartbeat ? answer(req, true) : QuickAnswer{};
  }

  // The reply to `req`; on the network thread, only for a route with a `quick` (else nothing).
  QuickAnswer answer(const HttpRequest& req, bool networkThread) {
    auto start = Steady::now();
    HttpReply reply;
    std::string label = "unmatched";
    try {
      const Route* found = nullptr;
      std::vector<std::string> params;
      std::string allowed;  // the methods of the path, where it is known
      for (const Route& r : routes) {
        auto m = match(req.segments, r.pattern);
        if (!m) continue;
        if (allowed.find(r.method) == std::string::npos) allowed += (allowed.empty() ? "" : ", ") + r.method;
        if (r.method != req.method) continue;
        found = &r;
        params = std::move(*m);
        break;
      }
      if (networkThread && (found == nullptr || !found->quick)) return {};
      if (found == nullptr && (req.segments.empty() || req.segments[0] == "ui")) {
        reply = dashboardFileReply(req);
        return {observed(req.method, "/ui", std::move(reply), start), nullptr};
      }
      if (found == nullptr) {
        if (!allowed.empty())
          throw HttpError{
              405,
              "method " + topo::printable(req.method) + " is not allowed here (" + allowed + " is)",
              "bad_request",
              {{"Allow", allowed}}};
        throw HttpError{404, "no such API path (the routes are listed in docs/pool.md, \"HTTP API\")",
                        "not_found"};
      }
      label = found->label;
      if (label == "/healthz") {
        reply = health();
        return {observed(req.method, label, std::move(reply), start), nullptr};
      }
      if (opt.serving && !opt.serving())
        throw HttpError{
            503, "this poold replica no longer leads the pool (its etcd lease lapsed); retry on another",
            "not_leader"};
      Caller who = authenticate(req, *found);
      if (who.node != found->agent && !who.admin)
        throw HttpError{403,
                        who.node ? "the token of node " + who.owner +
                                       " (role node) may only register and heartbeat that node"
                                 : "owner " + who.owner + " (role user) may not " + found->what +
                                       "; the node's agent (role node) or an administrator may",
                        "forbidden"};
      if (found->agent && who.node && params.at(0) != who.owner)
        throw HttpError{403,
                        "the token of node " + who.owner + " (role node) may not speak for node " +
                            topo::printable(params.at(0)),
                        "forbidden"};
      if (found->admin_only) PoolService(who).requireAdmin(found->what);
      Context ctx{req, who, params};
      if (!networkThread) {
        reply = replyOf(*found, ctx.status, found->handler(ctx));
      } else {
        QuickBody body = found->quick(ctx);
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

  // The reply of a route whose handler returned `body`, with status `status`.
  static HttpReply replyOf(const Route& r, int status, const json& body) {
    if (r.written) return {status, body.get<std::string>(), r.written};
    return {status, dumpReply(body), "application/json"};
  }

  HttpReply observed(const std::string& sent, const std::string& label, HttpReply reply,
                     Steady::time_point start) {
    // Labels are fixed words only: a client's method or path never makes a new series.
    const std::string method = sent == "GET" || sent == "POST" || sent == "DELETE" ? sent : "other";
    metrics.observeRequest(method, label, reply.status,
                           std::chrono::duration<double>(Steady::now() - start).count());
    return reply;
  }

  // GET / and /ui/NAME: the dashboard's files, built into poold; no token (they hold no data: the
  // page asks for one). Nothing is read from disk, so no path a client sends reaches a file.
  static HttpReply dashboardFileReply(const HttpRequest& req) {
    std::optional<DashboardFile> file = dashboardFile(req.segments);
    if (!file) {
      std::string path;
      for (const std::string& s : req.segments) path += "/" + s;
      if (path.size() > 120) path = path.substr(0, 120) + "...";
      return errorReply(404,
                        "no dashboard file '" + topo::printable(path) + "': poold serves " +
                            dashboardFileNames() + " under /ui/; open / for the dashboard",
                        "not_found");
    }
    if (req.method != "GET")
      return errorReply(405, "method " + req.method + " is not allowed on the dashboard's files (GET them)",
                        "bad_request");
    HttpReply reply{200, std::string(file->body), file->content_type};
    reply.headers = dashboardHeaders();
    return reply;
  }

  // The request's fields that the server limits beyond their JSON range.
  void checkLimits(const LeaseRequest& r, const Caller& who) const {
    if (r.ttl > opt.max_ttl)
      throw badRequest("field 'ttl_s': " + std::to_string(r.ttl.count()) + " is over poold's maximum of " +
                       std::to_string(opt.max_ttl.count()) +
                       " s (poold --max-ttl); ask for less, a lease is renewed at a third of its ttl");
    if (!who.admin && r.no_reclaim)
      throw HttpError{403,
                      "owner " + who.owner +
                          " (role user) may not exempt a lease from idle reclaim (no_reclaim); an "
                          "administrator may",
                      "forbidden"};
    if (!who.admin && r.priority > opt.max_user_priority)
      throw badRequest("field 'priority': " + std::to_string(r.priority) + " is over the maximum of " +
                       std::to_string(opt.max_user_priority) +
                       " for users (poold --max-user-priority); an administrator may set more");
  }

  // The node agent's side (poolrun/pool/agent_protocol.hpp).
  void addAgentRoutes() {
    route("POST", "/v1/nodes/*/register", false, "register a node", [this](Context& c) {
      NodeRegistration r = nodeRegistrationFromJson(parseBody(c.req.body));
      if (r.node.name != c.params[0])
        throw badRequest("the registration names node '" + r.node.name + "', the path node '" +
                         topo::printable(c.params[0]) + "'");
      return mutate([&](PoolState& s, TimePoint now) {
        s.registerAgentNode(r, now);  // starts what its GPUs let start; no tick (O(nodes) each)
        return json{{"registered", r.node.name}, {"interval_s", opt.live.heartbeat_interval.count()}};
      });
    });
    routes.back().agent = true;
    // A heartbeat that failed no GPU changed nothing the state file holds: its reply waits for no
    // commit. A restart loses what heartbeats alone told: samples, foreign GPUs, idle clocks.
    route("POST", "/v1/nodes/*/heartbeat", false, "send heartbeats", [this](Context& c) {
      const Heartbeat hb = readHeartbeat(c);
      return json(heartbeatReplyText(mutate([&](PoolState& s, TimePoint now) { return s.heartbeat(hb, now); },
                                            CommittedState::Clean::kNothing)));
    });
    routes.back().agent = true;
    routes.back().written = "application/json";
    routes.back().quick = [this](Context& c) -> QuickBody {
      auto hb = std::make_shared<const Heartbeat>(readHeartbeat(c));
      auto change = tryMutate([hb](PoolState& s, TimePoint now) { return s.heartbeat(*hb, now, false); },
                              CommittedState::Clean::kNothing);
      if (!change) return {};  // the state's lock is busy: a worker waits for it
      if (!change->waits()) return json(heartbeatReplyText(change->settle()));
      return std::function<json()>(
          [change = std::move(*change)]() mutable { return json(heartbeatReplyText(change.settle())); });
    };
  }

  // The heartbeat a request carries, for the node its path names.
  static Heartbeat readHeartbeat(const Context& c) {
    Heartbeat hb = heartbeatFromText(c.req.body);
    if (hb.node != c.params[0])
      throw badRequest("the heartbeat names node '" + hb.node + "', the path node '" +
                       topo::printable(c.params[0]) + "'");
    return hb;
  }

  void addRoutes() {
    route("GET", "/healthz", false, "", nullptr);  // answered by health(), without a token
    route("GET", "/v1/status", false, "",
          [this](Context&) { return pool->read([](const PoolState& s) { return toJson(s.status()); }); });
    route("GET", "/v1/nodes", false, "", [this](Context&) {
      return pool->read([](const PoolState& s) {
        json out = json::array();
        for (const NodeInfo& n : s.nodeInfos()) out.push_back(toJson(n));
        return out;
      });
    });
    route("GET", "/v1/nodes/*", false, "", [this](Context& c) {
      return pool->read(
          [&](const PoolState& s) { return toJson(PoolService::clusterNode(s, c.params[0], "the pool")); });
    });
    route("POST", "/v1/nodes", true, "register nodes", [this](Context& c) {
      std::vector<topo::ClusterNode> nodes = registrationFromJson(parseBody(c.req.body));
      return mutate([&](PoolState& s, TimePoint now) {
        for (const auto& n : nodes) s.registerNode(n);
        s.tick(now, opt.stale_after);
        return json{{"registered", nodes.size()}};
      });
    });
    for (const char* action : {"drain", "resume"}) {
      std::string verb = action;
      route("POST", "/v1/nodes/*/" + verb, true, verb + " nodes", [this, verb](Context& c) {
        takesNoFields(c.req.body);
        const std::string& name = c.params[0];
        return mutate([&](PoolState& s, TimePoint now) {
          const NodeState target = verb == "drain" ? NodeState::kDraining : NodeState::kUp;
          auto node = s.nodeMap().find(name);
          const bool changes = node != s.nodeMap().end() && node->second.state != target;
          PoolService::setNodeState(s, name, target);
          if (changes)
            events->record("node_state", {{"node", name}, {"state", toString(target)}, {"by", c.who.owner}},
                           now);
          s.tick(now, opt.stale_after);
          return json{{"node", name}, {"state", verb == "drain" ? "draining" : "up"}};
        });
      });
    }
    route("POST", "/v1/nodes/*/gpus/*/fail", true, "mark GPUs failed", [this](Context& c) {
      takesNoFields(c.req.body);
      const std::string& name = c.params[0];
      size_t index = static_cast<size_t>(integerIn(c.params[1], "GPU index", 0, kGpuIndexRange.max));
      return mutate([&](PoolState& s, TimePoint now) {
        failByAdmin(s, name, index, c.who.owner, now);
        s.tick(now, opt.stale_after);
        return json{{"node", name}, {"index", index}, {"state", "failed"}};
      });
    });
    // Every GPU of a node: what an administrator does with a node that must not take a lease again
    // before someone has looked at it (poolctl fail NODE, the dashboard's "Fail node").
    route("POST", "/v1/nodes/*/fail", true, "mark GPUs failed", [this](Context& c) {
      takesNoFields(c.req.body);
      const std::string& name = c.params[0];
      return mutate([&](PoolState& s, TimePoint now) {
        auto node = s.nodeMap().find(name);
        if (node == s.nodeMap().end())
          throw Error(ErrorCode::kNotFound, "no node '" + name + "' in the pool (see `poolctl nodes`)");
        const size_t count = node->second.gpuCount();
        for (size_t index = 0; index < count; ++index) failByAdmin(s, name, index, c.who.owner, now);
        s.tick(now, opt.stale_after);
        return json{{"node", name}, {"gpus_failed", count}};
      });
    });
    route("POST", "/v1/nodes/*/gpus/*/mig", true, "change MIG layouts", [this](Context& c) {
      const std::string& name = c.params[0];
      size_t index = static_cast<size_t>(integerIn(c.params[1], "GPU index", 0, kGpuIndexRange.max));
      const std::vector<std::string> profiles = migLayoutFromJson(parseBody(c.req.body));
      return mutate([&](PoolState& s, TimePoint now) {
        s.setMigLayout(name, index, profiles);
        events->record("mig_layout_asked",
                       {{"node", name}, {"index", index}, {"profiles", profiles}, {"by", c.who.owner}}, now);
        s.tick(now, opt.stale_after);
        return json{{"node", name}, {"index", index}, {"mig_layout", profiles}};
      });
    });
    addAgentRoutes();
    route("GET", "/v1/leases", false, "", [this](Context&) {
      return pool->read([](const PoolState& s) {
        json out = json::array();
        for (const Lease& l : s.leaseList()) out.push_back(toJson(l));
        return out;
      });
    });
    route("POST", "/v1/leases", false, "", [this](Context& c) {
      json doc = parseBody(c.req.body);
      LeaseRequest r = requestFromJson(doc);
      checkLimits(r, c.who);
      // A user's token names its owner: an `owner` field (poolrun sends $USER) is the token's.
      r.owner = PoolService(c.who).ownerOf(r.owner);
      bool queue = !(r.wait && r.wait->count() == 0);
      std::string requestId;
      if (doc.is_object() && doc.contains("request_id")) {
        const json& id = doc["request_id"];
        if (!id.is_string() || id.get_ref<const std::string&>().size() > 128)
          throw badRequest("field 'request_id': expected a string of at most 128 characters");
        requestId = PoolService::requestKey(r.owner, id.get<std::string>());
      }
      return mutate([&](PoolState& s, TimePoint now) {
        // A retry (the reply to the first lost, poold restarted, or another replica leads now):
        // the first answer, as the state has it now. One whose lease or ticket has ended since is
        // answered as a new request.
        if (std::optional<SubmitResult> first = PoolService::retried(s, requestId)) {
          c.status = first->lease ? 200 : 202;
          return first->lease ? json{{"lease", toJson(*first->lease)}}
                              : json{{"ticket", first->ticket}, {"position", first->position}};
        }
        // An owner at its limit may still take what is free now, but queues nothing more.
        const size_t queued = s.queuedBy(r.owner);
        const bool full = queue && queued >= opt.max_queued_per_owner;
        SubmitResult sub = s.submit(r, now, queue && !full);
        if (!sub.lease && full) {
          c.status = 429;
          return json{{"error", "owner " + r.owner + " already has " + std::to_string(queued) +
                                    " requests in the queue, the most poold allows one owner (its "
                                    "--max-queued-per-owner is " +
                                    std::to_string(opt.max_queued_per_owner) +
                                    "); this one does not fit now and was not queued: end some of "
                                    "the owner's waiting clients (`poolctl queue` lists their "
                                    "requests; one whose client stops leaves the queue within " +
                                    std::to_string(opt.stale_after.count()) +
                                    " s) or wait until some start, then ask again"},
                      {"reason", "too_many_queued"},
                      {"queued", queued},
                      {"limit", opt.max_queued_per_owner}};
        }
        if (!sub.lease && sub.ticket == 0) {  // wait_s 0: it does not fit now, and was not queued
          c.status = 409;
          return json{
              {"error", "a request for " + std::to_string(r.gpus) +
                            " GPUs does not fit now (it would be number " + std::to_string(sub.position) +
                            " in the queue) and was not queued, as wait_s is 0: give a wait_s "
                            "to wait in the queue, or ask for fewer"},
              {"reason", "not_now"},
              {"position", sub.position}};
        }
        json out = sub.lease ? json{{"lease", toJson(*sub.lease)}}
                             : json{{"ticket", sub.ticket}, {"position", sub.position}};
        c.status = sub.lease ? 200 : 202;
        PoolService::remember(s, requestId, sub, now);
        return out;
      });
    });
    route("POST", "/v1/leases/*/renew", false, "", [this](Context& c) {
      takesNoFields(c.req.body);
      return mutate([&](PoolState& s, TimePoint now) {
        return json{{"lease", toJson(PoolService(c.who).renew(s, c.params[0], now))}};
      });
    });
    route("POST", "/v1/leases/*/shrink", false, "", [this](Context& c) {
      takesNoFields(c.req.body);
      return mutate([&](PoolState& s, TimePoint now) {
        return json{{"lease", toJson(PoolService(c.who).shrink(s, c.params[0], now))}};
      });
    });
    route("DELETE", "/v1/leases/*", false, "", [this](Context& c) {
      if (std::string why = topo::leaseIdProblem(c.params[0]); !why.empty())
        throw badRequest("'" + topo::printable(c.params[0]) + "' is no lease id: " + why);
      return mutate([&](PoolState& s, TimePoint now) {
        return json{{"id", c.params[0]}, {"released", PoolService(c.who).release(s, c.params[0], now)}};
      });
    });
    route("GET", "/v1/quotas", false, "", [this](Context&) {
      return pool->read([](const PoolState& s) {
        json out = json::array();
        for (const QuotaUse& q : s.quotaUse()) out.push_back(toJson(q));
        return out;
      });
    });
    route("GET", "/v1/queue", false, "", [this](Context&) {
      return pool->read([](const PoolState& s) {
        json out = json::array();
        for (const QueueInfo& q : s.queueList()) out.push_back(toJson(q));
        return out;
      });
    });
    route("GET", "/v1/queue/*", false, "", [this](Context& c) {
      int64_t ticket = integerIn(c.params[0], "ticket", 1, INT64_MAX);
      auto param = [&](const char* name, int64_t fallback, int64_t min, int64_t max) {
        auto it = c.req.query.find(name);
        return it == c.req.query.end() ? fallback : integerIn(it->second, name, min, max);
      };
      int64_t waitMs = param("wait_ms", 0, 0, 3'600'000);
      int64_t known = param("position", -1, -1, INT32_MAX);
      const LongPollSlot slot(*this, c.who.owner);
      auto deadline = Clock::now() + slot.wait(waitMs);
      return pool->waitFor(deadline, [&](PoolState& s, TimePoint now, bool last) -> std::optional<json> {
        PoolService(c.who).requireTicketOwner(s, ticket, "poll the queue ticket");
        PollResult p = s.poll(ticket, now);
        if (p.status == QueueEntry::Status::kGranted)
          return json{{"status", "granted"}, {"lease", toJson(*p.lease)}};
        if (p.status == QueueEntry::Status::kFailed) return json{{"status", "failed"}, {"error", p.reason}};
        if (p.position != known || last) {
          json out = {{"status", "waiting"}, {"position", p.position}, {"reason", p.wait_reason}};
          out["planned_start_ms"] = p.planned_start ? json(toMillis(*p.planned_start)) : json(nullptr);
          return out;
        }
        return std::nullopt;
      });
    });
    route("DELETE", "/v1/queue/*", false, "", [this](Context& c) {
      int64_t ticket = integerIn(c.params[0], "ticket", 1, INT64_MAX);
      return mutate([&](PoolState& s, TimePoint now) {
        PoolService(c.who).requireTicketOwner(s, ticket, "withdraw the request");
        const bool queued = s.queueMap().count(ticket) > 0;
        s.cancel(ticket, now);
        return json{{"ticket", ticket}, {"withdrawn", queued}};
      });
    });
    route("GET", "/v1/events", false, "", [this](Context& c) {
      auto param = [&](const char* name, int64_t fallback, int64_t min, int64_t max) {
        auto it = c.req.query.find(name);
        return it == c.req.query.end() ? fallback : integerIn(it->second, name, min, max);
      };
      auto since = static_cast<uint64_t>(param("since", 0, 0, INT64_MAX));
      int64_t waitMs = param("wait_ms", 0, 0, 3'600'000);
      auto limit = static_cast<size_t>(param("limit", 1000, 1, 1000));
      const LongPollSlot slot(*this, c.who.owner);
      EventLog::Page page = events->read(since, limit, Steady::now() + slot.wait(waitMs));
      return json{{"events", std::move(page.events)}, {"last", page.last}, {"oldest", page.oldest}};
    });
    // The dashboard's data: every GPU in columns, and the history of the pool's use.
    route("GET", "/v1/dashboard", false, "", [this](Context& c) {
      std::lock_guard<std::mutex> lock(snapshot_mu);  // one build at a time, shared for half a second
      if (snapshot.empty() || Steady::now() - snapshot_at > std::chrono::milliseconds(500)) {
        // The state's lock for the copy only; the JSON is written after it (DashboardData).
        snapshot =
            dashboardJson(pool->read([&](const PoolState& s) { return captureDashboard(s, Clock::now()); }));
        snapshot_at = Steady::now();
      }
      return json(forViewer(snapshot, c.who));
    });
    routes.back().written = "application/json";
    route("GET", "/v1/history", false, "", [this](Context&) { return json(history.json()); });
    routes.back().written = "application/json";
    route("GET", "/v1/replicas", false, "", [this](Context&) {
      if (!opt.replicas)
        throw HttpError{404, "this poold keeps the pool in one SQLite file: it has no replicas", "not_found"};
      return json::parse(opt.replicas());
    });
    route("GET", "/metrics", false, "", [this](Context&) {
      PoolStatus s;
      std::map<std::string, int64_t> gpuMillis;
      std::ostringstream live;
      pool->read([&](const PoolState& st) {
        s = st.status();
        gpuMillis = metrics.gpuMillis(st.leaseMap(), Clock::now());
        writeLiveMetrics(live, st, Clock::now());
        return 0;
      });
      return json(metrics.render(s, http ? http->stats() : HttpServerStats{}, gpuMillis) + live.str() +
                  (opt.more_metrics ? opt.more_metrics() : std::string()));  // unbound: tests
    });
    routes.back().written = "text/plain; version=0.0.4";
  }
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
    if (stat(m.opt.quotas_file.c_str(), &st) == 0) m.quotas_watch = topo::FileWatch(topo::identityOf(st));
    quotas = readQuotasFile(m.opt.quotas_file);
  }
  m.pool->mutate([&m, &quotas](PoolState& s, TimePoint) {
    s.setLiveOptions(m.opt.live);
    s.setPreemptOptions(m.opt.preempt);
    s.setQuotas(std::move(quotas));
    return 0;
  });
  m.addRoutes();
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
                  it->second.switch_name == n.switch_name && it->second.labels == n.labels &&
                  it->second.fabric == n.fabric && it->second.rail_group == n.rail_group;
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
      m.mutate([&m](PoolState& s, TimePoint now) {
        s.tick(now, m.opt.stale_after);
        return 0;
      });
      m.metrics.observeWaits(m.pool->takeWaitSeconds());
      m.sampleHistory();
      lock.lock();
    }
  });
  m.http->run();
  stop();
  if (m.ticker.joinable()) m.ticker.join();
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
