// Nodes that join (membership.hpp): the rules of join tokens and node credentials, with a clock the
// test drives, and their records through the SQLite store and back.

#include "poolrun/pool/membership.hpp"

#include <gtest/gtest.h>

#include "inventory.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/pool/store.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::hours;
using std::chrono::seconds;
using test::t0;

// A distinct 64-hex-digit hash per letter.
std::string hash(char c) {
  return std::string(63, '0') + c;
}

// What a refusal says; "" where nothing was thrown.
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kForbidden) << e.what();
    return e.what();
  } catch (const Error& e) {
    return std::string("Error: ") + e.what();
  }
  return "";
}

TEST(Membership, ATokenJoinsOneNodeOnceAndTheSameJoinAgainIsDone) {
  PoolState s;
  s.addJoinToken(hash('a'), "root", t0(), hours(1));
  EXPECT_TRUE(s.joinNode(hash('a'), "n01", hash('1'), t0() + seconds(5)));
  // Its reply lost, the agent sends the same join again: done, and nothing changes.
  s.takeDirty();
  EXPECT_FALSE(s.joinNode(hash('a'), "n01", hash('1'), t0() + seconds(6)));
  EXPECT_TRUE(s.takeDirty().empty());
  const NodeCredential* c = s.membership().credentialOf(hash('1'));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->node, "n01");
  EXPECT_EQ(c->token, hash('a').substr(0, 12));
  // Another node, or the same node with another credential: the token is spent.
  std::string used = refusal([&] { s.joinNode(hash('a'), "n02", hash('2'), t0() + seconds(7)); });
  EXPECT_NE(used.find("was used already, by node n01"), std::string::npos) << used;
  EXPECT_NE(used.find("poolctl node-token create"), std::string::npos) << used;
  EXPECT_NE(refusal([&] { s.joinNode(hash('a'), "n01", hash('3'), t0() + seconds(7)); }), "");
  EXPECT_EQ(s.membership().credentialOf(hash('3')), nullptr);
}

TEST(Membership, AnExpiredOrUnknownTokenIsRefusedSayingWhatToDo) {
  PoolState s;
  s.addJoinToken(hash('a'), "root", t0(), seconds(60));
  std::string expired = refusal([&] { s.joinNode(hash('a'), "n01", hash('1'), t0() + seconds(60)); });
  EXPECT_NE(expired.find("expired at 2019-12-20T00:01:00.000Z (made by root)"), std::string::npos) << expired;
  std::string unknown = refusal([&] { s.joinNode(hash('b'), "n01", hash('1'), t0()); });
  EXPECT_NE(unknown.find("not one this pool made"), std::string::npos) << unknown;
  EXPECT_EQ(s.membership().credentialFor("n01"), nullptr);
}

TEST(Membership, ANameJoinsOnceUntilRevokedThenAgainWithANewToken) {
  PoolState s;
  s.addJoinToken(hash('a'), "root", t0(), hours(1));
  s.addJoinToken(hash('b'), "root", t0(), hours(1));
  s.addJoinToken(hash('c'), "root", t0(), hours(1));
  ASSERT_TRUE(s.joinNode(hash('a'), "n01", hash('1'), t0()));
  std::string taken = refusal([&] { s.joinNode(hash('b'), "n01", hash('2'), t0()); });
  EXPECT_NE(taken.find("node n01 joined already"), std::string::npos) << taken;
  EXPECT_NE(taken.find("poolctl node-token revoke n01"), std::string::npos) << taken;
  // The token the refused join sent is not spent.
  EXPECT_TRUE(s.membership().tokens().at(hash('b')).node.empty());
  // Another node may not take a credential that is n01's.
  EXPECT_NE(refusal([&] { s.joinNode(hash('b'), "n02", hash('1'), t0()); }), "");

  const NodeCredential& revoked = s.revokeNode("n01", "root", t0() + seconds(10));
  EXPECT_EQ(revoked.revoked_by, "root");
  ASSERT_NE(s.membership().credentialOf(hash('1')), nullptr);  // known, as revoked: its refusal says so
  EXPECT_EQ(s.membership().credentialOf(hash('1'))->revoked_by, "root");
  // A second revocation changes nothing; the same join again is no longer done.
  s.takeDirty();
  s.revokeNode("n01", "alice", t0() + seconds(20));
  EXPECT_TRUE(s.takeDirty().empty());
  EXPECT_EQ(s.membership().credentialFor("n01")->revoked_by, "root");
  EXPECT_NE(refusal([&] { s.joinNode(hash('a'), "n01", hash('1'), t0() + seconds(30)); }), "");
  // Joined again with a new token and credential: the old credential is forgotten.
  EXPECT_TRUE(s.joinNode(hash('b'), "n01", hash('2'), t0() + seconds(40)));
  EXPECT_EQ(s.membership().credentialOf(hash('1')), nullptr);
  EXPECT_EQ(s.membership().credentialOf(hash('2'))->node, "n01");
  EXPECT_TRUE(s.membership().credentialFor("n01")->revoked_by.empty());
  // A node that never joined cannot be revoked.
  EXPECT_THROW(s.revokeNode("n09", "root", t0()), Error);
}

