// PoolState's leases and queue entries: a grant, a submit (granted now, queued or refused), a poll,
// a renewal, a shrink, a release and a tick's expiry.

#include <algorithm>

#include "lease_times.hpp"
#include "node_views.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/state.hpp"
#include "request_text.hpp"
#include "scheduler/pass_plan.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;

PoolError gone(const std::string& id) {
  return PoolError(PoolFailure::kGone, ErrorCode::kNotFound,
                   "lease " + id + " is gone (expired, released or never granted); acquire a new one");
}

}  // namespace

Lease PoolState::grant(const LeaseRequest& request, std::vector<GpuRef> gpus, TimePoint now) {
  Lease lease;
  do lease.id = newLeaseId();
  while (leases_.count(lease.id));
  lease.owner = request.owner;
  lease.account = request.account;
  lease.job_name = request.job_name;
  lease.gpus = std::move(gpus);
  lease.priority = request.priority;
  lease.created = now;
  lease.ttl = request.ttl;
  lease.no_reclaim = request.no_reclaim;
  lease.preemptible = request.preemptible;
  lease.preempt_grace = preempt_.grace;
  lease.resized = now;
  if (request.elastic()) lease.elastic = request;
  if (request.max_duration) lease.max_end = addSaturating(now, *request.max_duration);
  lease.expires = std::min(addSaturating(now, request.ttl), lease.max_end.value_or(kNever));
  for (GpuRef& g : lease.gpus) {
    if (g.share) {
      addSharer(g.node, g.index, lease.id);
      continue;
    }
    if (const topo::MigInstance* m = nodes_.at(g.node).migInstance(g.index)) g.mig = m->uuid;
    std::string& h = occupancy(g.node).holder.at(g.index);
    if (!h.empty())
      throw Error(ErrorCode::kInternal,
                  "placement chose " + g.node + ":" + std::to_string(g.index) + ", held by " + h);
    h = lease.id;
    heldChanged(g.node, true);
  }
  leases_[lease.id] = lease;
  if (lease.elastic) elastic_leases_.insert(lease.id);
  last_busy_[lease.id] = now;
  lease_events_.push_back({LeaseEvent::Kind::kGranted, lease, {}});
  accountLease(lease, now);
  ++leases_granted_;
  dirty_.counters = true;
  dirty_.leases.insert(lease.id);
  dirty_.new_leases.insert(lease.id);
  return lease;
}

void PoolState::dropLease(const std::string& id, TimePoint now, LeaseEvent::Kind end, std::string reason) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  // Counted up to when the pool ended it: an expired lease's GPUs were held until the pool took them
  // back (and the counters, which count running leases up to each scrape, never go back).
  usage_.ended(id,
               it->second.preempt_at               ? "preempted"
               : end == LeaseEvent::Kind::kExpired ? "expired"
                                                   : "released",
               now, dirty_);
  lease_events_.push_back({end, it->second, std::move(reason)});
  replan_ = true;
  for (const GpuRef& g : it->second.gpus) {
    if (g.share) {
      removeSharer(g.node, g.index, id);
      continue;
    }
    auto o = occupancy_.find(g.node);
    if (o != occupancy_.end() && g.index < o->second.holder.size() && o->second.holder[g.index] == id) {
      o->second.holder[g.index].clear();
      heldChanged(g.node, false);
    }
  }
  leases_.erase(it);
  elastic_leases_.erase(id);
  last_busy_.erase(id);
  reclaim_at_.erase(id);
  dirty_.leases.insert(id);
  dirty_.new_leases.erase(id);
  dirty_.resized.erase(id);
}

void PoolState::endedByPool(const std::string& id, std::string why) {
  if (ended_by_pool_.size() >= 10000) ended_by_pool_.erase(ended_by_pool_.begin());
  ended_by_pool_[id] = std::move(why);
}

Lease PoolState::grantQueued(const QueueEntry& entry, const std::vector<GpuRef>& gpus, TimePoint now) {
  Lease lease = grant(entry.request, gpus, now);
  planned_[entry.ticket] = now;
  QueueEntry& e = queue_.at(entry.ticket);
  if (e.status == QueueEntry::Status::kWaiting) --waiting_count_;
  e.status = QueueEntry::Status::kGranted;
  e.lease_id = lease.id;
  dirty_.queue.insert(e.ticket);
  wait_seconds_.push_back(std::chrono::duration<double>(now - e.enqueued).count());
  return lease;
}

