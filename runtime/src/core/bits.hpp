#pragma once

// Sets of CPUs and of NUMA nodes as the kernel takes them (sched_setaffinity, set_mempolicy), with
// the Linux list form ("0-11,96-107") that sysfs and the plan use.

#include "poolrun/topo/cpu_list.hpp"
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

  // A list such as "0-3, 8" (topo/cpu_list.hpp has the form); false for anything else, or for a
  // member past kBits unless `beyond` counts those (a plan may name CPUs this kernel cannot have,
  // which is then said plainly).
  bool parseList(Text text, unsigned* beyond = nullptr) {
    *this = Bits();
    auto add = [&](unsigned long first, unsigned long last) {
      for (unsigned long i = first; i <= last; ++i) {
        if (i < kBits) {
          set(static_cast<unsigned>(i));
        } else if (beyond == nullptr) {
          return false;
        } else {
          ++*beyond;
        }
      }
      return true;
    };
    return topo::readCpuList(text.data, text.size, add).ok;
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
