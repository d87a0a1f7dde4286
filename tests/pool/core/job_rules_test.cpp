// Jobs the pool keeps, through PoolState's rules on a fake clock: queued when their dependencies and
// array limit let them, run on their lease's first node, ended by their agent's report, cancelled,
// requeued, kept through the state file.

#include <gtest/gtest.h>

#include "inventory.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/pool/job_plan.hpp"
#include "poolrun/pool/state.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;
using test::addInventory;
using test::t0;

JobSpec spec(int gpus, const std::string& owner = "alice", const std::string& deps = "") {
  JobSpec s;
  s.owner = owner;
  s.uid = 1000;
  s.gid = 1000;
  s.command = {"-n", std::to_string(gpus), "/bin/true"};
  s.cwd = "/home/" + owner;
  s.request.gpus = gpus;
  s.request.gpus_per_node = 0;
  if (!deps.empty()) s.dependencies = parseDependencies(deps);
  return s;
}

class JobRules : public ::testing::Test {
 protected:
  PoolState pool;
  TimePoint now = t0();
  void SetUp() override { addInventory(pool, "n[01-02]/gpu[0-3]", now); }
  void tick(int secs = 1) {
    now += seconds(secs);
    pool.tick(now);
  }
  const JobRecord& job(const std::string& id) const {
    const JobRecord* j = pool.jobs().find(id);
    if (j == nullptr) throw std::runtime_error("no job " + id);
    return *j;
  }
  std::string stateOf(const std::string& id) const { return std::string(toString(job(id).state)); }
  // The agent of the job's node starts it and reports its end.
  void runToEnd(const std::string& id, JobExit exit = {}) {
    const JobRecord& j = job(id);
    ASSERT_EQ(j.state, JobState::kRunning) << id;
    pool.setJobCredential(j.node, id, "hash-" + id);
    pool.jobStarted(j.node, id, now);
    pool.jobEnded(j.node, id, exit, now);
  }
};

TEST_F(JobRules, ASubmittedJobIsQueuedGrantedAndRunOnItsFirstNode) {
  const std::vector<std::string> ids = pool.submitJob(spec(2), std::nullopt, now);
  ASSERT_EQ(ids, std::vector<std::string>{"J1"});
  EXPECT_EQ(stateOf("J1"), "PENDING");
  EXPECT_TRUE(pool.jobWork("n01").empty());
  tick();
  const JobRecord& j = job("J1");
  ASSERT_EQ(j.state, JobState::kRunning) << j.reason;
  ASSERT_EQ(pool.leaseMap().count(j.lease), 1u);
  EXPECT_EQ(pool.leaseMap().at(j.lease).owner, "alice");
  EXPECT_EQ(j.node, pool.leaseMap().at(j.lease).gpus.front().node);
  EXPECT_TRUE(pool.queueMap().empty()) << "the grant is taken out of the queue";
  ASSERT_EQ(pool.jobWork(j.node).size(), 1u) << "its agent has a launcher to start";
  pool.setJobCredential(j.node, "J1", "h1");
  EXPECT_EQ(pool.jobs().ofCredential("h1"), &j);
  pool.jobStarted(j.node, "J1", now);
  EXPECT_TRUE(pool.jobWork(j.node).empty()) << "started: nothing more to do";
  const std::string lease = j.lease;
  pool.jobEnded(j.node, "J1", {}, now);
  EXPECT_EQ(stateOf("J1"), "COMPLETED");
  EXPECT_EQ(job("J1").exit_status, 0);
  EXPECT_EQ(pool.jobs().ofCredential("h1"), nullptr) << "the launcher's credential ends with its job";
  EXPECT_EQ(pool.leaseMap().count(lease), 0u) << "the lease ends with its job";
  pool.jobEnded(job("J1").node, "J1", {1, 0, ""}, now);  // the same report again changes nothing
  EXPECT_EQ(stateOf("J1"), "COMPLETED");
  EXPECT_EQ(pool.checkInvariants(), "");
}

TEST_F(JobRules, QueuedEntriesOfJobsNeverGoStale) {
  addInventory(pool, "n01 leased 0-3; n02 leased 0-3", now);
  pool.submitJob(spec(2), std::nullopt, now);
  for (int i = 0; i < 10; ++i) tick(60);
  EXPECT_EQ(stateOf("J1"), "PENDING");
  EXPECT_NE(job("J1").ticket, 0);
  EXPECT_EQ(pool.queueMap().count(job("J1").ticket), 1u) << "ten minutes without a poll";
}

