// Users known by MUNGE, end to end on one machine: a private munged (its own key and socket), a
// real poold with --munge and --admin-group, users made for the test, and poolctl run as each of
// them without a token. And each credential poold must refuse: replayed, expired, for another
// request, sealed with another key, for a UID with no name, or sent to a poold without --munge.

#include <unistd.h>

#include <gtest/gtest.h>
#include <pwd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "poold_process.hpp"
#include "poolrun/common/http_connection.hpp"
#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/munge.hpp"
#include "support/munge_daemon.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A credential made by `munge` (the program) through the daemon at `socket` for `payload`.
std::string credential(const std::string& socket, const std::string& payload, const std::string& extra = "") {
  ProcessResult r = runShell("/usr/bin/munge --socket " + socket + " --string '" + payload + "' " + extra);
  EXPECT_EQ(r.status, 0) << r.err;
  std::string out = r.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

HttpResponse getWith(int port, const std::string& path, const std::string& authorization) {
  HttpConnection c("127.0.0.1", port, "");
  c.setAuthorization(authorization);
  return c.request("GET", path, "");
}

struct MungePool {
  MungeDaemon munged;
  TestUsers users;
  std::string alice = users.addUser("prt-alice");
  std::string bob = users.addUser("prt-bob");
  std::string carol = users.addUser("prt-carol");
  std::string admins = users.addGroup("prt-admins", {carol});
  TempDir dir;
  std::unique_ptr<PooldProcess> poold;

  MungePool() {
    ::chmod(dir.path().c_str(), 0711);
    poold = std::make_unique<PooldProcess>(
        dir.path() / "state", dir.writeSecret("tokens", kTokens),
        std::vector<std::string>{"--munge", "--munge-socket", munged.socket(), "--admin-group", admins,
                                 "--cluster", hgxCluster()});
  }
  // poolctl as `user`, with no token: its credential is munged's.
  ProcessResult poolctl(const std::string& user, const std::string& args) {
    return runShell(users.as(user, "POOLRUN_MUNGE_SOCKET=" + munged.socket() + " " + POOLCTL_BINARY +
                                       " --pool " + poold->uri() + " " + args));
  }
};

TEST(Munge, UsersNeedNoTokenActOnTheirOwnLeasesAndTheAdminGroupOnAnyWithAnAuditTrail) {
  POOLRUN_TEST_REQUIRE_MUNGE();
  MungePool pool;
  ProcessResult r = pool.poolctl(pool.alice, "--json acquire -n 2 --ttl 120");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json lease = nlohmann::json::parse(r.out);
  EXPECT_EQ(lease.value("owner", ""), pool.alice) << "the lease is the credential's user's";
  const std::string id = lease.value("id", "");

  r = pool.poolctl(pool.bob, "release " + id);
  EXPECT_EQ(r.status, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("(403)"), std::string::npos) << r.err;
  r = pool.poolctl(pool.bob, "drain hgx01");
  EXPECT_EQ(r.status, 4) << "bob is not in " << pool.admins << ": " << r.err;

  r = pool.poolctl(pool.carol, "release " + id);
  EXPECT_EQ(r.status, 0) << "carol is in " << pool.admins << ": " << r.err;
  r = pool.poolctl(pool.carol, "drain hgx01");
  EXPECT_EQ(r.status, 0) << r.err;
  r = pool.poolctl(pool.carol, "resume hgx01");
  EXPECT_EQ(r.status, 0) << r.err;
  r = pool.poolctl(pool.carol, "fail hgx02:3");
  EXPECT_EQ(r.status, 0) << r.err;

  // The audit trail: who, how, from where, for each administrator's action.
  bool released = false, drained = false, resumed = false, failed = false;
  for (int i = 0; i < 50 && !(released && drained && resumed && failed); ++i) {
    std::ifstream log(pool.dir.path() / "state" / "events.jsonl");
    for (std::string line; std::getline(log, line);) {
      const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_discarded()) continue;
      const bool audited = e.value("by", "") == pool.carol && e.value("auth", "") == "munge" &&
                           e.value("from", "") == "127.0.0.1";
      released = released || (e.value("kind", "") == "lease_released_by_admin" &&
                              e.value("owner", "") == pool.alice && e.value("lease", "") == id && audited);
      const bool hgx01 = e.value("kind", "") == "node_state" && e.value("node", "") == "hgx01" && audited;
      drained = drained || (hgx01 && e.value("state", "") == "draining");
      resumed = resumed || (hgx01 && e.value("state", "") == "up");
      failed = failed || (e.value("kind", "") == "gpu_failed" && e.value("node", "") == "hgx02" &&
                          e.value("index", -1) == 3 && audited);
    }
    if (!(released && drained && resumed && failed)) std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(released) << slurp(pool.dir.path() / "state" / "events.jsonl");
  EXPECT_TRUE(drained) << slurp(pool.dir.path() / "state" / "events.jsonl");
  EXPECT_TRUE(resumed) << slurp(pool.dir.path() / "state" / "events.jsonl");
  EXPECT_TRUE(failed) << slurp(pool.dir.path() / "state" / "events.jsonl");

  // poolrun as alice, with no token either: her job's lease is hers (its grant event names her).
  const std::filesystem::path home = pool.dir.path() / "alice-home";
  std::filesystem::create_directories(home);
  const struct passwd* pw = getpwnam(pool.alice.c_str());
  ASSERT_NE(pw, nullptr);
  ASSERT_EQ(::chown(home.c_str(), pw->pw_uid, pw->pw_gid), 0);
  const ProcessResult job = runShell(
      pool.users.as(pool.alice, "HOME=" + home.string() + " POOLRUN_MUNGE_SOCKET=" + pool.munged.socket() +
                                    " " + POOLRUN_BINARY + " --pool " + pool.poold->uri() +
                                    " --simulate --no-doctor -n 2 --name munge-job -- /bin/true"));
  EXPECT_EQ(job.status, 0) << job.out << job.err;
  bool granted = false;
  std::ifstream log(pool.dir.path() / "state" / "events.jsonl");
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    granted = granted || (e.is_object() && e.value("kind", "") == "grant" &&
                          e.value("owner", "") == pool.alice && e.value("job", "") == "munge-job");
  }
  EXPECT_TRUE(granted) << slurp(pool.dir.path() / "state" / "events.jsonl");

  // Tokens still work beside MUNGE.
  const std::string token = pool.dir.writeSecret("alice-token", "tok-alice-0123456789\n").string();
  EXPECT_EQ(runShell(std::string(POOLCTL_BINARY) + " --pool " + pool.poold->uri() + " --token-file " + token +
                     " status")
                .status,
            0);
}

