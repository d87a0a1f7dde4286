// The lease keeper's retry policy on an explicit clock (no waiting), then the keeper's thread with
// short intervals: retried until the expiry, ended at once when the pool says the lease is gone.

#include "poolrun/launcher/lease_keeper.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace poolrun::launcher {
namespace {

using namespace std::chrono_literals;
using Event = RenewalPolicy::Event;
using Kind = RenewReply::Kind;
using Time = RenewalPolicy::Time;

const RenewReply kRenewed60{Kind::kRenewed, 60s, ""};
const RenewReply kRefused{Kind::kUnreachable, {}, "connection refused"};

// A lease of 60 s renewed every 20 s, from t = 0.
struct PolicyTest : ::testing::Test {
  Time t0{};
  RenewalPolicy policy{t0, 60s, 20s};
};

TEST_F(PolicyTest, RenewsEveryThirdOfTheTtl) {
  EXPECT_EQ(policy.due(), t0 + 20s);
  EXPECT_EQ(policy.expiry(), t0 + 60s);
  // A renewal that took 300 ms: the lease holds from when it was sent, the next one is due a period on.
  EXPECT_EQ(policy.record(t0 + 20s, t0 + 20300ms, kRenewed60), Event::kRenewed);
  EXPECT_EQ(policy.expiry(), t0 + 80s);
  EXPECT_EQ(policy.due(), t0 + 40s);
  EXPECT_FALSE(policy.failingSince());
}

TEST_F(PolicyTest, FailuresAreRetriedWithBackoffUntilTheExpiry) {
  // The pool goes away after the renewal at 20 s: the lease holds until 80 s.
  ASSERT_EQ(policy.record(t0 + 20s, t0 + 20s, kRenewed60), Event::kRenewed);
  Time at = t0 + 40s;
  std::vector<Event> events;
  std::vector<Time> attempts;
  while (policy.due() < policy.expiry()) {
    attempts.push_back(at);
    events.push_back(policy.record(at, at, kRefused));
    ASSERT_GT(policy.due(), at) << "each attempt is followed by a later one";
    at = policy.due();
  }
  EXPECT_EQ(policy.due(), policy.expiry()) << "no attempt past the expiry: the job ends there";
  EXPECT_EQ(policy.expiry(), t0 + 80s) << "failures do not shorten the lease";
  std::vector<Time> expected{t0 + 40s, t0 + 41s, t0 + 43s, t0 + 47s};        // 1, 2, 4 s
  for (Time t = t0 + 51s; t < t0 + 79750ms; t += 4s) expected.push_back(t);  // doubling stops at 4 s
  expected.push_back(t0 + 79750ms);                                          // the last chance
  EXPECT_EQ(attempts, expected);
  EXPECT_EQ(events.front(), Event::kFirstFailure);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_EQ(events[i], Event::kFailedAgain) << i;
  EXPECT_EQ(policy.failingSince(), t0 + 40s);
  EXPECT_FALSE(policy.expired(t0 + 79999ms));
  EXPECT_TRUE(policy.expired(t0 + 80s));
}

TEST_F(PolicyTest, ARenewalThatGetsThroughEndsTheRetries) {
  policy.record(t0 + 20s, t0 + 20s, kRefused);
  policy.record(t0 + 21s, t0 + 21s, kRefused);
  EXPECT_EQ(policy.due(), t0 + 23s);
  EXPECT_EQ(policy.record(t0 + 23s, t0 + 23s, kRenewed60), Event::kRecovered);
  EXPECT_FALSE(policy.failingSince());
  EXPECT_EQ(policy.expiry(), t0 + 83s);
  EXPECT_EQ(policy.due(), t0 + 43s);
  // The next outage starts the backoff afresh.
  EXPECT_EQ(policy.record(t0 + 43s, t0 + 43s, kRefused), Event::kFirstFailure);
  EXPECT_EQ(policy.due(), t0 + 44s);
}

TEST_F(PolicyTest, GoneEndsAtOnce) {
  EXPECT_EQ(policy.record(t0 + 20s, t0 + 20s, {Kind::kGone, {}, "expired"}), Event::kGone);
}

TEST_F(PolicyTest, AnAttemptThatOutlastsTheBackoffIsFollowedAtOnceByTheNext) {
  // A pool that took 5 s to time out: the next attempt is a backoff after it ended, not after it began.
  policy.record(t0 + 20s, t0 + 25s, kRefused);
  EXPECT_EQ(policy.failingSince(), t0 + 20s);
  EXPECT_EQ(policy.due(), t0 + 26s);
}

TEST(RenewalPolicyTest, APoolThatGrantsLessIsRenewedAtAThirdOfWhatItGranted) {
  // Asked for 60 s (every 20 s); a server-side maximum TTL of 9 s.
  Time t0{};
  RenewalPolicy policy(t0, 9s, 20s);
  EXPECT_EQ(policy.due(), t0 + 3s);
  policy.record(t0 + 3s, t0 + 3s, {Kind::kRenewed, 9s, ""});
  EXPECT_EQ(policy.due(), t0 + 6s);
  EXPECT_EQ(policy.expiry(), t0 + 12s);
}

TEST(RenewalPolicyTest, ALeaseCloseToItsEndGetsItsLastChanceBeforeIt) {
  Time t0{};
  RenewalPolicy policy(t0, 1500ms, 20s, {1000ms, 4000ms, 250ms});
  EXPECT_EQ(policy.due(), t0 + 500ms);
  policy.record(t0 + 500ms, t0 + 500ms, kRefused);
  EXPECT_EQ(policy.due(), t0 + 1250ms) << "a backoff of 1 s would pass the expiry";
  policy.record(t0 + 1250ms, t0 + 1300ms, kRefused);
  EXPECT_EQ(policy.due(), policy.expiry());
}

// The keeper's thread, with intervals of milliseconds.
const RenewalPolicy::Backoff kFast{10ms, 20ms, 5ms};

// Waits (bounded) until the keeper reports the lease lost; the lines it printed meanwhile.
std::vector<std::string> untilLost(LeaseKeeper& keeper, std::string& lost) {
  std::vector<std::string> lines;
  for (int i = 0; i < 500 && lost.empty(); ++i) {
    std::this_thread::sleep_for(10ms);
    LeaseKeeper::News news = keeper.take();
    lines.insert(lines.end(), news.lines.begin(), news.lines.end());
    if (news.lost) lost = *news.lost;
  }
  return lines;
}

TEST(LeaseKeeperTest, APoolThatNeverAnswersAgainLosesTheLeaseAtItsExpiry) {
  std::atomic<int> attempts{0};
  LeaseKeeper keeper(
      "L7", 300ms, 50ms,
      [&] {
        ++attempts;
        return kRefused;
      },
      kFast);
  keeper.start();
  std::string lost;
  std::vector<std::string> lines = untilLost(keeper, lost);
  keeper.stop();
  ASSERT_EQ(lines.size(), 1u) << "one warning, however many attempts";
  EXPECT_NE(
      lines[0].find("warning: cannot renew lease L7 (connection refused); retrying until it expires at "),
      std::string::npos)
      << lines[0];
  EXPECT_GT(attempts.load(), 3) << "retried";
  EXPECT_NE(lost.find("lease L7 expired at "), std::string::npos) << lost;
  EXPECT_NE(lost.find("last: connection refused"), std::string::npos) << lost;
  EXPECT_NE(lost.find("ending the job"), std::string::npos) << lost;
}

TEST(LeaseKeeperTest, TheExpiryEndsTheJobWhileAnAttemptStillWaits) {
  std::atomic<bool> release{false};
  LeaseKeeper keeper("L8", 200ms, 50ms, [&] {
    for (int i = 0; i < 500 && !release; ++i) std::this_thread::sleep_for(10ms);
    return kRenewed60;
  });
  keeper.start();
  std::string lost;
  untilLost(keeper, lost);
  release = true;
  keeper.stop();
  EXPECT_NE(lost.find("lease L8 expired at "), std::string::npos) << lost;
}

TEST(LeaseKeeperTest, GoneIsReportedOnce) {
  LeaseKeeper keeper(
      "L9", 10s, 20ms,
      [] {
        return RenewReply{Kind::kGone, {}, "released by root"};
      },
      kFast);
  keeper.start();
  std::string lost;
  std::vector<std::string> lines = untilLost(keeper, lost);
  keeper.stop();
  EXPECT_TRUE(lines.empty());
  EXPECT_EQ(lost, "lease L9 is gone (released by root): ending the job, whose GPUs are no longer held");
  EXPECT_FALSE(keeper.take().lost) << "said once";
}

TEST(LeaseKeeperTest, PoolNoticesArePrintedWhenTheyAppearChangeAndGo) {
  // Renewals 1-2: node n02 unreachable; 3: also a reclaim warning; 4: the node back; 5+: gone.
  std::atomic<int> renewals{0};
  LeaseKeeper keeper(
      "L10", 10s, 20ms,
      [&] {
        int n = ++renewals;
        RenewReply r{Kind::kRenewed, 10s, ""};
        if (n <= 3) r.notices["node n02"] = {"node n02 unreachable", "node n02 back"};
        if (n == 3 || n == 4) r.notices["reclaim"] = {"idle: reclaimed at 14:00", "busy again"};
        if (n >= 5) return RenewReply{Kind::kGone, {}, "reclaimed"};
        return r;
      },
      kFast);
  keeper.start();
  std::string lost;
  std::vector<std::string> lines = untilLost(keeper, lost);
  keeper.stop();
  EXPECT_EQ(lines,
            (std::vector<std::string>{"node n02 unreachable", "idle: reclaimed at 14:00", "node n02 back"}))
      << "each notice once, its end once; the reclaim notice ends with the lease, not before";
  EXPECT_NE(lost.find("reclaimed"), std::string::npos) << lost;
}

TEST(LeaseKeeperTest, APreemptionIsHandedOnOnceAndTheLeaseStillRenewed) {
  // Every renewal from the second on carries the notice, as the pool's do until the lease ends.
  const auto deadline = std::chrono::system_clock::now() + 120s;
  std::atomic<int> renewals{0};
  LeaseKeeper keeper(
      "L11", 10s, 20ms,
      [&] {
        int n = ++renewals;
        if (n >= 6) return RenewReply{Kind::kGone, {}, "released"};
        RenewReply r{Kind::kRenewed, 10s, ""};
        if (n >= 2)
          r.preempted = PreemptNotice{deadline, "preempted for ticket 4 of bob (priority 10, 8 GPUs)"};
        return r;
      },
      kFast);
  keeper.start();
  std::vector<PreemptNotice> notices;
  std::vector<std::string> lines;
  std::string lost;
  for (int i = 0; i < 500 && lost.empty(); ++i) {
    std::this_thread::sleep_for(10ms);
    LeaseKeeper::News news = keeper.take();
    if (news.preempted) notices.push_back(*news.preempted);
    lines.insert(lines.end(), news.lines.begin(), news.lines.end());
    if (news.lost) lost = *news.lost;
  }
  keeper.stop();
  ASSERT_EQ(notices.size(), 1u) << "one notice, however many renewals carry it";
  EXPECT_EQ(notices[0].deadline, deadline);
  EXPECT_EQ(notices[0].reason, "preempted for ticket 4 of bob (priority 10, 8 GPUs)");
  EXPECT_TRUE(lines.empty()) << "the supervisor says it, in one line of its own";
  EXPECT_EQ(renewals.load(), 6) << "renewed on after the notice, until the lease went";
  EXPECT_EQ(keeper.id(), "L11");
}

// An elastic lease's change of size is a notice of its own kind: handed on once, and a preemption
// that comes after it is handed on too (it wins over the restart; one that comes before the first
// is taken replaces it, which is what the supervisor would do with both).
TEST(LeaseKeeperTest, AChangeOfSizeAndALaterPreemptionAreEachHandedOnOnce) {
  const auto deadline = std::chrono::system_clock::now() + 120s;
  std::atomic<int> renewals{0};
  LeaseKeeper keeper(
      "L12", 10s, 20ms,
      [&] {
        int n = ++renewals;
        if (n >= 12) return RenewReply{Kind::kGone, {}, "released"};
        RenewReply r{Kind::kRenewed, 10s, ""};
        if (n >= 2 && n < 8) r.preempted = PreemptNotice{deadline, "it holds 8 GPUs now", true};
        if (n >= 8)
          r.preempted = PreemptNotice{deadline, "preempted for ticket 4 of bob (priority 10, 8 GPUs)"};
        return r;
      },
      kFast);
  keeper.start();
  std::vector<PreemptNotice> notices;
  std::string lost;
  for (int i = 0; i < 500 && lost.empty(); ++i) {
    std::this_thread::sleep_for(10ms);
    LeaseKeeper::News news = keeper.take();
    if (news.preempted) notices.push_back(*news.preempted);
    if (news.lost) lost = *news.lost;
  }
  keeper.stop();
  ASSERT_EQ(notices.size(), 2u);
  EXPECT_TRUE(notices[0].resize);
  EXPECT_EQ(notices[0].reason, "it holds 8 GPUs now");
  EXPECT_FALSE(notices[1].resize);
  EXPECT_EQ(notices[1].reason, "preempted for ticket 4 of bob (priority 10, 8 GPUs)");
}

}  // namespace
}  // namespace poolrun::launcher
