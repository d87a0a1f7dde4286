// The detached jobs an agent runs (jobs.hpp).

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "poolrun/agent/jobs.hpp"
#include "poolrun/common/names.hpp"

namespace poolrun::agent {
namespace {

pool::JobReport notStarted(std::string reason) {
  pool::JobReport r;
  r.kind = pool::JobReport::Kind::kEnded;
  r.exit.exit_status = 127;
  r.exit.reason = std::move(reason);
  return r;
}

// What the child does between fork and exec, each step's failure written to `fd` (the parent reads
// it as the reason the job did not start). Only async-signal-safe calls: the agent has threads.
struct ChildPlan {
  uid_t uid;
  gid_t gid;
  std::vector<gid_t> groups;
  mode_t umask;
  const char* cwd;
  const char* output;
  const char* error;  // null: with the output
  std::vector<char*> argv, envp;
};

void failIn(int fd, const char* what, const char* path) {
  const char* why = strerror(errno);  // not async-signal-safe in theory; glibc's is a table lookup
  for (const char* part : {what, path ? " " : "", path ? path : "", ": ", why}) {
    ssize_t n = write(fd, part, strlen(part));
    (void)n;
  }
  _exit(127);
}

[[noreturn]] void runChild(const ChildPlan& p, int fd) {
  setsid();  // a session of its own: a cancel signals the launcher and all it started
  if (geteuid() == 0) {
    if (setgroups(p.groups.size(), p.groups.data()) != 0) failIn(fd, "cannot set the job's groups", nullptr);
    if (setgid(p.gid) != 0) failIn(fd, "cannot set the job's group id", nullptr);
    if (setuid(p.uid) != 0) failIn(fd, "cannot become the job's user", nullptr);
  }
  umask(p.umask);
  if (chdir(p.cwd) != 0) failIn(fd, "cannot change to the job's directory", p.cwd);
  const int out = open(p.output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (out < 0) failIn(fd, "cannot open the job's output file", p.output);
  int err = out;
  if (p.error != nullptr) {
    err = open(p.error, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (err < 0) failIn(fd, "cannot open the job's error file", p.error);
  }
  const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
    failIn(fd, "cannot set up the job's standard streams", nullptr);
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(p.argv[0], p.argv.data(), p.envp.data());
  failIn(fd, "cannot run the launcher", p.argv[0]);
  _exit(127);
}

}  // namespace

JobRunner::JobRunner(JobRunnerOptions options) : options_(std::move(options)) {}

std::string JobRunner::checkUser(const pool::JobLaunch& l, Account& account) const {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(l.owner.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr)
    return "user " + l.owner + " is not known on node " + options_.node +
           " (its password database has no such user): the job runs as the user who submitted it";
  if (pw.pw_uid != l.uid)
    return "user " + l.owner + " is uid " + std::to_string(pw.pw_uid) + " on node " + options_.node +
           ", but uid " + std::to_string(l.uid) +
           " where the job was submitted: the nodes' password databases " + "must agree";
  if (pw.pw_uid == 0 && !l.allow_root)
    return "the job would run as root, which this pool refuses (poold --allow-root-jobs allows it)";
  if (geteuid() != 0 && geteuid() != pw.pw_uid)
    return "poold-agent on node " + options_.node + " runs as uid " + std::to_string(geteuid()) +
           " and can run jobs of that user alone, not of " + l.owner + ": run poold-agent as root";
  account.login_env = {std::string("HOME=") + pw.pw_dir, "USER=" + l.owner, "LOGNAME=" + l.owner,
                       std::string("SHELL=") + (*pw.pw_shell ? pw.pw_shell : "/bin/sh")};
  std::vector<gid_t>& groups = account.groups;
  int count = 64;
  groups.assign(static_cast<size_t>(count), 0);
  if (getgrouplist(l.owner.c_str(), pw.pw_gid, groups.data(), &count) < 0) {
    groups.assign(static_cast<size_t>(count), 0);
    getgrouplist(l.owner.c_str(), pw.pw_gid, groups.data(), &count);
  }
  groups.resize(static_cast<size_t>(std::max(count, 0)));
  return "";
}

pool::JobReport JobRunner::start(const pool::JobLaunch& l) {
  if (children_.count(l.id)) return {};
  Account account;
  if (std::string why = checkUser(l, account); !why.empty()) return notStarted(why);
  if (access(options_.poolrun.c_str(), X_OK) != 0)
    return notStarted("node " + options_.node + " has no launcher at " + options_.poolrun.string() +
                      " (poold-agent --poolrun PATH)");
  // argv: poolrun --pool URI --adopt-lease LEASE COMMAND...
  std::vector<std::string> args = {options_.poolrun.string(), "--pool", options_.pool, "--adopt-lease",
                                   l.lease};
  args.insert(args.end(), l.command.begin(), l.command.end());
  std::vector<std::string> env = l.env;
  for (const std::string& login : account.login_env) {
    const std::string_view name(login.data(), login.find('=') + 1);
    if (std::none_of(env.begin(), env.end(), [&](const std::string& e) { return e.starts_with(name); }))
      env.push_back(login);
  }
  env.push_back("POOLRUN_TOKEN=" + l.credential);
  env.push_back("POOLRUN_JOB_ID=" + l.id);
  if (l.task) env.push_back("POOLRUN_ARRAY_TASK_ID=" + std::to_string(*l.task));
  if (!options_.ca_file.empty()) env.push_back("POOLRUN_CA=" + options_.ca_file.string());
  ChildPlan plan{l.uid,
                 l.gid,
                 account.groups,
                 static_cast<mode_t>(l.umask & 0777),
                 l.cwd.c_str(),
                 l.output.c_str(),
                 l.error == l.output ? nullptr : l.error.c_str(),
                 {},
                 {}};
  for (std::string& a : args) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  for (std::string& e : env) plan.envp.push_back(e.data());
  plan.envp.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return notStarted(std::string("cannot make a pipe: ") + strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return notStarted(std::string("cannot fork: ") + strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    runChild(plan, fds[1]);
  }
  close(fds[1]);
  std::string why;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    why.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (!why.empty()) {
    waitpid(pid, nullptr, 0);
    return notStarted(why + " (on node " + options_.node + ", as " + l.owner + ")");
  }
  children_[l.id] = pid;
  return {};
}

bool JobRunner::signal(const std::string& id, int sig) {
  auto it = children_.find(id);
  if (it == children_.end()) return false;
  kill(-it->second, sig);
  return true;
}

std::vector<std::pair<std::string, pool::JobReport>> JobRunner::reap() {
  std::vector<std::pair<std::string, pool::JobReport>> out;
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    const pid_t r = waitpid(it->second, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) {
      ++it;
      continue;
    }
    pool::JobReport report;
    report.kind = pool::JobReport::Kind::kEnded;
    if (r > 0 && WIFEXITED(status)) report.exit.exit_status = WEXITSTATUS(status);
    if (r > 0 && WIFSIGNALED(status)) {
      report.exit.signal = WTERMSIG(status);
      report.exit.exit_status = 128 + WTERMSIG(status);
    }
    if (r < 0)
      report.exit.reason =
          "its launcher was lost to poold-agent (waitpid: " + std::string(strerror(errno)) + ")";
    out.emplace_back(it->first, report);
    it = children_.erase(it);
  }
  return out;
}

}  // namespace poolrun::agent
