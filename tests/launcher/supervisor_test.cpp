// The supervisor with real processes: exit codes, signals, timeouts, renewals, nothing left behind.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>

#include "poolrun/launcher/supervisor.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::launcher {
namespace {

using namespace std::chrono_literals;

SuperviseOptions shell(const std::string& script) {
  SuperviseOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.kill_grace = 2s;
  return o;
}

// Running (a zombie waiting for its reaper does not count).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Signals for the process from a helper thread that, like poolrun's own threads, blocks them, so
// that they reach the supervisor's signalfd.
void sendLater(std::vector<std::pair<std::chrono::milliseconds, int>> plan) {
  std::thread([plan] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (auto [delay, sig] : plan) {
      std::this_thread::sleep_for(delay);
      kill(getpid(), sig);
    }
  }).detach();
}

pid_t readPid(const std::filesystem::path& file) {
  for (int i = 0; i < 100 && !std::filesystem::exists(file); ++i) std::this_thread::sleep_for(50ms);
  std::ifstream in(file);
  pid_t p = 0;
  in >> p;
  return p;
}

TEST(SupervisorTest, ExitCodeAndEnvironment) {
  std::ostringstream err;
  SuperviseOptions o = shell("test \"$JOB_VAR\" = yes && echo oops >&2 && exit 3");
  o.env = {{"JOB_VAR", "yes"}};
  SuperviseResult r = supervise(o, err);
  EXPECT_EQ(r.exit_status, 3);
  EXPECT_EQ(err.str(), "oops\n") << "mpirun's stderr is passed through";
}

TEST(SupervisorTest, TheJobsVariablesWinAndTheProgramIsFoundInPath) {
  std::ostringstream err;
  setenv("POOLRUN_TEST_KEPT", "kept", 1);
  setenv("POOLRUN_TEST_REPLACED", "mine", 1);
  SuperviseOptions o;
  o.argv = {"sh", "-c", "echo \"$POOLRUN_TEST_KEPT $POOLRUN_TEST_REPLACED $POOLRUN_TEST_NEW\" >&2"};
  o.env = {{"POOLRUN_TEST_REPLACED", "the job's"}, {"POOLRUN_TEST_NEW", "new"}};
  SuperviseResult r = supervise(o, err);
  unsetenv("POOLRUN_TEST_KEPT");
  unsetenv("POOLRUN_TEST_REPLACED");
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(err.str(), "kept the job's new\n");
  EXPECT_EQ(getenv("POOLRUN_TEST_NEW"), nullptr) << "poolrun's own environment is left as it was";
}

TEST(SupervisorTest, FindsExecutablesAsExecvpDoes) {
  test::TempDir tmp;
  namespace fs = std::filesystem;
  fs::create_directories(tmp.path() / "a");
  fs::create_directories(tmp.path() / "b");
  tmp.write("a/prog", "not executable");
  tmp.write("b/prog", "#!/bin/sh\n");
  fs::permissions(tmp.path() / "b/prog", fs::perms::owner_all);
  std::string saved = getenv("PATH") != nullptr ? getenv("PATH") : "";
  setenv("PATH", ((tmp.path() / "a").string() + ":" + (tmp.path() / "b").string()).c_str(), 1);
  EXPECT_EQ(findExecutable("prog"), (tmp.path() / "b/prog").string()) << "the first executable one";
  EXPECT_EQ(findExecutable("no-such-program"), "no-such-program");
  EXPECT_EQ(findExecutable("./prog"), "./prog") << "a name with a slash is taken as it is";
  setenv("PATH", saved.c_str(), 1);
}

TEST(SupervisorTest, ReportsTheFailingRankFromMpirunsMessage) {
  std::ostringstream err;
  SuperviseResult r = supervise(shell("printf 'mpirun noticed that process rank 2 with PID 99 on node n1 "
                                      "exited on signal 11 (Segmentation fault).\\n' >&2; "
                                      "exit 1"),
                                err);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->rank, 2);
  EXPECT_EQ(r.exit_status, 128 + 11);
}

TEST(SupervisorTest, DeathBySignal) {
  std::ostringstream err;
  EXPECT_EQ(supervise(shell("kill -9 $$"), err).exit_status, 128 + 9);
}

