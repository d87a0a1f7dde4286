#include "poolrun/pool/heartbeat_reader.hpp"

#include <simdjson.h>

#include <array>
#include <cctype>
#include <concepts>
#include <optional>
#include <sstream>
#include <utility>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/json_read.hpp"
#include "poolrun/pool/limits.hpp"

namespace poolrun::pool {
namespace {
// The readers of a heartbeat's parts; nlohmann's DOM and the reading of it, which these replace,
// were more than half of poold's CPU per heartbeat (docs/measurements.md).
namespace stream {

namespace sj = simdjson::ondemand;
constexpr size_t kNoElement = SIZE_MAX;

// Where a value is, as messages name it; built only for a message.
struct Path {
  const Path* parent = nullptr;
  std::string_view key;       // a field of the parent object, or
  size_t index = kNoElement;  // an element of the parent list
  std::string text() const {
    std::string up = parent == nullptr ? std::string() : parent->text();
    if (index != kNoElement) return up + "[" + std::to_string(index) + "]";
    if (key.empty()) return up;
    return up.empty() ? common::printable(key) : up + "." + common::printable(key);
  }
  Path field(std::string_view k) const { return {this, k, kNoElement}; }
  Path element(size_t i) const { return {this, {}, i}; }
};

[[noreturn]] void fail(const Path& p, const std::string& what) {
  throw badInput("field '" + p.text() + "': " + what);
}

// The name of a JSON value's type, as JsonFields says it.
const char* typeName(sj::json_type type) {
  switch (type) {
    case sj::json_type::array:
      return "array";
    case sj::json_type::object:
      return "object";
    case sj::json_type::string:
      return "string";
    case sj::json_type::number:
      return "number";
    case sj::json_type::boolean:
      return "boolean";
    case sj::json_type::null:
      break;
  }
  return "null";
}

// A scalar's JSON text as a message quotes it: at most 40 bytes, printable.
std::string quote(std::string_view raw) {
  while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back()))) raw.remove_suffix(1);
  std::string s = common::printable(raw.substr(0, 40));
  return raw.size() > 40 ? s + "..." : s;
}

// A value as a message quotes it (lists and objects by their brackets only).
std::string shown(sj::value& v) {
  switch (v.type()) {
    case sj::json_type::array:
      return "[...]";
    case sj::json_type::object:
      return "{...}";
    default:
      break;
  }
  return quote(v.raw_json_token());
}

template <std::integral T>
std::string rangeText(T min, T max) {
  return " (" + std::to_string(min) + " to " + std::to_string(max) + ")";
}

// A scalar is read once (On-Demand moves past it): a message quotes its text, taken before.
template <std::integral T>
T whole(sj::value& v, const Path& p, T min, T max) {
  sj::number_type type{};
  if (v.type() != sj::json_type::number || v.get_number_type().get(type) != simdjson::SUCCESS ||
      type == sj::number_type::floating_point_number)
    fail(p, shown(v) + " is not a whole number" + rangeText(min, max));
  const std::string_view raw = v.raw_json_token();
  auto outOfRange = [&] { fail(p, quote(raw) + " is out of range" + rangeText(min, max)); };
  auto inRange = [&](auto x) { return std::cmp_greater_equal(x, min) && std::cmp_less_equal(x, max); };
  // Digits past 64 bits are an integer by their text, but neither get reads them.
  if (type == sj::number_type::unsigned_integer) {
    uint64_t u = 0;
    if (v.get_uint64().get(u) != simdjson::SUCCESS || !inRange(u)) outOfRange();
    return static_cast<T>(u);
  }
  int64_t i = 0;
  if (v.get_int64().get(i) != simdjson::SUCCESS || !inRange(i)) outOfRange();
  return static_cast<T>(i);
}

double number(sj::value& v, const Path& p, double min, double max) {
  auto text = [](double x) {
    std::ostringstream out;
    out << x;
    return out.str();
  };
  auto range = [&] { return " (" + text(min) + " to " + text(max) + ")"; };
  if (v.type() != sj::json_type::number) fail(p, shown(v) + " is not a number" + range());
  const std::string_view raw = v.raw_json_token();  // before the value is read
  double x = 0;
  if (v.get_double().get(x) != simdjson::SUCCESS)
    fail(p, quote(raw) + " is not a number a double holds" + range());
  if (!(x >= min && x <= max)) fail(p, quote(raw) + " is out of range" + range());
  return x;
}

