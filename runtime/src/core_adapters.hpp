#pragma once

// Between the C++ interface of the rank side (poolrun/runtime/*.hpp: maps, CpuSet, exceptions) and
// the rank core it is built on (core/: the code poolrun-rank runs without a C library).

#include <string>
#include <string_view>

#include "core/bits.hpp"
#include "core/text.hpp"
#include "poolrun/runtime/rank_info.hpp"
#include "poolrun/topo/cpuset.hpp"

namespace poolrun::runtime {

inline core::Text coreText(std::string_view s) {
  return {s.data(), s.size()};
}
inline std::string hostedString(core::Text t) {
  return t.isSet() ? std::string(t.data, t.size) : std::string();
}

// An Environment read through the core's Variables.
class EnvironmentVariables final : public core::Variables {
 public:
  explicit EnvironmentVariables(const Environment& env) : env_(env) {}
  core::Text get(const char* name) const override {
    auto it = env_.find(name);
    return it == env_.end() ? core::Text() : coreText(it->second);
  }

 private:
  const Environment& env_;
};

template <unsigned kBits>
core::Bits<kBits> coreMask(const topo::CpuSet& set) {
  core::Bits<kBits> mask;
  for (unsigned c : set.cpus()) mask.set(c);
  return mask;
}

template <unsigned kBits>
std::vector<unsigned> members(const core::Bits<kBits>& mask) {
  std::vector<unsigned> out;
  for (unsigned i = mask.next(0); i < kBits; i = mask.next(i + 1)) out.push_back(i);
  return out;
}

}  // namespace poolrun::runtime
