// poold-agent's command line, read in the process (the binary's exit status: agent_process_test).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "poolrun/agent/options.hpp"
#include "poolrun/common/error.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(AgentOptions, ReadsEveryOption) {
  TempDir sys;
  std::filesystem::create_directories(sys.path() / "sys");
  agent::AgentOptions o = agent::parseAgentOptions(words(
      "--pool http://127.0.0.1:7450 --token-file /t --node n01 --interval 60 --from f.xml --sysfs-root " +
      (sys.path() / "sys").string() + " --proc-root " + sys.path().string() +
      " --dcgm-job-mapping-dir /run/dcgm --switch leaf1 --nvlink-domain rack7 --spine s2 --label rack=r1 "
      "--label zone=a --job-dir /srv/jobs"));
  EXPECT_EQ(o.job_dir, "/srv/jobs");
  EXPECT_EQ(
      agent::parseAgentOptions(words("--pool http://h:1 --token-file t --cgroup v2 --cgroup-parent site"))
          .cgroup,
      "v2");
  EXPECT_EQ(agent::parseAgentOptions(words("--pool http://h:1 --token-file t")).cgroup, "auto");
  EXPECT_EQ(agent::parseAgentOptions(words("--pool http://h:1 --token-file t --lease-pids 512")).lease_pids,
            512);
  EXPECT_EQ(agent::parseAgentOptions(words("--pool http://h:1 --token-file t")).health_interval.count(), 0)
      << "health checks are off until a site turns them on";
  EXPECT_EQ(agent::parseAgentOptions(words("--pool http://h:1 --token-file t --health-interval 300"))
                .health_interval.count(),
            300);
  const agent::AgentOptions launch = agent::parseAgentOptions(
      words("--pool http://h:1 --token-file t --launch-listen 0.0.0.0:7141 --launch-advertise n01.ib:7141 "
            "--launch-min-uid 5000 --allow-root-launches --simulated-node"));
  EXPECT_EQ(launch.launch_listen, "0.0.0.0:7141");
  EXPECT_EQ(launch.launch_advertise, "n01.ib:7141");
  EXPECT_EQ(launch.launch_min_uid, 5000);
  EXPECT_TRUE(launch.allow_root_launches && launch.simulated_node);
  EXPECT_EQ(o.pool, "http://127.0.0.1:7450");
  EXPECT_EQ(o.token_file, "/t");
  EXPECT_EQ(o.node, "n01");
  EXPECT_EQ(o.interval, std::chrono::seconds(60));
  EXPECT_EQ(o.from, "f.xml");
  EXPECT_EQ(o.job_mapping_dir, "/run/dcgm");
  EXPECT_EQ(o.levels.switch_name, "leaf1");
  EXPECT_EQ(o.levels.nvlink_domain, "rack7");
  EXPECT_EQ(o.levels.spine, "s2");
  EXPECT_EQ(o.labels, (std::map<std::string, std::string>{{"rack", "r1"}, {"zone", "a"}}));
  EXPECT_EQ(agent::parseAgentOptions(words("--pool http://h:1 --token-file t")).interval,
            std::chrono::seconds(5));
  EXPECT_EQ(agent::parseAgentOptions(words("--pool http://h:1 --token-file t")).job_dir,
            agent::kDefaultJobDir);
}

