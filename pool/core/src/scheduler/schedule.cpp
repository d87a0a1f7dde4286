// The scheduling pass: conservative backfill of the queue on a Timeline, the plan it keeps for the
// next enqueue, and the elastic growth it leaves room for.

#include <algorithm>
#include <functional>

#include "lease_times.hpp"
#include "node_views.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/state.hpp"
#include "request_text.hpp"
#include "scheduler/pass_plan.hpp"
#include "scheduler/timeline.hpp"

namespace poolrun::pool {

using std::chrono::seconds;

namespace {
constexpr double kNoScore = 1e300;  // above any multi-factor priority
}  // namespace

PoolState::KeptPlan::KeptPlan() = default;
PoolState::KeptPlan::~KeptPlan() = default;
PoolState::KeptPlan::KeptPlan(const KeptPlan&) {}
PoolState::KeptPlan& PoolState::KeptPlan::operator=(const KeptPlan&) {
  plan.reset();
  return *this;
}
PoolState::KeptPlan::KeptPlan(KeptPlan&&) noexcept {}
PoolState::KeptPlan& PoolState::KeptPlan::operator=(KeptPlan&&) noexcept {
  plan.reset();
  return *this;
}

void PoolState::schedule(TimePoint now) {
  ++passes_;
  replan_ = false;
  last_pass_ = now;
  kept_plan_.plan.reset();
  if (!accounts_.empty()) refreshPriorities(now);
  std::vector<const QueueEntry*> order = waitingInOrder();
  planned_.clear();
  auto plan = std::make_unique<PassPlan>();
  plan->book = quotaBook();
  std::optional<int> waiting;               // the highest priority of a request left waiting that may start
  std::vector<std::string> grantedElastic;  // granted their minimum in this pass
  scheduleQueue(order, *plan, waiting, grantedElastic, now);
  plan->epoch = plan_epoch_;  // what the growth below changes, the plan does not know
  // As large as the free GPUs let them, unless a request of equal or higher priority still waits
  // (behind them in the queue too): part of the grant, not a change of size.
  QuotaBook& book = plan->book;
  for (const std::string& id : grantedElastic)
    if (auto l = leases_.find(id); l != leases_.end() && !(waiting && *waiting >= l->second.priority))
      growNow(l->second, book, now, false);
  growElastic(now, waiting, book);
  if (!plan->timeline || plan->epoch != plan_epoch_) return;
  plan->at = now;
  plan->lowest_priority = order.back()->request.priority;
  plan->lowest_score = kNoScore;
  for (const QueueEntry* e : order) {
    plan->latest_enqueued = std::max(plan->latest_enqueued, e->enqueued);
    plan->lowest_priority = std::min(plan->lowest_priority, e->request.priority);
    if (!accounts_.empty()) plan->lowest_score = std::min(plan->lowest_score, scoreOf(*e));
  }
  for (const auto& [id, lease] : leases_) {
    plan->valid_until = std::min(plan->valid_until, leaseEnd(lease, preempt_));
    if (lease.shrink_at) plan->valid_until = std::min(plan->valid_until, shrinkEnd(lease, preempt_));
  }
  kept_plan_.plan = std::move(plan);
}

PoolState::PassPlan* PoolState::keptPlanFor(const LeaseRequest& request, TimePoint now) {
  PassPlan* plan = kept_plan_.plan.get();
  // A request that sorts behind every waiting one (a priority no higher than theirs, enqueued
  // last) changes no plan ahead of it. An elastic one grows once granted: a pass's work.
  if (plan == nullptr || replan_ || slow_scheduling_ || plan->epoch != plan_epoch_ || request.elastic() ||
      !request.reservation.empty())
    return nullptr;
  if (now < plan->at || now < plan->latest_enqueued || now >= plan->valid_until ||
      now - plan->at >= kReplanEvery)
    return nullptr;
  if (accounts_.empty()) return request.priority <= plan->lowest_priority ? plan : nullptr;
  // With accounts, the queue's order is the score's (ties: the earlier first, and this one is
  // the latest).
  // A user new to the default account is one more sibling there: every factor changes.
  if (!priorities_.shares.factor(request.account, request.owner)) return nullptr;
  std::optional<PriorityFactors> f = factorsOf(request, now);
  return f && f->score <= plan->lowest_score ? plan : nullptr;
}

// Where and when a waiting request fits on the pass's timeline, the earliest start first.
class PoolState::EarliestStart {
 public:
  using Fit = std::optional<std::pair<TimePoint, std::vector<GpuRef>>>;
  // `nodeOk`: per slot, -1 unknown, 0 no, 1 the request may use the node. A request without a
  // fabric or labels shares the pass's answers (most requests: a node's state is all that decides).
  EarliestStart(const PoolState& pool, const LeaseRequest& r, const Timeline& timeline,
                std::vector<signed char>& nodeOk, TimePoint now)
      : pool_(pool),
        r_(r),
        timeline_(timeline),
        in_order_(pool.slots()),
        node_ok_(nodeOk),
        now_(now),
        limit_(pool.strictLimit(r)) {}

