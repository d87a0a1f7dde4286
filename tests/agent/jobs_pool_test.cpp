// Jobs the pool keeps, end to end on one machine: a real poold, a real agent (node n01, eight GPUs of
// a fake NVML), and an unprivileged user made by the test who submits with `poolrun --detach`. The
// submitting shell is gone at once; the agent starts the launcher as that user in the submit
// directory, its output lands in the job's file owned by the user, and `poolctl` shows, cancels and
// refuses what it should.

#include <set>
#include <sstream>

#include "jobs_pool.hpp"
#include "support/etcd_cluster.hpp"

namespace poolrun::test {
namespace {

TEST_F(JobsPoolTest, ADetachedJobRunsAsItsUserAndItsOutputIsTheirs) {
  const std::string id = submit("-n 2 --gpus-per-node 2 --output out-%j.txt /bin/echo job-ran");
  const json done = waitForState(id, "COMPLETED");
  EXPECT_EQ(done["exit_status"], 0) << done.dump();
  EXPECT_EQ(done["spec"]["owner"], user);
  const std::filesystem::path out = work / ("out-" + id + ".txt");
  const std::string text = slurp(out);
  EXPECT_EQ(occurrences(text, "job-ran"), 2u) << "one line a rank: " << text;
  struct stat st {};
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, getpwnam(user.c_str())->pw_uid) << "the output file is the user's";
  // Its lease went back with it.
  std::string leases;
  runProgram({POOLCTL_BINARY, "--pool", uri, "--token-file", admin, "--json", "leases"}, &leases);
  EXPECT_EQ(json::parse(leases, nullptr, false), json::array()) << leases;
}

TEST_F(JobsPoolTest, AChainRunsInOrderAndItsOtherBranchIsCancelled) {
  const std::string a = submit("-n 1 /bin/true");
  const std::string b = submit("--dependency afterok:" + a + " -n 1 /bin/true");
  const std::string c = submit("--dependency afternotok:" + a + " -n 1 /bin/true");
  waitForState(b, "COMPLETED");
  EXPECT_EQ(job(a)["state"], "COMPLETED");
  const json cancelled = job(c);
  EXPECT_EQ(cancelled["state"], "CANCELLED") << cancelled.dump();
  EXPECT_NE(cancelled.value("reason", "").find("afternotok:" + a), std::string::npos) << cancelled.dump();
}

TEST_F(JobsPoolTest, ItsOwnerCancelsARunningJobAnotherUserMayNot) {
  const std::string id = submit("-n 1 /bin/sleep 300");
  waitForState(id, "RUNNING");
  const ProcessResult other = runShell("env POOLRUN_TOKEN=tok-bob-0123456789 " + std::string(POOLCTL_BINARY) +
                                       " --pool " + uri + " cancel " + id);
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.err.find("may not cancel job " + id), std::string::npos) << other.err;
  const ProcessResult own =
      runShell(users->as(user, "env POOLRUN_TOKEN=tok-" + user + "-0123456789 " +
                                   std::string(POOLCTL_BINARY) + " --pool " + uri + " cancel " + id));
  EXPECT_EQ(own.status, 0) << own.err;
  const json j = waitForState(id, "CANCELLED", seconds(40));
  EXPECT_EQ(j["cancelled_by"], user);
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_TRUE(processesMentioning(work.string() + "/state").empty()) << "the job's processes ended";
}

