// What PoolState reports of the leases it granted and ended (takeLeaseEvents), which poold's event
// log and counters go by: every way a lease starts or ends, in order, with the lease as it was.

#include <gtest/gtest.h>

#include "inventory.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/event_log.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;
using Kind = LeaseEvent::Kind;

using test::t0;

// "grant L1 alice", "expiry L2 bob (reason)": what each event says, in order.
std::vector<std::string> said(PoolState& s, TimePoint now) {
  std::vector<std::string> out;
  for (const LeaseEvent& e : s.takeLeaseEvents()) {
    nlohmann::ordered_json f = leaseEventFields(e, now);
    out.push_back(std::string(leaseEventKind(e.kind)) + " " + e.lease.id + " " + e.lease.owner +
                  (f.contains("reason") ? " (" + f["reason"].get<std::string>() + ")" : ""));
  }
  return out;
}

TEST(LeaseEvents, GrantsReleasesAndExpiriesInTheOrderTheyHappen) {
  PoolState s;
  test::addInventory(s, "n01/gpu[0-7]", t0());
  Lease a = *s.submit(test::parseRequest("4 owner=alice"), t0()).lease;
  LeaseRequest shortTtl = test::parseRequest("4 owner=bob");
  shortTtl.ttl = seconds(10);
  Lease b = *s.submit(shortTtl, t0()).lease;
  int64_t queued = s.submit(test::parseRequest("8 owner=carol"), t0()).ticket;
  ASSERT_GT(queued, 0);
  EXPECT_EQ(said(s, t0()), (std::vector<std::string>{"grant " + a.id + " alice", "grant " + b.id + " bob"}));
  EXPECT_TRUE(said(s, t0()).empty()) << "taken once";

  EXPECT_TRUE(s.release(a.id, "alice", false, t0() + seconds(1)));
  EXPECT_FALSE(s.release(a.id, "alice", false, t0() + seconds(1)));  // not held: nothing to report
  EXPECT_EQ(said(s, t0() + seconds(1)), std::vector<std::string>{"release " + a.id + " alice"});

  s.tick(t0() + seconds(11));  // bob's lease expires; carol's request starts on all 8 GPUs
  std::vector<std::string> got = said(s, t0() + seconds(11));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "expiry " + b.id + " bob (not renewed within its ttl of 10 s)");
  EXPECT_EQ(got[1].rfind("grant ", 0), 0u);
  EXPECT_NE(got[1].find(" carol"), std::string::npos) << got[1];
}

TEST(LeaseEvents, ARenewalTooLateAWithdrawnRequestAndAQuietClient) {
  PoolState s;
  test::addInventory(s, "n01/gpu[0-7]", t0());
  LeaseRequest r = test::parseRequest("8 owner=alice");
  r.ttl = seconds(10);
  Lease a = *s.submit(r, t0()).lease;
  int64_t withdrawn = s.submit(test::parseRequest("8 owner=bob"), t0()).ticket;
  int64_t quiet = s.submit(test::parseRequest("8 owner=carol"), t0()).ticket;
  s.takeLeaseEvents();
  EXPECT_THROW(s.renew(a.id, "alice", false, t0() + seconds(20)), PoolError);  // expired meanwhile
  std::vector<std::string> got = said(s, t0() + seconds(20));
  ASSERT_EQ(got.size(), 2u) << "the expiry, then bob's grant";
  EXPECT_EQ(got[0], "expiry " + a.id + " alice (not renewed within its ttl of 10 s)");
  std::string bobs = s.queueMap().at(withdrawn).lease_id;
  ASSERT_FALSE(bobs.empty());
  s.cancel(withdrawn, t0() + seconds(21));  // withdrawn after its lease was granted
  got = said(s, t0() + seconds(21));
  ASSERT_GE(got.size(), 1u);
  EXPECT_EQ(got[0], "release " + bobs + " bob (its queued request was withdrawn)");
  std::string carols = s.queueMap().at(quiet).lease_id;
  ASSERT_FALSE(carols.empty());
  s.tick(t0() + seconds(40));  // carol never polled: her lease goes with her request
  got = said(s, t0() + seconds(40));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "expiry " + carols + " carol (its queued client stopped polling)");
}

TEST(LeaseEvents, AnIdleLeaseReclaimedIsAReleaseSayingWhy) {
  PoolState s;
  LiveOptions o;
  o.idle_after = minutes(30);
  o.reclaim_idle = true;
  o.reclaim_grace = minutes(5);
  s.setLiveOptions(o);
  test::addInventory(s, "n01/gpu[0-7]", t0());
  test::registerAgent(s, "n01", t0());
  LeaseRequest r = test::parseRequest("8 owner=alice");
  r.ttl = minutes(60);
  Lease a = *s.submit(r, t0()).lease;
  s.takeLeaseEvents();
  for (int m = 0; m <= 40; m += 5) {
    s.heartbeat(test::heartbeatOf(s, "n01", 0.0), t0() + minutes(m));
    s.tick(t0() + minutes(m));
  }
  ASSERT_FALSE(s.leaseMap().count(a.id)) << "reclaimed";
  std::vector<std::string> got = said(s, t0() + minutes(40));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rfind("release " + a.id + " alice (reclaimed: its GPUs were idle", 0), 0u) << got[0];
}

}  // namespace
}  // namespace poolrun::pool
