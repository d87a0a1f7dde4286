#pragma once

// poold-agent as a process in tests: started in the background in its own process group, its
// stderr in a file, ended however the test ends.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>

namespace poolrun::test {

inline const std::string kAgent = POOLD_AGENT_BINARY;

// Waits until `file` holds `needle`, up to `limit`.
bool waitForText(const std::filesystem::path& file, const std::string& needle, std::chrono::seconds limit);

// The exit status of `pid` (as a shell says it) within `limit`, or -1 after killing its group.
int waitExit(pid_t pid, std::chrono::seconds limit);

// A poold-agent started with `args` (after `prefix`, e.g. fakeNvmlEnv(FILE)), its stderr in `err`.
class AgentRun {
 public:
  AgentRun(const std::string& args, const std::filesystem::path& err, const std::string& prefix = "");
  ~AgentRun();
  AgentRun(const AgentRun&) = delete;
  AgentRun& operator=(const AgentRun&) = delete;
  pid_t pid() const { return pid_; }
  // SIGTERM, then its exit status within `limit` (-1: it did not end, and was killed).
  int stop(std::chrono::seconds limit);
  // SIGKILL to its process group, as a crash or an OOM kill would.
  void kill9();

 private:
  pid_t pid_;
};

}  // namespace poolrun::test
