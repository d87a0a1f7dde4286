// poold refuses what it must: no token, unknown tokens, other owners, users doing admin work,
// oversized and malformed bodies. And poolctl's exit statuses and --json forms.

#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "poold_process.hpp"
#include "poolrun/common/regular_file.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

class Security : public ::testing::Test {
 protected:
  Security()
      : tokens_(dir_.writeSecret("tokens", test::kTokens)),
        poold_(dir_.path() / "state", tokens_, {"--cluster", test::hgxCluster(), "--max-body", "65536"}),
        http_("127.0.0.1", poold_.port()) {}

  httplib::Result call(const std::string& method, const std::string& path, const std::string& token,
                       const std::string& body = "") {
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    if (method == "GET") return http_.Get(path.c_str(), h);
    if (method == "DELETE") return http_.Delete(path.c_str(), h);
    return http_.Post(path.c_str(), h, body, "application/json");
  }
  int leased() {
    auto r = call("GET", "/v1/status", "tok-root-0123456789");
    return json::parse(r->body)["gpus"]["leased"].get<int>();
  }

  test::TempDir dir_;
  std::filesystem::path tokens_;
  test::PooldProcess poold_;
  httplib::Client http_;
};

const std::string kAcquire = R"({"gpus": 8, "ttl_s": 60})";

TEST_F(Security, NoTokenOrUnknownTokenGets401AndChangesNothing) {
  auto r = call("POST", "/v1/leases", "", kAcquire);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("no bearer token"), std::string::npos) << r->body;
  r = call("POST", "/v1/leases", "tok-mallory-666666", kAcquire);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body.find("tok-"), std::string::npos) << "echoes the refused token: " << r->body;
  EXPECT_EQ(call("GET", "/metrics", "")->status, 401);
  EXPECT_EQ(leased(), 0);
}

TEST_F(Security, OtherOwnersAndUsersDoingAdminWorkGet403) {
  auto r = call("POST", "/v1/leases", "tok-alice-0123456789", kAcquire);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string id = json::parse(r->body)["lease"]["id"];
  r = call("DELETE", "/v1/leases/" + id, "tok-bob-0123456789");
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(r->body.find("bob"), std::string::npos) << r->body;
  EXPECT_EQ(call("POST", "/v1/leases/" + id + "/renew", "tok-bob-0123456789", "{}")->status, 403);
  EXPECT_EQ(leased(), 8);
  EXPECT_EQ(call("POST", "/v1/nodes/hgx01/drain", "tok-alice-0123456789", "{}")->status, 403);
  EXPECT_EQ(call("POST", "/v1/nodes/hgx01/gpus/0/fail", "tok-alice-0123456789", "{}")->status, 403);
  EXPECT_EQ(call("POST", "/v1/nodes", "tok-alice-0123456789", R"({"nodes": []})")->status, 403);
  EXPECT_EQ(call("DELETE", "/v1/leases/" + id, "tok-alice-0123456789")->status, 200);
  EXPECT_EQ(leased(), 0);
}

TEST_F(Security, OversizedAndMalformedBodies) {
  std::string big = R"({"gpus": 1, "job_name": ")" + std::string(100000, 'x') + "\"}";
  auto r = call("POST", "/v1/leases", "tok-alice-0123456789", big);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  r = call("POST", "/v1/leases", "tok-alice-0123456789", R"({"gpus": 8,)");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("malformed JSON"), std::string::npos) << r->body;
  r = call("POST", "/v1/leases", "tok-alice-0123456789", R"({"gpus": "eight"})");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("gpus"), std::string::npos) << r->body;
  r = call("POST", "/v1/leases", "tok-alice-0123456789", R"({"gpus": -3})");
  EXPECT_EQ(r->status, 400);
  r = call("POST", "/v1/leases", "tok-alice-0123456789", "[1, 2]");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(leased(), 0);
}

TEST_F(Security, TokenFileIsReReadWhenItChanges) {
  EXPECT_EQ(call("GET", "/v1/status", "tok-carol-0123456789")->status, 401);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::ofstream out(tokens_);
    out << "tok-carol-0123456789 carol user\ntok-root-0123456789 root admin\n";
  }
  // Read once whole (common::FileWatch: seen unchanged for its settle time), not at the first look.
  int carol = 0;
  for (int i = 0; i < 100 && (carol = call("GET", "/v1/status", "tok-carol-0123456789")->status) != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(carol, 200) << "the new token file was never read";
  EXPECT_EQ(call("GET", "/v1/status", "tok-alice-0123456789")->status, 401) << "removed tokens stop working";
}