TEST_F(JobRules, ExitsEndInTheirStates) {
  JobSpec timed = spec(1);
  timed.time_limit = seconds(60);
  pool.submitJob(spec(1), std::nullopt, now);  // J1
  pool.submitJob(spec(1), std::nullopt, now);  // J2
  pool.submitJob(timed, std::nullopt, now);    // J3
  pool.submitJob(spec(1), std::nullopt, now);  // J4
  tick();
  runToEnd("J1", {3, 0, ""});
  runToEnd("J2", {0, 9, ""});
  runToEnd("J3", {124, 0, ""});
  runToEnd("J4", {127, 0, "cannot change to /home/alice: No such file or directory"});
  EXPECT_EQ(stateOf("J1"), "FAILED");
  EXPECT_EQ(job("J1").reason, "exit status 3");
  EXPECT_EQ(stateOf("J2"), "FAILED");
  EXPECT_EQ(job("J2").signal, 9);
  EXPECT_EQ(stateOf("J3"), "TIMEOUT");
  EXPECT_EQ(stateOf("J4"), "FAILED");
  EXPECT_EQ(job("J4").reason, "cannot change to /home/alice: No such file or directory");
}

TEST_F(JobRules, AChainRunsInOrderAndAnImpossibleBranchIsCancelled) {
  pool.submitJob(spec(1), std::nullopt, now);                            // J1
  pool.submitJob(spec(1, "alice", "afterok:J1"), std::nullopt, now);     // J2
  pool.submitJob(spec(1, "alice", "afterok:J2"), std::nullopt, now);     // J3
  pool.submitJob(spec(1, "alice", "afternotok:J1"), std::nullopt, now);  // J4
  tick();
  tick();  // the reason of the tick before saw J1 pending
  EXPECT_EQ(stateOf("J1"), "RUNNING");
  EXPECT_EQ(stateOf("J2"), "PENDING");
  EXPECT_EQ(job("J2").reason, "Dependency (afterok:J1 RUNNING)");
  EXPECT_EQ(job("J2").ticket, 0) << "not queued while it waits for its parent";
  runToEnd("J1");
  tick();
  EXPECT_EQ(stateOf("J2"), "RUNNING");
  EXPECT_EQ(stateOf("J3"), "PENDING");
  EXPECT_EQ(stateOf("J4"), "CANCELLED");
  EXPECT_EQ(job("J4").reason, "DependencyNeverSatisfied (afternotok:J1 ended COMPLETED)");
  runToEnd("J2", {1, 0, ""});
  tick();
  EXPECT_EQ(stateOf("J3"), "CANCELLED") << "afterok on a job that failed";
}

TEST_F(JobRules, AnArrayRunsAtMostItsLimitAtOnce) {
  const std::vector<std::string> ids = pool.submitJob(spec(1), parseArray("0-9%3"), now);
  ASSERT_EQ(ids.size(), 10u);
  EXPECT_EQ(ids[7], "J1_7");
  int done = 0;
  for (int round = 0; round < 20 && done < 10; ++round) {
    tick();
    int running = 0;
    for (const std::string& id : ids) running += job(id).state == JobState::kRunning ? 1 : 0;
    EXPECT_LE(running, 3);
    for (const std::string& id : ids)
      if (job(id).state == JobState::kRunning) {
        runToEnd(id);
        ++done;
      }
  }
  EXPECT_EQ(done, 10);
  EXPECT_EQ(pool.jobs().named("J1").size(), 10u) << "J1 names every task";
  pool.submitJob(spec(1, "alice", "afterok:J1"), std::nullopt, now);
  tick();
  EXPECT_EQ(stateOf("J2"), "RUNNING") << "afterok on an array: every task completed";
}

