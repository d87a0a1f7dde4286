// PoolClient for a poold: JSON over HTTP with a bearer token.

#include <mutex>
#include <thread>

#include "embedded.hpp"
#include "http_connection.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/topo/nesting.hpp"
#include "queue_wait.hpp"

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

// Both a pool client and a node agent's link: one connection, one way to call poold.
class HttpPool : public PoolControl, public AgentLink {
 public:
  HttpPool(std::string uri, const std::string& host, int port, const ClientOptions& options)
      : uri_(std::move(uri)), connection_(host, port, options.token) {}

  Lease acquire(const LeaseRequest& request,
                const std::function<void(const QueueProgress&)>& queued) override {
    const auto start = Steady::now();
    // The request id makes a retried POST (its reply lost on a reused connection) idempotent.
    json body = toJson(request);
    body["request_id"] = newLeaseId();
    json reply = call("POST", "/v1/leases", body);
    if (reply.contains("lease")) return keepUnlessInterrupted(leaseFromJson(reply["lease"]));
    int64_t ticket = reply.value("ticket", int64_t{0});
    int position = reply.value("position", 0);
    if (ticket == 0) throw queueTimeout(request, position, uri_);
    const std::string path = "/v1/queue/" + segment(std::to_string(ticket));
    ProgressPacer pacer;
    // The first poll answers at once, so that the caller hears the reason and planned start; the
    // next ones wait up to a second for a change, so that a signal is seen within about a second.
    milliseconds slice(0);
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
          throw queueTimeout(request, position, uri_);
        }
        slice = std::min(slice, left);
      }
      json p = call(
          "GET", path + "?wait_ms=" + std::to_string(slice.count()) + "&position=" + std::to_string(position),
          nullptr);
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
      if (queued && pacer.due(progress, Steady::now())) queued(progress);
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
  void failGpu(const std::string& node, size_t index) override {
    call("POST", "/v1/nodes/" + segment(node) + "/gpus/" + segment(std::to_string(index)) + "/fail",
         json::object());
  }
  void setMigLayout(const std::string& node, size_t gpu, const std::vector<std::string>& profiles) override {
    call("POST", "/v1/nodes/" + segment(node) + "/gpus/" + segment(std::to_string(gpu)) + "/mig",
         json{{"profiles", profiles}});
  }

  // A node agent retries what does not get through, at its own pace: an attempt is kept short.
  void registerNode(const NodeRegistration& registration) override {
    call("POST", "/v1/nodes/" + segment(registration.node.name) + "/register", toJson(registration),
         {milliseconds(2000), milliseconds(10000)});
  }
  HeartbeatReply heartbeat(const Heartbeat& heartbeat) override {
    return heartbeatReplyFromJson(call("POST", "/v1/nodes/" + segment(heartbeat.node) + "/heartbeat",
                                       toJson(heartbeat), {milliseconds(2000), milliseconds(5000)}));
  }

 private:
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

  json call(const std::string& method, const std::string& path, const json& body, Timeouts timeouts = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    connection_.connect_timeout = timeouts.connect;
    connection_.io_timeout = timeouts.io;
    std::string text = body.is_null() ? std::string() : body.dump();
    HttpResponse reply;
    for (int attempt = 0;; ++attempt) {
      try {
        reply = connection_.request(method, path, text);
        break;
      } catch (const HttpFailed& e) {
        // A kept-alive connection can fail once where a fresh one succeeds. Every call is safe to
        // repeat: reads, release, renew and the admin commands are idempotent, acquire carries a
        // request id that poold answers again with the same lease.
        if (attempt == 0 && e.kind() == HttpFailed::Kind::kTransfer) continue;
        throw PoolError(
            PoolFailure::kOther, ErrorCode::kIo,
            "cannot reach poold at " + uri_ + " (" + e.what() + "); is it running and listening there?");
      }
    }
    const HttpResponse* res = &reply;
    json doc;
    try {
      // A reply nested past any the API sends is not read as JSON (nor dumped, which recurses).
      if (topo::jsonTooDeepAt(res->body, topo::kMaxJsonDepth))
        doc =
            json{{"error", "a reply nested deeper than " + std::to_string(topo::kMaxJsonDepth) + " levels"}};
      else
        doc = res->body.empty() ? json(nullptr) : json::parse(res->body);
    } catch (const json::exception&) {
      doc = json{{"error", res->body}};
    }
    if (res->status >= 200 && res->status < 300) return doc;
    auto member = [&](const char* key) {
      return doc.is_object() && doc.contains(key) && doc[key].is_string() ? doc[key].get<std::string>() : "";
    };
    std::string msg = member("error").empty() ? res->body : member("error");
    std::string where = uri_ + " refused " + method + " " + path.substr(0, path.find('?')) + " (" +
                        std::to_string(res->status) + "): ";
    switch (res->status) {
      case 400:
        throw PoolError(PoolFailure::kOther, ErrorCode::kBadInput, where + msg);
      case 401:
        throw PoolError(PoolFailure::kUnauthorized, ErrorCode::kBadInput,
                        where + msg + "; set POOLRUN_TOKEN or --token-file to a token poold knows");
      case 403:
        throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput, where + msg);
      case 404:
        throw PoolError(member("reason") == "gone" ? PoolFailure::kGone : PoolFailure::kOther,
                        ErrorCode::kNotFound, where + msg);
      case 413:
        throw PoolError(PoolFailure::kOther, ErrorCode::kBadInput, where + "request body too large");
      case 422:
        throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported, msg);
      default:
        throw PoolError(PoolFailure::kOther, ErrorCode::kIo, where + msg);
    }
  }

  std::string uri_;
  std::mutex mu_;
  HttpConnection connection_;
};

}  // namespace

std::unique_ptr<PoolControl> openHttp(const std::string& uri, const std::string& host, int port,
                                      const ClientOptions& options) {
  return std::make_unique<HttpPool>(uri, host, port, options);
}

std::unique_ptr<AgentLink> openAgentLink(const std::string& uri, const std::string& token) {
  if (!uri.starts_with("http://"))
    throw badInput("pool URI '" + uri + "': a node agent reports to a poold (http://HOST:PORT)");
  HttpAddress at = parseHttpUri(uri);
  ClientOptions options;
  options.token = token;
  return std::make_unique<HttpPool>(uri, at.host, at.port, options);
}

}  // namespace poolrun::pool
