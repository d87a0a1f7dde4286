#pragma once

// Sets of CPUs and of NUMA nodes as the kernel takes them (sched_setaffinity, set_mempolicy), with
// the Linux list form ("0-11,96-107") that sysfs and the plan use.

#include "text.hpp"

namespace poolrun::runtime::core {

template <unsigned kBits>
class Bits {
 public:
  static constexpr unsigned kSize = kBits;

  void set(unsigned i) {
    if (i < kBits) words_[i / 64] |= uint64_t{1} << (i % 64);
  }
  bool test(unsigned i) const { return i < kBits && (words_[i / 64] >> (i % 64) & 1) != 0; }
  unsigned count() const {
    unsigned n = 0;
    for (uint64_t w : words_) n += static_cast<unsigned>(__builtin_popcountll(w));
    return n;
  }
  bool empty() const { return count() == 0; }
  // The first member at or after `from`, or kBits.
  unsigned next(unsigned from) const {
    for (unsigned i = from; i < kBits; ++i) {
      if (words_[i / 64] == 0) {
        i |= 63;
        continue;
      }
      if (test(i)) return i;
    }
    return kBits;
  }
  Bits operator&(const Bits& o) const {
    Bits r;
    for (unsigned i = 0; i < kWords; ++i) r.words_[i] = words_[i] & o.words_[i];
    return r;
  }
  bool intersects(const Bits& o) const { return !(*this & o).empty(); }
  bool operator==(const Bits& o) const {
    for (unsigned i = 0; i < kWords; ++i) {
      if (words_[i] != o.words_[i]) return false;
    }
    return true;
  }

  // A list such as "0-3, 8" (spaces around items, a final comma and a final newline allowed; ""
  // is empty). False for anything else, or for a member past kBits unless `beyond` counts those
  // (up to 2^20: a plan may name CPUs this kernel cannot have, which is then said plainly).
  bool parseList(Text text, unsigned* beyond = nullptr) {
    *this = Bits();
    auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n'; };
    long max = beyond != nullptr ? (1L << 20) - 1 : long{kBits} - 1;
    size_t at = 0;
    while (at < text.size) {
      size_t comma = text.find(',', at);
      Text item = text.sub(at, comma - at);
      at = comma + 1;
      while (!item.empty() && blank(item[0])) item = item.sub(1);
      while (!item.empty() && blank(item[item.size - 1])) --item.size;
      if (item.empty() && at >= text.size) break;  // a final comma, or nothing but blanks
      size_t dash = item.find('-');
      long first = 0, last = 0;
      bool ok = dash == item.size ? parseNumber(item, max, first) && (last = first, true)
                                  : parseNumber(item.sub(0, dash), max, first) &&
                                        parseNumber(item.sub(dash + 1), max, last);
      if (!ok || first > last) return false;
      for (long i = first; i <= last; ++i) {
        if (i < long{kBits}) {
          set(static_cast<unsigned>(i));
        } else {
          ++*beyond;
        }
      }
    }
    return true;
  }
  // The list form; "none" where `noneWord` is given and the set is empty.
  template <class Out>
  void addList(Out& out, const char* noneWord = "") const {
    bool any = false;
    for (unsigned i = next(0); i < kBits;) {
      unsigned j = i;
      while (j + 1 < kBits && test(j + 1)) ++j;
      if (any) out.add(",");
      out.add(i);
      if (j > i) out.add("-").add(j);
      any = true;
      i = next(j + 1);
    }
    if (!any) out.add(noneWord);
  }

  // The kernel's form: 64-bit words, lowest CPU first.
  uint64_t* words() { return words_; }
  const uint64_t* words() const { return words_; }
  static constexpr size_t kBytes = kBits / 8;

 private:
  static constexpr unsigned kWords = kBits / 64;
  uint64_t words_[kWords] = {};
};

// Linux builds for at most 8192 CPUs (x86 MAXSMP) and 1024 NUMA nodes (NODES_SHIFT 10).
using CpuMask = Bits<8192>;
using NodeMask = Bits<1024>;

}  // namespace poolrun::runtime::core
