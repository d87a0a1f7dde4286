// The agent's records of its detached jobs (jobs.hpp): a launcher's end written by its watcher and
// found by another JobRunner (a restarted agent), damaged records, and a record's removal once
// reported. The launcher here is a script that runs the job's command in place of poolrun.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "poolrun/agent/jobs.hpp"
#include "poolrun/agent/launch_server.hpp"
#include "poolrun/common/error.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using agent::CharDevice;
using agent::JobRunner;

class JobRunnerTest : public ::testing::Test {
 protected:
  TempDir dir;
  agent::JobRunnerOptions options;

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "runs a job as root, which only root may";
    // poolrun --pool URI --adopt-lease LEASE COMMAND...: the command alone.
    const std::filesystem::path launcher = dir.write("launcher", "#!/bin/sh\nshift 4\nexec \"$@\"\n");
    std::filesystem::permissions(launcher, std::filesystem::perms::owner_all);
    options = {"n01", "http://127.0.0.1:1", launcher, "", dir.path() / "records"};
  }

  pool::JobLaunch launch(const std::string& id, const std::string& shell) {
    pool::JobLaunch l;
    l.id = id;
    l.lease = "L1";
    l.owner = "root";
    l.allow_root = true;
    l.command = {"/bin/sh", "-c", shell};
    l.cwd = dir.path().string();
    l.output = l.error = (dir.path() / (id + ".out")).string();
    return l;
  }

  void write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(options.records);
    std::ofstream(options.records / name) << text;
  }

  // reap() until `count` reports came, 10 s at most.
  static std::map<std::string, pool::JobReport> reapAll(JobRunner& runner, size_t count) {
    std::map<std::string, pool::JobReport> out;
    for (int i = 0; i < 1000 && out.size() < count; ++i) {
      for (auto& [id, r] : runner.reap()) out[id] = r;
      if (out.size() < count) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return out;
  }
};

TEST_F(JobRunnerTest, ALaunchersEndIsFoundByTheNextAgentInTheRecords) {
  {
    JobRunner first(options);
    EXPECT_EQ(first.start(launch("J1", "sleep 0.3; exit 5")).kind, pool::JobReport::Kind::kStarted);
    EXPECT_EQ(first.start(launch("J2", "kill -TERM $$")).kind, pool::JobReport::Kind::kStarted);
    EXPECT_TRUE(std::filesystem::exists(options.records / "J1.job"));
    EXPECT_EQ(first.takenBack(), 0u);
  }  // the agent gone, its launchers running
  JobRunner second(options);
  EXPECT_EQ(second.running(), 2u);
  EXPECT_EQ(second.takenBack(), 2u);
  EXPECT_EQ(second.start(launch("J1", "exit 0")).kind, pool::JobReport::Kind::kStarted)
      << "a job it took back is not started twice";
  auto reports = reapAll(second, 2);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports["J1"].kind, pool::JobReport::Kind::kEnded);
  EXPECT_EQ(reports["J1"].exit.exit_status, 5);
  EXPECT_EQ(reports["J1"].exit.reason, "");
  EXPECT_EQ(reports["J2"].exit.signal, SIGTERM) << reports["J2"].exit.reason;
  EXPECT_EQ(reports["J2"].exit.exit_status, 128 + SIGTERM);
  EXPECT_TRUE(std::filesystem::exists(options.records / "J1.exit")) << "kept until reported";
  second.reported("J1");
  second.reported("J2");
  EXPECT_TRUE(std::filesystem::is_empty(options.records));
  while (waitpid(-1, nullptr, WNOHANG) > 0) {  // the watchers are this test's children
  }
}

