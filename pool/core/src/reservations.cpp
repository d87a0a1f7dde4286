// Reservations (reservations.hpp, docs/reservations.md): the rules of the pool's state that keep a
// reservation's nodes for its window, and the requests that lease them inside it.

#include <algorithm>

#include "lease_times.hpp"
#include "node_views.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/state.hpp"
#include "scheduler/pass_plan.hpp"
#include "scheduler/timeline.hpp"

namespace poolrun::pool {

bool Reservation::holds(std::string_view node) const {
  return std::binary_search(nodes.begin(), nodes.end(), node);
}

namespace {

std::string windowText(const Reservation& r) {
  return common::rfc3339(r.start) + " to " + common::rfc3339(r.end);
}

// Whether `request`, started at `at`, may hold GPUs of `r`'s nodes: its own reservation's inside
// the window; any other once the window has ended, or where it ends (its maximum duration) before
// the window starts.
bool mayUse(const Reservation& r, const LeaseRequest& request, TimePoint at) {
  if (request.reservation == r.name) return at >= r.start && at < r.end;
  if (at >= r.end) return true;
  return request.max_duration && addSaturating(at, *request.max_duration) <= r.start;
}

}  // namespace

void PoolState::reserve(Reservation r, TimePoint now) {
  auto bad = [&](const std::string& what) {
    return badInput("reservation " + common::printable(r.name) + ": " + what);
  };
  if (std::string p = accountNameProblem(r.name); !p.empty())
    throw badInput("reservation name '" + common::printable(r.name) + "': " + p);
  if (reservations_.count(r.name))
    throw bad("the name is taken (poolctl reservations lists them; poolctl unreserve frees it)");
  if (reservations_.size() >= kMaxReservations)
    throw bad("the pool keeps at most " + std::to_string(kMaxReservations) + " reservations");
  std::sort(r.nodes.begin(), r.nodes.end());
  r.nodes.erase(std::unique(r.nodes.begin(), r.nodes.end()), r.nodes.end());
  if (r.nodes.empty()) throw bad("no nodes: give the nodes it keeps (--nodes n[01-04])");
  for (const std::string& n : r.nodes)
    if (!nodes_.count(n))
      throw bad("node " + common::printable(n) + " is not in the pool (poolctl nodes lists them)");
  if (r.start < now - kReservationStartSlack)
    throw bad("it starts in the past (" + common::rfc3339(r.start) + ", now " + common::rfc3339(now) +
              "): give a start from now on");
  r.start = std::max(r.start, now);
  if (r.end <= r.start)
    throw bad("it ends (" + common::rfc3339(r.end) + ") before it starts: give a duration");
  if (r.end - r.start > kMaxReservationLength)
    throw bad("it lasts more than 366 days: give a shorter duration");
  if (r.users.size() > kMaxReservedUsers || r.accounts.size() > kMaxReservedUsers)
    throw bad("it names more than " + std::to_string(kMaxReservedUsers) + " users or accounts");
  for (const std::string& u : r.users) common::checkOwner(u, "reservation " + r.name + ": user");
  for (const std::string& a : r.accounts)
    if (std::string p = accountNameProblem(a); !p.empty())
      throw bad("account '" + common::printable(a) + "': " + p);
  for (const auto& [name, other] : reservations_) {
    if (other.end <= r.start || r.end <= other.start) continue;
    for (const std::string& n : r.nodes)
      if (other.holds(n))
        throw bad("node " + n + " is kept by reservation " + name + " from " + windowText(other) +
                  ", which this window overlaps: give other nodes or another time");
  }
  r.created = now;
  r.drained = false;
  dirty_.reservations.insert(r.name);
  loadReservation(std::move(r));
  replan_ = true;
}

void PoolState::loadReservation(Reservation r) {
  if (auto old = reservations_.find(r.name); old != reservations_.end()) indexReservation(old->second, false);
  indexReservation(r, true);
  reservations_[r.name] = std::move(r);
}

void PoolState::indexReservation(const Reservation& r, bool add) {
  for (const std::string& n : r.nodes) {
    std::vector<std::string>& names = reserved_on_[n];
    if (add) {
      names.push_back(r.name);
    } else {
      std::erase(names, r.name);
      if (names.empty()) reserved_on_.erase(n);
    }
  }
}

void PoolState::unreserve(const std::string& name) {
  auto it = reservations_.find(name);
  if (it == reservations_.end())
    throw Error(ErrorCode::kNotFound,
                "no reservation " + common::printable(name) + " (poolctl reservations lists them)");
  indexReservation(it->second, false);
  reservations_.erase(it);
  dirty_.reservations.insert(name);
  replan_ = true;
}

void PoolState::checkReservation(const LeaseRequest& request, TimePoint now) const {
  if (request.reservation.empty()) return;
  auto it = reservations_.find(request.reservation);
  if (it == reservations_.end() || it->second.end <= now)
    throw PoolError(PoolFailure::kNeverFits, ErrorCode::kBadInput,
                    "reservation '" + common::printable(request.reservation) +
                        "' does not exist or has ended (poolctl reservations lists them)");
  const Reservation& r = it->second;
  const bool mine = std::find(r.users.begin(), r.users.end(), request.owner) != r.users.end() ||
                    (!request.account.empty() &&
                     std::find(r.accounts.begin(), r.accounts.end(), request.account) != r.accounts.end());
  if (r.maintenance() || !mine)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "user " + request.owner + " may not lease reservation " + r.name +
                        (r.maintenance() ? " (a maintenance window: nobody leases it)"
                                         : " (it is for the users and accounts its administrator named)"));
  if (request.elastic() || request.shared())
    throw PoolError(PoolFailure::kOther, ErrorCode::kBadInput,
                    "reservation " + r.name +
                        ": an elastic lease or an MPS share cannot be placed in a "
                        "reservation; ask for a fixed number of whole GPUs or MIG instances");
}

