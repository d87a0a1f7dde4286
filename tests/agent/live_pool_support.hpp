#pragma once

// What the tests of the live pool on one machine share (mig_pool_test.cpp, mps_pool_test.cpp): the
// node they simulate, and waiting for what poold and the agent do in the background.

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "support/fixtures.hpp"

namespace poolrun::test {

// An HGX H100 node (8 GPUs, 8 NICs), as poold-agent --from reads it.
inline std::string hgxNodeTopology() {
  return (sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
}

// Whether `check` holds within 20 s, asked every 200 ms.
inline bool within20s(const std::function<bool()>& check) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end) {
    if (check()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

}  // namespace poolrun::test
