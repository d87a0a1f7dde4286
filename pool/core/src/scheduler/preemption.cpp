// Preemption: the quota book (what each quota's owners hold, which leases are borrowed), the leases
// that may be victims, and preemptFor's choice of victims for a request that would otherwise wait.

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "node_views.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/state.hpp"
#include "scheduler/timeline.hpp"

namespace poolrun::pool {

using std::chrono::seconds;

PoolState::QuotaBook PoolState::quotaBook() const {
  QuotaBook book;
  if (quotas_.empty()) return book;
  std::map<const Quota*, std::vector<const Lease*>> held;
  for (const auto& [id, lease] : leases_)
    if (const Quota* q = quotas_.of(lease.owner)) held[q].push_back(&lease);
  for (auto& [q, leases] : held) {
    std::sort(leases.begin(), leases.end(), [](const Lease* a, const Lease* b) {
      return a->created != b->created ? a->created < b->created : a->id < b->id;
    });
    int used = 0;
    for (const Lease* l : leases) {
      used += static_cast<int>(l->gpus.size());
      if (used > q->guaranteed) book.borrowed.insert(l);
    }
    book.used[q] = used;
  }
  return book;
}

std::string PoolState::overLimit(const LeaseRequest& r, const QuotaBook& book) const {
  const Quota* q = quotas_.of(r.owner);
  if (q == nullptr || !q->limit) return "";
  auto used = book.used.find(q);
  int held = used == book.used.end() ? 0 : used->second;
  if (held + r.gpus <= *q->limit) return "";
  return (q->kind == Quota::Kind::kGroup ? "group " + q->name + " of " + r.owner : "owner " + r.owner) +
         " holds " + std::to_string(held) + " of its limit of " + std::to_string(*q->limit) + " GPUs";
}

std::vector<QuotaUse> PoolState::quotaUse() const {
  QuotaBook book = quotaBook();
  std::vector<QuotaUse> out;
  for (const Quota& q : quotas_.entries) {
    QuotaUse u;
    u.quota = q;
    if (auto it = book.used.find(&q); it != book.used.end()) u.used = it->second;
    u.borrowed = std::max(0, u.used - q.guaranteed);
    for (const auto& [t, e] : queue_)
      if (e.status == QueueEntry::Status::kWaiting && quotas_.of(e.request.owner) == &q)
        u.waiting += e.request.gpus;
    out.push_back(std::move(u));
  }
  return out;
}

std::vector<const Lease*> PoolState::victimCandidates(TimePoint now, const QuotaBook& book) const {
  std::vector<const Lease*> out;
  // Not MPS shares: a GPU is freed by ending all its shares, which a victim of one lease cannot do.
  for (const auto& [id, lease] : leases_)
    if ((lease.preemptible || book.borrowed.count(&lease)) && !lease.preempt_at &&
        now - lease.created >= preempt_.min_runtime && (lease.gpus.empty() || !lease.gpus.front().share))
      out.push_back(&lease);
  std::sort(out.begin(), out.end(), [](const Lease* a, const Lease* b) {
    if (a->gpus.size() != b->gpus.size()) return a->gpus.size() < b->gpus.size();
    if (a->created != b->created) return a->created > b->created;
    return a->id < b->id;
  });
  return out;
}

// One request's choice of victims (PoolState::preemptFor): what may be taken, in the order it is
// taken, the GPUs that taking it could free, and the fewest of it that make room.
class PoolState::Preemption {
  using Chosen = std::set<size_t>;  // indexes into cands_
  // What may be taken, in the order it is taken: first what elastic leases hold beyond their
  // minimum (a shrink instead of a preemption), a GPU at a time from the end of each lease (a node's
  // GPUs at a time for a per-node shape), so that a shrink gives back no more than the request
  // needs; then whole leases, in the pool's order (the smallest first, then the youngest),
  // borrowed GPUs first.
  struct Unit {
    const Lease* lease;
    std::vector<GpuRef> gpus;  // a shrink's; empty: the whole lease
  };
  // A GPU the request could use from `from_` were every candidate taken, with the candidates that
  // free it (its lease whole, a shrink of it; none where it is free anyway).
  struct Reach {
    size_t slot, gpu;
    int whole = -1, shrink = -1;  // the candidates that free it; both -1: free anyway
  };

