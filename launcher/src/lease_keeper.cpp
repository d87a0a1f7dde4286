#include "poolrun/launcher/lease_keeper.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "poolrun/common/error.hpp"

namespace poolrun::launcher {
namespace {

using std::chrono::duration_cast;
using Ms = std::chrono::milliseconds;

// "2.5 s" below ten seconds, "42 s" above.
std::string secondsText(Ms d) {
  double s = static_cast<double>(std::max<int64_t>(d.count(), 0)) / 1000.0;
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

}  // namespace

RenewalPolicy::RenewalPolicy(Time now, Ms valid_for, Ms every, Backoff backoff)
    : every_(every),
      backoff_(backoff),
      expiry_(now + valid_for),
      due_(now + std::min(every, valid_for / 3)) {}

RenewalPolicy::Event RenewalPolicy::record(Time started, Time now, const RenewReply& reply) {
  switch (reply.kind) {
    case RenewReply::Kind::kRenewed: {
      // A pool that grants less than was asked (a server-side maximum TTL, the lease's maximum
      // duration) is renewed at a third of what it granted.
      expiry_ = started + reply.valid_for;
      due_ = started + std::min(every_, reply.valid_for / 3);
      retry_ = Ms(0);
      bool recovered = failing_since_.has_value();
      failing_since_.reset();
      return recovered ? Event::kRecovered : Event::kRenewed;
    }
    case RenewReply::Kind::kGone:
      due_ = expiry_;
      return Event::kGone;
    case RenewReply::Kind::kUnreachable:
      break;
  }
  bool first = !failing_since_;
  if (first) failing_since_ = started;
  retry_ = first ? backoff_.first : std::min(retry_ * 2, backoff_.max);
  // Never past the expiry: one last attempt just before it, then none (expiry() ends the job).
  Time next = now + retry_;
  Time lastChance = expiry_ - backoff_.last_chance;
  if (next > lastChance) next = lastChance > now ? lastChance : expiry_;
  due_ = next;
  return first ? Event::kFirstFailure : Event::kFailedAgain;
}

LeaseKeeper::LeaseKeeper(std::string lease_id, Ms valid_for, Ms every, std::function<RenewReply()> renew,
                         RenewalPolicy::Backoff backoff)
    : id_(std::move(lease_id)), renew_(std::move(renew)), policy_(Clock::now(), valid_for, every, backoff) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0)
    throw Error(ErrorCode::kIo, std::string("cannot set up lease renewal: eventfd: ") + std::strerror(errno));
}

void LeaseKeeper::start() {
  thread_ = std::thread([this] { run(); });
}

void LeaseKeeper::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

LeaseKeeper::~LeaseKeeper() {
  stop();
  close(event_fd_);
}

LeaseKeeper::Clock::time_point LeaseKeeper::expiry() {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_.expiry();
}

LeaseKeeper::News LeaseKeeper::take(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t count;
  while (read(event_fd_, &count, sizeof count) == sizeof count) {
  }
  if (!lost_ && policy_.expired(now)) expire(now);
  News out = std::move(news_);
  news_ = News{};
  return out;
}

// The wall-clock time of `when` as the user's terminal shows it, "14:03:27".
std::string LeaseKeeper::clockTime(Clock::time_point when, Clock::time_point now) {
  auto wall =
      std::chrono::system_clock::now() + duration_cast<std::chrono::system_clock::duration>(when - now);
  std::time_t t = std::chrono::system_clock::to_time_t(wall);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

void LeaseKeeper::post() {
  uint64_t one = 1;
  ssize_t n = write(event_fd_, &one, sizeof one);
  (void)n;  // the counter can only overflow after 2^64 posts
}

void LeaseKeeper::expire(Clock::time_point now) {
  lost_ = true;
  auto since = policy_.failingSince().value_or(policy_.expiry());
  news_.lost = "lease " + id_ + " expired at " + clockTime(policy_.expiry(), now) + " without a renewal (" +
               (last_reason_.empty() ? "none got through"
                                     : "failing for " + secondsText(duration_cast<Ms>(now - since)) +
                                           ", last: " + last_reason_) +
               "): ending the job, whose GPUs are no longer held";
  wake_.notify_all();
}

void LeaseKeeper::noticeChanges(const std::map<std::string, RenewReply::Notice>& notices) {
  for (const auto& [subject, notice] : notices) {
    auto it = notices_.find(subject);
    if (it == notices_.end() || it->second.text != notice.text) news_.lines.push_back(notice.text);
  }
  for (const auto& [subject, notice] : notices_)
    if (!notices.count(subject) && !notice.resolved.empty()) news_.lines.push_back(notice.resolved);
  notices_ = notices;
}

void LeaseKeeper::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !lost_) {
    Clock::time_point due = policy_.due();
    if (wake_.wait_until(lock, due, [&] { return stopping_ || lost_; })) break;
    Clock::time_point started = Clock::now();
    if (started < policy_.due()) continue;
    if (policy_.expired(started)) {
      expire(started);
      post();
      break;
    }
    lock.unlock();
    RenewReply reply;
    try {
      reply = renew_();
    } catch (const std::exception& e) {
      reply = {RenewReply::Kind::kUnreachable, Ms(0), e.what(), {}};
    } catch (...) {
      reply = {RenewReply::Kind::kUnreachable, Ms(0), "unknown error", {}};
    }
    lock.lock();
    if (lost_ || stopping_) break;  // the expiry passed (take()) or the job ended meanwhile
    Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> since = policy_.failingSince();
    size_t lines = news_.lines.size();
    if (reply.kind == RenewReply::Kind::kRenewed) noticeChanges(reply.notices);
    // Each kind of notice is handed on once: a change of size, and a preemption (which may follow
    // a change of size, and wins over it).
    bool preemptedNow = reply.kind == RenewReply::Kind::kRenewed && reply.preempted &&
                        !(reply.preempted->resize ? resized_ || preempted_ : preempted_);
    if (preemptedNow) {
      (reply.preempted->resize ? resized_ : preempted_) = true;
      news_.preempted = reply.preempted;
    }
    switch (policy_.record(started, now, reply)) {
      case RenewalPolicy::Event::kRenewed:
        if (news_.lines.size() != lines || preemptedNow) post();
        continue;
      case RenewalPolicy::Event::kRecovered:
        news_.lines.push_back("lease " + id_ + " renewed again after " +
                              secondsText(duration_cast<Ms>(now - since.value_or(started))));
        last_reason_.clear();
        break;
      case RenewalPolicy::Event::kFirstFailure:
        last_reason_ = reply.reason;
        news_.lines.push_back("warning: cannot renew lease " + id_ + " (" + reply.reason +
                              "); retrying until it expires at " + clockTime(policy_.expiry(), now) +
                              " (in " + secondsText(duration_cast<Ms>(policy_.expiry() - now)) + ")");
        break;
      case RenewalPolicy::Event::kFailedAgain:
        last_reason_ = reply.reason;
        continue;  // said once, at the first failure
      case RenewalPolicy::Event::kGone:
        lost_ = true;
        news_.lost =
            "lease " + id_ + " is gone (" + reply.reason + "): ending the job, whose GPUs are no longer held";
        break;
    }
    post();
  }
}

}  // namespace poolrun::launcher
