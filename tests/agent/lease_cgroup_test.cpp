// A lease's cgroup with the real kernel, on both cgroup versions this machine mounts (a v1 devices,
// pids and freezer hierarchy, and cgroup2 at /sys/fs/cgroup/unified): GPU device nodes made with
// mknod under NVIDIA's major (never the machine's own devices), a process in the cgroup refused the
// GPUs the lease does not hold and reaching the driver of those it does, a process limit, and every
// process killed at the end (one that double-forked into a session of its own, one that ignores
// SIGTERM) with the cgroup removed.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "poolrun/agent/jobs.hpp"
#include "poolrun/agent/lease_cgroup.hpp"
#include "poolrun/common/error.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using agent::CgroupVersion;
using agent::CharDevice;
using agent::LeaseCgroup;

TEST(CgroupMounts, ReadsAHybridAndAPureV2Node) {
  TempDir dir;
  const auto hybrid =
      dir.write("hybrid",
                "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
                "35 30 0:32 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
                "36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime shared:9 - cgroup cgroup rw,freezer\n"
                "38 30 0:35 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
                "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
                "garbage without a dash\n");
  agent::CgroupMounts m = agent::readCgroupMounts(hybrid);
  EXPECT_EQ(m.unified, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m.controllers.at("devices"), "/sys/fs/cgroup/devices");
  EXPECT_EQ(m.controllers.at("freezer"), "/sys/fs/cgroup/freezer");
  EXPECT_EQ(m.controllers.at("pids"), "/sys/fs/cgroup/pids");
  EXPECT_EQ(agent::defaultCgroupVersion(m), CgroupVersion::kV1);
  const auto pure =
      dir.write("pure", "29 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  m = agent::readCgroupMounts(pure);
  EXPECT_EQ(m.unified, "/sys/fs/cgroup");
  EXPECT_TRUE(m.controllers.empty());
  EXPECT_EQ(agent::defaultCgroupVersion(m), CgroupVersion::kV2);
  EXPECT_EQ(agent::defaultCgroupVersion(agent::readCgroupMounts(dir.write("none", ""))), std::nullopt);
}

// The leases with a cgroup are the folders named as lease ids under the parent, in any hierarchy
// the version uses (a v1 cgroup half made or half removed counts); files, a probe's cgroup and
// names that are no lease id are not leases; a parent not made yet holds none.
TEST(LeaseCgroupNames, AreTheFoldersNamedAsLeasesInAnyHierarchy) {
  TempDir dir;
  agent::CgroupMounts m;
  m.unified = dir.path() / "unified";
  m.controllers["devices"] = dir.path() / "devices";
  m.controllers["pids"] = dir.path() / "pids";
  EXPECT_TRUE(agent::leaseCgroupNames(m, CgroupVersion::kV2, "poolrun").empty());
  EXPECT_TRUE(agent::leaseCgroupNames(m, CgroupVersion::kV1, "poolrun").empty());
  for (const char* folder :
       {"unified/poolrun/L1", "unified/poolrun/probe-4242", "unified/poolrun/not a lease",
        "devices/poolrun/L2", "pids/poolrun/L2", "pids/poolrun/L3", "unified/other/L9"})
    std::filesystem::create_directories(dir.path() / folder);
  dir.write("unified/poolrun/L4", "a file");
  dir.write("unified/poolrun/cgroup.procs", "");
  EXPECT_EQ(agent::leaseCgroupNames(m, CgroupVersion::kV2, "poolrun"), std::set<std::string>{"L1"});
  EXPECT_EQ(agent::leaseCgroupNames(m, CgroupVersion::kV1, "poolrun"), (std::set<std::string>{"L2", "L3"}));
  EXPECT_TRUE(agent::leaseCgroupNames(agent::CgroupMounts{}, CgroupVersion::kV2, "poolrun").empty());
}

class LeaseCgroupTest : public ::testing::TestWithParam<CgroupVersion> {
 protected:
  TempDir dev;
  agent::CgroupMounts mounts = agent::readCgroupMounts();
  const std::string parent = "poolrun-test-" + std::to_string(getpid());

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "cgroups and mknod need root";
    if (GetParam() == CgroupVersion::kV1 && !mounts.controllers.count("devices"))
      GTEST_SKIP() << "no cgroup v1 devices hierarchy here";
    if (GetParam() == CgroupVersion::kV2 && mounts.unified.empty()) GTEST_SKIP() << "no cgroup2 mount here";
    for (unsigned minor = 0; minor < 4; ++minor) {
      const std::string node = (dev.path() / ("nvidia" + std::to_string(minor))).string();
      ASSERT_EQ(mknod(node.c_str(), S_IFCHR | 0666, makedev(agent::kNvidiaMajor, minor)), 0)
          << strerror(errno);
    }
  }

  void TearDown() override {
    for (const auto& [controller, mount] : mounts.controllers) rmdir((mount / parent).c_str());
    if (!mounts.unified.empty()) rmdir((mounts.unified / parent).c_str());
  }

  LeaseCgroup make(const agent::Confinement& c) { return LeaseCgroup(mounts, GetParam(), parent, "L1", c); }

  // A child that joins `cg` and runs `body`; its exit status is body's.
  template <typename Body>
  pid_t inCgroup(const LeaseCgroup& cg, Body body) {
    const pid_t pid = fork();
    if (pid == 0) {
      for (const auto& file : cg.procsFiles()) {
        const int fd = open(file.c_str(), O_WRONLY);
        if (fd < 0 || write(fd, "0", 1) != 1) _exit(100);
        close(fd);
      }
      _exit(body());
    }
    return pid;
  }

  static int exitOf(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// Opening /dev/nvidiaN: EPERM where the cgroup refuses it, else what the driver says (ENXIO: no
// NVIDIA driver here, so an allowed node reaches the kernel's lookup and finds none).
int openErrno(const std::filesystem::path& node) {
  const int fd = open(node.c_str(), O_RDWR);
  if (fd >= 0) {
    close(fd);
    return 0;
  }
  return errno;
}

TEST_P(LeaseCgroupTest, AProcessInTheLeaseIsRefusedTheGpusItDoesNotHold) {
  LeaseCgroup cg = make({{{agent::kNvidiaMajor, 1}, {agent::kNvidiaMajor, 3}}, std::nullopt});
  const pid_t child = inCgroup(cg, [&] {
    // Bit N set: nvidiaN refused with EPERM.
    int refused = 0;
    for (int n = 0; n < 4; ++n)
      if (openErrno(dev.path() / ("nvidia" + std::to_string(n))) == EPERM) refused |= 1 << n;
    return refused;
  });
  EXPECT_EQ(exitOf(child), 0b1010) << "nvidia1 and nvidia3 refused, nvidia0 and nvidia2 not";
  EXPECT_NE(openErrno(dev.path() / "nvidia1"), EPERM) << "a process outside the lease is not confined";
  EXPECT_EQ(cg.destroy(std::chrono::seconds(5)), 0u);
  for (const auto& folder : cg.folders()) EXPECT_FALSE(std::filesystem::exists(folder)) << folder;
}

TEST_P(LeaseCgroupTest, EveryProcessIsKilledAtTheEndHoweverItWasStarted) {
  LeaseCgroup cg = make({{}, std::nullopt});
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = inCgroup(cg, [&] {
    signal(SIGTERM, SIG_IGN);
    if (fork() == 0) {  // double-forked, in a session of its own: its parent gone, init's child
      setsid();
      if (fork() == 0) {
        signal(SIGTERM, SIG_IGN);
        (void)!write(ready[1], "x", 1);
        for (;;) pause();
      }
      _exit(0);
    }
    for (;;) pause();
    return 0;
  });
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  close(ready[1]);
  const std::vector<pid_t> before = cg.pids();
  EXPECT_GE(before.size(), 2u) << "the child and the double-forked grandchild";
  EXPECT_GE(cg.destroy(std::chrono::seconds(5)), 2u);
  EXPECT_EQ(exitOf(child), 128 + SIGKILL);
  for (pid_t pid : before)
    if (pid != child) {
      for (int i = 0; i < 500 && kill(pid, 0) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      EXPECT_NE(kill(pid, 0), 0) << "process " << pid << " outlived its lease";
    }
  for (const auto& folder : cg.folders()) EXPECT_FALSE(std::filesystem::exists(folder)) << folder;
}

TEST_P(LeaseCgroupTest, AProcessLimitRefusesForksPastIt) {
  agent::Confinement c;
  c.pids_max = 3;
  std::optional<LeaseCgroup> cg;
  try {
    cg.emplace(make(c));
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();  // cgroup v2 here offers no pids controller
  }
  const pid_t child = inCgroup(*cg, [] {
    int made = 0;
    for (int i = 0; i < 6; ++i) {
      const pid_t p = fork();
      if (p == 0) {
        pause();
        _exit(0);
      }
      if (p > 0) ++made;
    }
    return made;
  });
  EXPECT_EQ(exitOf(child), 2) << "the child and two of its own: three";
  cg->destroy(std::chrono::seconds(5));
}

TEST_P(LeaseCgroupTest, AMemoryLimitEndsTheProcessPastIt) {
  agent::Confinement c;
  c.memory_max = 32 << 20;
  std::optional<LeaseCgroup> cg;
  try {
    cg.emplace(make(c));
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();  // cgroup v2 here offers no memory controller
  }
  auto touch = [](size_t bytes) {
    return [bytes] {
      std::vector<char> block(bytes);
      for (size_t i = 0; i < block.size(); i += 4096) block[i] = 1;
      return static_cast<int>(block[bytes / 2]);
    };
  };
  EXPECT_EQ(exitOf(inCgroup(*cg, touch(8 << 20))), 1) << "8 MiB fits under 32";
  EXPECT_EQ(exitOf(inCgroup(*cg, touch(256 << 20))), 128 + SIGKILL) << "256 MiB: the kernel's OOM killer";
  cg->destroy(std::chrono::seconds(5));
}

TEST_P(LeaseCgroupTest, TheLeasesWithACgroupAreListed) {
  LeaseCgroup one = make({});
  LeaseCgroup two(mounts, GetParam(), parent, "L2", {{{agent::kNvidiaMajor, 1}}, std::nullopt});
  EXPECT_EQ(agent::leaseCgroupNames(mounts, GetParam(), parent), (std::set<std::string>{"L1", "L2"}));
  two.destroy(std::chrono::seconds(5));
  EXPECT_EQ(agent::leaseCgroupNames(mounts, GetParam(), parent), std::set<std::string>{"L1"});
  one.destroy(std::chrono::seconds(5));
  EXPECT_TRUE(agent::leaseCgroupNames(mounts, GetParam(), parent).empty());
}

// An agent killed in destroy() between freezing the cgroup and thawing it leaves it frozen: taken
// again (an agent restarted, a daemon of the lease started), it is thawed, so that a process that
// joins it runs rather than staying frozen (as one did, and its agent waited on its exec for ever).
TEST_P(LeaseCgroupTest, ACgroupLeftFrozenIsThawedWhenTakenAgain) {
  if (GetParam() != CgroupVersion::kV1 || !mounts.controllers.count("freezer"))
    GTEST_SKIP() << "the freezer is cgroup v1's";
  LeaseCgroup first = make({});
  const std::filesystem::path state = mounts.controllers.at("freezer") / parent / "L1" / "freezer.state";
  std::ofstream(state) << "FROZEN";
  ASSERT_TRUE(slurp(state).starts_with("FROZEN") || slurp(state).starts_with("FREEZING"));
  LeaseCgroup again = make({});
  ASSERT_TRUE(slurp(state).starts_with("THAWED")) << slurp(state);  // else the child below stays frozen
  const pid_t child = inCgroup(again, [] { return 7; });
  EXPECT_EQ(exitOf(child), 7) << "a process that joins it runs";
  again.destroy(std::chrono::seconds(5));
}

TEST_P(LeaseCgroupTest, AMadeCgroupIsTakenAgainAndABadNameRefused) {
  LeaseCgroup first = make({{{agent::kNvidiaMajor, 2}}, std::nullopt});
  LeaseCgroup again = make({{{agent::kNvidiaMajor, 2}}, std::nullopt});  // an agent restarted
  EXPECT_EQ(again.folders(), first.folders());
  const pid_t child = inCgroup(again, [&] { return openErrno(dev.path() / "nvidia2") == EPERM ? 0 : 1; });
  EXPECT_EQ(exitOf(child), 0);
  again.destroy(std::chrono::seconds(5));
  EXPECT_THROW(LeaseCgroup(mounts, GetParam(), parent, "../escape", {}), Error);
  EXPECT_THROW(LeaseCgroup(mounts, GetParam(), parent, "", {}), Error);
}

// A lease's cgroup the agent cannot remove when its job ends (here a child cgroup the job made in
// it; in the field a process that would not die in time) is said once, with what holds it, and
// tried again at each reap() until it goes.
TEST_P(LeaseCgroupTest, AJobsCgroupThatCannotGoYetIsTriedAgainUntilItGoes) {
  const std::filesystem::path launcher = dev.write("launcher", "#!/bin/sh\nshift 4\nexec \"$@\"\n");
  std::filesystem::permissions(launcher, std::filesystem::perms::owner_all);
  agent::JobRunnerOptions options{"n01", "http://127.0.0.1:1", launcher, "", dev.path() / "records"};
  options.cgroup = GetParam();
  options.cgroup_mounts = mounts;
  options.cgroup_parent = parent;
  const std::filesystem::path lease =
      (GetParam() == CgroupVersion::kV1 ? mounts.controllers.at("devices") : mounts.unified) / parent / "L1";
  pool::JobLaunch l;
  l.id = "J1";
  l.lease = "L1";
  l.owner = "root";
  l.allow_root = true;
  l.command = {"/bin/mkdir", (lease / "held").string()};
  l.cwd = dev.path().string();
  l.output = l.error = (dev.path() / "J1.out").string();
  agent::JobRunner runner(options);
  ASSERT_EQ(runner.start(l).kind, pool::JobReport::Kind::kStarted) << runner.takeNotes().size();
  std::vector<std::pair<std::string, pool::JobReport>> ended;
  for (int i = 0; i < 500 && ended.empty(); ++i) {
    ended = runner.reap();
    if (ended.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].second.exit.exit_status, 0) << "mkdir " << (lease / "held");
  std::vector<std::string> notes = runner.takeNotes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("lease L1: its cgroup on node n01 is left for now (tried again each second)"),
            std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find("no process; a child cgroup?"), std::string::npos) << notes[0];
  EXPECT_TRUE(runner.wantsPolling());
  EXPECT_TRUE(runner.reap().empty());
  EXPECT_TRUE(runner.takeNotes().empty()) << "said once";
  ASSERT_EQ(rmdir((lease / "held").c_str()), 0) << strerror(errno);
  runner.reap();
  notes = runner.takeNotes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "lease L1: its cgroup on node n01 is removed at last");
  EXPECT_FALSE(runner.wantsPolling());
  EXPECT_FALSE(std::filesystem::exists(lease));
  while (waitpid(-1, nullptr, WNOHANG) > 0) {  // the watcher is this test's child
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, LeaseCgroupTest, ::testing::Values(CgroupVersion::kV1, CgroupVersion::kV2),
                         [](const auto& version) {
                           return version.param == CgroupVersion::kV1 ? "V1" : "V2";
                         });

}  // namespace
}  // namespace poolrun::test
