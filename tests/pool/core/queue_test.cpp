// The queue (priority, first come first served, backfill), leases (TTL, renew, expiry, release)
// and health (failed GPUs, draining), driven by a fake clock.

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <random>

#include "inventory.hpp"
#include "poolrun/pool/queue_wait.hpp"
#include "support/test_names.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;
using test::addInventory;
using test::gpuList;
using test::parseRequest;

using test::t0;

struct QueueCase {
  const char* name;
  const char* inventory;
  std::vector<const char*> requests;  // submitted in order at t0
  std::vector<const char*> expected;  // per request: granted GPUs, or "#P" queued at position P
};

const QueueCase kQueueCases[] = {
    {"first come first served", "n01/gpu[0-7]; n01 leased 0-7", {"4", "4"}, {"#1", "#2"}},
    {"priority goes first", "n01/gpu[0-7]; n01 leased 0-7", {"4", "4 prio=5"}, {"#2", "#1"}},
    {"no overtaking without durations", "n01/gpu[0-7]; n01 leased 0-5 for 100", {"8", "2"}, {"#1", "#2"}},
    {"backfill that ends before the head starts",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8", "2 max=50"},
     {"#1", "n01:6-7"}},
    {"no backfill past the head's start",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8", "2 max=150"},
     {"#1", "#2"}},
    {"backfill on GPUs the head will not use",
     "n[01-02]/gpu[0-7]; n01 leased 0-7 for 100; n02 leased 0-3",
     {"8", "4"},
     {"#1", "n02:4-7"}},
    {"gang: nothing held while waiting",
     "n[01-02]/gpu[0-7]; n01 leased 0-3 for 100",
     {"16", "4 max=10"},
     {"#1", "n01:4-7"}},
};

// Every combination of a running lease (with an end, without), a waiting head (with and without a
// maximum duration) and a later, smaller request (none, ending before the head's start, after it):
// the later request starts at once only when it provably does not delay the head.
const QueueCase kOvertakingCases[] = {
    {"ended lease, head bounded, later unbounded",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8 max=50", "2"},
     {"#1", "#2"}},
    {"ended lease, head bounded, later short",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8 max=50", "2 max=50"},
     {"#1", "n01:6-7"}},
    {"ended lease, head bounded, later long",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8 max=50", "2 max=150"},
     {"#1", "#2"}},
    {"ended lease, head unbounded, later unbounded",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8", "2"},
     {"#1", "#2"}},
    {"ended lease, head unbounded, later short",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8", "2 max=100"},
     {"#1", "n01:6-7"}},
    {"ended lease, head unbounded, later long",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8", "2 max=101"},
     {"#1", "#2"}},
    {"endless lease, head bounded, later unbounded",
     "n01/gpu[0-7]; n01 leased 0-5",
     {"8 max=50", "2"},
     {"#1", "#2"}},
    {"endless lease, head bounded, later short",
     "n01/gpu[0-7]; n01 leased 0-5",
     {"8 max=50", "2 max=1"},
     {"#1", "#2"}},
    {"endless lease, head unbounded, later unbounded",
     "n01/gpu[0-7]; n01 leased 0-5",
     {"8", "2"},
     {"#1", "#2"}},
    {"endless lease, head unbounded, later short",
     "n01/gpu[0-7]; n01 leased 0-5",
     {"8", "2 max=1"},
     {"#1", "#2"}},
    {"endless and ended leases, head unbounded, later short",
     "n01/gpu[0-7]; n01 leased 0-3; n01 leased 4-5 for 100",
     {"8", "2 max=50"},
     {"#1", "#2"}},
    {"endless lease elsewhere, head fits on another node",
     "n[01-02]/gpu[0-7]; n01 leased 0-5",
     {"8", "2"},
     {"n02:0-7", "n01:6-7"}},
    {"endless leases, a later request on GPUs the head will not use",
     "n[01-03]/gpu[0-7]; n01 leased 0-5; n02 leased 0-5",
     {"16", "2"},
     {"#1", "n03:0-1"}},
    {"endless lease, a later request of higher priority goes first",
     "n01/gpu[0-7]; n01 leased 0-5",
     {"8", "2 prio=5"},
     {"#1", "n01:6-7"}},
};

void PrintTo(const QueueCase& c, std::ostream* os) {
  *os << c.name;
}

class QueueTable : public ::testing::TestWithParam<QueueCase> {};

