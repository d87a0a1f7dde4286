// The thread that wakes the agent for its jobs (job_watch.hpp).

#include "job_watch.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "poolrun/common/error.hpp"

namespace poolrun::agent {

using std::chrono::milliseconds;

namespace {

// What one poll asks poold to wait (poold answers by 5 s), and how soon an answer counts as given
// at once (no wait: poold's long polls all taken, or work already there).
constexpr milliseconds kPoll{25'000};
constexpr milliseconds kAtOnce{200};
// Wakes in a row whose work was there at once, after which the thread pauses a second: work the
// loop cannot clear (a report poold keeps refusing) must not make the two spin.
constexpr int kMostQuickWakes = 3;
constexpr milliseconds kQuickPause{1000};
constexpr milliseconds kFirstRetry{500};

}  // namespace

struct JobWatch::Shared {
  OpenLink open;
  std::string node;
  milliseconds interval;
  std::function<void()> wake;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  uint64_t handled = 0;  // job rounds of the loop

  // Waits `d` or until stopped; false where stopped.
  bool pause(milliseconds d) {
    std::unique_lock<std::mutex> lock(mu);
    return !cv.wait_for(lock, d, [this] { return stop; });
  }

  void run() {
    std::unique_ptr<pool::AgentLink> link;
    milliseconds wait{0}, retry = kFirstRetry;
    int quick = 0;
    while (pause(wait)) {
      wait = milliseconds(0);
      try {
        if (!link) link = open();
        const auto sent = std::chrono::steady_clock::now();
        const bool work = link->awaitJobs(node, kPoll);
        const bool atOnce = std::chrono::steady_clock::now() - sent < kAtOnce;
        retry = kFirstRetry;
        if (!work) {
          if (atOnce) wait = interval;
          continue;
        }
        std::unique_lock<std::mutex> lock(mu);
        if (stop) return;
        const uint64_t seen = handled;
        lock.unlock();
        wake();
        lock.lock();
        cv.wait_for(lock, interval, [&] { return stop || handled > seen; });
        quick = atOnce ? quick + 1 : 0;
        if (quick >= kMostQuickWakes) {
          quick = 0;
          wait = kQuickPause;
        }
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kUnsupported) return;  // a link with no jobs: heartbeats alone
        link.reset();  // the loop says what is wrong with poold; this one tries again, quietly
        wait = retry;
        retry = std::min(retry * 2, interval);
      } catch (const std::exception&) {
        link.reset();
        wait = interval;
      }
    }
  }
};

JobWatch::JobWatch(OpenLink open, std::string node, milliseconds interval, std::function<void()> wake)
    : shared_(std::make_shared<Shared>()) {
  shared_->open = std::move(open);
  shared_->node = std::move(node);
  shared_->interval = std::max(interval, milliseconds(1));
  shared_->wake = std::move(wake);
  std::thread([s = shared_] { s->run(); }).detach();
}

JobWatch::~JobWatch() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->cv.notify_all();
}

void JobWatch::handled() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    ++shared_->handled;
  }
  shared_->cv.notify_all();
}

}  // namespace poolrun::agent
