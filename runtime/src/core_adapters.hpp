#pragma once

// Between the C++ interface of the rank side (poolrun/runtime/*.hpp: maps, CpuSet, exceptions) and
// the rank core it is built on (core/: the code poolrun-rank runs without the C++ library).

#include <string>
#include <string_view>

#include "core/text.hpp"
#include "poolrun/runtime/rank_info.hpp"

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

}  // namespace poolrun::runtime
