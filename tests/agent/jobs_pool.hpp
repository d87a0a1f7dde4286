#pragma once

// The frame of the detached jobs' end-to-end tests and benchmark: a real poold, a real agent (node
// n01, eight GPUs of a fake NVML) with heartbeats 120 s apart, and an unprivileged user made by the
// test, who submits from a directory of their own.

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "agent_run.hpp"
#include "fake_nvml/fake_nvml_file.hpp"
#include "poold_process.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/fixtures.hpp"
#include "support/munge_daemon.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

class JobsPoolTest : public ::testing::Test {
 protected:
  TempDir dir;
  std::unique_ptr<TestUsers> users;
  std::string user;
  std::filesystem::path work;  // the user's submit directory (the test's folder is root's alone)
  std::string admin;
  std::unique_ptr<PooldProcess> poold;  // where the pool is one poold
  std::string uri;                      // the pool's URI
  std::unique_ptr<AgentRun> agent;
  std::string agentArgs;
  const std::string cgroupParent = "poolrun-test-" + std::to_string(getpid());  // the leases' cgroups

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the agent runs jobs as a user the test makes: needs root";
    users = std::make_unique<TestUsers>();
    user = users->addUser("prj");
    work = std::filesystem::path("/tmp") / ("poolrun-jobs-" + user);
    std::filesystem::create_directories(work);
    ASSERT_EQ(runShell("chown " + user + " " + work.string() + " && chmod 755 " + work.string()).status, 0);
    const std::string topology = (sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
    const std::filesystem::path tokens =
        dir.writeSecret("tokens", std::string(kTokens) + "tok-" + user + "-0123456789 " + user +
                                      " user\ntok-node-n01-0123456789 n01 node\n");
    dir.writeSecret("token-n01", "tok-node-n01-0123456789\n");
    admin = dir.writeSecret("admin", "tok-root-0123456789\n").string();
    writeFakeNvml(dir.path() / "nvml.json", fakeNvmlFor(topo::readTopologyFile(topology)));
    std::filesystem::create_directories(dir.path() / "proc");
    // Heartbeats 120 s apart (past every wait of these tests): the agent learns of its jobs from its long
    // poll and of its launchers' ends from SIGCHLD, so that these jobs run and end in a second or two, never
    // a heartbeat later.
    uri = startPool(tokens, {"--heartbeat-interval", "120"});
    agentArgs = "--pool " + uri + " --token-file " + (dir.path() / "token-n01").string() +
                " --node n01 --interval 120 --from " + topology + " --proc-root " +
                (dir.path() / "proc").string() + " --poolrun " + POOLRUN_BINARY + " --job-dir " +
                (dir.path() / "jobs").string() + " --cgroup-parent " + cgroupParent;
    agentArgs += agentOptions();
    startAgent();
    // Jobs are submitted once the node is in the pool: before, a job of its 8 GPUs could never run.
    for (auto end = std::chrono::steady_clock::now() + seconds(30); std::chrono::steady_clock::now() < end;) {
      std::string nodes;
      runProgram({POOLCTL_BINARY, "--pool", uri, "--token-file", admin, "--json", "nodes"}, &nodes);
      if (nodes.find("\"n01\"") != std::string::npos) return;
      std::this_thread::sleep_for(milliseconds(50));
    }
    FAIL() << "node n01 never registered: " << slurp(dir.path() / "agent-err");
  }

  // Starts the pool with `options`; its URI. One poold keeping its state in SQLite; a test of
  // replicas overrides it.
  virtual std::string startPool(const std::filesystem::path& tokens,
                                const std::vector<std::string>& options) {
    poold = std::make_unique<PooldProcess>(dir.path() / "state", tokens, options);
    return poold->uri();
  }

  // More options for the agent (a test's subclass).
  virtual std::string agentOptions() const { return ""; }

