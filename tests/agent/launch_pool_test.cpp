// Ranks started by the pool's own agents (docs/launch.md), on the frame of launch_pool.hpp.
// mpirun's remote shell is poolrun-rsh; ssh on the PATH is a fake that records any call.

#include "launch_pool.hpp"

namespace poolrun::test {

// One line per rank: its node as the daemon's agent named it, its host name, its GPU, the GPUs of
// the node it was refused (EPERM), and whether it is in its lease's cgroup.
inline constexpr const char* kProbe =
    "#!/bin/sh\n"
    "refused=\n"
    "for n in 0 1 2 3 4 5 6 7; do\n"
    "  if cat @DEV@/nvidia$n 2>&1 | grep -q 'not permitted'; then refused=\"$refused$n\"; fi\n"
    "done\n"
    "grep -q \"$POOLRUN_LEASE\" /proc/self/cgroup && confined=yes || confined=no\n"
    "echo rank $OMPI_COMM_WORLD_RANK node $POOLRUN_NODE host $(hostname) gpu $CUDA_VISIBLE_DEVICES "
    "refused ${refused:-none} confined $confined\n"
    // One rank of n02 leaves a process in a session of its own (no rank reaper: -x POOLRUN_REAP=0).
    "[ \"$POOLRUN_NODE\" = n02 ] && [ \"$OMPI_COMM_WORLD_LOCAL_RANK\" = 0 ] && "
    "setsid sleep 300 </dev/null >/dev/null 2>&1 &\n"
    "exit 0\n";

// The job of 8 ranks, 4 on each node, started with ssh a fake that records its calls: the ranks of
// each node refused the GPUs their lease does not hold there, in its cgroup, with the node's name;
// the process one left behind on n02 killed when its daemon ended.
void LaunchPoolTest::expectAJobStartedAndConfinedByTheAgents() {
  const std::filesystem::path dev = work / "dev", bin = work / "bin";
  std::filesystem::create_directories(dev);
  std::filesystem::create_directories(bin);
  for (int n = 0; n < 8; ++n)
    ASSERT_EQ(runShell("mknod -m 666 " + (dev / ("nvidia" + std::to_string(n))).string() + " c 195 " +
                       std::to_string(n))
                  .status,
              0);
  script("bin/ssh", "#!/bin/sh\necho \"$@\" >> " + (work / "ssh-called").string() + "\nexit 255\n");
  std::string probe = kProbe;
  for (size_t at; (at = probe.find("@DEV@")) != std::string::npos;) probe.replace(at, 5, dev.string());
  script("probe.sh", probe);
  // 8 ranks, 4 on each node.
  const ProcessResult r =
      asUser("--simulate -n 8 --gpus-per-node 4 --launch agents -x POOLRUN_REAP=0 ./probe.sh",
             "env PATH=" + bin.string() + ":/usr/local/bin:/usr/bin:/bin ");
  ASSERT_EQ(r.status, 0) << r.out << r.err << "\nn01: " << slurp(dir.path() / "agent-err")
                         << "\nn02: " << slurp(dir.path() / "agent2-err");
  EXPECT_FALSE(std::filesystem::exists(work / "ssh-called")) << slurp(work / "ssh-called");
  // Per node: the GPUs its ranks hold, and what each rank was refused.
  std::map<std::string, std::set<std::string>> held;
  std::vector<std::pair<std::string, std::string>> refusedBy;  // (node, refused)
  std::istringstream lines(r.out);
  int ranks = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("rank ");
    if (at == std::string::npos) continue;
    std::istringstream words(line.substr(at));
    std::string k, rank, node, host, gpu, refused, confined;
    words >> k >> rank >> k >> node >> k >> host >> k >> gpu >> k >> refused >> k >> confined;
    ++ranks;
    EXPECT_EQ(host, node) << "the daemon took its node's name: " << line;
    EXPECT_EQ(confined, "yes") << line;
    held[node].insert(gpu);
    refusedBy.emplace_back(node, refused);
  }
  EXPECT_EQ(ranks, 8) << r.out;
  EXPECT_EQ(held.size(), 2u) << r.out;
  for (const auto& [node, refused] : refusedBy) {
    std::string expected;
    for (int n = 0; n < 8; ++n)
      if (!held[node].count(std::to_string(n))) expected += std::to_string(n);
    EXPECT_EQ(refused, expected.empty() ? "none" : expected) << "node " << node << "\n" << r.out;
  }
  EXPECT_NE(slurp(dir.path() / "agent2-err").find("started a daemon of lease"), std::string::npos);
  for (int i = 0; i < 100 && runShell("pgrep -u " + user + " -f 'sleep 300'").status == 0; ++i)
    std::this_thread::sleep_for(milliseconds(50));
  EXPECT_NE(runShell("pgrep -u " + user + " -f 'sleep 300'").status, 0) << "a process outlived its lease";
  EXPECT_NE(slurp(dir.path() / "agent2-err").find("outlived the job's daemon on node n02, killed"),
            std::string::npos)
      << slurp(dir.path() / "agent2-err");
}

