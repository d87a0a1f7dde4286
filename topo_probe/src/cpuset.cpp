#include "poolrun/topo/cpuset.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iterator>

#include "poolrun/common/text.hpp"
#include "poolrun/topo/error.hpp"

namespace poolrun::topo {
namespace {

bool parseUnsigned(std::string_view text, unsigned& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

using common::trim;

constexpr unsigned kMaxCpu = 1u << 20;  // no machine has a million CPUs; guards hostile input

}  // namespace

CpuSet::CpuSet(std::vector<unsigned> cpus) : cpus_(std::move(cpus)) {
  std::sort(cpus_.begin(), cpus_.end());
  cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
}

CpuSet CpuSet::parseList(std::string_view text) {
  text = trim(text);
  std::vector<unsigned> cpus;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    size_t dash = item.find('-');
    unsigned first = 0, last = 0;
    bool ok = dash == std::string_view::npos
                  ? parseUnsigned(item, first) && (last = first, true)
                  : parseUnsigned(item.substr(0, dash), first) && parseUnsigned(item.substr(dash + 1), last);
    if (!ok || first > last || last >= kMaxCpu) {
      throw badInput("bad CPU list item '" + std::string(item) +
                     "' (expected a cpulist such as 0-11,96-107)");
    }
    if (cpus.size() + (last - first) >= kMaxCpu) {
      throw badInput("CPU list '" + std::string(item) + "' names more than " + std::to_string(kMaxCpu) +
                     " CPUs");
    }
    for (unsigned c = first; c <= last; ++c) cpus.push_back(c);
  }
  return CpuSet(std::move(cpus));
}

CpuSet CpuSet::parseMask(std::string_view text) {
  text = trim(text);
  std::vector<std::string_view> words;
  while (true) {
    size_t comma = text.find(',');
    words.push_back(trim(text.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  if (words.size() > kMaxCpu / 32) throw badInput("CPU mask is too long");
  std::vector<unsigned> cpus;
  unsigned base = 0;
  for (auto it = words.rbegin(); it != words.rend(); ++it, base += 32) {
    std::string_view w = *it;
    if (w.starts_with("0x") || w.starts_with("0X")) w.remove_prefix(2);
    uint32_t value = 0;
    if (w.empty() || w.size() > 8) throw badInput("bad CPU mask word '" + std::string(*it) + "'");
    auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), value, 16);
    if (ec != std::errc() || end != w.data() + w.size()) {
      throw badInput("bad CPU mask word '" + std::string(*it) + "' (expected hexadecimal)");
    }
    for (unsigned bit = 0; bit < 32; ++bit) {
      if (value & (1u << bit)) cpus.push_back(base + bit);
    }
  }
  return CpuSet(std::move(cpus));
}

std::string CpuSet::toList() const {
  std::string out;
  for (size_t i = 0; i < cpus_.size();) {
    size_t j = i;
    while (j + 1 < cpus_.size() && cpus_[j + 1] == cpus_[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus_[i]);
    if (j > i) out += '-' + std::to_string(cpus_[j]);
    i = j + 1;
  }
  return out;
}

std::string CpuSet::toMask(size_t minWords) const {
  size_t words = cpus_.empty() ? 1 : cpus_.back() / 32 + 1;
  words = std::max(words, minWords);
  std::vector<uint32_t> value(words, 0);
  for (unsigned c : cpus_) value[c / 32] |= 1u << (c % 32);
  std::string out;
  char buf[16];
  for (size_t w = words; w-- > 0;) {
    std::snprintf(buf, sizeof buf, "%08x", value[w]);
    if (!out.empty()) out += ',';
    out += buf;
  }
  return out;
}

bool CpuSet::contains(unsigned cpu) const {
  return std::binary_search(cpus_.begin(), cpus_.end(), cpu);
}

bool CpuSet::intersects(const CpuSet& other) const {
  return !(*this & other).empty();
}

CpuSet CpuSet::operator|(const CpuSet& other) const {
  std::vector<unsigned> out;
  std::set_union(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(), std::back_inserter(out));
  return CpuSet(std::move(out));
}

CpuSet CpuSet::operator&(const CpuSet& other) const {
  std::vector<unsigned> out;
  std::set_intersection(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(),
                        std::back_inserter(out));
  return CpuSet(std::move(out));
}

}  // namespace poolrun::topo
