#include "support/fixtures.hpp"

#include <cstdlib>

namespace poolrun::test {

std::optional<std::filesystem::path> fixturesDir() {
  std::filesystem::path dir;
  if (const char* env = std::getenv("POOLRUN_FIXTURES"); env != nullptr && *env != '\0') {
    dir = env;
  } else {
    dir = POOLRUN_DEFAULT_FIXTURES;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return std::nullopt;
  return std::filesystem::canonical(dir, ec);
}

std::filesystem::path sourceDir() {
  return POOLRUN_SOURCE_DIR;
}

}  // namespace poolrun::test