SubmitResult PoolState::submit(LeaseRequest request, TimePoint now, bool queue) {
  validateRequest(request);
  chargeAccount(request);
  checkReservation(request, now);
  if (const Quota* q = quotas_.of(request.owner); q && q->limit && request.gpus > *q->limit)
    throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                    "a request for " + std::to_string(request.gpus) + " GPUs can never be satisfied: " +
                        (q->kind == Quota::Kind::kGroup ? "group " + q->name + " of " + request.owner
                                                        : "owner " + request.owner) +
                        " may hold at most " + std::to_string(*q->limit) +
                        " GPUs (its quota's limit); ask for fewer, or ask an administrator to raise it");
  QueueEntry entry;
  entry.ticket = next_ticket_++;
  entry.request = request;
  entry.enqueued = now;
  entry.heartbeat = now;
  const int64_t ticket = entry.ticket;
  enqueue(std::move(entry));
  dirty_.counters = true;
  bool last = false;  // planned behind every waiting request, against the last pass's plan
  if (PassPlan* plan = keptPlanFor(request, now)) {
    const uint64_t preempted = leases_preempted_, resized = leases_resized_;
    std::optional<int> waiting;
    std::vector<std::string> grantedElastic;
    plan->plainNodeOk.clear();  // nodes may have changed state since
    scheduleQueue({&queue_.at(ticket)}, *plan, waiting, grantedElastic, now);
    if (queue_.at(ticket).status == QueueEntry::Status::kWaiting && preempted == leases_preempted_ &&
        resized == leases_resized_) {
      plan->latest_enqueued = now;
      plan->lowest_priority = std::min(plan->lowest_priority, request.priority);
      if (std::optional<PriorityFactors> f = factorsOf(request, now))
        plan->lowest_score = std::min(plan->lowest_score, f->score);
      last = true;
    } else {
      kept_plan_.plan.reset();  // a grant or a preemption: lease ends the plan does not track
    }
  } else {
    schedule(now);
  }

  QueueEntry& e = queue_.at(ticket);
  if (e.status == QueueEntry::Status::kFailed) {
    dequeue(queue_.find(ticket));
    dirty_.queue.erase(ticket);
    size_t usable = 0;
    for (const NodeView& v : request.shared()
                                 ? shareViews(
                                       request, [](size_t, size_t) { return true; }, true, std::nullopt)
                                 : nodeViews(slots(), request, allFree<Slot>, true))
      usable += v.usable.size();
    std::string shape = shapeText(request);
    const int inMig = status().gpus_mig;
    if (request.shared())
      throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                      "a request for " + unitsText(request) + shape +
                          " can never be satisfied: the pool has " + std::to_string(usable) +
                          " GPUs that could take such a share (not in MIG mode" +
                          (request.share_memory_bytes > 0 ? ", with that much memory" : "") +
                          ", one share of the job per GPU); ask for fewer ranks or a smaller share");
    if (request.mig())
      throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                      "a request for " + unitsText(request) + shape +
                          " can never be satisfied: the pool has " + std::to_string(usable) +
                          " usable MIG instances that match it (" +
                          std::to_string(status().mig_free + status().mig_leased) +
                          " MIG instances in all; `poolctl nodes` lists them with their profiles)" +
                          "; ask for another profile, PROFILE+ for larger ones, or fewer");
    throw PoolError(
        PoolFailure::kNeverFits, ErrorCode::kUnsupported,
        "a request for " + std::to_string(request.gpus) + " GPUs" + shape +
            " can never be satisfied: the pool has " + std::to_string(usable) + " usable GPUs that match it" +
            (inMig > 0 ? " (and " + std::to_string(inMig) + " in MIG mode, which no whole-GPU request takes)"
                       : "") +
            "; ask for fewer or relax the constraints");
  }
  SubmitResult result;
  if (e.status == QueueEntry::Status::kGranted) {
    result.lease = leases_.at(e.lease_id);
    dequeue(queue_.find(ticket));
    dirty_.queue.erase(ticket);
    return result;
  }
  if (last) {
    result.position = static_cast<int>(waiting_count_);
  } else {
    std::vector<const QueueEntry*> order = waitingInOrder();
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i]->ticket == ticket) result.position = static_cast<int>(i + 1);
  }
  if (!queue) {
    dequeue(queue_.find(ticket));
    dirty_.queue.erase(ticket);
    replan_ = true;  // what the pass promised it no longer holds
    return result;
  }
  result.ticket = ticket;
  dirty_.queue.insert(ticket);
  return result;
}

PollResult PoolState::poll(int64_t ticket, TimePoint now) {
  auto it = queue_.find(ticket);
  if (it == queue_.end())
    throw PoolError(PoolFailure::kGone, ErrorCode::kNotFound,
                    "queue ticket " + std::to_string(ticket) + " is unknown (withdrawn, or dropped after " +
                        "its client went quiet); submit the request again");
  QueueEntry& e = it->second;
  PollResult r;
  r.status = e.status;
  if (e.status == QueueEntry::Status::kWaiting) {
    if (now - e.heartbeat >= seconds(1)) dirty_.queue.insert(ticket);
    e.heartbeat = now;
    std::vector<const QueueEntry*> order = waitingInOrder();
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i]->ticket == ticket) r.position = static_cast<int>(i + 1);
    r.wait_reason = waitReason(ticket);
    if (std::optional<TimePoint> planned = plannedStart(ticket); planned && *planned != kNever)
      r.planned_start = planned;
    return r;
  }
  if (e.status == QueueEntry::Status::kGranted) {
    auto l = leases_.find(e.lease_id);
    if (l == leases_.end()) {
      r.status = QueueEntry::Status::kFailed;
      r.reason =
          "the lease granted to queue ticket " + std::to_string(ticket) + " expired before it was collected";
    } else {
      r.lease = l->second;
    }
  } else {
    r.reason = e.reason;
  }
  dequeue(it);
  dirty_.queue.insert(ticket);
  return r;
}