TEST_F(JobRunnerTest, ACancelReachesTheLauncherAndTheWatcherRecordsIt) {
  JobRunner runner(options);
  runner.start(launch("J3", "sleep 30"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(runner.signal("J3", SIGTERM));
  EXPECT_FALSE(runner.signal("J4", SIGTERM)) << "not a job of this node";
  auto reports = reapAll(runner, 1);
  ASSERT_EQ(reports.count("J3"), 1u);
  EXPECT_EQ(reports["J3"].exit.signal, SIGTERM) << "the launcher, not the watcher, took the signal";
}

TEST_F(JobRunnerTest, DamagedRecordsAreReportedAsUnrecordedEndsAndStrayFilesLeftAlone) {
  write("J5.job", "not a pid\n");
  write("J6.exit", "exit_status=7 signal=0\n");
  write("J7.exit", "exit_status=99999999999999999999 signal=x\n");
  write("J8.job", "1 1\n");  // pid 1 did not start at tick 1: a reused pid is no watcher
  write("J9.exit", std::string(1 << 20, '\xff'));
  write("not an id!.job", "1 1\n");
  write("J10.exit.tmp", "exit_status=0");
  JobRunner runner(options);
  EXPECT_FALSE(runner.signal("J8", SIGTERM)) << "a reused pid is never signalled";
  auto reports = reapAll(runner, 5);
  ASSERT_EQ(reports.size(), 5u);
  EXPECT_EQ(reports["J6"].exit.exit_status, 7);
  EXPECT_EQ(reports["J6"].exit.reason, "");
  for (const char* id : {"J5", "J7", "J8", "J9"}) {
    EXPECT_EQ(reports[id].kind, pool::JobReport::Kind::kEnded) << id;
    EXPECT_NE(reports[id].exit.reason.find("was not recorded"), std::string::npos) << id;
  }
  EXPECT_EQ(reports.count("J10"), 0u) << "a half-written end is no end (its watcher may be renaming it now)";
  runner.reported("J10");
  EXPECT_FALSE(std::filesystem::exists(options.records / "J10.exit.tmp")) << "it goes with the job's records";
  EXPECT_TRUE(std::filesystem::exists(options.records / "not an id!.job"));
}

TEST_F(JobRunnerTest, RecordsThatCannotBeKeptRefuseTheStart) {
  options.records = dir.write("a-file", "") / "records";
  JobRunner runner(options);
  const pool::JobReport r = runner.start(launch("J11", "exit 0"));
  EXPECT_EQ(r.kind, pool::JobReport::Kind::kEnded);
  EXPECT_NE(r.exit.reason.find("cannot keep its job records in"), std::string::npos) << r.exit.reason;
  EXPECT_NE(r.exit.reason.find("--job-dir"), std::string::npos) << r.exit.reason;
}

// What a launcher is refused on a node of two GPUs (minors 4 and 6 by the driver, not their
// indexes), the second in MIG mode with three compute instances in two GPU instances: read from a
// fake /proc (the driver's information and capability files, /proc/devices).
TEST(JobConfinement, RefusesTheGpusAndMigCapabilitiesOfOtherLeases) {
  TempDir proc;
  topo::NodeTopology t;
  t.gpus.resize(2);
  for (size_t g = 0; g < 2; ++g) {
    t.gpus[g].index = g;
    t.gpus[g].pci = {0, static_cast<uint8_t>(0x18 + g), 0, 0};
    proc.write("driver/nvidia/gpus/" + t.gpus[g].pci.str() + "/information",
               "Model: H100\nDevice Minor: " + std::to_string(4 + 2 * g) + "\n");
  }
  t.gpus[1].mig.capable = t.gpus[1].mig.enabled = t.gpus[1].mig.pending = true;
  for (const auto& [gi, ci] : std::vector<std::pair<int, int>>{{2, 1}, {1, 0}, {2, 0}}) {
    topo::MigInstance i;
    i.gpu_instance = gi;
    i.compute_instance = ci;
    t.gpus[1].mig.instances.push_back(i);
  }
  proc.write("devices",
             "Character devices:\n  1 mem\n195 nvidia\n236 nvidia-caps\n\nBlock devices:\n236 sd\n");
  const std::map<std::string, int> caps = {
      {"gi1", 15}, {"gi1/ci0", 16}, {"gi2", 24}, {"gi2/ci0", 25}, {"gi2/ci1", 26}};
  for (const auto& [path, minor] : caps)
    proc.write("driver/nvidia/capabilities/gpu6/mig/" + path + "/access",
               "DeviceFileMinor: " + std::to_string(minor) + "\nDeviceFileMode: 292\n");
  agent::JobRunnerOptions o;
  std::ostringstream log;
  agent::confineJobs(o, "none", "poolrun", t, proc.path(), log);
  EXPECT_EQ(o.cgroup, std::nullopt);
  EXPECT_EQ(log.str(), "") << "none was asked for: nothing to warn of";
  EXPECT_EQ(o.gpu_minors, (std::vector<uint32_t>{4, 6}));
  ASSERT_EQ(o.mig_units.size(), 3u);
  auto denied = [&](std::vector<size_t> units) {
    pool::JobLaunch l;
    l.gpus = std::move(units);
    std::vector<std::string> out;
    for (const CharDevice& d : agent::confinementOf(o, l).deny)
      out.push_back(std::to_string(d.major) + ":" + std::to_string(d.minor));
    std::sort(out.begin(), out.end());
    return out;
  };
  // Units: 0 and 1 the GPUs, 2 = gi1/ci0, 3 = gi2/ci0, 4 = gi2/ci1 (by GPU instance, then compute).
  EXPECT_EQ(denied({0}),
            (std::vector<std::string>{"195:6", "236:15", "236:16", "236:24", "236:25", "236:26"}));
  EXPECT_EQ(denied({3}), (std::vector<std::string>{"195:4", "236:15", "236:16", "236:26"}))
      << "its GPU's node, its GPU instance and its compute instance are its own";
  EXPECT_EQ(denied({3, 4}), (std::vector<std::string>{"195:4", "236:15", "236:16"}));
  EXPECT_EQ(denied({0, 1}), (std::vector<std::string>{"236:15", "236:16", "236:24", "236:25", "236:26"}))
      << "a whole GPU in MIG mode is held through its instances, not its node";
  EXPECT_EQ(denied({99, 5000}),
            (std::vector<std::string>{"195:4", "195:6", "236:15", "236:16", "236:24", "236:25", "236:26"}))
      << "units the node does not have give nothing";
  EXPECT_EQ(agent::confinementOf(o, {}).pids_max, std::nullopt) << "no limit unless the agent is given one";
  o.lease_pids = 512;  // poold-agent --lease-pids 512
  EXPECT_EQ(agent::confinementOf(o, {}).pids_max, 512);
  // Without the driver's files: the GPUs' indexes, no capabilities.
  TempDir bare;
  agent::JobRunnerOptions b;
  agent::confineJobs(b, "none", "poolrun", t, bare.path(), log);
  EXPECT_EQ(b.gpu_minors, (std::vector<uint32_t>{0, 1}));
  EXPECT_FALSE(b.mig_units.at(0).gpu_instance.has_value());
}

// poold-agent --launch-listen: what is not HOST:PORT is refused naming it; an address this machine
// does not have cannot be bound, and says so; port 0 takes a free one.
TEST(LaunchListen, ABadAddressIsRefusedNamingItAndPortZeroTakesAFreeOne) {
  for (const std::string bad : {"", "7141", "h:", "h:x", "h:-1", "h:65536", "h:99999999999", "[::1:1"}) {
    agent::LaunchServerOptions o;
    o.node = "n01";
    o.listen = bad;
    try {
      agent::LaunchServer server(std::move(o));
      ADD_FAILURE() << "listening at '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--launch-listen '" + bad + "'"), std::string::npos) << e.what();
    }
  }
  agent::LaunchServerOptions away;
  away.listen = "192.0.2.1:0";  // TEST-NET-1: on no machine
  try {
    agent::LaunchServer server(std::move(away));
    ADD_FAILURE() << "bound an address this machine does not have";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen for launches at 192.0.2.1:0"), std::string::npos)
        << e.what();
  }
  agent::LaunchServerOptions any;
  any.listen = "127.0.0.1:0";
  agent::LaunchServer server(std::move(any));
  EXPECT_GT(server.port(), 0);
}

}  // namespace
}  // namespace poolrun::test
