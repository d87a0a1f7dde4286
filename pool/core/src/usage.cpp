#include "poolrun/pool/usage.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <tuple>
#include <utility>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

namespace {

constexpr auto kDay = std::chrono::hours(24);

double secondsOf(TimePoint::duration d) {
  return std::chrono::duration<double>(d).count();
}

TimePoint dayOf(TimePoint t) {
  return TimePoint(std::chrono::floor<std::chrono::days>(t.time_since_epoch()));
}

}  // namespace

std::string toString(UsageRecord::Kind kind) {
  switch (kind) {
    case UsageRecord::Kind::kLease:
      return "lease";
    case UsageRecord::Kind::kDay:
      return "day";
    case UsageRecord::Kind::kTotal:
      return "total";
  }
  return "lease";
}

std::optional<UsageRecord::Kind> usageKindOf(std::string_view text) {
  for (auto k : {UsageRecord::Kind::kLease, UsageRecord::Kind::kDay, UsageRecord::Kind::kTotal})
    if (toString(k) == text) return k;
  return std::nullopt;
}

std::string toString(UsageBy by) {
  switch (by) {
    case UsageBy::kOwner:
      return "owner";
    case UsageBy::kAccount:
      return "account";
    case UsageBy::kJob:
      return "job";
    case UsageBy::kNode:
      return "node";
    case UsageBy::kGpuModel:
      return "gpu-model";
  }
  return "owner";
}

std::optional<UsageBy> usageByOf(std::string_view text) {
  for (auto b : {UsageBy::kOwner, UsageBy::kAccount, UsageBy::kJob, UsageBy::kNode, UsageBy::kGpuModel})
    if (toString(b) == text) return b;
  return std::nullopt;
}

uint32_t UsageLedger::nameOf(std::string_view t) {
  auto [it, fresh] = name_ids_.try_emplace(std::string(t), static_cast<uint32_t>(names_.size()));
  if (fresh) names_.emplace_back(t);
  return it->second;
}

UsageRecord UsageLedger::record(const Row& r) const {
  UsageRecord out;
  out.id = r.id;
  out.kind = r.kind;
  out.lease = r.lease;
  out.job = r.job;
  out.owner = text(r.owner);
  out.account = text(r.account);
  out.node = text(r.node);
  out.model = text(r.model);
  out.start = r.start;
  out.end = r.end;
  out.running = r.running;
  out.gpus = r.gpus;
  out.allocated_s = r.allocated_s;
  out.used_s = r.used_s;
  out.idle_s = r.idle_s;
  out.energy_j = r.energy_j;
  out.ended = text(r.ended);
  return out;
}

const UsageLedger::Row* UsageLedger::row(uint64_t id) const {
  auto it =
      std::lower_bound(rows_.begin(), rows_.end(), id, [](const Row& r, uint64_t v) { return r.id < v; });
  if (it == rows_.end() || it->id != id || gone_[static_cast<size_t>(it - rows_.begin())]) return nullptr;
  return &*it;
}

UsageLedger::Row* UsageLedger::row(uint64_t id) {
  return const_cast<Row*>(std::as_const(*this).row(id));
}

std::optional<UsageRecord> UsageLedger::find(uint64_t id) const {
  const Row* r = row(id);
  return r ? std::optional<UsageRecord>(record(*r)) : std::nullopt;
}

uint64_t UsageLedger::add(Row r, Dirty& dirty) {
  r.id = next_id_++;
  count(r);
  if (r.kind == UsageRecord::Kind::kTotal) total_rows_[text(r.owner)] = r.id;
  if (r.running) open_[r.lease][r.node] = r.id;
  if (r.kind == UsageRecord::Kind::kLease && !r.job.empty()) by_job_[r.job].push_back(r.id);
  rows_.push_back(std::move(r));
  gone_.push_back(false);
  dirty.usage.insert(rows_.back().id);
  dirty.counters = true;  // the next id
  return rows_.back().id;
}

void UsageLedger::remove(uint64_t id, Dirty& dirty) {
  auto it =
      std::lower_bound(rows_.begin(), rows_.end(), id, [](const Row& r, uint64_t v) { return r.id < v; });
  const size_t i = static_cast<size_t>(it - rows_.begin());
  if (it == rows_.end() || it->id != id || gone_[i]) return;
  gone_[i] = true;
  ++dead_;
  dirty.usage.insert(id);
}

