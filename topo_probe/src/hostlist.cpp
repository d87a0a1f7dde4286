#include "poolrun/topo/hostlist.hpp"

#include <charconv>

#include "poolrun/common/error.hpp"

namespace poolrun::topo {
namespace {

[[noreturn]] void bad(std::string_view text, const std::string& what) {
  throw badInput("bad hostlist '" + std::string(text) + "': " + what + " (expected e.g. dgx[01-16],login1)");
}

// Splits at commas that are not inside brackets.
std::vector<std::string_view> splitTop(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '[') {
      if (++depth > 1) bad(text, "nested '['");
    } else if (text[i] == ']') {
      if (--depth < 0) bad(text, "']' without '['");
    }
  }
  if (depth != 0) bad(text, "'[' without ']'");
  return out;
}

std::vector<std::string> expandRange(std::string_view whole, std::string_view inside) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= inside.size()) {
    size_t comma = inside.find(',', start);
    std::string_view item =
        inside.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? inside.size() + 1 : comma + 1;
    size_t dash = item.find('-');
    std::string_view lo = item.substr(0, dash),
                     hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    unsigned long a = 0, b = 0;
    auto pa = std::from_chars(lo.data(), lo.data() + lo.size(), a);
    auto pb = std::from_chars(hi.data(), hi.data() + hi.size(), b);
    if (lo.empty() || hi.empty() || pa.ec != std::errc() || pa.ptr != lo.data() + lo.size() ||
        pb.ec != std::errc() || pb.ptr != hi.data() + hi.size()) {
      bad(whole, "range '" + std::string(item) + "' is not N or N-M");
    }
    if (a > b) bad(whole, "range '" + std::string(item) + "' goes backwards");
    if (b - a > 10'000'000) bad(whole, "range '" + std::string(item) + "' is too large");
    size_t width = lo.size();
    for (unsigned long v = a; v <= b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out.push_back(std::move(digits));
    }
  }
  return out;
}

void expandOne(std::string_view whole, std::string_view item, std::vector<std::string>& out, size_t limit) {
  std::vector<std::string> partial{""};
  size_t pos = 0;
  while (pos < item.size()) {
    size_t open = item.find('[', pos);
    std::string_view literal =
        item.substr(pos, open == std::string_view::npos ? std::string_view::npos : open - pos);
    for (std::string& p : partial) p += literal;
    if (open == std::string_view::npos) break;
    size_t close = item.find(']', open);
    std::vector<std::string> values = expandRange(whole, item.substr(open + 1, close - open - 1));
    if (partial.size() * values.size() > limit) bad(whole, "more than " + std::to_string(limit) + " hosts");
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const std::string& p : partial) {
      for (const std::string& v : values) next.push_back(p + v);
    }
    partial = std::move(next);
    pos = close + 1;
  }
  for (std::string& p : partial) {
    if (p.empty()) bad(whole, "empty host name");
    out.push_back(std::move(p));
    if (out.size() > limit) bad(whole, "more than " + std::to_string(limit) + " hosts");
  }
}

}  // namespace

std::vector<std::string> expandHostlist(std::string_view text, size_t limit) {
  std::vector<std::string> out;
  for (std::string_view item : splitTop(text)) {
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) bad(text, "empty item");
    expandOne(text, item, out, limit);
  }
  return out;
}

std::string compressHostlist(const std::vector<std::string>& hosts) {
  // Runs of consecutive hosts that share a prefix and a numeric suffix of one width.
  std::string out;
  size_t i = 0;
  auto split = [](const std::string& h) {
    size_t d = h.size();
    while (d > 0 && std::isdigit(static_cast<unsigned char>(h[d - 1]))) --d;
    return d;
  };
  while (i < hosts.size()) {
    size_t d = split(hosts[i]);
    std::string prefix = hosts[i].substr(0, d);
    std::string digits = hosts[i].substr(d);
    if (!out.empty()) out += ',';
    if (digits.empty() || digits.size() > 9) {
      out += hosts[i++];
      continue;
    }
    std::vector<std::pair<std::string, std::string>> ranges;
    size_t j = i;
    while (j < hosts.size()) {
      size_t dj = split(hosts[j]);
      if (hosts[j].substr(0, dj) != prefix || hosts[j].size() - dj != digits.size()) break;
      std::string first = hosts[j].substr(dj), last = first;
      ++j;
      while (j < hosts.size() && split(hosts[j]) == dj && hosts[j].substr(0, dj) == prefix &&
             hosts[j].size() - dj == digits.size() &&
             std::stoul(hosts[j].substr(dj)) == std::stoul(last) + 1) {
        last = hosts[j].substr(dj);
        ++j;
      }
      ranges.emplace_back(first, last);
    }
    if (ranges.size() == 1 && ranges[0].first == ranges[0].second) {
      out += prefix + ranges[0].first;
    } else {
      out += prefix + "[";
      for (size_t r = 0; r < ranges.size(); ++r) {
        if (r > 0) out += ',';
        out += ranges[r].first;
        if (ranges[r].second != ranges[r].first) out += "-" + ranges[r].second;
      }
      out += "]";
    }
    i = j;
  }
  return out;
}

}  // namespace poolrun::topo
