// What operators expect of poold, without the network: label values escaped, the address list of
// --metrics-allow, the scrape token file, the lease counters and GPU-seconds per owner, /healthz
// and the 401 a refused token gets (PoolServer::handle).

#include <unistd.h>

#include <gtest/gtest.h>

#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/server.hpp"
#include "poolrun/pool/server_metrics.hpp"
#include "poolrun/pool/tokens.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using namespace std::chrono_literals;

TEST(LabelValue, EscapesBackslashQuoteAndNewline) {
  EXPECT_EQ(labelValue("alice"), "alice");
  EXPECT_EQ(labelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST(AddressRange, AcceptsAddressesAndPrefixesOfBothFamilies) {
  EXPECT_EQ(parseAddressRange("10.0.0.0/8", "--metrics-allow").prefix, 8);
  EXPECT_EQ(parseAddressRange("127.0.0.1", "--metrics-allow").prefix, 32);
  EXPECT_EQ(parseAddressRange("::1/128", "--metrics-allow").prefix, 128);
  EXPECT_TRUE(parseAddressRange("fe80::/10", "--metrics-allow").v6);
  AddressRange mapped = parseAddressRange("::ffff:10.0.0.0/104", "--metrics-allow");
  EXPECT_FALSE(mapped.v6);
  EXPECT_EQ(mapped.prefix, 8);
  EXPECT_EQ(parseAddressRanges("127.0.0.1/32,::1/128,10.0.0.0/8", "--metrics-allow").size(), 3u);
}

TEST(AddressRange, RefusesBadValuesNamingThem) {
  for (const char* bad : {"10.0.0.1/8", "10.0.0.0/33", "::1/129", "abc", "10.0.0.0/", "/8", "10.0.0.0/x",
                          "300.1.1.1", "10.0.0.0/-1"}) {
    try {
      parseAddressRange(bad, "--metrics-allow");
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  try {
    parseAddressRange("10.0.0.1/8", "--metrics-allow");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 10.0.0.0/8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parseAddressRanges("10.0.0.0/8,", "--metrics-allow"), Error);
  EXPECT_THROW(parseAddressRanges("", "--metrics-allow"), Error);
}

TEST(AddressRange, MatchesPeersByPrefix) {
  auto in = [](const std::string& peer, const std::string& range) {
    return addressIn(peer, parseAddressRange(range, "--metrics-allow"));
  };
  EXPECT_TRUE(in("127.0.0.1", "127.0.0.1/32"));
  EXPECT_FALSE(in("127.0.0.2", "127.0.0.1/32"));
  EXPECT_TRUE(in("10.200.3.4", "10.0.0.0/8"));
  EXPECT_FALSE(in("11.0.0.1", "10.0.0.0/8"));
  EXPECT_TRUE(in("10.0.0.129", "10.0.0.128/25"));
  EXPECT_FALSE(in("10.0.0.127", "10.0.0.128/25"));
  EXPECT_TRUE(in("::ffff:127.0.0.1", "127.0.0.0/8")) << "an IPv4 client of a dual-stack socket";
  EXPECT_TRUE(in("::1", "::1/128"));
  EXPECT_FALSE(in("::1", "127.0.0.1/32"));
  EXPECT_FALSE(in("127.0.0.1", "::1/128"));
  EXPECT_TRUE(in("1.2.3.4", "0.0.0.0/0"));
  EXPECT_FALSE(in("::2", "0.0.0.0/0"));
  EXPECT_TRUE(in("fe80::1%2", "fe80::/10"));
  EXPECT_FALSE(in("not an address", "0.0.0.0/0"));
}

TEST(ScrapeToken, IsTheFirstWordOfTheFirstLineThatIsNotAComment) {
  test::TempDir dir;
  EXPECT_EQ(readScrapeToken(dir.write("t", "# scrape token\n\n  scrape-0123456789  # for prometheus\nx\n")),
            "scrape-0123456789");
  for (const char* bad : {"# nothing\n", "", "short\n"}) {
    try {
      readScrapeToken(dir.write("bad", bad));
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad"), std::string::npos) << "names the file: " << e.what();
    }
  }
}

Lease lease(const std::string& owner, int gpus, TimePoint created) {
  Lease l;
  l.id = "L-" + owner;
  l.owner = owner;
  for (int i = 0; i < gpus; ++i) l.gpus.push_back({"n01", static_cast<size_t>(i)});
  l.created = created;
  return l;
}

TEST(ServerMetrics, CountsReleasesAndExpiriesAndShowsTheLedgersGpuSecondsNeverLess) {
  ServerMetrics m;
  const TimePoint start = std::chrono::system_clock::now();
  m.observeLease({LeaseEvent::Kind::kReleased, lease("alice", 8, start - 3600s), {}});
  m.observeLease({LeaseEvent::Kind::kExpired, lease("bob", 2, start + 1s), {}});
  m.observeLease({LeaseEvent::Kind::kGranted, lease("carol", 1, start), {}});
  m.observeLease({LeaseEvent::Kind::kGrown, lease("carol", 2, start), {}});
  std::map<std::string, int64_t> ms = m.gpuMillis({{"alice", 80.0004}, {"bob", 46.0}});
  EXPECT_EQ(ms["alice"], 80'000);
  EXPECT_EQ(ms["bob"], 46'000);
  EXPECT_FALSE(ms.count("carol")) << "not in the ledger";
  // Never less than before for an owner (the ledger's running rows counted up to a clock that
  // stepped back).
  std::map<std::string, int64_t> back = m.gpuMillis({{"alice", 79.0}, {"bob", 47.0}});
  EXPECT_EQ(back["alice"], 80'000);
  EXPECT_EQ(back["bob"], 47'000);
  // The ledger's use and energy, each never less than before.
  UsageTotals alice{.name = "alice", .used_s = 12.5, .energy_j = 5000};
  std::string usage = m.renderUsage({{"alice", alice}});
  EXPECT_NE(usage.find("# TYPE poolrun_gpu_used_seconds_total "
                       "counter\npoolrun_gpu_used_seconds_total{owner=\"alice\"} 12.500\n"),
            std::string::npos)
      << usage;
  EXPECT_NE(usage.find("poolrun_gpu_energy_joules_total{owner=\"alice\"} 5000.000\n"), std::string::npos)
      << usage;
  alice.energy_j = 4000;
  usage = m.renderUsage({{"alice", alice}});
  EXPECT_NE(usage.find("poolrun_gpu_energy_joules_total{owner=\"alice\"} 5000.000\n"), std::string::npos)
      << usage;

  std::string text = m.render(PoolStatus{}, HttpServerStats{}, {{"bob", 46'000}, {"a\"b", 1}});
  EXPECT_NE(text.find("poolrun_lease_releases_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("poolrun_lease_expiries_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("poolrun_gpu_seconds_total{owner=\"bob\"} 46.000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("poolrun_gpu_seconds_total{owner=\"a\\\"b\"} 0.001\n"), std::string::npos) << text;
  EXPECT_NE(text.find("poolrun_build_info{version=\""), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds "),
            std::string::npos);
}

class Served : public ::testing::Test {
 protected:
  Served() {
    ServerOptions o;
    o.state_dir = dir_.path() / "state";
    o.token_file = dir_.writeSecret("tokens", "tok-alice-0123456789 alice user\n");
    server_ = std::make_unique<PoolServer>(o);
  }
  HttpReply get(const std::string& path, const std::string& authorization = "") {
    HttpRequest r;
    r.method = "GET";
    r.target = path;
    std::map<std::string, std::string> query;
    parseTarget(path, r.segments, query);
    r.authorization = authorization;
    r.peer = "127.0.0.1";
    return server_->handle(r);
  }
  test::TempDir dir_;
  std::unique_ptr<PoolServer> server_;
};

TEST_F(Served, HealthzAnswersOkWithoutATokenAnd503OnceStopping) {
  HttpReply r = get("/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");
  EXPECT_EQ(r.content_type.rfind("text/plain", 0), 0u) << r.content_type;
  server_->stop();
  r = get("/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "poold is stopping\n");
}

TEST_F(Served, A401CarriesWwwAuthenticateAndNoPartOfTheToken) {
  const std::string token = "Zq7Xw3Vr9Kp2Mn8Bt4Yc6Hd1Jf5Lg0Qs";
  for (const std::string& auth : {"Bearer " + token, std::string(), "Basic " + token}) {
    HttpReply r = get("/v1/status", auth);
    EXPECT_EQ(r.status, 401);
    ASSERT_EQ(r.headers.size(), 1u);
    EXPECT_EQ(r.headers[0].first, "WWW-Authenticate");
    EXPECT_EQ(r.headers[0].second, "Bearer realm=\"poold\"");
    for (size_t i = 0; i + 4 <= token.size(); ++i)
      EXPECT_EQ(r.body.find(token.substr(i, 4)), std::string::npos) << "echoes part of the token: " << r.body;
  }
  EXPECT_NE(get("/v1/status", "Bearer " + token).body.find("the token sent is not in poold's token file"),
            std::string::npos);
  EXPECT_TRUE(get("/v1/status", "Bearer tok-alice-0123456789").headers.empty());
}

// An allowed address reads /metrics without a token only where its Host names this poold: a page
// of another site, its name rebound to poold's address (DNS rebinding), sends its own name. A token
// reads it whatever the Host.
TEST(MetricsAllow, TheHostMustNamePoold) {
  test::TempDir dir;
  ServerOptions o;
  o.state_dir = dir.path() / "state";
  o.token_file = dir.write("tokens", "tok-alice-0123456789 alice user\n");
  o.metrics_allow = {"127.0.0.1/32,::1/128"};
  o.metrics_hosts = {"Head.Example.Org"};
  PoolServer server(o);
  auto scrape = [&](const std::string& host, const std::string& authorization = "",
                    const std::string& peer = "127.0.0.1") {
    HttpRequest r;
    r.method = "GET";
    r.target = "/metrics";
    std::map<std::string, std::string> query;
    parseTarget(r.target, r.segments, query);
    r.host = host;
    r.authorization = authorization;
    r.peer = peer;
    return server.handle(r);
  };
  for (const std::string host : {"127.0.0.1:7450", "127.0.0.1", "localhost:7450", "LOCALHOST", "[::1]:7450",
                                 "10.1.2.3:7450", "head.example.org:7450", "head.example.org.", ""}) {
    HttpReply r = scrape(host);
    EXPECT_EQ(r.status, 200) << host << ": " << r.body;
  }
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(scrape(std::string(name) + ":7450").status, 200) << "this machine's name: " << name;
  for (const std::string host : {"rebound.attacker.example:7450", "rebound.attacker.example", "head.example",
                                 "[::1", "127.0.0.1.attacker.example", "localhost.attacker.example"}) {
    HttpReply r = scrape(host);
    EXPECT_EQ(r.status, 403) << host << ": " << r.body;
    EXPECT_NE(r.body.find("--metrics-host"), std::string::npos) << r.body;
  }
  EXPECT_NE(scrape("rebound.attacker.example:7450").body.find("'rebound.attacker.example:7450'"),
            std::string::npos);
  EXPECT_EQ(scrape("rebound.attacker.example", "Bearer tok-alice-0123456789").status, 200) << "a token";
  EXPECT_EQ(scrape("127.0.0.1", "", "10.0.0.1").status, 401) << "not an allowed address";
}

// A standby's /metrics (it has no PoolServer): the leader's access rules, and its own series.
TEST(StandbyMetrics, TakesTheLeadersAccessRulesAndServesItsOwnSeries) {
  test::TempDir dir;
  TokenStore tokens(dir.write("tokens", "tok-alice-0123456789 alice user\n"), [](const std::string&) {});
  MetricsAccess access(dir.write("scrape", "scrape-0123456789\n"), parseAddressRanges("10.0.0.0/8", "x"),
                       {"head"}, [](const std::string&) {});
  EtcdMemberStatus up, down;
  up.endpoint = "e1:2379";
  up.reachable = true;
  up.db_size = 4096;
  down.endpoint = "e2:2379";
  const std::string series = replicaSeries(false, {up, down});
  EXPECT_NE(series.find("\npoolrun_leader 0\n"), std::string::npos) << series;
  EXPECT_NE(series.find("\npoolrun_etcd_member_up{endpoint=\"e1:2379\"} 1\n"), std::string::npos) << series;
  EXPECT_NE(series.find("\npoolrun_etcd_member_up{endpoint=\"e2:2379\"} 0\n"), std::string::npos) << series;
  EXPECT_NE(series.find("\npoolrun_etcd_db_size_bytes{endpoint=\"e1:2379\"} 4096\n"), std::string::npos);
  EXPECT_EQ(series.find("poolrun_etcd_db_size_bytes{endpoint=\"e2:2379\"}"), std::string::npos);
  auto scrape = [&](const std::string& peer, const std::string& host, const std::string& authorization,
                    const std::string& method = "GET") {
    HttpRequest r;
    r.method = method;
    r.target = "/metrics";
    r.segments = {"metrics"};
    r.peer = peer;
    r.host = host;
    r.authorization = authorization;
    return standbyMetricsReply(r, access, tokens, [] { return std::string("poolrun_leader 0\n"); });
  };
  EXPECT_EQ(scrape("10.1.2.3", "head:7450", "").status, 200);
  EXPECT_EQ(scrape("10.1.2.3", "head:7450", "").body, "poolrun_leader 0\n");
  EXPECT_EQ(scrape("10.1.2.3", "rebound.attacker.example", "").status, 403);
  EXPECT_EQ(scrape("192.0.2.1", "head", "Bearer scrape-0123456789").status, 200);
  EXPECT_EQ(scrape("192.0.2.1", "head", "Bearer tok-alice-0123456789").status, 200);
  HttpReply none = scrape("192.0.2.1", "head", "");
  EXPECT_EQ(none.status, 401);
  ASSERT_EQ(none.headers.size(), 1u);
  EXPECT_EQ(none.headers[0].second, "Bearer realm=\"poold\"");
  EXPECT_EQ(scrape("192.0.2.1", "head", "Bearer tok-nobody-0123456789").status, 401);
  EXPECT_EQ(scrape("10.1.2.3", "head", "", "POST").status, 405);
}

}  // namespace
}  // namespace poolrun::pool
