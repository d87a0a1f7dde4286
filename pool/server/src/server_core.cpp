#include "server_core.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "poolrun/pool/accounts.hpp"
#include "poolrun/pool/quotas.hpp"

namespace poolrun::pool {

using nlohmann::json;

LongPolls::Slot::Slot(LongPolls& polls, const std::string& owner) : polls_(polls), owner_(owner) {
  std::lock_guard<std::mutex> lock(polls_.mu_);
  int& mine = polls_.by_owner_[owner_];
  held_ = polls_.polls_ < polls_.most_ && mine < polls_.most_per_owner_;
  if (held_) {
    ++polls_.polls_;
    ++mine;
  } else if (mine == 0) {
    polls_.by_owner_.erase(owner_);
  }
}

LongPolls::Slot::~Slot() {
  if (!held_) return;
  std::lock_guard<std::mutex> lock(polls_.mu_);
  --polls_.polls_;
  if (--polls_.by_owner_[owner_] == 0) polls_.by_owner_.erase(owner_);
}

ServerCore::ServerCore(ServerOptions o) : opt(std::move(o)), long_polls(opt.threads) {}

ServerCore::~ServerCore() {
  http.reset();
  events.reset();
  pool.reset();
  if (lock_fd >= 0) close(lock_fd);
}

namespace {

// Who changed a configuration file is whoever wrote it: its owner, for the audit trail; from where:
// the file is on poold's machine, so whoever changed it did so there.
std::pair<std::string, std::string> writerOf(const std::filesystem::path& file) {
  struct stat st {};
  std::string owner = ::stat(file.c_str(), &st) == 0 ? common::userText(st.st_uid) : std::string("unknown");
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  return {std::move(owner), std::string(host)};
}

}  // namespace

// A configuration file read again once it changed and is whole: `read` parses it, `apply` sets it
// on the state and returns the changes to record as event `event` (none: no event).
template <typename T, typename Read, typename Apply>
void ServerCore::reloadFile(const std::filesystem::path& file, common::FileWatch& watch, const char* what,
                            const char* event, Read parse, Apply apply) {
  if (file.empty()) return;
  try {
    std::optional<T> value = watch.readIfChanged(file, [&] { return parse(file); });
    if (!value) return;  // unchanged, or being written: read it at a later tick
    const std::pair<std::string, std::string> writer = writerOf(file);  // (by, from)
    mutate([&](PoolState& s, TimePoint now) {
      const std::vector<std::string> changes = apply(s, std::move(*value));
      if (!changes.empty())
        events->record(event,
                       {{"file", file.string()},
                        {"changes", changes},
                        {"by", writer.first},
                        {"auth", "file"},
                        {"from", writer.second}},
                       now);
      s.tick(now, opt.stale_after);
      return 0;
    });
    std::cerr << "poold: " << what << " read again from " << file.string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "poold: warning: " << e.what() << "; keeping the " << what << " read before\n";
  }
}

void ServerCore::reloadQuotas() {
  reloadFile<Quotas>(opt.quotas_file, quotas_watch, "quotas", "quotas_changed", readQuotasFile,
                     [](PoolState& s, Quotas q) {
                       std::vector<std::string> changes = quotaChanges(s.quotas(), q);
                       s.setQuotas(std::move(q));
                       return changes;
                     });
}

void ServerCore::reloadAccounts() {
  reloadFile<Accounts>(opt.accounts_file, accounts_watch, "accounts", "accounts_changed", readAccountsFile,
                       [](PoolState& s, Accounts a) {
                         std::vector<std::string> changes = accountChanges(s.accounts(), a);
                         s.setAccounts(std::move(a));
                         return changes;
                       });
}

void ServerCore::runTickHooks() {
  if (opt.on_tick.empty()) return;
  const StateReader read = reader();
  for (const auto& hook : opt.on_tick) hook(read);
}

StateReader ServerCore::reader() {
  return [this](const std::function<void(const PoolState&)>& fn) {
    requireLock(StateLock::kRead);
    pool->read([&fn](const PoolState& s) {
      fn(s);
      return 0;
    });
  };
}

HttpReply ServerCore::health() {
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    if (stopping) return {503, "poold is stopping\n", "text/plain; charset=utf-8"};
  }
  read([](const PoolState&) { return 0; });  // the state's lock is not held for good
  return {200, "ok\n", "text/plain; charset=utf-8"};
}

void ServerCore::checkLimits(const LeaseRequest& r, const Caller& who) const {
  if (r.ttl > opt.max_ttl)
    throw badRequest("field 'ttl_s': " + std::to_string(r.ttl.count()) + " is over poold's maximum of " +
                     std::to_string(opt.max_ttl.count()) +
                     " s (poold --max-ttl); ask for less, a lease is renewed at a third of its ttl");
  if (!who.admin && r.no_reclaim)
    throw HttpError("forbidden", "owner " + who.owner +
                                     " (role user) may not exempt a lease from idle reclaim (no_reclaim); an "
                                     "administrator may");
  if (!who.admin && r.priority > opt.max_user_priority)
    throw badRequest("field 'priority': " + std::to_string(r.priority) + " is over the maximum of " +
                     std::to_string(opt.max_user_priority) +
                     " for users (poold --max-user-priority); an administrator may set more");
}

void ServerCore::failByAdmin(PoolState& s, const std::string& name, size_t index, const nlohmann::json& audit,
                             TimePoint now) {
  auto node = s.nodeMap().find(name);
  const bool changes =
      node != s.nodeMap().end() && index < node->second.gpuCount() && !node->second.failed.count(index);
  s.failGpu(name, index, now);
  if (changes) {
    nlohmann::json fields = {
        {"node", name}, {"index", index}, {"reason", "marked failed by an administrator"}};
    fields.update(audit);
    events->record("gpu_failed", fields, now);
  }
}

uint64_t ServerCore::recordLeaseEvents(PoolState& s, TimePoint now) {
  for (const LeaseEvent& e : s.takeLeaseEvents()) {
    metrics.observeLease(e);
    events->record(leaseEventKind(e.kind), leaseEventFields(e, now), now);
  }
  for (const NodeEvent& e : s.takeNodeEvents()) {
    if (e.kind == NodeEvent::Kind::kGpuFailed)
      events->record("gpu_failed",
                     {{"node", e.node}, {"index", e.gpu}, {"reason", e.reason}, {"by", "agent"}}, now);
    else if (e.kind == NodeEvent::Kind::kMaintenance)
      events->record("node_state",
                     {{"node", e.node}, {"state", "draining"}, {"by", "reservation"}, {"reason", e.reason}},
                     now);
    else if (e.kind == NodeEvent::Kind::kDrained || e.kind == NodeEvent::Kind::kResumed)
      events->record("node_state",
                     {{"node", e.node},
                      {"state", e.kind == NodeEvent::Kind::kDrained ? "draining" : "up"},
                      {"by", "health checks"},
                      {"reason", e.reason}},
                     now);
    else
      events->record("node_state",
                     {{"node", e.node},
                      {"state", e.kind == NodeEvent::Kind::kUnreachable ? "unreachable" : "up"},
                      {"by", "heartbeats"},
                      {"reason", e.reason}},
                     now);
  }
  for (const JobEvent& e : s.takeJobEvents()) {
    nlohmann::json fields = {{"job", e.job}, {"state", toString(e.to)}};
    if (e.from) fields["from"] = toString(*e.from);
    if (!e.reason.empty()) fields["reason"] = e.reason;
    events->record(e.from ? "job_state" : "job_submitted", fields, now);
  }
  return events->lastRecorded();
}

}  // namespace poolrun::pool
