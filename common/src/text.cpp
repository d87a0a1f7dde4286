#include "poolrun/common/text.hpp"

#include <cstdio>

namespace poolrun::common {

std::string_view trim(std::string_view text) {
  while (!text.empty() && isSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && isSpace(text.back())) text.remove_suffix(1);
  return text;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string firstLine(std::string_view text) {
  text = trim(text);
  return std::string(trim(text.substr(0, text.find('\n'))));
}

std::string hexNumber(uint64_t value, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace poolrun::common