TEST_F(JobRules, CancelEndsAPendingJobAndSignalsARunningOne) {
  addInventory(pool, "n02 leased 0-3", now);
  pool.submitJob(spec(4), std::nullopt, now);  // J1: runs on n01
  pool.submitJob(spec(4), std::nullopt, now);  // J2: waits
  tick();
  ASSERT_EQ(stateOf("J1"), "RUNNING");
  ASSERT_EQ(stateOf("J2"), "PENDING");
  EXPECT_THROW(pool.cancelJob("J1", "bob", false, 15, now), PoolError);
  EXPECT_THROW(pool.cancelJob("J99", "alice", false, 15, now), Error);
  pool.cancelJob("J2", "alice", false, 15, now);
  EXPECT_EQ(stateOf("J2"), "CANCELLED");
  EXPECT_TRUE(pool.queueMap().empty()) << "its queue entry is withdrawn";
  pool.jobStarted("n01", "J1", now);
  pool.cancelJob("J1", "root", true, 15, now);
  EXPECT_EQ(stateOf("J1"), "RUNNING") << "until its agent reports the end";
  ASSERT_EQ(pool.jobWork("n01").size(), 1u);
  EXPECT_EQ(pool.jobWork("n01")[0]->cancel_signal, 15);
  pool.jobSignalled("n01", "J1");
  EXPECT_TRUE(pool.jobWork("n01").empty());
  pool.jobEnded("n01", "J1", {143, 0, ""}, now);
  EXPECT_EQ(stateOf("J1"), "CANCELLED");
  EXPECT_EQ(job("J1").cancelled_by, "root");
}

TEST_F(JobRules, AnAgentSpeaksOnlyOfItsOwnNodesJobs) {
  pool.submitJob(spec(4), std::nullopt, now);
  tick();
  const std::string other = job("J1").node == "n01" ? "n02" : "n01";
  EXPECT_THROW(pool.jobEnded(other, "J1", {}, now), Error);
  EXPECT_THROW(pool.setJobCredential(other, "J1", "h"), Error);
  EXPECT_EQ(stateOf("J1"), "RUNNING");
}

TEST_F(JobRules, ALeaseThatEndsBeforeTheAgentStartsTheJobFailsIt) {
  JobSpec s = spec(4);
  s.request.ttl = seconds(30);
  pool.submitJob(s, std::nullopt, now);
  tick();
  ASSERT_EQ(stateOf("J1"), "RUNNING");
  tick(31);
  EXPECT_EQ(stateOf("J1"), "FAILED");
  EXPECT_NE(job("J1").reason.find("before the agent of node"), std::string::npos) << job("J1").reason;
}

TEST_F(JobRules, SubmissionsThatCannotRunAreRefused) {
  JobSpec none = spec(1);
  none.command.clear();
  EXPECT_THROW(pool.submitJob(none, std::nullopt, now), Error);
  JobSpec relative = spec(1);
  relative.cwd = "home";
  EXPECT_THROW(pool.submitJob(relative, std::nullopt, now), Error);
  JobSpec root = spec(1);
  root.uid = 0;
  EXPECT_THROW(pool.submitJob(root, std::nullopt, now), PoolError);
  EXPECT_THROW(pool.submitJob(spec(1, "alice", "afterok:J77"), std::nullopt, now), Error);
  EXPECT_THROW(pool.submitJob(spec(64), std::nullopt, now), PoolError) << "more GPUs than the pool has";
  JobOptions few;
  few.max_active_per_owner = 5;
  pool.setJobOptions(few);
  pool.submitJob(spec(1), parseArray("0-4"), now);
  try {
    pool.submitJob(spec(1), std::nullopt, now);
    ADD_FAILURE() << "past the cap";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 5 jobs pending or running"), std::string::npos) << e.what();
  }
  pool.submitJob(spec(1, "bob"), std::nullopt, now);  // another owner's cap is its own
  EXPECT_EQ(pool.jobs().records().size(), 6u) << "nothing refused was kept";
}

TEST_F(JobRules, APreemptedJobWithRequeueWaitsAgain) {
  PreemptOptions p;
  p.grace = seconds(10);
  p.min_runtime = seconds(0);
  pool.setPreemptOptions(p);
  JobSpec low = spec(8);
  low.request.preemptible = true;
  low.requeue = true;
  pool.submitJob(low, std::nullopt, now);
  tick();
  ASSERT_EQ(stateOf("J1"), "RUNNING");
  pool.jobStarted(job("J1").node, "J1", now);
  JobSpec high = spec(8, "bob");
  high.request.priority = 10;
  pool.submitJob(high, std::nullopt, now);
  tick();
  tick();
  EXPECT_TRUE(job("J1").preempted);
  pool.jobEnded(job("J1").node, "J1", {75, 0, ""}, now);
  EXPECT_EQ(stateOf("J1"), "PENDING");
  EXPECT_EQ(job("J1").restarts, 1);
  tick();
  EXPECT_EQ(stateOf("J2"), "RUNNING");
  std::vector<std::string> states;
  for (const JobEvent& e : pool.takeJobEvents())
    if (e.job == "J1") states.push_back(std::string(toString(e.to)));
  EXPECT_EQ(states, (std::vector<std::string>{"PENDING", "RUNNING", "REQUEUED", "PENDING"}));
}

