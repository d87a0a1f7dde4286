// poolctl's views of the live pool against a real poold on 127.0.0.1: nodes registered as their
// agent would (two with heartbeats the test sends, one of them then silent; one without an agent),
// a GPU failed by its ECC count, one foreign, an idle lease and a queued request; then `poolctl
// status`, `nodes`, `leases` and `top --once` as text, `top` in a pseudo-terminal (q and SIGINT
// quit, the terminal restored), `top` against no poold, bad --interval values, and --no-reclaim
// refused for a user (poolctl and poolrun) and granted to an administrator.

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "poold_process.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/topo/cluster.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

constexpr const char* kAlice = "tok-alice-0123456789";
constexpr const char* kBob = "tok-bob-0123456789";
constexpr const char* kRoot = "tok-root-0123456789";
constexpr uint64_t kGiB = uint64_t{1} << 30;

class LivePool : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = dir_.writeSecret("tokens", test::kTokens);
    poold_ = std::make_unique<test::PooldProcess>(
        dir_.path() / "state", tokens_,
        std::vector<std::string>{"--heartbeat-interval", "1", "--node-timeout", "2", "--idle-after", "1"});
    http_ = std::make_unique<httplib::Client>("127.0.0.1", poold_->port());
    http_->set_read_timeout(10, 0);
    for (auto& n : topo::readClusterFile((test::sourceDir() / "clusters" / "hgx-h100.toml").string()).nodes)
      nodes_[n.name] = n;
  }
  void TearDown() override {
    if (queued_ > 0) {
      kill(-queued_, SIGKILL);
      waitpid(queued_, nullptr, 0);
    }
  }

  int post(const std::string& path, const json& body, const std::string& token = kRoot) {
    auto r = http_->Post(path, {{"Authorization", "Bearer " + token}}, body.dump(), "application/json");
    EXPECT_TRUE(r) << path;
    if (r && r->status != 200) ADD_FAILURE() << path << ": " << r->status << " " << r->body;
    return r ? r->status : 0;
  }
  void registerAgent(const std::string& name) {
    post("/v1/nodes/" + name + "/register", toJson(NodeRegistration{nodes_.at(name), "poold-agent 0.1.0"}));
  }
  // A heartbeat of `name`: every GPU at `util`, 1 GiB of 80 used; `edit` changes the samples.
  void heartbeat(const std::string& name, double util,
                 const std::function<void(std::vector<topo::GpuSample>&)>& edit = {}) {
    const topo::NodeTopology& t = *nodes_.at(name).topology;
    Heartbeat hb;
    hb.node = name;
    hb.agent_version = "poold-agent 0.1.0";
    hb.time = std::chrono::system_clock::now();
    hb.topology_hash = topologyHash(t);
    for (size_t i = 0; i < t.gpus.size(); ++i) {
      topo::GpuSample g;
      g.index = i;
      g.uuid = t.gpus[i].uuid;
      g.pci = t.gpus[i].pci.str();
      g.time = hb.time;
      g.sm_utilization = util;
      g.memory_used_bytes = kGiB;
      g.memory_total_bytes = 80 * kGiB;
      g.temperature_c = 41;
      g.power_w = 95;
      g.ecc_uncorrected_volatile = 0;
      hb.gpus.push_back(g);
    }
    if (edit) edit(hb.gpus);
    post("/v1/nodes/" + name + "/heartbeat", toJson(hb));
  }
  std::string poolctl(const std::string& token, const std::string& args) const {
    return "env POOLRUN_TOKEN=" + token + " COLUMNS=200 LINES=60 timeout 30 " + POOLCTL_BINARY + " --pool " +
           poold_->uri() + " " + args;
  }
  test::ProcessResult run(const std::string& token, const std::string& args) const {
    return test::runShell(poolctl(token, args));
  }
  json runJson(const std::string& token, const std::string& args) const {
    test::ProcessResult r = run(token, "--json " + args);
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
    return json::parse(r.out, nullptr, false);
  }
  // Whether `done` holds within 20 s, sending hgx01's heartbeat (idle) every 250 ms meanwhile.
  bool waitFor(const std::function<bool()>& done) {
    for (auto end = Steady::now() + 20s; Steady::now() < end; std::this_thread::sleep_for(250ms)) {
      heartbeat("hgx01", 0.0, hgx01_);
      if (done()) return true;
    }
    return false;
  }

  // hgx01: GPU 1 with uncorrectable ECC errors, GPU 2 running a process of no lease.
  std::function<void(std::vector<topo::GpuSample>&)> hgx01_ = [](std::vector<topo::GpuSample>& g) {
    g[1].ecc_uncorrected_volatile = 2;
    g[2].processes = {{4242, kGiB * 19 / 2}};
    g[2].sm_utilization = 0.35;
    g[2].memory_used_bytes = 10 * kGiB;
  };

  // The live pool: hgx01 and hgx02 with agents (hgx02 falls silent), hgx03 without; alice's lease
  // on hgx01:0, idle; bob's request for 20 GPUs queued (13 are free).
  std::string buildLivePool() {
    registerAgent("hgx01");
    registerAgent("hgx02");
    post("/v1/nodes", json{{"nodes", json::array({toJson(nodes_.at("hgx03"))})}});
    heartbeat("hgx02", 0.5);
    heartbeat("hgx01", 0.0, hgx01_);
    json lease = runJson(kAlice, "acquire -n 1 --ttl 600 --job train");
    std::string id = lease.value("id", "");
    EXPECT_EQ(lease["gpus"][0]["node"], "hgx01") << lease.dump();
    EXPECT_EQ(lease["gpus"][0]["index"], 0) << lease.dump();
    EXPECT_TRUE(waitFor([&] {
      json nodes = runJson(kRoot, "nodes"), leases = runJson(kRoot, "leases");
      return nodes.size() == 3 && nodes[1]["state"] == "unreachable" && leases.size() == 1 &&
             leases[0].contains("idle_since_ms");
    })) << run(kRoot, "nodes").out
        << run(kRoot, "leases").out;
    // Once hgx02 is out of reach, 20 GPUs do not fit now (13 can be placed), but could.
    queued_ = test::spawnShell(poolctl(kBob, "acquire -n 20 --job eval --wait 120"));
    EXPECT_TRUE(waitFor([&] { return runJson(kRoot, "queue").size() == 1; })) << run(kRoot, "queue").out;
    return id;
  }

  test::TempDir dir_;
  std::filesystem::path tokens_;
  std::unique_ptr<test::PooldProcess> poold_;
  std::unique_ptr<httplib::Client> http_;
  std::map<std::string, topo::ClusterNode> nodes_;
  pid_t queued_ = -1;
};