bool boolean(sj::value& v, const Path& p) {
  if (v.type() != sj::json_type::boolean) fail(p, shown(v) + " is not true or false");
  return v.get_bool();
}

std::string_view string(sj::value& v, const Path& p) {
  if (v.type() != sj::json_type::string) fail(p, shown(v) + " is not a string");
  return v.get_string();
}

// The checks of names.hpp with the field's name in their message; the name is built only for a
// failure (building it for every string was 5% of poold's CPU per heartbeat).
template <typename Check>
void checked(std::string_view s, const Path& p, Check&& check) {
  try {
    check(s, "field");
  } catch (const Error&) {
    check(s, "field '" + p.text() + "'");
  }
}

std::string text(sj::value& v, const Path& p, size_t maxBytes) {
  std::string s(string(v, p));
  checked(s, p, [&](std::string_view t, const std::string& what) { common::checkText(t, maxBytes, what); });
  return s;
}

// Unix milliseconds; INT64_MAX stands for never.
TimePoint time(sj::value& v, const Path& p) {
  sj::number_type type{};
  if (v.type() == sj::json_type::number && v.get_number_type().get(type) == simdjson::SUCCESS &&
      type == sj::number_type::signed_integer) {
    const std::string_view raw = v.raw_json_token();
    int64_t ms = 0;
    if (v.get_int64().get(ms) != simdjson::SUCCESS)
      fail(p, quote(raw) + " is out of range" +
                  rangeText(json_read::kTimeMillisRange.min, json_read::kTimeMillisRange.max));
    if (ms == INT64_MAX) return kNever;
    if (ms < json_read::kTimeMillisRange.min || ms > json_read::kTimeMillisRange.max)
      fail(p, std::to_string(ms) + " is out of range" +
                  rangeText(json_read::kTimeMillisRange.min, json_read::kTimeMillisRange.max));
    return fromMillis(ms);
  }
  return fromMillis(whole(v, p, json_read::kTimeMillisRange.min, json_read::kTimeMillisRange.max));
}

sj::array list(sj::value& v, const Path& p) {
  if (v.type() != sj::json_type::array) fail(p, shown(v) + " is not a list");
  return v.get_array();
}

// Calls read(i, value) for each field of the object `v`, i its key's place in `known`: a key not
// there, or given twice, fails; a null value counts as absent. `what` names the document at the
// top ("the heartbeat"); elsewhere the path does. Returns the keys seen (bit i for known[i]).
template <size_t N, typename Read>
uint64_t eachField(sj::value& v, const Path& p, const std::array<std::string_view, N>& known,
                   std::string_view what, Read&& read) {
  static_assert(N <= 64);
  if (v.type() != sj::json_type::object) {
    const char* got = typeName(v.type());
    if (!what.empty()) throw badInput(std::string(what) + ": expected a JSON object, got " + got);
    fail(p, std::string("expected a JSON object, got ") + got);
  }
  uint64_t seen = 0;   // keys with a value
  uint64_t given = 0;  // keys given at all, null or not: each at most once
  for (auto member : v.get_object()) {
    std::string_view key = member.unescaped_key();
    size_t i = 0;
    while (i < N && known[i] != key) ++i;
    const Path at = p.field(key);
    if (i == N) {
      std::string names;
      for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
      throw badInput("unknown field '" + (what.empty() ? at.text() : common::printable(key)) + "'" +
                     (what.empty() ? "" : " in " + std::string(what)) + " (known: " + names + ")");
    }
    if (given & (uint64_t{1} << i)) fail(at, "given twice");
    given |= uint64_t{1} << i;
    sj::value value = member.value();
    if (value.type() == sj::json_type::null) {
      if (!value.is_null()) fail(at, shown(value) + " is not a JSON value");
      continue;
    }
    seen |= uint64_t{1} << i;
    read(i, value, at);
  }
  return seen;
}

