#pragma once

// What poold's routes work with: the options, the committed state, tokens, the event log, metrics
// and the long polls; and the changes to the state that record the events they caused.
// PoolServer owns one; the dispatcher (dispatch.cpp) and the route tables (routes/) use it.

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "poolrun/common/launch_credential.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/committed_state.hpp"
#include "poolrun/pool/event_log.hpp"
#include "poolrun/pool/http_server.hpp"
#include "poolrun/pool/munge_users.hpp"
#include "poolrun/pool/server.hpp"
#include "poolrun/pool/server_metrics.hpp"
#include "poolrun/pool/tokens.hpp"
#include "routes/route.hpp"

namespace poolrun::pool {

// Long polls (queue tickets, the event log) hold a worker while they wait. At most a quarter of
// the workers wait at once, and at most a quarter of those for one owner; a poll past either
// answers at once, as with wait_ms=0 (its client asks again), so that waiting clients cannot take
// the workers that renewals, acquires and releases need.
class LongPolls {
 public:
  explicit LongPolls(int workers)
      : most_(std::max(1, workers / 4)), most_per_owner_(std::max(1, most_ / 4)) {}

  class Slot {
   public:
    Slot(LongPolls& polls, const std::string& owner);
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    // How long the poll may wait: what it asked, up to 5 s, where it holds a slot; else not at all.
    std::chrono::milliseconds wait(int64_t askedMs) const {
      return std::chrono::milliseconds(held_ ? std::min<int64_t>(askedMs, kLongestPollMs) : 0);
    }

   private:
    static constexpr int64_t kLongestPollMs = 5000;
    LongPolls& polls_;
    std::string owner_;
    bool held_ = false;
  };

 private:
  const int most_, most_per_owner_;
  std::mutex mu_;
  int polls_ = 0;
  std::map<std::string, int> by_owner_;
};

struct ServerCore {
  explicit ServerCore(ServerOptions o);
  // Also when PoolServer's constructor throws after taking the lock (a bad token or state file).
  // The state file is closed before the lock goes, so that the next poold opens it only then.
  ~ServerCore();

  ServerOptions opt;
  int lock_fd = -1;
  std::unique_ptr<TokenStore> tokens;
  std::unique_ptr<MungeUsers> munge_users;  // where opt.munge
  std::unique_ptr<common::LaunchSigner> launch_signer;
  std::unique_ptr<CommittedState> pool;
  ServerMetrics metrics;
  std::unique_ptr<MetricsAccess> metrics_access;
  std::unique_ptr<EventLog> events;
  std::vector<Route> routes;
  std::unique_ptr<HttpServer> http;
  LongPolls long_polls;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::thread ticker;
  TimePoint last_account{};          // the ticker's last PoolState::accountUsage
  common::FileWatch quotas_watch;    // of the quotas file
  common::FileWatch accounts_watch;  // of the accounts file

  // Read the quotas and accounts files again when they changed; keep what was read before where
  // they cannot be read.
  void reloadQuotas();
  void reloadAccounts();
  template <typename T, typename Read, typename Apply>
  void reloadFile(const std::filesystem::path& file, common::FileWatch& watch, const char* what,
                  const char* event, Read parse, Apply apply);
  // What ServerOptions::on_tick asks of each tick.
  void runTickHooks();
  // Runs a function on the state under its lock, for the routes and hooks of ServerOptions.
  StateReader reader();
  // fn on the state under its lock, as CommittedState::read.
  template <typename F>
  auto read(F&& fn) {
    requireLock(StateLock::kRead);
    return pool->read(std::forward<F>(fn));
  }
  // A long poll, as CommittedState::waitFor (a change: the poll is committed as a sign of life).
  template <typename F>
  auto waitFor(std::chrono::system_clock::time_point deadline, F&& fn) {
    requireLock(StateLock::kChange);
    return pool->waitFor(deadline, std::forward<F>(fn));
  }
  // Throws std::logic_error where this thread serves a route whose row declares less than `needed`
  // (dispatch.cpp sets the route; outside a route, ticks and hooks, anything goes).
  static void requireLock(StateLock needed);
  // GET /healthz: 200 while poold serves and its state answers, 503 once it stops.
  HttpReply health();
  // The request's fields that the server limits beyond their JSON range.
  void checkLimits(const LeaseRequest& r, const Caller& who) const;
  // An administrator's failure of a GPU, in the event log where it was not failed already. Throws
  // as PoolState::failGpu.
  // `audit`: who did it (auditOf).
  void failByAdmin(PoolState& s, const std::string& name, size_t index, const nlohmann::json& audit,
                   TimePoint now);
  // Records the lease and node events PoolState reports; returns the last event's number.
  uint64_t recordLeaseEvents(PoolState& s, TimePoint now);

