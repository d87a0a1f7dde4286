#include "poolrun/topo/cpuset.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iterator>

#include "poolrun/common/error.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/topo/cpu_list.hpp"

namespace poolrun::topo {
namespace {

using common::trim;

constexpr unsigned kMaxCpu = 1u << 20;  // no machine has a million CPUs; guards hostile input

}  // namespace

CpuSet::CpuSet(std::vector<unsigned> cpus) : cpus_(std::move(cpus)) {
  std::sort(cpus_.begin(), cpus_.end());
  cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
}

CpuSet CpuSet::parseList(std::string_view text) {
  std::vector<unsigned> cpus;
  bool tooMany = false;
  CpuListStop stop = readCpuList(text.data(), text.size(), [&](unsigned long first, unsigned long last) {
    tooMany = cpus.size() + (last - first) >= kMaxCpu;
    for (unsigned long c = first; c <= last && !tooMany; ++c) cpus.push_back(static_cast<unsigned>(c));
    return !tooMany;
  });
  std::string item(text.substr(stop.item, stop.item_size));
  if (tooMany) throw badInput("CPU list '" + item + "' names more than " + std::to_string(kMaxCpu) + " CPUs");
  if (!stop.ok) throw badInput("bad CPU list item '" + item + "' (expected a cpulist such as 0-11,96-107)");
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
