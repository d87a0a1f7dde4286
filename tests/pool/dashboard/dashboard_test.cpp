// The dashboard's side of poold without the network: the snapshot's columns against the pool's
// state, the history's ring, and the files and routes through PoolServer::handle (a token for the
// data, none for the files, their headers, and hostile paths).

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "inventory.hpp"
#include "poolrun/pool/dashboard.hpp"
#include "poolrun/pool/dashboard_routes.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/server.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using test::t0;

TEST(DashboardSnapshot, HoldsEveryGpuInColumnsAsThePoolHasIt) {
  PoolState s;
  test::addInventory(s, "n[01-02]/gpu[0-3]@leaf1; n03/gpu[0-1]@leaf2; n02 failed 1; n03 draining", t0());
  Lease a = *s.submit(test::parseRequest("2 ppn=2 owner=alice"), t0()).lease;
  ASSERT_GT(s.submit(test::parseRequest("9 owner=bob"), t0()).ticket, 0);
  json d = json::parse(forViewer(dashboardSnapshot(s, t0()), Caller{"alice", false}));
  EXPECT_EQ(d["schema"], "poolrun.dashboard/1");
  EXPECT_EQ(d["you"], (json{{"owner", "alice"}, {"role", "user"}}));
  EXPECT_EQ(d["nodes"]["name"], (json{"n01", "n02", "n03"}));
  EXPECT_EQ(d["nodes"]["switch"], (json{"leaf1", "leaf1", "leaf2"}));
  EXPECT_EQ(d["nodes"]["state"], (json{"up", "up", "draining"}));
  EXPECT_EQ(d["nodes"]["first_gpu"], (json{0, 4, 8}));
  ASSERT_EQ(d["leases"].size(), 1u);
  EXPECT_EQ(d["leases"][0]["id"], a.id);
  EXPECT_EQ(d["leases"][0]["owner"], "alice");
  EXPECT_EQ(d["leases"][0]["gpus"], 2);
  EXPECT_EQ(d["leases"][0]["created_ms"], toMillis(t0()));
  // alice's two GPUs, n02:1 failed, the rest free; the lease column points into `leases`.
  std::string states = d["gpus"]["state"];
  ASSERT_EQ(states.size(), 10u);
  EXPECT_EQ(std::count(states.begin(), states.end(), 'l'), 2);
  EXPECT_EQ(states[5], 'x');
  EXPECT_EQ(std::count(states.begin(), states.end(), 'f'), 7);
  for (size_t i = 0; i < states.size(); ++i) EXPECT_EQ(d["gpus"]["lease"][i], states[i] == 'l' ? 0 : -1) << i;
  EXPECT_TRUE(d["gpus"]["util_pct"][0].is_null()) << "no agent, no reading";
  EXPECT_NE(d["notes"]["5"].get<std::string>().find("failed"), std::string::npos) << d["notes"];
  EXPECT_EQ(d["status"]["queued"], 1);
  EXPECT_EQ(json::parse(forViewer(dashboardSnapshot(s, t0()), Caller{"root", true}))["you"]["role"], "admin");
}

// A GPU its agent's NVML no longer lists: the agent's error is the GPU's note, though it is free.
TEST(DashboardSnapshot, AGpuNvmlNoLongerListsHasItsErrorAsItsNote) {
  PoolState s;
  test::addInventory(s, "n01/gpu[0-1]", t0());
  test::registerAgent(s, "n01", t0());
  Heartbeat hb = test::heartbeatOf(s, "n01", 0.5);
  hb.gpus[1] = topo::GpuSample{};
  hb.gpus[1].index = 1;
  hb.gpus[1].error = "NVML does not list the GPU at 0000:53:00.0";
  s.heartbeat(hb, t0() + seconds(5));
  json d = json::parse(forViewer(dashboardSnapshot(s, t0() + seconds(5)), Caller{"alice", false}));
  EXPECT_EQ(d["gpus"]["state"], "ff");
  EXPECT_EQ(d["notes"]["1"], "NVML does not list the GPU at 0000:53:00.0") << d["notes"];
  EXPECT_FALSE(d["notes"].contains("0")) << d["notes"];
}