TEST(Munge, EachBadCredentialIsRefusedSayingWhyAndPooldServesOn) {
  POOLRUN_TEST_REQUIRE_MUNGE();
  MungePool pool;
  const int port = pool.poold->port();
  const std::string socket = pool.munged.socket();

  // Good, then replayed.
  const std::string cred = credential(socket, "poolrun GET /v1/status");
  EXPECT_EQ(getWith(port, "/v1/status", "MUNGE " + cred).status, 200);
  HttpResponse r = getWith(port, "/v1/status", "MUNGE " + cred);
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("used before (replayed): each request needs a new one"), std::string::npos) << r.body;

  // A connection's later requests are its first request's user's; a connection that sent no
  // credential (or another connection) is not.
  {
    HttpConnection c("127.0.0.1", port, "");
    c.setAuthorization("MUNGE " + credential(socket, "poolrun GET /v1/status"));
    EXPECT_EQ(c.request("GET", "/v1/status", "").status, 200);
    c.setAuthorization("MUNGE-CONNECTION");
    EXPECT_EQ(c.request("GET", "/v1/leases", "").status, 200);
    EXPECT_EQ(c.request("GET", "/v1/status", "").status, 200);
  }
  r = getWith(port, "/v1/status", "MUNGE-CONNECTION");
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("no MUNGE credential on this connection yet"), std::string::npos) << r.body;
  {
    HttpConnection c("127.0.0.1", port, "");
    c.setAuthorization("MUNGE " + cred);  // replayed: refused, and the connection is no one's
    EXPECT_EQ(c.request("GET", "/v1/status", "").status, 401);
    c.setAuthorization("MUNGE-CONNECTION");
    EXPECT_EQ(c.request("GET", "/v1/status", "").status, 401);
  }

  // Made for another request.
  r = getWith(port, "/v1/leases", "MUNGE " + credential(socket, "poolrun GET /v1/status"));
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("made for another request ('poolrun GET /v1/status'), not for GET /v1/leases"),
            std::string::npos)
      << r.body;

  // Expired: a TTL of one second, two seconds ago.
  const std::string shortLived = credential(socket, "poolrun GET /v1/status", "--ttl 1");
  std::this_thread::sleep_for(milliseconds(2200));
  r = getWith(port, "/v1/status", "MUNGE " + shortLived);
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("has expired"), std::string::npos) << r.body;

  // Sealed with another key (another realm's munged).
  MungeDaemon other;
  r = getWith(port, "/v1/status", "MUNGE " + credential(other.socket(), "poolrun GET /v1/status"));
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("made with another key"), std::string::npos) << r.body;

  // Not a credential at all, huge, and not UTF-8: refused before munged sees it.
  for (const std::string& junk :
       {std::string("not a credential!"), std::string(100000, 'A'), std::string("\xff\xfe")}) {
    r = getWith(port, "/v1/status", "MUNGE " + junk);
    EXPECT_TRUE(r.status == 401 || r.status == 431 || r.status == 400)
        << r.status << " " << r.body.substr(0, 200);
  }

  // A UID with no name in poold's password database.
  ProcessResult nameless = runShell(
      "/usr/bin/setpriv --reuid=54321 --regid=54321 --clear-groups env HOME=/nonexistent "
      "POOLRUN_MUNGE_SOCKET=" +
      socket + " " + POOLCTL_BINARY + " --pool " + pool.poold->uri() + " status");
  EXPECT_EQ(nameless.status, 4) << nameless.err;
  EXPECT_NE(nameless.err.find("uid 54321 (of the MUNGE credential) has no name in poold's password database"),
            std::string::npos)
      << nameless.err;

  // poolctl with no munged to ask: the refusal says why no credential went.
  ProcessResult noDaemon = runShell("POOLRUN_MUNGE_SOCKET=/nonexistent/socket " +
                                    std::string(POOLCTL_BINARY) + " --pool " + pool.poold->uri() + " status");
  EXPECT_EQ(noDaemon.status, 4) << noDaemon.err;
  EXPECT_NE(
      noDaemon.err.find("no token given, and no MUNGE credential: cannot make a MUNGE credential through "
                        "munged at /nonexistent/socket"),
      std::string::npos)
      << noDaemon.err;

  EXPECT_EQ(getWith(port, "/v1/status", "MUNGE " + credential(socket, "poolrun GET /v1/status")).status, 200)
      << "poold serves on";

  // A poold that takes no MUNGE credentials says so.
  TempDir dir;
  PooldProcess plain(dir.path() / "state", dir.writeSecret("tokens", kTokens));
  r = getWith(plain.port(), "/v1/status", "MUNGE " + credential(socket, "poolrun GET /v1/status"));
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("this poold takes no MUNGE credentials (poold --munge)"), std::string::npos)
      << r.body;
}

