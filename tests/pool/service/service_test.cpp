// PoolService: the policies poold's routes and the embedded pools share, on a PoolState.

#include "poolrun/pool/service.hpp"

#include <gtest/gtest.h>

#include "inventory.hpp"

namespace poolrun::pool {
namespace {

using test::addInventory;
using test::parseRequest;
using test::t0;

struct OwnerCase {
  Caller who;
  const char* asked;
  const char* expected;
};

TEST(PoolServiceTest, AnAdministratorMayActForAnotherOwnerAUserOnlyForItself) {
  const OwnerCase cases[] = {
      {{"alice", false}, "", "alice"},
      {{"alice", false}, "bob", "alice"},
      {{"root", true}, "", "root"},
      {{"root", true}, "bob", "bob"},
  };
  for (const OwnerCase& c : cases)
    EXPECT_EQ(PoolService(c.who).ownerOf(c.asked), c.expected) << c.who.owner << " asking for " << c.asked;
}

TEST(PoolServiceTest, OnlyAnAdministratorPassesRequireAdmin) {
  EXPECT_NO_THROW(PoolService({"root", true}).requireAdmin("drain nodes"));
  try {
    PoolService({"alice", false}).requireAdmin("drain nodes");
    FAIL() << "a user passed";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kForbidden);
    EXPECT_STREQ(e.what(), "owner alice (role user) may not drain nodes; an administrator may");
  }
}

TEST(PoolServiceTest, AnotherOwnersTicketIsForbiddenToAUser) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7", t0());
  LeaseRequest r = parseRequest("4 owner=bob");
  const SubmitResult sub = s.submit(r, t0(), true);
  ASSERT_GT(sub.ticket, 0);
  EXPECT_NO_THROW(PoolService({"bob", false}).requireTicketOwner(s, sub.ticket, "poll the queue ticket"));
  EXPECT_NO_THROW(PoolService({"root", true}).requireTicketOwner(s, sub.ticket, "poll the queue ticket"));
  EXPECT_NO_THROW(PoolService({"alice", false}).requireTicketOwner(s, 999, "poll the queue ticket"));
  EXPECT_THROW(PoolService({"alice", false}).requireTicketOwner(s, sub.ticket, "poll the queue ticket"),
               PoolError);
}

TEST(PoolServiceTest, ARetriedAcquireGetsItsFirstAnswerWhileItsLeaseOrTicketLives) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]", t0());
  const std::string granted = PoolService::requestKey("bob", "r1"),
                    queued = PoolService::requestKey("bob", "r2");
  EXPECT_EQ(granted, "bob/r1");
  EXPECT_FALSE(PoolService::retried(s, granted));
  EXPECT_FALSE(PoolService::retried(s, ""));

  const SubmitResult first = s.submit(parseRequest("8 owner=bob"), t0(), true);
  ASSERT_TRUE(first.lease);
  PoolService::remember(s, granted, first, t0());
  std::optional<SubmitResult> again = PoolService::retried(s, granted);
  ASSERT_TRUE(again && again->lease);
  EXPECT_EQ(again->lease->id, first.lease->id);

  const SubmitResult waiting = s.submit(parseRequest("2 owner=bob"), t0(), true);
  ASSERT_GT(waiting.ticket, 0);
  PoolService::remember(s, queued, waiting, t0());
  again = PoolService::retried(s, queued);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->lease);
  EXPECT_EQ(again->ticket, waiting.ticket);
  EXPECT_EQ(again->position, 1);

  // Once its lease has ended, a retry is a new request.
  s.release(first.lease->id, "bob", false, t0());
  EXPECT_FALSE(PoolService::retried(s, granted));
}

TEST(PoolServiceTest, ResumingANodeClearsItsFailuresDrainingKeepsThem) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 failed 1,3", t0());
  PoolService::setNodeState(s, "n01", NodeState::kDraining);
  EXPECT_EQ(s.nodeMap().at("n01").failed.size(), 2u);
  PoolService::setNodeState(s, "n01", NodeState::kUp);
  EXPECT_TRUE(s.nodeMap().at("n01").failed.empty());
  EXPECT_EQ(s.nodeMap().at("n01").state, NodeState::kUp);
}

TEST(PoolServiceTest, ANodesViewIsItsRegistration) {
  PoolState s;
  addInventory(s, "n01/gpu[0-3]@leaf1", t0());
  const topo::ClusterNode c = PoolService::clusterNode(s, "n01", "the pool");
  EXPECT_EQ(c.name, "n01");
  EXPECT_EQ(c.levels.switch_name, "leaf1");
  ASSERT_TRUE(c.topology);
  try {
    PoolService::clusterNode(s, "n09", "the pool");
    FAIL() << "an unknown node was found";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_STREQ(e.what(), "no node 'n09' in the pool (see `poolctl nodes`)");
  }
}

}  // namespace
}  // namespace poolrun::pool