TEST_F(JobsPoolTest, WhatCanBeKnownAtSubmissionIsRefusedThen) {
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"--chdir /nonexistent/dir -n 1 /bin/true", "--chdir '/nonexistent/dir'"},
      {"--output /root/x/out.txt -n 1 /bin/true", "could not write to /root/x"},
      {"--dependency afterok:J999 -n 1 /bin/true", "knows no job J999"},
      {"--array 0-3%0 -n 1 /bin/true", "a limit of 0"},
      {"--array 9-1 -n 1 /bin/true", "runs backwards"},
      {"--dependency after:J1 -n 1 /bin/true", "not a kind of dependency"},
      {"--output out-%q -n 1 /bin/true", "%q is not one poolrun knows"},
      {"-n 64 /bin/true", "can never run this job"},
      {"-n 1 ./missing.sh", "the program './missing.sh' cannot be run from " + work.string()},
      {"-n 1 no-such-program-anywhere", "the program 'no-such-program-anywhere' is not on the PATH here"},
      {"-n 1 ./bad.sh", "bad.sh line 2: unrecognised option '--bogus'"},
      {"--array 0-5999 -n 1 /bin/true", "6000 more would pass the most one owner may have (5000"},
  };
  script("bad.sh", "#!/bin/sh\n#POOLRUN --bogus\n");
  for (const Case& c : cases) {
    const ProcessResult r = asUser("--detach --simulate " + c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
  }
  const ProcessResult local =
      runShell(users->as(user, std::string(POOLRUN_BINARY) + " --detach -n 1 /bin/true"));
  EXPECT_NE(local.err.find("--detach needs a pool that keeps jobs"), std::string::npos) << local.err;
}

// Submissions killed (SIGKILL) at every point of their 30 ms, 20 of them: each job is stored whole or
// not at all. Those the pool stored run to COMPLETED, the pool is not harmed, and a submitter that
// printed an id had its job stored.
TEST_F(JobsPoolTest, ASubmissionKilledHalfWayLeavesAWholeJobOrNone) {
  std::vector<std::string> printed;
  for (int ms = 0; ms < 40; ms += 2) {
    const ProcessResult r =
        asUser("--detach --simulate --name cut -n 1 /bin/true",
               "timeout -s KILL 0." + std::string(ms < 10 ? "00" : "0") + std::to_string(ms) + " ");
    if (r.status == 0) printed.push_back(r.out.substr(0, r.out.find('\n')));
  }
  const json jobs = json::parse(poolctl("--json jobs --name cut"), nullptr, false);
  ASSERT_TRUE(jobs.is_array()) << jobs.dump();
  std::set<std::string> stored;
  for (const json& j : jobs) {
    stored.insert(j.value("id", ""));
    EXPECT_EQ(j["spec"]["command"], json::array({"--simulate", "--name=cut", "-n", "1", "--", "/bin/true"}))
        << j["spec"]["command"].dump();
    EXPECT_EQ(j["spec"]["owner"], user) << j["id"];
  }
  for (const std::string& id : printed) EXPECT_TRUE(stored.count(id)) << id << " was printed, not stored";
  for (const std::string& id : stored) waitForState(id, "COMPLETED");
  std::printf("%zu of 20 killed submissions stored, %zu printed their id\n", stored.size(), printed.size());
  EXPECT_EQ(submit("-n 1 /bin/true").substr(0, 1), "J") << "the pool takes jobs after";
}

// An array of 20 tasks with %4, from a job script whose #POOLRUN lines hold its options: never more
// than 4 run at once, every task gets its index, and `poolctl history` lists the 20 once they end.
TEST_F(JobsPoolTest, AnArrayOfTwentyRunsFourAtATimeFromAJobScript) {
  script("task.sh",
         "#!/bin/sh\n"
         "#POOLRUN -n 1 --name sweep\n"
         "#POOLRUN --output out-%a.txt\n"
         "echo task=$POOLRUN_ARRAY_TASK_ID\n"
         "sleep 0.3\n");
  const std::string id = submit("--array 0-19%4 ./task.sh");
  size_t most = 0;
  std::vector<json> tasks;
  for (auto end = std::chrono::steady_clock::now() + seconds(120); std::chrono::steady_clock::now() < end;) {
    const json running = json::parse(poolctl("--json jobs --state RUNNING --name sweep"), nullptr, false);
    ASSERT_TRUE(running.is_array());
    most = std::max(most, running.size());
    const json done = json::parse(poolctl("--json jobs --state COMPLETED --name sweep"), nullptr, false);
    if (done.size() == 20) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_LE(most, 4u) << "the array's limit";
  EXPECT_GE(most, 1u);
  for (int t = 0; t < 20; ++t) {
    const json task = job(id + "_" + std::to_string(t));
    EXPECT_EQ(task["state"], "COMPLETED") << task.dump() << slurp(dir.path() / "agent-err");
    EXPECT_EQ(slurp(work / ("out-" + std::to_string(t) + ".txt")), "task=" + std::to_string(t) + "\n");
  }
  const std::string csv = poolctl("history --csv --name sweep --since 1h");
  EXPECT_EQ(occurrences(csv, "\n"), 21u) << csv;
  EXPECT_TRUE(csv.starts_with("job,name,user,state,exit_status,")) << csv;
  EXPECT_NE(csv.find(id + "_19,sweep," + user + ",COMPLETED,0,"), std::string::npos) << csv;
  EXPECT_EQ(occurrences(poolctl("history --csv --until 2000-01-01"), "\n"), 1u) << "the header alone";
  const ProcessResult bad = runShell(std::string(POOLCTL_BINARY) + " --pool " + uri + " --token-file " +
                                     admin + " history --since yesterday");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("--since 'yesterday': give a time"), std::string::npos) << bad.err;
}