TEST(SupervisorTest, TimeoutEndsTheJobAndItsGroup) {
  test::TempDir tmp;
  std::ostringstream err;
  std::string pidFile = (tmp.path() / "child.pid").string();
  SuperviseOptions o = shell("sleep 300 & echo $! > " + pidFile + "; wait");
  o.timeout = 500ms;
  SuperviseResult r = supervise(o, err);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_status, kExitTimeout);
  EXPECT_NE(err.str().find("past --timeout"), std::string::npos) << err.str();
  pid_t grandchild = readPid(pidFile);
  ASSERT_GT(grandchild, 0);
  for (int i = 0; i < 40 && alive(grandchild); ++i)
    std::this_thread::sleep_for(50ms);  // SIGKILL is asynchronous
  EXPECT_FALSE(alive(grandchild)) << "the job's processes are gone";
}

// An elastic job's restarts share one --timeout: a start after 10 minutes of an 10-minute-and-a-
// second budget has a second left (it would otherwise sleep its 10 minutes out).
TEST(SupervisorTest, TheTimeoutCountsTheEarlierStarts) {
  std::ostringstream err;
  SuperviseOptions o = shell("sleep 600");
  o.timeout = 601s;
  o.ran_before = 600s;
  SuperviseResult r = supervise(o, err);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_status, kExitTimeout);
  EXPECT_NE(err.str().find("the job ran past --timeout 601 s"), std::string::npos) << err.str();
}

TEST(SupervisorTest, ForwardsSigterm) {
  test::TempDir tmp;
  std::ostringstream err;
  std::string mark = (tmp.path() / "got-term").string();
  SuperviseOptions o = shell("trap 'touch " + mark + "; exit 143' TERM; while true; do sleep 0.05; done");
  sendLater({{300ms, SIGTERM}});
  SuperviseResult r = supervise(o, err);
  EXPECT_EQ(r.forwarded_signal, SIGTERM);
  EXPECT_TRUE(std::filesystem::exists(mark)) << "the job saw the signal";
  EXPECT_EQ(r.exit_status, 143);
}

TEST(SupervisorTest, SecondInterruptKills) {
  std::ostringstream err;
  SuperviseOptions o = shell("trap '' INT; while true; do sleep 0.05; done");  // ignores Ctrl-C
  sendLater({{300ms, SIGINT}, {300ms, SIGINT}});
  SuperviseResult r = supervise(o, err);
  EXPECT_NE(err.str().find("second interrupt"), std::string::npos) << err.str();
  EXPECT_EQ(r.exit_status, 128 + SIGINT) << "interrupted by the user";
}

TEST(SupervisorTest, RenewsAndEndsTheJobWhenTheLeaseIsGone) {
  std::ostringstream err;
  std::atomic<int> renewals{0};
  SuperviseOptions o = shell("while true; do sleep 0.05; done");
  LeaseKeeper keeper("L1", 10s, 100ms, [&] {
    if (++renewals < 4) return RenewReply{RenewReply::Kind::kRenewed, 10s, ""};
    return RenewReply{RenewReply::Kind::kGone, {}, "lease L1 expired"};
  });
  o.lease = &keeper;
  SuperviseResult r = supervise(o, err);
  EXPECT_EQ(renewals.load(), 4);
  EXPECT_TRUE(r.lease_lost);
  EXPECT_EQ(r.exit_status, kExitLeaseLost);
  EXPECT_NE(err.str().find("poolrun: lease L1 is gone (lease L1 expired): ending the job"), std::string::npos)
      << err.str();
}

// A renewal that cannot get through is retried: the job goes on, with one warning and one line when
// renewing works again.
TEST(SupervisorTest, ARenewalThatFailsIsRetriedAndTheJobGoesOn) {
  test::TempDir tmp;
  std::ostringstream err;
  std::atomic<int> renewals{0};
  std::string done = (tmp.path() / "done").string();
  SuperviseOptions o = shell("while [ ! -e " + done + " ]; do sleep 0.02; done");
  LeaseKeeper keeper("L2", 2s, 50ms,
                     [&] {
                       int n = ++renewals;
                       if (n >= 2 && n <= 4)
                         return RenewReply{RenewReply::Kind::kUnreachable, {}, "connection refused"};
                       if (n == 6) std::ofstream(done) << "";
                       return RenewReply{RenewReply::Kind::kRenewed, 2s, ""};
                     },
                     {10ms, 40ms, 5ms});
  o.lease = &keeper;
  SuperviseResult r = supervise(o, err);
  EXPECT_EQ(r.exit_status, 0) << err.str();
  EXPECT_FALSE(r.lease_lost);
  std::string text = err.str();
  EXPECT_NE(
      text.find(
          "poolrun: warning: cannot renew lease L2 (connection refused); retrying until it expires at "),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("warning"), text.rfind("warning")) << "one warning for the three failures\n" << text;
  EXPECT_NE(text.find("poolrun: lease L2 renewed again after "), std::string::npos) << text;
}