// The line of `text` that holds every one of `parts`, or "".
std::string lineWith(const std::string& text, std::initializer_list<std::string> parts) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    bool all = true;
    for (const std::string& p : parts) all = all && line.find(p) != std::string::npos;
    if (all) return line;
  }
  return "";
}

TEST_F(LivePool, StatusNodesLeasesAndTopShowWhatTheAgentsSaid) {
  const std::string lease = buildLivePool();

  test::ProcessResult status = run(kAlice, "status");
  EXPECT_EQ(status.status, 0) << status.err;
  EXPECT_EQ(status.out,
            poold_->uri() +
                ": 3 nodes (3 up, 0 draining, 0 down; 1 unreachable), 24 GPUs (21 free, 1 leased, 1 "
                "failed, 1 foreign; 8 on unreachable nodes), 1 leases, 1 queued\n");

  test::ProcessResult nodes = run(kAlice, "nodes");
  EXPECT_EQ(nodes.status, 0) << nodes.err;
  EXPECT_NE(lineWith(nodes.out, {"hgx01", "up", "leaf1", "poold-agent 0.1.0", " ago", "8 (5/1/1/1)"}), "")
      << nodes.out;
  EXPECT_NE(lineWith(nodes.out, {"hgx02", "unreachable", "poold-agent 0.1.0", " ago", "8 (8/0/0/0)"}), "")
      << nodes.out;
  EXPECT_NE(lineWith(nodes.out, {"hgx03", "up", "no agent", "8 (8/0/0/0)"}), "") << nodes.out;
  EXPECT_NE(lineWith(nodes.out, {"  0 ", "leased", "0%", "1.0/80.0", "41C", "95W", lease}), "") << nodes.out;
  EXPECT_NE(lineWith(nodes.out, {"  1 ", "failed", "2 uncorrectable ECC errors since the driver loaded at "}),
            "")
      << nodes.out;
  EXPECT_NE(lineWith(nodes.out, {"  2 ", "foreign", "35%", "10.0/80.0", "pid 4242 (9.5 GiB)"}), "")
      << nodes.out;
  EXPECT_NE(lineWith(nodes.out, {"  7 ", "free", "0%", "1.0/80.0"}), "") << nodes.out;
  // hgx03 has no agent and no GPU leased or failed: its one line says it all (24 GPU lines in all).
  EXPECT_EQ(std::count(nodes.out.begin(), nodes.out.end(), '\n'), 2 + 3 + 16) << nodes.out;

  test::ProcessResult leases = run(kAlice, "leases");
  EXPECT_EQ(leases.status, 0) << leases.err;
  std::string row = lineWith(leases.out, {lease, "train", "alice", "hgx01:0"});
  EXPECT_NE(row, "") << leases.out;
  EXPECT_NE(lineWith(leases.out, {"LEASE", "AGE", "IDLE", "NODELIST", "NOTE"}), "") << leases.out;
  // Idle: a time under IDLE ("0:01"), where a lease that is not idle has "-".
  std::istringstream fields(row);
  std::vector<std::string> cells{std::istream_iterator<std::string>(fields), {}};
  ASSERT_GE(cells.size(), 6u) << row;
  EXPECT_EQ(cells[5].find("0:0"), 0u) << row;

  test::ProcessResult top = run(kAlice, "top --once");
  EXPECT_EQ(top.status, 0) << top.err;
  EXPECT_EQ(top.out.find('\x1b'), std::string::npos) << top.out;
  EXPECT_NE(lineWith(top.out, {"nodes 3 up, 1 unreachable",
                               "GPUs 21 free, 1 leased, 1 failed, 1 foreign; 8 unreachable",
                               "leases 1, queue 1", poold_->uri()}),
            "")
      << top.out;
  EXPECT_NE(lineWith(top.out, {"hgx02", "unreachable", "agent 0.1.0", "seen"}), "") << top.out;
  EXPECT_NE(lineWith(top.out, {"  2", "foreign", "35%]", "10/80]", "pid 4242 (9.5 GiB)"}), "") << top.out;
  EXPECT_NE(lineWith(top.out, {lease, "alice", "train", "hgx01:0"}), "") << top.out;
  EXPECT_NE(lineWith(top.out, {"1", "bob", "eval", "20", "needs 20 GPUs"}), "") << top.out;
  std::istringstream lines(top.out);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 200u) << line;

  test::ProcessResult small =
      test::runShell("env POOLRUN_TOKEN=" + std::string(kAlice) + " COLUMNS=20 LINES=5 timeout 30 " +
                     POOLCTL_BINARY + " --pool " + poold_->uri() + " top");  // not a terminal: one frame
  EXPECT_EQ(small.status, 0) << small.err;
  EXPECT_EQ(std::count(small.out.begin(), small.out.end(), '\n'), 5) << small.out;
}

