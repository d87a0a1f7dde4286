#pragma once

// Keeps a running job's lease. It is renewed every third of its time to live; a renewal that does
// not get through (the pool restarting or upgraded, a network blip, a standby answering 503) is
// retried with backoff until the lease's own expiry, so that a pool outage shorter than what is
// left of the lease costs the job nothing. The job is ended only when the pool says the lease is
// gone (or not ours), or when the expiry passes without a renewal.
//
// Renewals run on a thread of their own: a pool that does not answer holds that thread (for at
// most the HTTP client's renewal timeouts, pool/client/src/http_client.cpp), never the supervisor's loop,
// which keeps forwarding signals meanwhile. The thread only renews; what it finds reaches the loop
// through a descriptor (fd()) and take(), and the loop prints it, so that nothing the thread writes
// interleaves with mpirun's output.
//
// A lease the pool has chosen to preempt says so in a renewal's reply (pool::Lease::preempt_at): the
// keeper hands that on once, as News::preempted, and keeps renewing until the job has ended (the
// pool grants renewals up to a little past the deadline).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace poolrun::launcher {

// The pool's notice that it preempts the lease: the job must have ended by `deadline` (the pool's
// clock), when the pool takes the GPUs back; `reason` says for whom ("preempted for ticket 12 of bob
// (priority 10, 8 GPUs)").
// An elastic lease's change of size comes as a notice too (`resize`): the job is ended by the
// deadline the same way, to be restarted on the lease's new GPUs (docs/elastic.md).
struct PreemptNotice {
  std::chrono::system_clock::time_point deadline;
  std::string reason;
  bool resize = false;
};

// What one renewal attempt found.
struct RenewReply {
  enum class Kind {
    kRenewed,      // the lease holds for valid_for, counted from when the attempt started
    kUnreachable,  // no answer, or an answer that may change (5xx, 503 from a standby): retry
    kGone,         // the pool says the lease expired, was released, or is not ours (401/403)
  };
  Kind kind = Kind::kRenewed;
  std::chrono::milliseconds valid_for{0};
  std::string reason;  // kUnreachable, kGone: what the pool (or the connection) said
  // kRenewed: what the pool says the holder should know, by subject ("node n02": "node n02 of the
  // lease is unreachable ..."). The keeper prints a notice when it appears or changes, and one line
  // when its subject drops out (`resolved`: what to print then).
  struct Notice {
    std::string text;
    std::string resolved;
  };
  std::map<std::string, Notice> notices{};
  std::optional<PreemptNotice> preempted{};  // kRenewed: the lease is preempted (above)
};

// When to renew and when to give up, on an explicit clock: the caller passes the times, so the
// policy is tested without waiting.
class RenewalPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  using Time = Clock::time_point;
  using Ms = std::chrono::milliseconds;

  struct Backoff {
    Ms first{1000};       // the first retry after a failure
    Ms max{4000};         // doubling up to this
    Ms last_chance{250};  // a last attempt this long before the expiry, however the doubling falls
  };

  enum class Event {
    kRenewed,       // as usual
    kRecovered,     // renewed after one or more failures
    kFirstFailure,  // the first failure since the last renewal: retrying
    kFailedAgain,   // a retry failed too: retrying
    kGone,          // the pool says the lease is gone: the job must end
  };

  // A lease that holds for `valid_for` from `now`, renewed every `every` (a third of its TTL).
  RenewalPolicy(Time now, Ms valid_for, Ms every, Backoff backoff);
  RenewalPolicy(Time now, Ms valid_for, Ms every) : RenewalPolicy(now, valid_for, every, Backoff{}) {}

  // When the next attempt should start; expiry() itself where no attempt can help any more.
  Time due() const { return due_; }
  // Until when the lease holds, as far as this side knows (the last renewal's start plus what it
  // granted): the job must end at this time unless a renewal gets through first.
  Time expiry() const { return expiry_; }
  bool expired(Time now) const { return now >= expiry_; }
  // Since when renewals have been failing; nullopt while they succeed.
  std::optional<Time> failingSince() const { return failing_since_; }

  // The outcome of an attempt that started at `started` and ended at `now`; sets the next due().
  Event record(Time started, Time now, const RenewReply& reply);

 private:
  Ms every_;
  Backoff backoff_;
  Time expiry_, due_;
  Ms retry_{0};
  std::optional<Time> failing_since_;
};

class LeaseKeeper {
 public:
  using Clock = RenewalPolicy::Clock;

  // `renew` makes one attempt (on the keeper's thread; whatever it throws counts as kUnreachable).
  // `valid_for`: how long the lease holds from now. Throws poolrun::Error (kIo) when the descriptor
  // fd() cannot be made.
  LeaseKeeper(std::string lease_id, std::chrono::milliseconds valid_for, std::chrono::milliseconds every,
              std::function<RenewReply()> renew, RenewalPolicy::Backoff backoff = {});
  ~LeaseKeeper();  // stop()
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Starts the thread (it inherits the caller's signal mask: call with the job's signals blocked).
  void start();
  // Stops the thread; waits for an attempt under way (bounded by the client's timeouts). Once
  // stopped, it does not start again.
  void stop();

  // Readable when the thread has news for take().
  int fd() const { return event_fd_; }

  struct News {
    std::vector<std::string> lines;   // to print, each a whole line without its newline
    std::optional<std::string> lost;  // set once: why the job must end ("lease L is gone: ...")
    // The first renewal that carried a notice: set once for a change of size, once for a preemption.
    std::optional<PreemptNotice> preempted;
  };
  // What happened since the last call. Also notices the expiry passing while an attempt is still
  // under way, so that the job ends at the expiry whatever the thread is waiting for.
  News take(Clock::time_point now = Clock::now());
  // Until when the lease holds (RenewalPolicy::expiry()): the supervisor wakes then at the latest.
  Clock::time_point expiry();
  const std::string& id() const { return id_; }

 private:
  void run();
  void post();                         // wakes fd()
  void expire(Clock::time_point now);  // with mu_ held: the expiry passed without a renewal
  static std::string clockTime(Clock::time_point when, Clock::time_point now);
  void noticeChanges(const std::map<std::string, RenewReply::Notice>& notices);  // with mu_ held

  std::string id_;
  std::function<RenewReply()> renew_;
  std::mutex mu_;
  std::condition_variable wake_;
  RenewalPolicy policy_;
  std::string last_reason_;
  std::map<std::string, RenewReply::Notice> notices_;  // the last renewal's
  News news_;
  bool lost_ = false, stopping_ = false, preempted_ = false, resized_ = false;
  int event_fd_ = -1;
  std::thread thread_;
};

}  // namespace poolrun::launcher
