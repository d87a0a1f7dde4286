#pragma once

// Where the tuner tests' data files are (tests/nccl_tuner/data), as CMake names it.

#include <string>

namespace poolrun::test {

inline const std::string kTunerData = POOLRUN_TUNER_TEST_DATA;

}  // namespace poolrun::test