// Reads what `fd` gives until `done` holds or 20 s pass.
bool readUntil(int fd, std::string& out, const std::function<bool()>& done) {
  for (auto end = Steady::now() + 20s; !done();) {
    if (Steady::now() >= end) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    if (n <= 0 && (p.revents & POLLHUP)) return done();
  }
  return true;
}

// The exit status of `pid`, waiting up to 10 s; -1 where it did not end (then it is killed).
int exitStatus(pid_t pid) {
  int status = 0;
  for (auto end = Steady::now() + 10s; Steady::now() < end; std::this_thread::sleep_for(20ms))
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

TEST_F(LivePool, TopInATerminalRedrawsAndRestoresItOnQAndOnSigint) {
  registerAgent("hgx01");
  heartbeat("hgx01", 0.5);
  for (const char* how : {"q", "SIGINT"}) {
    SCOPED_TRACE(how);
    int master = -1;
    winsize ws{};
    ws.ws_col = 100;
    ws.ws_row = 30;
    pid_t pid = forkpty(&master, nullptr, nullptr, &ws);
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("POOLRUN_TOKEN", kAlice, 1);
      execl(POOLCTL_BINARY, POOLCTL_BINARY, "--pool", poold_->uri().c_str(), "top", "--interval", "1",
            nullptr);
      _exit(127);
    }
    std::string out;
    // Two frames drawn in place: the second read of the pool redraws from the top left.
    EXPECT_TRUE(readUntil(master, out, [&] {
      size_t first = out.find("hgx01");
      return first != std::string::npos && out.find("\x1b[H", out.find("hgx01") + 1) != std::string::npos &&
             out.find("hgx01", out.find("\x1b[H", first)) != std::string::npos;
    })) << out;
    EXPECT_EQ(out.find("\x1b[?1049h\x1b[?25l"), 0u) << out;  // the alternate screen, no cursor
    EXPECT_NE(out.find("q quits"), std::string::npos) << out;
    // Without echo or line editing: q needs no Enter.
    termios t{};
    ASSERT_EQ(tcgetattr(master, &t), 0);
    EXPECT_EQ(t.c_lflag & (ICANON | ECHO), 0u);
    if (std::string(how) == "q")
      ASSERT_EQ(write(master, "q", 1), 1);
    else
      kill(pid, SIGINT);
    readUntil(master, out, [&] { return out.find("\x1b[?25h\x1b[?1049l") != std::string::npos; });
    EXPECT_EQ(exitStatus(pid), 0);
    EXPECT_NE(out.find("\x1b[?25h\x1b[?1049l"), std::string::npos) << out;  // cursor and screen back
    ASSERT_EQ(tcgetattr(master, &t), 0);
    EXPECT_NE(t.c_lflag & ICANON, 0u);  // the line discipline as it was
    EXPECT_NE(t.c_lflag & ECHO, 0u);
    close(master);
  }
}