TEST(Membership, LivesAndCountsAreBoundedAndOldTokensForgotten) {
  PoolState s;
  EXPECT_THROW(s.addJoinToken(hash('a'), "root", t0(), seconds(0)), Error);
  EXPECT_THROW(s.addJoinToken(hash('a'), "root", t0(), Membership::kMaxTokenLife + seconds(1)), Error);
  EXPECT_THROW(s.addJoinToken("not-a-hash", "root", t0(), hours(1)), Error);
  s.addJoinToken(hash('a'), "root", t0(), hours(1));
  EXPECT_THROW(s.addJoinToken(hash('a'), "root", t0(), hours(1)), Error);  // not random: a bug
  for (size_t i = 1; i < Membership::kMaxJoinTokens; ++i) {
    char digits[65];
    std::snprintf(digits, sizeof digits, "%064zx", i + 1000);
    s.addJoinToken(digits, "root", t0(), hours(1));
  }
  EXPECT_THROW(s.addJoinToken(hash('b'), "root", t0(), hours(1)), Error);
  // A day past their expiry, tokens are forgotten: room again, and each forgotten one deleted.
  s.takeDirty();
  s.addJoinToken(hash('b'), "root", t0() + hours(1) + Membership::kTokenMemory + seconds(1), hours(1));
  EXPECT_EQ(s.membership().tokens().size(), 1u);
  EXPECT_EQ(s.takeDirty().join_tokens.size(), Membership::kMaxJoinTokens + 1);
}

TEST(Membership, TokensAndCredentialsSurviveTheStateFile) {
  test::TempDir dir;
  PoolState s;
  s.addJoinToken(hash('a'), "root", t0(), hours(1));
  s.addJoinToken(hash('b'), "alice", t0(), hours(2));
  s.joinNode(hash('a'), "n01", hash('1'), t0() + seconds(5));
  s.addJoinToken(hash('c'), "root", t0(), hours(1));
  s.joinNode(hash('c'), "n02", hash('2'), t0() + seconds(6));
  s.revokeNode("n02", "root", t0() + seconds(7));
  {
    Store store(dir.path() / "pool.sqlite", Durability::kNormal);
    store.begin();
    store.write(s, s.takeDirty());
    store.commit();
  }
  Store store(dir.path() / "pool.sqlite", Durability::kNormal);
  PoolState loaded;
  store.load(loaded);
  EXPECT_EQ(loaded.membership().tokens(), s.membership().tokens());
  EXPECT_EQ(loaded.membership().credentials(), s.membership().credentials());
  EXPECT_EQ(loaded.membership().credentialOf(hash('1'))->node, "n01");
  // The same join again is still done after the restart.
  EXPECT_FALSE(loaded.joinNode(hash('a'), "n01", hash('1'), t0() + seconds(8)));
}

}  // namespace
}  // namespace poolrun::pool