TEST_F(Security, MetricsReportGpusLeasesQueueAndLatency) {
  ASSERT_EQ(call("POST", "/v1/leases", "tok-alice-0123456789", kAcquire)->status, 200);
  auto r = call("GET", "/metrics", "tok-bob-0123456789");
  ASSERT_EQ(r->status, 200);
  for (const char* want : {"poolrun_gpus{state=\"free\"} 120", "poolrun_gpus{state=\"leased\"} 8",
                           "poolrun_leases 1", "poolrun_queue_length 0", "poolrun_queue_wait_seconds_count",
                           "poolrun_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/leases\""})
    EXPECT_NE(r->body.find(want), std::string::npos) << want << "\n" << r->body;
}

TEST_F(Security, PoolctlExitStatusesAndJson) {
  std::string out;
  std::vector<std::string> base{POOLCTL_BINARY, "--pool", poold_.uri(), "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  EXPECT_EQ(test::runProgram(with({"status"}), &out), 4) << "no token";
  std::vector<std::string> alice{"POOLRUN_TOKEN=tok-alice-0123456789"};
  ASSERT_EQ(test::runProgram(with({"acquire", "-n", "4", "--ttl", "30"}), &out, alice), 0);
  json lease = json::parse(out);
  EXPECT_EQ(lease["gpus"].size(), 4u);
  EXPECT_TRUE(lease["gpus"][0].contains("node") && lease["gpus"][0].contains("index"));
  ASSERT_EQ(test::runProgram(with({"leases"}), &out, alice), 0);
  json list = json::parse(out);
  ASSERT_TRUE(list.is_array());
  EXPECT_EQ(list[0]["id"], lease["id"]);
  EXPECT_EQ(test::runProgram(with({"acquire", "-n", "500"}), &out, alice), 3) << "never fits";
  EXPECT_EQ(test::runProgram(with({"acquire", "-n", "128", "--wait", "1"}), &out, alice), 3)
      << "not within --wait";
  EXPECT_EQ(test::runProgram(with({"drain", "hgx01"}), &out, alice), 4) << "users may not drain";
  std::filesystem::path rootToken = dir_.writeSecret("root-token", "tok-root-0123456789\n");
  EXPECT_EQ(test::runProgram(with({"--token-file", rootToken.string(), "drain", "hgx01"}), &out), 0);
  EXPECT_EQ(test::runProgram(with({"release", lease["id"]}), &out, alice), 0);
  EXPECT_EQ(test::runProgram(with({"renew", lease["id"]}), &out, alice), 5) << "gone";
  EXPECT_EQ(test::runProgram(with({"bogus"}), &out, alice), 2);
}

TEST(PoolctlSim, SameCommandsOnASimulatedCluster) {
  test::TempDir dir;
  std::vector<std::string> env{"POOLRUN_STATE_DIR=" + dir.path().string()};
  std::vector<std::string> base{POOLCTL_BINARY, "--pool", "sim:" + test::hgxCluster(), "--json"};
  std::string out;
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  ASSERT_EQ(test::runProgram(args({"acquire", "-n", "16", "--gpus-per-node", "8"}), &out, env), 0);
  json lease = json::parse(out);
  EXPECT_EQ(lease["gpus"].size(), 16u);
  ASSERT_EQ(test::runProgram(args({"leases"}), &out, env), 0) << "another process sees the lease";
  EXPECT_EQ(json::parse(out).size(), 1u);
  ASSERT_EQ(test::runProgram(args({"fail", "hgx05:3"}), &out, env), 0);
  ASSERT_EQ(test::runProgram(args({"status"}), &out, env), 0);
  json s = json::parse(out);
  EXPECT_EQ(s["gpus"]["leased"], 16);
  EXPECT_EQ(s["gpus"]["failed"], 1);
  EXPECT_EQ(test::runProgram(args({"release", lease["id"]}), &out, env), 0);
  ASSERT_EQ(test::runProgram(args({"fail", "hgx04"}), &out, env), 0) << "every GPU of a node";
  ASSERT_EQ(test::runProgram(args({"status"}), &out, env), 0);
  EXPECT_EQ(json::parse(out)["gpus"]["failed"], 9);
  EXPECT_EQ(test::runProgram(args({"fail", "nosuchnode"}), &out, env), 1) << out;
  EXPECT_EQ(test::runProgram({POOLCTL_BINARY, "--pool", "local", "acquire", "-n", "1"}, &out, env), 3)
      << "this machine has no GPUs";
  EXPECT_EQ(test::runProgram({POOLCTL_BINARY, "--pool", "http://nohost", "status"}, &out, env), 2);
}

}  // namespace
}  // namespace poolrun::pool
