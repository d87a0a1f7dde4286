#include "agent_run.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include "support/process.hpp"

namespace poolrun::test {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool waitForText(const std::filesystem::path& file, const std::string& needle, seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (slurp(file).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return false;
}

int waitExit(pid_t pid, seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(milliseconds(20));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

AgentRun::AgentRun(const std::string& args, const std::filesystem::path& err, const std::string& prefix)
    : pid_(spawnShell(prefix + kAgent + " " + args + " </dev/null >/dev/null 2>" + err.string())) {}

AgentRun::~AgentRun() {
  if (pid_ > 0) waitExit(pid_, seconds(0));
}

int AgentRun::stop(seconds limit) {
  kill(pid_, SIGTERM);
  int status = waitExit(pid_, limit);
  pid_ = -1;
  return status;
}

void AgentRun::kill9() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace poolrun::test
