// poolctl fairshare (sshare's view of the account tree) and poolctl queue --explain (each factor of
// each waiting request's multi-factor priority): docs/fairshare.md.

#include <iomanip>
#include <sstream>

#include "poolctl.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/usage_json.hpp"

namespace poolrun::pool::ctl {

namespace {

// "7 days", "36 hours", "90 minutes", "45 s": a duration as a person reads it.
std::string durationText(std::chrono::seconds d) {
  const int64_t s = d.count();
  auto count = [](int64_t n, const char* unit) {
    return std::to_string(n) + " " + unit + (n == 1 ? "" : "s");
  };
  if (s % 86'400 == 0) return count(s / 86'400, "day");
  if (s % 3'600 == 0) return count(s / 3'600, "hour");
  if (s % 60 == 0) return count(s / 60, "minute");
  return count(s, "second");
}

// A weight as the accounts file gives it: whole numbers without a fraction.
std::string weightText(double w) {
  std::ostringstream out;
  out << std::setprecision(12) << w;
  return out.str();
}

std::string weightsLine(const FairShareReport& r) {
  const PriorityWeights& w = r.weights;
  return "priority = " + weightText(w.priority) + " x priority + " + weightText(w.fairshare) +
         " x fairshare + " + weightText(w.age) + " x age (1 after " + durationText(w.max_age) + ") + " +
         weightText(w.size) + " x size (the pool's GPUs)";
}

}  // namespace

int fairshareCommand(const Command& c) {
  if (!c.args.empty())
    throw badInput("fairshare takes no arguments (got '" + common::printable(c.args[0]) +
                   "'); --json for JSON");
  const FairShareReport r = c.pool().fairShare();
  if (c.json) {
    std::cout << toJson(r).dump(2) << "\n";
    return 0;
  }
  if (!r.accounts) {
    std::cout << "no accounts (poold --accounts FILE sets them): the queue is ordered by priority, then "
                 "arrival\n";
    return 0;
  }
  std::cout << "usage halves every " << durationText(r.half_life) << "; " << weightsLine(r) << "\n";
  if (!r.default_account.empty())
    std::cout << "users of no account are charged to " << r.default_account << "\n";
  std::cout << std::left << std::setw(28) << "ACCOUNT/USER" << std::right << std::setw(8) << "SHARES"
            << std::setw(12) << "NORM SHARES" << std::setw(12) << "USAGE GPU-h" << std::setw(12)
            << "NORM USAGE" << std::setw(12) << "EFFECTIVE" << std::setw(11) << "FAIRSHARE"
            << "\n";
  for (const FairShareRow& row : r.rows) {
    const int indent = 2 * row.depth;  // a user one level under its account
    std::string name = std::string(static_cast<size_t>(std::min(indent, 40)), ' ') +
                       (row.user.empty() ? row.account : row.user);
    if (name.size() > 27) name = name.substr(0, 26) + "~";
    std::cout << std::left << std::setw(28) << name << std::right << std::setw(8) << row.raw_shares
              << std::setw(12) << decimal(row.norm_shares, 4) << std::setw(12)
              << decimal(row.raw_usage / 3600, 2) << std::setw(12) << decimal(row.norm_usage, 4)
              << std::setw(12) << decimal(row.effective_usage, 4) << std::setw(11) << decimal(row.factor, 4)
              << "\n";
  }
  return 0;
}

void printQueueFactors(const std::vector<QueueInfo>& queue, PoolControl& pool) {
  bool any = false;
  for (const QueueInfo& q : queue) any = any || q.factors.has_value();
  if (!any) {
    std::cout << "\nthe pool has no accounts (poold --accounts): requests wait in order of priority, then "
                 "arrival\n";
    return;
  }
  const FairShareReport r = pool.fairShare();
  std::cout << "\n" << weightsLine(r) << "\n";
  const PriorityWeights& w = r.weights;
  for (const QueueInfo& q : queue) {
    std::cout << "ticket " << q.ticket << " (" << q.owner << ", " << (q.account.empty() ? "-" : q.account)
              << "): ";
    if (!q.factors) {
      std::cout << "no factors yet (its user is new to the account: the next pass counts it)\n";
      continue;
    }
    const PriorityFactors& f = *q.factors;
    std::cout << decimal(f.score, 2) << " = priority " << weightText(f.priority) << " x "
              << weightText(w.priority) << " + fairshare " << decimal(f.fairshare, 4) << " x "
              << weightText(w.fairshare) << " + age " << decimal(f.age, 4) << " x " << weightText(w.age)
              << " + size " << decimal(f.size, 4) << " x " << weightText(w.size) << "\n";
  }
}

}  // namespace poolrun::pool::ctl