// A client whose connection's MUNGE user poold no longer knows (it forgot it, or another poold
// answers there now) makes a new connection, whose first request carries a credential.
TEST(Munge, AClientWhoseConnectionIsForgottenSendsACredentialOnANewOne) {
  POOLRUN_TEST_REQUIRE_MUNGE();
  MungeDaemon munged;
  std::mutex mu;
  std::vector<std::string> seen;  // each request's Authorization, its credential as "MUNGE"
  pool::HttpServerOptions o;
  pool::HttpServer forgetful(o, [&](const pool::HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(r.authorization.rfind("MUNGE ", 0) == 0 ? "MUNGE" : r.authorization);
    if (r.authorization == pool::kMungeSameConnection)
      return pool::refusal("unauthorized", "no MUNGE credential on this connection yet");
    return pool::HttpReply{200, "[]", "application/json"};
  });
  std::thread network([&] { forgetful.run(); });
  pool::ClientOptions options;
  options.munge_socket = munged.socket();
  const std::string uri = "http://127.0.0.1:" + std::to_string(forgetful.port());
  auto client = pool::openHttpPool(uri, pool::parseHttpReplicas(uri), options);
  EXPECT_NO_THROW(client->leases());
  EXPECT_NO_THROW(client->leases()) << "the forgotten connection was not replaced";
  forgetful.stop();
  network.join();
  EXPECT_EQ(seen, (std::vector<std::string>{"MUNGE", pool::kMungeSameConnection, "MUNGE"}));
}

TEST(Munge, PooldRefusesAnAdminGroupThatDoesNotExist) {
  POOLRUN_TEST_REQUIRE_MUNGE();
  ProcessResult r =
      runShell(std::string(POOLD_BINARY) +
               " --state /nonexistent --token-file /nonexistent --munge --admin-group no-such-group-9z");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--admin-group no-such-group-9z: no such group"), std::string::npos) << r.err;
  r = runShell(std::string(POOLD_BINARY) + " --state /nonexistent --token-file /nonexistent --admin-group x");
  EXPECT_NE(r.err.find("--admin-group is for MUNGE users: give --munge too"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace poolrun::test
