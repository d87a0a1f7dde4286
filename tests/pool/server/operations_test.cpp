// What operators expect of a real poold, on 127.0.0.1: /healthz without a token, a 401 that
// carries WWW-Authenticate and no part of the token, /metrics for a scrape token or an allowed
// address, the lease counters, GPU-seconds, build and start time (and `promtool check metrics`
// on all of it), the event log in STATE/events.jsonl across restarts, GET /v1/events and its bad
// inputs, and `poolctl events --follow` across a restart of poold.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "poold_process.hpp"
#include "poolrun/common/regular_file.hpp"
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
constexpr const char* kScrape = "scrape-tok-0123456789";

// A program whose standard output and error the test reads as they come.
class Child {
 public:
  Child(std::vector<std::string> argv, const std::vector<std::string>& env) {
    int outPipe[2], errPipe[2];
    if (pipe(outPipe) != 0 || pipe(errPipe) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(outPipe[1], 1);
      dup2(errPipe[1], 2);
      for (int fd : {outPipe[0], outPipe[1], errPipe[0], errPipe[1]}) close(fd);
      for (const std::string& e : env) putenv(strdup(e.c_str()));
      std::vector<char*> a;
      for (std::string& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    close(outPipe[1]);
    close(errPipe[1]);
    out_ = outPipe[0];
    err_ = errPipe[0];
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_);
    close(err_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Reads until `done` holds or `limit` passes; returns whether it held.
  bool waitFor(const std::function<bool()>& done, std::chrono::seconds limit) {
    auto end = Steady::now() + limit;
    while (!done()) {
      if (Steady::now() >= end) return false;
      pollfd p[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
      if (poll(p, 2, 100) <= 0) continue;
      char buf[4096];
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        ssize_t n = read(p[i].fd, buf, sizeof buf);
        if (n > 0) (i == 0 ? out : err).append(buf, static_cast<size_t>(n));
      }
    }
    return true;
  }
  size_t lines() const { return static_cast<size_t>(std::count(out.begin(), out.end(), '\n')); }
  // Sends `sig` and waits for the exit; its status (128+N for a signal), -1 when it did not end.
  int stop(int sig, std::chrono::seconds limit) {
    kill(pid_, sig);
    auto end = Steady::now() + limit;
    int status = 0;
    while (Steady::now() < end) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      waitFor([] { return false; }, 0s);
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

  std::string out, err;

 private:
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
};

// The value of one sample ("poolrun_lease_releases_total", "poolrun_gpu_seconds_total{owner=\"bob\"}").
std::optional<double> sample(const std::string& metrics, const std::string& name) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return std::nullopt;
}

// What an event's gpu_seconds is exact to for bob's lease of 16 GPUs: its times are whole
// milliseconds.
constexpr double kEventResolution = 16 * 0.001;

class Operations : public ::testing::Test {
 protected:
  Operations() : tokens_(dir_.writeSecret("tokens", test::kTokens)), scrape_(dir_.write("scrape", kScrape)) {}

  void start(const std::vector<std::string>& extra = {}, int port = 0) {
    std::vector<std::string> args{"--cluster", test::hgxCluster()};
    args.insert(args.end(), extra.begin(), extra.end());
    poold_.reset();
    poold_ = std::make_unique<test::PooldProcess>(state(), tokens_, args, port);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", poold_->port());
    http_->set_read_timeout(30, 0);
  }
  std::filesystem::path state() const { return dir_.path() / "state"; }

  httplib::Result call(const std::string& method, const std::string& path, const std::string& token,
                       const std::string& body = "{}") {
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    if (method == "GET") return http_->Get(path.c_str(), h);
    if (method == "DELETE") return http_->Delete(path.c_str(), h);
    return http_->Post(path.c_str(), h, body, "application/json");
  }
  json ok(httplib::Result r) {
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  std::string acquire(const char* token, int gpus, int ttl) {
    json reply =
        ok(call("POST", "/v1/leases", token, json{{"gpus", gpus}, {"ttl_s", ttl}, {"wait_s", 0}}.dump()));
    return reply["lease"]["id"];
  }
  std::string metrics(const char* token = kRoot) {
    auto r = call("GET", "/metrics", token);
    EXPECT_TRUE(r && r->status == 200);
    return r ? r->body : "";
  }
  json events(uint64_t since = 0) {
    return ok(call("GET", "/v1/events?since=" + std::to_string(since), kRoot));
  }
  // The latest event of `kind` in the audit trail, waiting up to 20 s for one; null if none came.
  json waitForEvent(const std::string& kind) {
    auto end = Steady::now() + 20s;
    for (;;) {
      json found;
      const json log = events();
      for (const json& e : log["events"])
        if (e["kind"] == kind) found = e;
      if (!found.is_null() || Steady::now() >= end) return found;
      std::this_thread::sleep_for(100ms);
    }
  }

  // Leases of alice (8 GPUs, held) and bob (16, released), a failed GPU, a drained node and a
  // lease of alice that expires (ttl 1 s). Returns once the expiry is counted.
  void scenario() {
    held_ = acquire(kAlice, 8, 60);
    released_ = acquire(kBob, 16, 60);
    ok(call("DELETE", "/v1/leases/" + released_, kBob));
    ok(call("POST", "/v1/nodes/hgx16/gpus/7/fail", kRoot));
    ok(call("POST", "/v1/nodes/hgx15/drain", kRoot));
    expired_ = acquire(kAlice, 8, 1);
    auto end = Steady::now() + 20s;
    while (sample(metrics(), "poolrun_lease_expiries_total").value_or(0) < 1 && Steady::now() < end)
      std::this_thread::sleep_for(100ms);
  }

  test::TempDir dir_;
  std::filesystem::path tokens_, scrape_;
  std::unique_ptr<test::PooldProcess> poold_;
  std::unique_ptr<httplib::Client> http_;
  std::string held_, released_, expired_;
};

TEST_F(Operations, HealthzAnswersWithoutATokenAndIsCountedUnderItsRoute) {
  start();
  auto r = call("GET", "/healthz", "");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
  EXPECT_EQ(call("GET", "/healthz?x=%2F..", "")->status, 200);
  EXPECT_EQ(sample(metrics(), "poolrun_responses_total{route=\"/healthz\",code=\"200\"}"), 2);
}

TEST_F(Operations, A401CarriesWwwAuthenticateAndNoPartOfALongToken) {
  start();
  const std::string token = "Rk3Jq8Wz1Xv6Np0Ty5Lm2Hs9Bd4Gf7Cu-" + std::string(200, 'A') + "-Ze8Qo1Wi6";
  for (const std::string path : {"/v1/status", "/metrics", "/v1/events", "/v1/leases/L1"}) {
    auto r = path == "/v1/leases/L1" ? call("DELETE", path, token) : call("GET", path, token);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer realm=\"poold\"") << path;
    EXPECT_NE(r->body.find("the token sent is not in poold's token file"), std::string::npos) << r->body;
    std::string headers;
    for (const auto& [name, value] : r->headers) headers += name + ": " + value + "\n";
    for (size_t i = 0; i + 4 <= token.size(); ++i) {
      const std::string part = token.substr(i, 4);
      EXPECT_EQ(r->body.find(part), std::string::npos) << "the body echoes '" << part << "': " << r->body;
      EXPECT_EQ(headers.find(part), std::string::npos) << "a header echoes '" << part << "': " << headers;
    }
  }
  auto none = call("GET", "/v1/status", "");
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer realm=\"poold\"");
}

TEST_F(Operations, MetricsFromAnAllowedAddressNeedNoToken) {
  start({"--metrics-allow", "10.0.0.0/8,127.0.0.1/32"});
  auto r = call("GET", "/metrics", "");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("poolrun_gpus{state=\"free\"} 128"), std::string::npos);
  EXPECT_EQ(call("GET", "/v1/status", "")->status, 401) << "the address opens /metrics only";
  EXPECT_EQ(call("GET", "/v1/events", "")->status, 401);
}

TEST_F(Operations, MetricsFromAnotherAddressNeedTheScrapeTokenOrAUsers) {
  start({"--metrics-allow", "10.0.0.0/8,::1/128", "--metrics-token-file", scrape_.string()});
  auto r = call("GET", "/metrics", "");
  EXPECT_EQ(r->status, 401) << "127.0.0.1 is not in the list";
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer realm=\"poold\"");
  EXPECT_EQ(call("GET", "/metrics", kScrape)->status, 200);
  EXPECT_EQ(call("GET", "/metrics", kBob)->status, 200) << "a user's token keeps working";
  r = call("GET", "/v1/status", kScrape);
  EXPECT_EQ(r->status, 403) << "the scrape token reads /metrics only";
  EXPECT_NE(r->body.find("/metrics only"), std::string::npos) << r->body;
  EXPECT_EQ(call("GET", "/v1/events", kScrape)->status, 403);
  EXPECT_EQ(call("POST", "/v1/leases", kScrape, R"({"gpus": 1})")->status, 403);
  // A new scrape token in the file replaces the old one.
  std::this_thread::sleep_for(20ms);
  dir_.write("scrape", "# rotated\nscrape-new-0123456789\n");
  int scraped = 0;  // read once whole (common::FileWatch), not at the first look
  for (int i = 0; i < 100 && (scraped = call("GET", "/metrics", "scrape-new-0123456789")->status) != 200; ++i)
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(scraped, 200) << "the new scrape token was never read";
  EXPECT_EQ(call("GET", "/metrics", kScrape)->status, 401);
}

