// libFuzzer target: every rank's variables from a hostile POOLRUN_RANK_ENV. The rank core's JSON
// reader (which poolrun-rank runs without a C library) rejects bad documents with poolrun::Error
// only, and what it accepts is a set of variables that execve can pass on.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "poolrun/common/error.hpp"
#include "poolrun/runtime/rank_env.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (int rank : {0, 1, 7, 1 << 20}) {
    try {
      for (const auto& [name, value] : poolrun::runtime::rankEnvironment(text, rank)) {
        if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos ||
            value.find('\0') != std::string::npos) {
          __builtin_trap();
        }
      }
    } catch (const poolrun::Error&) {
    }
  }
  return 0;
}
