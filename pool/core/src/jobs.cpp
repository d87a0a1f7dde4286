#include "poolrun/pool/jobs.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <set>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"

namespace poolrun::pool {
namespace {

constexpr std::array<std::pair<JobState, std::string_view>, 9> kStateNames{{
    {JobState::kPending, "PENDING"},
    {JobState::kRunning, "RUNNING"},
    {JobState::kCompleted, "COMPLETED"},
    {JobState::kFailed, "FAILED"},
    {JobState::kCancelled, "CANCELLED"},
    {JobState::kTimeout, "TIMEOUT"},
    {JobState::kPreempted, "PREEMPTED"},
    {JobState::kRequeued, "REQUEUED"},
    {JobState::kNodeFail, "NODE_FAIL"},
}};

constexpr std::array<std::pair<JobDependency::Kind, std::string_view>, 4> kKindNames{{
    {JobDependency::Kind::kAfterOk, "afterok"},
    {JobDependency::Kind::kAfterAny, "afterany"},
    {JobDependency::Kind::kAfterNotOk, "afternotok"},
    {JobDependency::Kind::kSingleton, "singleton"},
}};

// The parts of `text` between `sep`s (empty parts kept, for the caller to refuse).
std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  for (size_t at = 0;;) {
    const size_t end = text.find(sep, at);
    out.push_back(text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (end == std::string_view::npos) return out;
    at = end + 1;
  }
}

// A whole non-negative number of at most 9 digits; nullopt for anything else.
std::optional<int> smallNumber(std::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string_view toString(JobState s) {
  for (const auto& [state, name] : kStateNames)
    if (state == s) return name;
  return "UNKNOWN";
}

std::optional<JobState> jobStateFromString(std::string_view text) {
  std::string upper(text);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& [state, name] : kStateNames)
    if (name == upper) return state;
  return std::nullopt;
}

bool isFinal(JobState s) {
  return s != JobState::kPending && s != JobState::kRunning && s != JobState::kRequeued;
}

bool isJobId(std::string_view id) {
  if (id.size() < 2 || id[0] != 'J') return false;
  const size_t under = id.find('_');
  const std::string_view number =
      id.substr(1, under == std::string_view::npos ? std::string_view::npos : under - 1);
  if (!allDigits(number) || number.size() > 18) return false;
  return under == std::string_view::npos || (allDigits(id.substr(under + 1)) && id.size() - under - 1 <= 7);
}

std::vector<JobDependency> parseDependencies(std::string_view text) {
  const std::string shown = common::printable(std::string(text.substr(0, 200)));
  if (text.empty())
    throw badInput("--dependency is empty: give afterok:ID, afterany:ID, afternotok:ID or singleton");
  std::vector<JobDependency> out;
  size_t jobs = 0;
  for (std::string_view part : split(text, ',')) {
    const std::vector<std::string_view> fields = split(part, ':');
    JobDependency d;
    bool known = false;
    for (const auto& [kind, name] : kKindNames)
      if (name == fields[0]) {
        d.kind = kind;
        known = true;
      }
    if (!known)
      throw badInput("--dependency '" + shown + "': '" + common::printable(std::string(fields[0])) +
                     "' is not a kind of dependency (afterok, afterany, afternotok or singleton)");
    if (d.kind == JobDependency::Kind::kSingleton) {
      if (fields.size() != 1) throw badInput("--dependency '" + shown + "': singleton takes no job");
    } else {
      if (fields.size() < 2)
        throw badInput("--dependency '" + shown + "': " + std::string(fields[0]) +
                       " needs a job: " + std::string(fields[0]) + ":ID[:ID...]");
      for (size_t i = 1; i < fields.size(); ++i) {
        if (!isJobId(fields[i]))
          throw badInput(
              "--dependency '" + shown + "': '" + common::printable(std::string(fields[i])) +
              "' is not a job id (J and its number, as poolrun --detach printed it; J12_3 for a task)");
        d.jobs.emplace_back(fields[i]);
      }
      jobs += d.jobs.size();
    }
    out.push_back(std::move(d));
  }
  if (jobs > kMaxDependencies)
    throw badInput("--dependency names " + std::to_string(jobs) + " jobs; at most " +
                   std::to_string(kMaxDependencies));
  return out;
}

std::string dependencyText(const std::vector<JobDependency>& deps) {
  std::string out;
  for (const JobDependency& d : deps) {
    if (!out.empty()) out += ',';
    for (const auto& [kind, name] : kKindNames)
      if (kind == d.kind) out += name;
    for (const std::string& j : d.jobs) out += ":" + j;
  }
  return out;
}

JobArray parseArray(std::string_view text) {
  const std::string shown = common::printable(std::string(text.substr(0, 200)));
  auto bad = [&shown](const std::string& why) {
    return badInput("--array '" + shown + "': " + why +
                    " (give indexes and ranges, 0-99 or 1,3,5-7 or 0-15:4, and %N for at most N at once)");
  };
  JobArray out;
  std::string_view list = text;
  if (const size_t pct = text.find('%'); pct != std::string_view::npos) {
    const std::optional<int> limit = smallNumber(text.substr(pct + 1));
    if (!limit) throw bad("the limit after % is not a whole number");
    if (*limit == 0) throw bad("a limit of 0 would run no task");
    out.limit = *limit;
    list = text.substr(0, pct);
  }
  if (list.empty()) throw bad("no index");
  std::set<int> tasks;
  for (std::string_view part : split(list, ',')) {
    std::string_view range = part;
    int step = 1;
    if (const size_t colon = part.find(':'); colon != std::string_view::npos) {
      const std::optional<int> s = smallNumber(part.substr(colon + 1));
      if (!s || *s == 0) throw bad("the step after ':' must be a whole number over 0");
      step = *s;
      range = part.substr(0, colon);
    }
    const size_t dash = range.find('-');
    const std::optional<int> first = smallNumber(range.substr(0, dash));
    const std::optional<int> last =
        dash == std::string_view::npos ? first : smallNumber(range.substr(dash + 1));
    if (!first || !last)
      throw bad("'" + common::printable(std::string(part)) + "' is not an index or a range");
    if (*first > kMaxArrayIndex || *last > kMaxArrayIndex)
      throw bad("an index is over " + std::to_string(kMaxArrayIndex));
    if (*last < *first) throw bad("the range " + std::string(range) + " runs backwards");
    for (int64_t i = *first; i <= *last; i += step) {
      tasks.insert(static_cast<int>(i));
      if (tasks.size() > kMaxArrayTasks) throw bad("more than " + std::to_string(kMaxArrayTasks) + " tasks");
    }
  }
  out.tasks.assign(tasks.begin(), tasks.end());
  return out;
}

DependencyVerdict judgeDependencies(const std::vector<JobDependency>& deps, const JobStateOf& stateOf,
                                    const SingletonBusy& singletonBusy) {
  using Kind = DependencyVerdict::Kind;
  DependencyVerdict waiting{Kind::kReady, ""};
  for (const JobDependency& d : deps) {
    if (d.kind == JobDependency::Kind::kSingleton) {
      if (singletonBusy && singletonBusy() && waiting.kind == Kind::kReady)
        waiting = {Kind::kWaiting, "Dependency (singleton: another job of this name runs or waits ahead)"};
      continue;
    }
    const std::string kind = std::string(kKindNames[static_cast<size_t>(d.kind)].second);
    for (const std::string& id : d.jobs) {
      const std::optional<JobState> s = stateOf(id);
      if (!s) return {Kind::kImpossible, "DependencyNeverSatisfied (" + kind + ":" + id + ": no such job)"};
      if (!isFinal(*s)) {
        if (waiting.kind == Kind::kReady)
          waiting = {Kind::kWaiting,
                     "Dependency (" + kind + ":" + id + " " + std::string(toString(*s)) + ")"};
        continue;
      }
      const bool ok = *s == JobState::kCompleted;
      if ((d.kind == JobDependency::Kind::kAfterOk && !ok) ||
          (d.kind == JobDependency::Kind::kAfterNotOk && ok))
        return {Kind::kImpossible,
                "DependencyNeverSatisfied (" + kind + ":" + id + " ended " + std::string(toString(*s)) + ")"};
    }
  }
  return waiting;
}

std::string expandJobPath(const std::string& pattern, const JobRecord& job) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    if (i + 1 == pattern.size())
      throw badInput("output path '" + common::printable(pattern) + "' ends in %: write %% for a %");
    switch (pattern[++i]) {
      case 'j':
        out += job.id.substr(0, job.id.find('_'));
        break;
      case 'a':
        if (job.task) out += std::to_string(*job.task);
        break;
      case 'u':
        out += job.spec.owner;
        break;
      case 'x':
        out += job.spec.name;
        break;
      case '%':
        out += '%';
        break;
      default:
        throw badInput("output path '" + common::printable(pattern) + "': %" +
                       common::printable(std::string(1, pattern[i])) +
                       " is not one poolrun knows (%j job, %a array task, %u user, %x name, %% a %)");
    }
  }
  if (!out.empty() && out[0] != '/') out = job.spec.cwd + "/" + out;
  return out;
}

}  // namespace poolrun::pool