TEST_F(Operations, PooldRefusesBadMetricsOptionsNamingTheValue) {
  const std::string base = std::string(POOLD_BINARY) + " --state " + state().string() + " --token-file " +
                           tokens_.string() + " --listen 127.0.0.1:0 ";
  for (const std::string bad : {"10.0.0.1/8", "10.0.0.0/33", "localhost", "::1/200", "10.0.0.0/8,,::1"}) {
    test::ProcessResult r = test::runShell(base + "--metrics-allow '" + bad + "'");
    EXPECT_EQ(r.status, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  }
  dir_.write("short", "abc\n");
  for (const std::string& file : {(dir_.path() / "missing").string(), (dir_.path() / "short").string()}) {
    test::ProcessResult r = test::runShell(base + "--metrics-token-file " + file);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
  }
  for (const std::string bad : {"head,,node", "a b", "evil/x"}) {
    test::ProcessResult r = test::runShell(base + "--metrics-host '" + bad + "'");
    EXPECT_EQ(r.status, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("--metrics-host '" + bad + "'"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(state() / "pool.sqlite")) << "refused before the state was touched";
}

// --insecure-http says at every start that tokens cross the network in clear (on loopback here: the
// words are the same wherever it listens); without it, nothing of the kind.
TEST_F(Operations, InsecureHttpWarnsAtEveryStart) {
  const std::string base = "timeout -s TERM 2 " + std::string(POOLD_BINARY) + " --state " + state().string() +
                           " --token-file " + tokens_.string() + " --listen 127.0.0.1:0";
  for (int start = 0; start < 2; ++start) {
    test::ProcessResult r = test::runShell(base + " --insecure-http");
    EXPECT_NE(r.err.find("poold: warning: serving plain HTTP on 127.0.0.1:0 (--insecure-http): bearer tokens "
                         "and all the pool's traffic cross the network in clear"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.out.find("listening on http://127.0.0.1:"), std::string::npos) << r.out;
  }
  test::ProcessResult plain = test::runShell(base);
  EXPECT_EQ(plain.err.find("in clear"), std::string::npos) << plain.err;
  EXPECT_NE(plain.out.find("listening on http://127.0.0.1:"), std::string::npos) << plain.out;
}

TEST_F(Operations, CountersGpuSecondsBuildAndStartTime) {
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  start();
  const double after =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  scenario();
  std::string m = metrics();
  EXPECT_EQ(sample(m, "poolrun_lease_releases_total"), 1) << m;
  EXPECT_EQ(sample(m, "poolrun_lease_expiries_total"), 1) << m;
  EXPECT_EQ(sample(m, "poolrun_gpus{state=\"failed\"}"), 1);
  EXPECT_EQ(sample(m, "poolrun_gpus{state=\"leased\"}"), 8);

  // bob's only lease ended: his GPU-seconds are its event's, to the event's resolution (its times
  // in whole milliseconds: 1 ms for each of the lease's 16 GPUs; the ledger's are nanoseconds).
  // alice's count her expired lease and the one she still holds, which goes on adding.
  json all = events();
  double bobEvent = -1, aliceExpired = -1;
  for (const json& e : all["events"]) {
    if (e["kind"] == "release" && e["lease"] == released_) bobEvent = e["gpu_seconds"];
    if (e["kind"] == "expiry" && e["lease"] == expired_) aliceExpired = e["gpu_seconds"];
  }
  ASSERT_GE(bobEvent, 0) << all.dump();
  ASSERT_GE(aliceExpired, 0) << all.dump();
  EXPECT_NEAR(sample(m, "poolrun_gpu_seconds_total{owner=\"bob\"}").value_or(-1), bobEvent, kEventResolution);
  double alice = sample(m, "poolrun_gpu_seconds_total{owner=\"alice\"}").value_or(-1);
  EXPECT_GT(alice, aliceExpired);
  std::this_thread::sleep_for(50ms);
  std::string later = metrics();
  EXPECT_GT(sample(later, "poolrun_gpu_seconds_total{owner=\"alice\"}").value_or(-1), alice)
      << "a lease still held counts at every scrape";
  EXPECT_NEAR(sample(later, "poolrun_gpu_seconds_total{owner=\"bob\"}").value_or(-1), bobEvent,
              kEventResolution);
  EXPECT_FALSE(sample(m, "poolrun_gpu_seconds_total{owner=\"root\"}")) << "root held nothing";

  std::string version;
  test::runProgram({POOLD_BINARY, "--version"}, &version);
  version = version.substr(6, version.find('\n') - 6);  // "poold 0.1.0\n..."
  EXPECT_EQ(sample(m, "poolrun_build_info{version=\"" + version + "\"}"), 1) << m;
  std::optional<double> started = sample(m, "process_start_time_seconds");
  ASSERT_TRUE(started) << m;
  EXPECT_GE(*started, before - 1);
  EXPECT_LE(*started, after + 1);
}

// The usage ledger behind /metrics and GET /v1/usage: bob's released lease counts what its event
// says, before and after a restart of poold (the counter no longer starts again at 0); the report's
// hostile queries get 400 naming the value.
TEST_F(Operations, UsageOutlivesARestartAndBadReportQueriesAreRefused) {
  start();
  scenario();
  double bobEvent = -1;
  const json all = events();
  for (const json& e : all["events"])
    if (e["kind"] == "release" && e["lease"] == released_) bobEvent = e["gpu_seconds"];
  ASSERT_GE(bobEvent, 0);
  auto bobIn = [&](const json& report) {
    for (const json& row : report["rows"])
      if (row["name"] == "bob") return row["allocated_s"].get<double>();
    return -1.0;
  };
  const double bobLedger = bobIn(ok(call("GET", "/v1/usage", kBob)));
  EXPECT_NEAR(bobLedger, bobEvent, kEventResolution);
  const int port = poold_->port();
  poold_->stop();
  start({}, port);
  EXPECT_NEAR(sample(metrics(), "poolrun_gpu_seconds_total{owner=\"bob\"}").value_or(-1), bobLedger, 0.0005)
      << "counted on from the ledger";
  const json report = ok(call("GET", "/v1/usage?by=node", kAlice));
  EXPECT_EQ(report["by"], "node");
  EXPECT_FALSE(report["rows"].empty()) << report.dump();
  EXPECT_TRUE(ok(call("GET", "/v1/usage?since_ms=0&until_ms=1000", kAlice))["rows"].empty());

  for (const std::string q :
       {"by=week", "by=", "since_ms=-1", "since_ms=abc", "since_ms=1.5", "until_ms=99999999999999999999",
        "until_ms=253402300800000", "until_ms=9223372036855", "since_ms=%00"}) {
    auto r = call("GET", "/v1/usage?" + q, kAlice);
    ASSERT_TRUE(r) << q;
    EXPECT_EQ(r->status, 400) << q << ": " << r->body;
    const std::string value = q.substr(q.find('=') + 1);
    if (value != "%00" && !value.empty()) {
      EXPECT_NE(r->body.find(value), std::string::npos) << r->body;
    }
  }
  auto inverted = call("GET", "/v1/usage?since_ms=10&until_ms=5", kAlice);
  ASSERT_TRUE(inverted);
  EXPECT_EQ(inverted->status, 400);
  EXPECT_NE(inverted->body.find("since_ms 10 is not before until_ms 5"), std::string::npos) << inverted->body;
  EXPECT_EQ(call("GET", "/v1/usage?since_ms=5&until_ms=5", kAlice)->status, 400);
  EXPECT_EQ(call("GET", "/v1/usage", "")->status, 401);
  EXPECT_EQ(call("POST", "/v1/usage", kAlice)->status, 405);
}

// The quotas are a file: a change to it is an event of the audit trail, naming the file's owner as
// who made it and each quota's change.
TEST_F(Operations, AChangeOfTheQuotasFileIsAnAuditEvent) {
  const auto quotas = dir_.write("quotas", "group vision guaranteed=16 members=alice,bob\n");
  start({"--quotas", quotas.string()});
  dir_.write("quotas", "group vision guaranteed=32 members=alice,bob\nowner carol guaranteed=8\n");
  const json changed = waitForEvent("quotas_changed");
  ASSERT_FALSE(changed.is_null()) << events().dump();
  EXPECT_EQ(changed["by"], common::userText(geteuid()));  // the file's owner: who wrote it
  EXPECT_EQ(changed["auth"], "file");
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(changed["from"], std::string(host)) << "poold's machine, where the file is";
  EXPECT_EQ(changed["file"], quotas.string());
  EXPECT_EQ(changed["changes"],
            json({"group vision: guaranteed 16 -> 32", "owner carol added: guaranteed 8, limit none"}));
}

// The account tree on a real poold: bob, who used less, goes ahead of alice's earlier request;
// `poolctl queue --explain` and `poolctl fairshare` show why; a request for an account its owner may
// not charge, or one that does not exist, is refused; a change of the file is an audit event.
TEST_F(Operations, AccountsOrderTheQueueAndPoolctlShowsWhy) {
  const auto accounts = dir_.write(
      "accounts.toml", "[accounts.physics]\nusers = [\"alice\"]\n[accounts.biology]\nusers = [\"bob\"]\n");
  start({"--accounts", accounts.string(), "--fairshare-half-life", "3600"});
  const std::string small = acquire(kBob, 8, 60);
  ok(call("DELETE", "/v1/leases/" + small, kBob));
  const std::string all = acquire(kAlice, 128, 60);
  std::this_thread::sleep_for(1s);  // alice holds the pool: 128 GPU-seconds a second
  auto queued = [&](const char* token) {
    auto r = call("POST", "/v1/leases", token, json{{"gpus", 8}, {"wait_s", 120}}.dump());
    EXPECT_TRUE(r && r->status == 202) << (r ? r->body : "no answer");  // queued
    const json reply = r ? json::parse(r->body) : json{{"ticket", 0}, {"position", 0}};
    return std::pair(reply["ticket"].get<int64_t>(), reply["position"].get<int>());
  };
  const auto [aliceTicket, alicePosition] = queued(kAlice);
  const auto [bobTicket, bobPosition] = queued(kBob);
  EXPECT_EQ(alicePosition, 1);
  EXPECT_EQ(bobPosition, 1) << "bob used less: ahead of alice's earlier request";
  const json queue = ok(call("GET", "/v1/queue", kAlice));
  ASSERT_EQ(queue.size(), 2u) << queue.dump();
  const json& head = queue[0];
  EXPECT_EQ(head["ticket"], bobTicket);
  EXPECT_EQ(head["account"], "biology");
  EXPECT_GT(head["factors"]["fairshare"].get<double>(), queue[1]["factors"]["fairshare"].get<double>());

  const std::string env =
      "POOLRUN_TOKEN=" + std::string(kAlice) + " " + POOLCTL_BINARY + " --pool " + poold_->uri();
  test::ProcessResult explain = test::runShell(env + " queue --explain");
  EXPECT_EQ(explain.status, 0) << explain.err;
  EXPECT_NE(
      explain.out.find("priority = 1000000 x priority + 10000 x fairshare + 1000 x age (1 after 7 days)"),
      std::string::npos)
      << explain.out;
  EXPECT_NE(explain.out.find("ticket " + std::to_string(bobTicket) + " (bob, biology): "), std::string::npos)
      << explain.out;
  EXPECT_LT(explain.out.find("ticket " + std::to_string(bobTicket) + " (bob"),
            explain.out.find("ticket " + std::to_string(aliceTicket) + " (alice"));
  test::ProcessResult tree = test::runShell(env + " fairshare");
  EXPECT_EQ(tree.status, 0) << tree.err;
  EXPECT_NE(tree.out.find("usage halves every 1 hour;"), std::string::npos) << tree.out;
  EXPECT_NE(tree.out.find("ACCOUNT/USER"), std::string::npos) << tree.out;
  EXPECT_NE(tree.out.find("\nbiology "), std::string::npos) << tree.out;
  EXPECT_NE(tree.out.find("\n  alice "), std::string::npos) << tree.out;
  const json report = json::parse(test::runShell(env + " --json fairshare").out);
  EXPECT_TRUE(report["accounts"]);
  EXPECT_EQ(report["half_life_s"], 3600);
  ASSERT_EQ(report["rows"].size(), 4u) << report.dump();
  test::ProcessResult refused = test::runShell(env + " acquire -n 1 --wait 0 --account biology");
  EXPECT_EQ(refused.status, 4) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("user alice may not charge account biology (its accounts: physics)"),
            std::string::npos)
      << refused.err;
  test::ProcessResult badName = test::runShell(env + " acquire -n 1 --wait 0 --account 'a b'");
  EXPECT_EQ(badName.status, 2) << badName.err;
  EXPECT_NE(badName.err.find("--account 'a b': only letters"), std::string::npos) << badName.err;
  auto unknown =
      call("POST", "/v1/leases", kAlice, json{{"gpus", 1}, {"wait_s", 0}, {"account", "chem"}}.dump());
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 400) << unknown->body;
  EXPECT_NE(unknown->body.find("account 'chem' is no account of the pool's accounts file"), std::string::npos)
      << unknown->body;
  EXPECT_EQ(call("GET", "/v1/fairshare", "")->status, 401);
  const std::string m = metrics();
  const std::optional<double> physics = sample(m, "poolrun_fairshare_factor{account=\"physics\"}");
  const std::optional<double> biology = sample(m, "poolrun_fairshare_factor{account=\"biology\"}");
  ASSERT_TRUE(physics && biology) << m;
  EXPECT_LT(*physics, *biology) << "alice's account used more";
  EXPECT_GT(sample(m, "poolrun_fairshare_usage_gpu_seconds{account=\"physics\"}").value_or(0), 0) << m;

  dir_.write("accounts.toml",
             "[accounts.physics]\nshares = 3\nusers = [\"alice\"]\n[accounts.biology]\nusers = [\"bob\"]\n");
  const json changed = waitForEvent("accounts_changed");
  ASSERT_FALSE(changed.is_null()) << events().dump();
  EXPECT_EQ(changed["changes"], json({"account physics: shares 1 -> 3"}));
  EXPECT_EQ(changed["by"], common::userText(geteuid()));
  ok(call("DELETE", "/v1/queue/" + std::to_string(aliceTicket), kAlice));
  ok(call("DELETE", "/v1/queue/" + std::to_string(bobTicket), kBob));
  ok(call("DELETE", "/v1/leases/" + all, kAlice));
}

// Reservations on a real poold through poolctl: the reserved nodes take no lease from outside,
// their user leases them with --reservation (ending with the window), others and bad reservations
// are refused saying why, and each change is an audit event.
TEST_F(Operations, ReservationsKeepTheirNodesForTheirUsers) {
  start();
  auto as = [&](const char* token) {
    return "POOLRUN_TOKEN=" + std::string(token) + " " + POOLCTL_BINARY + " --pool " + poold_->uri() + " ";
  };
  test::ProcessResult made =
      test::runShell(as(kRoot) + "reserve --nodes 'hgx[01-02]' --duration 2h --users bob --name train");
  ASSERT_EQ(made.status, 0) << made.err;
  EXPECT_TRUE(std::regex_search(
      made.out, std::regex(R"(^reservation train: 2 nodes \(hgx01,hgx02\) from \S+Z to \S+Z for bob\n$)")))
      << made.out;
  test::ProcessResult list = test::runShell(as(kAlice) + "reservations");
  EXPECT_NE(list.out.find("train"), std::string::npos) << list.out;

  const json outside = json::parse(test::runShell(as(kAlice) + "--json acquire -n 8 --wait 0").out);
  for (const json& g : outside["gpus"]) EXPECT_NE(g["node"], "hgx01") << outside.dump();
  const json mine =
      json::parse(test::runShell(as(kBob) + "--json acquire -n 16 --wait 0 --reservation train").out);
  ASSERT_EQ(mine["gpus"].size(), 16u) << mine.dump();
  for (const json& g : mine["gpus"]) EXPECT_TRUE(g["node"] == "hgx01" || g["node"] == "hgx02") << mine.dump();
  EXPECT_FALSE(mine["max_end_ms"].is_null()) << "it ends with the window";
  test::ProcessResult notHers = test::runShell(as(kAlice) + "acquire -n 1 --wait 0 --reservation train");
  EXPECT_EQ(notHers.status, 4) << notHers.err;
  EXPECT_NE(notHers.err.find("user alice may not lease reservation train"), std::string::npos) << notHers.err;
  EXPECT_EQ(test::runShell(as(kAlice) + "reserve --nodes hgx05 --duration 1h").status, 4)
      << "administrators only";

  struct Bad {
    std::string args, says;
  };
  const std::vector<Bad> bad = {
      {"--nodes hgx99 --duration 1h --name b", "node hgx99 is not in the pool"},
      {"--nodes hgx05 --duration 1h --start 2020-01-01 --name b", "it starts in the past"},
      {"--nodes 'hgx[02-03]' --duration 1h --name b", "node hgx02 is kept by reservation train"},
      {"--nodes hgx05 --duration 0 --name b", "--duration"},
      {"--nodes hgx05 --duration 1h --start 5h --name b", "+2h for two hours from now"},
      {"--nodes hgx05 --duration 1h --name 'b c'", "only letters"},
      {"--duration 1h", "reserve needs --nodes"},
  };
  for (const Bad& b : bad) {
    test::ProcessResult r = test::runShell(as(kRoot) + "reserve " + b.args);
    EXPECT_NE(r.status, 0) << b.args;
    EXPECT_NE(r.err.find(b.says), std::string::npos) << b.args << ": " << r.err;
  }
  for (const std::string body :
       {R"({"name":"h","nodes":"n[1-99999999]","duration_s":60})",
        R"({"name":"h","nodes":"hgx05","duration_s":-1})",
        R"({"name":"h","nodes":"hgx05","duration_s":60,"start_ms":99999999999999999})",
        R"({"name":"h","nodes":"hgx05","duration_s":60,"colour":1})",
        R"({"name":"h","nodes":"","duration_s":60})",
        R"({"name":"h","nodes":"hgx05","duration_s":60,"users":["a b"]})", R"([1,2])", "{"}) {
    auto r = call("POST", "/v1/reservations", kRoot, body);
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body << ": " << r->body;
  }
  EXPECT_EQ(
      call("POST", "/v1/reservations", kAlice, R"({"name":"h","nodes":"hgx05","duration_s":60})")->status,
      403);
  // A maintenance window (nobody named) drains its nodes at its start, an event of the audit trail.
  ASSERT_EQ(test::runShell(as(kRoot) + "reserve --nodes hgx05 --duration 1h --name fix").status, 0);
  const json drained = waitForEvent("node_state");
  ASSERT_FALSE(drained.is_null()) << events().dump();
  EXPECT_EQ(drained["node"], "hgx05");
  EXPECT_EQ(drained["state"], "draining");
  EXPECT_EQ(drained["by"], "reservation");
  EXPECT_NE(drained["reason"].get<std::string>().find("reservation fix: a maintenance window until "),
            std::string::npos)
      << drained.dump();
  EXPECT_EQ(test::runShell(as(kRoot) + "unreserve fix").status, 0);
  EXPECT_EQ(test::runShell(as(kRoot) + "unreserve train").status, 0);
  EXPECT_EQ(test::runShell(as(kRoot) + "unreserve train").status, 1) << "gone";
  EXPECT_EQ(test::runShell(as(kAlice) + "reservations").out, "no reservations\n");
  const json log = events();
  std::vector<std::string> kinds;
  for (const json& e : log["events"])
    if (e["kind"] == "reservation_created" || e["kind"] == "reservation_removed") {
      kinds.push_back(e["kind"]);
      EXPECT_EQ(e["by"], "root") << e.dump();
    }
  EXPECT_EQ(kinds, (std::vector<std::string>{"reservation_created", "reservation_created",
                                             "reservation_removed", "reservation_removed"}));
}

TEST_F(Operations, MetricsPassPromtoolCheck) {
  if (test::runShell("command -v promtool").status != 0)
    GTEST_SKIP() << "promtool not found: install Debian's prometheus package (scripts/setup-deps.sh)";
  start({"--metrics-token-file", scrape_.string()});
  scenario();
  call("GET", "/healthz", "");
  call("GET", "/v1/status", "bad-token-0123456789");
  std::string m = metrics(kScrape);
  ASSERT_NE(m.find("poolrun_gpu_seconds_total{owner=\"alice\"}"), std::string::npos) << m;
  std::filesystem::path file = dir_.write("metrics.txt", m);
  test::ProcessResult r = test::runShell("promtool check metrics < " + file.string());
  EXPECT_EQ(r.status, 0) << r.out << r.err << "\n" << m;
}

TEST_F(Operations, TheEventLogHoldsEveryChangeAndGoesOnAcrossRestartsAndATornLine) {
  start();
  scenario();
  poold_->stop();  // its writer appends what is left
  std::vector<json> lines;
  {
    std::ifstream in(state() / "events.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  }
  const std::regex time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  std::vector<std::string> kinds;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["schema"], "poolrun.event/1");
    EXPECT_EQ(lines[i]["seq"], i + 1);
    EXPECT_TRUE(std::regex_match(lines[i]["time"].get<std::string>(), time)) << lines[i];
    kinds.push_back(lines[i]["kind"].get<std::string>() + " " +
                    lines[i].value("lease", lines[i].value("node", "")));
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"grant " + held_, "grant " + released_, "release " + released_,
                                             "gpu_failed hgx16", "node_state hgx15", "grant " + expired_,
                                             "expiry " + expired_}));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0]["owner"], "alice");
  EXPECT_EQ(lines[0]["gpu_count"], 8);
  EXPECT_EQ(lines[0]["gpus"], "hgx01:0-7");
  EXPECT_EQ(lines[2]["owner"], "bob");
  EXPECT_EQ(lines[2]["gpu_count"], 16);
  EXPECT_GE(lines[2]["gpu_seconds"].get<double>(), 0);  // 0 where released within a millisecond
  EXPECT_EQ(lines[3]["index"], 7);
  EXPECT_EQ(lines[3]["by"], "root");
  EXPECT_EQ(lines[4]["state"], "draining");
  EXPECT_EQ(lines[6]["reason"], "not renewed within its ttl of 1 s");

  // A restart goes on after seq 7; after a torn last line, from the last good one.
  start();
  ok(call("POST", "/v1/nodes/hgx15/resume", kRoot));
  json after = events(7);
  ASSERT_EQ(after["events"].size(), 1u) << after.dump();
  EXPECT_EQ(after["events"][0]["seq"], 8);
  poold_->stop();
  {
    std::ofstream out(state() / "events.jsonl", std::ios::app);
    out << R"({"schema":"poolrun.event/1","seq":9,"time":"2026-)";
  }
  start();
  ok(call("POST", "/v1/nodes/hgx15/drain", kRoot));
  after = events(8);
  ASSERT_EQ(after["events"].size(), 1u) << after.dump();
  EXPECT_EQ(after["events"][0]["seq"], 9);
  EXPECT_EQ(after["events"][0]["state"], "draining");
  poold_->stop();
  std::ifstream in(state() / "events.jsonl");
  size_t n = 0;
  for (std::string line; std::getline(in, line); ++n) EXPECT_EQ(json::parse(line)["seq"], n + 1) << line;
  EXPECT_EQ(n, 9u);
}