// poold killed with kill -9 while one job runs and one waits for its GPUs, and started again on its
// port: both records are there, the running job's launcher renews through the restart and ends
// COMPLETED, the waiting one then runs. cancel --name ends what is left of a name.
TEST_F(JobsPoolTest, JobsLiveThroughPooldKilledAndStartedAgain) {
  const std::string running = submit("-n 8 --name first /bin/sleep 4");
  const std::string waiting = submit("-n 8 --name second /bin/true");
  const std::string third = submit("--dependency afterok:" + waiting + " -n 8 --name third /bin/sleep 300");
  waitForState(running, "RUNNING");
  EXPECT_EQ(job(waiting)["state"], "PENDING");
  const int port = poold->port();
  poold->kill9();
  poold = std::make_unique<PooldProcess>(dir.path() / "state", dir.path() / "tokens",
                                         std::vector<std::string>{"--heartbeat-interval", "120"}, port);
  ASSERT_TRUE(poold->waitServing());
  EXPECT_EQ(job(running)["state"], "RUNNING") << "kept through the kill";
  EXPECT_EQ(job(waiting)["state"], "PENDING");
  waitForState(running, "COMPLETED");
  waitForState(waiting, "COMPLETED");
  waitForState(third, "RUNNING");
  EXPECT_NE(poolctl("cancel --name third"), "");
  const json cancelled = waitForState(third, "CANCELLED", seconds(40));
  EXPECT_EQ(cancelled["cancelled_by"], "root");
}

// poold-agent killed (SIGKILL, as a crash) while three jobs run, and started again. One job ends
// while no agent runs: the restarted agent finds its end in its records (--job-dir) and reports it
// with its exit status. One ends after: the agent, no longer its parent, notices and reports it. The
// third's record is lost: a cancel ends it all the same. The records go once poold has the ends.
TEST_F(JobsPoolTest, AnAgentKilledAndStartedAgainReportsWhatItsJobsBecame) {
  script("early.sh", "#!/bin/sh\nsleep 1\nexit 3\n");
  const std::string early = submit("-n 2 ./early.sh");
  const std::string late = submit("-n 2 /bin/sleep 6");
  const std::string lost = submit("-n 2 /bin/sleep 300");
  for (const std::string& id : {early, late, lost}) waitForState(id, "RUNNING");
  agent->kill9();
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(job(early)["state"], "RUNNING") << "no agent could have told poold";
  std::filesystem::remove(dir.path() / "jobs" / "n01" / (lost + ".job"));
  startAgent("agent-err-2");
  const json failed = waitForState(early, "FAILED", seconds(20));
  EXPECT_EQ(failed["exit_status"], 3) << failed.dump();
  const json done = waitForState(late, "COMPLETED", seconds(30));
  EXPECT_EQ(done["exit_status"], 0) << done.dump();
  EXPECT_NE(poolctl("cancel " + lost), "");
  const json cancelled = waitForState(lost, "CANCELLED", seconds(20));
  EXPECT_NE(cancelled.value("reason", "").find("cancelled by root"), std::string::npos) << cancelled.dump();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() / "jobs" / "n01")) << "the records go once reported";
}

