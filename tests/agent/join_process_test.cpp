// Nodes that join, end to end: poold, `poolctl node-token`, and poold-agent --join as processes on
// 127.0.0.1. A node joins with a one-time token and registers with the credential it made; the token
// used twice, expired, or for a name already joined is refused with what to do; the credential
// survives poold's restart; a revoked node is refused at its next request; the join route's bad
// input gets a clear 4xx and poold serves on.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_run.hpp"
#include "poold_process.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/client.hpp"
#include "poolrun/pool/types.hpp"
#include "support/fixtures.hpp"
#include "support/loopback.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using std::chrono::seconds;

std::string topology() {
  return (sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
}

struct JoinPool {
  TempDir dir;
  std::filesystem::path tokens =
      dir.writeSecret("tokens", std::string(kTokens) + "tok-node-n09-0123456789 n09 node\n");
  std::string admin = dir.writeSecret("admin", "tok-root-0123456789\n").string();
  std::unique_ptr<PooldProcess> poold = std::make_unique<PooldProcess>(dir.path() / "state", tokens);

  // poolctl as the administrator: its exit status, stdout in `out`.
  int poolctl(const std::vector<std::string>& args, std::string* out = nullptr) {
    std::vector<std::string> argv{POOLCTL_BINARY, "--pool", poold->uri(), "--token-file", admin};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProgram(argv, out);
  }
  std::string newToken(const std::string& expires = "1h") {
    std::string out;
    EXPECT_EQ(poolctl({"node-token", "create", "--expires", expires}, &out), 0);
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }
  nlohmann::json list() {
    std::string out;
    EXPECT_EQ(poolctl({"--json", "node-token", "list"}, &out), 0);
    return nlohmann::json::parse(out, nullptr, false);
  }
  std::string agentArgs(const std::string& node, const std::filesystem::path& tokenFile) const {
    return "--pool " + poold->uri() + " --token-file " + tokenFile.string() + " --node " + node +
           " --interval 1 --from " + topology();
  }
};

TEST(NodeJoin, ANodeJoinsOnceRegistersWithItsCredentialAndIsCutOffWhenRevoked) {
  JoinPool pool;
  const std::string token = pool.newToken();
  ASSERT_TRUE(pool::isSecretOf(pool::kJoinTokenPrefix, token)) << token;
  const auto credential = pool.dir.path() / "n01.token";
  const auto err = pool.dir.path() / "err";
  {
    AgentRun agent(pool.agentArgs("n01", credential) + " --join " + token, err);
    ASSERT_TRUE(waitForText(err, "registered node n01", seconds(20))) << slurp(err);
    EXPECT_NE(slurp(err).find("joined the pool; this node's credential is in " + credential.string()),
              std::string::npos)
        << slurp(err);
    struct stat st {};
    ASSERT_EQ(stat(credential.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(agent.stop(seconds(10)), 0) << slurp(err);
  }
  nlohmann::json listed = pool.list();
  ASSERT_EQ(listed["tokens"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["tokens"][0]["state"], "used");
  EXPECT_EQ(listed["tokens"][0]["node"], "n01");
  EXPECT_EQ(listed.dump().find(token), std::string::npos) << "the list shows the token itself";
  ASSERT_EQ(listed["nodes"].size(), 1u);
  EXPECT_EQ(listed["nodes"][0]["node"], "n01");
  // Nothing but hashes in the state file.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(pool.dir.path() / "state"))
    if (entry.is_regular_file()) {
      const std::string stored = slurp(entry.path());
      EXPECT_EQ(stored.find(token), std::string::npos) << entry.path();
      EXPECT_EQ(stored.find(slurp(credential).substr(0, 67)), std::string::npos) << entry.path();
    }

  // The same token again, for another node: refused, the agent ends with status 2.
  {
    const auto err2 = pool.dir.path() / "err2";
    AgentRun again(pool.agentArgs("n02", pool.dir.path() / "n02.token") + " --join " + token, err2);
    EXPECT_EQ(waitExit(again.pid(), seconds(20)), 2) << slurp(err2);
    EXPECT_NE(slurp(err2).find("was used already, by node n01"), std::string::npos) << slurp(err2);
  }
  // A new token for the name n01, joined already: refused, saying to revoke it first.
  {
    const auto err3 = pool.dir.path() / "err3";
    AgentRun taken(pool.agentArgs("n01", pool.dir.path() / "other.token") + " --join " + pool.newToken(),
                   err3);
    EXPECT_EQ(waitExit(taken.pid(), seconds(20)), 2) << slurp(err3);
    EXPECT_NE(slurp(err3).find("node n01 joined already"), std::string::npos) << slurp(err3);
    EXPECT_NE(slurp(err3).find("poolctl node-token revoke n01"), std::string::npos) << slurp(err3);
  }
  // A node of the token file joins no more.
  {
    const auto err4 = pool.dir.path() / "err4";
    AgentRun listedNode(pool.agentArgs("n09", pool.dir.path() / "n09.token") + " --join " + pool.newToken(),
                        err4);
    EXPECT_EQ(waitExit(listedNode.pid(), seconds(20)), 2) << slurp(err4);
    EXPECT_NE(slurp(err4).find("has a token line in poold's token file"), std::string::npos) << slurp(err4);
  }

  // poold restarted: the credential is still good (no --join needed any more).
  const int port = pool.poold->port();
  pool.poold->stop();
  pool.poold = std::make_unique<PooldProcess>(pool.dir.path() / "state", pool.tokens,
                                              std::vector<std::string>{}, port);
  const auto err5 = pool.dir.path() / "err5";
  AgentRun back(pool.agentArgs("n01", credential), err5);
  ASSERT_TRUE(waitForText(err5, "registered node n01", seconds(20))) << slurp(err5);

  // Revoked: its next request is refused, saying by whom and what to do.
  std::string out;
  ASSERT_EQ(pool.poolctl({"node-token", "revoke", "n01"}, &out), 0);
  EXPECT_EQ(out, "n01: credential revoked; the node's next request is refused\n");
  ASSERT_TRUE(waitForText(err5, "the credential of node n01 was revoked by root", seconds(20)))
      << slurp(err5);
  EXPECT_EQ(back.stop(seconds(10)), 0);
  // Revoking a node that never joined: 404, exit status 1.
  EXPECT_NE(pool.poolctl({"node-token", "revoke", "n42"}), 0);
  // The audit trail.
  ASSERT_EQ(pool.poolctl({"events"}, &out), 0);
  EXPECT_NE(out.find("node_token_created auth=token by=root"), std::string::npos) << out;
  EXPECT_NE(out.find("node_joined from=127.0.0.1 node=n01"), std::string::npos) << out;
  EXPECT_NE(out.find("node_revoked auth=token by=root from=127.0.0.1 node=n01"), std::string::npos) << out;
}

// --join-file: the token from a file (not on the command line), the file removed once the node has
// joined, and the agent started again with the same options runs on its credential.
TEST(NodeJoin, ANodeJoinsWithItsTokenInAFile) {
  JoinPool pool;
  const auto file = pool.dir.writeSecret("join-n05", pool.newToken() + "\n");
  const auto credential = pool.dir.path() / "n05.token";
  const auto err = pool.dir.path() / "err";
  const std::string args = pool.agentArgs("n05", credential) + " --join-file " + file.string();
  {
    AgentRun agent(args, err);
    ASSERT_TRUE(waitForText(err, "registered node n05", seconds(20))) << slurp(err);
    EXPECT_EQ(agent.stop(seconds(10)), 0) << slurp(err);
  }
  std::filesystem::remove(file);
  const auto err2 = pool.dir.path() / "err2";
  AgentRun again(args, err2);
  ASSERT_TRUE(waitForText(err2, "registered node n05", seconds(20))) << slurp(err2);
  EXPECT_EQ(pool.list()["tokens"][0]["state"], "used");
}

// POST `body` to `path` of the poold at 127.0.0.1:`port` as raw bytes: the reply's status line and
// body; `headers`: more header lines, each ending in CRLF.
std::string rawPost(int port, const std::string& path, const std::string& body,
                    const std::string& headers = "") {
  const int fd = connectLoopback(port);
  if (fd < 0) return "cannot connect";
  const std::string request =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + headers +
      "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "cannot send";
  }
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t end = reply.find("\r\n");
  const size_t body_at = reply.find("\r\n\r\n");
  return reply.substr(0, end) + " " + (body_at == std::string::npos ? "" : reply.substr(body_at + 4));
}

TEST(NodeJoin, AnExpiredTokenIsRefusedAndAUserMayNotMakeTokens) {
  JoinPool pool;
  const std::string token = pool.newToken("1s");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const auto err = pool.dir.path() / "err";
  AgentRun late(pool.agentArgs("n03", pool.dir.path() / "n03.token") + " --join " + token, err);
  EXPECT_EQ(waitExit(late.pid(), seconds(20)), 2) << slurp(err);
  EXPECT_NE(slurp(err).find("expired at"), std::string::npos) << slurp(err);
  // The credential it made is kept for the next try, mode 0600; no token file.
  EXPECT_FALSE(std::filesystem::exists(pool.dir.path() / "n03.token"));
  EXPECT_TRUE(std::filesystem::exists(pool.dir.path() / "n03.token.joining"));

  const std::string alice = pool.dir.writeSecret("alice", "tok-alice-0123456789\n").string();
  std::string out;
  EXPECT_EQ(
      runProgram({POOLCTL_BINARY, "--pool", pool.poold->uri(), "--token-file", alice, "node-token", "create"},
                 &out),
      4);
  EXPECT_EQ(out, "");

  // An administrator's hostile token requests: each a 400 naming what was wrong.
  const std::string admin = "Authorization: Bearer tok-root-0123456789\r\n";
  for (const auto& [body, why] :
       std::vector<std::pair<std::string, std::string>>{{R"({"expires_s": 0})", "expires_s"},
                                                        {R"({"expires_s": 2592001})", "2592001"},
                                                        {R"({"expires_s": -5})", "-5"},
                                                        {R"({"expires_s": "1h"})", "expires_s"},
                                                        {R"({"expires_s": 1.5})", "expires_s"},
                                                        {R"({"expires_s": 60, "node": "n09"})", "node"},
                                                        {"[]", "\"error\""},
                                                        {"{", "\"error\""}}) {
    const std::string reply = rawPost(pool.poold->port(), "/v1/node-tokens", body, admin);
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 400 ")) << body << ": " << reply;
    EXPECT_NE(reply.find(why), std::string::npos) << body << ": " << reply;
  }
  EXPECT_TRUE(rawPost(pool.poold->port(), "/v1/node-tokens", R"({"expires_s": 60})", admin)
                  .starts_with("HTTP/1.1 200 "))
      << "the pool serves on";
}

// The join route as a hostile client sends it: each a 4xx naming what was wrong, the pool serving on.
TEST(NodeJoin, BadJoinsAreRefusedClearly) {
  JoinPool pool;
  const std::string token = pool.newToken();
  const std::string credential = "pn-" + std::string(64, 'b');
  auto join = [&](const std::string& node, const std::string& t, const std::string& c) -> std::string {
    try {
      pool::joinPool(pool.poold->uri(), pool::ClientOptions{}, node, t, c);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  };
  EXPECT_NE(join("n04", "pj-short", credential).find("(403): that is not a join token"), std::string::npos);
  EXPECT_NE(join("n04", "pj-" + std::string(64, 'c'), credential).find("not one this pool made"),
            std::string::npos);
  EXPECT_NE(join("n04", token, "pn-0123").find("(400): the credential must be"), std::string::npos);
  EXPECT_NE(join("n04", token, std::string(100'000, 'x')).find("(400)"), std::string::npos);
  // What poold-agent never sends: bytes that are not UTF-8, no body, not JSON, deep, unknown fields.
  const int port = pool.poold->port();
  const std::string path = "/v1/nodes/n04/join";
  EXPECT_EQ(rawPost(port, path, "{\"token\":\"pj-\xff\xfe\",\"credential\":\"x\"}").rfind("HTTP/1.1 4", 0),
            0u);
  EXPECT_EQ(rawPost(port, path, "").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(rawPost(port, path, "not json").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(rawPost(port, path, std::string(10'000, '[') + std::string(10'000, ']')).rfind("HTTP/1.1 400", 0),
            0u);
  const std::string unknown = rawPost(
      port, path, "{\"token\":\"" + token + "\",\"credential\":\"" + credential + "\",\"node\":\"n07\"}");
  EXPECT_EQ(unknown.rfind("HTTP/1.1 400", 0), 0u) << unknown;
  EXPECT_NE(unknown.find("node"), std::string::npos) << unknown;
  EXPECT_NE(join("bad/name", token, credential).find("(400)"), std::string::npos);
  EXPECT_NE(join(std::string(300, 'n'), token, credential).find("(400)"), std::string::npos);
  // None of those spent the token: it joins n04, and the same join again is done, not refused.
  EXPECT_EQ(join("n04", token, credential), "");
  EXPECT_EQ(join("n04", token, credential), "");
  EXPECT_TRUE(pool::joinPool(pool.poold->uri(), pool::ClientOptions{}, "n05", pool.newToken(),
                             "pn-" + std::string(64, 'd')));
  EXPECT_FALSE(pool::joinPool(pool.poold->uri(), pool::ClientOptions{}, "n04", token, credential));
  // The credential is a node's token: of n04 only, for its agent's routes only.
  const std::string other = pool.dir.writeSecret("n04", credential + "\n").string();
  std::string out;
  EXPECT_EQ(runProgram({POOLCTL_BINARY, "--pool", pool.poold->uri(), "--token-file", other, "status"}, &out),
            4);
  EXPECT_EQ(pool.poolctl({"status"}, &out), 0);  // serving on
}

}  // namespace
}  // namespace poolrun::test
