// poold under hostile clients, on 127.0.0.1: slow and idle connections by the thousand, chunked
// bodies over the limit, pipelined requests, connection floods from one address, bytes that are
// not UTF-8, bad numbers in paths, and a token file with a line poold cannot use. Each test is
// bounded in time and count and stops its server.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/dashboard_routes.hpp"
#include "poolrun/pool/http_failures.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/server.hpp"
#include "poolrun/topo/cluster.hpp"
#include "support/fixtures.hpp"
#include "support/loopback.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using Steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kTokens =
    "tok-alice-0123456789 alice user\n"
    "tok-root-0123456789 root admin\n";

// A raw TCP client: what it sends is exactly what the test wrote.
class Raw {
 public:
  explicit Raw(int port) : fd_(test::connectLoopback(port)), connected_(fd_ >= 0) {}
  ~Raw() {
    if (fd_ >= 0) close(fd_);
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // What arrives until the peer closes or `limit` passes.
  std::string readUntilClosed(std::chrono::milliseconds limit) {
    std::string out;
    auto end = Steady::now() + limit;
    while (Steady::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(end - Steady::now()).count());
      if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
      char buf[65536];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Reads until `count` complete replies (headers and Content-Length body) have arrived.
  std::vector<std::string> readReplies(size_t count, std::chrono::milliseconds limit) {
    std::vector<std::string> replies;
    std::string buffer;
    auto end = Steady::now() + limit;
    while (replies.size() < count && Steady::now() < end) {
      for (;;) {
        size_t head = buffer.find("\r\n\r\n");
        if (head == std::string::npos) break;
        size_t cl = buffer.find("Content-Length: ");
        size_t length = cl != std::string::npos && cl < head ? std::stoul(buffer.substr(cl + 16)) : 0;
        if (buffer.size() < head + 4 + length) break;
        replies.push_back(buffer.substr(0, head + 4 + length));
        buffer.erase(0, head + 4 + length);
      }
      if (replies.size() >= count) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[65536];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      buffer.append(buf, static_cast<size_t>(n));
    }
    return replies;
  }
  bool closedByPeer(std::chrono::milliseconds limit) {
    readUntilClosed(limit);
    return closed_;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

std::string request(const std::string& method, const std::string& path, const std::string& body = "",
                    const std::string& token = "tok-root-0123456789") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  if (!body.empty() || method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

int statusOf(const std::string& reply) {
  return reply.size() > 12 && reply.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(reply.substr(9, 3)) : 0;
}

std::string bodyOf(const std::string& reply) {
  size_t head = reply.find("\r\n\r\n");
  return head == std::string::npos ? "" : reply.substr(head + 4);
}

// The reason of an error reply, "" where its body holds none; and whether its status is the one the
// failure table gives that reason (every error reply poold writes is a row of it).
std::string reasonOf(const std::string& reply) {
  json body = json::parse(bodyOf(reply), nullptr, false);
  return body.is_object() && body.contains("reason") && body["reason"].is_string()
             ? body["reason"].get<std::string>()
             : "";
}
void expectARowOfTheTable(const std::string& reply, std::string_view reason) {
  EXPECT_EQ(reasonOf(reply), reason) << reply.substr(0, 300);
  EXPECT_EQ(statusOf(reply), httpFailureNamed(reason).status) << reply.substr(0, 300);
}

// One request on a fresh connection; the reply, or "" when none came within 10 s.
std::string ask(int port, const std::string& req) {
  Raw c(port);
  if (!c.connected() || !c.send(req)) return "";
  auto replies = c.readReplies(1, 10s);
  return replies.empty() ? "" : replies.front();
}

// A poold in this process on 127.0.0.1, port 0, with the hgx-h100 cluster registered.
class Hostile : public ::testing::Test {
 protected:
  void start(ServerOptions o = {}) {
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < 2200)
      GTEST_SKIP() << "the open-file limit (" << lim.rlim_cur << ") is below the 2200 these tests need";
    o.host = "127.0.0.1";
    o.port = 0;
    o.state_dir = dir_.path() / "state";
    o.token_file = tokenFile();
    addDashboard(o);  // as poold's main does
    server_ = std::make_unique<PoolServer>(o);
    server_->registerNodes(
        topo::readClusterFile((test::sourceDir() / "clusters" / "hgx-h100.toml").string()).nodes);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  virtual std::string tokens() const { return kTokens; }
  std::filesystem::path tokenFile() { return dir_.writeSecret("tokens", tokens()); }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
  }
  std::string acquire(int gpus, int ttl) {
    std::string reply =
        ask(port_, request("POST", "/v1/leases", json{{"gpus", gpus}, {"ttl_s", ttl}, {"wait_s", 0}}.dump(),
                           "tok-alice-0123456789"));
    EXPECT_EQ(statusOf(reply), 200) << reply;
    return json::parse(bodyOf(reply))["lease"]["id"];
  }
  int leased() {
    std::string reply = ask(port_, request("GET", "/v1/status"));
    return json::parse(bodyOf(reply))["gpus"]["leased"].get<int>();
  }

  test::TempDir dir_;
  std::unique_ptr<PoolServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(Hostile, SlowlorisConnectionsByTheThousandNeitherStopServiceNorLetLeasesExpire) {
  ServerOptions o;
  o.header_timeout = 4s;
  start(o);
  std::string lease = acquire(8, 3);  // expires unless renewed within 3 s
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 1000; ++i) {
    slow.push_back(std::make_unique<Raw>(port_));
    ASSERT_TRUE(slow.back()->connected()) << "connection " << i;
    slow.back()->send("GET /v1/status HTTP/1.1\r\n");
  }
  // For 6 s the slow clients each send a header line every 2 s; a normal client renews the lease
  // every second and asks for the status.
  std::vector<double> latencies;
  auto end = Steady::now() + 6s;
  auto nextLine = Steady::now() + 2s;
  int answered = 0, asked = 0;
  while (Steady::now() < end) {
    if (Steady::now() >= nextLine) {
      for (auto& s : slow) s->send("X-Slow: 1\r\n");
      nextLine += 2s;
    }
    auto t0 = Steady::now();
    std::string renew =
        ask(port_, request("POST", "/v1/leases/" + lease + "/renew", "{}", "tok-alice-0123456789"));
    std::string status = ask(port_, request("GET", "/v1/status"));
    latencies.push_back(std::chrono::duration<double>(Steady::now() - t0).count() / 2);
    asked += 2;
    answered += (statusOf(renew) == 200) + (statusOf(status) == 200);
    std::this_thread::sleep_for(500ms);
  }
  EXPECT_EQ(answered, asked) << "every request of the normal client is answered";
  EXPECT_EQ(leased(), 8) << "the lease was renewed throughout";
  std::sort(latencies.begin(), latencies.end());
  std::cout << "median answer under 1000 slow connections: " << latencies[latencies.size() / 2] * 1000
            << " ms\n";
  // The header deadline (4 s from the first byte) has closed the slow connections.
  int closed = 0;
  for (auto& s : slow) closed += s->closedByPeer(50ms);
  EXPECT_EQ(closed, 1000) << "connections that never finish their headers are closed";
}

TEST_F(Hostile, IdleSocketsHoldNoWorkerAndAreClosedAfterTheIdleDeadline) {
  ServerOptions o;
  o.threads = 2;
  o.idle_timeout = 2s;
  start(o);
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(std::make_unique<Raw>(port_));
    ASSERT_TRUE(idle.back()->connected());
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(statusOf(ask(port_, request("GET", "/v1/status"))), 200);
  int closed = 0;
  auto end = Steady::now() + 10s;
  for (auto& s : idle) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Steady::now());
    closed += s->closedByPeer(std::max(left, 1ms));
  }
  EXPECT_EQ(closed, 1000);
}

TEST_F(Hostile, ConnectionsPastThePerPeerLimitAreClosedAtOnce) {
  ServerOptions o;
  o.max_connections_per_peer = 50;
  start(o);
  std::vector<std::unique_ptr<Raw>> held;
  for (int i = 0; i < 50; ++i) held.push_back(std::make_unique<Raw>(port_));
  // Wait until poold has accepted the 50 (a request on one of them is answered).
  held[0]->send(request("GET", "/v1/status"));
  ASSERT_EQ(held[0]->readReplies(1, 10s).size(), 1u);
  Raw extra(port_);
  ASSERT_TRUE(extra.connected());
  extra.send(request("GET", "/v1/status"));
  std::string got = extra.readUntilClosed(5s);
  EXPECT_EQ(got, "") << "the 51st connection from one address is closed without an answer";
  held.clear();
  // Once the others are gone, the address is served again.
  std::string reply;
  for (int i = 0; i < 50 && statusOf(reply) != 200; ++i) {
    reply = ask(port_, request("GET", "/v1/status"));
    if (statusOf(reply) != 200) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(statusOf(reply), 200);
}

TEST_F(Hostile, ChunkedBodiesAreLimitedLikeAnyOther) {
  ServerOptions o;
  o.max_body_bytes = 65536;
  start(o);
  Raw c(port_);
  std::string head =
      "POST /v1/leases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-alice-0123456789\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  auto chunk = [](const std::string& data) {
    char size[16];
    snprintf(size, sizeof size, "%zx\r\n", data.size());
    return size + data + "\r\n";
  };
  // A job name of 256 KiB in 4 KiB chunks, with no Content-Length to check up front.
  c.send(head + chunk(R"({"gpus": 1, "wait_s": 0, "job_name": ")"));
  for (int i = 0; i < 64 && c.send(chunk(std::string(4096, 'a'))); ++i) {
  }
  c.send(chunk(R"("})") + "0\r\n\r\n");
  std::string reply = c.readUntilClosed(5s);
  EXPECT_EQ(statusOf(reply), 413) << reply.substr(0, 200);
  EXPECT_NE(reply.find("65536"), std::string::npos) << "names the limit";
  EXPECT_EQ(leased(), 0);
  // A chunked body within the limit is read as usual.
  std::string body = json{{"gpus", 1}, {"wait_s", 0}, {"job_name", std::string(200, 'j')}}.dump();
  Raw ok(port_);
  ok.send(head + chunk(body.substr(0, 100)) + chunk(body.substr(100)) + "0\r\n\r\n");
  auto replies = ok.readReplies(1, 10s);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(statusOf(replies[0]), 200) << replies[0];
}

// A body framed by a coding poold does not take, or framed two ways, is refused and the connection
// closed: what follows it is never read as a request of its own (request smuggling).
TEST_F(Hostile, BodiesFramedAnyOtherWayAreRefusedAndNothingBehindThemRuns) {
  start();
  const std::string auth = "Host: x\r\nAuthorization: Bearer tok-alice-0123456789\r\n";
  const std::string smuggled = request("POST", "/v1/leases", json{{"gpus", 1}, {"wait_s", 0}}.dump());
  struct Case {
    std::string headers;
    int status;
    std::string_view reason;
  };
  const std::vector<Case> cases = {
      {"Transfer-Encoding: gzip\r\n", 501, "framing_not_supported"},
      {"Transfer-Encoding: identity\r\nContent-Length: " + std::to_string(smuggled.size()) + "\r\n", 501,
       "framing_not_supported"},
      {"Transfer-Encoding: gzip, chunked\r\n", 501, "framing_not_supported"},
      {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", 400, "bad_request"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.headers);
    Raw conn(port_);
    std::string body = c.headers.find("chunked") != std::string::npos ? "0\r\n\r\n" : "";
    conn.send("POST /v1/leases HTTP/1.1\r\n" + auth + c.headers + "\r\n" + body + smuggled);
    std::string reply = conn.readUntilClosed(5s);
    EXPECT_EQ(statusOf(reply), c.status) << reply;
    expectARowOfTheTable(reply, c.reason);
    EXPECT_NE(reply.find("Transfer-Encoding"), std::string::npos) << "says which header: " << reply;
    EXPECT_EQ(reply.find("HTTP/1.1 200"), std::string::npos) << "the request behind it ran: " << reply;
  }
  EXPECT_EQ(leased(), 0);
}

// Long polls hold a worker while they wait: one owner's many polls of the event log (nothing new
// in it, so each would wait its 5 s) take at most a quarter of the workers, and another client's
// request is answered while the polls that got a worker still wait. Before, eight polls held all
// eight workers, and a renewal behind them waited until its lease had expired.
TEST_F(Hostile, LongPollsLeaveWorkersForEveryoneElse) {
  ServerOptions o;
  o.threads = 8;  // a quarter may wait at once (2), a quarter of those for one owner (1)
  start(o);
  const std::string first = ask(port_, request("GET", "/v1/events?since=0&limit=1"));
  ASSERT_EQ(statusOf(first), 200) << first;
  const std::string last = std::to_string(json::parse(bodyOf(first))["last"].get<uint64_t>());
  std::vector<std::unique_ptr<Raw>> polls;
  for (int i = 0; i < 8; ++i) {
    polls.push_back(std::make_unique<Raw>(port_));
    ASSERT_TRUE(polls.back()->send(
        request("GET", "/v1/events?since=" + last + "&wait_ms=5000", "", "tok-alice-0123456789")));
  }
  std::this_thread::sleep_for(200ms);  // the polls first (a late one only makes this pass)
  std::string status = ask(port_, request("GET", "/v1/status"));
  EXPECT_EQ(statusOf(status), 200) << status;
  // Answered while alice's poll that holds a worker still waits: one connection has no reply yet.
  std::vector<std::string> replies(polls.size());
  for (size_t i = 0; i < polls.size(); ++i)
    if (auto r = polls[i]->readReplies(1, 1ms); !r.empty()) replies[i] = r[0];
  EXPECT_LT(std::count_if(replies.begin(), replies.end(), [](const std::string& r) { return !r.empty(); }),
            static_cast<std::ptrdiff_t>(polls.size()))
      << "every poll had ended before the status was answered";
  // Every poll gets its page, empty: those without a worker to wait on at once.
  for (size_t i = 0; i < polls.size(); ++i) {
    if (replies[i].empty()) {
      auto r = polls[i]->readReplies(1, 10s);
      ASSERT_EQ(r.size(), 1u);
      replies[i] = r[0];
    }
    EXPECT_EQ(statusOf(replies[i]), 200) << replies[i];
    EXPECT_TRUE(json::parse(bodyOf(replies[i]))["events"].empty()) << replies[i];
  }
}

// wait_s 0 and the pool full: 409 saying so, nothing queued (it was 202 with ticket 0, which a
// client other than poolctl read as queued and polled in vain).
TEST_F(Hostile, ARequestThatMayNotWaitAndDoesNotFitNowIsA409) {
  start();
  std::string all = ask(port_, request("POST", "/v1/leases", json{{"gpus", 128}, {"wait_s", 0}}.dump()));
  ASSERT_EQ(statusOf(all), 200) << all;
  std::string reply = ask(port_, request("POST", "/v1/leases", json{{"gpus", 8}, {"wait_s", 0}}.dump()));
  EXPECT_EQ(statusOf(reply), 409) << reply;
  const json doc = json::parse(bodyOf(reply));
  EXPECT_EQ(doc["reason"], "not_now") << doc;
  EXPECT_EQ(doc["position"], 1) << doc;
  EXPECT_NE(doc["error"].get<std::string>().find("a request for 8 GPUs does not fit now"), std::string::npos)
      << doc;
  EXPECT_EQ(json::parse(bodyOf(ask(port_, request("GET", "/v1/queue")))).size(), 0u) << "nothing queued";
}

// A field given twice is refused, not read as the last one; a request that takes no fields refuses
// a body with some (or one that is no JSON) rather than ignoring it; a number past a double says so.
TEST_F(Hostile, BodiesAreReadStrictlyOnEveryRoute) {
  start();
  std::string twice = ask(port_, request("POST", "/v1/leases", R"({"gpus": 1, "gpus": 3, "wait_s": 0})"));
  EXPECT_EQ(statusOf(twice), 400) << twice;
  expectARowOfTheTable(twice, "bad_request");
  EXPECT_NE(twice.find("field 'gpus' given twice"), std::string::npos) << twice;
  std::string nested = ask(
      port_, request("POST", "/v1/nodes/hgx01/gpus/0/mig", R"({"profiles": ["1g.10gb"], "profiles": []})"));
  EXPECT_EQ(statusOf(nested), 400) << nested;
  EXPECT_NE(nested.find("given twice"), std::string::npos) << nested;
  std::string huge = ask(port_, request("POST", "/v1/leases", R"({"gpus": 1e400})"));
  EXPECT_EQ(statusOf(huge), 400) << huge;
  EXPECT_NE(huge.find("a number out of range"), std::string::npos) << huge;
  EXPECT_EQ(leased(), 0);

  std::string granted = ask(port_, request("POST", "/v1/leases", json{{"gpus", 1}, {"wait_s", 0}}.dump()));
  ASSERT_EQ(statusOf(granted), 200) << granted;
  const std::string id = json::parse(bodyOf(granted))["lease"]["id"];
  for (const std::string& body :
       {std::string(R"({"ttl_s": 99999})"), std::string("garbage"), std::string("[]"), std::string("\xff")}) {
    std::string reply = ask(port_, request("POST", "/v1/leases/" + id + "/renew", body));
    EXPECT_EQ(statusOf(reply), 400) << body << ": " << reply;
  }
  EXPECT_EQ(statusOf(ask(port_, request("POST", "/v1/leases/" + id + "/renew", "{}"))), 200);
  std::string drain = ask(port_, request("POST", "/v1/nodes/hgx01/drain", R"({"reason": "x"})"));
  EXPECT_EQ(statusOf(drain), 400) << drain;
  EXPECT_NE(drain.find("takes no fields"), std::string::npos) << drain;
  std::string theirs =
      ask(port_, request("POST", "/v1/leases/" + id + "/shrink", "{}", "tok-alice-0123456789"));
  EXPECT_EQ(statusOf(theirs), 403) << theirs;
  EXPECT_NE(theirs.find("may not shrink"), std::string::npos) << theirs;
}

// The small refusals: a release of what is no lease id, a withdrawal of a ticket never queued,
// two Authorization headers, a method a known path does not take (with Allow), an unknown node.
TEST_F(Hostile, SmallRefusalsSayWhatWasWrong) {
  start();
  std::string traversal = ask(port_, request("DELETE", "/v1/leases/..%2F..%2Fetc%2Fpasswd"));
  EXPECT_EQ(statusOf(traversal), 400) << traversal;
  EXPECT_NE(traversal.find("is no lease id"), std::string::npos) << traversal;
  std::string never = ask(port_, request("DELETE", "/v1/queue/424242"));
  EXPECT_EQ(statusOf(never), 200) << never;
  EXPECT_EQ(json::parse(bodyOf(never))["withdrawn"], false) << never;
  std::string twice =
      ask(port_,
          "GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-root-0123456789\r\n"
          "Authorization: Bearer tok-alice-0123456789\r\n\r\n");
  EXPECT_EQ(statusOf(twice), 400) << twice;
  EXPECT_NE(twice.find("more than one Authorization header"), std::string::npos) << twice;
  std::string method = ask(port_, request("PUT", "/v1/leases", "{}"));
  EXPECT_EQ(statusOf(method), 405) << method;
  expectARowOfTheTable(method, "method_not_allowed");
  EXPECT_NE(method.find("\r\nAllow: GET, POST\r\n"), std::string::npos) << method;
  std::string unknown = ask(port_, request("POST", "/v1/nodes/nope/drain", "{}"));
  EXPECT_EQ(statusOf(unknown), 404) << unknown;
  expectARowOfTheTable(unknown, "not_found");
  EXPECT_EQ(json::parse(bodyOf(unknown))["reason"], "not_found") << unknown;
}

// The fields of a chunked body's trailer are not the request's headers: an Authorization there
// authenticated an administrator's drain with no token in the header. Whole in one read, and with
// the body read after the header, a trailer's token counts for nothing.
TEST_F(Hostile, ATrailersFieldsAreDiscarded) {
  start();
  const std::string head = "POST /v1/nodes/hgx01/drain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n";
  const std::string body = "2\r\n{}\r\n0\r\nAuthorization: Bearer tok-root-0123456789\r\n\r\n";
  std::string whole = ask(port_, head + "\r\n" + body);
  EXPECT_EQ(statusOf(whole), 401) << whole;
  Raw split(port_);
  ASSERT_TRUE(split.send(head + "\r\n"));
  std::this_thread::sleep_for(100ms);  // the header read alone; the body by the body's read
  ASSERT_TRUE(split.send(body));
  auto replies = split.readReplies(1, 10s);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(statusOf(replies[0]), 401) << replies[0];
  // A user's token in the header and an administrator's in the trailer: the user's alone counts.
  std::string user = ask(port_, head + "Authorization: Bearer tok-alice-0123456789\r\n\r\n" + body);
  EXPECT_EQ(statusOf(user), 403) << user;
  std::string nodes = bodyOf(ask(port_, request("GET", "/v1/nodes")));
  EXPECT_EQ(nodes.find("draining"), std::string::npos) << nodes;

  HttpRequest parsed;
  HttpReply error;
  ASSERT_TRUE(parseRequest(head + "Authorization: Bearer tok-alice-0123456789\r\n\r\n" + body,
                           HttpServerOptions{}, parsed, error))
      << error.body;
  EXPECT_EQ(parsed.authorization, "Bearer tok-alice-0123456789");
  EXPECT_EQ(parsed.body, "{}");
}

// /metrics without a token from an allowed address, through the server: only where the Host names
// poold (DNS rebinding), and a request with two Host headers is refused.
TEST_F(Hostile, MetricsFromAnAllowedAddressNeedAHostThatNamesPoold) {
  ServerOptions o;
  o.metrics_allow = {"127.0.0.1/32"};
  start(o);
  auto scrape = [&](const std::string& hosts) {
    return ask(port_, "GET /metrics HTTP/1.1\r\n" + hosts + "\r\n");
  };
  std::string ours = scrape("Host: 127.0.0.1:" + std::to_string(port_) + "\r\n");
  EXPECT_EQ(statusOf(ours), 200) << ours.substr(0, 300);
  std::string rebound = scrape("Host: rebound.attacker.example:" + std::to_string(port_) + "\r\n");
  EXPECT_EQ(statusOf(rebound), 403) << rebound;
  EXPECT_EQ(rebound.find("poolrun_gpus"), std::string::npos) << rebound;
  std::string twice = scrape("Host: 127.0.0.1\r\nHost: rebound.attacker.example\r\n");
  EXPECT_EQ(statusOf(twice), 400) << twice;
  EXPECT_NE(twice.find("more than one Host header"), std::string::npos) << twice;
}

// A connection that never sends a byte is closed at the header deadline, not the idle one of a
// kept-alive connection: 1,024 of them held every slot of their address for the idle minute.
TEST_F(Hostile, AConnectionThatSaysNothingIsClosedAtTheHeaderDeadline) {
  ServerOptions o;
  o.header_timeout = std::chrono::milliseconds(300);
  o.idle_timeout = std::chrono::seconds(120);
  start(o);
  Raw silent(port_);
  ASSERT_TRUE(silent.connected());
  EXPECT_TRUE(silent.closedByPeer(30s)) << "still open long past the header deadline";
  // A kept-alive connection after a request still gets the idle deadline: it is open after more
  // than the header deadline.
  Raw kept(port_);
  kept.send(request("GET", "/v1/status"));
  ASSERT_EQ(kept.readReplies(1, 10s).size(), 1u);
  EXPECT_FALSE(kept.closedByPeer(1s));
}

TEST_F(Hostile, PipelinedRequestsAreAllAnsweredInOrder) {
  start();
  Raw c(port_);
  c.send(request("GET", "/v1/status") + request("GET", "/v1/leases") + request("GET", "/v1/nodes/nope"));
  auto replies = c.readReplies(3, 10s);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(statusOf(replies[0]), 200);
  EXPECT_TRUE(json::parse(bodyOf(replies[0])).contains("gpus")) << "the status first";
  EXPECT_TRUE(json::parse(bodyOf(replies[1])).is_array()) << "then the leases";
  EXPECT_EQ(statusOf(replies[2]), 404) << "then the unknown node";
}

TEST_F(Hostile, BytesThatAreNotUtf8GetA400AndLeakNothing) {
  start();
  for (const std::string& path : {std::string("/v1/nodes/%FF%FE"), std::string("/v1/nodes/\xff\xfe"),
                                  std::string("/v1/leases/%C0%AF/renew"),
                                  std::string("/v1/nodes/a%0D%0AX:%20y"), std::string("/v1/nodes/%zz")}) {
    std::string reply =
        ask(port_, request(path.find("renew") != std::string::npos ? "POST" : "GET", path, "{}"));
    EXPECT_EQ(statusOf(reply), 400) << path << ": " << reply;
    size_t head = reply.find("\r\n\r\n");
    EXPECT_EQ(reply.substr(0, head).find("what()"), std::string::npos);
    EXPECT_EQ(reply.substr(0, head).find("X:"), std::string::npos) << "no header injected";
    EXPECT_TRUE(json::accept(bodyOf(reply))) << "the reply is JSON: " << reply;
  }
  std::string deep = "{\"gpus\": 1, \"labels\": " + std::string(60000, '[') + std::string(60000, ']') + "}";
  std::string tooDeep = ask(port_, request("POST", "/v1/leases", deep, "tok-alice-0123456789"));
  EXPECT_EQ(statusOf(tooDeep), 400) << tooDeep.substr(0, 300);
  EXPECT_NE(tooDeep.find("nests deeper than 64"), std::string::npos) << tooDeep.substr(0, 300);
  std::string body = "{\"gpus\": 1, \"job_name\": \"caf\xe9\"}";
  std::string reply = ask(port_, request("POST", "/v1/leases", body, "tok-alice-0123456789"));
  EXPECT_EQ(statusOf(reply), 400) << reply;
  EXPECT_EQ(leased(), 0);
  EXPECT_EQ(statusOf(ask(port_, request("GET", "/v1/status"))), 200) << "poold still serves";
}

TEST_F(Hostile, NumbersInPathsAndOverTheServersLimitsGet400) {
  ServerOptions o;
  o.max_ttl = 600s;
  o.max_user_priority = 10;
  start(o);
  std::string reply = ask(port_, request("POST", "/v1/nodes/hgx01/gpus/4294967296/fail", "{}"));
  EXPECT_EQ(statusOf(reply), 400) << reply;
  EXPECT_NE(reply.find("4294967296"), std::string::npos);
  EXPECT_EQ(statusOf(ask(port_, request("POST", "/v1/nodes/hgx01/gpus/-1/fail", "{}"))), 400);
  EXPECT_EQ(statusOf(ask(port_, request("GET", "/v1/queue/99999999999999999999999"))), 400);
  EXPECT_EQ(statusOf(ask(port_, request("GET", "/v1/queue/1?wait_ms=abc"))), 400);
  reply = ask(port_, request("POST", "/v1/leases", R"({"gpus": 1, "ttl_s": 601})", "tok-alice-0123456789"));
  EXPECT_EQ(statusOf(reply), 400) << reply;
  EXPECT_NE(reply.find("--max-ttl"), std::string::npos) << reply;
  reply = ask(port_, request("POST", "/v1/leases", R"({"gpus": 1, "priority": 11})", "tok-alice-0123456789"));
  EXPECT_EQ(statusOf(reply), 400) << reply;
  EXPECT_NE(reply.find("--max-user-priority"), std::string::npos) << reply;
  reply = ask(port_, request("POST", "/v1/leases", R"({"gpus": 1, "priority": 11, "wait_s": 0})"));
  EXPECT_EQ(statusOf(reply), 200) << "an administrator may use more: " << reply;
  EXPECT_EQ(leased(), 1);
}

TEST_F(Hostile, UnknownPathsAndMethodsAreNamed) {
  start();
  EXPECT_EQ(statusOf(ask(port_, request("GET", "/v2/anything"))), 404);
  EXPECT_EQ(statusOf(ask(port_, request("PUT", "/v1/leases", "{}"))), 405);
  std::string reply = ask(port_, "GARBAGE\r\n\r\n");
  EXPECT_EQ(statusOf(reply), 400) << reply;
  for (int i = 0; i < 20; ++i) ask(port_, request("X" + std::to_string(i) + "Y", "/v1/leases", "{}"));
  std::string metrics = bodyOf(ask(port_, request("GET", "/metrics")));
  EXPECT_EQ(metrics.find("X1Y"), std::string::npos) << "a client's method makes no metric series";
  EXPECT_NE(metrics.find("method=\"other\""), std::string::npos) << metrics;
}

TEST_F(Hostile, TheDashboardsPathsRefuseWhatIsNotItsFiles) {
  start();
  struct Case {
    std::string path;
    int status;
  };
  for (const Case& c : {Case{"/ui/%FF%FE", 400}, Case{"/ui/\xff\xfe.js", 400}, Case{"/ui/a%00b", 400},
                        Case{"/ui/%zz", 400}, Case{"/ui/../v1/status", 404},
                        Case{"/ui/%2e%2e/%2e%2e/etc/passwd", 404}, Case{"/ui/" + std::string(8000, 'x'), 404},
                        Case{"/ui/" + std::string(20000, 'x'), 431}, Case{"/ui/app.js?x=%FF", 400}}) {
    std::string reply = ask(port_, request("GET", c.path, "", ""));
    EXPECT_EQ(statusOf(reply), c.status) << c.path.substr(0, 60) << ": " << reply.substr(0, 300);
    EXPECT_TRUE(json::accept(bodyOf(reply))) << "the reply is JSON: " << reply.substr(0, 300);
    expectARowOfTheTable(reply, c.status == 400   ? "bad_request"
                                : c.status == 404 ? "not_found"
                                                  : "headers_too_large");
    EXPECT_LT(reply.size(), 1000u) << "a long path is not echoed whole";
  }
  std::string file = ask(port_, request("GET", "/ui/app.js", "", ""));
  EXPECT_EQ(statusOf(file), 200) << "poold still serves the dashboard";
  EXPECT_NE(file.find("Content-Security-Policy: default-src 'self'"), std::string::npos)
      << file.substr(0, 600);
  EXPECT_NE(file.find("X-Content-Type-Options: nosniff"), std::string::npos);
  EXPECT_EQ(statusOf(ask(port_, request("GET", "/v1/dashboard", "", "not-a-token"))), 401);
  EXPECT_EQ(statusOf(ask(port_, request("GET", "/v1/dashboard", "", "tok-alice-0123456789"))), 200);
}

class HostileTokens : public Hostile {
 protected:
  std::string tokens() const override {
    return "tok-alice-0123456789 alice user\n"
           "tok-latin-0123456789 jos\xe9 user\n"
           "tok-root-0123456789 root admin\n"
           "short x user\n"
           "tok-evil-0123456789 ev\"il admin\n";
  }
};

TEST_F(HostileTokens, BadLinesAreSkippedAndNothingInTheFileStopsPoold) {
  start();
  EXPECT_EQ(statusOf(ask(
                port_, request("POST", "/v1/leases", R"({"gpus": 1, "wait_s": 0})", "tok-latin-0123456789"))),
            401)
      << "the owner that is not UTF-8 was skipped";
  EXPECT_EQ(statusOf(ask(port_, request("GET", "/v1/status", "", "tok-evil-0123456789"))), 401);
  EXPECT_EQ(statusOf(ask(
                port_, request("POST", "/v1/leases", R"({"gpus": 1, "wait_s": 0})", "tok-alice-0123456789"))),
            200)
      << "the good lines still work";
  // The file is read again when it changes; a bad rewrite keeps poold serving.
  std::filesystem::path file = dir_.path() / "tokens";
  std::this_thread::sleep_for(20ms);
  dir_.writeSecret("tokens", std::string("\xff\xfe garbage\n") + "tok-alice-0123456789 alice user\n");
  int root = 0;  // read once whole (common::FileWatch), not at the first look
  for (int i = 0; i < 100 && (root = statusOf(ask(port_, request("GET", "/v1/status")))) != 401; ++i)
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(root, 401) << "root's line is gone";
  EXPECT_EQ(statusOf(ask(port_, request("GET", "/v1/status", "", "tok-alice-0123456789"))), 200);
}

TEST(HostileTokenFile, ADeviceOrFifoIsRefusedAtStartWithItsName) {
  test::TempDir dir;
  for (const std::string& file : {std::string("/dev/zero"), dir.path().string()}) {
    ServerOptions o;
    o.state_dir = dir.path() / "state";
    o.token_file = file;
    try {
      PoolServer server(o);
      ADD_FAILURE() << "started with the token file " << file;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file + " is a"), std::string::npos) << e.what();
    }
  }
}

// A route's row says what its handler does with the state (StateLock); a handler that takes more is
// refused as a bug of poold (500 internal, naming the route), and the server serves on.
TEST_F(Hostile, ARouteThatTakesMoreOfTheStateThanItsRowSaysIsRefused) {
  ServerOptions o;
  auto reads = [](const HttpRequest&, const Caller&, const StateReader& read) {
    int gpus = 0;
    read([&gpus](const PoolState& s) { gpus = s.status().gpus_free; });
    return HttpReply{200, json{{"gpus", gpus}}.dump()};
  };
  o.routes.push_back({"GET", "/v1/reads-undeclared", true, "", reads, StateLock::kNone});
  o.routes.push_back({"GET", "/v1/reads-declared", true, "", reads, StateLock::kRead});
  start(o);
  const std::string refused = ask(port_, request("GET", "/v1/reads-undeclared"));
  expectARowOfTheTable(refused, "internal");
  EXPECT_NE(refused.find("GET /v1/reads-undeclared is declared StateLock::kNone but its handler reads"),
            std::string::npos)
      << refused;
  const std::string served = ask(port_, request("GET", "/v1/reads-declared"));
  ASSERT_EQ(statusOf(served), 200) << served;
  EXPECT_GT(json::parse(bodyOf(served))["gpus"].get<int>(), 0) << served;
}

TEST(TargetParsing, SegmentsAndQueryAreDecodedAndBadOnesRefused) {
  std::vector<std::string> segments;
  std::map<std::string, std::string> query;
  ASSERT_TRUE(parseTarget("/v1/leases/L%2F1/renew?wait_ms=10&position=%33", segments, query));
  EXPECT_EQ(segments, (std::vector<std::string>{"v1", "leases", "L/1", "renew"}));
  EXPECT_EQ(query["wait_ms"], "10");
  EXPECT_EQ(query["position"], "3");
  for (const char* bad :
       {"", "v1/x", "/v1/%", "/v1/%4", "/v1/%zz", "/v1/%FF", "/v1/%0A", "/v1/\x7f", "/a?x=%FF"})
    EXPECT_FALSE(parseTarget(bad, segments, query)) << bad;
  EXPECT_TRUE(validUtf8("caf\xc3\xa9 \xf0\x9f\x98\x80"));
  for (const char* bad : {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc3", "\xff"})
    EXPECT_FALSE(validUtf8(bad)) << "overlong, surrogate, past U+10FFFF, truncated or invalid";
}

}  // namespace
}  // namespace poolrun::pool