void UsageLedger::accrue(Row& r, TimePoint now) {
  if (!r.running || now <= r.end) return;
  const double gpuSeconds = r.gpus * secondsOf(now - r.end);
  r.allocated_s += gpuSeconds;
  totals_[text(r.owner)].allocated_s += gpuSeconds;
  decay(r, gpuSeconds, r.end, now);
  r.end = now;
}

void UsageLedger::holds(const Lease& lease, const std::string& account, const std::vector<Holding>& holdings,
                        TimePoint now, Dirty& dirty) {
  std::string job;
  if (auto open = open_.find(lease.id); open != open_.end())
    for (const auto& [node, id] : open->second) {
      Row& r = *row(id);
      accrue(r, now);
      r.gpus = 0;
      job = r.job;
      dirty.usage.insert(id);
    }
  for (const Holding& h : holdings) {
    const uint32_t node = nameOf(h.node);
    auto& rows = open_[lease.id];
    if (auto same = rows.find(node); same != rows.end()) {
      row(same->second)->gpus += h.gpus;  // a node listed twice holds both parts
      continue;
    }
    Row r;
    r.lease = lease.id;
    r.job = job;
    r.owner = nameOf(lease.owner);
    r.account = nameOf(account);
    r.node = node;
    r.model = nameOf(h.model);
    r.start = r.end = now;
    r.running = true;
    r.gpus = h.gpus;
    add(std::move(r), dirty);
  }
}

void UsageLedger::setJob(const std::string& lease, const std::string& job, Dirty& dirty) {
  auto it = open_.find(lease);
  if (it == open_.end()) return;
  for (const auto& [node, id] : it->second) {
    row(id)->job = job;
    dirty.usage.insert(id);
    if (!job.empty()) by_job_[job].push_back(id);
  }
}

void UsageLedger::ended(const std::string& lease, std::string_view how, TimePoint at, Dirty& dirty) {
  auto it = open_.find(lease);
  if (it == open_.end()) return;
  const uint32_t ended = nameOf(how);
  for (const auto& [node, id] : it->second) {
    Row& r = *row(id);
    accrue(r, at);
    if (at < r.end) {  // counted past its end (a checkpoint after it expired): taken back
      const double over = r.gpus * secondsOf(r.end - std::max(at, r.start));
      r.allocated_s = std::max(0.0, r.allocated_s - over);
      totals_[text(r.owner)].allocated_s -= over;
      decay(r, -over, std::max(at, r.start), r.end);
      r.end = std::max(at, r.start);
    }
    r.running = false;
    r.ended = ended;
    dirty.usage.insert(id);
  }
  open_.erase(it);
}

void UsageLedger::sample(const std::string& lease, const std::string& node, double share, const GpuSpan& span,
                         TimePoint now) {
  auto it = open_.find(lease);
  auto name = name_ids_.find(node);
  if (it == open_.end() || name == name_ids_.end()) return;
  if (auto at = it->second.find(name->second); at != it->second.end()) {
    Row& r = *row(at->second);
    accrue(r, now);
    UsageTotals& owner = totals_[text(r.owner)];
    if (span.utilization) {
      r.used_s += *span.utilization * span.seconds * share;
      owner.used_s += *span.utilization * span.seconds * share;
      if (*span.utilization < span.idle_below) {
        r.idle_s += span.seconds * share;
        owner.idle_s += span.seconds * share;
      }
    }
    if (span.energy_j) {
      r.energy_j += *span.energy_j * share;
      owner.energy_j += *span.energy_j * share;
    }
  }
}

void UsageLedger::checkpoint(TimePoint now, const UsageOptions& options, Dirty& dirty) {
  for (const auto& [lease, rows] : open_)
    for (const auto& [node, id] : rows) {
      accrue(*row(id), now);
      dirty.usage.insert(id);
    }
  // Days and retention are days' business: their walk of every row is done once an hour (and
  // at once past the most rows).
  if (now - last_fold_ < std::chrono::hours(1) && now >= last_fold_ && size() <= options.max_rows) return;
  last_fold_ = now;
  fold(now - options.detail, options.max_rows, dirty);
  forget(now - options.retention, dirty);
  pack();
}