  Fit find() {
    if (!r_.max_duration && !pool_.slow_scheduling_) return forGood();
    return withLength();
  }

 private:
  bool usable(size_t s, size_t i) { return usableUnit(in_order_, node_ok_, r_, s, i); }
  struct FreeFrom {
    TimePoint at;
    size_t slot, gpu;
  };
  // Each call: the next usable GPU in order of when it is free for the request's length.
  using FreeFor = std::function<std::optional<FreeFrom>()>;
  Fit forGood();
  Fit withLength();
  FreeFor freeForByIndex();
  FreeFor freeForByWalk();

  const PoolState& pool_;
  const LeaseRequest& r_;
  const Timeline& timeline_;
  const std::vector<Slot>& in_order_;
  std::vector<signed char>& node_ok_;
  const TimePoint now_;
  const std::optional<Spread> limit_;  // --placement strict: the spread an empty pool gives
  const Spread* limit() const { return limit_ ? &*limit_ : nullptr; }
};

// Requests without a maximum duration: the GPUs free from t on are those the timeline's index
// lists up to t, so that neither the bound nor a placement walks the pool.
PoolState::EarliestStart::Fit PoolState::EarliestStart::forGood() {
  std::optional<TimePoint> bound;
  int found = 0;
  timeline_.freeForGoodBy(kNever - seconds(1), [&](size_t s, size_t i, TimePoint end) {
    if (usable(s, i) && ++found == r_.gpus) bound = std::max(end, now_);
    return !bound;
  });
  Fit fit;
  timeline_.eachStart(now_, bound.value_or(kNever), [&](TimePoint t) {
    std::optional<std::vector<GpuRef>> gpus;
    if (t == kNever) {
      auto freeThen = [&](size_t slot, const Slot&) { return timeline_.freeOn(slot, t, kNever); };
      gpus = place(nodeViews(in_order_, r_, freeThen), r_, limit());
    } else {
      std::vector<std::pair<size_t, size_t>> free;
      timeline_.freeForGoodBy(t, [&](size_t s, size_t i, TimePoint) {
        if (usable(s, i)) free.emplace_back(s, i);
        return true;
      });
      std::sort(free.begin(), free.end());
      std::vector<NodeView> views;
      for (const auto& [s, i] : free) {
        if (views.empty() || views.back().node != in_order_[s].node)
          views.push_back({in_order_[s].node, {}, false});
        views.back().usable.push_back(i);
      }
      for (NodeView& v : views) v.whole = !r_.mig() && v.usable.size() == v.node->gpuCount();
      gpus = place(views, r_, limit());
    }
    if (gpus) fit = std::pair{t, std::move(*gpus)};
    return fit.has_value();
  });
  return fit;
}

// Requests with a maximum duration: the GPUs the request may use, in order of the earliest time
// each is free for its length. No start comes before the r.gpus-th of those times (each start
// tried is a placement, and a full pool has a start time for every lease end), and a placement at
// t looks only at the GPUs free for the length by t, found in the order they free up rather than
// by a walk over the pool (the index of when each GPU is first free).
PoolState::EarliestStart::Fit PoolState::EarliestStart::withLength() {
  std::vector<FreeFrom> taken;  // usable GPUs free for the length by the last start tried, in pool order
  FreeFor next = pool_.slow_scheduling_ ? freeForByWalk() : freeForByIndex();
  while (taken.size() < static_cast<size_t>(r_.gpus))
    if (std::optional<FreeFrom> f = next())
      taken.push_back(*f);
    else
      return std::nullopt;
  const TimePoint bound = taken.back().at;
  auto inPoolOrder = [](const FreeFrom& a, const FreeFrom& b) {
    return std::pair(a.slot, a.gpu) < std::pair(b.slot, b.gpu);
  };
  std::sort(taken.begin(), taken.end(), inPoolOrder);
  std::optional<FreeFrom> ahead;  // taken from `next` but free for the length only after the last start tried
  Fit fit;
  timeline_.eachStart(now_, bound, [&](TimePoint t) {
    const auto before = static_cast<std::ptrdiff_t>(taken.size());
    for (;;) {
      if (!ahead) ahead = next();
      if (!ahead || ahead->at > t) break;
      taken.push_back(*ahead);
      ahead.reset();
    }
    std::sort(taken.begin() + before, taken.end(), inPoolOrder);
    std::inplace_merge(taken.begin(), taken.begin() + before, taken.end(), inPoolOrder);
    TimePoint to = (t == kNever || !r_.max_duration) ? kNever : addSaturating(t, *r_.max_duration);
    std::vector<NodeView> views;
    for (const FreeFrom& f : taken) {
      if (!timeline_.freeOn(f.slot, t, to)(f.gpu)) continue;
      const PoolNode* node = in_order_[f.slot].node;
      if (views.empty() || views.back().node != node) views.push_back({node, {}, false});
      views.back().usable.push_back(f.gpu);
    }
    for (NodeView& v : views) v.whole = !r_.mig() && v.usable.size() == v.node->gpuCount();
    if (std::optional<std::vector<GpuRef>> gpus = place(views, r_, limit()))
      fit = std::pair{t, std::move(*gpus)};
    return fit.has_value();
  });
  return fit;
}

// The usable GPUs by the timeline's index of when each is first free: a GPU's time for the length
// is never before its first free moment, so one is handed out once no GPU still in the index can
// come before it.
PoolState::EarliestStart::FreeFor PoolState::EarliestStart::freeForByIndex() {
  auto later = [](const FreeFrom& a, const FreeFrom& b) { return a.at > b.at; };
  return [this, later, index = timeline_.byFirstFree().cursor(),
          heap = std::vector<FreeFrom>()]() mutable -> std::optional<FreeFrom> {
    for (; index.get() != nullptr; index.advance()) {
      const auto& [first, s, i] = *index.get();
      if (!heap.empty() && heap.front().at <= first) break;
      if (!usable(s, i)) continue;
      heap.push_back({timeline_.earliestFree(s, i, now_, r_.max_duration), s, i});
      std::push_heap(heap.begin(), heap.end(), later);
    }
    if (heap.empty()) return std::nullopt;
    std::pop_heap(heap.begin(), heap.end(), later);
    FreeFrom f = heap.back();
    heap.pop_back();
    return f;
  };
}

// The same GPUs in the same order by a walk over the pool (the reference the index is tested
// against).
PoolState::EarliestStart::FreeFor PoolState::EarliestStart::freeForByWalk() {
  std::vector<FreeFrom> all;
  for (size_t s = 0; s < in_order_.size(); ++s)
    for (size_t i = 0; i < in_order_[s].node->unitCount(); ++i)
      if (usable(s, i)) all.push_back({timeline_.earliestFree(s, i, now_, r_.max_duration), s, i});
  std::stable_sort(all.begin(), all.end(), [](const FreeFrom& a, const FreeFrom& b) { return a.at < b.at; });
  return [all = std::move(all), n = size_t{0}]() mutable -> std::optional<FreeFrom> {
    if (n == all.size()) return std::nullopt;
    return all[n++];
  };
}

void PoolState::countGranted(const Lease& lease, QuotaBook& book) const {
  if (const Quota* q = quotas_.of(lease.owner)) book.used[q] += static_cast<int>(lease.gpus.size());
}

void PoolState::failQueued(const QueueEntry& entry) {
  QueueEntry& e = queue_.at(entry.ticket);
  if (e.status == QueueEntry::Status::kWaiting) --waiting_count_;
  e.status = QueueEntry::Status::kFailed;
  e.reason = "the pool can no longer satisfy a request for " + unitsText(entry.request) +
             " (GPUs failed or nodes went down)";
  dirty_.queue.insert(e.ticket);
}

void PoolState::scheduleShare(const QueueEntry& entry, PassPlan& pass, std::optional<int>& waiting,
                              TimePoint now) {
  const LeaseRequest& r = entry.request;
  std::optional<Timeline>& timeline = pass.timeline;
  const std::vector<Slot>& inOrder = slots();
  // MPS shares start now or wait: on GPUs free until the share's end (in the plan, where a
  // request waits: promised GPUs are not free), or beside shares that last as long.
  const TimePoint end = r.max_duration ? addSaturating(now, *r.max_duration) : kNever;
  auto freeGpu = [&](size_t s, size_t i) {
    return timeline ? timeline->freeOn(s, now, end)(i) : inOrder[s].held->unheld(i);
  };
  std::vector<NodeView> views = shareViews(r, freeGpu, false, timeline ? std::optional(end) : std::nullopt);
  dropReserved(views, r, now);
  if (std::optional<std::vector<GpuRef>> gpus = placeFor(views, r)) {
    Lease lease = grantQueued(entry, *gpus, now);
    countGranted(lease, pass.book);
    const Lease& held = leases_.at(lease.id);
    if (timeline) timeline->hold(held.gpus, now, leaseEnd(held, preempt_), &held);
  } else if (!everFits(r)) {
    failQueued(entry);
  } else {
    waiting = std::max(waiting.value_or(r.priority), r.priority);
  }
}

void PoolState::startTimeline(PassPlan& pass, TimePoint now) {
  pass.timeline.emplace(slots(), slot_cache_.index, leases_, preempt_, now);
  holdReservations(*pass.timeline, now);
  pass.victims = victimCandidates(now, pass.book);
  for (const auto& [id, lease] : leases_) {
    if (lease.preempt_at) pass.awaitingVictims.insert(lease.preempted_for);
    if (lease.shrink_at) pass.awaitingVictims.insert(lease.shrunk_for);
    if (lease.elastic) pass.elastic.push_back(&lease);
  }
  // What they hold beyond their minimum is taken from the lowest priority first, then (with
  // accounts) the lowest fair-share factor, then the youngest.
  auto share = [this](const Lease* l) {
    return priorities_.shares.factor(l->account, l->owner).value_or(0.0);
  };
  std::sort(pass.elastic.begin(), pass.elastic.end(), [&](const Lease* a, const Lease* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    if (!accounts_.empty() && share(a) != share(b)) return share(a) < share(b);
    if (a->created != b->created) return a->created > b->created;
    return a->id < b->id;
  });
}

void PoolState::scheduleOnTimeline(const QueueEntry& entry, PassPlan& pass, std::optional<int>& waiting,
                                   TimePoint now) {
  const LeaseRequest& r = entry.request;
  Timeline& timeline = *pass.timeline;
  // The earliest start at which it fits, and where.
  std::vector<signed char> ownNodeOk;
  EarliestStart earliest(*this, r, timeline, !r.fabric && r.labels.empty() ? pass.plainNodeOk : ownNodeOk,
                         now);
  EarliestStart::Fit plan = earliest.find();
  // Preempting is worth it only where the request would otherwise start later than the victims'
  // notice and kill take.
  const TimePoint viaPreemption = addSaturating(now, preempt_.grace + preempt_.kill_margin);
  if ((!plan || plan->first > viaPreemption) && !pass.awaitingVictims.count(entry.ticket) &&
      preemptFor(entry, timeline, pass.victims, pass.elastic, pass.book, now))
    plan = earliest.find();
  if (plan) {
    auto& [t, gpus] = *plan;
    if (t == now) {
      Lease lease = grantQueued(entry, gpus, now);
      countGranted(lease, pass.book);
      const Lease& held = leases_.at(lease.id);
      timeline.hold(gpus, now, leaseEnd(held, preempt_), &held);
    } else {
      planned_[entry.ticket] = t;
      // A request that can start only once leases without an end have ended ("never", as far
      // as the plan can tell) may start at any moment they end: its GPUs are promised from now
      // on, or anything placed on them meanwhile could delay it without bound.
      TimePoint to = (t == kNever || !r.max_duration) ? kNever : addSaturating(t, *r.max_duration);
      timeline.hold(gpus, t == kNever ? now : t, to, nullptr);
    }
  }
  if (!plan && !everFits(r)) failQueued(entry);
  if (queue_.at(entry.ticket).status == QueueEntry::Status::kWaiting)
    waiting = std::max(waiting.value_or(r.priority), r.priority);
}

void PoolState::scheduleQueue(const std::vector<const QueueEntry*>& order, PassPlan& pass,
                              std::optional<int>& waiting, std::vector<std::string>& grantedElastic,
                              TimePoint now) {
  // Conservative backfill: every waiting request, in queue order, gets the earliest start at
  // which it fits on GPUs that are free then and not promised to a request ahead of it. Running
  // leases hold their GPUs until their maximum end (forever without one); a request starts now
  // only when its start is now, so it never delays anyone ahead of it.
  for (const QueueEntry* entry : order) {
    const LeaseRequest& r = entry->request;
    if (!quotas_.empty() && !overLimit(r, pass.book).empty()) continue;  // held back by its quota's limit
    if (!r.reservation.empty()) {
      scheduleReserved(*entry, pass, now);
      continue;
    }
    if (r.shared()) {
      scheduleShare(*entry, pass, waiting, now);
      continue;
    }
    if (!pass.timeline) {
      std::vector<NodeView> views = nodeViews(slots(), r, unheld<Slot>, false, &slot_cache_.unheld);
      dropReserved(views, r, now);
      if (std::optional<std::vector<GpuRef>> gpus = placeFor(views, r)) {
        Lease lease = grantQueued(*entry, *gpus, now);
        countGranted(lease, pass.book);
        if (r.elastic()) grantedElastic.push_back(lease.id);
        continue;
      }
      startTimeline(pass, now);
    }
    scheduleOnTimeline(*entry, pass, waiting, now);
  }
}

}  // namespace poolrun::pool