template <size_t N>
void need(uint64_t seen, const Path& p, const std::array<std::string_view, N>& known,
          std::initializer_list<size_t> required) {
  for (size_t i : required)
    if (!(seen & (uint64_t{1} << i))) throw badInput("missing field '" + p.field(known[i]).text() + "'");
}

constexpr std::array<std::string_view, 17> kGpuFields{"index",
                                                      "uuid",
                                                      "pci",
                                                      "time_ms",
                                                      "sm_utilization",
                                                      "memory_utilization",
                                                      "memory_used_bytes",
                                                      "memory_total_bytes",
                                                      "temperature_c",
                                                      "power_w",
                                                      "ecc_uncorrected_volatile",
                                                      "retired_pages_pending",
                                                      "remapping_failure",
                                                      "xid_events",
                                                      "processes",
                                                      "error",
                                                      "energy_mj"};

topo::GpuSample gpuSample(sj::value& v, const Path& p) {
  topo::GpuSample g;
  uint64_t seen = eachField(v, p, kGpuFields, {}, [&](size_t i, sj::value& x, const Path& at) {
    switch (i) {
      case 0:
        g.index = whole(x, at, kGpuIndexRange.min, kGpuIndexRange.max);
        break;
      case 1:
        g.uuid = text(x, at, common::kMaxLabelBytes);
        break;
      case 2:
        g.pci = text(x, at, 64);
        break;
      case 3:
        g.time = time(x, at);
        break;
      case 4:
        g.sm_utilization = number(x, at, 0, 1);
        break;
      case 5:
        g.memory_utilization = number(x, at, 0, 1);
        break;
      case 6:
        g.memory_used_bytes = whole<uint64_t>(x, at, 0, UINT64_MAX);
        break;
      case 7:
        g.memory_total_bytes = whole<uint64_t>(x, at, 0, UINT64_MAX);
        break;
      case 8:
        g.temperature_c = number(x, at, -273.15, 1000);
        break;
      case 9:
        g.power_w = number(x, at, 0, 1e6);
        break;
      case 10:
        g.ecc_uncorrected_volatile = whole<uint64_t>(x, at, 0, UINT64_MAX);
        break;
      case 11:
        g.retired_pages_pending = boolean(x, at);
        break;
      case 12:
        g.remapping_failure = boolean(x, at);
        break;
      case 13: {
        size_t n = 0;
        for (sj::value e : list(x, at)) {
          if (n == kMaxXidEventsPerGpu)
            fail(at,
                 "more than the " + std::to_string(kMaxXidEventsPerGpu) + " events one heartbeat may carry");
          const Path ep = at.element(n++);
          topo::XidEvent event;
          constexpr std::array<std::string_view, 2> kXidFields{"xid", "time_ms"};
          uint64_t got = eachField(e, ep, kXidFields, {}, [&](size_t k, sj::value& y, const Path& yp) {
            if (k == 0)
              event.xid = whole<uint64_t>(y, yp, 0, UINT32_MAX);
            else
              event.time = time(y, yp);
          });
          need(got, ep, kXidFields, {0, 1});
          g.xid_events.push_back(event);
        }
        break;
      }
      case 14: {
        size_t n = 0;
        for (sj::value e : list(x, at)) {
          if (n == kMaxProcessesPerGpu)
            fail(at, "more than the " + std::to_string(kMaxProcessesPerGpu) +
                         " processes one heartbeat may carry");
          const Path ep = at.element(n++);
          topo::GpuProcess process;
          constexpr std::array<std::string_view, 2> kProcessFields{"pid", "used_memory_bytes"};
          uint64_t got = eachField(e, ep, kProcessFields, {}, [&](size_t k, sj::value& y, const Path& yp) {
            if (k == 0)
              process.pid = whole(y, yp, kPidRange.min, kPidRange.max);
            else
              process.used_memory_bytes = whole<uint64_t>(y, yp, 0, UINT64_MAX);
          });
          need(got, ep, kProcessFields, {0});
          g.processes.push_back(process);
        }
        break;
      }
      case 15:
        g.error = text(x, at, kMaxErrorBytes);
        break;
      case 16:
        g.energy_mj = whole<uint64_t>(x, at, 0, UINT64_MAX);
        break;
    }
  });
  need(seen, p, kGpuFields, {0, 3});
  return g;
}

