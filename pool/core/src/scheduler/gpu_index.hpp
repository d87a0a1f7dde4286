// The GPUs of a pass's timeline ordered by a time of each (when it is free for good, when it is
// first free), as (time, slot, GPU): a sorted run made once, as the timeline is built, and the
// changes of the pass in a small ordered set beside it. A pass over 100,000 GPUs builds it with
// one sort and no allocation per GPU (two ordered sets of 100,000 nodes took most of a pass).
#pragma once

#include <algorithm>
#include <cstddef>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

// `KeyOf(slot, gpu)`: the GPU's time now. An entry of the run whose GPU's time has changed since
// is skipped; its time now is in `changed_` (unless it is back to the run's).
template <class KeyOf>
class GpuIndex {
 public:
  using Entry = std::tuple<TimePoint, size_t, size_t>;

  explicit GpuIndex(KeyOf keyOf) : key_of_(std::move(keyOf)) {}

  void build(std::vector<Entry> entries) {
    std::sort(entries.begin(), entries.end());
    run_ = std::move(entries);
    changed_.clear();
  }

  // GPU `gpu` of the node at `slot`, in the run at `base`, went from `before` to `after`.
  void moved(size_t slot, size_t gpu, TimePoint base, TimePoint before, TimePoint after) {
    if (before == after) return;
    if (before != base) changed_.erase({before, slot, gpu});
    if (after != base) changed_.insert({after, slot, gpu});
  }

  // The entries in order, from the first on; the index must not change while one is in use.
  class Cursor {
   public:
    explicit Cursor(const GpuIndex& index) : index_(&index), change_(index.changed_.begin()) { skipStale(); }
    // The current entry; null past the last.
    const Entry* get() const {
      const bool inRun = run_ < index_->run_.size();
      const bool inChanged = change_ != index_->changed_.end();
      if (inRun && (!inChanged || index_->run_[run_] < *change_)) return &index_->run_[run_];
      return inChanged ? &*change_ : nullptr;
    }
    void advance() {
      const Entry* e = get();
      if (e == nullptr) return;
      if (run_ < index_->run_.size() && e == &index_->run_[run_])
        ++run_;
      else
        ++change_;
      skipStale();
    }

   private:
    void skipStale() {
      for (; run_ < index_->run_.size(); ++run_) {
        const auto& [t, slot, gpu] = index_->run_[run_];
        if (index_->key_of_(slot, gpu) == t) return;
      }
    }
    const GpuIndex* index_;
    size_t run_ = 0;
    typename std::set<Entry>::const_iterator change_;
  };
  Cursor cursor() const { return Cursor(*this); }

  // f(time, slot, gpu) for each entry in order, until it returns false.
  template <class F>
  void each(F f) const {
    for (Cursor c = cursor(); const Entry* e = c.get(); c.advance()) {
      const auto& [t, slot, gpu] = *e;
      if (!f(t, slot, gpu)) return;
    }
  }

 private:
  KeyOf key_of_;
  std::vector<Entry> run_;  // sorted
  std::set<Entry> changed_;
};

}  // namespace poolrun::pool
