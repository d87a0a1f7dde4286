// The multi-factor priority that orders the queue where the pool has an accounts file
// (docs/fairshare.md): each waiting request's fair-share, age and size factors, weighted and added
// to its own priority's, against a snapshot taken at each scheduling pass.

#include <algorithm>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

void PoolState::setAccounts(Accounts accounts) {
  accounts_ = std::move(accounts);
  priorities_ = Priorities{};
  replan_ = true;
}

void PoolState::chargeAccount(LeaseRequest& request) const {
  if (!accounts_.empty()) {
    request.account = accounts_.accountFor(request.owner, request.account);
    return;
  }
  if (!request.account.empty())
    throw PoolError(
        PoolFailure::kOther, ErrorCode::kBadInput,
        "account '" + request.account +
            "': this pool has no accounts (poold --accounts, POOLRUN_ACCOUNTS); leave --account out");
}

FairShare PoolState::fairShare(TimePoint now) const {
  if (accounts_.empty()) return FairShare();
  std::vector<std::pair<std::string, std::string>> waiting;
  for (const auto& [ticket, e] : queue_)
    if (e.status == QueueEntry::Status::kWaiting && !e.request.account.empty())
      waiting.emplace_back(e.request.account, e.request.owner);
  return FairShare(accounts_, usage_.decayed(now), waiting);
}

FairShareReport PoolState::fairShareReport(TimePoint now) const {
  FairShareReport r;
  r.accounts = !accounts_.empty();
  r.half_life = usage_options_.half_life;
  r.default_account = accounts_.defaultAccount();
  r.weights = accounts_.weights();
  // The factors the queue is ordered by (the last pass's, at most a few seconds old: what `poolctl
  // queue --explain` shows too), else as of now; a copy under the state's lock, not a computation.
  r.rows = priorities_.at != TimePoint{} ? priorities_.shares.rows() : fairShare(now).rows();
  return r;
}

void PoolState::refreshPriorities(TimePoint now) {
  if (accounts_.empty()) {
    priorities_ = Priorities{};
    return;
  }
  priorities_.at = now;
  priorities_.shares = fairShare(now);
  int gpus = 0;
  for (const Slot& slot : slots()) gpus += static_cast<int>(slot.node->gpuCount());
  priorities_.pool_gpus = gpus;
}

std::optional<PriorityFactors> PoolState::factorsOf(const LeaseRequest& request, TimePoint enqueued) const {
  if (accounts_.empty()) return std::nullopt;
  const PriorityWeights& w = accounts_.weights();
  PriorityFactors f;
  f.priority = request.priority;
  // A request whose owner has no factor in the snapshot (queued before the pool had accounts, its
  // owner since removed from its account, or new to the default account until the next pass)
  // counts as having used its share: neither ahead of everyone nor behind them for good.
  f.fairshare = priorities_.shares.factor(request.account, request.owner).value_or(0.5);
  const double waited =
      priorities_.at > enqueued ? std::chrono::duration<double>(priorities_.at - enqueued).count() : 0.0;
  f.age = std::min(1.0, waited / static_cast<double>(w.max_age.count()));
  f.size = priorities_.pool_gpus > 0
               ? std::min(1.0, static_cast<double>(request.gpus) / priorities_.pool_gpus)
               : 0.0;
  f.score = w.priority * f.priority + w.fairshare * f.fairshare + w.age * f.age + w.size * f.size;
  return f;
}

double PoolState::scoreOf(const QueueEntry& entry) const {
  std::optional<PriorityFactors> f = factorsOf(entry.request, entry.enqueued);
  return f ? f->score : 0.0;
}

std::vector<const QueueEntry*> PoolState::waitingInOrder() const {
  std::vector<const QueueEntry*> out;
  out.reserve(waiting_count_);
  for (const auto& [t, e] : queue_)
    if (e.status == QueueEntry::Status::kWaiting) out.push_back(&e);
  auto arrival = [](const QueueEntry* a, const QueueEntry* b) {
    if (a->enqueued != b->enqueued) return a->enqueued < b->enqueued;
    return a->ticket < b->ticket;
  };
  if (accounts_.empty()) {
    std::sort(out.begin(), out.end(), [&](const QueueEntry* a, const QueueEntry* b) {
      if (a->request.priority != b->request.priority) return a->request.priority > b->request.priority;
      return arrival(a, b);
    });
    return out;
  }
  // Highest score first.
  std::vector<std::pair<double, const QueueEntry*>> scored;
  scored.reserve(out.size());
  for (const QueueEntry* e : out) scored.emplace_back(scoreOf(*e), e);
  std::sort(scored.begin(), scored.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return arrival(a.second, b.second);
  });
  for (size_t i = 0; i < scored.size(); ++i) out[i] = scored[i].second;
  return out;
}

}  // namespace poolrun::pool