namespace {

TEST_F(LaunchPoolTest, AJobOnTwoAgentNodesStartsWithoutSshConfinedToItsLease) {
  expectAJobStartedAndConfinedByTheAgents();
}

// A detached job over both nodes: its launcher on n01 asks poold for the credentials with its job's
// credential, and n02's agent starts its daemon.
TEST_F(LaunchPoolTest, ADetachedJobOverTwoNodesHasItsDaemonsStartedByTheAgents) {
  script("hello.sh", "#!/bin/sh\necho hello from $POOLRUN_NODE\n");
  const std::string id = submit("-n 8 --gpus-per-node 4 --launch agents --output hello.out ./hello.sh");
  const json done = waitForState(id, "COMPLETED");
  EXPECT_EQ(done["exit_status"], 0) << done.dump();
  const std::string out = slurp(work / "hello.out");
  EXPECT_NE(out.find("hello from n02"), std::string::npos) << out;
  EXPECT_NE(out.find("hello from n01"), std::string::npos) << out;
  EXPECT_NE(
      slurp(dir.path() / "agent2-err").find("started a daemon of lease " + done["lease"].get<std::string>()),
      std::string::npos)
      << slurp(dir.path() / "agent2-err");
}

// The same with both agents told cgroup v2 (a BPF device program, cgroup.kill).
class LaunchPoolV2Test : public LaunchPoolTest {
 protected:
  std::string agentOptions() const override { return LaunchPoolTest::agentOptions() + " --cgroup v2"; }
};

TEST_F(LaunchPoolV2Test, AJobOnTwoAgentNodesStartsWithoutSshConfinedToItsLease) {
  if (runShell("grep -q ' - cgroup2 ' /proc/self/mountinfo").status != 0)
    GTEST_SKIP() << "no cgroup2 mount here";
  expectAJobStartedAndConfinedByTheAgents();
}

TEST_F(LaunchPoolTest, AForgedReplayedOrAnotherNodesCredentialIsRefusedByTheAgent) {
  const json launch = leaseAndCredentials(16);
  json file = {{"nodes", json::object()}};
  std::map<std::string, json> nodes;
  for (const json& n : launch["nodes"]) nodes[n["node"].get<std::string>()] = n;
  ASSERT_EQ(nodes.size(), 2u) << launch.dump();
  ASSERT_TRUE(nodes["n02"]["agent"].is_string()) << launch.dump();
  // The route itself: a lease that is not, an id that is none, a body with fields.
  {
    httplib::Client http("127.0.0.1", poold->port());
    const httplib::Headers auth = {{"Authorization", "Bearer tok-" + user + "-0123456789"}};
    auto gone = http.Post("/v1/leases/L0123456789abcdef/launch", auth, "", "application/json");
    ASSERT_TRUE(gone);
    EXPECT_NE(gone->status, 200);
    EXPECT_NE(gone->body.find("no lease L0123456789abcdef"), std::string::npos) << gone->body;
    auto bad = http.Post("/v1/leases/L%FF%00x/launch", auth, "", "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << bad->body;
    auto fields = http.Post("/v1/leases/" + launch["lease"].get<std::string>() + "/launch", auth,
                            R"({"node": "n02"})", "application/json");
    ASSERT_TRUE(fields);
    EXPECT_EQ(fields->status, 400) << fields->body;
    EXPECT_NE(fields->body.find("takes no fields"), std::string::npos) << fields->body;
  }
  file["nodes"]["n02"] = nodes["n02"];
  ProcessResult good = rsh(file, "n02", "id -un; echo $POOLRUN_NODE; echo err >&2; exit 3");
  EXPECT_EQ(good.status, 3) << good.err;
  EXPECT_EQ(good.out, user + "\nn02\n");
  EXPECT_EQ(good.err, "err\n");
  // The same credential again.
  ProcessResult replay = rsh(file, "n02", "true");
  EXPECT_EQ(replay.status, 255);
  EXPECT_NE(replay.err.find("cannot start the job's daemon on node n02: its agent refused: launch credential "
                            "refused: it was used already (a replay)"),
            std::string::npos)
      << replay.err;
  // n01's credential shown to n02's agent.
  file["nodes"]["n02"]["credential"] = nodes["n01"]["credential"];
  ProcessResult other = rsh(file, "n02", "true");
  EXPECT_NE(other.err.find("it is for node n01, not n02"), std::string::npos) << other.err;
  // A credential altered to name root (its signature kept), and garbage.
  std::string forged = nodes["n01"]["credential"].get<std::string>();
  forged[10] = forged[10] == 'A' ? 'B' : 'A';
  for (const std::string& bad :
       {forged, std::string("PRL1.e30.AAAA"), std::string(20000, 'x'), std::string()}) {
    file["nodes"]["n02"]["credential"] = bad;
    ProcessResult refused = rsh(file, "n02", "touch " + (work / "ran").string());
    EXPECT_EQ(refused.status, 255) << refused.err;
    EXPECT_NE(refused.err.find("its agent refused: launch credential refused"), std::string::npos)
        << refused.err;
  }
  EXPECT_FALSE(std::filesystem::exists(work / "ran")) << "no refused command ran";
  // A node that cannot be reached: one line naming it.
  file["nodes"]["n02"]["agent"] = "127.0.0.1:1";
  ProcessResult down = rsh(file, "n02", "true");
  EXPECT_EQ(down.status, 255);
  EXPECT_NE(
      down.err.find("poolrun: cannot start the job's daemon on node n02: its agent at 127.0.0.1:1 cannot "
                    "be reached: Connection refused"),
      std::string::npos)
      << down.err;
  // Hostile clients of the port itself: garbage, a header past the limit; the agent lives on.
  const std::string port = nodes["n02"]["agent"].get<std::string>().substr(10);
  for (const std::string& junk : {std::string("not json\n"), std::string(300 * 1024, '{')}) {
    httplib::Client raw("127.0.0.1", std::stoi(port));
    raw.set_read_timeout(5, 0);
    raw.Post("/", junk, "text/plain");
  }
  // A fresh credential of the same lease: the agent still answers.
  httplib::Client http("127.0.0.1", poold->port());
  auto again = http.Post("/v1/leases/" + launch["lease"].get<std::string>() + "/launch",
                         {{"Authorization", "Bearer tok-" + user + "-0123456789"}}, "", "application/json");
  ASSERT_TRUE(again && again->status == 200);
  const json fresh = json::parse(again->body);
  for (const json& n : fresh["nodes"])
    if (n["node"] == "n02") file["nodes"]["n02"] = n;
  ProcessResult after = rsh(file, "n02", "echo alive");
  EXPECT_EQ(after.status, 0) << after.err;
  EXPECT_EQ(after.out, "alive\n");
}

// A credential used before the agent restarted is still refused after: its nonce is in the agent's
// journal (JOB_DIR/NODE/launch-nonces), not in its memory alone.
TEST_F(LaunchPoolTest, ACredentialUsedBeforeTheAgentRestartedIsRefusedAfter) {
  const json launch = leaseAndCredentials(16);
  json file = {{"nodes", json::object()}};
  for (const json& n : launch["nodes"])
    if (n["node"] == "n02") file["nodes"]["n02"] = n;
  ProcessResult good = rsh(file, "n02", "echo ran");
  ASSERT_EQ(good.status, 0) << good.err;
  startSecond();
  ASSERT_FALSE(HasFatalFailure());
  // The restarted agent listens at another port: its address from a fresh set of credentials.
  httplib::Client http("127.0.0.1", poold->port());
  auto again = http.Post("/v1/leases/" + launch["lease"].get<std::string>() + "/launch",
                         {{"Authorization", "Bearer tok-" + user + "-0123456789"}}, "", "application/json");
  ASSERT_TRUE(again && again->status == 200);
  const json credentials = json::parse(again->body);
  json fresh;
  for (const json& n : credentials["nodes"])
    if (n["node"] == "n02") fresh = n;
  ASSERT_TRUE(fresh["agent"].is_string()) << again->body << slurp(dir.path() / "agent2-err");
  file["nodes"]["n02"]["agent"] = fresh["agent"];
  ProcessResult replay = rsh(file, "n02", "touch " + (work / "replayed").string());
  EXPECT_EQ(replay.status, 255);
  EXPECT_NE(replay.err.find("launch credential refused: it was used already (a replay)"), std::string::npos)
      << replay.err;
  EXPECT_FALSE(std::filesystem::exists(work / "replayed"));
  file["nodes"]["n02"] = fresh;
  ProcessResult after = rsh(file, "n02", "echo alive");
  EXPECT_EQ(after.status, 0) << after.err;
  EXPECT_EQ(after.out, "alive\n");
}

// A client that goes away (mpirun killed, and its remote shell with it) ends its daemon.
TEST_F(LaunchPoolTest, AClientThatGoesAwayEndsItsDaemon) {
  const json launch = leaseAndCredentials(16);
  json file = {{"nodes", json::object()}};
  for (const json& n : launch["nodes"])
    if (n["node"] == "n02") file["nodes"]["n02"] = n;
  const std::filesystem::path path = dir.path() / "launch.json";
  std::ofstream(path) << file.dump();
  const pid_t client =
      spawnShell("env POOLRUN_LAUNCH_FILE=" + path.string() + " " + POOLRUN_RSH_BINARY +
                 " n02 'sleep 301' </dev/null >/dev/null 2>" + (dir.path() / "rsh-err").string());
  bool running = false;
  for (int i = 0; i < 200 && !running; ++i) {
    running = runShell("pgrep -u " + user + " -f 'sleep 301'").status == 0;
    if (!running) std::this_thread::sleep_for(milliseconds(25));
  }
  ASSERT_TRUE(running) << slurp(dir.path() / "rsh-err") << slurp(dir.path() / "agent2-err");
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  for (int i = 0; i < 200 && runShell("pgrep -u " + user + " -f 'sleep 301'").status == 0; ++i)
    std::this_thread::sleep_for(milliseconds(25));
  EXPECT_NE(runShell("pgrep -u " + user + " -f 'sleep 301'").status, 0) << "the daemon outlived its client";
  EXPECT_TRUE(waitForText(dir.path() / "agent2-err", "ended (exit status 143)", seconds(5)))
      << slurp(dir.path() / "agent2-err");
}

// A job of 8 ranks, 4 on each node (the test holds 4 GPUs of n01), whose n02 agent is killed while
// its ranks run: mpirun loses that node's daemon. With --retries 1 the job is restarted at once on
// a lease without n02 (n01's 8 GPUs, once the test lets its 4 go) and completes; without, it ends
// NODE_FAIL naming n02.
class LaunchPoolRetriesTest : public LaunchPoolTest {
 protected:
  ProcessResult runThroughANodeFailure(const std::string& options) {
    httplib::Client http("127.0.0.1", poold->port());
    const httplib::Headers auth = {{"Authorization", "Bearer tok-" + user + "-0123456789"}};
    auto blocker =
        http.Post("/v1/leases", auth, json{{"gpus", 4}, {"ttl_s", 120}}.dump(), "application/json");
    EXPECT_TRUE(blocker && blocker->status == 200) << (blocker ? blocker->body : "no reply");
    const json held = json::parse(blocker->body)["lease"];
    EXPECT_EQ(held["gpus"][0]["node"], "n01") << held.dump();
    script("job.sh",
           "#!/bin/sh\n"
           "if [ \"$POOLRUN_RESTART_COUNT\" = 0 ] && [ \"$POOLRUN_NODE\" = n02 ]; then\n"
           "  touch " +
               (work / "ran-n02-").string() +
               "$OMPI_COMM_WORLD_RANK; sleep 30\n"
               "fi\n"
               "echo rank $OMPI_COMM_WORLD_RANK node $POOLRUN_NODE restart $POOLRUN_RESTART_COUNT\n");
    const std::filesystem::path out = dir.path() / "job-out", errFile = dir.path() / "job-err";
    Reaped job{spawnShell(users->as(user, "cd " + work.string() + " && env POOLRUN_TOKEN=tok-" + user +
                                              "-0123456789 POOLRUN_STATE_DIR=" + work.string() + "/state " +
                                              POOLRUN_BINARY + " --pool " + uri +
                                              " --simulate -n 8 --launch agents " + options + " ./job.sh") +
                          " >" + out.string() + " 2>" + errFile.string())};
    bool running = false;
    for (int i = 0; i < 600 && !running; ++i) {
      running = std::filesystem::exists(work / "ran-n02-4") || std::filesystem::exists(work / "ran-n02-7");
      if (!running) std::this_thread::sleep_for(milliseconds(50));
    }
    EXPECT_TRUE(running) << slurp(errFile) << slurp(dir.path() / "agent2-err");
    second->kill9();
    auto released = http.Delete("/v1/leases/" + held["id"].get<std::string>(), auth);
    EXPECT_TRUE(released && released->status == 200);
    ProcessResult r;
    r.status = job.wait();
    r.out = slurp(out);
    r.err = slurp(errFile);
    runShell("pkill -9 -u " + user + " -f 'sleep 30'");  // n02's ranks, its agent gone
    return r;
  }
};

TEST_F(LaunchPoolRetriesTest, AJobWhoseNodeFailsIsRestartedWithoutIt) {
  const ProcessResult r = runThroughANodeFailure("--retries 1");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("node n02: its agent at"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("restarting it on a lease without n02 (retry 1 of 1)"), std::string::npos) << r.err;
  int restarted = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("restart 1") == std::string::npos) continue;
    ++restarted;
    EXPECT_NE(line.find("node n01"), std::string::npos) << line;
  }
  EXPECT_EQ(restarted, 8) << r.out << r.err;
}