// A job confined to its lease (the agent's --cgroup auto: v1 on this machine): its two ranks may
// open the device nodes of the lease's two GPUs and are refused the node's six others (nodes made
// with mknod under NVIDIA's major, minor = the GPU's index: no NVIDIA driver here), and a process it
// left in a session of its own, its launcher SIGKILLed, is killed with the lease's cgroup.
TEST_F(JobsPoolTest, AJobIsRefusedTheGpusOfItsNodeItDoesNotLeaseAndLeavesNothingBehind) {
  expectConfinedToItsLease();
}

// The same with the agent told cgroup v2 (a BPF device program, cgroup.kill) on this hybrid machine.
class JobsPoolV2Test : public JobsPoolTest {
 protected:
  std::string agentOptions() const override { return " --cgroup v2"; }
};

TEST_F(JobsPoolV2Test, AJobIsRefusedTheGpusOfItsNodeItDoesNotLeaseAndLeavesNothingBehind) {
  if (runShell("grep -q ' - cgroup2 ' /proc/self/mountinfo").status != 0)
    GTEST_SKIP() << "no cgroup2 mount here";
  expectConfinedToItsLease();
}

// --mem-per-gpu: the lease's cgroup on the node holds the job's processes to that much memory per
// GPU. A job that stays under it completes; one whose program keeps taking memory is ended by the
// kernel's OOM killer and FAILED.
TEST_F(JobsPoolTest, AJobPastItsMemoryPerGpuIsEndedByTheKernel) {
  script("hog.sh", "#!/bin/sh\nhead -c 1G /dev/zero | tail\n");  // tail holds the one line whole
  const std::string hog = submit("-n 1 --mem-per-gpu 256M --output hog.out ./hog.sh");
  const std::string fits = submit("-n 2 --mem-per-gpu 256M /bin/true");
  const json failed = waitForState(hog, "FAILED", seconds(120));
  EXPECT_NE(failed.value("reason", ""), "") << failed.dump();
  EXPECT_EQ(failed["spec"]["mem_per_gpu_bytes"], 256 << 20);
  waitForState(fits, "COMPLETED");
}

// The pool as two poold replicas on a three-member etcd (tests/pool/poold_process.hpp).
class JobsReplicasTest : public JobsPoolTest {
 protected:
  std::unique_ptr<EtcdCluster> etcd;
  std::unique_ptr<PooldReplicas> replicas;

  void SetUp() override {
    POOLRUN_TEST_REQUIRE_ETCD();
    JobsPoolTest::SetUp();
  }
  std::string startPool(const std::filesystem::path& tokens,
                        const std::vector<std::string>& options) override {
    etcd = std::make_unique<EtcdCluster>(3);
    replicas = std::make_unique<PooldReplicas>(etcd->uri(), 2, dir.path(), tokens, options);
    return replicas->uri();
  }
};

// The leader SIGKILLed while one job runs and one waits for its GPUs: the standby leads with every
// record, the running job's launcher renews through the failover and ends COMPLETED (told by the
// agent to the new leader), the waiting job is then started by the new leader, and a job submitted
// to the pool after the failover runs too. The killed replica comes back as a standby.
TEST_F(JobsReplicasTest, JobsLiveThroughTheLeadersFailover) {
  const std::string running = submit("-n 8 --name first /bin/sleep 8");
  const std::string waiting = submit("-n 8 --name second /bin/true");
  waitForState(running, "RUNNING");
  EXPECT_EQ(job(waiting)["state"], "PENDING");
  const int leader = replicas->leader(seconds(5));
  ASSERT_GE(leader, 0);
  replicas->at(leader).kill9();
  ASSERT_GE(replicas->leader(seconds(15), leader), 0) << "no standby took over";
  EXPECT_EQ(job(running)["state"], "RUNNING") << "kept through the failover";
  EXPECT_EQ(job(waiting)["state"], "PENDING");
  replicas->start(leader);
  const json done = waitForState(running, "COMPLETED");
  EXPECT_EQ(done["exit_status"], 0) << done.dump();
  waitForState(waiting, "COMPLETED");
  const std::string after = submit("-n 2 --name after /bin/true");
  waitForState(after, "COMPLETED");
  const std::string history = poolctl("history --csv");
  for (const std::string& id : {running, waiting, after})
    EXPECT_NE(history.find(id + ","), std::string::npos) << history;
}

}  // namespace
}  // namespace poolrun::test