TEST_F(Operations, EventsLongPollAndRefuseBadInput) {
  start();
  acquire(kAlice, 8, 60);
  acquire(kBob, 8, 60);
  json page = ok(call("GET", "/v1/events?since=0&limit=1", kAlice));
  EXPECT_EQ(page["events"].size(), 1u);
  EXPECT_EQ(page["last"], 2);
  EXPECT_EQ(page["oldest"], 1);
  // A long poll answers with the next event.
  auto poll = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", poold_->port());
    c.set_read_timeout(30, 0);
    return c.Get("/v1/events?since=2&wait_ms=5000", {{"Authorization", std::string("Bearer ") + kBob}});
  });
  std::this_thread::sleep_for(200ms);
  ok(call("POST", "/v1/nodes/hgx09/drain", kRoot));
  ASSERT_EQ(poll.wait_for(30s), std::future_status::ready);
  auto polled = poll.get();
  ASSERT_TRUE(polled);
  json next = json::parse(polled->body);
  ASSERT_EQ(next["events"].size(), 1u) << polled->body;
  EXPECT_EQ(next["events"][0]["kind"], "node_state");
  EXPECT_EQ(next["events"][0]["seq"], 3);

  // A seq past the last answers at once with the last; hostile numbers get 400 naming them.
  page = ok(call("GET", "/v1/events?since=9223372036854775807&wait_ms=5000", kAlice));
  EXPECT_TRUE(page["events"].empty());
  EXPECT_EQ(page["last"], 3);
  for (const std::string q :
       {"since=-1", "since=99999999999999999999", "since=abc", "since=", "since=1.5", "wait_ms=-1",
        "wait_ms=3600001", "wait_ms=1e3", "limit=0", "limit=1001", "since=%00"}) {
    auto r = call("GET", "/v1/events?" + q, kAlice);
    ASSERT_TRUE(r) << q;
    EXPECT_EQ(r->status, 400) << q << ": " << r->body;
    const std::string value = q.substr(q.find('=') + 1);
    if (value != "%00") {
      EXPECT_NE(r->body.find("'" + value + "'"), std::string::npos) << r->body;
    }
  }
  EXPECT_EQ(call("GET", "/v1/events", "")->status, 401);
  EXPECT_EQ(call("POST", "/v1/events", kAlice)->status, 405);
}

