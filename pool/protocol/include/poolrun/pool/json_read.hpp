#pragma once

// The checked readers behind every JSON document of the pool (pool/json.hpp, the agent protocol):
// fields through common::JsonFields, failures as poolrun::Error (kBadInput) naming the field.
// Private to the pool library.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "poolrun/common/json_fields.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool::json_read {

using common::JsonFields;

// Unix milliseconds that system_clock can hold (until about 2262); INT64_MAX stands for never.
inline constexpr Range<int64_t> kTimeMillisRange{
    0, std::chrono::duration_cast<std::chrono::milliseconds>(TimePoint::max().time_since_epoch()).count()};

// Durations the pool stored: at least a second, at most a century (far inside the clock).
inline constexpr int64_t kStoredSecondsMax = int64_t{100} * 366 * 86400;

// The fields of `doc`, named `path` in messages; a failure is poolrun::Error (kBadInput).
JsonFields fieldsOf(const nlohmann::json& doc, std::string path = "");

// A client's document: `what` names it where it is not even an object; a field its reader does not
// know is refused (a misspelt one, "ttl" for "ttl_s", would otherwise be ignored without a word).
JsonFields clientFields(const nlohmann::json& doc, std::initializer_list<std::string_view> known,
                        const std::string& what);

// A whole number (not a float, a bool or a string) in `range`.
template <typename T>
T integer(const JsonFields& f, std::string_view key, Range<T> range) {
  return f.integer(key, range.min, range.max);
}

template <typename T>
T integerOr(const JsonFields& f, std::string_view key, Range<T> range, T fallback) {
  return f.integer(key, range.min, range.max, fallback);
}

// A whole number the pool wrote itself (a stored row, a reply), clamped into [min, max]: the
// ranges of limits.hpp are what clients may ask for now, and an older pool accepted more (a TTL of
// 2^63 s, say), which must neither stop poold at start nor overflow the clock.
template <typename T>
T storedInteger(const JsonFields& f, std::string_view key, T min, T max, T fallback) {
  if (!f.has(key)) return fallback;
  const nlohmann::json& v = f.need(key);
  if (!v.is_number_integer()) f.failField(key, common::shownJson(v) + " is not a whole number");
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return std::cmp_greater(u, max) ? max : std::cmp_less(u, min) ? min : static_cast<T>(u);
  }
  int64_t i = v.get<int64_t>();
  return std::cmp_greater(i, max) ? max : std::cmp_less(i, min) ? min : static_cast<T>(i);
}

std::optional<std::chrono::seconds> secondsOr(const JsonFields& f, std::string_view key,
                                              Range<int64_t> range);
std::optional<std::chrono::seconds> storedSecondsOr(const JsonFields& f, std::string_view key);

// How strictly a string is read: what a client sends may hold no control characters and has a
// length limit; what the pool itself wrote (replies, stored rows) need only be UTF-8, so that
// writing it out again cannot throw.
// kClient: a client's text, checked as topo/names.hpp says; kStored: the pool's own, UTF-8 only;
// kAny: any string, judged by the caller (a request's texts by validateRequest).
enum class Text { kClient, kStored, kAny };

void checkUtf8(const std::string& s, const std::string& name);
std::string text(const JsonFields& f, std::string_view key, size_t maxBytes, Text mode);
std::string textOr(const JsonFields& f, std::string_view key, size_t maxBytes, Text mode);
std::map<std::string, std::string> labelsOr(const JsonFields& f, std::string_view key, Text mode);
// A node's levels (topo::kLevelFields), each where `f` has it, else empty.
topo::NodeLevels levelsOr(const JsonFields& f, size_t maxBytes, Text mode);
// Every level of `levels` into `doc` under its key (the leaf as "switch"), empty ones as "".
void putLevels(nlohmann::json& doc, const topo::NodeLevels& levels);
std::string nodeName(const JsonFields& f, std::string_view key);  // checked as topo/names.hpp says
std::string leaseId(const JsonFields& f, std::string_view key);
// Every string (keys too) of a nested document is UTF-8, and it is at most `depth` levels deep:
// what topo::fromJson keeps is written out again later.
void checkStrings(const nlohmann::json& v, const std::string& path, int depth);
// An RFC 3339 time (common/time_text.hpp).
TimePoint rfc3339Field(const JsonFields& f, std::string_view key);
// Unix milliseconds (INT64_MAX: never).
TimePoint timeField(const JsonFields& f, std::string_view key);

}  // namespace poolrun::pool::json_read
