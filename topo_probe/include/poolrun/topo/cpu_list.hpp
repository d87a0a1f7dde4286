#pragma once

// The Linux cpulist form ("0-11,96-107") that sysfs, taskset, Open MPI and the plan write, read
// without allocating or throwing and with C headers only: the one reader of both topo::CpuSet and
// the rank core of poolrun-rank (runtime/src/core, built without the C++ library).

#include <stddef.h>

namespace poolrun::topo {

// No machine has a million CPUs: a larger index is malformed input.
inline constexpr unsigned long kMaxCpuIndex = (1UL << 20) - 1;

// Where a list stopped: ok, or the item (its offset and length in the text) that is malformed or
// that `range` refused.
struct CpuListStop {
  bool ok = true;
  size_t item = 0, item_size = 0;
};

// Calls `range(first, last)` for each item of `text` ("N" or "N-M", N <= M <= kMaxCpuIndex), in
// order; blanks (space, tab, newline) around items and one final comma are allowed, and "" or
// blanks alone are the empty list. `range` returns false to stop (a limit of the caller's).
template <class Range>
constexpr CpuListStop readCpuList(const char* text, size_t size, Range&& range) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n'; };
  auto number = [](const char* s, size_t n, unsigned long& out) {
    out = 0;
    for (size_t i = 0; i < n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      out = out * 10 + static_cast<unsigned long>(s[i] - '0');
      if (out > kMaxCpuIndex) return false;
    }
    return n > 0;
  };
  for (size_t at = 0; at <= size;) {
    size_t end = at;
    while (end < size && text[end] != ',') ++end;
    size_t first = at, last = end;
    while (first < last && blank(text[first])) ++first;
    while (last > first && blank(text[last - 1])) --last;
    if (first == last && end >= size) break;  // after a final comma, or blanks alone
    size_t dash = first;
    while (dash < last && text[dash] != '-') ++dash;
    unsigned long lo = 0, hi = 0;
    bool ok = dash == last
                  ? number(text + first, last - first, lo) && (hi = lo, true)
                  : number(text + first, dash - first, lo) && number(text + dash + 1, last - dash - 1, hi);
    if (!ok || lo > hi || !range(lo, hi)) return {false, first, last - first};
    at = end + 1;
  }
  return {};
}

}  // namespace poolrun::topo
