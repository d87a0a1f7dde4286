// The usage ledger (pool/core/src/usage.cpp, accounting.cpp) on a fake clock: rows opened and closed
// with their leases, fed by heartbeats (utilisation, the energy counter or power), resized with
// elastic leases, stored and loaded back, folded into days and forgotten; reports pro rata.

#include <gtest/gtest.h>

#include <cmath>

#include "inventory.hpp"
#include "poolrun/pool/store.hpp"
#include "poolrun/pool/usage_json.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::hours;
using std::chrono::seconds;
using test::addInventory;
using test::livePool;
using test::parseRequest;
using test::t0;

// A heartbeat of `node` at `at`: every GPU at `utilization`, its energy counter at `energy_mj`
// (none where nullopt) and drawing `power_w`.
void beat(PoolState& state, const std::string& node, TimePoint at, double utilization,
          std::optional<uint64_t> energy_mj = std::nullopt, std::optional<double> power_w = std::nullopt) {
  Heartbeat hb = test::heartbeatOf(state, node, utilization);
  for (topo::GpuSample& g : hb.gpus) {
    g.time = at;
    g.energy_mj = energy_mj;
    g.power_w = power_w;
  }
  state.heartbeat(hb, at);
}

double sum(const std::vector<UsageTotals>& rows, double UsageTotals::*field) {
  double s = 0;
  for (const UsageTotals& t : rows) s += t.*field;
  return s;
}

UsageTotals only(const std::vector<UsageTotals>& rows, const std::string& name) {
  for (const UsageTotals& t : rows)
    if (t.name == name) return t;
  ADD_FAILURE() << "no row " << name;
  return {};
}

