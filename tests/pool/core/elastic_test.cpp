// Elastic leases as rules of the pool's state, on a fake clock: granted with at least their
// minimum and as much more as is free, grown towards their maximum when GPUs are free, the resize
// interval has passed and nobody of equal or higher priority waits, shrunk back towards their
// minimum (never below, whole nodes for a per-node shape) for a request of higher priority before
// any lease is preempted, and the GPUs given back by the holder or taken at the deadline.

#include <gtest/gtest.h>

#include <algorithm>

#include "inventory.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/store.hpp"
#include "support/temp_dir.hpp"
#include "support/test_names.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;
using test::addInventory;
using test::gpuList;
using test::parseRequest;
using test::t0;

// "A:n02:4-7": each lease under a shrink notice and the GPUs it gives back, by id.
std::vector<std::string> shrinks(const PoolState& s) {
  std::vector<std::string> out;
  for (const auto& [id, lease] : s.leaseMap())
    if (lease.shrink_at) out.push_back(id + ":" + gpuList(lease.shrink_gpus));
  return out;
}

struct ShrinkCase {
  const char* name;
  const char* inventory;  // leases 700 s old unless said; the minimum runtime is 600 s
  const char* request;
  std::vector<std::string> shrunk;     // "ID:GPUS" given back, sorted by id
  std::vector<std::string> preempted;  // whole leases under notice, sorted
};

const ShrinkCase kShrinkCases[] = {
    {"an elastic lease above its minimum gives back what the request needs, and no more",
     "n01/gpu[0-7]; n01 leased 0-7 elastic=2:8 age=700 id=E",
     "4 prio=5",
     {"E:n01:4-7"},
     {}},
    {"never below its minimum: the rest waits",
     "n01/gpu[0-7]; n01 leased 0-7 elastic=6:8 age=700 id=E",
     "4 prio=5",
     {},
     {}},
    {"a shrink comes before a preemption, even of a smaller lease",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 elastic=2:8 age=700 id=E; n02 leased 0-7 preemptible age=700 id=P",
     "4 prio=5",
     {"E:n01:4-7"},
     {}},
    {"the free GPUs and a shrink together",
     "n01/gpu[0-7]; n01 leased 0-5 elastic=2:6 age=700 id=E",
     "4 prio=5",
     {"E:n01:4-5"},
     {}},
    {"a shrink too small to help is no shrink: the preemptible lease goes whole",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 elastic=7:8 age=700 id=E; n02 leased 0-7 preemptible age=700 id=P",
     "8 prio=5",
     {},
     {"P"}},
    {"an elastic lease at its minimum that may be preempted is preempted whole",
     "n01/gpu[0-7]; n01 leased 0-7 elastic=8:8 preemptible age=700 id=E",
     "8 prio=5",
     {},
     {"E"}},
    {"equal priority shrinks nobody",
     "n01/gpu[0-7]; n01 leased 0-7 elastic=2:8 prio=5 age=700 id=E",
     "4 prio=5",
     {},
     {}},
    {"younger than the minimum runtime",
     "n01/gpu[0-7]; n01 leased 0-7 elastic=2:8 age=300 id=E",
     "4 prio=5",
     {},
     {}},
    {"the request's shape decides which lease gives back",
     "n01/gpu[0-7]@leaf1; n[02-03]/gpu[0-7]@leaf2; n01 leased 0-7 elastic=2:8 age=700 id=E1; "
     "n02 leased 0-7 elastic=2:8 age=900 id=E2; n03 leased 0-3 age=700 id=K",
     "8 one-switch prio=5",
     {"E2:n02:4-7"},
     {}},
    {"a whole lease that must go anyway spares the shrink beside it",
     "n01/gpu[0-7]; n01 leased 0-3 elastic=2:4 age=700 id=E; n01 leased 4-7 preemptible age=700 id=P",
     "4 prio=5",
     {},
     {"P"}},
    {"the lowest priority gives back first",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 elastic=2:8 prio=4 age=700 id=A; "
     "n02 leased 0-7 elastic=2:8 prio=0 age=700 id=Z",
     "4 prio=5",
     {"Z:n02:4-7"},
     {}},
    {"two elastic leases give back together what one alone cannot",
     "n01/gpu[0-7]; n01 leased 0-3 elastic=1:4 age=700 id=E1; n01 leased 4-7 elastic=1:4 age=900 id=E2",
     "6 prio=5",
     {"E1:n01:1-3", "E2:n01:5-7"},
     {}},
};