TEST(DashboardSnapshot, TextThatIsNotUtf8IsReplacedNotEchoed) {
  PoolState s;
  test::addInventory(s, "n01/gpu[0-1]", t0());
  LeaseRequest r = test::parseRequest("1 owner=alice");
  r.job_name = "caf\xe9";
  ASSERT_TRUE(s.submit(r, t0()).lease);
  std::string text = forViewer(dashboardSnapshot(s, t0()), Caller{"alice", false});
  EXPECT_TRUE(json::accept(text)) << text;
  EXPECT_EQ(text.find('\xe9'), std::string::npos);
}

TEST(PoolHistory, KeepsTheLastSamplesOneAnInterval) {
  PoolHistory h(seconds(10), 3);
  PoolState s;
  test::addInventory(s, "n01/gpu[0-7]", t0());
  ASSERT_TRUE(s.submit(test::parseRequest("4 owner=alice"), t0()).lease);
  ASSERT_GT(s.submit(test::parseRequest("8 owner=bob"), t0()).ticket, 0);
  EXPECT_TRUE(h.due(t0()));
  for (int i = 0; i < 5; ++i) {
    TimePoint now = t0() + seconds(10 * i);
    ASSERT_TRUE(h.due(now)) << i;
    h.add(historySample(s, now));
    EXPECT_FALSE(h.due(now + seconds(9)));
  }
  json doc = json::parse(h.json());
  EXPECT_EQ(doc["interval_s"], 10);
  EXPECT_EQ(doc["capacity"], 3);
  ASSERT_EQ(doc["samples"].size(), 3u) << "the oldest two are gone";
  const json& last = doc["samples"][2];
  EXPECT_EQ(last[0], toMillis(t0() + seconds(40)));
  EXPECT_EQ(last[1], 8);  // GPUs
  EXPECT_EQ(last[2], 4);  // leased
  EXPECT_TRUE(last[5].is_null()) << "no utilisation without readings";
  EXPECT_EQ(last[6], 1);  // queued
  EXPECT_DOUBLE_EQ(last[7].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(last[8].get<double>(), 40.0);
}

class DashboardServed : public ::testing::Test {
 protected:
  DashboardServed() {
    ServerOptions o;
    o.state_dir = dir_.path() / "state";
    o.token_file = dir_.writeSecret("tokens", "tok-alice-0123456789 alice user\n");
    addDashboard(o);  // as poold's main does
    server_ = std::make_unique<PoolServer>(o);
  }
  HttpReply ask(const std::string& method, const std::string& path, const std::string& authorization = "") {
    HttpRequest r;
    r.method = method;
    r.target = path;
    std::map<std::string, std::string> query;
    EXPECT_TRUE(parseTarget(path, r.segments, query)) << path;
    r.authorization = authorization;
    r.peer = "127.0.0.1";
    return server_->handle(r);
  }
  static std::string header(const HttpReply& r, const std::string& name) {
    for (const auto& [k, v] : r.headers)
      if (k == name) return v;
    return "";
  }
  test::TempDir dir_;
  std::unique_ptr<PoolServer> server_;
};

TEST_F(DashboardServed, FilesAreServedWithoutATokenUnderAStrictPolicy) {
  struct Case {
    const char* path;
    const char* type;
    const char* holds;
  };
  for (const Case& c : {Case{"/", "text/html; charset=utf-8", "<script type=\"module\" src=\"/ui/app.js\">"},
                        Case{"/ui/index.html", "text/html; charset=utf-8", "<!doctype html>"},
                        Case{"/ui/app.js", "text/javascript; charset=utf-8", "/v1/dashboard"},
                        Case{"/ui/style.css", "text/css; charset=utf-8", ":root"}}) {
    HttpReply r = ask("GET", c.path);
    EXPECT_EQ(r.status, 200) << c.path;
    EXPECT_EQ(r.content_type, c.type) << c.path;
    EXPECT_NE(r.body.find(c.holds), std::string::npos) << c.path;
    EXPECT_NE(header(r, "Content-Security-Policy").find("default-src 'self'"), std::string::npos);
    EXPECT_EQ(header(r, "Content-Security-Policy").find("unsafe-inline"), std::string::npos);
    EXPECT_EQ(header(r, "X-Content-Type-Options"), "nosniff");
    EXPECT_EQ(header(r, "Cache-Control"), "no-cache");
  }
  HttpReply index = ask("GET", "/");
  EXPECT_EQ(index.body.find("<script>"), std::string::npos) << "no inline script";
  EXPECT_EQ(index.body.find("style=\""), std::string::npos) << "no inline style";
}

// The sign-in says what to paste: the token alone, the first word of a line of the token file (a
// whole line, owner and role too, was what "a line of poold's token file" asked for).
TEST_F(DashboardServed, TheSignInSaysWhatToPaste) {
  const std::string index = ask("GET", "/").body;
  const size_t label = index.find("<label for=\"token\">");
  ASSERT_NE(label, std::string::npos) << index;
  const std::string text = index.substr(label, index.find("</label>", label) - label);
  EXPECT_NE(text.find("the first word of your line in poold's token file"), std::string::npos) << text;
  EXPECT_NE(text.find("POOLRUN_TOKEN"), std::string::npos) << text;
  EXPECT_EQ(text.find("a line of poold's token file"), std::string::npos) << text;
}

TEST_F(DashboardServed, UnknownAndHostilePathsGet404NamingWhatIsServed) {
  for (const char* path : {"/ui/", "/ui", "/ui/nope.js", "/ui/..", "/ui/%2e%2e%2fpoold.lock", "/ui/app.js/x",
                           "/ui/.%2e/state/pool.sqlite", "/ui/%2Fetc%2Fpasswd", "/ui/APP.JS"}) {
    HttpReply r = ask("GET", path);
    EXPECT_EQ(r.status, 404) << path << ": " << r.body;
    json body = json::parse(r.body);
    EXPECT_NE(body["error"].get<std::string>().find(
                  "index.html, app.js, replicas.js, style.css under /ui/; open / for the dashboard"),
              std::string::npos)
        << body;
  }
  HttpReply huge = ask("GET", "/ui/" + std::string(10000, 'a'));
  EXPECT_EQ(huge.status, 404);
  EXPECT_LT(huge.body.size(), 400u) << "the path is cut in the reply";
  for (auto [method, path] : {std::pair{"POST", "/ui/app.js"}, std::pair{"DELETE", "/"}}) {
    HttpReply refused = ask(method, path);
    EXPECT_EQ(refused.status, 405) << method << " " << path;
    EXPECT_EQ(json::parse(refused.body)["reason"], "method_not_allowed") << refused.body;
  }
}

TEST_F(DashboardServed, TheDataNeedsAToken) {
  for (const char* path : {"/v1/dashboard", "/v1/history"}) {
    EXPECT_EQ(ask("GET", path).status, 401) << path;
    EXPECT_EQ(ask("GET", path, "Bearer not-a-token-of-the-file").status, 401) << path;
    HttpReply r = ask("GET", path, "Bearer tok-alice-0123456789");
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_EQ(r.content_type, "application/json");
    EXPECT_TRUE(json::accept(r.body)) << r.body;
    EXPECT_EQ(ask("POST", path, "Bearer tok-alice-0123456789").status, 405) << path;
  }
  EXPECT_EQ(json::parse(ask("GET", "/v1/dashboard", "Bearer tok-alice-0123456789").body)["you"]["owner"],
            "alice");
}

}  // namespace
}  // namespace poolrun::pool
