#include "support/process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/temp_dir.hpp"

namespace poolrun::test {

pid_t spawnShell(const std::string& command) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

bool waitForFiles(const std::filesystem::path& dir, int n, std::chrono::seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int count = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      ++count;
    if (count >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

ProcessResult runShell(const std::string& command) {
  TempDir tmp;
  std::string cmd =
      command + " >" + (tmp.path() / "out").string() + " 2>" + (tmp.path() / "err").string() + " </dev/null";
  int raw = std::system(cmd.c_str());
  ProcessResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(tmp.path() / "out");
  r.err = slurp(tmp.path() / "err");
  return r;
}

namespace {

// A /proc file of NUL-separated strings, the NULs as spaces.
std::string procStrings(const std::filesystem::path& file) {
  std::string s = slurp(file);
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

bool isZombie(const std::filesystem::path& proc) {
  std::string stat = slurp(proc / "stat");  // "PID (comm) S ...": the state follows the last ')'
  size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z';
}

}  // namespace

std::vector<std::string> processesMentioning(const std::string& text) {
  std::vector<std::string> found;
  const std::string self = std::to_string(getpid());
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string pid = it->path().filename().string();
    if (pid == self || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = procStrings(it->path() / "cmdline");
    if (cmdline.find(text) == std::string::npos &&
        procStrings(it->path() / "environ").find(text) == std::string::npos)
      continue;
    if (!isZombie(it->path())) found.push_back(pid + ": " + cmdline);
  }
  return found;
}

std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string torchPython(std::string& why) {
  const std::string python = "/usr/bin/python3";
  ProcessResult probe = runShell(python + " -c 'import torch, torch.distributed' 2>&1");
  if (probe.status == 0) return python;
  why = python + " cannot import torch (" + probe.out.substr(0, 300) +
        "): install Debian's python3-torch (scripts/setup-deps.sh does)";
  return "";
}

Reaped::~Reaped() {
  if (pid > 0) {
    kill(-pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

int Reaped::wait() {
  int status = 0;
  waitpid(pid, &status, 0);
  pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace poolrun::test