TEST_P(QueueTable, Orders) {
  const QueueCase& c = GetParam();
  PoolState state;
  addInventory(state, c.inventory, t0());
  std::vector<int64_t> tickets;
  std::vector<std::string> got;
  for (const char* r : c.requests) {
    SubmitResult s = state.submit(parseRequest(r), t0());
    got.push_back(s.lease ? gpuList(s.lease->gpus) : "");
    tickets.push_back(s.ticket);
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].empty()) got[i] = "#" + std::to_string(state.poll(tickets[i], t0()).position);
  EXPECT_EQ(got, std::vector<std::string>(c.expected.begin(), c.expected.end())) << c.inventory;
}

INSTANTIATE_TEST_SUITE_P(Pool, QueueTable, ::testing::ValuesIn(kQueueCases), test::ByCaseName());
INSTANTIATE_TEST_SUITE_P(Overtaking, QueueTable, ::testing::ValuesIn(kOvertakingCases), test::ByCaseName());

TEST(Queue, NoRequestWaitsForeverWhileThePoolKeepsFreeingGpus) {
  // Two nodes, every GPU held by endless 2-GPU leases that are released one after another, while
  // a stream of small endless requests keeps arriving. A request for the whole pool waits at the
  // head: each GPU freed must go to it, not to the small requests behind it, so that it starts
  // once the leases it waited for are gone.
  std::mt19937 rng(11);
  for (int round = 0; round < 4; ++round) {
    PoolState state;
    addInventory(state, "n[01-02]/gpu[0-7]", t0());
    TimePoint now = t0();
    std::vector<Lease> running;
    for (int i = 0; i < 8; ++i) running.push_back(*state.submit(parseRequest("2"), now).lease);
    int64_t big = state.submit(parseRequest("16 owner=bob"), now).ticket;
    std::vector<int64_t> small;
    bool granted = false;
    int steps = 0;
    for (; steps < 200 && !granted; ++steps) {
      now += seconds(1);
      small.push_back(state.submit(parseRequest(std::to_string(1 + steps % 2)), now).ticket);
      if (!running.empty() && steps % 3 == 0) {
        size_t pick = std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
        state.release(running[pick].id, "alice", false, now);
        running.erase(running.begin() + static_cast<ptrdiff_t>(pick));
      }
      state.tick(now, std::chrono::hours(1));
      for (int64_t t : small) {
        PollResult p = state.poll(t, now);
        ASSERT_NE(p.status, QueueEntry::Status::kGranted) << "round " << round
                                                          << ": a small request behind "
                                                             "the head started on a GPU it was waiting for";
      }
      PollResult p = state.poll(big, now);
      granted = p.status == QueueEntry::Status::kGranted;
      if (!granted) {
        EXPECT_EQ(p.position, 1);
      }
    }
    EXPECT_TRUE(granted) << "round " << round << ": the whole-pool request never started";
    EXPECT_TRUE(running.empty()) << "it started as soon as the last lease it waited for was gone";
    EXPECT_LE(steps, 3 * 8 + 1);
  }
}