class Shrinks : public ::testing::TestWithParam<ShrinkCase> {};

TEST_P(Shrinks, ComeBeforePreemptionsAndNeverGoBelowTheMinimum) {
  const ShrinkCase& c = GetParam();
  PoolState s;
  addInventory(s, c.inventory, t0());
  SubmitResult r = s.submit(parseRequest(c.request), t0());
  EXPECT_FALSE(r.lease.has_value()) << "granted at once: " << gpuList(r.lease->gpus);
  EXPECT_EQ(shrinks(s), c.shrunk) << c.inventory;
  EXPECT_EQ(test::leasesUnderNotice(s), c.preempted) << c.inventory;
  for (const auto& [id, lease] : s.leaseMap()) {
    if (!lease.shrink_at) continue;
    EXPECT_EQ(*lease.shrink_at, t0() + s.preemptOptions().grace);
    EXPECT_EQ(lease.shrunk_for, r.ticket);
    EXPECT_GE(lease.gpus.size() - lease.shrink_gpus.size(), static_cast<size_t>(lease.elastic->gpus));
    EXPECT_NE(lease.shrink_reason.find("for ticket " + std::to_string(r.ticket) + " of alice (priority 5"),
              std::string::npos)
        << lease.shrink_reason;
  }
  EXPECT_EQ(s.checkInvariants(), "");
}

INSTANTIATE_TEST_SUITE_P(Table, Shrinks, ::testing::ValuesIn(kShrinkCases), test::ByCaseName());

TEST(Elastic, IsGrantedAsLargeAsTheFreeGpusLetItAndAtLeastItsMinimum) {
  PoolState s;
  addInventory(s, "n[01-02]/gpu[0-7]; n02 leased 0-3", t0());
  SubmitResult r = s.submit(parseRequest("2 upto=16"), t0());
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(r.lease->gpus.size(), 12u);
  EXPECT_EQ(r.lease->resizes, 0);  // as granted: no change of size to restart for
  ASSERT_TRUE(r.lease->elastic);
  EXPECT_EQ(r.lease->elastic->max_gpus, 16);
  // All or nothing for the minimum: 13 cannot start on 4 free GPUs.
  SubmitResult big = s.submit(parseRequest("13 upto=16"), t0(), false);
  EXPECT_FALSE(big.lease);
  EXPECT_EQ(s.checkInvariants(), "");
}