// --join-file: the join token from a file, read only while the node has not joined.
TEST(AgentOptions, ReadsTheJoinTokenFromAFileUntilTheNodeHasJoined) {
  TempDir dir;
  const std::string token = "pj-" + std::string(64, 'a');
  const auto file = dir.writeSecret("join", "# from poolctl node-token create\n" + token + "\n");
  const std::string joined = (dir.path() / "node.token").string();
  const std::string base = "--pool http://h:1 --token-file " + joined + " --join-file ";
  EXPECT_EQ(agent::parseAgentOptions(words(base + file.string())).join, token);
  dir.writeSecret("node.token", "tok-node-0123456789\n");
  EXPECT_EQ(agent::parseAgentOptions(words(base + (dir.path() / "gone").string())).join, "")
      << "a node that joined reads no join file (it may be removed)";
  std::filesystem::remove(joined);
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {base + (dir.path() / "gone").string(), "gone"},
           {base + dir.writeSecret("bad", "tok-not-a-join-token\n").string(), "that is not a join token"},
           {base + file.string() + " --join " + token, "--join and --join-file: give one or the other"}}) {
    try {
      agent::parseAgentOptions(words(args));
      ADD_FAILURE() << args << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

struct Case {
  std::string args;
  std::string message;  // a part of the error
};

TEST(AgentOptions, RefusesABadCommandLineNamingTheValue) {
  const std::string ok = "--pool http://127.0.0.1:7450 --token-file /t ";
  for (const Case& c : std::vector<Case>{
           {ok + "--interval 0", "--interval 0: out of range (1 to 3600)"},
           {ok + "--interval 99999", "--interval 99999: out of range (1 to 3600)"},
           {ok + "--interval -1", "--interval -1: out of range (1 to 3600)"},
           {ok + "--interval x", "--interval x: not a whole number (1 to 3600)"},
           {ok + "--interval 1e3", "--interval 1e3: not a whole number"},
           {ok + "--interval", "--interval needs a value"},
           {ok + "--job-dir jobs", "--job-dir 'jobs': not an absolute path"},
           {ok + "--cgroup v3", "--cgroup 'v3': give auto, v1, v2 or none"},
           {ok + "--lease-pids 0", "--lease-pids 0: out of range (1 to 4194304)"},
           {ok + "--lease-pids -5", "--lease-pids -5: out of range"},
           {ok + "--health-interval -1", "--health-interval -1: out of range (0 to 86400)"},
           {ok + "--health-interval 86401", "--health-interval 86401: out of range (0 to 86400)"},
           {ok + "--health-interval 99999999999999999999",
            "--health-interval 99999999999999999999: out of range"},
           {ok + "--health-interval 5m", "--health-interval 5m: not a whole number"},
           {ok + "--health-interval", "--health-interval needs a value"},
           {ok + "--cgroup-parent a/b", "--cgroup-parent 'a/b': give one cgroup name"},
           {ok + "--cgroup-parent ..", "--cgroup-parent '..': give one cgroup name"},
           {ok + "--simulated-node", "--simulated-node without --launch-listen HOST:PORT"},
           {ok + "--launch-min-uid 10", "--launch-min-uid without --launch-listen HOST:PORT"},
           {ok + "--launch-listen :1 --launch-advertise :7141",
            "--launch-advertise ':7141': expected HOST:PORT"},
           {ok + "--launch-listen :1 --launch-advertise h:99999",
            "--launch-advertise 'h:99999': expected HOST:PORT"},
           {ok + "--launch-listen :1 --launch-min-uid 0", "--launch-min-uid 0: out of range"},
           {ok + "--job-dir", "--job-dir needs a value"},
           {"--token-file /t", "needs --pool http://HOST:PORT"},
           {"--pool http://127.0.0.1:7450", "needs --token-file FILE"},
           {"--pool https://127.0.0.1:7450 --token-file /t --ca /nonexistent/ca.pem", "/nonexistent/ca.pem"},
           {ok + "--tls-cert /c", "--tls-cert without --tls-key: give both"},
           {ok + "--tls-key /k", "--tls-key without --tls-cert: give both"},
           {ok + "--tls-cert /c --tls-key /k", "a client certificate is for an https:// poold"},
           {"--pool http://a:1,https://b:1 --token-file /t", "mixes http:// and https:// replicas"},
           {"--pool local --token-file /t", "--pool 'local': a node agent reports to a poold"},
           {"--pool http://h:99999 --token-file /t", "99999"},
           {ok + "--node bad/name", "--node 'bad/name'"},
           {ok + "--label rack", "--label 'rack': expected KEY=VALUE"},
           {ok + "--label a=1 --label a=2", "--label a is given twice"},
           {ok + "--proc-root /nonexistent/proc", "--proc-root /nonexistent/proc: not a directory"},
           {ok + "--sysfs-root /", "--sysfs-root /: name a folder called sys"},
           {ok + "--bogus", "unknown option '--bogus'"},
       }) {
    try {
      agent::parseAgentOptions(words(c.args));
      ADD_FAILURE() << c.args << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput) << c.args;
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.args << ": " << e.what();
    }
  }
}

TEST(AgentOptions, HelpAndVersionEndTheReading) {
  EXPECT_TRUE(agent::parseAgentOptions(words("--help --interval 0")).help);
  EXPECT_TRUE(agent::parseAgentOptions(words("--version")).version);
}

TEST(AgentOptions, TheTokenIsTheFirstWordOfTheFirstLineThatHasOne) {
  TempDir dir;
  EXPECT_EQ(
      agent::readTokenFile(dir.write("a", "# the node's token\n\n  tok-n01-0123456789  n01 node\nsecond\n")),
      "tok-n01-0123456789");
  try {
    agent::readTokenFile(dir.write("b", "# nothing\n"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no token in the file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(agent::readTokenFile(dir.path() / "missing"), Error);
}

// A node's token file someone else could change is refused (its owner could make the agent report
// as another node, or take its token); one others can read works and is warned of once a process.
TEST(AgentOptions, ATokenFileOthersCanChangeIsRefused) {
  namespace fs = std::filesystem;
  TempDir dir;
  const fs::path file = dir.write("node-token", "tok-n01-0123456789\n");
  fs::permissions(file, fs::perms(0622));
  try {
    agent::readTokenFile(file);
    FAIL() << "a token file others can write was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), file.string() +
                                         " is writable by every user (mode 0622): anyone who can write it "
                                         "could add a token; run `chmod go-w " +
                                         file.string() + "`");
  }
  if (geteuid() == 0) {
    fs::permissions(file, fs::perms(0600));
    ASSERT_EQ(chown(file.c_str(), 65534, 65534), 0);
    EXPECT_THROW(agent::readTokenFile(file), Error);
    ASSERT_EQ(chown(file.c_str(), 0, 0), 0);
  }
  fs::permissions(file, fs::perms(0644));
  testing::internal::CaptureStderr();
  EXPECT_EQ(agent::readTokenFile(file), "tok-n01-0123456789");
  EXPECT_EQ(agent::readTokenFile(file), "tok-n01-0123456789");
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(said, std::string(program_invocation_short_name) + ": warning: " + file.string() +
                      " is readable by every user (mode 0644): they can use its tokens; run `chmod 600 " +
                      file.string() + "`\n")
      << "once, not at every read";
}

}  // namespace
}  // namespace poolrun::test