void UsageLedger::closeLost(const std::set<std::string, std::less<>>& leases, Dirty& dirty) {
  const uint32_t lost = nameOf("lost");
  for (auto it = open_.begin(); it != open_.end();) {
    if (leases.count(it->first)) {
      ++it;
      continue;
    }
    for (const auto& [node, id] : it->second) {
      Row& r = *row(id);
      r.running = false;
      r.ended = lost;
      dirty.usage.insert(id);
    }
    it = open_.erase(it);
  }
}

// Ended lease rows that ended before `before` (and, past `maxRows`, the oldest others) become parts
// of a row per day, owner, account, node and GPU model, each day taking its share of the row's time.
void UsageLedger::fold(TimePoint before, size_t maxRows, Dirty& dirty) {
  size_t excess = size() > maxRows ? size() - maxRows * 9 / 10 : 0;
  // A day's row has no node: with one per node, 12,500 nodes would make days as many as leases.
  using DayKey = std::tuple<TimePoint, uint32_t, uint32_t, uint32_t>;
  std::map<DayKey, uint64_t> days;
  bool indexed = false;
  std::vector<uint64_t> folded;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    if (gone_[i] || r.kind != UsageRecord::Kind::kLease || r.running) continue;
    const bool old = r.end < before;
    if (!old && excess == 0) continue;
    if (!old) --excess;
    if (!indexed) {
      for (size_t k = 0; k < rows_.size(); ++k)
        if (!gone_[k] && rows_[k].kind == UsageRecord::Kind::kDay)
          days[{rows_[k].start, rows_[k].owner, rows_[k].account, rows_[k].model}] = rows_[k].id;
      indexed = true;
    }
    folded.push_back(r.id);
  }
  for (uint64_t id : folded) {
    const Row r = *row(id);
    const double length = secondsOf(r.end - r.start);
    for (TimePoint day = dayOf(r.start); day <= r.end; day += kDay) {
      const double overlap = secondsOf(std::min(r.end, day + kDay) - std::max(r.start, day));
      const double f = length > 0 ? overlap / length : 1.0;
      if (length > 0 && overlap <= 0) continue;
      auto [at, fresh] = days.try_emplace({day, r.owner, r.account, r.model}, 0);
      if (fresh) {
        Row d;
        d.kind = UsageRecord::Kind::kDay;
        d.owner = r.owner;
        d.account = r.account;
        d.model = r.model;
        d.start = day;
        d.end = day + kDay;
        at->second = add(std::move(d), dirty);
      }
      Row& d = *row(at->second);
      d.allocated_s += r.allocated_s * f;
      d.used_s += r.used_s * f;
      d.idle_s += r.idle_s * f;
      d.energy_j += r.energy_j * f;
      dirty.usage.insert(d.id);
      if (length <= 0) break;
    }
    remove(id, dirty);  // its figures moved to its days: the owner's sum is unchanged
  }
}

// Rows that ended before `before` are forgotten; their figures stay in their owner's total row.
void UsageLedger::forget(TimePoint before, Dirty& dirty) {
  std::vector<uint64_t> old;
  for (size_t i = 0; i < rows_.size(); ++i)
    if (!gone_[i] && rows_[i].kind != UsageRecord::Kind::kTotal && !rows_[i].running && rows_[i].end < before)
      old.push_back(rows_[i].id);
  for (uint64_t id : old) {
    const Row r = *row(id);
    auto t = total_rows_.find(text(r.owner));
    if (t == total_rows_.end()) {
      Row total;
      total.kind = UsageRecord::Kind::kTotal;
      total.owner = r.owner;
      t = total_rows_.emplace(text(r.owner), add(std::move(total), dirty)).first;
    }
    Row& total = *row(t->second);
    total.allocated_s += r.allocated_s;
    total.used_s += r.used_s;
    total.idle_s += r.idle_s;
    total.energy_j += r.energy_j;
    dirty.usage.insert(total.id);
    remove(id, dirty);  // its allocated seconds moved to the total: the owner's sum is unchanged
  }
}