void PoolState::cancel(int64_t ticket, TimePoint now) {
  auto it = queue_.find(ticket);
  if (it == queue_.end()) return;
  if (it->second.status == QueueEntry::Status::kGranted)
    dropLease(it->second.lease_id, now, LeaseEvent::Kind::kReleased, "its queued request was withdrawn");
  dequeue(it);
  dirty_.queue.insert(ticket);
  schedule(now);
}

Lease PoolState::renew(const std::string& id, const std::string& owner, bool admin, TimePoint now) {
  auto it = leases_.find(id);
  if (it == leases_.end()) {
    if (auto r = ended_by_pool_.find(id); r != ended_by_pool_.end())
      throw PoolError(PoolFailure::kGone, ErrorCode::kNotFound,
                      "lease " + id + " was " + r->second + "; acquire a new one");
    throw gone(id);
  }
  Lease& lease = it->second;
  if (lease.owner != owner && !admin)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + owner + " may not renew lease " + id + " of " + lease.owner +
                        " (only its owner or an administrator may)");
  TimePoint end = leaseEnd(lease, preempt_);
  if (now >= lease.expires || now >= end) {
    dropLease(id, now, LeaseEvent::Kind::kExpired);
    schedule(now);
    throw gone(id);
  }
  lease.expires = std::min(addSaturating(now, lease.ttl), end);
  dirty_.leases.insert(id);
  return withLiveView(lease, now);
}

Lease PoolState::shrink(const std::string& id, const std::string& owner, bool admin, TimePoint now) {
  if (auto it = leases_.find(id); it != leases_.end() && it->second.owner != owner && !admin)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + owner + " may not shrink lease " + id + " of " + it->second.owner +
                        " (only its owner or an administrator may)");
  Lease lease = renew(id, owner, admin, now);  // the same checks, and a holder that shrinks is alive
  Lease& held = leases_.at(id);
  if (!held.shrink_at) return lease;
  applyShrink(held, now, held.shrink_reason + ", given back by its holder");
  schedule(now);
  return withLiveView(leases_.at(id), now);
}

bool PoolState::release(const std::string& id, const std::string& owner, bool admin, TimePoint now) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return false;
  if (it->second.owner != owner && !admin)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + owner + " may not release lease " + id + " of " + it->second.owner +
                        " (only its owner or an administrator may)");
  dropLease(id, now);
  schedule(now);
  return true;
}

void PoolState::tick(TimePoint now, std::chrono::seconds stale_after) {
  view_time_ = std::max(view_time_, now);
  updateLiveness(now);
  reclaimIdle(now);
  forgetRequests(now);
  tickReservations(now);
  std::vector<std::string> expired, preempted;
  for (auto& [id, lease] : leases_) {
    if (lease.shrink_at && shrinkEnd(lease, preempt_) <= now && lease.expires > now)
      applyShrink(lease, now,
                  lease.shrink_reason + ", taken back " + std::to_string(preempt_.kill_margin.count()) +
                      " s after the deadline (its holder had not given them back)");
    if (lease.preempt_at && leaseEnd(lease, preempt_) <= now)
      preempted.push_back(id);
    else if (lease.expires <= now)
      expired.push_back(id);
  }
  for (const std::string& id : expired) dropLease(id, now, LeaseEvent::Kind::kExpired);
  for (const std::string& id : preempted) {
    std::string why = leases_.at(id).preempt_reason + ", and its holder had not released it " +
                      std::to_string(preempt_.kill_margin.count()) + " s after the deadline";
    dropLease(id, now, LeaseEvent::Kind::kExpired, why);
    endedByPool(id, std::move(why));
  }
  advanceJobs(now);
  std::vector<int64_t> stale;
  for (const auto& [ticket, e] : queue_)
    if (now - e.heartbeat > stale_after) stale.push_back(ticket);
  for (int64_t ticket : stale) {
    if (queue_.at(ticket).status == QueueEntry::Status::kGranted)
      dropLease(queue_.at(ticket).lease_id, now, LeaseEvent::Kind::kExpired,
                "its queued client stopped polling");
    dequeue(queue_.find(ticket));
    dirty_.queue.insert(ticket);
    replan_ = true;
  }
  if (replan_ || now - last_pass_ >= kReplanEvery || now < last_pass_) schedule(now);
  collectJobGrants(now);
}

}  // namespace poolrun::pool
