#pragma once

// poold's pool state in memory and its group commit to its StateStore (SQLite or etcd). A change runs on the
// state under one lock, then waits until it (and every change before it) is committed: the changes of
// concurrent requests share one transaction, and no reply depends on something a crash could
// lose. Reads run under the lock and never wait for a commit.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "poolrun/pool/state.hpp"
#include "poolrun/pool/state_store.hpp"

namespace poolrun::pool {

class CommittedState {
 public:
  explicit CommittedState(std::unique_ptr<StateStore> store);  // loads the state from the store

  // What a change that marked nothing dirty waits for. kEarlier: the commit of the changes before
  // it (its reply may show them). kNothing: nothing, for replies a crash may take back at no cost
  // (a heartbeat's names the leases of its node's GPUs; the next heartbeat's corrects it).
  enum class Clean { kEarlier, kNothing };

  // A change applied to the state, its result not yet returned: settle() returns it (or rethrows
  // what fn threw) once it is committed, where `wait` says it must wait for that.
  template <typename R>
  struct Applied {
    std::optional<R> result;
    std::exception_ptr error;
    uint64_t seq = 0;
    bool wait = true;
  };

  // fn(PoolState&, TimePoint now) changes the state; its result is returned once committed.
  // What fn throws is rethrown after the commit, since fn may have changed the state first
  // (renewing an expired lease drops it). `clean` is read once fn has run (fn may set it).
  template <typename F>
  auto mutate(F&& fn, const Clean& clean = Clean::kEarlier) {
    std::unique_lock<std::mutex> lock(mu_);
    return settle(apply(lock, fn, clean));
  }

  // As mutate, but only where the state's lock is free now (nullopt, and fn not run, where a change
  // or a read holds it), and without the wait for the commit: settle() it, on a thread that may
  // wait where `wait` is set.
  template <typename F>
  auto tryApply(F&& fn, const Clean& clean)
      -> std::optional<Applied<decltype(fn(std::declval<PoolState&>(), TimePoint()))>> {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    return apply(lock, fn, clean);
  }

  template <typename R>
  R settle(Applied<R> change) {
    if (change.wait) waitCommitted(change.seq);
    if (change.error) std::rethrow_exception(change.error);
    return std::move(*change.result);
  }

  // fn(const PoolState&) under the lock; no commit wait.
  template <typename F>
  auto read(F&& fn) const {
    std::lock_guard<std::mutex> lock(mu_);
    return fn(static_cast<const PoolState&>(state_));
  }

  // As read, but only where the state's lock is free now: nullopt (fn not run) where it is not.
  template <typename F>
  auto tryRead(F&& fn) const -> std::optional<decltype(fn(std::declval<const PoolState&>()))> {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    return fn(static_cast<const PoolState&>(state_));
  }

  // A long poll: fn(PoolState&, TimePoint now) returns a value when it has an answer, nullopt to
  // wait for the next change; past `deadline` (or after wakeAll()) fn is called once more with
  // `last` true and must answer. The answer is returned once committed (a poll is a sign of life).
  template <typename F>
  auto waitFor(std::chrono::system_clock::time_point deadline, F&& fn) {
    using R = typename decltype(fn(state_, TimePoint(), false))::value_type;
    std::optional<R> result;
    std::exception_ptr error;
    uint64_t seq;
    {
      std::unique_lock<std::mutex> lock(mu_);
      try {
        for (;;) {
          auto now = std::chrono::system_clock::now();
          bool last = now >= deadline || woken_;
          if (auto r = fn(state_, now, last); r || last) {
            result = std::move(r);
            break;
          }
          changed_.wait_until(lock, deadline);
        }
      } catch (...) {
        error = std::current_exception();
      }
      seq = takeDirty() ? ++applied_ : applied_;
    }
    waitCommitted(seq);
    if (error) std::rethrow_exception(error);
    return std::move(*result);
  }

  // Ends every waitFor() now, and all later ones at once (poold is stopping).
  void wakeAll();
  // Queue waits of granted requests since the last call, in seconds (for the metrics).
  std::vector<double> takeWaitSeconds();

 private:
  // fn on the state under `lock` (held; released on return).
  template <typename F>
  auto apply(std::unique_lock<std::mutex>& lock, F& fn, const Clean& clean) {
    Applied<decltype(fn(state_, TimePoint()))> change;
    try {
      change.result.emplace(fn(state_, std::chrono::system_clock::now()));
    } catch (...) {
      change.error = std::current_exception();
    }
    // A change that marked nothing dirty (a heartbeat that failed no GPU) has nothing of its own to
    // commit: it waits only for the changes before it (no commit pass where those are in).
    const bool wrote = takeDirty();
    change.seq = wrote ? ++applied_ : applied_;
    change.wait = wrote || change.error || clean == Clean::kEarlier;
    lock.unlock();
    changed_.notify_all();
    return change;
  }

  // Moves what the state marked dirty into pending_; whether it marked anything. Under mu_.
  bool takeDirty();
  void waitCommitted(uint64_t seq);

  std::unique_ptr<StateStore> store_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  PoolState state_;
  Dirty pending_;         // changed since the last commit pass took it (under mu_)
  uint64_t applied_ = 0;  // the changes that marked something dirty
  bool woken_ = false;

  std::mutex commit_mu_;
  std::condition_variable commit_cv_;
  bool committing_ = false;
  uint64_t committed_ = 0;
};

}  // namespace poolrun::pool
