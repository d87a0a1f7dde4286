#include "route.hpp"

#include <charconv>
#include <set>

#include "poolrun/common/names.hpp"
#include "poolrun/common/nesting.hpp"
#include "poolrun/pool/http_failures.hpp"

namespace poolrun::pool {

using nlohmann::json;

HttpError::HttpError(std::string_view why, std::string text,
                     std::vector<std::pair<std::string, std::string>> extra)
    : reason(httpFailureNamed(why).reason), message(std::move(text)), headers(std::move(extra)) {}

HttpError badRequest(const std::string& message) {
  return {"bad_request", message};
}

std::string dumpReply(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

int64_t integerIn(const std::string& text, const char* what, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && p == text.data() + text.size() && v >= min && v <= max) return v;
  throw badRequest(std::string("bad ") + what + " '" + text + "': expected a whole number from " +
                   std::to_string(min) + " to " + std::to_string(max));
}

int64_t Context::query(const char* name, int64_t fallback, int64_t min, int64_t max) const {
  auto it = req.query.find(name);
  return it == req.query.end() ? fallback : integerIn(it->second, name, min, max);
}

HttpReply replyForError(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const HttpError& e) {
    HttpReply reply = refusal(e.reason, e.message);
    reply.headers = e.headers;
    return reply;
  } catch (const PoolError& e) {
    const HttpFailure& f = httpFailureFor(e.failure(), e.code());
    json body{{"error", e.what()}, {"reason", f.reason}};
    if (e.failure() == PoolFailure::kTimeout) body["position"] = e.position();  // where it would have stood
    return {f.status, dumpReply(body), "application/json"};
  } catch (const Error& e) {
    const HttpFailure& f = httpFailureFor(PoolFailure::kOther, e.code());
    return refusal(f.reason, e.what());
  } catch (const json::exception& e) {
    return refusal("bad_request", std::string("bad request body: ") + e.what());
  } catch (const std::exception& e) {
    return refusal("internal", std::string("internal error: ") + e.what());
  } catch (...) {
    return refusal("internal", "internal error");
  }
}

json parseBody(const std::string& body) {
  if (auto at = common::jsonTooDeepAt(body, common::kMaxJsonDepth))
    throw badRequest("request body nests deeper than " + std::to_string(common::kMaxJsonDepth) +
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
      throw badRequest("field '" + common::printable(parsed.get<std::string>()) +
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

// Anything but no body or {} is refused rather than ignored: a field the client thinks counts (a
// ttl_s on a renewal) would silently not.
void takesNoFields(const std::string& body) {
  if (body.empty()) return;
  const json doc = parseBody(body);
  if (!doc.is_object() || !doc.empty())
    throw badRequest("this request takes no fields: send no body, or {} (got " +
                     common::printable(body.substr(0, 80)) + (body.size() > 80 ? "..." : "") + ")");
}

Route::Route(RouteSpec s) : spec(std::move(s)) {
  const std::string& p = spec.pattern;
  for (size_t start = 1; start < p.size();) {
    size_t end = std::min(p.find('/', start), p.size());
    pattern.push_back(p.substr(start, end - start));
    start = end + 1;
  }
  label = !spec.label.empty() ? spec.label
          : pattern.empty()   ? "/"
                              : "/" + pattern[0] + (pattern.size() > 1 ? "/" + pattern[1] : "");
}

std::optional<std::vector<std::string>> Route::match(const std::vector<std::string>& segments) const {
  const bool anyRest = !pattern.empty() && pattern.back() == "**";
  const size_t fixed = anyRest ? pattern.size() - 1 : pattern.size();
  if (anyRest ? segments.size() < fixed : segments.size() != fixed) return std::nullopt;
  std::vector<std::string> params;
  for (size_t i = 0; i < fixed; ++i) {
    if (pattern[i] == "*")
      params.push_back(segments[i]);
    else if (pattern[i] != segments[i])
      return std::nullopt;
  }
  return params;
}

nlohmann::json auditOf(const Context& c) {
  return {{"by", c.who.owner}, {"auth", c.who.via}, {"from", c.req.peer}};
}

}  // namespace poolrun::pool
