// A process the agent starts for a user (user_process.hpp).

#include "user_process.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace poolrun::agent {

std::optional<UserAccount> lookUpUser(const std::string& name) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr)
    return std::nullopt;
  UserAccount a;
  a.uid = pw.pw_uid;
  a.gid = pw.pw_gid;
  a.home = pw.pw_dir;
  a.login_env = {std::string("HOME=") + pw.pw_dir, "USER=" + name, "LOGNAME=" + name,
                 std::string("SHELL=") + (*pw.pw_shell ? pw.pw_shell : "/bin/sh")};
  int count = 64;
  a.groups.assign(static_cast<size_t>(count), 0);
  if (getgrouplist(name.c_str(), pw.pw_gid, a.groups.data(), &count) < 0) {
    a.groups.assign(static_cast<size_t>(count), 0);
    getgrouplist(name.c_str(), pw.pw_gid, a.groups.data(), &count);
  }
  a.groups.resize(static_cast<size_t>(std::max(count, 0)));
  return a;
}

void ChildPlan::point(std::vector<std::string>& args, std::vector<std::string>& env,
                      const std::vector<std::filesystem::path>* procs) {
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  if (procs != nullptr)
    for (const std::filesystem::path& file : *procs) cgroup_procs.push_back(file.c_str());
}

void failIn(int fd, const char* what, const char* path) {
  const char* why = strerrordesc_np(errno);  // no locale, no lock: safe between fork and exec
  for (const char* part : {what, path ? " " : "", path ? path : "", ": ", why}) {
    ssize_t n = write(fd, part, strlen(part));
    (void)n;
  }
  _exit(127);
}

void runChild(const ChildPlan& p, int fd) {
  if (p.new_session) setsid();
  for (const char* file : p.cgroup_procs) {
    const int procs = open(file, O_WRONLY | O_CLOEXEC);
    if (procs < 0 || write(procs, "0", 1) != 1) failIn(fd, "cannot join the lease's cgroup", file);
    close(procs);
  }
  if (p.hostname != nullptr && unshare(CLONE_NEWUTS) == 0) {
    const int set = sethostname(p.hostname, strlen(p.hostname));
    (void)set;  // the node's name as its host name is a simulation's nicety, never a need
  }
  if (geteuid() == 0) {
    if (setgroups(p.groups.size(), p.groups.data()) != 0) failIn(fd, "cannot set the user's groups", nullptr);
    if (setgid(p.gid) != 0) failIn(fd, "cannot set the user's group id", nullptr);
    if (setuid(p.uid) != 0) failIn(fd, "cannot become the user", nullptr);
  }
  umask(p.umask);
  if (chdir(p.cwd) != 0) failIn(fd, "cannot change to the directory", p.cwd);
  int in = p.stdio[0], out = p.stdio[1], err = p.stdio[2];
  if (p.output != nullptr) {
    out = open(p.output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (out < 0) failIn(fd, "cannot open the job's output file", p.output);
    err = out;
    if (p.error != nullptr) {
      err = open(p.error, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
      if (err < 0) failIn(fd, "cannot open the job's error file", p.error);
    }
    in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  if (in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
    failIn(fd, "cannot set up the standard streams", nullptr);
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Nothing of the agent's reaches the program: a descriptor another thread opened without
  // O_CLOEXEC (a record being written) closes at the exec too.
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  execve(p.argv[0], p.argv.data(), p.envp.data());
  failIn(fd, "cannot run", p.argv[0]);
}

}  // namespace poolrun::agent