TEST_F(JobRules, RecordsSurviveTheStateFile) {
  pool.submitJob(spec(1), std::nullopt, now);
  pool.submitJob(spec(8, "alice", "afterok:J1"), parseArray("0-3%2"), now);
  tick();
  pool.setJobCredential(job("J1").node, "J1", "h1");
  test::TempDir tmp;
  PoolState back = test::throughStateFile(pool, tmp.path() / "state.db");
  for (const auto& [key, record] : pool.jobs().records())
    EXPECT_EQ(*back.jobs().find(record.id), record) << record.id;
  EXPECT_EQ(back.jobs().nextNumber(), 3);
  EXPECT_NE(back.jobs().ofCredential("h1"), nullptr);
  EXPECT_EQ(back.jobWork(job("J1").node).size(), 1u);
  back.tick(now + seconds(1));
  EXPECT_EQ(back.jobs().find("J1")->state, JobState::kRunning);
  EXPECT_EQ(back.checkInvariants(), "");
}

TEST_F(JobRules, EndedJobsAreForgottenAfterTheRetentionButNeverWhileTheyRun) {
  JobOptions o;
  o.retention = seconds(100);
  pool.setJobOptions(o);
  pool.submitJob(spec(1), std::nullopt, now);
  pool.submitJob(spec(1), std::nullopt, now);
  tick();
  runToEnd("J1");
  pool.jobStarted(job("J2").node, "J2", now);
  tick(50);
  EXPECT_NE(pool.jobs().find("J1"), nullptr);
  tick(60);
  EXPECT_EQ(pool.jobs().find("J1"), nullptr);
  EXPECT_EQ(stateOf("J2"), "RUNNING") << "J2 runs past the retention: kept";
  EXPECT_TRUE(pool.takeDirty().jobs.count("J1")) << "the store deletes its row";
}

}  // namespace
}  // namespace poolrun::pool

namespace poolrun::pool {
namespace {

// A pipeline's planned starts: each step's is the latest planned end of the jobs it waits for (a
// running one's start plus its --timeout), so that the last step has one before the first ends; a
// parent without a --timeout has no planned end, and its children no planned start.
TEST_F(JobRules, ADependentJobsPlannedStartCountsItsParentsPlannedEnds) {
  JobSpec first = spec(8);
  first.time_limit = seconds(100);
  pool.submitJob(first, std::nullopt, now);
  JobSpec second = spec(8, "alice", "afterok:J1");
  second.time_limit = seconds(50);
  pool.submitJob(second, std::nullopt, now);
  pool.submitJob(spec(8, "alice", "afterany:J2"), std::nullopt, now);
  pool.submitJob(spec(8), std::nullopt, now);  // J4: no --timeout
  pool.submitJob(spec(8, "alice", "afterok:J4,afterok:J2"), std::nullopt, now);
  tick();
  ASSERT_EQ(stateOf("J1"), "RUNNING");
  const JobRecord& j1 = job("J1");
  pool.setJobCredential(j1.node, "J1", "h");
  pool.jobStarted(j1.node, "J1", now);
  EXPECT_EQ(plannedJobStart(pool, job("J2")), now + seconds(100));
  EXPECT_EQ(plannedJobStart(pool, job("J3")), now + seconds(150)) << "two steps on";
  EXPECT_EQ(plannedJobStart(pool, job("J5")), std::nullopt) << "J4 has no planned end";
  EXPECT_EQ(plannedJobStart(pool, job("J1")), std::nullopt) << "running: no planned start";
  // J1 ends early: its real end counts.
  now += seconds(10);
  pool.jobEnded(job("J1").node, "J1", {}, now);
  EXPECT_EQ(plannedJobStart(pool, job("J2")), now) << "J1's real end";
  EXPECT_EQ(plannedJobStart(pool, job("J3")), now + seconds(50));
}

}  // namespace
}  // namespace poolrun::pool