// A renewal that hangs (a pool that accepted the connection and does not answer) delays nothing
// else: the signal reaches the job while the renewal is still waiting.
TEST(SupervisorTest, AHangingRenewalDoesNotHoldSignals) {
  test::TempDir tmp;
  std::ostringstream err;
  std::string mark = (tmp.path() / "got-term").string();
  SuperviseOptions o = shell("trap 'touch " + mark + "; exit 143' TERM; while true; do sleep 0.05; done");
  std::atomic<int> renewals{0};
  std::atomic<bool> sawSignalWhileHanging{false};
  LeaseKeeper keeper("L3", 60s, 100ms, [&] {
    if (renewals++ > 0) return RenewReply{RenewReply::Kind::kRenewed, 60s, ""};
    for (int i = 0; i < 200 && !std::filesystem::exists(mark); ++i) std::this_thread::sleep_for(50ms);
    sawSignalWhileHanging = std::filesystem::exists(mark);
    return RenewReply{RenewReply::Kind::kRenewed, 60s, ""};
  });
  o.lease = &keeper;
  sendLater({{300ms, SIGTERM}});
  SuperviseResult r = supervise(o, err);
  EXPECT_EQ(r.exit_status, 143) << err.str();
  EXPECT_TRUE(sawSignalWhileHanging) << "the signal waited for the renewal";
}

// What a rank leaves behind in a session of its own (`setsid daemon &`) ends with the job.
TEST(SupervisorTest, NothingTheJobStartedOutlivesIt) {
  test::TempDir tmp;
  std::ostringstream err;
  std::string pidFile = (tmp.path() / "daemon.pid").string();
  SuperviseResult r =
      supervise(shell("(setsid sh -c 'sleep 100 & echo $! > " + pidFile + ".tmp; mv " + pidFile + ".tmp " +
                      pidFile + "' &); while [ ! -e " + pidFile + " ]; do sleep 0.02; done; exit 0"),
                err);
  EXPECT_EQ(r.exit_status, 0) << err.str();
  pid_t daemon = readPid(pidFile);
  ASSERT_GT(daemon, 0);
  bool gone = !alive(daemon);
  if (!gone) kill(daemon, SIGKILL);
  EXPECT_TRUE(gone) << "pid " << daemon << " (sleep 100, in a session of its own) outlived the job";
}

// A lease whose renewals carry a preemption with `deadline` from the second renewal on.
std::function<RenewReply()> preemptedAtSecondRenewal(std::chrono::system_clock::time_point deadline) {
  auto renewals = std::make_shared<std::atomic<int>>(0);
  return [renewals, deadline] {
    RenewReply r{RenewReply::Kind::kRenewed, 10s, ""};
    if (++*renewals >= 2)
      r.preempted = PreemptNotice{deadline, "preempted for ticket 9 of bob (priority 10, 8 GPUs)"};
    return r;
  };
}

// The notice: the deadline callback first, then the signal to mpirun (ranks elsewhere); a job that
// ends on it ends as preempted, whatever its exit code.
TEST(SupervisorTest, APreemptedJobIsSignalledAndEndsAsPreempted) {
  test::TempDir tmp;
  std::ostringstream err;
  std::string deadlineFile = (tmp.path() / "deadline").string(), mark = (tmp.path() / "saw").string();
  SuperviseOptions o =
      shell("trap 'cp " + deadlineFile + " " + mark + "; exit 0' USR1; while true; do sleep 0.02; done");
  o.preempt_signal = SIGUSR1;
  std::vector<PreemptNotice> called;
  o.preempted = [&](const PreemptNotice& n) {
    called.push_back(n);
    std::ofstream(deadlineFile) << "the deadline\n";
  };
  const auto deadline = std::chrono::system_clock::now() + 30s;
  LeaseKeeper keeper("L4", 10s, 50ms, preemptedAtSecondRenewal(deadline));
  o.lease = &keeper;
  SuperviseResult r = supervise(o, err);
  EXPECT_TRUE(r.preempted);
  EXPECT_EQ(r.exit_status, kExitPreempted) << err.str();
  ASSERT_EQ(called.size(), 1u);
  EXPECT_EQ(called[0].deadline, deadline);
  EXPECT_EQ(test::slurp(mark), "the deadline\n") << "the file was written before the signal was sent";
  const std::string line =
      "poolrun: lease L4 is preempted for ticket 9 of bob (priority 10, 8 GPUs): sent SIGUSR1 to the job, "
      "which "
      "is killed at ";
  EXPECT_EQ(err.str().substr(0, line.size()), line) << err.str();
  EXPECT_EQ(err.str().find('\n'), err.str().size() - 1) << "one line\n" << err.str();
}

