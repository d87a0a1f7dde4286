#pragma once

// A private munged for tests: its own key (made at random), socket, log and pid files in a
// folder of the test's own, started by the constructor (which waits for its socket) and stopped by
// the destructor however the test ends. And unprivileged users and a group, made with useradd and
// groupadd and removed at the end, to act as: commands run as them through setpriv.

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"

namespace poolrun::test {

class MungeDaemon {
 public:
  static constexpr const char* kBinary = "/usr/sbin/munged";
  // Whether munged can run here (installed, and this process is root: the tests make users); where
  // not, `why` says what is missing.
  static bool available(std::string& why);

  MungeDaemon();  // throws std::runtime_error with munged's log where it does not start
  ~MungeDaemon();
  MungeDaemon(const MungeDaemon&) = delete;
  MungeDaemon& operator=(const MungeDaemon&) = delete;

  std::string socket() const { return (dir_.path() / "run" / "munge.socket").string(); }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
};

// Users (and a group) made for one test, removed when it ends.
class TestUsers {
 public:
  TestUsers();
  ~TestUsers();
  TestUsers(const TestUsers&) = delete;
  TestUsers& operator=(const TestUsers&) = delete;

  // A new user (no home, no login shell) named PREFIX-SUFFIX; its name.
  std::string addUser(const std::string& prefix);
  // A new group with `members`; its name.
  std::string addGroup(const std::string& prefix, const std::vector<std::string>& members);
  // `command` run by /bin/sh as `user` (its groups), through setpriv.
  std::string as(const std::string& user, const std::string& command) const;

 private:
  std::string suffix_;
  std::vector<std::string> users_, groups_;
};

}  // namespace poolrun::test

#define POOLRUN_TEST_REQUIRE_MUNGE()                                   \
  do {                                                                 \
    std::string munge_why_missing;                                     \
    if (!::poolrun::test::MungeDaemon::available(munge_why_missing)) { \
      const char* require = std::getenv("POOLRUN_REQUIRE_MUNGE");      \
      if (require != nullptr && std::string(require) == "1") {         \
        FAIL() << munge_why_missing << " (POOLRUN_REQUIRE_MUNGE=1)";   \
      }                                                                \
      GTEST_SKIP() << munge_why_missing;                               \
    }                                                                  \
  } while (0)
