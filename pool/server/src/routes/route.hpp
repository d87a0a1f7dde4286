#pragma once

// A route of poold's API: its method and path pattern, who may call it, and its handler; and the
// helpers the handlers share to read a request and refuse one. Each file of routes/ holds the table
// of one resource (routes.hpp lists them).

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/server.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

struct ServerCore;

// A request the server refuses: the row of the failure table (http_failures.hpp) of its reason,
// which gives the status, and what was wrong.
struct HttpError {
  HttpError(std::string_view why, std::string text,
            std::vector<std::pair<std::string, std::string>> extra = {});
  std::string_view reason;  // the row's, so it outlives the error
  std::string message;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond the usual ("Allow")
};

HttpError badRequest(const std::string& message);

// A whole decimal number in [min, max] from a path segment or query value.
int64_t integerIn(const std::string& text, const char* what, int64_t min, int64_t max);
// A request's JSON body; a key given twice in one object, or nesting past common::kMaxJsonDepth, is
// refused (400).
nlohmann::json parseBody(const std::string& body);
// The body of a request that takes no fields (renew, shrink, drain, resume, fail): none, or {}.
void takesNoFields(const std::string& body);

// Replies never fail to serialise: text a client sent that is not UTF-8 is replaced.
std::string dumpReply(const nlohmann::json& body);
// The reply for what a handler threw (a PoolError by the table of http_failures.hpp).
HttpReply replyForError(std::exception_ptr error);

// Who may call a route.
enum class Role {
  kAnyone,  // no token, served while the replica does not lead (GET /healthz, the dashboard's files)
  kUser,    // any user's or administrator's token
  kAdmin,   // an administrator's token
  kAgent,   // the token of the node the path names (or an administrator's)
};

struct Context {
  const HttpRequest& req;
  const Caller& who;
  const std::vector<std::string>& params;  // the path's segments that the pattern's * stood for
  int status = 200;
  // The query's integer `name`, `fallback` where absent; 400 outside [min, max].
  int64_t query(const char* name, int64_t fallback, int64_t min, int64_t max) const;
};

// The SHA-256 of a join token or node credential in hex: all poold keeps of them (members.cpp).
std::string secretHash(std::string_view secret);

// Who did an administrator's action, for its event (the audit trail): {"by": OWNER, "auth": "token"
// or "munge", "from": the client's address}.
nlohmann::json auditOf(const Context& c);

// A quick route's answer on the network thread: none (the state's lock is busy: a worker runs the
// route's handler instead), the body, or the rest to finish on a worker (a commit to wait for).
using QuickBody = std::variant<std::monostate, nlohmann::json, std::function<nlohmann::json()>>;

// One row of a route table.
struct RouteSpec {
  std::string method;   // "*": any
  std::string pattern;  // "/v1/leases/*/renew": * is any one segment; "/" the root; "/ui/**" any rest
  Role role;
  StateLock lock;    // what the handler does with the state (server.hpp); ServerCore holds it to it
  const char* what;  // what a user may not do, for the 403 of kAdmin and kAgent
  std::function<nlohmann::json(ServerCore&, Context&)> handler;
  // Where set, the handler's result is a JSON string holding the reply's body, already written, of
  // this content type (the routes whose replies are written without nlohmann's DOM).
  const char* written = nullptr;
  // Where set, what the network thread may do with the request (see dispatch.cpp).
  std::function<QuickBody(ServerCore&, Context&)> quick = nullptr;
  // Where set, the whole reply, instead of `handler`'s body (the routes of ServerOptions::routes).
  std::function<HttpReply(ServerCore&, Context&)> replies = nullptr;
  std::string label = {};  // for metrics; empty: the pattern's first two segments
};

// A route as the dispatcher matches it.
struct Route {
  explicit Route(RouteSpec spec);
  RouteSpec spec;
  std::vector<std::string> pattern;
  std::string label;  // for metrics: the spec's, else the pattern with its first two segments
  // Where the request's path matches the pattern, the segments that * stood for.
  std::optional<std::vector<std::string>> match(const std::vector<std::string>& segments) const;
};

}  // namespace poolrun::pool