void UsageLedger::pack() {
  if (dead_ == 0 || dead_ < rows_.size() / 4) return;
  size_t out = 0;
  for (size_t i = 0; i < rows_.size(); ++i)
    if (!gone_[i]) {
      if (out != i) rows_[out] = std::move(rows_[i]);  // a string moved onto itself is emptied
      ++out;
    }
  rows_.resize(out);
  gone_.assign(out, false);
  dead_ = 0;
  by_job_.clear();
  for (const Row& r : rows_)
    if (r.kind == UsageRecord::Kind::kLease && !r.job.empty()) by_job_[r.job].push_back(r.id);
}

std::vector<UsageTotals> UsageLedger::report(const UsageQuery& query, TimePoint now) const {
  std::unordered_map<std::string_view, UsageTotals> by;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    if (gone_[i] || r.kind == UsageRecord::Kind::kTotal) continue;
    // A running row counts its GPUs up to now.
    const TimePoint end = r.running && now > r.end ? now : r.end;
    const double allocated = r.allocated_s + (end > r.end ? r.gpus * secondsOf(end - r.end) : 0.0);
    double f = 1.0;
    if (end > r.start) {
      const auto overlap = std::min(end, query.until) - std::max(r.start, query.since);
      if (overlap <= TimePoint::duration::zero()) continue;
      f = secondsOf(overlap) / secondsOf(end - r.start);
    } else if (r.start < query.since || r.start >= query.until) {
      continue;
    }
    std::string_view name;
    switch (query.by) {
      case UsageBy::kOwner:
        name = text(r.owner);
        break;
      case UsageBy::kAccount:
        name = text(r.account);
        break;
      case UsageBy::kJob:
        name = r.job;
        break;
      case UsageBy::kNode:
        name = text(r.node);
        break;
      case UsageBy::kGpuModel:
        name = text(r.model);
        break;
    }
    UsageTotals& t = by[name];
    t.allocated_s += allocated * f;
    t.used_s += r.used_s * f;
    t.idle_s += r.idle_s * f;
    t.energy_j += r.energy_j * f;
    if (r.kind == UsageRecord::Kind::kLease) ++t.leases;
  }
  std::vector<UsageTotals> out;
  out.reserve(by.size());
  for (auto& [name, t] : by) {
    t.name = std::string(name);
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(), [](const UsageTotals& a, const UsageTotals& b) {
    return a.allocated_s != b.allocated_s ? a.allocated_s > b.allocated_s : a.name < b.name;
  });
  return out;
}

void UsageLedger::count(const Row& r) {
  UsageTotals& t = totals_[text(r.owner)];
  t.name = text(r.owner);
  t.allocated_s += r.allocated_s;
  t.used_s += r.used_s;
  t.idle_s += r.idle_s;
  t.energy_j += r.energy_j;
  if (r.kind == UsageRecord::Kind::kLease) ++t.leases;
}

std::map<std::string, UsageTotals, std::less<>> UsageLedger::totalsByOwner(TimePoint now) const {
  std::map<std::string, UsageTotals, std::less<>> out = totals_;
  for (const auto& [lease, rows] : open_)
    for (const auto& [node, id] : rows) {
      const Row& r = *row(id);
      if (now > r.end) out[text(r.owner)].allocated_s += r.gpus * secondsOf(now - r.end);
    }
  return out;
}

std::vector<UsageRecord> UsageLedger::ofLease(std::string_view lease) const {
  std::vector<UsageRecord> out;
  for (size_t i = 0; i < rows_.size(); ++i)
    if (!gone_[i] && rows_[i].kind == UsageRecord::Kind::kLease && rows_[i].lease == lease)
      out.push_back(record(rows_[i]));
  return out;
}

std::vector<UsageRecord> UsageLedger::ofJob(std::string_view job) const {
  std::vector<UsageRecord> out;
  auto it = by_job_.find(std::string(job));
  if (it == by_job_.end()) return out;
  for (uint64_t id : it->second)
    if (const Row* r = row(id); r != nullptr && r->job == job) out.push_back(record(*r));
  return out;
}

UsageTotals UsageLedger::ofJobTotals(std::string_view job, TimePoint now) const {
  UsageTotals t{.name = std::string(job)};
  for (const UsageRecord& r : ofJob(job)) {
    t.allocated_s += r.allocated_s + (r.running && now > r.end ? r.gpus * secondsOf(now - r.end) : 0.0);
    t.used_s += r.used_s;
    t.idle_s += r.idle_s;
    t.energy_j += r.energy_j;
    ++t.leases;
  }
  return t;
}

