#pragma once

// Running a command the way a user does, for the tests of the command-line tools: a shell, no
// standard input, standard output and error captured, and the exit status as a shell reports it
// (128+N for death by signal N).

#include <filesystem>
#include <string>

namespace poolrun::test {

struct ProcessResult {
  int status = -1;
  std::string out, err;
};

// Runs `command` with /bin/sh.
ProcessResult runShell(const std::string& command);

// The whole file, or "" where it cannot be read.
std::string slurp(const std::filesystem::path& file);

}  // namespace poolrun::test
