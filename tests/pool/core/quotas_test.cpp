// Quotas: the file's format and its errors, and the rules of the pool's state on a fake clock:
// what is borrowed (beyond a guarantee) is preempted first for an owner within its guarantee,
// whatever the priorities; nothing within a guarantee is preempted for quota; limits hold
// requests back (and refuse one that alone is over its limit).

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

#include "inventory.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/pool/quotas.hpp"
#include "support/temp_dir.hpp"
#include "support/test_names.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;
using test::addInventory;
using test::gpuList;
using test::parseRequest;

using test::t0;

TEST(QuotasFile, ReadsGroupsOwnersAndTheDefault) {
  Quotas q = parseQuotas(
      "# the pool's quotas\n"
      "group vision guaranteed=16 limit=64 members=alice,bob   # two owners\n"
      "\n"
      "owner carol guaranteed=8\n"
      "default guaranteed=0 limit=4\n",
      "quotas");
  ASSERT_EQ(q.entries.size(), 3u);
  EXPECT_EQ(q.entries[0].kind, Quota::Kind::kGroup);
  EXPECT_EQ(q.entries[0].members, (std::vector<std::string>{"alice", "bob"}));
  EXPECT_EQ(q.entries[0].limit, 64);
  EXPECT_EQ(q.entries[1].limit, std::nullopt);
  EXPECT_EQ(q.of("bob"), &q.entries[0]);
  EXPECT_EQ(q.of("carol"), &q.entries[1]);
  EXPECT_EQ(q.of("dave"), &q.entries[2]);
  EXPECT_EQ(parseQuotas("owner carol guaranteed=8\n", "q").of("dave"), nullptr);
  EXPECT_TRUE(parseQuotas("", "q").empty());
}

TEST(QuotasFile, ChangesAreSaidOneLineAQuota) {
  const Quotas before = parseQuotas(
      "group vision guaranteed=16 limit=64 members=alice,bob\nowner carol guaranteed=8\ndefault "
      "guaranteed=0\n",
      "q");
  const Quotas after = parseQuotas(
      "group vision guaranteed=32 limit=64 members=alice,bob,dave\nowner erin guaranteed=4 limit=8\n"
      "default guaranteed=0 limit=4\n",
      "q");
  EXPECT_EQ(
      quotaChanges(before, after),
      (std::vector<std::string>{"default: limit none -> 4",
                                "group vision: guaranteed 16 -> 32, members alice,bob -> alice,bob,dave",
                                "owner erin added: guaranteed 4, limit 8", "owner carol removed"}));
  EXPECT_TRUE(quotaChanges(after, after).empty());
  EXPECT_EQ(quotaChanges(Quotas{}, parseQuotas("group g guaranteed=1 members=a\n", "q")),
            std::vector<std::string>{"group g added: guaranteed 1, limit none, members a"});
}