std::vector<std::string> poolctl(const std::string& uri, std::vector<std::string> args) {
  std::vector<std::string> argv{POOLCTL_BINARY, "--pool", uri};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

TEST_F(Operations, PoolctlEventsPrintsAndFollowsAcrossARestartOfPoold) {
  start();
  std::string first = acquire(kAlice, 8, 60);
  const std::vector<std::string> env{std::string("POOLRUN_TOKEN=") + kAlice};

  test::ProcessResult once = test::runShell("POOLRUN_TOKEN=" + std::string(kAlice) + " " + POOLCTL_BINARY +
                                            " --pool " + poold_->uri() + " events");
  EXPECT_EQ(once.status, 0) << once.err;
  EXPECT_TRUE(std::regex_match(once.out, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z grant )" +
                                                    first + " alice 8 GPUs hgx01:0-7\n")))
      << once.out;
  once = test::runShell("POOLRUN_TOKEN=" + std::string(kAlice) + " " + POOLCTL_BINARY + " --pool " +
                        poold_->uri() + " --json events --since 0");
  EXPECT_EQ(json::parse(once.out)["lease"], first) << once.out;
  EXPECT_EQ(once.out.rfind(R"({"schema":"poolrun.event/1","seq":1,)", 0), 0u) << once.out;

  Child follow(poolctl(poold_->uri(), {"events", "--follow"}), env);
  ASSERT_TRUE(follow.waitFor([&] { return follow.lines() >= 1; }, 30s)) << follow.out << follow.err;
  ok(call("POST", "/v1/nodes/hgx05/drain", kRoot));
  ASSERT_TRUE(follow.waitFor([&] { return follow.lines() >= 2; }, 30s)) << follow.out << follow.err;
  EXPECT_NE(follow.out.find("node_state hgx05 draining (by root)"), std::string::npos) << follow.out;

  const int port = poold_->port();
  poold_->stop();
  ASSERT_TRUE(follow.waitFor([&] { return follow.err.find("does not answer") != std::string::npos; }, 30s))
      << follow.err;
  start({}, port);
  ok(call("POST", "/v1/nodes/hgx05/resume", kRoot));
  ASSERT_TRUE(follow.waitFor([&] { return follow.lines() >= 3; }, 30s)) << follow.out << follow.err;
  EXPECT_NE(follow.err.find("answers again"), std::string::npos) << follow.err;
  EXPECT_EQ(std::count(follow.err.begin(), follow.err.end(), '\n'), 2)
      << "one line down, one back: " << follow.err;
  EXPECT_NE(follow.out.find("node_state hgx05 up (by root)"), std::string::npos) << follow.out;
  EXPECT_EQ(follow.lines(), 3u) << "each event once: " << follow.out;
  EXPECT_EQ(follow.stop(SIGINT, 30s), 0) << follow.err;
}

TEST_F(Operations, PoolctlEventsSaysTheLogIsPooldsOnEmbeddedPools) {
  test::ProcessResult r = test::runShell(std::string(POOLCTL_BINARY) + " --state " + dir_.path().string() +
                                         " --pool sim:" + test::hgxCluster() + " events");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("the event log is poold's"), std::string::npos) << r.err;
  r = test::runShell(std::string(POOLCTL_BINARY) + " --pool http://127.0.0.1:1 events --since -1");
  EXPECT_EQ(r.status, 2) << r.err;
}

}  // namespace
}  // namespace poolrun::pool
