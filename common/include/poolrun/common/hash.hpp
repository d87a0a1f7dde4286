#pragma once

// FNV-1a, 64 bits: a stable short name for a path or a document (file names, cache keys). Not for
// anything an adversary may choose to collide.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace poolrun::common {

inline uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The hash as `digits` (1 to 16) lowercase hex digits, from its low end.
inline std::string fnv1aHex(std::string_view text, int digits = 16) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
  return std::string(buf + 16 - digits);
}

}  // namespace poolrun::common
