// Preemption as a rule of the pool's state, on a fake clock: which leases a waiting request of
// higher priority chooses as victims (whole leases, lower priority, preemptible, past the minimum
// runtime; the fewest GPUs, then the youngest), the notice and its deadline, the preemptor's start
// when the victims end, and the pool ending a victim its holder does not give back.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

#include "inventory.hpp"
#include "poolrun/pool/json.hpp"
#include "support/test_names.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;
using test::addInventory;
using test::gpuList;
using test::parseRequest;

using test::t0;

// The ids of the leases under notice, sorted.
struct VictimCase {
  const char* name;
  const char* inventory;  // leases at least 700 s old unless said; the minimum runtime is 600 s
  const char* request;
  std::vector<std::string> expected;  // the victims, sorted; empty: nobody is preempted
};

const VictimCase kVictimCases[] = {
    {"a lower-priority preemptible lease makes room",
     "n01/gpu[0-7]; n01 leased 0-7 preemptible age=700 id=A",
     "8 prio=5",
     {"A"}},
    {"not preemptible: the request waits", "n01/gpu[0-7]; n01 leased 0-7 age=700 id=A", "8 prio=5", {}},
    {"equal priority is no reason",
     "n01/gpu[0-7]; n01 leased 0-7 preemptible prio=5 age=700 id=A",
     "8 prio=5",
     {}},
    {"higher priority is never a victim",
     "n01/gpu[0-7]; n01 leased 0-7 preemptible prio=9 age=700 id=A",
     "8 prio=5",
     {}},
    {"younger than the minimum runtime",
     "n01/gpu[0-7]; n01 leased 0-7 preemptible age=300 id=A",
     "8 prio=5",
     {}},
    {"the free GPUs first: only as many as are missing",
     "n01/gpu[0-7]; n01 leased 0-1 preemptible age=700 id=A; n01 leased 2-3 preemptible age=700 id=B",
     "6 prio=5",
     {"A"}},
    {"the fewest GPUs: the small lease rather than the big one",
     "n[01-02]/gpu[0-7]; n01 leased 0-3 preemptible age=700 id=SMALL; "
     "n02 leased 0-7 preemptible age=700 id=BIG",
     "8 prio=5",
     {"SMALL"}},
    {"then the youngest",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 preemptible age=5000 id=OLD; "
     "n02 leased 0-7 preemptible age=900 id=YOUNG",
     "8 prio=5",
     {"YOUNG"}},
    {"as many leases as the request needs",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 preemptible age=700 id=A; n02 leased 0-7 preemptible age=700 id=A2",
     "16 prio=5",
     {"A", "A2"}},
    {"a request that cannot fit even with every candidate preempts nobody",
     "n01/gpu[0-7]; n01 leased 0-3 preemptible age=700 id=A; n01 leased 4-7 age=700 id=KEPT",
     "8 prio=5",
     {}},
    {"per-node shape: the node the shape can use",
     "n[01-02]/gpu[0-7]; n01 leased 0 preemptible age=700 id=ONE; n02 leased 0-3 preemptible age=900 id=FOUR",
     "8 ppn=8 prio=5",
     {"ONE"}},
    {"one leaf switch: victims under the switch that fits",
     "n[01-02]/gpu[0-7]@leaf1; n[03-04]/gpu[0-7]@leaf2; n01 leased 0-7 preemptible age=700 id=L1; "
     "n02 leased 0-7 age=700 id=K1; n03 leased 0-3 preemptible age=700 id=L2A; "
     "n04 leased 0-3 preemptible age=700 id=L2B; n03 leased 4-7 preemptible age=700 id=L2C",
     "16 one-switch prio=5",
     {"L2A", "L2B", "L2C"}},
    {"across switches: the fewest GPUs wherever they are",
     "n01/gpu[0-7]@leaf1; n02/gpu[0-7]@leaf2; n01 leased 0-7 preemptible age=700 id=FULL; "
     "n02 leased 0-1 preemptible age=700 id=PART",
     "8 prio=5",
     {"PART"}},
    {"the lowest priorities are not preferred over fewer GPUs",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 preemptible prio=-5 age=700 id=LOW8; "
     "n02 leased 0-3 preemptible prio=1 age=700 id=MID4",
     "8 prio=5",
     {"MID4"}},
};

class Victims : public ::testing::TestWithParam<VictimCase> {};

TEST_P(Victims, AreTheFewestGpusThenTheYoungest) {
  const VictimCase& c = GetParam();
  PoolState s;
  addInventory(s, c.inventory, t0());
  SubmitResult r = s.submit(parseRequest(c.request), t0());
  EXPECT_FALSE(r.lease.has_value()) << "granted at once: " << gpuList(r.lease->gpus);
  std::vector<std::string> expected = c.expected;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(test::leasesUnderNotice(s), expected) << c.inventory;
  for (const std::string& id : test::leasesUnderNotice(s)) {
    const Lease& l = s.leaseMap().at(id);
    EXPECT_EQ(l.preempt_at, t0() + s.preemptOptions().grace);
    EXPECT_EQ(l.preempted_for, r.ticket);
    EXPECT_NE(l.preempt_reason.find("ticket " + std::to_string(r.ticket) + " of alice (priority 5"),
              std::string::npos)
        << l.preempt_reason;
  }
  EXPECT_EQ(s.leasesPreempted(), expected.size());
  EXPECT_EQ(s.checkInvariants(), "");
}