void UsageLedger::load(const UsageRecord& u) {
  Row r;
  r.id = u.id;
  r.kind = u.kind;
  r.lease = u.lease;
  r.job = u.job;
  r.owner = nameOf(u.owner);
  r.account = nameOf(u.account);
  r.node = nameOf(u.node);
  r.model = nameOf(u.model);
  r.ended = nameOf(u.ended);
  r.running = u.running;
  r.start = u.start;
  r.end = u.end;
  r.gpus = u.gpus;
  r.allocated_s = u.allocated_s;
  r.used_s = u.used_s;
  r.idle_s = u.idle_s;
  r.energy_j = u.energy_j;
  rows_.push_back(std::move(r));
  gone_.push_back(false);
}

void UsageLedger::finishLoad() {
  std::sort(rows_.begin(), rows_.end(), [](const Row& a, const Row& b) { return a.id < b.id; });
  gone_.assign(rows_.size(), false);
  dead_ = 0;
  open_.clear();
  totals_.clear();
  total_rows_.clear();
  by_job_.clear();
  for (const Row& r : rows_) {
    if (r.kind == UsageRecord::Kind::kLease && !r.job.empty()) by_job_[r.job].push_back(r.id);
    next_id_ = std::max(next_id_, r.id + 1);
    count(r);
    if (r.kind == UsageRecord::Kind::kTotal) total_rows_[text(r.owner)] = r.id;
    if (r.running) open_[r.lease][r.node] = r.id;
  }
  rebuildDecayed();
}

void UsageLedger::decay(const Row& r, double gpuSeconds, TimePoint from, TimePoint to) {
  if (gpuSeconds == 0) return;
  const double h = secondsOf(half_life_);
  const double span = to > from ? secondsOf(to - from) : 0.0;
  // Spread evenly over the span, each second's part halved every h until `to`:
  // the integral of (g / span) 2^(-(to - t) / h) dt.
  const double atEnd = span > h * 1e-6 ? gpuSeconds * (h / std::numbers::ln2) / span *
                                             -std::expm1(-span / h * std::numbers::ln2)
                                       : gpuSeconds;
  Decayed& d = decayed_[uint64_t{r.account} << 32 | r.owner];
  if (to >= d.at) {
    d.value = d.value * std::exp2(-secondsOf(to - d.at) / h) + atEnd;
    d.at = to;
  } else {
    d.value += atEnd * std::exp2(-secondsOf(d.at - to) / h);
  }
}

void UsageLedger::rebuildDecayed() {
  decayed_.clear();
  // A day's row ends at midnight, which may be ahead of the ledger's last moment (rows folded early,
  // past max_rows): its usage is counted no later than that moment, so that no value is dated in
  // the future (where the decay to now would make it grow).
  TimePoint latest{};
  for (size_t i = 0; i < rows_.size(); ++i)
    if (!gone_[i] && rows_[i].kind == UsageRecord::Kind::kLease) latest = std::max(latest, rows_[i].end);
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (gone_[i]) continue;
    const Row& r = rows_[i];
    const TimePoint to = latest == TimePoint{} ? r.end : std::min(r.end, latest);
    decay(r, r.allocated_s, std::min(r.start, to), to);
  }
}

void UsageLedger::setHalfLife(std::chrono::seconds halfLife) {
  if (halfLife == half_life_ || halfLife <= std::chrono::seconds(0)) return;
  half_life_ = halfLife;
  rebuildDecayed();
}

DecayedUsage UsageLedger::decayed(TimePoint now) const {
  DecayedUsage out;
  out.reserve(decayed_.size());
  const double h = secondsOf(half_life_);
  for (const auto& [k, d] : decayed_) {
    const double value = now > d.at ? d.value * std::exp2(-secondsOf(now - d.at) / h) : d.value;
    out.push_back(
        {{text(static_cast<uint32_t>(k >> 32)), text(static_cast<uint32_t>(k & 0xffffffffu))}, value});
  }
  return out;
}

}  // namespace poolrun::pool
