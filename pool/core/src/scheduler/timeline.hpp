// The scheduler's plan of when GPUs are busy (PoolState::schedule, preemptFor): running leases until
// their maximum end (forever without one), and the GPUs promised to the waiting requests planned
// so far.
#pragma once

#include <algorithm>
#include <boost/container/small_vector.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "lease_times.hpp"
#include "poolrun/pool/state.hpp"
#include "scheduler/gpu_index.hpp"

namespace poolrun::pool {

// Nodes are known by their index in pool order (`slotOf` names it).
class Timeline {
 public:
  template <class Slots>
  Timeline(const Slots& slots, const std::unordered_map<std::string_view, size_t>& slotOf,
           const std::map<std::string, Lease>& leases, const PreemptOptions& preempt, TimePoint now)
      : by_end_(EndOf{this}), by_free_(FirstFreeOf{this}), slot_of_(slotOf), busy_(slots.size()), now_(now) {
    for (size_t s = 0; s < slots.size(); ++s) busy_[s].resize(slots[s].node->unitCount());
    // A lease past its end holds its GPUs until a tick drops it (a submit between two ticks
    // plans with it still there): busy now, free an instant later.
    for (const auto& [id, lease] : leases) {
      const TimePoint end = std::max(leaseEnd(lease, preempt), now + TimePoint::duration(1));
      if (!lease.shrink_at) {
        hold(lease.gpus, now, end, &lease);
        continue;
      }
      std::vector<GpuRef> kept;
      for (const GpuRef& g : lease.gpus)
        if (std::find(lease.shrink_gpus.begin(), lease.shrink_gpus.end(), g) == lease.shrink_gpus.end())
          kept.push_back(g);
      hold(kept, now, end, &lease);
      hold(lease.shrink_gpus, now,
           std::min(end, std::max(shrinkEnd(lease, preempt), now + TimePoint::duration(1))), &lease);
    }
    std::vector<std::tuple<TimePoint, size_t, size_t>> ends, frees;
    size_t units = 0;
    for (const std::vector<Gpu>& node : busy_) units += node.size();
    ends.reserve(units);
    frees.reserve(units);
    for (size_t s = 0; s < busy_.size(); ++s)
      for (size_t i = 0; i < busy_[s].size(); ++i) {
        Gpu& g = busy_[s][i];
        g.base = keysOf(g);
        ends.emplace_back(g.base.end, s, i);
        frees.emplace_back(g.base.free, s, i);
      }
    by_end_.build(std::move(ends));
    by_free_.build(std::move(frees));
    indexed_ = true;
  }
  // Its indexes know it by its address.
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Every GPU by the first moment from the pass's start on at which it is free, the earliest
  // first: (moment, slot, GPU). No GPU is free for any length before that moment (the first of
  // its gaps), so a request walks this index only as far as the GPUs it may take.
  struct FirstFreeOf {
    const Timeline* timeline;
    TimePoint operator()(size_t slot, size_t gpu) const {
      return timeline->busy_[slot][gpu].firstFree(timeline->now_);
    }
  };
  const GpuIndex<FirstFreeOf>& byFirstFree() const { return by_free_; }

  // The GPUs free for good from t on (every interval of theirs over by t; t not kNever), in the
  // order they become so: f(slot, gpu, since) for each, until f returns false. For a request
  // without a maximum duration these are exactly the GPUs freeOn(slot, t, kNever) calls free,
  // found without a walk over the pool.
  template <class F>
  void freeForGoodBy(TimePoint t, F f) const {
    by_end_.each([&](TimePoint end, size_t slot, size_t gpu) { return end <= t && f(slot, gpu, end); });
  }

  // What a preemption may take: whole leases, and single GPUs of elastic leases (a shrink), by
  // (slot, GPU). Their GPUs count as free where `freeOn` is given them.
  struct Ignoring {
    std::set<const Lease*> leases;
    std::set<std::pair<size_t, size_t>> gpus;
    bool covers(const Lease* lease, size_t slot, size_t gpu) const {
      return lease != nullptr && (leases.count(lease) || gpus.count({slot, gpu}));
    }
  };

  // When a request may start: now, at every planned end after now, and never (once leases
  // without an end have ended).
  // Only from `from` on (a bound below which the request cannot start).
  // f(t) for each in order, until it returns true (most requests fit at the first: a full pool
  // has thousands of ends to list, so none is listed ahead).
  template <class F>
  void eachStart(TimePoint now, TimePoint from, F f) const {
    if (from <= now && f(now)) return;
    for (auto t = ends_.lower_bound(std::max(from, now)); t != ends_.end(); ++t)
      if (*t > now && *t != kNever && f(*t)) return;
    f(kNever);
  }

  // The earliest time from `now` at which GPU `gpu` of the node at `slot` is free for `length`
  // (kNever: free for good; it is then free from its last end on). kNever where no such time is
  // known (held by a lease or promise without an end).
  TimePoint earliestFree(size_t slot, size_t gpu, TimePoint now,
                         std::optional<std::chrono::seconds> length) const {
    const Gpu& g = busy_[slot][gpu];
    if (!length) return g.max_to.empty() ? now : std::max(now, g.max_to.back());
    TimePoint t = now;
    for (const Interval& iv : g.busy) {  // by start: the first gap of `length` after `now`
      if (iv.to <= t) continue;
      if (iv.from >= addSaturating(t, *length)) return t;
      t = std::max(t, iv.to);
      if (t == kNever) return kNever;
    }
    return t;
  }

