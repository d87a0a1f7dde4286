#include "poolrun/common/time_text.hpp"

#include <charconv>
#include <cstdio>

namespace poolrun::common {
namespace {

using namespace std::chrono;

// Reads exactly `digits` decimal digits at `pos`.
std::optional<int> digitsAt(std::string_view s, size_t pos, size_t digits) {
  if (pos + digits > s.size()) return std::nullopt;
  int v = 0;
  for (size_t i = pos; i < pos + digits; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

}  // namespace

std::string rfc3339(system_clock::time_point t) {
  auto ms = floor<milliseconds>(t);
  auto day = floor<days>(ms);
  year_month_day ymd{day};
  hh_mm_ss hms{ms - day};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                static_cast<int>(hms.seconds().count()), static_cast<int>(hms.subseconds().count()));
  return buf;
}

std::optional<system_clock::time_point> parseRfc3339(std::string_view s) {
  auto y = digitsAt(s, 0, 4), mo = digitsAt(s, 5, 2), d = digitsAt(s, 8, 2);
  auto h = digitsAt(s, 11, 2), mi = digitsAt(s, 14, 2), se = digitsAt(s, 17, 2);
  if (!y || !mo || !d || !h || !mi || !se || s.size() < 20 || s[4] != '-' || s[7] != '-' ||
      (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':')
    return std::nullopt;
  year_month_day ymd{year(*y), month(static_cast<unsigned>(*mo)), day(static_cast<unsigned>(*d))};
  if (!ymd.ok() || *h > 23 || *mi > 59 || *se > 60) return std::nullopt;
  size_t pos = 19;
  milliseconds fraction{0};
  if (s[pos] == '.') {
    size_t start = ++pos;
    int scale = 100;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      fraction += milliseconds((s[pos] - '0') * scale);
      scale /= 10;
      ++pos;
    }
    if (pos == start) return std::nullopt;
  }
  minutes offset{0};
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    auto oh = digitsAt(s, pos + 1, 2), om = digitsAt(s, pos + 4, 2);
    if (!oh || !om || pos + 6 > s.size() || s[pos + 3] != ':' || *oh > 23 || *om > 59) return std::nullopt;
    offset = hours(*oh) + minutes(*om);
    if (s[pos] == '-') offset = -offset;
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  auto t = sys_days(ymd) + hours(*h) + minutes(*mi) + seconds(*se) + fraction - offset;
  return system_clock::time_point(duration_cast<system_clock::duration>(t.time_since_epoch()));
}

}  // namespace poolrun::common
