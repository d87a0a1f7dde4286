#include "poolrun/common/json_fields.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace poolrun::common {
namespace {

using nlohmann::json;

// A key as messages show it: as it is where it is printable ASCII, else with JSON's escapes (a
// control character, a quote or a byte that is not UTF-8 must not break the message's line).
std::string keyText(std::string_view key) {
  bool plain = true;
  for (char c : key) plain = plain && c >= 0x20 && c < 0x7f && c != '\'' && c != '\\';
  if (plain) return std::string(key);
  std::string quoted = json(std::string(key)).dump(-1, ' ', false, json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

std::string numberText(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

std::string shownJson(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

JsonFields::JsonFields(const json& object, std::string path, Failure fail, Nulls nulls)
    : object_(object), path_(std::move(path)), fail_(std::move(fail)), nulls_(nulls) {
  if (!object_.is_object()) {
    raise((path_.empty() ? "" : "field '" + path_ + "': ") + "expected a JSON object, got " +
          std::string(object_.type_name()));
  }
}

JsonFields JsonFields::child(const json& value, std::string path) const {
  return JsonFields(value, std::move(path), fail_, nulls_);
}

JsonFields JsonFields::object(std::string_view key) const {
  return child(need(key), name(key));
}

void JsonFields::allowOnly(std::initializer_list<std::string_view> known, std::string_view what,
                           bool (*ignored)(std::string_view key)) const {
  for (const auto& [key, value] : object_.items()) {
    bool ok = ignored != nullptr && ignored(key);
    for (std::string_view k : known) ok = ok || key == k;
    if (ok) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    raise("unknown field '" + (what.empty() ? name(key) : keyText(key)) + "'" +
          (what.empty() ? "" : " in " + std::string(what)) + " (known: " + list + ")");
  }
}

const json* JsonFields::find(std::string_view key) const {
  auto it = object_.find(key);
  if (it == object_.end() || (nulls_ == Nulls::kAbsent && it->is_null())) return nullptr;
  return &*it;
}

bool JsonFields::has(std::string_view key) const {
  return find(key) != nullptr;
}

const json& JsonFields::need(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) raise("missing field '" + name(key) + "'");
  return *v;
}

double JsonFields::numberValue(const json& v, std::string_view key, double min, double max) const {
  // The range's text only for an error: formatting it costs more than reading the number.
  auto range = [&] {
    return std::isinf(min) && std::isinf(max) ? std::string()
                                              : " (" + numberText(min) + " to " + numberText(max) + ")";
  };
  if (!v.is_number()) failField(key, shownJson(v) + " is not a number" + range());
  const double x = v.get<double>();
  if (!(x >= min && x <= max)) failField(key, shownJson(v) + " is out of range" + range());
  return x;
}

double JsonFields::number(std::string_view key, double min, double max) const {
  return numberValue(need(key), key, min, max);
}

double JsonFields::number(std::string_view key, double min, double max, double fallback) const {
  const json* v = find(key);
  return v == nullptr ? fallback : numberValue(*v, key, min, max);
}

bool JsonFields::boolean(std::string_view key) const {
  const json& v = need(key);
  if (!v.is_boolean()) failField(key, shownJson(v) + " is not true or false");
  return v.get<bool>();
}

bool JsonFields::boolean(std::string_view key, bool fallback) const {
  return has(key) ? boolean(key) : fallback;
}

std::string JsonFields::string(std::string_view key) const {
  const json& v = need(key);
  if (!v.is_string()) failField(key, shownJson(v) + " is not a string");
  return v.get<std::string>();
}

std::string JsonFields::string(std::string_view key, std::string fallback) const {
  return has(key) ? string(key) : std::move(fallback);
}

const json& JsonFields::array(std::string_view key) const {
  const json& v = need(key);
  if (!v.is_array()) failField(key, shownJson(v) + " is not a list");
  return v;
}

const json& JsonFields::optionalArray(std::string_view key) const {
  static const json kEmpty = json::array();
  return has(key) ? array(key) : kEmpty;
}

std::string JsonFields::name(std::string_view key) const {
  return path_.empty() ? keyText(key) : path_ + "." + keyText(key);
}

std::string JsonFields::element(std::string_view key, size_t index) const {
  return name(key) + "[" + std::to_string(index) + "]";
}

void JsonFields::fail(const std::string& what) const {
  raise(path_.empty() ? what : path_ + ": " + what);
}

void JsonFields::failField(std::string_view key, const std::string& what) const {
  raise("field '" + name(key) + "': " + what);
}

void JsonFields::raise(const std::string& message) const {
  fail_(message);
  std::abort();  // a Failure that returns is a bug of its format
}

}  // namespace poolrun::common