void PoolState::dropReserved(std::vector<NodeView>& views, const LeaseRequest& request, TimePoint now) const {
  if (reservations_.empty()) return;
  std::erase_if(views, [&](const NodeView& v) {
    auto on = reserved_on_.find(v.node->name);
    if (on == reserved_on_.end()) return false;
    return std::any_of(on->second.begin(), on->second.end(), [&](const std::string& name) {
      return !mayUse(reservations_.find(name)->second, request, now);
    });
  });
}

// Every unit of a reservation's nodes is busy over its window, for every request that plans on
// the timeline (a request for the reservation is placed apart: scheduleReserved).
void PoolState::holdReservations(Timeline& timeline, TimePoint now) const {
  for (const auto& [name, r] : reservations_) {
    if (r.end <= now) continue;
    std::vector<GpuRef> units;
    for (const std::string& n : r.nodes)
      if (auto node = nodes_.find(n); node != nodes_.end())
        for (size_t i = 0; i < node->second.unitCount(); ++i) units.push_back(GpuRef{.node = n, .index = i});
    poolOrder(units);
    timeline.hold(units, std::max(r.start, now), r.end, nullptr);
  }
}

// A request for a reservation: before the window, planned at its start; inside it, placed on the
// reservation's nodes as they are free now (no promise of the pass covers them: the timeline holds
// them for everyone else), its lease ending with the window at the latest.
void PoolState::scheduleReserved(const QueueEntry& entry, PassPlan& pass, TimePoint now) {
  const LeaseRequest& r = entry.request;
  auto it = reservations_.find(r.reservation);
  if (it == reservations_.end() || it->second.end <= now) {
    QueueEntry& e = queue_.at(entry.ticket);
    if (e.status == QueueEntry::Status::kWaiting) --waiting_count_;
    e.status = QueueEntry::Status::kFailed;
    e.reason = "reservation " + r.reservation + " ended (or was removed) before the request could start";
    dirty_.queue.insert(e.ticket);
    return;
  }
  const Reservation& res = it->second;
  if (now < res.start) {
    planned_[entry.ticket] = res.start;
    return;
  }
  std::vector<NodeView> views = nodeViews(slots(), r, unheld<Slot>, false, &slot_cache_.unheld);
  std::erase_if(views, [&](const NodeView& v) { return !res.holds(v.node->name); });
  std::optional<std::vector<GpuRef>> gpus = placeFor(views, r);
  if (!gpus) return;
  Lease granted = grantQueued(entry, *gpus, now);
  Lease& lease = leases_.at(granted.id);
  lease.max_end = std::min(lease.max_end.value_or(kNever), res.end);
  lease.expires = std::min(lease.expires, *lease.max_end);
  dirty_.leases.insert(lease.id);
  countGranted(lease, pass.book);
  if (pass.timeline) pass.timeline->hold(lease.gpus, now, leaseEnd(lease, preempt_), &lease);
}

void PoolState::tickReservations(TimePoint now) {
  std::vector<std::string> ended;
  for (auto& [name, r] : reservations_) {
    if (r.end <= now) {
      ended.push_back(name);
      continue;
    }
    if (r.maintenance() && !r.drained && r.start <= now) {
      for (const std::string& n : r.nodes)
        if (auto node = nodes_.find(n); node != nodes_.end() && node->second.state == NodeState::kUp) {
          setNodeState(n, NodeState::kDraining);
          node_events_.push_back(
              {NodeEvent::Kind::kMaintenance, n, 0,
               "reservation " + name + ": a maintenance window until " + common::rfc3339(r.end)});
        }
      r.drained = true;
      dirty_.reservations.insert(name);
    }
  }
  for (const std::string& name : ended) {
    indexReservation(reservations_.at(name), false);
    reservations_.erase(name);
    dirty_.reservations.insert(name);
    replan_ = true;
  }
}

}  // namespace poolrun::pool
