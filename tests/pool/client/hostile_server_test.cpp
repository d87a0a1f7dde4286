// Clients (poolrun, poolctl, node agents: one HttpPool) under servers that are not what they seem,
// on 127.0.0.1: a replica that redirects to another origin, replicas that refuse to the end of the
// failover budget. Each fake server is poold's own HTTP server with a handler of the test's.

#include <gtest/gtest.h>
#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "poolrun/pool/control.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/open_pool.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

constexpr const char* kToken = "tok-alice-0123456789";

// One fake server: answers with `answer` and remembers the Authorization of every request.
class FakeServer {
 public:
  explicit FakeServer(std::function<HttpReply(const HttpRequest&)> answer)
      : server_(HttpServerOptions{}, [this, answer](const HttpRequest& req) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            seen_.push_back(req.authorization);
          }
          return answer(req);
        }) {
    thread_ = std::thread([this] { server_.run(); });
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> seen_;
  HttpServer server_;
  std::thread thread_;
};

HttpReply redirectTo(const std::string& origin, const HttpRequest& req) {
  HttpReply r{307, json{{"error", "a standby"}, {"reason", "not_leader"}}.dump()};
  r.headers.push_back({"Location", origin + req.target});
  return r;
}

std::unique_ptr<PoolControl> client(const std::string& uri) {
  ClientOptions o;
  o.token = kToken;
  return openPoolControl(uri, o);
}

// A replica that redirects to an origin the user did not name: the client refuses, naming both,
// and the other origin never sees the token (nor any request). Another port of the same host is
// another origin.
TEST(RedirectedClient, NeverSendsItsTokenToAnotherOrigin) {
  FakeServer elsewhere([](const HttpRequest&) { return HttpReply{200, "[]"}; });
  FakeServer standby([&](const HttpRequest& req) { return redirectTo(elsewhere.url(), req); });
  try {
    client(standby.url())->leases();
    ADD_FAILURE() << "the redirect to " << elsewhere.url() << " was followed";
  } catch (const PoolError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(standby.url() + " redirected GET /v1/leases to '" + elsewhere.url() + "/v1/leases'"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("name it in --pool"), std::string::npos) << what;
  }
  EXPECT_TRUE(elsewhere.seen().empty()) << "a request reached the other origin";
  // Nor to another host named without a scheme ("//host:port/path"), nor to a URL that is no
  // http:// origin.
  const std::string elsewhereHost = elsewhere.url().substr(std::string("http:").size());
  FakeServer schemeless([&](const HttpRequest& req) {
    return HttpReply{307, "{}", "application/json", {{"Location", elsewhereHost + req.target}}};
  });
  EXPECT_THROW(client(schemeless.url())->leases(), PoolError);
  EXPECT_TRUE(elsewhere.seen().empty()) << "a request reached the other origin";
  FakeServer odd([](const HttpRequest&) {
    return HttpReply{307, "{}", "application/json", {{"Location", "ftp://x/"}}};
  });
  EXPECT_THROW(client(odd.url())->leases(), PoolError);
}

// Redirects to a replica the user named are followed, with the token; so are those to one that a
// named replica which leads lists as a replica of its pool.
TEST(RedirectedClient, FollowsRedirectsToNamedOrListedReplicas) {
  FakeServer leader([](const HttpRequest&) { return HttpReply{200, "[]"}; });
  FakeServer standby([&](const HttpRequest& req) { return redirectTo(leader.url(), req); });
  EXPECT_NO_THROW(client(standby.url() + "," + leader.url())->leases());
  ASSERT_FALSE(leader.seen().empty());
  EXPECT_EQ(leader.seen().back(), std::string("Bearer ") + kToken);

  // A named leader lists `unnamed`; the named standby redirects there.
  FakeServer unnamed([](const HttpRequest&) { return HttpReply{200, "[]"}; });
  FakeServer listing([&](const HttpRequest& req) {
    if (req.target == "/v1/replicas")
      return HttpReply{
          200, json{{"replicas", json::array({json{{"url", unnamed.url()}, {"leader", false}}})}}.dump()};
    return redirectTo(unnamed.url(), req);  // as if it had just lost the lead to `unnamed`
  });
  EXPECT_NO_THROW(client(listing.url())->leases());
  EXPECT_FALSE(unnamed.seen().empty());
}

// Replicas that refuse (no leader) are retried for the documented 15 s (docs/ha.md), not for the
// 30 s one attempt may take; the error says the budget and the last refusal.
TEST(RedirectedClient, TheFailoverBudgetIsTheDocumented15Seconds) {
  auto noLeader = [](const HttpRequest&) {
    return HttpReply{503, json{{"error", "no leader yet"}, {"reason", "no_leader"}}.dump()};
  };
  FakeServer a(noLeader), b(noLeader);
  try {
    client(a.url() + "," + b.url())->leases();
    ADD_FAILURE() << "a reply without a leader";
  } catch (const PoolError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("could answer within 15 s: "), std::string::npos) << what;
    EXPECT_NE(what.find("no leader yet"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace poolrun::pool