  // Per GPU of the node at `slot`: whether it is free from `t` to `to`. From kNever, only promises
  // without an end hold it.
  auto freeOn(size_t slot, TimePoint t, TimePoint to, const Ignoring* ignoring = nullptr) const {
    const std::vector<Gpu>& gpus = busy_.at(slot);
    return [&gpus, slot, t, to, ignoring](size_t i) {
      const Gpu& g = gpus[i];
      if (t == kNever) return !g.endless_promise;  // only a promise without an end holds it then
      if (ignoring == nullptr) {
        // The intervals that begin before `to` are a prefix (sorted by `from`); one of them
        // reaches past t exactly when the latest end among them does.
        auto begun = std::lower_bound(g.busy.begin(), g.busy.end(), to,
                                      [](const Interval& iv, TimePoint x) { return iv.from < x; });
        size_t n = static_cast<size_t>(begun - g.busy.begin());
        return n == 0 || g.max_to[n - 1] <= t;
      }
      return std::none_of(g.busy.begin(), g.busy.end(), [&](const Interval& iv) {
        if (ignoring->covers(iv.lease, slot, i)) return false;
        return iv.from < to && t < iv.to;
      });
    };
  }

  // `gpus` busy from `from` to `to`: held by `lease`, or promised to a waiting request (null).
  void hold(const std::vector<GpuRef>& gpus, TimePoint from, TimePoint to, const Lease* lease) {
    if (to != kNever) ends_.insert(to);
    std::optional<size_t> slot;  // of the GPU before, where it is on the same node (most are)
    for (size_t k = 0; k < gpus.size(); ++k) {
      const GpuRef& g = gpus[k];
      if (k == 0 || g.node != gpus[k - 1].node) slot = slotOf(g.node);
      if (!slot || g.index >= busy_[*slot].size()) continue;
      Gpu& gpu = busy_[*slot][g.index];
      const Keys before = keysOf(gpu);
      auto at = std::upper_bound(gpu.busy.begin(), gpu.busy.end(), from,
                                 [](TimePoint x, const Interval& iv) { return x < iv.from; });
      size_t i = static_cast<size_t>(at - gpu.busy.begin());
      gpu.busy.insert(at, {from, to, lease});
      gpu.endless_promise |= !lease && to == kNever;
      gpu.reckon(i);
      reindex(*slot, g.index, before);
    }
  }

  // A lease chosen as a victim now holds its GPUs (or those of `gpus`, a shrink) only until `end`.
  void endEarly(const Lease& lease, TimePoint end, const std::vector<GpuRef>* gpus = nullptr) {
    ends_.insert(end);
    for (const GpuRef& g : gpus ? *gpus : lease.gpus) {
      auto s = slot_of_.find(g.node);
      if (s == slot_of_.end() || g.index >= busy_[s->second].size()) continue;
      Gpu& gpu = busy_[s->second][g.index];
      const Keys before = keysOf(gpu);
      for (Interval& iv : gpu.busy)
        if (iv.lease == &lease) iv.to = std::min(iv.to, end);
      gpu.reckon(0);
      reindex(s->second, g.index, before);
    }
  }

 private:
  struct Interval {
    TimePoint from, to;
    const Lease* lease;  // null: promised to a waiting request
  };
  struct Keys {
    TimePoint end, free;  // when it is free for good, when first free (its times in the indexes)
  };
  // Most GPUs have one interval (their lease) or two (and a promise): kept inline, 100,000 GPUs
  // make no allocation each (a pass builds its timeline anew).
  struct Gpu {
    boost::container::small_vector<Interval, 2> busy;  // sorted by `from`
    boost::container::small_vector<TimePoint, 2>
        max_to;                    // per interval: the latest `to` of it and those before it
    bool endless_promise = false;  // a promise without an end
    Keys base;                     // its times in the indexes' sorted runs
    void reckon(size_t from) {     // max_to again from interval `from` on
      max_to.resize(busy.size());
      for (size_t i = from; i < busy.size(); ++i)
        max_to[i] = i == 0 ? busy[i].to : std::max(max_to[i - 1], busy[i].to);
    }
    // From when it is free for good; TimePoint::min() when never busy.
    TimePoint end() const { return max_to.empty() ? TimePoint::min() : max_to.back(); }
    // The first moment from `now` on that no interval covers (kNever: none).
    TimePoint firstFree(TimePoint now) const {
      TimePoint t = now;
      for (const Interval& iv : busy) {  // by start: those that begin by t carry it to their end
        if (iv.from > t || t == kNever) break;
        t = std::max(t, iv.to);
      }
      return t;
    }
  };
  Keys keysOf(const Gpu& gpu) const { return {gpu.end(), gpu.firstFree(now_)}; }
  std::optional<size_t> slotOf(const std::string& node) const {
    auto s = slot_of_.find(node);
    return s == slot_of_.end() ? std::nullopt : std::optional(s->second);
  }
  void reindex(size_t slot, size_t gpu, Keys before) {
    if (!indexed_) return;
    const Gpu& g = busy_[slot][gpu];
    const Keys after = keysOf(g);
    by_end_.moved(slot, gpu, g.base.end, before.end, after.end);
    by_free_.moved(slot, gpu, g.base.free, before.free, after.free);
  }
  struct EndOf {
    const Timeline* timeline;
    TimePoint operator()(size_t slot, size_t gpu) const { return timeline->busy_[slot][gpu].end(); }
  };
  GpuIndex<EndOf> by_end_;         // (free for good from, slot, GPU)
  GpuIndex<FirstFreeOf> by_free_;  // (first free from now_, slot, GPU)
  bool indexed_ = false;
  const std::unordered_map<std::string_view, size_t>& slot_of_;
  std::vector<std::vector<Gpu>> busy_;  // per node (slot), per GPU
  std::set<TimePoint> ends_;
  TimePoint now_;  // the pass's start
};

}  // namespace poolrun::pool