TEST_F(LaunchPoolRetriesTest, WithoutRetriesAJobWhoseNodeFailsEndsNodeFailNamingIt) {
  const ProcessResult r = runThroughANodeFailure("");
  EXPECT_NE(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("poolrun: the job ended NODE_FAIL (exit status"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("node n02: its agent at"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("restart 1"), std::string::npos) << r.out;
}

// Heartbeats every second: the agent hears of a lease's end within two of them.
class LaunchPoolEndsTest : public LaunchPoolTest {
 protected:
  std::string agentOptions() const override { return LaunchPoolTest::agentOptions() + " --interval 1"; }

  // A daemon of a lease on n02 that would run on (a process it left in the background beside it)
  // is killed, all of it, when the lease is released under it: by the agent, at the lease's end.
  void expectAnEndedLeasesProcessesKilled() {
    const json launch = leaseAndCredentials(16);
    json file = {{"nodes", json::object()}};
    for (const json& n : launch["nodes"])
      if (n["node"] == "n02") file["nodes"]["n02"] = n;
    const std::filesystem::path path = dir.path() / "launch.json";
    std::ofstream(path) << file.dump();
    const std::filesystem::path out = dir.path() / "rsh-out";
    const pid_t client =
        spawnShell("env POOLRUN_LAUNCH_FILE=" + path.string() + " " + POOLRUN_RSH_BINARY +
                   " n02 '(setsid sleep 303 &); exec sleep 302' </dev/null >" + out.string() + " 2>&1");
    auto running = [&](const char* what) {
      return runShell("pgrep -u " + user + " -f '" + what + "'").status == 0;
    };
    for (int i = 0; i < 200 && !(running("sleep 302") && running("sleep 303")); ++i)
      std::this_thread::sleep_for(milliseconds(25));
    ASSERT_TRUE(running("sleep 302") && running("sleep 303"))
        << slurp(out) << slurp(dir.path() / "agent2-err");
    const std::string lease = launch["lease"].get<std::string>();
    httplib::Client http("127.0.0.1", poold->port());
    auto released =
        http.Delete("/v1/leases/" + lease, {{"Authorization", "Bearer tok-" + user + "-0123456789"}});
    ASSERT_TRUE(released && released->status == 200) << (released ? released->body : "no reply");
    for (int i = 0; i < 400 && (running("sleep 302") || running("sleep 303")); ++i)
      std::this_thread::sleep_for(milliseconds(25));
    EXPECT_FALSE(running("sleep 302")) << "the daemon outlived its lease";
    EXPECT_FALSE(running("sleep 303")) << "what it left in the background outlived its lease";
    int status = 0;
    waitpid(client, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL) << status << " " << slurp(out);
    EXPECT_TRUE(waitForText(dir.path() / "agent2-err",
                            "lease " + lease +
                                " has ended (poold lists it no more on node n02): its cgroup removed, 2 "
                                "processes in it killed",
                            seconds(5)))
        << slurp(dir.path() / "agent2-err");
    // n01 held the other half of the lease, but no daemon ran there: no cgroup, nothing to end.
    EXPECT_EQ(slurp(dir.path() / "agent-err").find("has ended"), std::string::npos)
        << slurp(dir.path() / "agent-err");
  }
};

TEST_F(LaunchPoolEndsTest, AnEndedLeasesProcessesAreKilledWhereverTheyRun) {
  expectAnEndedLeasesProcessesKilled();
}

class LaunchPoolEndsV2Test : public LaunchPoolEndsTest {
 protected:
  std::string agentOptions() const override { return LaunchPoolEndsTest::agentOptions() + " --cgroup v2"; }
};

TEST_F(LaunchPoolEndsV2Test, AnEndedLeasesProcessesAreKilledWhereverTheyRun) {
  if (runShell("grep -q ' - cgroup2 ' /proc/self/mountinfo").status != 0)
    GTEST_SKIP() << "no cgroup2 mount here";
  expectAnEndedLeasesProcessesKilled();
}

}  // namespace
}  // namespace poolrun::test