 public:
  Preemption(PoolState& pool, const QueueEntry& entry, Timeline& timeline, const QuotaBook& book,
             TimePoint now)
      : pool_(pool), entry_(entry), r_(entry.request), timeline_(timeline), book_(book), now_(now) {
    // An owner within its guarantee takes back what others borrowed, whatever their priority.
    mine_ = pool_.quotas_.of(r_.owner);
    const int mineUsed = mine_ && book_.used.count(mine_) ? book_.used.at(mine_) : 0;
    within_guarantee_ = mine_ != nullptr && mineUsed + r_.gpus <= mine_->guaranteed;
    // Placed where it would start: once the victims have had their grace and the kill margin.
    from_ = addSaturating(now_, pool_.preempt_.grace + pool_.preempt_.kill_margin);
    to_ = r_.max_duration ? addSaturating(from_, *r_.max_duration) : kNever;
  }

  // What may be taken (`pool`: the victim candidates, `elastic`: the elastic leases); false where
  // nothing may.
  bool gather(const std::vector<const Lease*>& pool, const std::vector<const Lease*>& elastic);
  // The fewest of what may be taken that make room, spared what the placement can do without;
  // nullopt where not even everything would make room.
  std::optional<Chosen> choose();
  // Notifies the victims chosen: whole leases of their preemption, elastic ones of their shrink.
  void notify(const Chosen& chosen);

 private:
  bool reclaimable(const Lease* l) const {
    return within_guarantee_ && book_.borrowed.count(l) && pool_.quotas_.of(l->owner) != mine_;
  }
  bool mayTake(const Lease* l) const { return reclaimable(l) || l->priority < r_.priority; }
  Timeline::Ignoring ignoring(const Chosen& chosen) const;
  bool usable(size_t slot, size_t i) { return usableUnit(pool_.slots(), node_ok_, r_, slot, i); }
  void reachFreeAnyway();
  void reachThrough(size_t k);
  void mergeReach(size_t from);
  void findReachByWalk();
  std::optional<size_t> shortestRun();
  std::optional<size_t> shortestRunByHalving();
  std::optional<std::vector<GpuRef>> placeTakingFirst(size_t k) const;
  template <class Taken>
  std::optional<std::vector<GpuRef>> placeWhere(Taken taken) const;
  std::optional<std::vector<GpuRef>> placeIgnoring(const Chosen& chosen) const;
  static Chosen prefix(size_t k) {
    Chosen out;
    for (size_t u = 0; u < k; ++u) out.insert(u);
    return out;
  }
  Chosen takenFrom(const std::vector<GpuRef>& gpus, const Chosen& among) const;
  size_t size(size_t u) const {
    return cands_[u].gpus.empty() ? cands_[u].lease->gpus.size() : cands_[u].gpus.size();
  }
  Chosen spareWholeLeases(Chosen chosen) const;
  Chosen spareShrinks(Chosen chosen) const;
  void preempt(const Lease* victim, const std::string& why);
  void shrink(const Lease* victim, std::vector<GpuRef> gpus, const std::string& forWhom,
              const std::string& request);