INSTANTIATE_TEST_SUITE_P(Table, Victims, ::testing::ValuesIn(kVictimCases), test::ByCaseName());

// Gang-aware: a lease across nodes is preempted whole, even where the request needs only part of it.
TEST(Preemption, ALeaseAcrossNodesIsPreemptedWholeNeverInPart) {
  PoolState s;
  addInventory(s, "n[01-04]/gpu[0-7]; n03 leased 0-7 age=700; n04 leased 0-7 age=700", t0());
  SubmitResult gang = s.submit(parseRequest("16 ppn=8 preemptible owner=bob"), t0() - seconds(700));
  ASSERT_TRUE(gang.lease);
  ASSERT_EQ(gpuList(gang.lease->gpus), "n01:0-7 n02:0-7");
  SubmitResult r = s.submit(parseRequest("8 prio=5"), t0());
  EXPECT_FALSE(r.lease);
  EXPECT_EQ(test::leasesUnderNotice(s), std::vector<std::string>{gang.lease->id});
  // All 16 of its GPUs stay held until it ends, none taken from it in part.
  EXPECT_EQ(s.leaseMap().at(gang.lease->id).gpus.size(), 16u);
}

// The whole course: notice, the holder learns it in its renewal, releases, the preemptor starts.
TEST(Preemption, TheVictimLearnsItInItsRenewalAndThePreemptorStartsWhenItEnds) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 preemptible age=700 id=A owner=bob", t0());
  SubmitResult r = s.submit(parseRequest("8 prio=5"), t0());
  ASSERT_GT(r.ticket, 0);
  EXPECT_NE(s.waitReason(r.ticket).find("preempting 1 lease of lower priority"), std::string::npos)
      << s.waitReason(r.ticket);
  // Planned for when the victim must be gone at the latest (its deadline and the kill margin).
  const PreemptOptions& o = s.preemptOptions();
  EXPECT_EQ(s.plannedStart(r.ticket), t0() + o.grace + o.kill_margin);

  Lease renewed = s.renew("A", "bob", false, t0() + seconds(5));
  ASSERT_TRUE(renewed.preempt_at.has_value());
  EXPECT_EQ(*renewed.preempt_at, t0() + o.grace);
  EXPECT_EQ(renewed.preempt_grace, o.grace);
  // A renewal never takes the lease past its deadline and the margin.
  EXPECT_LE(renewed.expires, t0() + o.grace + o.kill_margin);

  // Another pass preempts nobody else.
  s.tick(t0() + seconds(10));
  EXPECT_EQ(s.leasesPreempted(), 1u);
  ASSERT_TRUE(s.release("A", "bob", false, t0() + seconds(30)));
  PollResult p = s.poll(r.ticket, t0() + seconds(30));
  ASSERT_EQ(p.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(gpuList(p.lease->gpus), "n01:0-7");
  EXPECT_EQ(s.checkInvariants(), "");
}

TEST(Preemption, AVictimItsHolderDoesNotReleaseEndsAfterTheDeadlineAndTheMargin) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 preemptible age=700 id=A owner=bob", t0());
  SubmitResult r = s.submit(parseRequest("8 prio=5"), t0());
  const PreemptOptions& o = s.preemptOptions();
  // Renewed all along, still held just before the end.
  for (auto t = seconds(20); t < o.grace + o.kill_margin; t += seconds(20)) {
    s.renew("A", "bob", false, t0() + t);
    s.poll(r.ticket, t0() + t);  // its client waits on
  }
  s.tick(t0() + o.grace + o.kill_margin - seconds(1));
  EXPECT_TRUE(s.leaseMap().count("A"));
  s.tick(t0() + o.grace + o.kill_margin);
  EXPECT_FALSE(s.leaseMap().count("A"));
  try {
    s.renew("A", "bob", false, t0() + o.grace + o.kill_margin + seconds(1));
    FAIL() << "renewed a preempted lease past its end";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kGone);
    EXPECT_NE(std::string(e.what()).find("was preempted for ticket"), std::string::npos) << e.what();
  }
  PollResult p = s.poll(r.ticket, t0() + o.grace + o.kill_margin);
  EXPECT_EQ(p.status, QueueEntry::Status::kGranted);
}

TEST(Preemption, NoPreemptionWhereTheRequestStartsSoonerAnyway) {
  PoolState s;
  // The running lease ends within the grace period: waiting for it is quicker than preempting.
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 for 60 preemptible age=700 id=A", t0());
  SubmitResult r = s.submit(parseRequest("8 prio=5"), t0());
  EXPECT_TRUE(test::leasesUnderNotice(s).empty());
  EXPECT_EQ(s.plannedStart(r.ticket), t0() + seconds(60));
}

