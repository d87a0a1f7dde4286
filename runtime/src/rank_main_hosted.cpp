// poolrun-rank started by the C library (builds without a freestanding poolrun-rank: sanitizers,
// other architectures).

#include <unistd.h>

#include "rank_main.hpp"

int main(int argc, char** argv) {
  return poolrun::runtime::core::rankMain(argc, argv, environ);
}
