// Reservations on a fake clock: a window no outside lease runs into, the named users' leases inside
// it (ending with it), a maintenance window that drains its nodes, the state file, and every bad
// reservation refused with what is wrong.

#include <gtest/gtest.h>

#include "inventory.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/pool/reservations.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::hours;
using std::chrono::seconds;
using test::addInventory;
using test::gpuList;
using test::parseRequest;
using test::t0;

Reservation window(const std::string& name, std::vector<std::string> nodes, TimePoint start, TimePoint end,
                   std::vector<std::string> users = {"bob"}) {
  Reservation r;
  r.name = name;
  r.nodes = std::move(nodes);
  r.start = start;
  r.end = end;
  r.users = std::move(users);
  r.created_by = "root";
  return r;
}

PoolState twoNodes() {
  PoolState s;
  addInventory(s, "n[01-02]/gpu[0-7]", t0());
  return s;
}

LeaseRequest inside(const std::string& spec, const std::string& reservation) {
  LeaseRequest r = parseRequest(spec);
  r.reservation = reservation;
  return r;
}

TEST(Reservations, NoLeaseFromOutsideRunsIntoTheWindow) {
  PoolState s = twoNodes();
  const TimePoint start = t0() + hours(1), end = t0() + hours(3);
  s.reserve(window("train", {"n01"}, start, end), t0());
  // Without an end, a lease of alice's keeps off n01; one that ends before the window may use it.
  EXPECT_EQ(gpuList(s.submit(parseRequest("8"), t0()).lease->gpus), "n02:0-7");
  const SubmitResult later = s.submit(parseRequest("8"), t0());
  ASSERT_GT(later.ticket, 0) << "n01 is kept from its start on: a lease without an end would run into it";
  EXPECT_EQ(s.plannedStart(later.ticket), end) << "planned at the window's end";
  const SubmitResult shortOne = s.submit(parseRequest("4 max=1800"), t0() + seconds(1));
  ASSERT_TRUE(shortOne.lease) << "ends before the window starts";
  EXPECT_EQ(gpuList(shortOne.lease->gpus), "n01:0-3");
  const SubmitResult longOne = s.submit(parseRequest("4 max=7200"), t0() + seconds(2));
  EXPECT_FALSE(longOne.lease) << "it would run into the window";
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Reservations, ItsUsersLeaseItInsideTheWindowAndTheirLeasesEndWithIt) {
  PoolState s = twoNodes();
  const TimePoint start = t0() + hours(1), end = t0() + hours(3);
  s.reserve(window("train", {"n01"}, start, end, {"bob"}), t0());
  const SubmitResult early = s.submit(inside("8 owner=bob", "train"), t0());
  ASSERT_GT(early.ticket, 0) << "before the window: it waits";
  EXPECT_EQ(s.plannedStart(early.ticket), start);
  s.poll(early.ticket, start - seconds(1));
  s.tick(start);
  const PollResult granted = s.poll(early.ticket, start);
  ASSERT_EQ(granted.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(gpuList(granted.lease->gpus), "n01:0-7");
  EXPECT_EQ(granted.lease->max_end, end) << "it ends with the window";
  // Nobody else, and nothing on other nodes for bob's reservation.
  for (const char* who : {"owner=alice", "owner=carol"}) {
    try {
      s.submit(inside(std::string("1 ") + who, "train"), start);
      ADD_FAILURE() << who << " leased bob's reservation";
    } catch (const PoolError& e) {
      EXPECT_EQ(e.failure(), PoolFailure::kForbidden);
      EXPECT_NE(std::string(e.what()).find("may not lease reservation train"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(s.submit(inside("1 owner=bob", "nowhere"), start), PoolError);
  // After the window: gone, and n01 free for anyone.
  s.tick(end);
  EXPECT_TRUE(s.reservations().empty());
  EXPECT_TRUE(s.leaseList().empty()) << "bob's lease ended with the window";
  EXPECT_EQ(gpuList(s.submit(parseRequest("16"), end).lease->gpus), "n01:0-7 n02:0-7");
}

TEST(Reservations, AnAccountNamedLeasesItAndAMaintenanceWindowDrainsItsNodes) {
  PoolState s = twoNodes();
  s.setAccounts(
      parseAccounts("[accounts.physics]\nusers = [\"alice\"]\n[accounts.ops]\nusers = [\"bob\"]\n", "f"));
  Reservation forPhysics = window("physics-day", {"n02"}, t0(), t0() + hours(24), {});
  forPhysics.accounts = {"physics"};
  s.reserve(forPhysics, t0());
  EXPECT_EQ(gpuList(s.submit(inside("8 owner=alice", "physics-day"), t0()).lease->gpus), "n02:0-7");
  EXPECT_THROW(s.submit(inside("1 owner=bob", "physics-day"), t0()), PoolError);

  s.reserve(window("fix-n01", {"n01"}, t0() + hours(2), t0() + hours(4), {}), t0());
  EXPECT_THROW(s.submit(inside("1 owner=bob", "fix-n01"), t0()), PoolError) << "nobody leases maintenance";
  s.takeNodeEvents();
  s.tick(t0() + hours(2));
  EXPECT_EQ(s.nodeMap().at("n01").state, NodeState::kDraining) << "drained at its start";
  const std::vector<NodeEvent> events = s.takeNodeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, NodeEvent::Kind::kMaintenance);
  EXPECT_EQ(events[0].node, "n01");
  EXPECT_NE(events[0].reason.find("reservation fix-n01: a maintenance window until "), std::string::npos);
  EXPECT_TRUE(s.reservations().at("fix-n01").drained);
  s.tick(t0() + hours(5));
  EXPECT_EQ(s.nodeMap().at("n01").state, NodeState::kDraining) << "an administrator resumes it";
}

TEST(Reservations, BadReservationsAreRefusedSayingWhy) {
  PoolState s = twoNodes();
  s.reserve(window("a", {"n01"}, t0() + hours(1), t0() + hours(2)), t0());
  struct Case {
    Reservation r;
    const char* says;
  };
  const Case cases[] = {
      {window("b", {"n09"}, t0(), t0() + hours(1)), "node n09 is not in the pool"},
      {window("b", {}, t0(), t0() + hours(1)), "no nodes"},
      {window("b", {"n02"}, t0() - hours(1), t0() + hours(1)), "it starts in the past"},
      {window("b", {"n02"}, t0() + hours(2), t0() + hours(1)), "before it starts"},
      {window("b", {"n02"}, t0(), t0() + hours(24 * 400)), "more than 366 days"},
      {window("a", {"n02"}, t0(), t0() + hours(1)), "the name is taken"},
      {window("b c", {"n02"}, t0(), t0() + hours(1)), "only letters"},
      {window("", {"n02"}, t0(), t0() + hours(1)), "empty"},
      {window("b", {"n02", "n01"}, t0() + hours(1) + seconds(30), t0() + hours(5)),
       "node n01 is kept by reservation a"},
      {window("b", {"n02"}, t0(), t0() + hours(1), {"bad user"}), "user"},
  };
  for (const Case& c : cases) {
    try {
      s.reserve(c.r, t0());
      ADD_FAILURE() << "taken: " << c.says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(s.reservations().size(), 1u) << "nothing of the refused ones kept";
  s.reserve(window("after", {"n01"}, t0() + hours(2), t0() + hours(3)), t0());  // touching, not overlapping
  EXPECT_THROW(s.unreserve("nowhere"), Error);
  s.unreserve("after");
  EXPECT_EQ(s.reservations().size(), 1u);
}

TEST(Reservations, TheyOutliveARestart) {
  test::TempDir dir;
  PoolState s = twoNodes();
  Reservation r = window("train", {"n02", "n01"}, t0() + hours(1), t0() + hours(3), {"bob"});
  r.accounts = {"physics"};
  s.reserve(r, t0());
  PoolState back = test::throughStateFile(s, dir.path() / "pool.sqlite");
  ASSERT_EQ(back.reservations().size(), 1u);
  EXPECT_EQ(back.reservations().at("train"), s.reservations().at("train"));
  EXPECT_EQ(back.reservations().at("train").nodes, (std::vector<std::string>{"n01", "n02"}));
  const SubmitResult outside = back.submit(parseRequest("1"), t0());
  EXPECT_GT(outside.ticket, 0) << "the restarted pool keeps the window too";
}

}  // namespace
}  // namespace poolrun::pool
