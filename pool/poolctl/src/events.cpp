// `poolctl events`: poold's event log through GET /v1/events, once or followed.

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "poolctl.hpp"
#include "poolrun/common/http_connection.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/tls_client.hpp"
#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/queue_wait.hpp"

namespace poolrun::pool::ctl {

using nlohmann::json;

namespace {

// A field of an event as text: strings as they are, numbers as JSON writes them, "" where absent.
std::string field(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// "2026-12-01T15:04:05.123Z grant L0123... alice 8 GPUs n01:0-7".
std::string eventText(const json& e) {
  const std::string kind = field(e, "kind");
  std::string out = field(e, "time") + " " + kind;
  auto add = [&](const std::string& text) {
    if (!text.empty()) out += " " + text;
  };
  if (kind == "grant" || kind == "release" || kind == "expiry") {
    add(field(e, "lease"));
    add(field(e, "owner"));
    add(field(e, "gpu_count") + " GPUs");
    add(field(e, "gpus"));
    if (!field(e, "job").empty()) add("job " + field(e, "job"));
    if (!field(e, "held_s").empty()) add("held " + field(e, "held_s") + " s");
    if (!field(e, "reason").empty()) add("(" + field(e, "reason") + ")");
    return out;
  }
  if (kind == "node_state") {
    add(field(e, "node"));
    add(field(e, "state"));
  } else if (kind == "gpu_failed") {
    add(field(e, "node") + ":" + field(e, "index"));
    add(field(e, "reason"));
  } else {
    // A kind this poolctl does not know: its fields as KEY=VALUE.
    for (const auto& [key, value] : e.items())
      if (key != "schema" && key != "seq" && key != "time" && key != "kind")
        add(key + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
    return out;
  }
  if (!field(e, "by").empty()) add("(by " + field(e, "by") + ")");
  return out;
}

// An event as its line in poold's file: schema, seq, time and kind first.
std::string eventJson(const json& e) {
  nlohmann::ordered_json out;
  for (const char* key : {"schema", "seq", "time", "kind"})
    if (e.contains(key)) out[key] = e[key];
  for (const auto& [key, value] : e.items())
    if (!out.contains(key)) out[key] = value;
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// One GET /v1/events: the reply, or PoolError (4xx, refused) or HttpFailed (poold unreachable).
json eventsPage(HttpConnection& c, const std::string& uri, uint64_t since, int waitMs, int limit) {
  std::string path = "/v1/events?since=" + std::to_string(since) + "&wait_ms=" + std::to_string(waitMs) +
                     "&limit=" + std::to_string(limit);
  HttpResponse r = c.request("GET", path, "");
  json doc =
      common::jsonTooDeepAt(r.body, common::kMaxJsonDepth) ? json() : json::parse(r.body, nullptr, false);
  if (r.status == 200 && doc.is_object() && doc.contains("events") && doc["events"].is_array()) return doc;
  std::string msg = doc.is_object() && doc.contains("error") && doc["error"].is_string()
                        ? doc["error"].get<std::string>()
                        : common::printable(r.body.substr(0, 200));
  std::string where = uri + " refused GET /v1/events (" + std::to_string(r.status) + "): " + msg;
  if (r.status == 401)
    throw PoolError(PoolFailure::kUnauthorized, ErrorCode::kBadInput,
                    where + "; set POOLRUN_TOKEN or --token-file to a token poold knows");
  if (r.status == 403) throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput, where);
  if (r.status == 404)
    throw PoolError(PoolFailure::kOther, ErrorCode::kUnsupported, where + " (a poold without an event log?)");
  throw PoolError(PoolFailure::kOther, r.status == 400 ? ErrorCode::kBadInput : ErrorCode::kIo, where);
}

struct EventsOptions {
  std::optional<uint64_t> since;
  bool follow = false;
};

EventsOptions parseEventsOptions(const std::vector<std::string>& args) {
  EventsOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--follow" || args[i] == "-f") {
      o.follow = true;
    } else if (args[i] == "--since") {
      if (i + 1 >= args.size()) throw badInput("--since needs a value");
      o.since = number("--since", args[++i], Range<uint64_t>{0, INT64_MAX});
    } else {
      throw badInput("events: unknown option '" + common::printable(args[i]) +
                     "' (use --since SEQ, --follow)");
    }
  }
  return o;
}

// The one poold whose log is read: a pool of several replicas, or one that is not a poold, keeps
// no single log.
HttpAddress eventLogAddress(const std::string& uri) {
  if (!isPooldUri(uri))
    throw badInput("events: the event log is poold's (STATE/events.jsonl, GET /v1/events); pool '" +
                   common::printable(uri) + "' is not a poold and keeps none (use --pool http://HOST:PORT)");
  if (uri.find(',') != std::string::npos)
    throw badInput(
        "events: each poold replica keeps its own event log (what it saw while it led): name one of '" +
        common::printable(uri) + "' (--pool http://HOST:PORT)");
  return parseHttpUri(uri);
}

// Reads poold's log a page at a time and prints each event once, in order, saying where events
// were lost between pages.
class EventReader {
 public:
  EventReader(const Command& c, const EventsOptions& o, const HttpAddress& poold)
      : uri_(c.uri),
        json_(c.json),
        since_(o.since),
        next_(o.since.value_or(0)),
        connection_(poold.host, poold.port, c.options.token,
                    poold.tls
                        ? common::tlsClient({c.options.ca_file, c.options.cert_file, c.options.key_file})
                        : nullptr) {
    connection_.io_timeout = std::chrono::milliseconds(15000);
  }

