// main() of the test binaries that load the fake NVML in-process: the dynamic loader reads
// LD_LIBRARY_PATH when the process starts, so the binary runs itself again with the fake's folder on
// it before any test runs.

#include <gtest/gtest.h>

#include "fake_nvml/fake_nvml_file.hpp"

int main(int argc, char** argv) {
  poolrun::test::reexecWithFakeNvml(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