TEST(Preemption, ARequestThatWillNotWaitPreemptsNobody) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 preemptible age=700 id=A", t0());
  LeaseRequest r = parseRequest("8 prio=5");
  r.wait = seconds(0);
  SubmitResult got = s.submit(r, t0(), false);
  EXPECT_FALSE(got.lease);
  EXPECT_TRUE(test::leasesUnderNotice(s).empty());
  EXPECT_TRUE(s.queueMap().empty());
}

TEST(Preemption, TheRulesTimesAreOptions) {
  PoolState s;
  PreemptOptions o;
  o.grace = seconds(5);
  o.min_runtime = seconds(0);
  s.setPreemptOptions(o);
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 preemptible id=A", t0());
  s.submit(parseRequest("8 prio=5"), t0());
  ASSERT_EQ(test::leasesUnderNotice(s), std::vector<std::string>{"A"});
  EXPECT_EQ(s.leaseMap().at("A").preempt_at, t0() + seconds(5));
}

TEST(Preemption, AGrantedLeaseCarriesThePoolsGraceAndItsPreemptibility) {
  PoolState s;
  addInventory(s, "n01/gpu[0-7]", t0());
  SubmitResult r = s.submit(parseRequest("4 preemptible"), t0());
  ASSERT_TRUE(r.lease);
  EXPECT_TRUE(r.lease->preemptible);
  EXPECT_EQ(r.lease->preempt_grace, s.preemptOptions().grace);
  EXPECT_FALSE(r.lease->preempt_at);
}

TEST(Preemption, NoticesSurviveTheStateFileAsEveryLeaseField) {
  // What a restart reloads: the lease as JSON (the store keeps each lease as its document).
  PoolState s;
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 preemptible age=700 id=A owner=bob", t0());
  s.submit(parseRequest("8 prio=5"), t0());
  const Lease& before = s.leaseMap().at("A");
  Lease after = leaseFromJson(toJson(before));
  EXPECT_EQ(after.preempt_at, before.preempt_at);
  EXPECT_EQ(after.preempt_reason, before.preempt_reason);
  EXPECT_EQ(after.preempted_for, before.preempted_for);
  EXPECT_TRUE(after.preemptible);
}

// 128 nodes of 8 GPUs, each GPU held by a preemptible lease of its own, the youngest the highest
// numbered (ids G0000..G1023; ages from 5,000 s down to 908 s).
std::string oneGpuLeases() {
  std::string spec = "n[001-128]/gpu[0-7]";
  for (int n = 0; n < 128; ++n)
    for (int g = 0; g < 8; ++g) {
      char line[96];
      const int id = n * 8 + g;
      std::snprintf(line, sizeof line, "; n%03d leased %d preemptible age=%d id=G%04d", n + 1, g,
                    5000 - 4 * id, id);
      spec += line;
    }
  return spec;
}

// A request for the whole pool against 1,024 leases of one GPU: every one a victim (the search
// for the shortest run of candidates goes all the way), none for a request larger than the pool.
TEST(Preemption, ARequestForTheWholePoolTakesEveryOneGpuLease) {
  PoolState s;
  addInventory(s, oneGpuLeases(), t0());
  SubmitResult r = s.submit(parseRequest("1024 prio=5"), t0());
  ASSERT_FALSE(r.lease);
  EXPECT_EQ(test::leasesUnderNotice(s).size(), 1024u);
  const PreemptOptions& o = s.preemptOptions();
  EXPECT_EQ(s.plannedStart(r.ticket), t0() + o.grace + o.kill_margin);
  EXPECT_THROW(s.submit(parseRequest("1025 prio=9"), t0()), PoolError) << "larger than the pool";
  EXPECT_EQ(s.leasesPreempted(), 1024u);
  EXPECT_EQ(s.checkInvariants(), "");
}

// The fewest of a thousand: 100 GPUs take the 100 youngest one-GPU leases, no more, and a wave of
// requests behind it that could never fit preempts nobody else.
TEST(Preemption, AHundredGpusTakeTheHundredYoungestOfAThousandLeases) {
  PoolState s;
  addInventory(s, oneGpuLeases(), t0());
  SubmitResult r = s.submit(parseRequest("100 prio=5"), t0());
  ASSERT_FALSE(r.lease);
  std::vector<std::string> expected;
  for (int id = 1023; id > 1023 - 100; --id) {
    char name[8];
    std::snprintf(name, sizeof name, "G%04d", id);
    expected.push_back(name);
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(test::leasesUnderNotice(s), expected);
  for (int i = 0; i < 50; ++i) EXPECT_THROW(s.submit(parseRequest("2000 prio=9"), t0()), PoolError);
  EXPECT_EQ(s.leasesPreempted(), 100u);
  EXPECT_EQ(s.checkInvariants(), "");
}

}  // namespace
}  // namespace poolrun::pool