// Growth at the grant waits for the requests behind it of equal priority: they start first.
TEST(Elastic, ItsGrantGrowsOnlyAfterTheRequestsOfEqualPriorityBehindIt) {
  PoolState s;
  addInventory(s, "n[01-02]/gpu[0-7]; n01 leased 0-7 id=X; n02 leased 0-7 id=Y", t0());
  SubmitResult a = s.submit(parseRequest("2 upto=16"), t0());
  SubmitResult b = s.submit(parseRequest("4 owner=bob"), t0());
  ASSERT_GT(a.ticket, 0);
  ASSERT_GT(b.ticket, 0);
  ASSERT_TRUE(s.release("X", "other", false, t0() + seconds(1)));
  PollResult pa = s.poll(a.ticket, t0() + seconds(1));
  PollResult pb = s.poll(b.ticket, t0() + seconds(1));
  ASSERT_EQ(pb.status, QueueEntry::Status::kGranted) << "the elastic grant took what the next request needed";
  ASSERT_EQ(pa.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(pb.lease->gpus.size(), 4u);
  EXPECT_EQ(s.leaseMap().at(pa.lease->id).gpus.size(), 4u) << "its minimum, and the 2 left over";
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Elastic, GrowsWhenGpusAreFreedOnceItsIntervalHasPassed) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 4-7 id=B", t0());
  SubmitResult r = s.submit(parseRequest("2 upto=8 every=60"), t0());
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(gpuList(r.lease->gpus), "n01:0-3");
  ASSERT_TRUE(s.release("B", "other", false, t0() + seconds(10)));
  // Too soon after its grant: the interval counts from it.
  s.tick(t0() + seconds(59));
  EXPECT_EQ(s.leaseMap().at(r.lease->id).gpus.size(), 4u);
  // At the first scheduling pass once it has passed (passes come at least every kReplanEvery).
  const TimePoint pass = t0() + seconds(60) + PoolState::kReplanEvery;
  s.tick(pass);
  const Lease& grown = s.leaseMap().at(r.lease->id);
  EXPECT_EQ(gpuList(grown.gpus), "n01:0-7");
  EXPECT_EQ(grown.resizes, 1);
  EXPECT_EQ(grown.resized, pass);
  EXPECT_EQ(s.leasesResized(), 1u);
  std::vector<LeaseEvent> events = s.takeLeaseEvents();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, LeaseEvent::Kind::kGrown);
  EXPECT_EQ(events.back().gpus_before, 4u);
  EXPECT_EQ(events.back().since, t0());
  // The renewal carries the new size to its holder.
  EXPECT_EQ(s.renew(r.lease->id, "alice", false, pass + seconds(1)).gpus.size(), 8u);
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Elastic, AWaitingRequestOfEqualOrHigherPriorityStopsTheGrowthALowerOneDoesNot) {
  for (int waiting : {0, 5, -5}) {
    SCOPED_TRACE("a request of priority " + std::to_string(waiting) + " waits");
    PoolState s;
    addInventory(s, "n01/gpu[0-7]; n01 leased 4-7 id=B", t0());
    SubmitResult r = s.submit(parseRequest("2 upto=8 every=0"), t0());
    ASSERT_TRUE(r.lease);
    // 6 GPUs: cannot start on the 4 that B frees, nor preempt (nothing is preemptible).
    SubmitResult w = s.submit(parseRequest("6 prio=" + std::to_string(waiting) + " owner=carol"), t0());
    ASSERT_GT(w.ticket, 0);
    ASSERT_TRUE(s.release("B", "other", false, t0() + seconds(1)));
    s.tick(t0() + seconds(2));
    s.poll(w.ticket, t0() + seconds(2));
    const size_t size = s.leaseMap().at(r.lease->id).gpus.size();
    EXPECT_EQ(size, waiting >= 0 ? 4u : 8u);
    EXPECT_EQ(s.checkInvariants(), "");
  }
}

TEST(Elastic, GrowsByWholeNodesForAPerNodeShapeAndUnderItsOwnSwitch) {
  PoolState s;
  addInventory(
      s, "n[01-02]/gpu[0-7]@leaf1; n[03-04]/gpu[0-7]@leaf2; n02 leased 0-7 id=B; n03 leased 0-1 id=C", t0());
  SubmitResult r = s.submit(parseRequest("4 ppn=4 one-switch upto=16 every=0"), t0());
  ASSERT_TRUE(r.lease);
  // Four per node under one switch: n01 is the only leaf1 node free; leaf2 has n03's 6 and n04's 8,
  // but a lease starts under the switch placement picks and grows only there.
  const std::string first = r.lease->gpus.front().node;
  for (const GpuRef& g : r.lease->gpus)
    EXPECT_EQ(s.nodeMap().at(g.node).levels.switch_name, s.nodeMap().at(first).levels.switch_name);
  std::map<std::string, int> perNode;
  for (const GpuRef& g : r.lease->gpus) ++perNode[g.node];
  for (const auto& [node, n] : perNode) EXPECT_EQ(n, 4) << node;
  EXPECT_EQ(r.lease->gpus.size() % 4, 0u);
  ASSERT_TRUE(s.release("B", "other", false, t0() + seconds(1)));
  s.tick(t0() + seconds(2));
  const Lease& l = s.leaseMap().at(r.lease->id);
  perNode.clear();
  for (const GpuRef& g : l.gpus) {
    ++perNode[g.node];
    EXPECT_EQ(s.nodeMap().at(g.node).levels.switch_name, s.nodeMap().at(first).levels.switch_name) << g.node;
  }
  for (const auto& [node, n] : perNode) EXPECT_EQ(n, 4) << node;
  EXPECT_LE(l.gpus.size(), 16u);
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Elastic, GrowsOnItsOwnNodesFirst) {
  PoolState s;
  addInventory(s, "n[01-02]/gpu[0-7]; n01 leased 2-7 id=B", t0());
  SubmitResult r = s.submit(parseRequest("10 upto=12 every=0"), t0());
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(gpuList(r.lease->gpus), "n01:0-1 n02:0-7");
  ASSERT_TRUE(s.release("B", "other", false, t0() + seconds(1)));
  s.tick(t0() + seconds(2));
  // Two more: on n01 or n02? Its own nodes are both; n02 is full, so n01's.
  EXPECT_EQ(gpuList(s.leaseMap().at(r.lease->id).gpus), "n01:0-3 n02:0-7");
}