// A preemption while the job ends for its change of size: it ends as preempted, and the deadline
// file holds the earlier of the two deadlines (the job is killed at that one).
TEST(SupervisorTest, APreemptionDuringAResizeTellsTheEarlierDeadline) {
  for (const bool preemptionFirst : {true, false}) {
    SCOPED_TRACE(preemptionFirst ? "the preemption's deadline is the earlier"
                                 : "the resize's is the earlier");
    std::ostringstream err;
    SuperviseOptions o = shell("trap '' TERM; while true; do sleep 0.02; done");
    std::vector<PreemptNotice> called;
    auto told =
        std::make_shared<std::atomic<int>>(0);  // notices the job was told of (the supervisor's thread)
    o.preempted = [&, told](const PreemptNotice& n) {
      called.push_back(n);
      ++*told;
    };
    const auto now = std::chrono::system_clock::now();
    const auto soon = now + 2s, late = now + 60s;
    auto renewals = std::make_shared<std::atomic<int>>(0);
    // From the second renewal the resize's notice, and once the job was told of it (the job is then
    // ending for it), the preemption's: on a loaded machine two renewals can come before the
    // supervisor takes the first, and the preemption alone would be all it saw.
    LeaseKeeper keeper("L7", 10s, 50ms, [&, renewals, told] {
      RenewReply r{RenewReply::Kind::kRenewed, 10s, ""};
      const int n = ++*renewals;
      if (n >= 2 && *told == 0)
        r.preempted = PreemptNotice{preemptionFirst ? late : soon, "it holds 4 GPUs now", true};
      else if (n >= 3)
        r.preempted = PreemptNotice{preemptionFirst ? soon : late, "preempted for ticket 9 of bob"};
      return r;
    });
    o.lease = &keeper;
    SuperviseResult r = supervise(o, err);
    EXPECT_TRUE(r.preempted);
    EXPECT_FALSE(r.resized);
    EXPECT_EQ(r.exit_status, kExitPreempted) << err.str();
    EXPECT_NE(err.str().find("poolrun: lease L7 is preempted for ticket 9 of bob while the job ends for its "
                             "change of size: it is not restarted\n"),
              std::string::npos)
        << err.str();
    ASSERT_EQ(called.size(), preemptionFirst ? 2u : 1u) << err.str();
    EXPECT_EQ(called.back().deadline, soon);
  }
}

// A job that ignores the signal is killed (SIGKILL); a notice that comes after its deadline (a pool
// unreachable meanwhile) still gives the job a moment, then the kill.
TEST(SupervisorTest, AJobThatIgnoresThePreemptionIsKilledAtTheDeadline) {
  test::TempDir tmp;
  std::ostringstream err;
  std::string pidFile = (tmp.path() / "child.pid").string();
  SuperviseOptions o = shell("trap '' TERM; sleep 300 & echo $! > " + pidFile + "; wait; wait");
  LeaseKeeper keeper("L5", 10s, 50ms, preemptedAtSecondRenewal(std::chrono::system_clock::now() - 5s));
  o.lease = &keeper;
  SuperviseResult r = supervise(o, err);
  EXPECT_TRUE(r.preempted);
  EXPECT_EQ(r.exit_status, kExitPreempted) << err.str();
  EXPECT_NE(err.str().find("poolrun: lease L5 is preempted for ticket 9 of bob"), std::string::npos)
      << err.str();
  EXPECT_NE(
      err.str().find("poolrun: the preempted job had not ended by its deadline: killing it (SIGKILL)\n"),
      std::string::npos)
      << err.str();
  pid_t child = readPid(pidFile);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 40 && alive(child); ++i) std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(alive(child)) << "the job's processes are gone";
}

