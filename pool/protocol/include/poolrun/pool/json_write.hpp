#pragma once

// Writers of JSON text for the replies poold writes without nlohmann's DOM (the dashboard's data,
// a heartbeat's reply): what they append is what nlohmann's dump() would write. Private to the pool
// libraries.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace poolrun::pool::json_write {

// `text` as a JSON string: as is where it needs no escape (printable ASCII without '"' or '\'), the
// usual case, else through nlohmann (text that is not UTF-8 replaced, as every reply of poold is).
inline void appendString(std::string& out, std::string_view text) {
  bool plain = true;
  for (char c : text) plain = plain && c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
  if (!plain) {
    out += nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out += '"';
  out += text;
  out += '"';
}

// `[a,b,...]` of each item, prefixed with `"name":` where a name is given.
template <typename Items, typename F>
void appendArray(std::string& out, const char* name, const Items& items, F&& each) {
  if (name) {
    out += '"';
    out += name;
    out += "\":";
  }
  out += '[';
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += ',';
    first = false;
    each(item);
  }
  out += ']';
}

}  // namespace poolrun::pool::json_write