topo::NicPortSample nicSample(sj::value& v, const Path& p) {
  constexpr std::array<std::string_view, 5> kNicFields{"nic", "port", "state", "rate_gbps", "time_ms"};
  topo::NicPortSample n;
  uint64_t seen = eachField(v, p, kNicFields, {}, [&](size_t i, sj::value& x, const Path& at) {
    switch (i) {
      case 0:
        n.nic = text(x, at, common::kMaxLabelBytes);
        break;
      case 1:
        n.port = whole(x, at, 0, 255);
        break;
      case 2: {
        std::string state = text(x, at, 32);
        n.state = topo::portStateFromString(state);
        if (n.state == topo::PortState::kUnknown && state != topo::toString(topo::PortState::kUnknown))
          fail(at, "'" + state + "' is not a port state (down, init, armed, active, active_defer, unknown)");
        break;
      }
      case 3:
        n.rate_gbps = number(x, at, 0, 1e6);
        break;
      case 4:
        n.time = time(x, at);
        break;
    }
  });
  need(seen, p, kNicFields, {0, 1, 2, 4});
  return n;
}

// mig_results and mps_errors: per GPU index, what the agent says of it ({"index", "error"} each).
void agentResults(sj::value& x, const Path& at, std::map<size_t, std::string>& results) {
  constexpr std::array<std::string_view, 2> kResultFields{"index", "error"};
  size_t n = 0;
  for (sj::value e : list(x, at)) {
    if (n == kGpuIndexRange.max + 1) fail(at, "more results than a node has GPUs");
    const Path ep = at.element(n++);
    size_t index = 0;
    std::string error;
    uint64_t got = eachField(e, ep, kResultFields, {}, [&](size_t k, sj::value& y, const Path& yp) {
      if (k == 0)
        index = whole(y, yp, kGpuIndexRange.min, kGpuIndexRange.max);
      else
        error = text(y, yp, kMaxErrorBytes);
    });
    need(got, ep, kResultFields, {0, 1});
    results[index] = std::move(error);
  }
}

Heartbeat heartbeat(sj::value& v) {
  constexpr std::array<std::string_view, 11> kFields{
      "schema", "node",           "agent",       "time_ms",    "topology_hash", "gpus",
      "nics",   "process_leases", "mig_results", "mps_errors", "health_failure"};
  const Path root;
  Heartbeat h;
  uint64_t seen = eachField(v, root, kFields, "the heartbeat", [&](size_t i, sj::value& x, const Path& at) {
    switch (i) {
      case 0: {
        std::string_view s = string(x, at);
        if (s != kHeartbeatSchema)
          fail(at, "'" + common::printable(s) + "' is not " + kHeartbeatSchema +
                       " (an agent of another version?)");
        break;
      }
      case 1: {
        h.node = std::string(string(x, at));
        checked(h.node, at,
                [](std::string_view t, const std::string& what) { common::checkNodeName(t, what); });
        break;
      }
      case 2:
        h.agent_version = text(x, at, kMaxVersionBytes);
        break;
      case 3:
        h.time = time(x, at);
        break;
      case 4:
        h.topology_hash = text(x, at, 64);
        break;
      case 5: {
        for (sj::value e : list(x, at)) {
          if (h.gpus.size() > kGpuIndexRange.max)
            fail(at, "more GPUs than a node may have (" + std::to_string(kGpuIndexRange.max + 1) + ")");
          const Path ep = at.element(h.gpus.size());
          h.gpus.push_back(gpuSample(e, ep));
          for (size_t j = 0; j + 1 < h.gpus.size(); ++j)
            if (h.gpus[j].index == h.gpus.back().index)
              fail(at, "GPU index " + std::to_string(h.gpus.back().index) + " appears twice");
        }
        break;
      }
      case 6: {
        for (sj::value e : list(x, at)) {
          if (h.nics.size() == kMaxNicPorts) fail(at, "more ports than " + std::to_string(kMaxNicPorts));
          h.nics.push_back(nicSample(e, at.element(h.nics.size())));
        }
        break;
      }
      case 7: {
        constexpr std::array<std::string_view, 2> kOwnerFields{"pid", "lease"};
        size_t n = 0;
        for (sj::value e : list(x, at)) {
          if (n == kMaxProcessesPerGpu * 8)
            fail(at, "more processes than " + std::to_string(kMaxProcessesPerGpu * 8));
          const Path ep = at.element(n++);
          uint32_t pid = 0;
          std::string lease;
          uint64_t got = eachField(e, ep, kOwnerFields, {}, [&](size_t k, sj::value& y, const Path& yp) {
            if (k == 0) {
              pid = whole(y, yp, kPidRange.min, kPidRange.max);
            } else {
              lease = std::string(string(y, yp));
              checked(lease, yp,
                      [](std::string_view t, const std::string& what) { common::checkLeaseId(t, what); });
            }
          });
          need(got, ep, kOwnerFields, {0, 1});
          h.process_leases[pid] = std::move(lease);
        }
        break;
      }
      case 8:
      case 9:
        agentResults(x, at, i == 8 ? h.mig_results : h.mps_errors);
        break;
      case 10:
        h.health_failure = text(x, at, kMaxHealthBytes);
        break;
    }
  });
  need(seen, root, kFields, {0, 1, 2, 3, 4, 5});
  return h;
}

}  // namespace stream

}  // namespace

