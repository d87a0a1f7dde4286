#pragma once

// A process the agent starts for a user (a detached job's launcher, a job's daemon started through
// the agent): the user's account, and what the child does between fork and exec.

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace poolrun::agent {

struct UserAccount {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
  std::vector<gid_t> groups;           // supplementary, from the group database
  std::vector<std::string> login_env;  // HOME, USER, LOGNAME, SHELL as a login sets them
};

// User `name`'s account from the password and group databases; nullopt where there is no such user.
std::optional<UserAccount> lookUpUser(const std::string& name);

// What the child does between fork and exec, each step's failure written to `fd` (the parent reads
// it as the reason the process did not start). Only async-signal-safe calls: the agent has threads.
struct ChildPlan {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  mode_t umask = 022;
  const char* cwd = "/";
  // Its standard output and error, files made (error null: with the output); or, where `stdio`
  // holds three descriptors, those as its stdin, stdout and stderr.
  const char* output = nullptr;
  const char* error = nullptr;
  int stdio[3] = {-1, -1, -1};
  bool new_session = false;        // setsid(): it leads a session (its group is killed as one)
  const char* hostname = nullptr;  // non-null: in a UTS namespace of its own with this host name
  std::vector<char*> argv, envp;
  std::vector<const char*> cgroup_procs;  // the lease's cgroup: joined before the user is taken

  // argv, envp and cgroup_procs pointed at `args`, `env` and `procs` (none where null), which must
  // outlive the plan.
  void point(std::vector<std::string>& args, std::vector<std::string>& env,
             const std::vector<std::filesystem::path>* procs);
};

// Writes "WHAT PATH: strerror" to `fd` and exits 127.
[[noreturn]] void failIn(int fd, const char* what, const char* path);
[[noreturn]] void runChild(const ChildPlan& p, int fd);

}  // namespace poolrun::agent
