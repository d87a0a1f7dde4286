#include "poolrun/pool/committed_state.hpp"

#include <iostream>
#include <utility>

namespace poolrun::pool {

CommittedState::CommittedState(std::unique_ptr<StateStore> store) : store_(std::move(store)) {
  store_->load(state_);
}

void CommittedState::wakeAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  changed_.notify_all();
}

std::vector<double> CommittedState::takeWaitSeconds() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.takeWaitSeconds();
}

bool CommittedState::takeDirty() {
  Dirty d = state_.takeDirty();
  if (d.empty()) return false;
  pending_.merge(d);
  return true;
}

void CommittedState::waitCommitted(uint64_t seq) {
  std::unique_lock<std::mutex> c(commit_mu_);
  while (committed_ < seq) {
    if (committing_) {
      commit_cv_.wait(c);
      continue;
    }
    committing_ = true;
    c.unlock();
    uint64_t target;
    try {
      bool any;
      {
        std::lock_guard<std::mutex> lock(mu_);
        takeDirty();
        Dirty d = std::exchange(pending_, {});
        target = applied_;
        any = !d.empty();
        if (any) {
          store_->begin();
          store_->write(state_, d);
        }
      }
      if (any) store_->commit();  // the fsync (FULL) happens here, outside the state lock
    } catch (const std::exception& e) {
      // Memory is now ahead of the file: nothing more may be acknowledged. A restart reloads the
      // last committed state.
      std::cerr << "poold: cannot commit the pool state (" << e.what()
                << "); exiting so that no unsaved change is acknowledged\n";
      std::_Exit(70);
    }
    c.lock();
    committing_ = false;
    committed_ = std::max(committed_, target);
    commit_cv_.notify_all();
  }
}

}  // namespace poolrun::pool
