#include "poolrun/pool/queue_wait.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace poolrun::pool {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<int> g_caught{0};
std::atomic<bool> g_acted{false};
std::atomic<bool> g_active{false};
struct sigaction g_previous[sizeof kSignals / sizeof kSignals[0]];

extern "C" void onSignal(int sig) {
  int none = 0;
  g_caught.compare_exchange_strong(none, sig);
}

}  // namespace

std::string formatElapsed(std::chrono::seconds d) {
  long long s = std::max<long long>(d.count(), 0);
  long long days = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;
  char buf[48];
  if (days > 0)
    std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", days, h, m, sec);
  else if (h > 0)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", h, m, sec);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", m, sec);
  return buf;
}

std::string formatLocalTime(std::chrono::system_clock::time_point t,
                            std::chrono::system_clock::time_point now) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t), nt = std::chrono::system_clock::to_time_t(now);
  std::tm at{}, today{};
  localtime_r(&tt, &at);
  localtime_r(&nt, &today);
  bool sameDay = at.tm_year == today.tm_year && at.tm_yday == today.tm_yday;
  char buf[64];
  std::strftime(buf, sizeof buf, sameDay ? "%H:%M:%S" : "%Y-%m-%dT%H:%M:%S", &at);
  return buf;
}

QueueInterruption::QueueInterruption() {
  g_caught = 0;
  g_acted = false;
  g_active = true;
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    sigaction(kSignals[i], nullptr, &g_previous[i]);
    // SIGINT and SIGTERM withdraw the request whatever the process inherited: a script's `poolrun
    // ... &` starts with SIGINT ignored, and its Ctrl-C or kill must not leave a request queued to
    // start minutes later (the running phase forwards them alike). SIGHUP ignored stays ignored:
    // that is nohup's very purpose.
    if (kSignals[i] != SIGHUP || g_previous[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &sa, nullptr);
  }
}

QueueInterruption::~QueueInterruption() {
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_active = false;
  int sig = g_caught.exchange(0);
  if (sig != 0 && !g_acted) raise(sig);
}

int pendingInterrupt() {
  return g_active ? g_caught.load() : 0;
}

PoolError interrupted(const std::string& did) {
  int sig = g_caught.load();
  g_acted = true;
  const char* name = sigabbrev_np(sig);
  return PoolError(
      PoolFailure::kInterrupted, ErrorCode::kIo,
      did + " on " + (name != nullptr ? "SIG" + std::string(name) : "signal " + std::to_string(sig)), 0, sig);
}

bool ProgressPacer::due(const QueueProgress& p, std::chrono::steady_clock::time_point now) {
  if (last_ && last_->sameAs(p) && now - last_at_ < every_) return false;
  last_ = p;
  last_at_ = now;
  return true;
}

std::string formatQueueProgress(const QueueProgress& p, std::chrono::system_clock::time_point now) {
  std::string out = "queued at position " + std::to_string(p.position) + " (ticket " +
                    std::to_string(p.ticket) + "), waited " + formatElapsed(p.waited);
  if (!p.reason.empty()) out += ": " + p.reason;
  if (p.planned_start)
    out += "; planned start " + formatLocalTime(*p.planned_start, now) + " (in " +
           formatElapsed(std::chrono::duration_cast<std::chrono::seconds>(*p.planned_start - now)) + ")";
  return out;
}

PoolError queueTimeout(const LeaseRequest& r, int position, const std::string& pool,
                       const std::string& reason) {
  return PoolError(PoolFailure::kTimeout, ErrorCode::kIo,
                   "a request for " + std::to_string(r.gpus) + " GPUs did not fit within --wait " +
                       std::to_string(r.wait ? r.wait->count() : 0) + "s (it was number " +
                       std::to_string(position) + " in the queue of " + pool +
                       (reason.empty() ? std::string() : ": " + reason) + "); wait longer or ask for fewer",
                   position);
}

}  // namespace poolrun::pool
