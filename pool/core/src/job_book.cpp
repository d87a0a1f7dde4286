#include "poolrun/pool/job_book.hpp"

#include <charconv>
#include <filesystem>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

std::optional<JobBook::Key> JobBook::keyOf(std::string_view id) {
  if (!isJobId(id)) return std::nullopt;
  const size_t under = id.find('_');
  Key key{0, -1};
  const std::string_view number = id.substr(1, under == std::string_view::npos ? id.npos : under - 1);
  if (std::from_chars(number.data(), number.data() + number.size(), key.first).ec != std::errc())
    return std::nullopt;
  if (under != std::string_view::npos) {
    const std::string_view task = id.substr(under + 1);
    if (std::from_chars(task.data(), task.data() + task.size(), key.second).ec != std::errc())
      return std::nullopt;
  }
  return key;
}

std::string JobBook::idOf(const Key& key) {
  return "J" + std::to_string(key.first) + (key.second >= 0 ? "_" + std::to_string(key.second) : "");
}

std::vector<std::string> JobBook::add(JobSpec spec, const std::optional<JobArray>& array, TimePoint now,
                                      const JobOptions& options, Dirty& dirty) {
  if (spec.command.empty()) throw badInput("a job runs a program: its command is empty");
  if (spec.cwd.empty() || spec.cwd[0] != '/')
    throw badInput("the job's directory '" + common::printable(spec.cwd) +
                   "' is not an absolute path: give --chdir /PATH, or submit from the directory");
  if (spec.uid == 0 && !options.allow_root)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "jobs do not run as root on this pool: submit as the user the job should run as (an "
                    "administrator may allow it with poold --allow-root-jobs)");
  for (const JobDependency& d : spec.dependencies)
    for (const std::string& id : d.jobs)
      if (named(id).empty())
        throw badInput("--dependency " + dependencyText(spec.dependencies) + ": the pool knows no job " + id +
                       " (never submitted, or forgotten after poold's --job-retention)");
  const size_t count = array ? array->tasks.size() : 1;
  const size_t active = activeOf(spec.owner);
  if (active + count > options.max_active_per_owner)
    throw badInput("owner " + spec.owner + " has " + std::to_string(active) + " jobs pending or running; " +
                   std::to_string(count) + " more would pass the most one owner may have (" +
                   std::to_string(options.max_active_per_owner) +
                   ", poold --max-jobs-per-owner): wait for some to end, or cancel some");
  if (spec.name.empty()) spec.name = std::filesystem::path(spec.command.back()).filename().string();
  const int64_t number = next_++;
  dirty.counters = true;
  std::vector<std::string> ids;
  for (size_t i = 0; i < count; ++i) {
    JobRecord job;
    const Key key{number, array ? array->tasks[i] : -1};
    job.id = idOf(key);
    if (array) {
      job.task = array->tasks[i];
      job.array_limit = array->limit;
    }
    job.spec = spec;
    job.submitted = now;
    job.reason = "None";
    events_.push_back({job.id, std::nullopt, JobState::kPending, ""});
    index(job, key);
    records_.emplace(key, std::move(job));
    markDirty(key, dirty);
    ids.push_back(idOf(key));
  }
  return ids;
}

const JobRecord* JobBook::find(std::string_view id) const {
  const std::optional<Key> key = keyOf(id);
  if (!key) return nullptr;
  auto it = records_.find(*key);
  return it == records_.end() ? nullptr : &it->second;
}

std::vector<const JobRecord*> JobBook::named(std::string_view id) const {
  const std::optional<Key> key = keyOf(id);
  if (!key) return {};
  std::vector<const JobRecord*> out;
  if (key->second >= 0) {
    if (const JobRecord* j = find(id)) out.push_back(j);
    return out;
  }
  for (auto it = records_.lower_bound({key->first, -1});
       it != records_.end() && it->first.first == key->first; ++it)
    out.push_back(&it->second);
  return out;
}