Heartbeat heartbeatFromText(std::string_view body) {
  namespace sj = simdjson::ondemand;
  // A byte-order mark is not JSON, but a reader may skip it (RFC 8259, 8.1); nlohmann did.
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  const size_t skipped = body.starts_with(kBom) ? kBom.size() : 0;
  body.remove_prefix(skipped);
  // A parser keeps buffers of about six times the largest document it read: one per worker thread
  // for heartbeats of the usual size, a parser of its own for a larger body (poold --max-body).
  constexpr size_t kKeptParserBytes = size_t{1} << 20;
  thread_local sj::parser kept;
  std::optional<sj::parser> own;
  sj::parser& parser = body.size() <= kKeptParserBytes ? kept : own.emplace();
  simdjson::padded_string padded(body);
  if (padded.data() == nullptr && !body.empty())
    throw Error(ErrorCode::kIo, "the heartbeat: no memory for its " + std::to_string(body.size()) + " bytes");
  sj::document doc;
  bool started = false;  // a document that never started has no location to ask for
  auto byte = [&](size_t offset) { return std::to_string(offset + skipped); };
  auto malformed = [&](simdjson::error_code code) -> Error {
    if (code == simdjson::UTF8_ERROR)
      return badInput("the heartbeat: byte " + byte(common::utf8ErrorOffset(body)) + " is not UTF-8");
    std::string at;
    const char* where = nullptr;
    if (started && doc.current_location().get(where) == simdjson::SUCCESS && where >= padded.data() &&
        where <= padded.data() + padded.size())
      at = " at byte " + byte(static_cast<size_t>(where - padded.data()));
    return badInput("the heartbeat: malformed JSON" + at + ": " + simdjson::error_message(code));
  };
  if (simdjson::error_code code = parser.iterate(padded).get(doc); code != simdjson::SUCCESS)
    throw malformed(code);
  started = true;
  try {
    if (sj::json_type type = doc.type(); type != sj::json_type::object)
      throw badInput(std::string("the heartbeat: expected a JSON object, got ") + stream::typeName(type));
    sj::value root = doc.get_value();
    Heartbeat h = stream::heartbeat(root);
    const char* rest = nullptr;
    if (doc.current_location().get(rest) == simdjson::SUCCESS)
      throw badInput("the heartbeat: malformed JSON: more after the object, at byte " +
                     byte(static_cast<size_t>(rest - padded.data())));
    return h;
  } catch (const simdjson::simdjson_error& e) {
    throw malformed(e.error());
  }
}

}  // namespace poolrun::pool