TEST(QuotasFile, ABadLineIsNamedWithItsFileAndLine) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"group vision guaranteed=16\n", "quotas:1: group vision has no members="},
      {"\nowner carol guaranteed=-1\n", "quotas:2: "},
      {"owner carol guaranteed=8 limit=4\n", "limit=4 is below guaranteed=8"},
      {"owner carol limit=4\n", "no guaranteed=N"},
      {"owner carol guaranteed=99999999999\n", "guaranteed"},
      {"owner carol guaranteed=1.5\n", "guaranteed"},
      {"owner carol guaranteed=8 colour=red\n", "unknown key 'colour'"},
      {"team vision guaranteed=8\n", "unknown kind 'team'"},
      {"owner guaranteed=8\n", "`owner` needs a NAME"},
      {"owner car\xff guaranteed=8\n", "name 'car\\xff'"},
      {"owner carol guaranteed=8\nowner carol guaranteed=9\n", "quotas:2: owner carol is named twice"},
      {"group a guaranteed=1 members=x\ngroup b guaranteed=1 members=y,x\n", "owner x is in group a already"},
      {"group a guaranteed=1 members=x,,y\n", "member ''"},
      {"owner carol guaranteed\n", "is not KEY=VALUE"},
      {"owner carol guaranteed=8 guaranteed=9\n", "quotas:1: guaranteed= is given twice"},
      {"owner bob guaranteed=2\ngroup v guaranteed=1 members=bob\n",
       "owner bob has a line of its own but is in group v"},
  };
  for (const Case& c : cases) {
    try {
      parseQuotas(c.text, "quotas");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
}

TEST(QuotasFile, OnlyARegularFileOfBoundedSizeIsRead) {
  test::TempDir dir;
  EXPECT_THROW(readQuotasFile("/dev/zero"), Error);
  EXPECT_THROW(readQuotasFile(dir.path()), Error);
  auto big = dir.write("big", std::string((size_t{1} << 20) + 1, '#'));
  try {
    readQuotasFile(big);
    FAIL() << "read a file over 1 MiB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(big.string()), std::string::npos) << e.what();
  }
  auto ok = dir.write("quotas", "owner carol guaranteed=8\n");
  EXPECT_EQ(readQuotasFile(ok).entries.size(), 1u);
}

struct QuotaCase {
  const char* name;
  const char* quotas;
  const char* inventory;  // leases 700 s old unless said (the minimum runtime is 600 s)
  const char* request;
  std::vector<std::string> expected;  // the victims, sorted; empty: nobody is preempted
};

const QuotaCase kQuotaCases[] = {
    {"an owner within its guarantee takes back what another borrowed, whatever the priorities",
     "owner alice guaranteed=8\nowner bob guaranteed=0",
     "n01/gpu[0-7]; n01 leased 0-7 owner=bob prio=50 age=700 id=B",
     "8",
     {"B"}},
    {"what is within a guarantee is never preempted for quota",
     "owner alice guaranteed=8\nowner bob guaranteed=8",
     "n01/gpu[0-7]; n01 leased 0-7 owner=bob age=700 id=B",
     "8",
     {}},
    {"the youngest of an owner's leases are the borrowed ones",
     "owner alice guaranteed=8\nowner bob guaranteed=8",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 owner=bob age=5000 id=OLD; n02 leased 0-7 owner=bob age=900 id=YOUNG",
     "8",
     {"YOUNG"}},
    {"an owner past its guarantee takes back nothing",
     "owner alice guaranteed=8\nowner bob guaranteed=0",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 owner=alice age=700 id=A; n02 leased 0-7 owner=bob age=700 id=B",
     "8",
     {}},
    {"a group's members share one guarantee: nothing within it is taken",
     "group vision guaranteed=16 members=alice,bob",
     "n01/gpu[0-7]; n01 leased 0-7 owner=bob age=700 id=B",
     "8",
     {}},
    {"a group's guarantee is shared by its members",
     "group vision guaranteed=16 members=alice,bob\nowner carol guaranteed=0",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 owner=bob age=700 id=B; n02 leased 0-7 owner=carol age=700 id=C",
     "8",
     {"C"}},
    {"owners the file does not name fall under the default",
     "owner alice guaranteed=8\ndefault guaranteed=0",
     "n01/gpu[0-7]; n01 leased 0-7 owner=zed age=700 id=Z",
     "8",
     {"Z"}},
    {"borrowed leases are preemptible by priority too",
     "owner alice guaranteed=0\nowner bob guaranteed=0",
     "n01/gpu[0-7]; n01 leased 0-7 owner=bob age=700 id=B",
     "8 prio=5",
     {"B"}},
    {"borrowed GPUs go before a preemptible lease of lower priority",
     "owner alice guaranteed=8\nowner bob guaranteed=0\nowner carol guaranteed=8",
     "n[01-02]/gpu[0-7]; n01 leased 0-3 owner=carol preemptible age=700 id=C; "
     "n02 leased 0-7 owner=bob prio=9 age=700 id=B",
     "8 prio=5",
     {"B"}},
    {"the minimum runtime holds for quota too",
     "owner alice guaranteed=8\nowner bob guaranteed=0",
     "n01/gpu[0-7]; n01 leased 0-7 owner=bob age=60 id=B",
     "8",
     {}},
};

class QuotaVictims : public ::testing::TestWithParam<QuotaCase> {};

TEST_P(QuotaVictims, AreTheBorrowedFirst) {
  const QuotaCase& c = GetParam();
  PoolState s;
  s.setQuotas(parseQuotas(c.quotas, "quotas"));
  addInventory(s, c.inventory, t0());
  SubmitResult r = s.submit(parseRequest(c.request), t0());
  EXPECT_FALSE(r.lease.has_value());
  std::vector<std::string> expected = c.expected;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(test::leasesUnderNotice(s), expected) << c.inventory;
  EXPECT_EQ(s.checkInvariants(), "");
}

INSTANTIATE_TEST_SUITE_P(Table, QuotaVictims, ::testing::ValuesIn(kQuotaCases), test::ByCaseName());

TEST(Quotas, AReclaimSaysWhy) {
  PoolState s;
  s.setQuotas(parseQuotas("group vision guaranteed=8 members=alice\nowner bob guaranteed=0", "q"));
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-7 owner=bob age=700 id=B", t0());
  s.submit(parseRequest("8"), t0());
  EXPECT_NE(s.leaseMap().at("B").preempt_reason.find(
                "within the guarantee of 8 GPUs of group vision): these GPUs were borrowed"),
            std::string::npos)
      << s.leaseMap().at("B").preempt_reason;
}

// A lease reclaimed for quota may be of equal or higher priority: the reason says it was borrowed,
// not that it is "of lower priority".
TEST(Quotas, AReclaimIsNotCalledOfLowerPriority) {
  PoolState s;
  s.setQuotas(parseQuotas("owner alice guaranteed=8\nowner bob guaranteed=0\nowner carol guaranteed=0", "q"));
  addInventory(s,
               "n[01-02]/gpu[0-7]; n01 leased 0-7 owner=bob age=700 id=B; "
               "n02 leased 0-7 owner=carol prio=-1 preemptible age=700 id=C",
               t0());
  SubmitResult equal = s.submit(parseRequest("8"), t0());
  ASSERT_FALSE(equal.lease);
  ASSERT_EQ(test::leasesUnderNotice(s), std::vector<std::string>{"B"});
  EXPECT_EQ(
      s.waitReason(equal.ticket),
      "needs 8 GPUs, 0 free; preempting 1 lease borrowed beyond its quota's guarantee (ending within the "
      "grace period)");
}

TEST(Quotas, ALimitHoldsARequestBackUntilItsOwnersReleaseAndRefusesOneOverIt) {
  PoolState s;
  s.setQuotas(parseQuotas("owner alice guaranteed=0 limit=8", "q"));
  addInventory(s, "n[01-02]/gpu[0-7]", t0());
  SubmitResult first = s.submit(parseRequest("6"), t0());
  ASSERT_TRUE(first.lease);
  SubmitResult second = s.submit(parseRequest("4"), t0());
  ASSERT_FALSE(second.lease) << "granted past the limit: " << gpuList(second.lease->gpus);
  // Not "about to start": its limit holds it back, whatever is free.
  EXPECT_EQ(s.waitReason(second.ticket),
            "needs 4 GPUs, 10 free; over its quota: owner alice holds 6 of its limit of 8 GPUs");
  // Someone else's request is not held back by alice's limit.
  EXPECT_TRUE(s.submit(parseRequest("4 owner=bob"), t0()).lease);
  s.release(first.lease->id, "alice", false, t0() + seconds(1));
  EXPECT_EQ(s.poll(second.ticket, t0() + seconds(1)).status, QueueEntry::Status::kGranted);
  try {
    s.submit(parseRequest("9"), t0() + seconds(2));
    FAIL() << "a request over the limit was queued";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kNeverFits);
    EXPECT_NE(std::string(e.what()).find("owner alice may hold at most 8 GPUs"), std::string::npos)
        << e.what();
  }
}

TEST(Quotas, UseIsShownAgainstEachQuota) {
  PoolState s;
  s.setQuotas(
      parseQuotas("group vision guaranteed=4 limit=16 members=alice,bob\nowner carol guaranteed=8", "q"));
  addInventory(s, "n01/gpu[0-7]; n01 leased 0-3 owner=alice; n01 leased 4-5 owner=bob", t0());
  s.submit(parseRequest("8 owner=carol"), t0());
  std::vector<QuotaUse> use = s.quotaUse();
  ASSERT_EQ(use.size(), 2u);
  EXPECT_EQ(use[0].used, 6);
  EXPECT_EQ(use[0].borrowed, 2);
  EXPECT_EQ(use[1].used, 0);
  EXPECT_EQ(use[1].waiting, 8);
}

}  // namespace
}  // namespace poolrun::pool
