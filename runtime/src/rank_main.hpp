#pragma once

namespace poolrun::runtime::core {

// poolrun-rank's work, started by main() (a C library's start) or by freestanding.cpp (none).
int rankMain(int argc, char** argv, char** envp);

}  // namespace poolrun::runtime::core