  // The reply to `req` (dispatch.cpp); on the network thread, only for a route with a `quick`.
  QuickAnswer answer(const HttpRequest& req, bool networkThread);
  HttpReply handle(const HttpRequest& req) { return std::move(*answer(req, false).reply); }
  QuickAnswer quick(const HttpRequest& req);

  // Publishes the events recorded up to `seq` (none: 0) when it goes, after the change's commit.
  struct Publish {
    EventLog& log;
    uint64_t seq = 0;
    ~Publish() { log.publish(seq); }
  };

  // fn as a change that records the events it caused: the leases it granted and ended (PoolState
  // reports them) and what fn recorded. Recorded under the state's lock (so in its order),
  // published (`publish`, set here) once the change is committed.
  template <typename F>
  auto recording(F& fn, CommittedState::Clean& clean, uint64_t& publish) {
    return [this, &fn, &clean, &publish](PoolState& s, TimePoint now) {
      const uint64_t before = events->lastRecorded();
      try {
        auto result = fn(s, now);
        publish = recordLeaseEvents(s, now);
        // An event of this change is published once the changes before it are committed; a change
        // that waits for none publishes nothing (the events recorded so far are theirs).
        if (publish != before)
          clean = CommittedState::Clean::kEarlier;
        else if (clean == CommittedState::Clean::kNothing)
          publish = 0;
        return result;
      } catch (...) {
        publish = recordLeaseEvents(s, now);
        throw;
      }
    };
  }

  // A change to the state, as CommittedState::mutate, with the events it caused.
  template <typename F>
  auto mutate(F&& fn, CommittedState::Clean clean = CommittedState::Clean::kEarlier) {
    requireLock(StateLock::kChange);
    Publish publish{*events};
    return pool->mutate(recording(fn, clean, publish.seq), clean);
  }

  // A change applied by tryMutate: settle() returns its result once it is committed (waiting for
  // that where `waits()`) and publishes its events.
  template <typename R>
  struct Applied {
    ServerCore* server;
    CommittedState::Applied<R> change;
    uint64_t publish = 0;
    bool waits() const { return change.wait; }
    R settle() {
      Publish published{*server->events, publish};
      return server->pool->settle(std::move(change));
    }
  };

  // As mutate, where the state's lock is free now (else nullopt, fn not run), without waiting.
  template <typename F>
  auto tryMutate(F&& fn, CommittedState::Clean clean)
      -> std::optional<Applied<decltype(fn(std::declval<PoolState&>(), TimePoint()))>> {
    requireLock(StateLock::kChange);
    uint64_t publish = 0;
    auto change = pool->tryApply(recording(fn, clean, publish), clean);
    if (!change) return std::nullopt;
    return Applied<decltype(fn(std::declval<PoolState&>(), TimePoint()))>{this, std::move(*change), publish};
  }

 private:
  // Who sends the request (dispatch.cpp); nullopt only on the network thread, where a node
  // credential is to be looked up in the state and its lock is busy (a worker answers instead).
  std::optional<Caller> authenticate(const HttpRequest& req, const Route& r, bool networkThread);
  // The node whose credential (membership.hpp) `token` is; nullopt where none; as above on the
  // network thread, `busy` set where the state's lock was.
  std::optional<Caller> nodeOfCredential(const std::string& token, bool networkThread, bool& busy);
  // The owner of the detached job whose launcher holds credential `token` (jobs.cpp), its rights
  // bound to the job's lease; as above.
  std::optional<Caller> launcherOfJob(const std::string& token, bool networkThread, bool& busy);
  void authorize(const Caller& who, const Route& r, const std::vector<std::string>& params) const;
  HttpReply replyTo(const Route& r, Context& c);
  HttpReply observed(const std::string& sent, const std::string& label, HttpReply reply,
                     std::chrono::steady_clock::time_point start);
};

}  // namespace poolrun::pool
