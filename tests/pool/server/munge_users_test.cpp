// MungeUsers with a Munge that answers as the test says and a clock the test moves: what each
// decode status tells the client, and how long a connection's user is remembered (from its last
// request, not its first).

#include "poolrun/pool/munge_users.hpp"

#include <gtest/gtest.h>

namespace poolrun::pool {
namespace {

using namespace std::chrono_literals;

// Decodes "good" as root's credential for GET /v1/status; other texts as the status they name.
class FakeMunge final : public Munge {
 public:
  std::string encode(const std::string&, const std::string&) const override { return "good"; }
  MungeIdentity decode(const std::string& credential, const std::string&) const override {
    MungeIdentity id;
    id.message = "fake says " + credential;
    id.payload = mungePayload("GET", "/v1/status");
    if (credential == "good") id.status = MungeIdentity::Status::kOk;
    if (credential == "replayed") id.status = MungeIdentity::Status::kReplayed;
    if (credential == "invalid") id.status = MungeIdentity::Status::kInvalid;
    if (credential == "down") id.status = MungeIdentity::Status::kNoDaemon;
    if (credential == "stranger") {
      id.status = MungeIdentity::Status::kOk;
      id.uid = 4000000000u;  // no such user
    }
    return id;
  }
};

struct Clocked {
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  MungeUsers users{std::make_shared<FakeMunge>(), "", "", 60s, [this] { return now; }};
};

TEST(MungeUsers, AConnectionsUserIsRememberedFromItsLastRequest) {
  Clocked c;
  auto who = c.users.identify("good", "GET", "/v1/status", 7);
  ASSERT_TRUE(std::holds_alternative<Caller>(who));
  EXPECT_EQ(std::get<Caller>(who).owner, "root");
  EXPECT_EQ(std::get<Caller>(who).via, "munge");
  c.now += 50s;
  ASSERT_TRUE(c.users.ofConnection(7));
  c.now += 50s;  // 100 s after the credential, 50 s after the last request
  ASSERT_TRUE(c.users.ofConnection(7)) << "a connection in use is remembered again at each request";
  EXPECT_EQ(c.users.ofConnection(7)->owner, "root");
  c.now += 61s;
  EXPECT_FALSE(c.users.ofConnection(7)) << "not used for longer than the memory";
  EXPECT_FALSE(c.users.ofConnection(8)) << "another connection";
  c.users.identify("good", "GET", "/v1/status", 0);
  EXPECT_FALSE(c.users.ofConnection(0)) << "no connection (a request outside a server)";
}

TEST(MungeUsers, EachRefusalSaysWhyAndRemembersNothing) {
  Clocked c;
  auto refused = [&](const std::string& credential, const std::string& method = "GET",
                     const std::string& target = "/v1/status") {
    auto r = c.users.identify(credential, method, target, 9);
    EXPECT_TRUE(std::holds_alternative<MungeRefusal>(r)) << credential;
    return std::holds_alternative<MungeRefusal>(r) ? std::get<MungeRefusal>(r) : MungeRefusal{};
  };
  EXPECT_NE(refused("replayed").message.find("used before (replayed)"), std::string::npos);
  EXPECT_NE(refused("invalid").message.find("made with another key"), std::string::npos);
  EXPECT_EQ(refused("down").reason, "error");
  EXPECT_NE(refused("stranger").message.find("uid 4000000000 (of the MUNGE credential) has no name"),
            std::string::npos);
  EXPECT_NE(refused("good", "DELETE", "/v1/leases/L1").message.find("made for another request"),
            std::string::npos);
  for (const std::string& junk :
       {std::string(), std::string(5000, 'A'), std::string("a b"), std::string("\xff")})
    EXPECT_NE(refused(junk).message.find("malformed"), std::string::npos) << junk.size();
  EXPECT_FALSE(c.users.ofConnection(9));
}

}  // namespace
}  // namespace poolrun::pool