size_t JobBook::activeOf(const std::string& owner) const {
  auto it = active_by_owner_.find(owner);
  return it == active_by_owner_.end() ? 0 : it->second;
}

const JobRecord* JobBook::ofCredential(const std::string& hash) const {
  auto it = by_credential_.find(hash);
  return it == by_credential_.end() ? nullptr : &records_.at(it->second);
}

const JobRecord* JobBook::ofTicket(int64_t ticket) const {
  auto it = by_ticket_.find(ticket);
  return it == by_ticket_.end() ? nullptr : &records_.at(it->second);
}

const std::set<JobBook::Key>* JobBook::workOf(const std::string& node) const {
  auto it = work_by_node_.find(node);
  return it == work_by_node_.end() ? nullptr : &it->second;
}

namespace {

bool agentHasWork(const JobRecord& job) {
  return job.state == JobState::kRunning && !job.node.empty() && (!job.launched || job.cancel_signal != 0);
}

}  // namespace

void JobBook::setState(JobRecord& job, JobState to, std::string reason, TimePoint now) {
  if (job.state != to) events_.push_back({job.id, job.state, to, reason});
  job.state = to;
  job.reason = std::move(reason);
  if (isFinal(to)) job.ended = now;
}

void JobBook::unindex(const JobRecord& job, const Key& key) {
  if (!isFinal(job.state)) {
    active_.erase(key);
    if (auto it = active_by_owner_.find(job.spec.owner); it != active_by_owner_.end() && --it->second == 0)
      active_by_owner_.erase(it);
  } else {
    ended_.erase({job.ended, key});
  }
  if (!job.credential.empty()) by_credential_.erase(job.credential);
  if (job.ticket != 0) by_ticket_.erase(job.ticket);
  if (agentHasWork(job))
    if (auto it = work_by_node_.find(job.node);
        it != work_by_node_.end() && it->second.erase(key) && it->second.empty())
      work_by_node_.erase(it);
}

void JobBook::index(const JobRecord& job, const Key& key) {
  if (!isFinal(job.state)) {
    active_.insert(key);
    ++active_by_owner_[job.spec.owner];
  } else {
    ended_.insert({job.ended, key});
  }
  // A launcher's credential counts while its job runs, and not a moment after.
  if (!job.credential.empty() && job.state == JobState::kRunning) by_credential_[job.credential] = key;
  if (job.ticket != 0) by_ticket_[job.ticket] = key;
  if (agentHasWork(job)) work_by_node_[job.node].insert(key);
}

void JobBook::markDirty(const Key& key, Dirty& dirty) const {
  dirty.jobs.insert(idOf(key));
}

void JobBook::forgetOld(TimePoint now, const JobOptions& options, Dirty& dirty) {
  while (!ended_.empty()) {
    const auto& [ended, key] = *ended_.begin();
    if (ended + options.retention > now && ended_.size() <= options.max_kept) return;
    dirty.jobs.insert(idOf(key));
    records_.erase(key);
    ended_.erase(ended_.begin());
  }
}

void JobBook::load(JobRecord job) {
  const std::optional<Key> key = keyOf(job.id);
  if (!key) throw badInput("job '" + common::printable(job.id) + "': not a job id");
  if ((key->second >= 0) != job.task.has_value() || (job.task && *job.task != key->second))
    throw badInput("job " + job.id + ": its task does not match its id");
  next_ = std::max(next_, key->first + 1);
  if (auto it = records_.find(*key); it != records_.end()) {
    unindex(it->second, *key);
    records_.erase(it);
  }
  index(job, *key);
  records_.emplace(*key, std::move(job));
}

void JobBook::clear() {
  records_.clear();
  active_.clear();
  active_by_owner_.clear();
  by_credential_.clear();
  by_ticket_.clear();
  work_by_node_.clear();
  ended_.clear();
  next_ = 1;
  events_.clear();
}

}  // namespace poolrun::pool
