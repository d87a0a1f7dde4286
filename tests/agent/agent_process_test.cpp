// poold-agent as a process: its command line, a poold it cannot reach, a stop by signal, and a real
// poold (tests/pool's PooldProcess) taking its registration and heartbeats.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_run.hpp"
#include "fake_nvml/fake_nvml_file.hpp"
#include "poold_process.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/test_pki.hpp"

namespace poolrun::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string fixtureTopology() {
  return (sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
}

// A port of 127.0.0.1 that nothing listens on (bound, then closed: nobody takes it in the test's
// few seconds).
int closedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A port of 127.0.0.1 that takes connections (the kernel's backlog) and never answers: a call to it
// blocks until the client's timeout. Closed when the object goes.
class SilentPort {
 public:
  SilentPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 16);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~SilentPort() { close(fd_); }
  SilentPort(const SilentPort&) = delete;
  SilentPort& operator=(const SilentPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

int countLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(AgentCommandLine, ABadOptionExitsWith2NamingTheValue) {
  TempDir dir;
  std::string token = dir.writeSecret("token", "tok-node-0123456789\n").string();
  const std::string ok = " --pool http://127.0.0.1:1 --token-file " + token;
  struct Case {
    std::string args, message;
  };
  for (const Case& c : std::vector<Case>{
           {ok + " --interval 0", "--interval 0: out of range (1 to 3600)"},
           {ok + " --interval 99999", "--interval 99999: out of range"},
           {ok + " --interval -1", "--interval -1: out of range"},
           {ok + " --interval x", "--interval x: not a whole number"},
           {" --token-file " + token, "needs --pool"},
           {" --pool https://127.0.0.1:1 --token-file " + token + " --ca " +
                (dir.path() / "none.pem").string(),
            "none.pem: no such file"},
           {" --pool http://127.0.0.1:1 --token-file " + (dir.path() / "none").string(),
            "none: no such file"},
           {ok + " --from " + (dir.path() / "none.xml").string(), "none.xml"},
       }) {
    ProcessResult r = runShell(kAgent + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("poold-agent: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(AgentCommandLine, HelpAndVersion) {
  ProcessResult help = runShell(kAgent + " --help");
  EXPECT_EQ(help.status, 0);
  for (const char* option : {"--pool", "--token-file", "--node", "--interval", "--from", "--sysfs-root",
                             "--proc-root", "--dcgm-job-mapping-dir", "--switch", "--label"})
    EXPECT_NE(help.out.find(option), std::string::npos) << option;
  ProcessResult version = runShell(kAgent + " --version");
  EXPECT_EQ(version.status, 0);
  EXPECT_EQ(version.out.rfind("poold-agent ", 0), 0u) << version.out;
}

TEST(AgentProcess, KeepsRunningWhilePooldIsDownSaysSoOnceAndStopsOnSigterm) {
  TempDir dir;
  std::string token = dir.writeSecret("token", "tok-node-0123456789\n").string();
  std::filesystem::path err = dir.path() / "err";
  AgentRun agent("--pool http://127.0.0.1:" + std::to_string(closedPort()) + " --token-file " + token +
                     " --node n01 --interval 1 --from " + fixtureTopology(),
                 err);
  ASSERT_TRUE(waitForText(err, "cannot reach poold", seconds(20))) << slurp(err);
  std::this_thread::sleep_for(seconds(3));  // several retries (1 s each at --interval 1)
  EXPECT_EQ(waitpid(agent.pid(), nullptr, WNOHANG), 0) << "it ended: " << slurp(err);
  EXPECT_EQ(agent.stop(seconds(10)), 0) << slurp(err);
  EXPECT_EQ(countLines(slurp(err), "cannot reach poold"), 1) << slurp(err);
  EXPECT_NE(slurp(err).find("poold-agent: stopped"), std::string::npos) << slurp(err);
}

// A stop while the registration waits for a poold that does not answer (its timeout is 10 s): the
// agent ends within its grace of 0.8 s, with status 0, not at the call's timeout.
TEST(AgentProcess, StopsWithinASecondWhileACallToPooldHangs) {
  TempDir dir;
  std::string token = dir.writeSecret("token", "tok-node-0123456789\n").string();
  std::filesystem::path err = dir.path() / "err";
  SilentPort silent;
  AgentRun agent("--pool http://127.0.0.1:" + std::to_string(silent.port()) + " --token-file " + token +
                     " --node n01 --from " + fixtureTopology(),
                 err);
  std::this_thread::sleep_for(seconds(2));  // it starts, reads the topology and sends the registration
  EXPECT_EQ(waitpid(agent.pid(), nullptr, WNOHANG), 0) << "it ended: " << slurp(err);
  EXPECT_EQ(agent.stop(seconds(5)), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("poold-agent: stopped (signal 15, during a call to poold)"), std::string::npos)
      << slurp(err);
}

// poold and one agent on 127.0.0.1, the agent's GPUs served by the fake NVML and its /proc a folder
// of the test's.
struct LivePool {
  TempDir dir;
  std::filesystem::path tokens =
      dir.writeSecret("tokens", std::string(kTokens) + "tok-node-n01-0123456789 n01 node\n");
  std::string token = dir.writeSecret("token", "tok-node-n01-0123456789\n").string();
  std::string admin = dir.writeSecret("admin", "tok-root-0123456789\n").string();
  std::filesystem::path err = dir.path() / "err";
  std::filesystem::path mapping = dir.path() / "dcgm";
  std::filesystem::path proc = dir.path() / "proc";
  std::filesystem::path nvml = dir.path() / "nvml.json";
  nlohmann::json gpus = fakeNvmlFor(topo::readTopologyFile(fixtureTopology()));
  std::unique_ptr<PooldProcess> poold;
  std::string ca;  // https: the CA poolctl trusts

  explicit LivePool(const std::vector<std::string>& pooldOptions = {}) {
    std::filesystem::create_directories(proc);
    writeFakeNvml(nvml, gpus);
    poold = std::make_unique<PooldProcess>(dir.path() / "state", tokens, pooldOptions);
  }
  std::unique_ptr<AgentRun> startAgent() {
    return std::make_unique<AgentRun>("--pool " + poold->uri() + " --token-file " + token +
                                          " --node n01 --interval 1 --from " + fixtureTopology() +
                                          " --proc-root " + proc.string() + " --dcgm-job-mapping-dir " +
                                          mapping.string(),
                                      err, fakeNvmlEnv(nvml));
  }
  nlohmann::json poolctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{POOLCTL_BINARY, "--pool", poold->uri(), "--token-file", admin, "--json"};
    if (!ca.empty()) argv.insert(argv.end(), {"--ca", ca});
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    if (runProgram(argv, &out) != 0) return nullptr;
    return nlohmann::json::parse(out, nullptr, false);
  }
  nlohmann::json node() {
    nlohmann::json nodes = poolctl({"nodes"});
    if (nodes.is_array())
      for (const nlohmann::json& n : nodes)
        if (n.value("name", "") == "n01") return n;
    return nullptr;
  }
  // Waits until `check` holds of n01 as poolctl shows it, up to 20 s.
  bool waitForNode(const std::function<bool(const nlohmann::json&)>& check) {
    auto end = std::chrono::steady_clock::now() + seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      nlohmann::json n = node();
      if (!n.is_null() && check(n)) return true;
      std::this_thread::sleep_for(milliseconds(200));
    }
    return false;
  }
};

TEST(AgentProcess, RegistersWithARealPooldAndItsHeartbeatsCarryTheGpusProcessesAndLeases) {
  LivePool live;
  std::unique_ptr<AgentRun> agent = live.startAgent();
  ASSERT_TRUE(waitForText(live.err, "registered node n01", seconds(20))) << slurp(live.err);
  ASSERT_TRUE(live.waitForNode([](const nlohmann::json& n) {
    return n["state"] == "up" && n["agent"].is_string() && n["last_heartbeat"].is_string() &&
           n["gpus"].size() == 8 && n["gpus"][0]["temperature_c"] == 35;
  })) << live.node().dump()
      << slurp(live.err);

  // A lease on one GPU: its dcgm-exporter file names the lease. A process of that lease on it and
  // one of no lease on another GPU: only the other GPU is foreign.
  nlohmann::json lease = live.poolctl({"acquire", "-n", "1", "--ttl", "120"});
  ASSERT_TRUE(lease.is_object()) << lease.dump();
  const std::string id = lease.value("id", "");
  const size_t held = lease["gpus"][0]["index"].get<size_t>();
  const size_t other = held == 0 ? 1 : 0;
  ASSERT_TRUE(waitForText(live.mapping / std::to_string(held), id + "\n", seconds(20))) << slurp(live.err);
  std::string environ = std::string("HOME=/root") + '\0' + "POOLRUN_LEASE=" + id + '\0';
  std::filesystem::create_directories(live.proc / "4343");
  std::filesystem::create_directories(live.proc / "4242");
  std::ofstream(live.proc / "4343" / "environ", std::ios::binary) << environ;
  std::ofstream(live.proc / "4242" / "environ", std::ios::binary) << std::string("USER=eve") + '\0';
  live.gpus["gpus"][held]["processes"] = {{{"pid", 4343}, {"used_memory_bytes", 1 << 30}}};
  live.gpus["gpus"][other]["processes"] = {{{"pid", 4242}, {"used_memory_bytes", 2 << 20}}};
  writeFakeNvml(live.nvml, live.gpus);
  EXPECT_TRUE(live.waitForNode([&](const nlohmann::json& n) {
    return n["gpus"][other]["state"] == "foreign" && n["gpus"][held]["state"] == "leased";
  })) << live.node().dump()
      << slurp(live.err);

  // Released: the file goes.
  live.poolctl({"release", id});
  auto end = std::chrono::steady_clock::now() + seconds(20);
  while (std::filesystem::exists(live.mapping / std::to_string(held)) &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(std::filesystem::exists(live.mapping / std::to_string(held))) << slurp(live.err);

  EXPECT_EQ(slurp(live.err).find("refused"), std::string::npos) << slurp(live.err);
  EXPECT_EQ(slurp(live.err).find("cannot reach"), std::string::npos) << slurp(live.err);
  EXPECT_EQ(agent->stop(seconds(10)), 0) << slurp(live.err);
}

TEST(AgentProcess, APooldKilledAndStartedAgainIsReachedAgainWithOneLineEachWay) {
  LivePool live;
  std::unique_ptr<AgentRun> agent = live.startAgent();
  ASSERT_TRUE(waitForText(live.err, "registered node n01", seconds(20))) << slurp(live.err);
  const int port = live.poold->port();
  live.poold->kill9();
  ASSERT_TRUE(waitForText(live.err, "cannot reach poold", seconds(20))) << slurp(live.err);
  std::this_thread::sleep_for(seconds(2));  // a few retries
  live.poold = std::make_unique<PooldProcess>(live.dir.path() / "state", live.tokens,
                                              std::vector<std::string>{}, port);
  ASSERT_TRUE(waitForText(live.err, "reached poold again", seconds(20))) << slurp(live.err);
  EXPECT_TRUE(live.waitForNode([](const nlohmann::json& n) { return n["state"] == "up"; }))
      << live.node().dump();
  EXPECT_EQ(agent->stop(seconds(10)), 0) << slurp(live.err);
  EXPECT_EQ(countLines(slurp(live.err), "cannot reach poold"), 1) << slurp(live.err);
  EXPECT_EQ(countLines(slurp(live.err), "reached poold again"), 1) << slurp(live.err);
}

// A NIC port that goes down in sysfs (--sysfs-root, read by the telemetry sampler): the agent
// registers the node again with the port down, and poold takes the heartbeats of the new topology.
TEST(AgentProcess, ANicPortThatGoesDownInSysfsIsRegisteredAgain) {
  LivePool live;
  std::filesystem::path sys = live.dir.path() / "root" / "sys";
  std::filesystem::path port = sys / "class" / "infiniband" / "mlx5_0" / "ports" / "1";
  live.dir.write(port.lexically_relative(live.dir.path()) / "state", "4: ACTIVE\n");
  live.dir.write(port.lexically_relative(live.dir.path()) / "rate", "400 Gb/sec (4X NDR)\n");
  AgentRun agent("--pool " + live.poold->uri() + " --token-file " + live.token +
                     " --node n01 --interval 1 --from " + fixtureTopology() + " --sysfs-root " + sys.string(),
                 live.err, fakeNvmlEnv(live.nvml));
  ASSERT_TRUE(waitForText(live.err, "registered node n01", seconds(20))) << slurp(live.err);
  std::this_thread::sleep_for(seconds(2));
  EXPECT_EQ(countLines(slurp(live.err), "registered node n01"), 1) << slurp(live.err);  // no change yet
  live.dir.write(port.lexically_relative(live.dir.path()) / "state", "1: DOWN\n");
  ASSERT_TRUE(waitForText(live.err, "NIC mlx5_0 port 1 is down (was active)", seconds(20)))
      << slurp(live.err);
  auto end = std::chrono::steady_clock::now() + seconds(20);
  while (countLines(slurp(live.err), "registered node n01") < 2 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(milliseconds(100));
  std::this_thread::sleep_for(seconds(2));  // heartbeats of the new topology, none asking again
  EXPECT_EQ(countLines(slurp(live.err), "registered node n01"), 2) << slurp(live.err);
  EXPECT_EQ(countLines(slurp(live.err), "asks for node"), 0) << slurp(live.err);
  EXPECT_EQ(agent.stop(seconds(10)), 0) << slurp(live.err);
}

// A token of another node is refused by poold (403) and said once; the agent goes on trying, and a
// token file put right is read at the next try (30 s later: not waited for here).
TEST(AgentProcess, ATokenOfAnotherNodeIsRefusedWithPooldsMessageOnce) {
  LivePool live;
  std::string other = live.dir.write("other", "tok-alice-0123456789\n").string();
  AgentRun agent("--pool " + live.poold->uri() + " --token-file " + other +
                     " --node n01 --interval 1 --from " + fixtureTopology(),
                 live.err, fakeNvmlEnv(live.nvml));
  ASSERT_TRUE(waitForText(live.err, "refused POST /v1/nodes/n01/register (403)", seconds(20)))
      << slurp(live.err);
  std::this_thread::sleep_for(seconds(1));
  EXPECT_EQ(waitpid(agent.pid(), nullptr, WNOHANG), 0) << "it ended: " << slurp(live.err);
  EXPECT_EQ(agent.stop(seconds(10)), 0) << slurp(live.err);
  EXPECT_EQ(countLines(slurp(live.err), "refused"), 1) << slurp(live.err);
}

// The pool over HTTPS as a site runs it: poold with a certificate, asking agents for theirs; an
// agent with its node's certificate; poolctl trusting the CA. And what each wrong client is told.
TEST(AgentProcess, OverHttpsAnAgentWithItsNodesCertificateRegistersAndOthersAreToldWhy) {
  TestPki pki;
  const CertFiles server = pki.issue("server", "/CN=poold", "DNS:localhost,IP:127.0.0.1");
  const CertFiles n01 = pki.issue("n01", "/CN=n01", "DNS:n01");
  const CertFiles n02 = pki.issue("n02", "/CN=n02", "DNS:n02");
  LivePool live({"--tls-cert", server.cert.string(), "--tls-key", server.key.string(), "--tls-client-ca",
                 pki.caCert().string()});
  ASSERT_EQ(live.poold->uri().rfind("https://127.0.0.1:", 0), 0u) << live.poold->uri();
  live.ca = pki.caCert().string();
  const std::string common = "--pool " + live.poold->uri() + " --token-file " + live.token + " --ca " +
                             live.ca + " --node n01 --interval 1 --from " + fixtureTopology();
  {
    // Another node's certificate, then none: refused by poold, saying which.
    const std::filesystem::path err2 = live.dir.path() / "err2", err3 = live.dir.path() / "err3";
    AgentRun wrong(common + " --tls-cert " + n02.cert.string() + " --tls-key " + n02.key.string(), err2,
                   fakeNvmlEnv(live.nvml));
    AgentRun none(common, err3, fakeNvmlEnv(live.nvml));
    EXPECT_TRUE(waitForText(err2,
                            "must come with a client certificate for n01 (poold --tls-client-ca); this "
                            "connection presented one for n02",
                            seconds(20)))
        << slurp(err2);
    EXPECT_TRUE(waitForText(err3, "this connection presented none", seconds(20))) << slurp(err3);
    EXPECT_EQ(wrong.stop(seconds(10)), 0);
    EXPECT_EQ(none.stop(seconds(10)), 0);
  }
  AgentRun agent(common + " --tls-cert " + n01.cert.string() + " --tls-key " + n01.key.string(), live.err,
                 fakeNvmlEnv(live.nvml));
  ASSERT_TRUE(waitForText(live.err, "registered node n01", seconds(20))) << slurp(live.err);
  EXPECT_TRUE(live.waitForNode([](const nlohmann::json& n) {
    return n["state"] == "up" && n["gpus"].size() == 8;
  })) << live.node().dump()
      << slurp(live.err);

  // poolctl without the CA, and as if the pool were plain HTTP: each told what to do.
  std::string out;
  ProcessResult r = runShell(std::string(POOLCTL_BINARY) + " --pool " + live.poold->uri() + " --token-file " +
                             live.admin + " status");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("which is not among the system's CAs (no --ca or POOLRUN_CA given)"),
            std::string::npos)
      << r.err;
  r = runShell("POOLRUN_CA=" + live.ca + " " + POOLCTL_BINARY + " --pool " + live.poold->uri() +
               " --token-file " + live.admin + " status");
  EXPECT_EQ(r.status, 0) << "POOLRUN_CA: " << r.err;
  r = runShell(std::string(POOLCTL_BINARY) + " --pool http://127.0.0.1:" +
               std::to_string(live.poold->port()) + " --token-file " + live.admin + " status");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(
      r.err.find("this poold serves HTTPS only: use https://HOST:" + std::to_string(live.poold->port())),
      std::string::npos)
      << r.err;

  // poolrun over HTTPS: a job on the agent's node with --ca, and with POOLRUN_CA; without either,
  // told why before anything runs.
  const std::string job =
      " --token-file " + live.admin + " --simulate --no-doctor -n 2 --lease-ttl 30 -- /bin/true";
  const std::string env = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
  r = runShell(env + POOLRUN_BINARY + " --pool " + live.poold->uri() + " --ca " + live.ca + job);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  r = runShell(env + "POOLRUN_CA=" + live.ca + " " + POOLRUN_BINARY + " --pool " + live.poold->uri() + job);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  r = runShell(env + POOLRUN_BINARY + " --pool " + live.poold->uri() + job);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.err.find("which is not among the system's CAs (no --ca or POOLRUN_CA given)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(agent.stop(seconds(10)), 0) << slurp(live.err);
}

}  // namespace
}  // namespace poolrun::test
