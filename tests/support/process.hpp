#pragma once

// Running a command the way a user does, for the tests of the command-line tools: a shell, no
// standard input, standard output and error captured, and the exit status as a shell reports it
// (128+N for death by signal N).

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace poolrun::test {

struct ProcessResult {
  int status = -1;
  std::string out, err;
};

// Runs `command` with /bin/sh.
ProcessResult runShell(const std::string& command);

// Starts `command` with /bin/sh in a process group of its own, in the background; its pid.
// (Variable assignments in front of the command want `env`: "env A=1 prog".)
pid_t spawnShell(const std::string& command);

// Waits until `dir` holds at least `n` entries; false when `limit` passes first.
bool waitForFiles(const std::filesystem::path& dir, int n, std::chrono::seconds limit);

// The live processes (zombies aside, this one aside) whose command line or environment holds
// `text`, each as "PID: command line"; how a test finds what a job left behind (a rank inherits its
// job's environment, whatever its command line). It reads /proc directly: a shell pipeline of pgrep
// would count its own forks, whose command lines hold the text until they exec.
std::vector<std::string> processesMentioning(const std::string& text);

// The whole file, or "" where it cannot be read.
std::string slurp(const std::filesystem::path& file);

// How often `what` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& what);

// The Python interpreter that has PyTorch: Debian's python3-torch is for /usr/bin/python3, which
// need not be the python3 on PATH. "" where it cannot import torch, and `why` says what is missing.
std::string torchPython(std::string& why);

// In a test body: `python` is torchPython(); without torch the test is skipped, saying why, or
// fails where POOLRUN_REQUIRE_TORCH=1 (scripts/test.sh sets it: in CI a missing torch is a failure).
#define POOLRUN_TEST_TORCH_PYTHON(python)                                                  \
  std::string python##_why_missing;                                                        \
  const std::string python = ::poolrun::test::torchPython(python##_why_missing);           \
  if (python.empty()) {                                                                    \
    const char* require = std::getenv("POOLRUN_REQUIRE_TORCH");                            \
    if (require != nullptr && std::string(require) == "1") FAIL() << python##_why_missing; \
    GTEST_SKIP() << python##_why_missing;                                                  \
  }

// A spawned shell (spawnShell) whose process group is killed and reaped however the test ends.
struct Reaped {
  pid_t pid;
  ~Reaped();
  int wait();  // its exit status as a shell reports it (-1: it did not exit); nothing left to kill
};

}  // namespace poolrun::test
