#pragma once

// Checked reading of one JSON object, for every JSON format poolrun reads (the pool's API and
// state, poolrun.topology/1, poolrun.tuner/1). Each accessor checks the type, and for numbers the
// range, of one field, and a wrong one fails with a message that names the field with its path
// in the document, quotes the value and says what was expected:
//   missing field 'gpus'
//   field 'gpus[2].index': 4294967296 is out of range (0 to 1023)
//   field 'nodes': 2.5 is not a whole number (1 to 4096)
//   field 'gpus': 3 is not a list
//   unknown field 'ttl' in the lease request (known: gpus, ttl_s, ...)
// How a failure is thrown is the format's: a JsonFields is given a function that throws its
// exception (poolrun::Error, tuner::ConfigError) with the message, prefixed as the format wants
// (with its file, say). Nothing is allocated but the messages of failures and child paths.

#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace poolrun::common {

// A JSON value as a message quotes it: compact, at most 40 bytes and then "...", bytes that are not
// UTF-8 replaced, so that a message is one printable line whatever the document held.
std::string shownJson(const nlohmann::json& value);

class JsonFields {
 public:
  // Throws the format's exception with `message`. It must not return.
  using Failure = std::function<void(const std::string& message)>;
  // Whether a field that is null counts as absent (the pool's and the topology's formats, whose
  // writers write null for "none") or as a value of the wrong type (the tuner's configuration).
  enum class Nulls { kAbsent, kValues };

  // `object` must outlive this. `path` names it in messages: "" for the document, "gpus[2]" for an
  // element, "net" for a nested object; its field k is then "gpus[2].k". Fails unless `object` is a
  // JSON object ("expected a JSON object, got array").
  JsonFields(const nlohmann::json& object, std::string path, Failure fail, Nulls nulls = Nulls::kAbsent);

  // The fields of `value`, a JSON object named `path`, read as these are (same failure and nulls).
  JsonFields child(const nlohmann::json& value, std::string path) const;
  // The field `key`, which must be present and a JSON object.
  JsonFields object(std::string_view key) const;

  // Refuses a field not in `known`: a misspelt one ("ttl" for "ttl_s") would be ignored without a
  // word. `what` names the object for the message ("the lease request"; "" names it by its path);
  // keys for which `ignored` is true are allowed too (the tuner's "comment" and "x-..." keys).
  void allowOnly(std::initializer_list<std::string_view> known, std::string_view what = {},
                 bool (*ignored)(std::string_view key) = nullptr) const;

  // Present (and not null, where nulls are absent).
  bool has(std::string_view key) const;
  // The value of `key`, or nullptr where it is absent.
  const nlohmann::json* find(std::string_view key) const;
  // The value of `key`; fails "missing field 'P'" where it is absent.
  const nlohmann::json& need(std::string_view key) const;

  // A JSON integer (not 1.0, true or "1") within [min, max].
  template <std::integral T>
  T integer(std::string_view key, T min, T max) const {
    return integerValue(need(key), key, min, max);
  }
  template <std::integral T>
  T integer(std::string_view key, T min, T max, T fallback) const {
    const nlohmann::json* v = find(key);
    return v == nullptr ? fallback : integerValue(*v, key, min, max);
  }
  // A JSON number within [min, max] (no range in messages where both are infinite).
  double number(std::string_view key, double min, double max) const;
  double number(std::string_view key, double min, double max, double fallback) const;
  bool boolean(std::string_view key) const;
  bool boolean(std::string_view key, bool fallback) const;
  std::string string(std::string_view key) const;
  std::string string(std::string_view key, std::string fallback) const;
  // A JSON array ("is not a list"); the second form gives an empty one where `key` is absent.
  const nlohmann::json& array(std::string_view key) const;
  const nlohmann::json& optionalArray(std::string_view key) const;

  // The object read, and its path in messages.
  const nlohmann::json& value() const { return object_; }
  const std::string& path() const { return path_; }
  // "gpus[2].index": the field `key` as messages name it.
  std::string name(std::string_view key) const;
  // "gpus[2]": element `index` of the array `key`, as messages name it.
  std::string element(std::string_view key, size_t index) const;

  // Fails with "PATH: WHAT" (just WHAT for the document): a check of the format's own.
  [[noreturn]] void fail(const std::string& what) const;
  // Fails with "field 'PATH.KEY': WHAT".
  [[noreturn]] void failField(std::string_view key, const std::string& what) const;

 private:
  template <std::integral T>
  T integerValue(const nlohmann::json& v, std::string_view key, T min, T max) const {
    // A whole number past 64 bits arrives as a double (30 digits: 1.2345678901234568e+29): it is out
    // of range, not "not whole".
    if (v.is_number_float() && std::isfinite(v.get<double>()) && std::abs(v.get<double>()) >= 9.2e18)
      failField(key, shownJson(v) + " is out of range" + rangeText(min, max));
    if (!v.is_number_integer()) failField(key, shownJson(v) + " is not a whole number" + rangeText(min, max));
    auto inRange = [&](auto x) { return std::cmp_greater_equal(x, min) && std::cmp_less_equal(x, max); };
    const bool isUnsigned = v.is_number_unsigned();
    const uint64_t u = isUnsigned ? v.get<uint64_t>() : 0;
    const int64_t i = isUnsigned ? 0 : v.get<int64_t>();
    if (isUnsigned ? !inRange(u) : !inRange(i)) {
      failField(key, shownJson(v) + " is out of range" + rangeText(min, max));
    }
    return isUnsigned ? static_cast<T>(u) : static_cast<T>(i);
  }
  template <std::integral T>
  static std::string rangeText(T min, T max) {
    return " (" + std::to_string(min) + " to " + std::to_string(max) + ")";
  }
  double numberValue(const nlohmann::json& v, std::string_view key, double min, double max) const;
  [[noreturn]] void raise(const std::string& message) const;

  const nlohmann::json& object_;
  std::string path_;
  Failure fail_;
  Nulls nulls_;
};

}  // namespace poolrun::common