TEST(Queue, ReleaseGrantsTheHeadInPriorityOrder) {
  PoolState state;
  addInventory(state, "n01/gpu[0-7]", t0());
  Lease a = *state.submit(parseRequest("8"), t0()).lease;
  int64_t b = state.submit(parseRequest("8 owner=bob"), t0()).ticket;
  int64_t c = state.submit(parseRequest("8 prio=5 owner=carol"), t0() + seconds(1)).ticket;
  EXPECT_TRUE(state.release(a.id, "alice", false, t0() + seconds(2)));
  PollResult pc = state.poll(c, t0() + seconds(2));
  ASSERT_EQ(pc.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(pc.lease->owner, "carol");
  EXPECT_EQ(state.poll(b, t0() + seconds(2)).position, 1);
  EXPECT_THROW(state.poll(c, t0() + seconds(2)), PoolError) << "a collected grant leaves the queue";
}

TEST(Queue, BackfilledLeaseNeverDelaysTheHead) {
  // The head needs the whole node; the running lease ends at 100 s. Short requests fill the
  // idle GPUs meanwhile; the head still starts at 100 s.
  PoolState state;
  addInventory(state, "n01/gpu[0-7]; n01 leased 0-5 for 100", t0());
  int64_t head = state.submit(parseRequest("8"), t0()).ticket;
  ASSERT_EQ(state.plannedStart(head), t0() + seconds(100));
  SubmitResult s1 = state.submit(parseRequest("2 max=60"), t0());
  ASSERT_TRUE(s1.lease) << "backfilled";
  state.tick(t0() + seconds(60), std::chrono::hours(1));
  SubmitResult s2 = state.submit(parseRequest("1 max=40"), t0() + seconds(60));
  ASSERT_TRUE(s2.lease) << "backfilled after the first ended";
  EXPECT_FALSE(state.submit(parseRequest("1 max=41"), t0() + seconds(60), false).lease)
      << "would end after 100 s";
  state.tick(t0() + seconds(100), std::chrono::hours(1));
  PollResult p = state.poll(head, t0() + seconds(100));
  ASSERT_EQ(p.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(p.lease->created, t0() + seconds(100));
}

// poold ticks every 250 ms; a request that comes between the end of a lease's maximum duration and
// the tick that drops it must not be given that lease's GPUs (it was: "placement chose n01:0, held
// by ..." as an internal error).
TEST(Queue, ARequestBeforeTheTickThatEndsALeaseWaitsForIt) {
  for (const char* request : {"8", "8 max=50"}) {
    SCOPED_TRACE(request);
    PoolState state;
    addInventory(state, "n01/gpu[0-7]; n01 leased 0-7 for 10", t0());
    SubmitResult r = state.submit(parseRequest(request), t0() + seconds(20));
    ASSERT_FALSE(r.lease);
    state.tick(t0() + seconds(20));
    EXPECT_EQ(state.poll(r.ticket, t0() + seconds(20)).status, QueueEntry::Status::kGranted);
  }
}

// Requests without a maximum duration are planned through the timeline's index of when each GPU
// is free for good; a walk over the pool (the way requests with one are planned) must plan them
// alike: the same grants, the same GPUs, the same planned starts, step by step.
// A flood of requests that cannot start now, each behind the others: each enqueue is planned
// against the last pass's plan, not by a pass over the whole queue (that made 2,000 of them cost
// poold 21 s of CPU); what it plans is what a pass plans. A request that sorts ahead of waiting
// ones, and a change to the leases, take a whole pass.
TEST(Queue, AnEnqueueBehindEveryWaitingRequestPlansItAloneAsAPassWould) {
  PoolState state;
  addInventory(state, "n[01-16]/gpu[0-7]@leaf1; n01 leased 0 for 100", t0());
  const uint64_t before = state.schedulingPasses();
  std::vector<int64_t> tickets;
  for (int i = 0; i < 500; ++i) {
    SubmitResult s = state.submit(parseRequest("128 owner=mallory"), t0() + std::chrono::milliseconds(i));
    ASSERT_FALSE(s.lease);
    ASSERT_EQ(s.position, i + 1);
    tickets.push_back(s.ticket);
  }
  EXPECT_LE(state.schedulingPasses() - before, 2u) << "a pass per enqueue";
  EXPECT_EQ(state.checkInvariants(), "");
  // As a pass plans them: the first once the lease ends, every other one once it could ever start.
  std::vector<std::optional<TimePoint>> kept;
  for (int64_t t : tickets) kept.push_back(state.plannedStart(t));
  EXPECT_EQ(kept.front(), t0() + seconds(100));
  state.replan(t0() + std::chrono::milliseconds(500));
  for (size_t i = 0; i < tickets.size(); ++i) ASSERT_EQ(state.plannedStart(tickets[i]), kept[i]) << i;
  // Ahead of the waiting ones (a higher priority): a pass. What fits now behind them still starts
  // where it delays nobody: 127 GPUs are free until the head's start at 100 s, 1 GPU for 50 s.
  const uint64_t passes = state.schedulingPasses();
  EXPECT_FALSE(state.submit(parseRequest("128 prio=5 owner=bob"), t0() + seconds(1)).lease);
  EXPECT_EQ(state.schedulingPasses(), passes + 1);
  EXPECT_TRUE(state.submit(parseRequest("1 max=50 owner=bob"), t0() + seconds(1)).lease)
      << "a gap before the promises";
  EXPECT_EQ(state.checkInvariants(), "");
}

// A random workload on `inventory`, planned by the timeline's indexes (fast) and by a walk of the
// pool (slow), step by step: the same grants, GPUs and planned starts.
struct Workload {
  const char* inventory;
  unsigned seed;
  int rounds, steps, largest;  // requests of 1 to `largest` GPUs
  bool preemption = false;     // a third of the requests preemptible (victims of higher priorities), a
                               // sixth elastic (shrunk for them)
};
void plansAsAWalkDoes(const Workload& w) {
  std::mt19937 rng(w.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int round = 0; round < w.rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    PoolState fast, slow;
    slow.setSlowScheduling(true);
    addInventory(fast, w.inventory, t0());
    addInventory(slow, w.inventory, t0());
    if (w.preemption)  // victims from 20 s on (the steps are 1 to 20 s apart)
      for (PoolState* state : {&fast, &slow})
        state->setPreemptOptions({seconds(30), seconds(20), seconds(5)});
    TimePoint now = t0();
    std::vector<std::pair<std::string, std::string>> held;  // the same lease in each: (fast, slow)
    std::set<int64_t> waiting;
    int planned = 0;
    for (int step = 0; step < w.steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      now += seconds(uniform(1, 20));
      if (uniform(0, 2) == 0 && !held.empty()) {
        size_t i = static_cast<size_t>(uniform(0, static_cast<int>(held.size()) - 1));
        fast.release(held[i].first, "alice", true, now);
        slow.release(held[i].second, "alice", true, now);
        held.erase(held.begin() + static_cast<long>(i));
      } else {
        std::string spec = std::to_string(uniform(1, w.largest));
        if (uniform(0, 3) == 0) spec = std::to_string(4 * uniform(1, 3)) + " ppn=4";
        if (uniform(0, 4) == 0) spec += " one-switch";
        if (uniform(0, 2) == 0) spec += " max=" + std::to_string(uniform(20, 300));
        if (uniform(0, 3) == 0) spec += " prio=" + std::to_string(uniform(1, 3));
        if (w.preemption && uniform(0, 2) == 0) spec += " preemptible";
        if (w.preemption && uniform(0, 5) == 0) spec += " upto=" + std::to_string(2 * w.largest);
        SubmitResult a = fast.submit(parseRequest(spec), now);
        SubmitResult b = slow.submit(parseRequest(spec), now);
        ASSERT_EQ(a.lease.has_value(), b.lease.has_value()) << spec;
        ASSERT_EQ(a.ticket, b.ticket);
        if (a.lease) {
          ASSERT_EQ(gpuList(a.lease->gpus), gpuList(b.lease->gpus)) << spec;
          held.emplace_back(a.lease->id, b.lease->id);
        } else {
          waiting.insert(a.ticket);
        }
      }
      fast.tick(now);
      slow.tick(now);
      for (auto it = waiting.begin(); it != waiting.end();) {
        ASSERT_EQ(fast.plannedStart(*it), slow.plannedStart(*it)) << "ticket " << *it;
        planned += fast.plannedStart(*it) ? 1 : 0;
        PollResult a = fast.poll(*it, now);
        PollResult b = slow.poll(*it, now);
        ASSERT_EQ(a.status, b.status) << "ticket " << *it;
        if (a.status == QueueEntry::Status::kWaiting) {
          ++it;
          continue;
        }
        if (a.lease) {
          ASSERT_TRUE(b.lease);
          ASSERT_EQ(gpuList(a.lease->gpus), gpuList(b.lease->gpus)) << "ticket " << *it;
          held.emplace_back(a.lease->id, b.lease->id);
        }
        it = waiting.erase(it);
      }
      ASSERT_EQ(fast.checkInvariants(), "");
      ASSERT_EQ(fast.leasesPreempted(), slow.leasesPreempted());
      ASSERT_EQ(fast.leasesResized(), slow.leasesResized());
    }
    EXPECT_GT(planned, 0) << "the workload never planned a start";
    if (w.preemption) {
      EXPECT_GE(fast.leasesPreempted(), 10u) << "the workload seldom preempted";
    }
  }
}

TEST(Queue, TheTimelinesIndexPlansAsAWalkOfThePoolDoes) {
  plansAsAWalkDoes({"n[01-04]/gpu[0-7]@leaf1; n[05-06]/gpu[0-3]@leaf2; n06 failed 1", 3, 6, 80, 16});
}

// The same on a pool of four switches kept full, where most requests wait behind promises and
// their starts come from the index of when each GPU is first free, and victims preempted for
// higher priorities end early (their GPUs free sooner in the index).
TEST(Queue, TheTimelinesIndexPlansAsAWalkOfABiggerFullerPoolDoes) {
  plansAsAWalkDoes(
      {"n[01-16]/gpu[0-7]@leaf1; n[17-32]/gpu[0-7]@leaf2; n[33-40]/gpu[0-3]@leaf3; "
       "n[41-48]/gpu[0-7]@leaf4; n07 failed 2; n44 failed 0-1",
       17, 3, 250, 64, true});
}

TEST(Queue, RandomWorkloadsNeverDelayTheHead) {
  // Requests of random shape and duration arrive over time; leases run to their maximum end.
  // Whenever a request becomes the head, the start planned for it then must not slip.
  std::mt19937 rng(7);
  for (int round = 0; round < 8; ++round) {
    PoolState state;
    addInventory(state, "n[01-04]/gpu[0-7]@leaf1", t0());
    std::map<int64_t, TimePoint> promised;  // head ticket -> planned start when it became head
    std::set<int64_t> waiting;
    TimePoint now = t0();
    int checked = 0;
    auto collect = [&] {
      for (auto it = waiting.begin(); it != waiting.end();) {
        PollResult p = state.poll(*it, now);
        if (p.status == QueueEntry::Status::kGranted) {
          if (promised.count(*it)) {
            EXPECT_LE(p.lease->created, promised[*it]) << "round " << round << " ticket " << *it;
            ++checked;
          }
          it = waiting.erase(it);
        } else {
          ++it;
        }
      }
    };
    for (int step = 0; step < 120; ++step) {
      TimePoint arrival = now + seconds(std::uniform_int_distribution<int>(0, 20)(rng));
      // Every lease ends exactly at its maximum end; the pool looks again at each end.
      for (;;) {
        TimePoint next = kNever;
        for (const auto& [id, l] : state.leaseMap()) next = std::min(next, *l.max_end);
        if (next > arrival) break;
        now = next;
        state.tick(now);
        collect();
      }
      now = arrival;
      state.tick(now);
      collect();
      int gpus = std::uniform_int_distribution<int>(1, 24)(rng);
      int dur = std::uniform_int_distribution<int>(10, 200)(rng);
      SubmitResult s = state.submit(parseRequest(std::to_string(gpus) + " max=" + std::to_string(dur)), now);
      if (!s.lease) waiting.insert(s.ticket);
      ASSERT_EQ(state.checkInvariants(), "") << "round " << round;
      std::vector<QueueInfo> q = state.queueList();
      if (!q.empty() && !promised.count(q.front().ticket)) {
        std::optional<TimePoint> planned = state.plannedStart(q.front().ticket);
        ASSERT_TRUE(planned);
        promised[q.front().ticket] = *planned;
      }
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(Leases, ExpireUnlessRenewedAndNeverPastMaxDuration) {
  PoolState state;
  addInventory(state, "n01/gpu[0-7]", t0());
  LeaseRequest r = parseRequest("4 max=100");
  r.ttl = seconds(30);
  Lease l = *state.submit(r, t0()).lease;
  EXPECT_EQ(l.expires, t0() + seconds(30));
  EXPECT_EQ(state.renew(l.id, "alice", false, t0() + seconds(20)).expires, t0() + seconds(50));
  EXPECT_EQ(state.renew(l.id, "alice", false, t0() + seconds(45)).expires, t0() + seconds(75));
  EXPECT_EQ(state.renew(l.id, "alice", false, t0() + seconds(74)).expires, t0() + seconds(100)) << "capped";
  state.tick(t0() + seconds(100));
  EXPECT_TRUE(state.leaseMap().empty());
  EXPECT_EQ(state.gpuState("n01", 0), GpuState::kFree);
  try {
    state.renew(l.id, "alice", false, t0() + seconds(101));
    ADD_FAILURE() << "renewed an expired lease";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kGone);
  }

  Lease m = *state.submit(r, t0() + seconds(200)).lease;
  state.tick(t0() + seconds(229));
  EXPECT_EQ(state.leaseMap().count(m.id), 1u);
  state.tick(t0() + seconds(230));
  EXPECT_EQ(state.leaseMap().count(m.id), 0u) << "not renewed within its ttl";
}

TEST(Leases, ReleaseIsIdempotentAndOwnersOnly) {
  PoolState state;
  addInventory(state, "n01/gpu[0-7]", t0());
  Lease l = *state.submit(parseRequest("8"), t0()).lease;
  try {
    state.release(l.id, "mallory", false, t0());
    ADD_FAILURE() << "released another owner's lease";
  } catch (const PoolError& e) {
    EXPECT_EQ(e.failure(), PoolFailure::kForbidden);
    EXPECT_NE(std::string(e.what()).find("mallory"), std::string::npos);
  }
  EXPECT_THROW(state.renew(l.id, "mallory", false, t0()), PoolError);
  EXPECT_EQ(state.leaseMap().size(), 1u);
  EXPECT_TRUE(state.release(l.id, "root", true, t0())) << "an administrator may";
  EXPECT_FALSE(state.release(l.id, "alice", false, t0())) << "again: no error";
  EXPECT_EQ(state.status().gpus_free, 8);
}

TEST(Health, FailedGpusAndDrainedNodes) {
  PoolState state;
  addInventory(state, "n[01-02]/gpu[0-7]", t0());
  Lease l = *state.submit(parseRequest("8"), t0()).lease;
  EXPECT_EQ(gpuList(l.gpus), "n01:0-7");
  state.setNodeState("n01", NodeState::kDraining);
  state.failGpu("n02", 7, t0());
  EXPECT_EQ(state.gpuState("n02", 7), GpuState::kFailed);
  EXPECT_EQ(state.leaseMap().size(), 1u) << "draining lets existing leases run";
  SubmitResult s = state.submit(parseRequest("8"), t0());
  EXPECT_FALSE(s.lease) << "n01 drains, n02 has 7 good GPUs";
  EXPECT_EQ(state.poll(s.ticket, t0()).position, 1);
  state.release(l.id, "alice", false, t0());
  EXPECT_EQ(state.poll(s.ticket, t0()).status, QueueEntry::Status::kWaiting) << "still draining";
  state.setNodeState("n01", NodeState::kUp);
  state.tick(t0());
  PollResult p = state.poll(s.ticket, t0());
  ASSERT_EQ(p.status, QueueEntry::Status::kGranted);
  EXPECT_EQ(gpuList(p.lease->gpus), "n01:0-7");
  EXPECT_EQ(state.status().gpus_failed, 1);
}

TEST(Health, QueuedRequestFailsWhenThePoolShrinksBelowIt) {
  PoolState state;
  addInventory(state, "n01/gpu[0-7]; n01 leased 0", t0());
  int64_t t = state.submit(parseRequest("8"), t0()).ticket;
  state.failGpu("n01", 3, t0());
  state.tick(t0());
  PollResult p = state.poll(t, t0());
  EXPECT_EQ(p.status, QueueEntry::Status::kFailed);
  EXPECT_NE(p.reason.find("no longer"), std::string::npos) << p.reason;
}

TEST(Queue, QuietClientsAreDropped) {
  PoolState state;
  addInventory(state, "n01/gpu[0-7]; n01 leased 0-7", t0());
  int64_t t = state.submit(parseRequest("8"), t0()).ticket;
  state.tick(t0() + seconds(20), seconds(30));
  EXPECT_EQ(state.poll(t, t0() + seconds(20)).position, 1);
  state.tick(t0() + seconds(51), seconds(30));
  EXPECT_THROW(state.poll(t, t0() + seconds(51)), PoolError);
}

// Why a waiting request cannot start now, for every kind of reason: too few free GPUs (those that
// match it), free ones in the wrong shape, free ones held for the requests ahead, and who is ahead.
struct ReasonCase {
  const char* name;
  const char* inventory;
  std::vector<const char*> requests;  // submitted in order at t0; the reason is the last one's
  const char* expected;               // "{N}": the ticket of request N
};

const ReasonCase kReasonCases[] = {
    {"too few free", "n[01-02]/gpu[0-7]; n01 leased 0-7; n02 leased 0-3", {"8"}, "needs 8 GPUs, 4 free"},
    {"one GPU", "n01/gpu[0-7]; n01 leased 0-7", {"1"}, "needs 1 GPU, 0 free"},
    {"behind one", "n01/gpu[0-7]; n01 leased 0-7", {"8", "4"}, "needs 4 GPUs, 0 free; behind ticket {0}"},
    {"behind two",
     "n01/gpu[0-7]; n01 leased 0-7",
     {"8", "4", "2"},
     "needs 2 GPUs, 0 free; behind tickets {0} and {1}"},
    {"behind many",
     "n01/gpu[0-7]; n01 leased 0-7",
     {"8", "4", "2 prio=5", "3", "1"},
     "needs 1 GPU, 0 free; behind tickets {2}, {0}, {1} and 1 more"},
    {"failed GPUs and drained nodes do not count; draining nodes are named",
     "n[01-02]/gpu[0-7]; n01 failed 0-3; n01 leased 4-5; n02 draining",
     {"8"},
     "needs 8 GPUs, 2 free (node n02 is draining: no new lease there)"},
    {"draining nodes that match, a few by name",
     "n[01-06]/gpu[0-1] model=H100; n07/gpu[0-1] model=A100; n01 leased 0-1; n[02-06] draining; n07 draining",
     {"2 model=H100"},
     "needs 2 GPUs, 0 free that match (nodes n02, n03, n04 and 2 more are draining: no new lease there)"},
    {"free GPUs that match",
     "n01/gpu[0-7] model=A100; n02/gpu[0-7] model=H100; n02 leased 0-5",
     {"4 model=H100"},
     "needs 4 GPUs, 2 free that match"},
    {"per node: enough free, not in that shape",
     "n[01-02]/gpu[0-7]; n01 leased 0-3; n02 leased 0-3",
     {"8 ppn=8"},
     "needs 8 GPUs as 8 per node, 8 free, not in that shape"},
    {"whole nodes: enough free, not in that shape",
     "n[01-02]/gpu[0-7]; n01 leased 0; n02 leased 0",
     {"8 whole"},
     "needs 8 GPUs as whole nodes, 14 free, not in that shape"},
    {"held for the head, no maximum duration",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8", "2"},
     "needs 2 GPUs, 2 free, held for the requests ahead (with a maximum duration it could start in a gap); "
     "behind ticket {0}"},
    {"held for the head, too long",
     "n01/gpu[0-7]; n01 leased 0-5 for 100",
     {"8", "2 max=150"},
     "needs 2 GPUs, 2 free, held for the requests ahead (it would not end before they start); behind ticket "
     "{0}"},
};

void PrintTo(const ReasonCase& c, std::ostream* os) {
  *os << c.name;
}

class WaitReason : public ::testing::TestWithParam<ReasonCase> {};

TEST_P(WaitReason, SaysWhyItWaits) {
  const ReasonCase& c = GetParam();
  PoolState state;
  addInventory(state, c.inventory, t0());
  std::vector<int64_t> tickets;
  for (const char* r : c.requests) {
    SubmitResult s = state.submit(parseRequest(r), t0());
    ASSERT_FALSE(s.lease) << r << " was granted at once";
    tickets.push_back(s.ticket);
  }
  std::string expected = c.expected;
  for (size_t i = 0; i < tickets.size(); ++i) {
    std::string mark = "{" + std::to_string(i) + "}";
    if (size_t at = expected.find(mark); at != std::string::npos)
      expected.replace(at, mark.size(), std::to_string(tickets[i]));
  }
  EXPECT_EQ(state.waitReason(tickets.back()), expected);
  EXPECT_EQ(state.poll(tickets.back(), t0()).wait_reason, expected) << "poll says the same";
  EXPECT_EQ(state.queueList().back().reason, expected) << "so does the queue";
}

std::string reasonName(const ::testing::TestParamInfo<ReasonCase>& info) {
  std::string n;
  for (const char* p = info.param.name; *p; ++p) n += std::isalnum(*p) ? *p : '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Pool, WaitReason, ::testing::ValuesIn(kReasonCases), reasonName);

TEST(WaitReasonTest, PlannedStartWhereTheSchedulerHasOne) {
  PoolState state;
  addInventory(state, "n[01-02]/gpu[0-7]; n01 leased 0-5 for 100; n02 leased 0-7", t0());
  int64_t bounded = state.submit(parseRequest("8"), t0()).ticket;   // n01 at 100 s
  int64_t endless = state.submit(parseRequest("16"), t0()).ticket;  // once n02's endless lease ends
  PollResult p = state.poll(bounded, t0());
  EXPECT_EQ(p.planned_start, t0() + seconds(100));
  EXPECT_EQ(state.queueList().front().planned_start, t0() + seconds(100));
  EXPECT_FALSE(state.poll(endless, t0()).planned_start) << "no time to tell: it waits for an endless lease";
  EXPECT_EQ(state.waitReason(12345), "") << "not a waiting ticket";
}

// What a queued client prints: each line, times in UTC here.
TEST(QueueProgressTest, Printed) {
  setenv("TZ", "UTC", 1);
  tzset();
  const TimePoint now = t0() + std::chrono::hours(12);  // noon
  struct Case {
    QueueProgress progress;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{5, 1, seconds(0), "", std::nullopt}, "queued at position 1 (ticket 5), waited 0:00"},
      {{18, 2, seconds(65), "needs 120 GPUs, 108 free; behind ticket 3", now + seconds(180)},
       "queued at position 2 (ticket 18), waited 1:05: needs 120 GPUs, 108 free; behind ticket 3; planned "
       "start "
       "12:03:00 (in 3:00)"},
      {{7, 1, seconds(3723), "needs 8 GPUs, 0 free", now + std::chrono::hours(13)},
       "queued at position 1 (ticket 7), waited 1:02:03: needs 8 GPUs, 0 free; planned start "
       "2019-12-21T01:00:00 (in 13:00:00)"},
  };
  for (const Case& c : cases) EXPECT_EQ(formatQueueProgress(c.progress, now), c.expected);
  EXPECT_EQ(formatElapsed(seconds(42)), "0:42");
  EXPECT_EQ(formatElapsed(seconds(303)), "5:03");
  EXPECT_EQ(formatElapsed(seconds(2 * 86400 + 3600)), "2-01:00:00");
  EXPECT_EQ(formatElapsed(seconds(-5)), "0:00");
}

// A waiting client tells its caller on every change and at least every 30 s, not at every poll.
TEST(QueueProgressTest, PacedOnChangeAndEvery30Seconds) {
  using Steady = std::chrono::steady_clock;
  const Steady::time_point start{};
  const QueueProgress base{3, 2, seconds(0), "needs 8 GPUs, 0 free; behind ticket 1", std::nullopt};
  struct Step {
    int at_s;
    QueueProgress progress;
    bool told;
  };
  auto with = [&](auto change) {
    QueueProgress p = base;
    change(p);
    return p;
  };
  const std::vector<Step> steps = {
      {0, base, true},                                                      // queued
      {1, with([](QueueProgress& p) { p.waited = seconds(1); }), false},    // only time passed
      {29, with([](QueueProgress& p) { p.waited = seconds(29); }), false},  //
      {30, with([](QueueProgress& p) { p.waited = seconds(30); }), true},   // 30 s since the last
      {31, with([](QueueProgress& p) { p.position = 1; }), true},           // moved up
      {32, with([](QueueProgress& p) { p.position = 1; }), false},          //
      {33, with([](QueueProgress& p) {
         p.position = 1;
         p.reason = "needs 8 GPUs, 4 free";
       }),
       true},  // a new reason
      {34, with([](QueueProgress& p) {
         p.position = 1;
         p.reason = "needs 8 GPUs, 4 free";
         p.planned_start = t0();
       }),
       true},  // a planned start
  };
  ProgressPacer pacer;
  for (const Step& s : steps)
    EXPECT_EQ(pacer.due(s.progress, start + seconds(s.at_s)), s.told) << "at " << s.at_s << " s";
}

// Acquire request ids: remembered (and marked for the store) with what they got, forgotten after
// an hour, and never more than the newest kMaxRememberedRequests.
TEST(RememberedRequests, AreKeptForAnHourAndAtMostTheNewestTenThousand) {
  PoolState state;
  state.rememberRequest("alice/R1", {"L1", 0, t0()});
  state.rememberRequest("alice/R2", {"", 7, t0() + seconds(10)});
  ASSERT_NE(state.rememberedRequest("alice/R1"), nullptr);
  EXPECT_EQ(state.rememberedRequest("alice/R2")->ticket, 7);
  EXPECT_EQ(state.rememberedRequest("bob/R1"), nullptr);
  EXPECT_EQ(state.takeDirty().requests, (std::set<std::string>{"alice/R1", "alice/R2"}));
  state.tick(t0() + PoolState::kRequestMemory + seconds(5));
  EXPECT_EQ(state.rememberedRequest("alice/R1"), nullptr) << "an hour old";
  EXPECT_NE(state.rememberedRequest("alice/R2"), nullptr);
  EXPECT_EQ(state.takeDirty().requests, (std::set<std::string>{"alice/R1"})) << "its deletion is written";
  for (size_t i = 0; i < PoolState::kMaxRememberedRequests; ++i)
    state.rememberRequest("bob/" + std::to_string(i), {"", 1, t0() + PoolState::kRequestMemory});
  EXPECT_EQ(state.requestMap().size(), PoolState::kMaxRememberedRequests);
  EXPECT_EQ(state.rememberedRequest("alice/R2"), nullptr) << "the oldest went first";
  EXPECT_NE(state.rememberedRequest("bob/0"), nullptr);
}

}  // namespace
}  // namespace poolrun::pool
