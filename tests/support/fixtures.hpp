#pragma once

// Access to the real-machine fixtures in ../shared/fixtures (or $POOLRUN_FIXTURES) and to the
// project's own test data. Tests that need the fixtures call requireFixtures(), which skips the
// test with a clear message where the folder is absent.

#include <filesystem>
#include <optional>

namespace poolrun::test {

// The fixtures folder, if it exists.
std::optional<std::filesystem::path> fixturesDir();

// The project's source tree (for files the project ships, e.g. topologies under clusters/).
std::filesystem::path sourceDir();

}  // namespace poolrun::test

// Skips the current test where the fixtures folder is missing; else binds `dir` to it.
#define POOLRUN_REQUIRE_FIXTURES(dir)                                                         \
  auto dir##_opt = ::poolrun::test::fixturesDir();                                            \
  if (!dir##_opt) {                                                                           \
    GTEST_SKIP() << "real-machine fixtures not found (set POOLRUN_FIXTURES or place them in " \
                    "../shared/fixtures)";                                                    \
  }                                                                                           \
  const std::filesystem::path dir = *dir##_opt