TEST_F(LivePool, NoReclaimIsForAdministrators) {
  registerAgent("hgx01");
  test::ProcessResult user = run(kAlice, "acquire -n 1 --no-reclaim");
  EXPECT_EQ(user.status, 4) << user.err;
  EXPECT_NE(user.err.find("--no-reclaim"), std::string::npos) << user.err;
  EXPECT_NE(user.err.find("an administrator may"), std::string::npos) << user.err;

  // poolrun refuses to start (125) with the same words, before anything runs.
  test::ProcessResult poolrun =
      test::runShell("env POOLRUN_TOKEN=" + std::string(kBob) + " timeout 30 " + POOLRUN_BINARY + " --pool " +
                     poold_->uri() + " --no-reclaim -n 1 true");
  EXPECT_EQ(poolrun.status, 125) << poolrun.err;
  EXPECT_NE(poolrun.err.find("--no-reclaim"), std::string::npos) << poolrun.err;
  EXPECT_NE(poolrun.err.find("an administrator may"), std::string::npos) << poolrun.err;
  EXPECT_EQ(runJson(kRoot, "leases").size(), 0u);

  json granted = runJson(kRoot, "acquire -n 1 --no-reclaim");
  json plain = runJson(kRoot, "acquire -n 1");
  json leases = runJson(kRoot, "leases");
  ASSERT_EQ(leases.size(), 2u) << leases.dump();
  for (const json& l : leases) EXPECT_EQ(l.value("no_reclaim", false), l["id"] == granted["id"]) << l.dump();
  EXPECT_NE(lineWith(run(kRoot, "leases").out, {granted.value("id", "?"), "never reclaimed"}), "");
}

TEST_F(LivePool, TopSaysWhyThePoolCannotBeRead) {
  test::ProcessResult r =
      test::runShell(std::string("timeout 30 ") + POOLCTL_BINARY + " --pool http://127.0.0.1:1 top --once");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(lineWith(r.out, {"ERROR cannot reach poold at http://127.0.0.1:1"}), "") << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("poolctl: error: cannot reach poold"), std::string::npos) << r.err;
}

TEST_F(LivePool, TopRefusesBadIntervals) {
  for (const char* bad : {"0", "-1", "x", "99999999999999999999", "3601"}) {
    test::ProcessResult r = run(kAlice, std::string("top --once --interval ") + bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_NE(r.err.find(std::string("poolctl: error: --interval ") + bad), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("1 to 3600"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  test::ProcessResult none = run(kAlice, "top --interval");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("--interval needs a value"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace poolrun::pool
