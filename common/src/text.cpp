#include "poolrun/common/text.hpp"

#include <climits>

#include "poolrun/common/error.hpp"

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

bool takePrefix(std::string_view& rest, std::string_view prefix) {
  if (!rest.starts_with(prefix)) return false;
  rest.remove_prefix(prefix.size());
  return true;
}

namespace {

template <typename Pred>
std::string_view takeWhile(std::string_view& rest, Pred pred) {
  size_t n = 0;
  while (n < rest.size() && pred(rest[n])) ++n;
  std::string_view taken = rest.substr(0, n);
  rest.remove_prefix(n);
  return taken;
}

}  // namespace

std::string_view takeDigits(std::string_view& rest) {
  return takeWhile(rest, [](char c) { return c >= '0' && c <= '9'; });
}

std::string_view takeSpace(std::string_view& rest) {
  return takeWhile(rest, isSpace);
}

std::string_view takeWord(std::string_view& rest) {
  return takeWhile(rest, [](char c) { return !isSpace(c); });
}

std::string hexNumber(uint64_t value, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(value));
  return buf;
}

int digitsValue(std::string_view digits) {
  int value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') break;
    if (value > (INT_MAX - (c - '0')) / 10) return INT_MAX;
    value = value * 10 + (c - '0');
  }
  return value;
}

void checkTomlKeyDepth(std::string_view text, const std::string& name, std::string_view hint) {
  constexpr int kMaxKeyParts = 64;
  int dots = 0;
  int line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      const bool multi = text.compare(i, 3, std::string(3, c)) == 0;
      const std::string close = multi ? std::string(3, c) : std::string(1, c);
      for (i += close.size(); i < text.size(); ++i) {
        if (text[i] == '\n') {
          if (!multi) {
            --i;  // an unterminated string: the parser says so; the line still counts
            break;
          }
          ++line;
        } else if (c == '"' && text[i] == '\\') {
          ++i;
        } else if (text.compare(i, close.size(), close) == 0) {
          i += close.size() - 1;
          break;
        }
      }
      continue;  // a quoted key part: the chain goes on
    }
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == ' ' || c == '\t';
    if (c == '.') {
      if (++dots >= kMaxKeyParts)
        throw badInput(name + ":" + std::to_string(line) + ": a key nests deeper than " +
                       std::to_string(kMaxKeyParts) + " levels (" + std::string(hint) + ")");
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (!word) {
      dots = 0;
      if (c == '\n') ++line;
    }
  }
}

}  // namespace poolrun::common