  // Every event kept (after --since), then 0.
  int printAll() {
    try {
      while (take(eventsPage(connection_, uri_, next_, 0, 1000))) {
      }
    } catch (const HttpFailed& e) {
      if (e.kind() == HttpFailed::Kind::kRefused)
        throw PoolError(PoolFailure::kOther, ErrorCode::kIo, "cannot use poold at " + uri_ + ": " + e.what());
      throw PoolError(
          PoolFailure::kOther, ErrorCode::kIo,
          "cannot reach poold at " + uri_ + " (" + e.what() + "); is it running and listening there?");
    }
    return 0;
  }

  // The last ten (or those after --since), then each new one as it comes, until a signal (0);
  // waits for poold where it is down, saying so once.
  int follow() {
    QueueInterruption interruption;  // Ctrl-C, SIGTERM, SIGHUP: stop following, exit 0
    bool down = false;
    auto backoff = std::chrono::milliseconds(250);
    bool started = since_.has_value();
    while (pendingInterrupt() == 0) {
      try {
        if (!started) {
          uint64_t last = eventsPage(connection_, uri_, 0, 0, 1).value("last", uint64_t{0});
          next_ = last > 10 ? last - 10 : 0;
          started = true;
        }
        const auto asked = std::chrono::steady_clock::now();
        json page = eventsPage(connection_, uri_, next_, 1000, 1000);
        if (down) std::cerr << "poolctl: poold at " << uri_ << " answers again\n";
        down = false;
        backoff = std::chrono::milliseconds(250);
        // Nothing new, at once: poold had no long poll to spare (its workers are for renewals and
        // acquires first); ask again a little later rather than at once.
        if (!take(page) && std::chrono::steady_clock::now() - asked < std::chrono::milliseconds(100))
          std::this_thread::sleep_for(std::chrono::milliseconds(250));
      } catch (const HttpFailed& e) {
        if (e.kind() == HttpFailed::Kind::kRefused)  // a certificate: waiting will not cure it
          throw PoolError(PoolFailure::kOther, ErrorCode::kIo,
                          "cannot use poold at " + uri_ + ": " + e.what());
        if (!down)
          std::cerr << "poolctl: poold at " << uri_ << " does not answer (" << e.what()
                    << "); trying again\n";
        down = true;
        for (auto slept = std::chrono::milliseconds(0); slept < backoff && pendingInterrupt() == 0;
             slept += std::chrono::milliseconds(50))
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
      }
    }
    (void)interrupted("stopped following");  // the signal is acted on: the scope does not raise it again
    return 0;
  }

 private:
  // Prints a page's events after next_; false where there were none.
  bool take(const json& page) {
    const json& events = page["events"];
    uint64_t last = page.value("last", uint64_t{0});
    if (next_ > last) {
      std::cerr << "poolctl: poold's event log ends at seq " << last << ", before " << next_
                << " (a new log?): going on from " << last << "\n";
      next_ = last;
    }
    if (events.empty()) return false;
    uint64_t first = events.front().value("seq", uint64_t{0});
    if (first > next_ + 1)
      std::cerr << "poolctl: events " << next_ + 1 << " to " << first - 1
                << " are no longer kept (the log was rotated past them, or lost)\n";
    for (const json& e : events) std::cout << (json_ ? eventJson(e) : eventText(e)) << "\n";
    std::cout << std::flush;
    next_ = events.back().value("seq", next_);
    return true;
  }

  const std::string& uri_;
  bool json_;
  std::optional<uint64_t> since_;
  uint64_t next_;
  HttpConnection connection_;
};

}  // namespace

int eventsCommand(const Command& c) {
  const EventsOptions options = parseEventsOptions(c.args);
  EventReader reader(c, options, eventLogAddress(c.uri));
  return options.follow ? reader.follow() : reader.printAll();
}

}  // namespace poolrun::pool::ctl
