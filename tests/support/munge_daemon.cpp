#include "support/munge_daemon.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>

#include "support/process.hpp"

namespace poolrun::test {

bool MungeDaemon::available(std::string& why) {
  if (access(kBinary, X_OK) != 0) {
    why = std::string(kBinary) + " is not installed (Debian: apt-get install munge libmunge-dev)";
    return false;
  }
  if (geteuid() != 0) {
    why = "the MUNGE tests make users (useradd) and run commands as them: they need root";
    return false;
  }
  if (access("/usr/bin/setpriv", X_OK) != 0 || access("/usr/sbin/useradd", X_OK) != 0) {
    why = "setpriv and useradd are needed (Debian: util-linux, passwd)";
    return false;
  }
  return true;
}

MungeDaemon::MungeDaemon() {
  // munged wants its socket's folders searchable by all, its key readable by it alone.
  ::chmod(dir_.path().c_str(), 0711);
  std::filesystem::create_directories(dir_.path() / "run");
  ::chmod((dir_.path() / "run").c_str(), 0755);
  std::random_device random;
  std::string key(1024, '\0');
  for (char& c : key) c = static_cast<char>(random() & 0xff);
  const std::filesystem::path keyFile = dir_.path() / "munge.key";
  std::ofstream(keyFile, std::ios::binary) << key;
  ::chmod(keyFile.c_str(), 0400);
  const std::string log = (dir_.path() / "munged.log").string();
  std::vector<std::string> argv{kBinary,
                                "--foreground",
                                "--socket=" + socket(),
                                "--key-file=" + keyFile.string(),
                                "--pid-file=" + (dir_.path() / "munged.pid").string(),
                                "--log-file=" + log,
                                "--seed-file=" + (dir_.path() / "munged.seed").string(),
                                "--num-threads=2"};
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test killed by its timeout leaves no munged behind
    // In the foreground munged logs to stderr: into its log file with the rest.
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> c;
    for (std::string& s : argv) c.push_back(s.data());
    c.push_back(nullptr);
    execv(c[0], c.data());
    _exit(127);
  }
  for (int i = 0; i < 200; ++i) {
    if (access(socket().c_str(), F_OK) == 0) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  const std::string said = slurp(log);
  if (pid_ > 0) ::kill(pid_, SIGKILL), waitpid(pid_, nullptr, 0);
  throw std::runtime_error("munged did not start: " + said);
}

MungeDaemon::~MungeDaemon() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

TestUsers::TestUsers() {
  std::random_device random;
  suffix_ = std::to_string(random() % 100000);
}

TestUsers::~TestUsers() {
  // userdel refuses a user with processes: what the user's jobs left (a rank still exiting) is
  // killed and waited for first (2 s at most).
  // The simulated cluster's session directories of the user's daemons (poolrun-sim-agent's
  // /tmp/poolrun-sim-UID-NODE) go with it.
  for (const std::string& u : users_)
    runShell("pkill -KILL -u " + u + "; for i in $(seq 40); do pgrep -u " + u +
             " >/dev/null || break; sleep 0.05; done; uid=$(id -u " + u +
             " 2>/dev/null) && rm -rf /tmp/poolrun-sim-$uid-*; /usr/sbin/userdel " + u + " 2>/dev/null");
  for (const std::string& g : groups_) runShell("/usr/sbin/groupdel " + g + " 2>/dev/null");
}

std::string TestUsers::addUser(const std::string& prefix) {
  const std::string name = prefix + "-" + suffix_;
  const ProcessResult r = runShell("/usr/sbin/useradd --no-create-home --shell /usr/sbin/nologin " + name);
  if (r.status != 0) throw std::runtime_error("useradd " + name + " failed: " + r.err);
  users_.push_back(name);
  return name;
}

std::string TestUsers::addGroup(const std::string& prefix, const std::vector<std::string>& members) {
  const std::string name = prefix + "-" + suffix_;
  ProcessResult r = runShell("/usr/sbin/groupadd " + name);
  if (r.status != 0) throw std::runtime_error("groupadd " + name + " failed: " + r.err);
  groups_.push_back(name);
  for (const std::string& m : members) {
    r = runShell("/usr/sbin/usermod -a -G " + name + " " + m);
    if (r.status != 0) throw std::runtime_error("usermod -a -G " + name + " " + m + " failed: " + r.err);
  }
  return name;
}

std::string TestUsers::as(const std::string& user, const std::string& command) const {
  return "/usr/bin/setpriv --reuid=" + user + " --regid=" + user + " --init-groups env HOME=/nonexistent " +
         "/bin/sh -c '" + command + "'";
}

}  // namespace poolrun::test