  PoolState& pool_;
  const QueueEntry& entry_;
  const LeaseRequest& r_;
  Timeline& timeline_;
  const QuotaBook& book_;
  const TimePoint now_;
  const Quota* mine_ = nullptr;
  bool within_guarantee_ = false;
  TimePoint from_{}, to_{};
  std::vector<Unit> cands_;
  std::set<const Lease*> reclaimed_;
  std::vector<Reach> reach_;          // in pool order
  size_t reached_ = 0;                // the candidates whose GPUs reach_ holds: [0, reached_)
  std::vector<signed char> node_ok_;  // per slot: -1 unknown, 0 no, 1 the request may use the node
};

bool PoolState::Preemption::gather(const std::vector<const Lease*>& pool,
                                   const std::vector<const Lease*>& elastic) {
  // An owner within its guarantee shrinks what others borrowed first, then the rest (`elastic` is in
  // the pool's order: the lowest priority first, then the youngest).
  for (const bool borrowedPass : {true, false})
    for (const Lease* l : elastic) {
      if (l->preempt_at || l->shrink_at || now_ - l->created < pool_.preempt_.min_runtime || !mayTake(l))
        continue;
      if (reclaimable(l) != borrowedPass) continue;
      const size_t step = static_cast<size_t>(std::max(1, l->elastic->gpus_per_node));
      const size_t keep = static_cast<size_t>(l->elastic->gpus);
      for (size_t end = l->gpus.size(); end >= keep + step; end -= step)
        cands_.push_back({l, std::vector<GpuRef>(l->gpus.begin() + static_cast<long>(end - step),
                                                 l->gpus.begin() + static_cast<long>(end))});
    }
  for (const Lease* l : pool)
    if (!l->preempt_at && reclaimable(l)) {
      cands_.push_back({l, {}});
      reclaimed_.insert(l);
    }
  for (const Lease* l : pool)
    if (!l->preempt_at && !reclaimable(l) && l->priority < r_.priority) cands_.push_back({l, {}});
  return !cands_.empty();
}

Timeline::Ignoring PoolState::Preemption::ignoring(const Chosen& chosen) const {
  Timeline::Ignoring out;
  for (size_t u : chosen) {
    if (cands_[u].gpus.empty()) out.leases.insert(cands_[u].lease);
    for (const GpuRef& g : cands_[u].gpus)
      if (auto at = pool_.slot_cache_.index.find(g.node); at != pool_.slot_cache_.index.end())
        out.gpus.insert({at->second, g.index});
  }
  return out;
}

// The GPUs the request could use from `from_` were candidates taken, each with the candidates that
// free it: a placement for a set of candidates then reads flags rather than the timeline, over these
// GPUs only (a pass chooses victims for many requests, each with a dozen placements, on pools of
// 100,000 GPUs). First those free anyway, found through the timeline's index of when GPUs are
// first free (a GPU free from `from_` on is first free by then), not by a walk over the pool.
void PoolState::Preemption::reachFreeAnyway() {
  timeline_.byFirstFree().each([&](TimePoint first, size_t slot, size_t i) {
    if (first > from_) return false;
    if (usable(slot, i) && timeline_.freeOn(slot, from_, to_)(i)) reach_.push_back({slot, i});
    return true;
  });
  mergeReach(0);
}

// Then the GPUs of candidates [reached_, k) (only the first candidates are ever looked at where
// they make room).
void PoolState::Preemption::reachThrough(size_t k) {
  const size_t before = reach_.size();
  for (; reached_ < std::min(k, cands_.size()); ++reached_) {
    const Unit& c = cands_[reached_];
    const bool whole = c.gpus.empty();
    Timeline::Ignoring taking;  // a GPU has one lease's interval: what taking this candidate frees
    taking.leases.insert(c.lease);
    for (const GpuRef& g : whole ? c.lease->gpus : c.gpus) {
      auto at = pool_.slot_cache_.index.find(g.node);
      if (at == pool_.slot_cache_.index.end() || !usable(at->second, g.index)) continue;
      const size_t slot = at->second;
      if (!timeline_.freeOn(slot, from_, to_, &taking)(g.index)) continue;
      Reach x{slot, g.index};
      if (!timeline_.freeOn(slot, from_, to_)(g.index))
        (whole ? x.whole : x.shrink) = static_cast<int>(reached_);
      reach_.push_back(x);
    }
  }
  mergeReach(before);
}

// reach_ in pool order again, each GPU once (free anyway, or freed by its whole lease or a shrink
// of it), after [from, end) was added to it.
void PoolState::Preemption::mergeReach(size_t from) {
  auto inPoolOrder = [](const Reach& a, const Reach& b) {
    return std::pair(a.slot, a.gpu) < std::pair(b.slot, b.gpu);
  };
  const auto mid = reach_.begin() + static_cast<std::ptrdiff_t>(from);
  std::sort(mid, reach_.end(), inPoolOrder);
  std::inplace_merge(reach_.begin(), mid, reach_.end(), inPoolOrder);
  size_t kept = 0;
  for (size_t i = 0; i < reach_.size(); ++i) {
    const Reach& x = reach_[i];
    if (kept == 0 || reach_[kept - 1].slot != x.slot || reach_[kept - 1].gpu != x.gpu) {
      reach_[kept++] = x;
      continue;
    }
    Reach& same = reach_[kept - 1];
    const bool anyway = (same.whole < 0 && same.shrink < 0) || (x.whole < 0 && x.shrink < 0);
    same.whole = anyway ? -1 : std::max(same.whole, x.whole);
    same.shrink = anyway ? -1 : std::max(same.shrink, x.shrink);
  }
  reach_.resize(kept);
}

// Every candidate's at once, by a walk over the pool (the reference the above are tested against).
void PoolState::Preemption::findReachByWalk() {
  reached_ = cands_.size();
  std::unordered_map<const Lease*, int> wholeUnit;
  std::map<std::pair<size_t, size_t>, int> shrinkUnit;
  for (size_t u = 0; u < cands_.size(); ++u) {
    if (cands_[u].gpus.empty()) wholeUnit[cands_[u].lease] = static_cast<int>(u);
    for (const GpuRef& g : cands_[u].gpus)
      if (auto at = pool_.slot_cache_.index.find(g.node); at != pool_.slot_cache_.index.end())
        shrinkUnit[{at->second, g.index}] = static_cast<int>(u);
  }
  const Timeline::Ignoring everything = ignoring(prefix(cands_.size()));
  const std::vector<Slot>& inOrder = pool_.slots();
  for (size_t slot = 0; slot < inOrder.size(); ++slot) {
    const PoolNode& node = *inOrder[slot].node;
    if (!nodeMatches(node, r_)) continue;
    auto freeTaking = timeline_.freeOn(slot, from_, to_, &everything);
    auto freeAnyway = timeline_.freeOn(slot, from_, to_);
    const std::vector<std::string>& held = inOrder[slot].held->holder;
    for (size_t i = 0; i < node.unitCount(); ++i) {
      if (!node.placeable(i) || !unitMatches(node, i, r_) || !freeTaking(i)) continue;
      Reach x{slot, i};
      if (!freeAnyway(i)) {
        if (i < held.size() && !held[i].empty())
          if (auto w = wholeUnit.find(&pool_.leases_.at(held[i])); w != wholeUnit.end()) x.whole = w->second;
        if (auto sh = shrinkUnit.find({slot, i}); sh != shrinkUnit.end()) x.shrink = sh->second;
        if (x.whole < 0 && x.shrink < 0) continue;
      }
      reach_.push_back(x);
    }
  }
}

std::optional<std::vector<GpuRef>> PoolState::Preemption::placeIgnoring(const Chosen& chosen) const {
  std::vector<char> taken(cands_.size(), 0);
  for (size_t u : chosen) taken[u] = 1;
  return placeWhere([&](int u) { return u >= 0 && taken[static_cast<size_t>(u)]; });
}

// The same for the first k candidates.
std::optional<std::vector<GpuRef>> PoolState::Preemption::placeTakingFirst(size_t k) const {
  return placeWhere([k](int u) { return u >= 0 && static_cast<size_t>(u) < k; });
}

// A placement on the GPUs of reach_ free anyway and those whose candidate `taken` says is taken.
template <class Taken>
std::optional<std::vector<GpuRef>> PoolState::Preemption::placeWhere(Taken taken) const {
  std::vector<NodeView> views;
  for (const Reach& x : reach_) {
    const bool free = (x.whole < 0 && x.shrink < 0) || taken(x.whole) || taken(x.shrink);
    if (!free) continue;
    const PoolNode* node = pool_.slots()[x.slot].node;
    if (views.empty() || views.back().node != node) views.push_back({node, {}, false});
    views.back().usable.push_back(x.gpu);
  }
  for (NodeView& v : views) v.whole = !r_.mig() && v.usable.size() == v.node->gpuCount();
  return pool_.placeFor(views, r_);
}

// Of `among`, the candidates whose GPUs `gpus` (a placement) takes.
PoolState::Preemption::Chosen PoolState::Preemption::takenFrom(const std::vector<GpuRef>& gpus,
                                                               const Chosen& among) const {
  Chosen out;
  for (const GpuRef& g : gpus) {
    const std::string* h = pool_.holder(g.node, g.index);
    if (!h) continue;
    const Lease* l = &pool_.leases_.at(*h);
    for (size_t u : among)
      if (cands_[u].lease == l &&
          (cands_[u].gpus.empty() ||
           std::find(cands_[u].gpus.begin(), cands_[u].gpus.end(), g) != cands_[u].gpus.end()))
        out.insert(u);
  }
  return out;
}

std::optional<PoolState::Preemption::Chosen> PoolState::Preemption::choose() {
  std::optional<size_t> run = pool_.slow_scheduling_ ? shortestRunByHalving() : shortestRun();
  if (!run) return std::nullopt;  // not even every candidate would make room
  // Of those, the ones whose GPUs the placement takes; then each whole lease it can do without is
  // spared, then each shrink it can do without.
  Chosen chosen = prefix(*run);
  chosen = takenFrom(*placeIgnoring(chosen), chosen);
  return spareShrinks(spareWholeLeases(std::move(chosen)));
}

// The shortest run of candidates that makes room (room only grows with the run): runs twice as
// long each time until one does, then halved between the longest that did not and it. A placement
// reads the GPUs of the run's candidates only, so a request that takes a few victims of thousands
// costs a few small placements.
std::optional<size_t> PoolState::Preemption::shortestRun() {
  reachFreeAnyway();
  size_t fails = 0, fits = 1;
  for (;;) {
    reachThrough(fits);
    if (placeTakingFirst(fits)) break;
    if (fits >= cands_.size()) return std::nullopt;
    fails = fits;
    fits = std::min(cands_.size(), 2 * fits);
  }
  size_t lo = fails + 1, hi = fits;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (placeTakingFirst(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// The same by halving over every candidate, each placement over all their GPUs (the reference
// shortestRun is tested against).
std::optional<size_t> PoolState::Preemption::shortestRunByHalving() {
  findReachByWalk();
  if (!placeIgnoring(prefix(cands_.size()))) return std::nullopt;
  size_t lo = 1, hi = cands_.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (placeIgnoring(prefix(mid)))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// Each whole lease the placement can do without is spared, the largest first, then the oldest (a
// shrink's GPUs are few, and taken in order: the shortest run already gives back no more than it
// must).
PoolState::Preemption::Chosen PoolState::Preemption::spareWholeLeases(Chosen chosen) const {
  std::vector<size_t> spareOrder;
  for (size_t u : chosen)
    if (cands_[u].gpus.empty()) spareOrder.push_back(u);
  std::sort(spareOrder.begin(), spareOrder.end(), [&](size_t a, size_t b) {
    const Lease* la = cands_[a].lease;
    const Lease* lb = cands_[b].lease;
    if (size(a) != size(b)) return size(a) > size(b);
    if (la->created != lb->created) return la->created < lb->created;
    if (la->id != lb->id) return la->id < lb->id;
    return a < b;
  });
  for (size_t u : spareOrder) {
    if (!chosen.count(u)) continue;
    Chosen without = chosen;
    without.erase(u);
    if (std::optional<std::vector<GpuRef>> gpus = placeIgnoring(without)) chosen = takenFrom(*gpus, without);
  }
  return chosen;
}

// A whole lease taken may make a shrink needless (its job would be restarted for nothing): each
// shrink's GPUs are spared in turn, the last taken first, where the request still fits.
PoolState::Preemption::Chosen PoolState::Preemption::spareShrinks(Chosen chosen) const {
  std::vector<size_t> shrinkOrder;
  for (size_t u : chosen)
    if (!cands_[u].gpus.empty()) shrinkOrder.push_back(u);
  if (shrinkOrder.size() < chosen.size())
    for (auto u = shrinkOrder.rbegin(); u != shrinkOrder.rend(); ++u) {
      if (!chosen.count(*u)) continue;
      Chosen without = chosen;
      without.erase(*u);
      if (std::optional<std::vector<GpuRef>> gpus = placeIgnoring(without))
        chosen = takenFrom(*gpus, without);
    }
  return chosen;
}

void PoolState::Preemption::notify(const Chosen& chosen) {
  const std::string request = std::to_string(r_.gpus) + (r_.gpus == 1 ? " GPU" : " GPUs");
  const std::string forWhom = "for ticket " + std::to_string(entry_.ticket) + " of " + r_.owner;
  const std::string byPriority =
      "preempted " + forWhom + " (priority " + std::to_string(r_.priority) + ", " + request + ")";
  const std::string byQuota =
      mine_ == nullptr ? ""
                       : "preempted " + forWhom + " (" + request + ", within the guarantee of " +
                             std::to_string(mine_->guaranteed) + " GPUs of " + toString(mine_->kind) +
                             (mine_->kind == Quota::Kind::kDefault ? "" : " " + mine_->name) +
                             "): these GPUs were borrowed beyond its owner's guarantee";
  // Whole leases first: a lease preempted whole gives nothing back by a shrink as well.
  std::set<const Lease*> whole;
  std::map<const Lease*, std::vector<GpuRef>> shrinks;
  for (size_t u : chosen)
    if (cands_[u].gpus.empty()) whole.insert(cands_[u].lease);
  for (size_t u : chosen)
    if (!cands_[u].gpus.empty() && !whole.count(cands_[u].lease))
      for (const GpuRef& g : cands_[u].gpus) shrinks[cands_[u].lease].push_back(g);
  for (const Lease* victim : whole) preempt(victim, reclaimed_.count(victim) ? byQuota : byPriority);
  for (auto& [victim, gpus] : shrinks) shrink(victim, std::move(gpus), forWhom, request);
}

void PoolState::Preemption::preempt(const Lease* victim, const std::string& why) {
  Lease& v = pool_.leases_.at(victim->id);
  v.preempt_at = addSaturating(now_, pool_.preempt_.grace);
  v.preempt_reason = why;
  v.preempted_for = entry_.ticket;
  pool_.dirty_.leases.insert(v.id);
  pool_.lease_events_.push_back({LeaseEvent::Kind::kPreempted, v, why});
  ++pool_.leases_preempted_;
  timeline_.endEarly(v, leaseEnd(v, pool_.preempt_));
}

void PoolState::Preemption::shrink(const Lease* victim, std::vector<GpuRef> gpus, const std::string& forWhom,
                                   const std::string& request) {
  Lease& v = pool_.leases_.at(victim->id);
  pool_.poolOrder(gpus);
  const std::string why =
      "shrunk from " + std::to_string(v.gpus.size()) + " to " + std::to_string(v.gpus.size() - gpus.size()) +
      " GPUs " + forWhom + " (" +
      (reclaimable(victim) ? "within its owner's guarantee" : "priority " + std::to_string(r_.priority)) +
      ", " + request + ")";
  v.shrink_gpus = std::move(gpus);
  v.shrink_at = addSaturating(now_, pool_.preempt_.grace);
  v.shrink_reason = why;
  v.shrunk_for = entry_.ticket;
  pool_.dirty_.leases.insert(v.id);
  pool_.lease_events_.push_back({LeaseEvent::Kind::kShrinking, v, why});
  timeline_.endEarly(v, std::min(leaseEnd(v, pool_.preempt_), shrinkEnd(v, pool_.preempt_)), &v.shrink_gpus);
}

bool PoolState::preemptFor(const QueueEntry& entry, Timeline& timeline, const std::vector<const Lease*>& pool,
                           const std::vector<const Lease*>& elastic, const QuotaBook& book, TimePoint now) {
  const LeaseRequest& r = entry.request;
  if (r.wait && *r.wait == seconds(0)) return false;  // it will not wait for the grace: no notice for it
  Preemption preemption(*this, entry, timeline, book, now);
  if (!preemption.gather(pool, elastic)) return false;
  std::optional<std::set<size_t>> chosen = preemption.choose();
  if (!chosen) return false;
  preemption.notify(*chosen);
  return !chosen->empty();
}

}  // namespace poolrun::pool