  // A detached job of two ranks probes the node's eight fake GPU device nodes (mknod, major 195) and
  // leaves a process in its own session after SIGKILLing its launcher: it must be refused the six
  // GPUs its lease does not hold, and the process killed with the lease's cgroup.
  void expectConfinedToItsLease() {
    const std::filesystem::path dev = work / "dev";
    std::filesystem::create_directories(dev);
    for (int n = 0; n < 8; ++n)
      ASSERT_EQ(runShell("mknod -m 666 " + (dev / ("nvidia" + std::to_string(n))).string() + " c 195 " +
                         std::to_string(n))
                    .status,
                0);
    script("probe.sh",
           "#!/bin/sh\n"
           "for n in 0 1 2 3 4 5 6 7; do\n"
           "  if cat " +
               dev.string() +
               "/nvidia$n 2>&1 | grep -q 'not permitted'; then echo refused $n; fi\n"
               "done\n"
               "echo visible $CUDA_VISIBLE_DEVICES\n"
               "[ \"$OMPI_COMM_WORLD_RANK\" = 0 ] || exit 0\n"
               "sleep 1\n"  // the output on its way to the file
               "setsid sleep 300 </dev/null >/dev/null 2>&1 &\n"
               "pkill -KILL -u $(id -u) -f -- --adopt-lease\n"
               "sleep 5\n");
    // No rank's reaper (POOLRUN_REAP=0) and the launcher killed: the sleep escapes every process of the
    // job's that would end it. The lease's cgroup has it still.
    const std::string id = submit("-n 2 -x POOLRUN_REAP=0 --output probe.out ./probe.sh");
    const json failed = waitForState(id, "FAILED");
    EXPECT_EQ(failed["signal"], SIGKILL) << failed.dump();
    const std::string out = slurp(work / "probe.out");
    std::multiset<std::string> visible, refused;
    std::istringstream lines(out);
    for (std::string word, value; lines >> word >> value;)
      (word == "visible" ? visible : refused).insert(value);
    EXPECT_EQ(visible.size(), 2u) << out;
    for (int n = 0; n < 8; ++n) {
      const std::string gpu = std::to_string(n);
      EXPECT_EQ(refused.count(gpu), 2 * (1 - visible.count(gpu)))
          << "GPU " << n << ": each rank refused it unless leased\n"
          << out;
    }
    // Its sleep, double-forked away from the job, went with the lease's cgroup.
    for (int i = 0; i < 100 && runShell("pgrep -u " + user + " -f 'sleep 300'").status == 0; ++i)
      std::this_thread::sleep_for(milliseconds(50));
    EXPECT_NE(runShell("pgrep -u " + user + " -f 'sleep 300'").status, 0) << "a process outlived its lease";
    EXPECT_NE(slurp(dir.path() / "agent-err").find("outlived the job's launcher on node n01, killed"),
              std::string::npos)
        << slurp(dir.path() / "agent-err");
  }

  // The agent of node n01, started (again) with the fixture's options, its stderr in `err`.
  void startAgent(const std::string& err = "agent-err") {
    agent = std::make_unique<AgentRun>(agentArgs, dir.path() / err, fakeNvmlEnv(dir.path() / "nvml.json"));
  }

  void TearDown() override {
    if (!work.empty()) std::filesystem::remove_all(work);
    // The leases' cgroups of jobs the test left running (their processes are killed with the
    // test's users), then the test's parent cgroup, in every hierarchy.
    agent.reset();
    users.reset();
    for (const char* hierarchy : {"devices", "freezer", "pids", "memory", "unified"})
      runShell("d=/sys/fs/cgroup/" + std::string(hierarchy) + "/" + cgroupParent +
               "; [ -d $d ] && for i in $(seq 100); do rmdir $d/* $d 2>/dev/null; [ -d $d ] || break; sleep "
               "0.05; done");
  }

  // poolrun run as the test's user in its submit directory, with its token, after `wrapper` (a
  // command that runs it: "timeout 1 ").
  ProcessResult asUser(const std::string& args, const std::string& wrapper = "") {
    return runShell(users->as(user, "cd " + work.string() + " && env POOLRUN_TOKEN=tok-" + user +
                                        "-0123456789 POOLRUN_STATE_DIR=" + work.string() + "/state " +
                                        wrapper + POOLRUN_BINARY + " --pool " + uri + " " + args));
  }

  std::string submit(const std::string& args) {
    ProcessResult r = asUser("--detach --simulate " + args);
    EXPECT_EQ(r.status, 0) << r.err << slurp(dir.path() / "agent-err");
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    EXPECT_TRUE(id.starts_with("J") && id.find('\n') == std::string::npos)
        << "stdout is the id alone: " << r.out;
    return id;
  }

  // poolctl as the administrator; its stdout.
  std::string poolctl(const std::string& args) {
    const ProcessResult r =
        runShell(std::string(POOLCTL_BINARY) + " --pool " + uri + " --token-file " + admin + " " + args);
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
    return r.out;
  }

  // A script in the user's submit directory, theirs.
  std::filesystem::path script(const std::string& name, const std::string& text) {
    const std::filesystem::path file = work / name;
    {
      std::ofstream out(file);
      out << text;
    }
    EXPECT_EQ(runShell("chown " + user + " " + file.string() + " && chmod 755 " + file.string()).status, 0);
    return file;
  }

  json job(const std::string& id) {
    std::string out;
    if (runProgram({POOLCTL_BINARY, "--pool", uri, "--token-file", admin, "--json", "job", id}, &out) != 0)
      return nullptr;
    json doc = json::parse(out, nullptr, false);
    return doc.is_array() && !doc.empty() ? doc[0] : json();
  }

  // Waits until job `id` is in `state`, up to `limit`; the job as it was last.
  json waitForState(const std::string& id, const std::string& state, seconds limit = seconds(60)) {
    json j;
    for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      j = job(id);
      if (j.is_object() && j.value("state", "") == state) return j;
      std::this_thread::sleep_for(milliseconds(200));
    }
    ADD_FAILURE() << id << " never reached " << state << ": " << j.dump()
                  << "\nagent: " << slurp(dir.path() / "agent-err")
                  << "\nits default output: " << slurp(work / ("poolrun-" + id + ".out"));
    return j;
  }
};

}  // namespace poolrun::test
