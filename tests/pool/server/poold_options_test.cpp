// poold's command line read into PooldOptions: values, defaults and refusals.

#include "poolrun/pool/poold_options.hpp"

#include <gtest/gtest.h>

#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;

TEST(PooldOptionsTest, ReadsValuesAndKeepsDefaults) {
  const PooldOptions o =
      parsePooldOptions({"--state", "/var/lib/poold", "--token-file", "tokens", "--listen", "0.0.0.0:8080",
                         "--insecure-http", "--sync", "full", "--threads", "8", "--heartbeat-interval", "10",
                         "--reclaim-idle", "--metrics-host", "a.example,b", "--cluster", "c.yaml"});
  EXPECT_EQ(o.action, PooldOptions::Action::kServe);
  EXPECT_EQ(o.server.state_dir, "/var/lib/poold");
  EXPECT_EQ(o.server.token_file, "tokens");
  EXPECT_EQ(o.server.host, "0.0.0.0");
  EXPECT_EQ(o.server.port, 8080);
  EXPECT_EQ(o.server.durability, Durability::kFull);
  EXPECT_EQ(o.server.threads, 8);
  EXPECT_TRUE(o.server.live.reclaim_idle);
  EXPECT_EQ(o.server.metrics_hosts, (std::vector<std::string>{"a.example", "b"}));
  EXPECT_EQ(o.cluster, "c.yaml");
  EXPECT_EQ(o.server.live.node_timeout, seconds(30));  // three heartbeat intervals
  EXPECT_EQ(o.store, "sqlite");
  EXPECT_EQ(o.etcd_prefix, "/poolrun");
  EXPECT_EQ(o.etcd_ttl, seconds(5));
  EXPECT_EQ(o.server.max_ttl, ServerOptions().max_ttl);
  EXPECT_EQ(o.server.usage.interval, seconds(60));
  EXPECT_EQ(o.server.usage.detail, seconds(30 * 86'400));
  EXPECT_EQ(o.server.usage.retention, seconds(400 * 86'400));
  const PooldOptions u = parsePooldOptions(
      {"--account-interval", "10", "--usage-detail", "86400", "--usage-retention", "172800"});
  EXPECT_EQ(u.server.usage.interval, seconds(10));
  EXPECT_EQ(u.server.usage.detail, seconds(86'400));
  EXPECT_EQ(u.server.usage.retention, seconds(172'800));
  EXPECT_EQ(o.server.usage.half_life, seconds(7 * 86'400));
  EXPECT_EQ(parsePooldOptions({"--fairshare-half-life", "3600"}).server.usage.half_life, seconds(3600));
}

TEST(PooldOptionsTest, HelpAndVersionStopTheReading) {
  EXPECT_EQ(parsePooldOptions({"--help", "--bogus"}).action, PooldOptions::Action::kHelp);
  EXPECT_EQ(parsePooldOptions({"-h"}).action, PooldOptions::Action::kHelp);
  EXPECT_EQ(parsePooldOptions({"--version"}).action, PooldOptions::Action::kVersion);
  EXPECT_NE(pooldUsage().find("usage: poold --state DIR --token-file FILE"), std::string::npos);
}

struct RefusalCase {
  std::vector<std::string> args;
  const char* message;  // a part of the error's text
};

TEST(PooldOptionsTest, RefusesWhatItCannotServe) {
  const RefusalCase cases[] = {
      {{"--bogus"}, "unknown option '--bogus'"},
      {{"--state"}, "--state needs a value"},
      {{"--listen", "8080"}, "--listen '8080': expected HOST:PORT"},
      {{"--sync", "sometimes"}, "--sync 'sometimes' (use normal or full)"},
      {{"--threads", "0"}, "--threads"},
      {{"--heartbeat-interval", "10", "--node-timeout", "10"}, "is not longer than the heartbeat interval"},
      {{"--metrics-host", "a b"}, "is not a host name"},
      {{"--etcd-prefix", "poolrun"}, "expected a key prefix such as /poolrun"},
      {{"--advertise", "https://x:1"}, "--advertise https://x:1 says https but this poold serves plain HTTP"},
      {{"--listen", "0.0.0.0:7450"},
       "--listen 0.0.0.0:7450 without TLS: bearer tokens would cross the network in clear; "
       "give --tls-cert FILE --tls-key FILE, or --insecure-http"},
      {{"--listen", "[::]:7450"}, "without TLS"},
      {{"--listen", "10.1.2.3:7450"}, "--listen 10.1.2.3:7450 without TLS"},
      {{"--tls-cert", "c.pem"}, "--tls-cert without --tls-key: give both"},
      {{"--tls-key", "k.pem"}, "--tls-key without --tls-cert: give both"},
      {{"--tls-client-ca", "ca.pem"}, "--tls-client-ca needs --tls-cert and --tls-key"},
      {{"--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, "/nonexistent/c.pem"},
      {{"--account-interval", "9"}, "--account-interval"},
      {{"--account-interval", "-60"}, "--account-interval"},
      {{"--account-interval", "86401"}, "--account-interval"},
      {{"--account-interval", "1m"}, "--account-interval"},
      {{"--usage-detail", "3600"}, "--usage-detail"},
      {{"--usage-retention", "99999999999999999999"}, "--usage-retention"},
      {{"--usage-detail", "864000", "--usage-retention", "86400"},
       "--usage-detail 864000 is longer than --usage-retention 86400"},
      {{"--fairshare-half-life", "59"}, "--fairshare-half-life"},
      {{"--fairshare-half-life", "-1"}, "--fairshare-half-life"},
      {{"--fairshare-half-life", "7d"}, "--fairshare-half-life"},
      {{"--fairshare-half-life", "99999999999999999999"}, "--fairshare-half-life"},
      {{"--accounts", "/nonexistent/accounts.toml"}, "--accounts: "},
  };
  for (const RefusalCase& c : cases) {
    try {
      parsePooldOptions(c.args);
      ADD_FAILURE() << c.args[0] << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

// A bad accounts file stops poold from starting, naming the file, the line and what is wrong.
TEST(PooldOptionsTest, ABadAccountsFileIsRefusedAtStart) {
  test::TempDir dir;
  const auto bad = dir.write("accounts.toml", "[accounts.a]\nparent = \"b\"\n[accounts.b]\nparent = \"a\"\n");
  try {
    parsePooldOptions({"--accounts", bad.string()});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("--accounts: " + bad.string() + ":1: the accounts' parents make a cycle"),
        std::string::npos)
        << e.what();
  }
  const auto good = dir.write("good.toml", "[accounts.a]\nusers = [\"alice\"]\n");
  EXPECT_EQ(parsePooldOptions({"--accounts", good.string()}).server.accounts_file, good);
}

// Plain HTTP is served without asking on loopback only: 127/8, ::1 and IPv4's loopback in IPv6.
TEST(PooldOptionsTest, PlainHttpOffLoopbackNeedsInsecureHttp) {
  for (const char* host : {"127.0.0.1:7450", "127.8.9.10:1", "::1:7450", "::ffff:127.0.0.1:7450"})
    EXPECT_NO_THROW(parsePooldOptions({"--listen", host})) << host;
  const PooldOptions o = parsePooldOptions({"--listen", "10.0.0.5:7450", "--insecure-http"});
  EXPECT_TRUE(o.insecure_http);
  EXPECT_EQ(o.server.host, "10.0.0.5");
}

}  // namespace
}  // namespace poolrun::pool