// A rank that exited and left a process holding its output (mpirun waits for every copy of it to
// close): at the deadline poolrun names that process and the rank that left it, not a job that
// "had not ended", and kills it. Here mpirun is a shell that runs on, as mpirun would.
TEST(SupervisorTest, WhatAnEndedRankLeftBehindIsNamedAtTheDeadline) {
  test::TempDir tmp;
  std::ostringstream err;
  const std::string pidFile = (tmp.path() / "left.pid").string();
  SuperviseOptions o =
      shell("trap '' TERM USR1; OMPI_COMM_WORLD_RANK=3 sh -c 'trap \"\" TERM; sleep 300 & echo $! > " +
            pidFile + "'; while true; do sleep 0.02; done");
  o.preempt_ranks_here = true;
  LeaseKeeper keeper("L8", 10s, 50ms, preemptedAtSecondRenewal(std::chrono::system_clock::now() + 2s));
  o.lease = &keeper;
  SuperviseResult r = supervise(o, err);
  EXPECT_EQ(r.exit_status, kExitPreempted) << err.str();
  const pid_t left = readPid(pidFile);
  ASSERT_GT(left, 0);
  EXPECT_NE(err.str().find("poolrun: the job's ranks have ended, but what they started has not: pid " +
                           std::to_string(left) +
                           " (sleep, left by rank 3) still holds the job's output open at the preemption's "
                           "deadline: killing it (SIGKILL)\n"),
            std::string::npos)
      << err.str();
  EXPECT_EQ(err.str().find("had not ended by its deadline"), std::string::npos) << err.str();
  EXPECT_FALSE(alive(left));

  // The same at --timeout.
  std::ostringstream timeoutErr;
  SuperviseOptions t = shell("OMPI_COMM_WORLD_RANK=0 sh -c 'sleep 300 & echo $! > " + pidFile +
                             "'; while true; do sleep 0.02; done");
  t.timeout = std::chrono::milliseconds(1000);
  SuperviseResult tr = supervise(t, timeoutErr);
  EXPECT_EQ(tr.exit_status, kExitTimeout) << timeoutErr.str();
  EXPECT_NE(
      timeoutErr.str().find("poolrun: the job ran past --timeout 1 s: ending it (the job's ranks have ended, "
                            "but what they started has not: pid " +
                            std::to_string(readPid(pidFile)) + " (sleep, left by rank 0) still holds"),
      std::string::npos)
      << timeoutErr.str();
}

// Ranks on this machine get the signal themselves, mpirun (here a shell that waits for its "rank")
// does not; what a rank started (it inherits the rank's variables) is the rank's to tell.
TEST(SupervisorTest, RanksHereAreSignalledThemselvesNotMpirun) {
  test::TempDir tmp;
  std::ostringstream err;
  auto mark = [&](const char* name) { return (tmp.path() / name).string(); };
  const std::string helper = tmp.write("helper.sh", "trap 'touch " + mark("helper-got-term") +
                                                        "' TERM\nwhile true; do sleep 0.02; done\n")
                                 .string();
  const std::string rank =
      tmp.write("rank.sh", "sh " + helper + " & helper=$!\ntrap 'touch " + mark("rank-got-term") +
                               "; kill -9 $helper; exit 0' TERM\nwhile true; do sleep 0.02; done\n")
          .string();
  SuperviseOptions o = shell("trap 'touch " + mark("mpirun-got-term") + "' TERM; OMPI_COMM_WORLD_RANK=0 sh " +
                             rank + " & wait; wait");
  o.preempt_ranks_here = true;
  LeaseKeeper keeper("L6", 10s, 50ms, preemptedAtSecondRenewal(std::chrono::system_clock::now() + 10s));
  o.lease = &keeper;
  SuperviseResult r = supervise(o, err);
  EXPECT_EQ(r.exit_status, kExitPreempted) << err.str();
  EXPECT_TRUE(std::filesystem::exists(mark("rank-got-term"))) << err.str();
  EXPECT_FALSE(std::filesystem::exists(mark("mpirun-got-term"))) << "mpirun would start its kill sequence";
  EXPECT_FALSE(std::filesystem::exists(mark("helper-got-term"))) << "only the rank itself is signalled";
}

TEST(SupervisorTest, MissingProgram) {
  std::ostringstream err;
  SuperviseOptions o;
  o.argv = {"/nonexistent/mpirun"};
  SuperviseResult r = supervise(o, err);
  EXPECT_EQ(r.exit_status, 127);
  EXPECT_NE(err.str().find("cannot run /nonexistent/mpirun"), std::string::npos);
}

}  // namespace
}  // namespace poolrun::launcher