// Four GPUs held 100 s, sampled every 5 s at 50% and 60 W (the counter's growth): 400 GPU-s
// allocated, 200 used, none idle, 24 kJ; the row closed "released".
TEST(UsageLedger, ALeaseCountsItsGpuSecondsItsUseAndItsEnergyFromGrantToRelease) {
  PoolState s = livePool("n01/gpu[0-7]");
  beat(s, "n01", t0() + seconds(10), 0.5, 1'000'000);
  const std::string id = s.submit(parseRequest("4"), t0() + seconds(10)).lease->id;
  for (int k = 1; k <= 20; ++k) beat(s, "n01", t0() + seconds(10 + 5 * k), 0.5, 1'000'000 + 300'000 * k);
  s.release(id, "alice", false, t0() + seconds(110));
  const std::vector<UsageRecord> rows = s.usage().ofLease(id);
  ASSERT_EQ(rows.size(), 1u);
  const UsageRecord& r = rows[0];
  EXPECT_EQ(r.owner, "alice");
  EXPECT_EQ(r.node, "n01");
  EXPECT_EQ(r.model, "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE(r.running);
  EXPECT_EQ(r.ended, "released");
  EXPECT_EQ(r.start, t0() + seconds(10));
  EXPECT_EQ(r.end, t0() + seconds(110));
  EXPECT_DOUBLE_EQ(r.allocated_s, 400);
  EXPECT_DOUBLE_EQ(r.used_s, 200);
  EXPECT_DOUBLE_EQ(r.idle_s, 0);
  EXPECT_DOUBLE_EQ(r.energy_j, 4 * 20 * 300.0);
  const UsageTotals alice = only(s.usage().report({}, t0() + seconds(200)), "alice");
  EXPECT_EQ(alice.leases, 1u);
  EXPECT_DOUBLE_EQ(alice.allocated_s, 400);
  const UsageTotals owner = s.usage().totalsByOwner(t0() + seconds(500)).at("alice");
  EXPECT_DOUBLE_EQ(owner.allocated_s, 400) << "it ended";
  EXPECT_DOUBLE_EQ(owner.used_s, 200);
  EXPECT_DOUBLE_EQ(owner.energy_j, 4 * 20 * 300.0);
}

// A GPU under --idle-utilization counts idle; a GPU without an energy counter counts its power over
// the span; a span past the node timeout counts only that long; an unknown utilisation counts
// neither used nor idle.
TEST(UsageLedger, IdleTimePowerWithoutACounterAndLongGapsAreCountedAsDocumented) {
  LiveOptions live;
  live.node_timeout = seconds(15);
  live.idle_utilization = 0.05;
  PoolState s = livePool("n01/gpu[0-1]", live);
  beat(s, "n01", t0(), 0.0);
  const std::string id = s.submit(parseRequest("2"), t0()).lease->id;
  beat(s, "n01", t0() + seconds(10), 0.01, std::nullopt, 100.0);  // idle, 100 W for 10 s
  beat(s, "n01", t0() + seconds(70), 1.0, std::nullopt, 200.0);   // 60 s apart: 15 s counted
  Heartbeat unknown = test::heartbeatOf(s, "n01", 0);
  for (topo::GpuSample& g : unknown.gpus) {
    g.time = t0() + seconds(80);
    g.sm_utilization.reset();
  }
  s.heartbeat(unknown, t0() + seconds(80));
  s.release(id, "alice", false, t0() + seconds(80));
  const UsageRecord r = s.usage().ofLease(id).at(0);
  EXPECT_DOUBLE_EQ(r.allocated_s, 2 * 80.0);
  EXPECT_DOUBLE_EQ(r.idle_s, 2 * 10.0);
  EXPECT_DOUBLE_EQ(r.used_s, 2 * (0.01 * 10 + 1.0 * 15));
  EXPECT_DOUBLE_EQ(r.energy_j, 2 * (100.0 * 10 + 200.0 * 15));

  // An energy counter that jumps past what a GPU can draw (an agent's absurd figure), or goes back
  // (its driver reloaded): the span's power counts instead.
  const std::string next = s.submit(parseRequest("2"), t0() + seconds(80)).lease->id;
  beat(s, "n01", t0() + seconds(85), 0.5, 1'000, 300.0);
  beat(s, "n01", t0() + seconds(90), 0.5, 1'000 + 1'000'000'000'000, 300.0);  // 1 GJ in 5 s
  beat(s, "n01", t0() + seconds(95), 0.5, 500, 300.0);                        // went back
  beat(s, "n01", t0() + seconds(100), 0.5, 500 + 1'500'000, 300.0);           // 1.5 kJ in 5 s: 300 W
  s.release(next, "alice", false, t0() + seconds(100));
  EXPECT_DOUBLE_EQ(s.usage().ofLease(next).at(0).energy_j, 2 * (300.0 * 5 * 3 + 1'500.0));
}

// MPS shares count their part of the GPU; a lease over two nodes has a row per node; the owner's
// quota group is its account.
TEST(UsageLedger, SharesCountTheirPartAndEachNodeOfALeaseHasItsRow) {
  PoolState s = livePool("n[01-03]/gpu[0-7]");
  s.setQuotas(parseQuotas("group vision guaranteed=0 members=alice,bob\n", "q"));
  const std::string shared = s.submit(parseRequest("1 share=0.25 owner=bob"), t0()).lease->id;
  const SubmitResult granted = s.submit(parseRequest("16 ppn=8"), t0());
  ASSERT_TRUE(granted.lease);
  const std::string wide = granted.lease->id;
  s.release(shared, "bob", false, t0() + seconds(100));
  s.release(wide, "alice", false, t0() + seconds(10));
  EXPECT_DOUBLE_EQ(s.usage().ofLease(shared).at(0).allocated_s, 25);
  EXPECT_EQ(s.usage().ofLease(shared).at(0).gpus, 0.25);
  const std::vector<UsageRecord> rows = s.usage().ofLease(wide);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NE(rows[0].node, rows[1].node);
  for (const UsageRecord& r : rows) {
    EXPECT_DOUBLE_EQ(r.allocated_s, 80);
    EXPECT_EQ(r.account, "vision");
  }
  const auto byAccount = s.usage().report({.by = UsageBy::kAccount}, t0() + seconds(200));
  ASSERT_EQ(byAccount.size(), 1u);
  EXPECT_DOUBLE_EQ(byAccount[0].allocated_s, 185);
  const auto byNode = s.usage().report({.by = UsageBy::kNode}, t0() + seconds(200));
  EXPECT_DOUBLE_EQ(sum(byNode, &UsageTotals::allocated_s), 185);
  EXPECT_DOUBLE_EQ(only(byNode, rows[0].node).allocated_s + only(byNode, rows[1].node).allocated_s,
                   rows[0].node == "n01" || rows[1].node == "n01" ? 185 : 160);
}

// An elastic lease's row counts each size for as long as it held it.
TEST(UsageLedger, AnElasticLeaseCountsEachSizeForItsTime) {
  PoolState s = livePool("n01/gpu[0-7]");
  const std::string blocker = s.submit(parseRequest("4 owner=bob"), t0()).lease->id;
  const std::string id = s.submit(parseRequest("2 upto=8 every=1"), t0()).lease->id;
  ASSERT_EQ(s.leaseMap().at(id).gpus.size(), 4u) << "grown to the free GPUs at once";
  s.release(blocker, "bob", false, t0() + seconds(100));
  s.tick(t0() + seconds(100));
  ASSERT_EQ(s.leaseMap().at(id).gpus.size(), 8u);
  s.release(id, "alice", false, t0() + seconds(150));
  EXPECT_DOUBLE_EQ(s.usage().ofLease(id).at(0).allocated_s, 4 * 100.0 + 8 * 50.0);
}

// What the store keeps: every row, the next id; after a kill (nothing but what a checkpoint stored),
// a running lease counts on from its last stored time, and a row whose lease is gone is closed
// "lost" at its last stored time.
TEST(UsageLedger, RowsSurviveTheStateFileAndALeaseLostMeanwhileIsClosed) {
  test::TempDir dir;
  PoolState s = livePool("n01/gpu[0-7]");
  const std::string kept = s.submit(parseRequest("2"), t0()).lease->id;
  const std::string lost = s.submit(parseRequest("2 owner=bob"), t0()).lease->id;
  const std::string ended = s.submit(parseRequest("1 owner=carol"), t0()).lease->id;
  s.release(ended, "carol", false, t0() + seconds(30));
  s.accountUsage(t0() + seconds(60));
  Dirty stored = s.takeDirty();
  {
    Store store(dir.path() / "pool.sqlite", Durability::kNormal);
    store.begin();
    store.write(s, stored);
    store.commit();
  }
  // The lease `lost` ends in a way the file never learns of (poold killed before its commit).
  s.release(lost, "bob", false, t0() + seconds(70));
  PoolState back;
  Store(dir.path() / "pool.sqlite", Durability::kNormal).load(back);
  EXPECT_EQ(back.usage().size(), 3u);
  EXPECT_EQ(back.usage().nextId(), s.usage().nextId());
  EXPECT_EQ(back.usage().ofLease(ended), s.usage().ofLease(ended));
  back.release(lost, "bob", false, t0() + seconds(70));  // the file's state still has it
  back.accountUsage(t0() + seconds(90));
  EXPECT_DOUBLE_EQ(back.usage().ofLease(kept).at(0).allocated_s, 2 * 90.0) << "counted on after the load";
  EXPECT_DOUBLE_EQ(back.usage().ofLease(lost).at(0).allocated_s, 2 * 70.0);
  EXPECT_EQ(back.usage().ofLease(ended).at(0).ended, "released");
  EXPECT_DOUBLE_EQ(back.usage().totalsByOwner(t0() + seconds(90)).at("carol").allocated_s, 30);

  // A state whose lease vanished without its row being closed (a restore from an older backup):
  // the first checkpoint closes the row as lost where it was last counted.
  PoolState orphan;
  addInventory(orphan, "n01/gpu[0-7]", t0());
  UsageRecord row = s.usage().ofLease(kept).at(0);
  orphan.loadUsage(row);
  orphan.finishUsageLoad();
  orphan.accountUsage(t0() + seconds(500));
  const UsageRecord closed = orphan.usage().ofLease(kept).at(0);
  EXPECT_FALSE(closed.running);
  EXPECT_EQ(closed.ended, "lost");
  EXPECT_EQ(closed.end, row.end);
  EXPECT_FALSE(orphan.takeDirty().usage.empty()) << "the close is stored";
}

// Past the detail, ended rows become a row per day, each day its share of the lease's time; past
// the retention, rows are forgotten into the owner's total, which never goes down.
TEST(UsageLedger, OldRowsAreFoldedIntoDaysThenForgottenAndTheOwnersTotalStays) {
  PoolState s = livePool("n01/gpu[0-7]");
  UsageOptions options;
  options.detail = hours(24 * 2);
  options.retention = hours(24 * 10);
  s.setUsageOptions(options);
  const TimePoint midnight = TimePoint(std::chrono::floor<std::chrono::days>(t0().time_since_epoch()));
  const TimePoint start = midnight + hours(18);
  const std::string id = s.submit(parseRequest("2"), start).lease->id;
  s.release(id, "alice", false, start + hours(12));  // 6 h on the first day, 6 on the next
  const double total = s.usage().totalsByOwner(start + hours(12)).at("alice").allocated_s;
  EXPECT_DOUBLE_EQ(total, 2 * 12 * 3600.0);
  s.accountUsage(start + hours(24));
  EXPECT_EQ(s.usage().ofLease(id).size(), 1u) << "within the detail";
  s.accountUsage(start + hours(24 * 3));
  EXPECT_TRUE(s.usage().ofLease(id).empty()) << "folded";
  std::vector<UsageRecord> days;
  s.usage().forEach([&](const UsageRecord& r) {
    if (r.kind == UsageRecord::Kind::kDay) days.push_back(r);
  });
  ASSERT_EQ(days.size(), 2u);
  EXPECT_EQ(days[0].start, midnight);
  EXPECT_DOUBLE_EQ(days[0].allocated_s, 2 * 6 * 3600.0);
  EXPECT_EQ(days[1].start, midnight + hours(24));
  EXPECT_DOUBLE_EQ(days[1].allocated_s, 2 * 6 * 3600.0);
  EXPECT_DOUBLE_EQ(s.usage().totalsByOwner(start + hours(72)).at("alice").allocated_s, total);
  // A report of the second day alone.
  UsageQuery second{.by = UsageBy::kOwner, .since = midnight + hours(24), .until = midnight + hours(48)};
  EXPECT_DOUBLE_EQ(only(s.usage().report(second, start + hours(72)), "alice").allocated_s, 2 * 6 * 3600.0);
  s.accountUsage(start + hours(24 * 12));
  size_t left = 0;
  s.usage().forEach([&](const UsageRecord& r) {
    ++left;
    EXPECT_EQ(r.kind, UsageRecord::Kind::kTotal);
  });
  EXPECT_EQ(left, 1u) << "only alice's total";
  EXPECT_TRUE(s.usage().report({}, start + hours(24 * 12)).empty());
  EXPECT_DOUBLE_EQ(s.usage().totalsByOwner(start + hours(24 * 12)).at("alice").allocated_s, total);
}

// A lease older than the rows folded away keeps its row whole through the ledger's compaction: its
// lease and job ids (a row moved onto itself once lost them, and the store then refused the file).
TEST(UsageLedger, ALongLeaseKeepsItsRowWhenNewerOnesAreFoldedAway) {
  UsageOptions options;
  options.detail = hours(24);
  UsageLedger ledger;
  Dirty dirty;
  Lease old;
  old.id = "L-old";
  old.owner = "alice";
  ledger.holds(old, "", {{"n01", "H100", 8}}, t0(), dirty);
  ledger.setJob("L-old", "J1", dirty);
  for (int i = 0; i < 8; ++i) {
    Lease l;
    l.id = "L" + std::to_string(i);
    l.owner = "bob";
    ledger.holds(l, "", {{"n02", "H100", 1}}, t0() + seconds(i), dirty);
    ledger.ended(l.id, "released", t0() + seconds(100 + i), dirty);
  }
  ledger.checkpoint(t0() + hours(24 * 3), options, dirty);
  const std::vector<UsageRecord> rows = ledger.ofLease("L-old");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].lease, "L-old");
  EXPECT_EQ(rows[0].job, "J1");
  EXPECT_TRUE(rows[0].running);
  EXPECT_EQ(ledger.ofJob("J1").size(), 1u);
  ledger.forEach([](const UsageRecord& r) { EXPECT_NO_THROW(checkUsageRecord(r)) << r.id; });
}

// An expired lease counts up to when the pool ended it (its GPUs were held until then); a GPU's span is
// poold's time between two heartbeats, whatever the agent's clock says; MPS shares without a limit share what
// the GPU did.
TEST(UsageLedger, ExpiryAgentClocksAndUnlimitedSharesAreCountedHonestly) {
  PoolState s = livePool("n01/gpu[0-1]");
  LeaseRequest r = parseRequest("1");
  r.ttl = seconds(60);
  const std::string id = s.submit(r, t0()).lease->id;
  s.accountUsage(t0() + seconds(30));
  s.tick(t0() + seconds(600));  // seen expired ten minutes late: its GPUs were held until then
  ASSERT_FALSE(s.leaseMap().count(id));
  EXPECT_DOUBLE_EQ(s.usage().ofLease(id).at(0).allocated_s, 600);
  EXPECT_EQ(s.usage().ofLease(id).at(0).ended, "expired");

  // Heartbeats as poold receives them, each GPU at full use drawing 100 W.
  auto beatAt = [&](TimePoint agent, TimePoint poold) {
    Heartbeat hb = test::heartbeatOf(s, "n01", 1.0);
    for (topo::GpuSample& g : hb.gpus) {
      g.time = agent;
      g.power_w = 100.0;
    }
    s.heartbeat(hb, poold);
  };
  beatAt(t0() + seconds(600), t0() + seconds(600));  // the node is back
  // Two shares of bob's without an SM limit (memory alone): one GPU, each a whole GPU's allocation.
  const SubmitResult first = s.submit(parseRequest("1 gpumem=10G owner=bob"), t0() + seconds(600));
  const SubmitResult second = s.submit(parseRequest("1 gpumem=10G owner=bob"), t0() + seconds(600));
  ASSERT_TRUE(first.lease && second.lease);
  const std::string a = first.lease->id, b = second.lease->id;
  ASSERT_EQ(first.lease->gpus[0].index, second.lease->gpus[0].index) << "one GPU, one owner";
  // 5 s apart as poold receives them; the agent's clock says a day passes between the last ones.
  beatAt(t0() + seconds(605), t0() + seconds(605));
  beatAt(t0() + seconds(605 + 86'400), t0() + seconds(610));
  beatAt(t0() + seconds(605 + 2 * 86'400), t0() + seconds(615));
  for (const std::string& lease : {a, b}) {
    const UsageRecord row = s.usage().ofLease(lease).at(0);
    EXPECT_DOUBLE_EQ(row.used_s, 0.5 * 15) << "half of poold's three spans of 5 s each";
    EXPECT_DOUBLE_EQ(row.energy_j, 0.5 * 100 * 15) << "the GPU's energy counted once between them";
  }
}

// A report over part of a row counts that part of it.
TEST(UsageLedger, AReportCountsARowInProportionToItsTimeInsideTheRange) {
  PoolState s = livePool("n01/gpu[0-7]");
  const std::string id = s.submit(parseRequest("4"), t0()).lease->id;
  s.release(id, "alice", false, t0() + seconds(100));
  UsageQuery q{.by = UsageBy::kOwner, .since = t0() + seconds(50), .until = t0() + seconds(150)};
  EXPECT_DOUBLE_EQ(sum(s.usage().report(q, t0() + seconds(200)), &UsageTotals::allocated_s), 200);
  q.since = t0() + seconds(100);
  EXPECT_TRUE(s.usage().report(q, t0() + seconds(200)).empty()) << "the range starts as it ends";
  // A running lease counts up to now in a report, though its row was last counted earlier.
  const std::string running = s.submit(parseRequest("2"), t0() + seconds(200)).lease->id;
  EXPECT_DOUBLE_EQ(only(s.usage().report({.by = UsageBy::kOwner}, t0() + seconds(260)), "alice").allocated_s,
                   400 + 2 * 60.0);
  EXPECT_EQ(s.usage().ofLease(running).at(0).allocated_s, 0) << "the row itself waits for a checkpoint";
}

// A job's rows are found by its id: every node of its lease (one it grew onto too), and the lease of
// its next run (a requeued job); after a load as well.
TEST(UsageLedger, AJobsLeasesAreFoundByItsIdAcrossGrowthRequeuesAndLoads) {
  UsageLedger ledger;
  Dirty dirty;
  Lease first;
  first.id = "L1";
  first.owner = "alice";
  ledger.holds(first, "", {{"n01", "H100", 4}}, t0(), dirty);
  ledger.setJob("L1", "J7", dirty);
  ledger.holds(first, "", {{"n01", "H100", 4}, {"n02", "H100", 2}}, t0() + seconds(10), dirty);
  ledger.ended("L1", "released", t0() + seconds(20), dirty);
  Lease again = first;
  again.id = "L2";
  ledger.holds(again, "", {{"n03", "H100", 1}}, t0() + seconds(30), dirty);
  ledger.setJob("L2", "J7", dirty);
  const UsageTotals t = ledger.ofJobTotals("J7", t0() + seconds(40));
  EXPECT_EQ(t.leases, 3u);
  EXPECT_DOUBLE_EQ(t.allocated_s, 4 * 20 + 2 * 10 + 1 * 10.0) << "the running lease up to now";
  EXPECT_TRUE(ledger.ofJob("J8").empty());
  UsageLedger loaded;
  ledger.forEach([&](const UsageRecord& r) { loaded.load(r); });
  loaded.finishLoad();
  EXPECT_EQ(loaded.ofJob("J7"), ledger.ofJob("J7"));
}

// A stored row is read as strictly as any: each wrong field named.
TEST(UsageLedger, ADamagedRowIsRefusedNamingWhatIsWrong) {
  UsageRecord r;
  r.id = 3;
  r.lease = "L1";
  r.owner = "alice";
  r.start = t0();
  r.end = t0() + seconds(5);
  r.allocated_s = 5;
  EXPECT_EQ(usageRecordFromJson(toJson(r)), r);
  auto refused = [](nlohmann::json doc, const std::string& why) {
    try {
      usageRecordFromJson(doc);
      ADD_FAILURE() << "taken: " << doc.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  nlohmann::json doc = toJson(r);
  refused(nlohmann::json::array(), "not an object");
  refused(
      [&] {
        auto d = doc;
        d.erase("id");
        return d;
      }(),
      "'id'");
  refused(
      [&] {
        auto d = doc;
        d["kind"] = "week";
        return d;
      }(),
      "kind 'week'");
  refused(
      [&] {
        auto d = doc;
        d["allocated_s"] = -1;
        return d;
      }(),
      "'allocated_s' is -1");
  refused(
      [&] {
        auto d = doc;
        d["energy_j"] = "lots";
        return d;
      }(),
      "'energy_j'");
  refused(
      [&] {
        auto d = doc;
        d["end_ms"] = 0;
        return d;
      }(),
      "ends before it starts");
  refused(
      [&] {
        auto d = doc;
        d["lease"] = "";
        return d;
      }(),
      "without its lease");
  refused(
      [&] {
        auto d = doc;
        d["kind"] = "total";
        d["running"] = true;
        return d;
      }(),
      "only a lease row runs");
  refused(
      [&] {
        auto d = doc;
        d["owner"] = "";
        return d;
      }(),
      "no owner");
  refused(
      [&] {
        auto d = doc;
        d["start_ms"] = 1.5;
        return d;
      }(),
      "'start_ms'");
  refused(
      [&] {
        auto d = doc;
        d["end_ms"] = int64_t{9'300'000'000'000'000};
        return d;
      }(),
      "2262");
  refused(
      [&] {
        auto d = doc;
        d["start_ms"] = -1;
        return d;
      }(),
      "'start_ms' is -1");
  refused(
      [&] {
        auto d = doc;
        d["gpus"] = 1e300;
        return d;
      }(),
      "'gpus'");
  refused(
      [&] {
        auto d = doc;
        d["kind"] = "day";
        return d;
      }(),
      "does not span one day");
}

}  // namespace
}  // namespace poolrun::pool