TEST(Elastic, NeverGrowsPastItsOwnersQuotaLimit) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]", t0());
  s.setQuotas(parseQuotas("owner alice guaranteed=0 limit=5\n", "quotas"));
  SubmitResult r = s.submit(parseRequest("2 upto=8"), t0());
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(r.lease->gpus.size(), 5u);
}

// An owner within its guarantee shrinks what others borrowed before a lease of lower priority
// that is its owner's by right.
TEST(Elastic, AnOwnerWithinItsGuaranteeShrinksBorrowedLeasesFirst) {
  PoolState s;
  addInventory(s,
               "n[01-02]/gpu[0-7]; n01 leased 0-7 elastic=2:8 prio=0 age=700 id=B owner=bob; "
               "n02 leased 0-7 elastic=2:8 prio=4 age=700 id=C owner=carol",
               t0());
  s.setQuotas(
      parseQuotas("owner alice guaranteed=8\nowner bob guaranteed=8\nowner carol guaranteed=0\n", "quotas"));
  SubmitResult r = s.submit(parseRequest("4 prio=5"), t0());
  ASSERT_FALSE(r.lease.has_value());
  EXPECT_EQ(shrinks(s), std::vector<std::string>{"C:n02:4-7"});
  EXPECT_TRUE(test::leasesUnderNotice(s).empty());
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Elastic, TheHolderGivesTheGpusBackAndThePreemptorStarts) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 elastic=2:8 age=700 id=E owner=bob", t0());
  SubmitResult r = s.submit(parseRequest("4 prio=5"), t0());
  ASSERT_GT(r.ticket, 0);
  Lease renewed = s.renew("E", "bob", false, t0() + seconds(5));
  ASSERT_TRUE(renewed.shrink_at);
  EXPECT_EQ(gpuList(renewed.shrink_gpus), "n01:4-7");
  EXPECT_EQ(renewed.gpus.size(), 8u);  // still its own until given back
  // Another owner may not shrink it.
  EXPECT_THROW(s.shrink("E", "mallory", false, t0() + seconds(6)), PoolError);
  Lease shrunk = s.shrink("E", "bob", false, t0() + seconds(20));
  EXPECT_EQ(gpuList(shrunk.gpus), "n01:0-3");
  EXPECT_FALSE(shrunk.shrink_at);
  EXPECT_EQ(shrunk.resizes, 1);
  PollResult p = s.poll(r.ticket, t0() + seconds(20));
  ASSERT_EQ(p.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(gpuList(p.lease->gpus), "n01:4-7");
  // Shrinking again is a renewal: nothing is pending.
  EXPECT_EQ(s.shrink("E", "bob", false, t0() + seconds(21)).gpus.size(), 4u);
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Elastic, GpusNotGivenBackAreTakenAfterTheDeadlineAndTheMargin) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 elastic=2:8 age=700 id=E owner=bob", t0());
  SubmitResult r = s.submit(parseRequest("4 prio=5"), t0());
  const PreemptOptions& o = s.preemptOptions();
  for (auto t = seconds(20); t < o.grace + o.kill_margin; t += seconds(20)) {
    s.renew("E", "bob", false, t0() + t);
    s.poll(r.ticket, t0() + t);
  }
  s.tick(t0() + o.grace + o.kill_margin - seconds(1));
  EXPECT_EQ(s.leaseMap().at("E").gpus.size(), 8u);
  s.tick(t0() + o.grace + o.kill_margin);
  // The lease lives on, smaller: a shrink is not a preemption.
  ASSERT_TRUE(s.leaseMap().count("E"));
  EXPECT_EQ(gpuList(s.leaseMap().at("E").gpus), "n01:0-3");
  PollResult p = s.poll(r.ticket, t0() + o.grace + o.kill_margin);
  EXPECT_EQ(p.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Elastic, ARequestThatCannotBeValidIsRefusedWithTheField) {
  auto refused = [](const std::string& spec, const std::string& words) {
    LeaseRequest r = parseRequest(spec);
    try {
      validateRequest(r);
      ADD_FAILURE() << spec << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused("8 upto=4", "elastic 8:4: the most (max_gpus) must be at least the least");
  refused("8 ppn=4 upto=10", "max_gpus 10 is not a multiple of gpus_per_node 4");
  refused("8 whole upto=16", "ask for gpus_per_node");
  refused("2 upto=4 every=-1", "field 'resize_interval_s': -1 is out of range (0 to 2592000)");
  EXPECT_NO_THROW(validateRequest(parseRequest("8 ppn=4 upto=16 every=0")));
}

TEST(Elastic, TheRequestsFieldsAreCheckedFromJson) {
  auto doc = [](nlohmann::json extra) {
    nlohmann::json d = {{"gpus", 2}};
    d.update(extra);
    return d;
  };
  EXPECT_EQ(requestFromJson(doc({{"max_gpus", 8}})).max_gpus, 8);
  EXPECT_EQ(requestFromJson(doc({{"max_gpus", 8}, {"resize_interval_s", 30}})).resize_interval, seconds(30));
  for (const nlohmann::json& bad : {nlohmann::json(-1), nlohmann::json(1.5), nlohmann::json("8"),
                                    nlohmann::json(true), nlohmann::json(1'000'001), nlohmann::json(1e300)})
    EXPECT_THROW(requestFromJson(doc({{"max_gpus", bad}})), Error) << bad.dump();
  for (const nlohmann::json& bad : {nlohmann::json(-1), nlohmann::json(30 * 86400 + 1), nlohmann::json("60")})
    EXPECT_THROW(requestFromJson(doc({{"max_gpus", 8}, {"resize_interval_s", bad}})), Error) << bad.dump();
}

TEST(Elastic, ALeaseKeepsItsBoundsItsSizeAndItsNoticeThroughJson) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 elastic=2:8:2 age=700 id=E owner=bob", t0());
  s.submit(parseRequest("4 prio=5"), t0());
  const Lease& l = s.leaseMap().at("E");
  Lease back = leaseFromJson(toJson(l));
  ASSERT_TRUE(back.elastic);
  EXPECT_EQ(back.elastic->gpus, 2);
  EXPECT_EQ(back.elastic->max_gpus, 8);
  EXPECT_EQ(back.elastic->gpus_per_node, 2);
  EXPECT_EQ(back.resized, l.resized);
  EXPECT_EQ(gpuList(back.shrink_gpus), gpuList(l.shrink_gpus));
  EXPECT_EQ(back.shrink_at, l.shrink_at);
  EXPECT_EQ(back.shrink_reason, l.shrink_reason);
  EXPECT_EQ(back.shrunk_for, l.shrunk_for);
}

// Each change of size reaches the disk: a pool opened again finds the lease as it was.
TEST(Elastic, AGrowthAndAShrinkAreStoredAndReadBack) {
  test::TempDir dir;
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 4-7 id=B", t0());
  Store store(dir.path() / "pool.db");
  auto save = [&](const Dirty& dirty) {
    store.begin();
    store.write(s, dirty);
    store.commit();
  };
  Dirty all;  // the inventory, as loaded: every row
  for (const auto& [name, node] : s.nodeMap()) all.nodes.insert(name);
  for (const auto& [id, lease] : s.leaseMap()) {
    all.leases.insert(id);
    all.new_leases.insert(id);
  }
  save(all);
  SubmitResult r = s.submit(parseRequest("2 upto=8 every=0"), t0());
  save(s.takeDirty());
  ASSERT_TRUE(s.release("B", "other", false, t0() + seconds(1)));
  s.tick(t0() + seconds(2));
  save(s.takeDirty());
  ASSERT_EQ(s.leaseMap().at(r.lease->id).gpus.size(), 8u);
  {
    PoolState back;
    store.load(back);
    EXPECT_EQ(gpuList(back.leaseMap().at(r.lease->id).gpus), "n01:0-7");
    EXPECT_EQ(back.leaseMap().at(r.lease->id).resizes, 1);
    EXPECT_EQ(back.checkInvariants(), "");
  }
}

}  // namespace
}  // namespace poolrun::pool
