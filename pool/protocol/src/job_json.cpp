#include "poolrun/pool/job_json.hpp"

#include <type_traits>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/json_read.hpp"

namespace poolrun::pool {

using nlohmann::json;
using namespace json_read;

namespace {

json optionalInt(const std::optional<int>& v) {
  return v ? json(*v) : json(nullptr);
}

std::optional<int> optionalIntOf(const JsonFields& f, std::string_view key) {
  if (!f.has(key)) return std::nullopt;
  return f.integer<int>(key, INT32_MIN, INT32_MAX);
}

// A list of T under `key` (none: empty); a field of another shape is named.
template <typename T>
std::vector<T> listOf(const JsonFields& f, std::string_view key) {
  if (!f.has(key)) return {};
  try {
    return f.need(key).get<std::vector<T>>();
  } catch (const nlohmann::json::exception&) {
    f.failField(key,
                "expected a list of " + std::string(std::is_same_v<T, std::string> ? "strings" : "numbers"));
  }
  return {};
}

// What a submission and a record both hold of a job's spec.
json specFields(const JobSpec& s) {
  return {{"name", s.name},
          {"uid", s.uid},
          {"gid", s.gid},
          {"groups", s.groups},
          {"command", s.command},
          {"cwd", s.cwd},
          {"env", s.env},
          {"output", s.output},
          {"error", s.error},
          {"umask", s.umask},
          {"request", toJson(s.request)},
          {"requeue", s.requeue},
          {"mem_per_gpu_bytes", s.mem_per_gpu}};
}

}  // namespace

json toJson(const JobRecord& j) {
  const JobSpec& s = j.spec;
  json spec = specFields(s);
  spec["owner"] = s.owner;
  spec["dependency"] = dependencyText(s.dependencies);
  spec["time_limit_s"] = s.time_limit ? json(s.time_limit->count()) : json(nullptr);
  return {{"schema", kJobSchema},
          {"id", j.id},
          {"task", optionalInt(j.task)},
          {"array_limit", j.array_limit},
          {"state", toString(j.state)},
          {"reason", j.reason},
          {"submitted_ms", toMillis(j.submitted)},
          {"started_ms", toMillis(j.started)},
          {"ended_ms", toMillis(j.ended)},
          {"lease", j.lease},
          {"exit_status", optionalInt(j.exit_status)},
          {"signal", optionalInt(j.signal)},
          {"failed_node", j.failed_node},
          {"failed_rank", optionalInt(j.failed_rank)},
          {"cancelled_by", j.cancelled_by},
          {"restarts", j.restarts},
          {"ticket", j.ticket},
          {"node", j.node},
          {"launched", j.launched},
          {"credential", j.credential},
          {"preempted", j.preempted},
          {"cancel_signal", j.cancel_signal},
          {"spec", std::move(spec)}};
}

JobRecord jobFromJson(const json& doc) {
  const JsonFields f = fieldsOf(doc);
  if (f.string("schema") != kJobSchema)
    f.failField("schema", "'" + common::printable(f.string("schema")) + "' is not " + kJobSchema);
  JobRecord j;
  j.id = f.string("id");
  if (!isJobId(j.id)) f.failField("id", "'" + common::printable(j.id) + "' is not a job id");
  j.task = optionalIntOf(f, "task");
  j.array_limit = f.integer<int>("array_limit", 0, INT32_MAX, 0);
  const std::string state = f.string("state");
  const std::optional<JobState> parsed = jobStateFromString(state);
  if (!parsed) f.failField("state", "'" + common::printable(state) + "' is not a job state");
  j.state = *parsed;
  j.reason = f.string("reason", "");
  j.submitted = fromMillis(f.integer<int64_t>("submitted_ms", 0, kTimeMillisRange.max));
  j.started = fromMillis(f.integer<int64_t>("started_ms", 0, kTimeMillisRange.max, 0));
  j.ended = fromMillis(f.integer<int64_t>("ended_ms", 0, kTimeMillisRange.max, 0));
  j.lease = f.string("lease", "");
  j.exit_status = optionalIntOf(f, "exit_status");
  j.signal = optionalIntOf(f, "signal");
  j.failed_node = f.string("failed_node", "");
  j.failed_rank = optionalIntOf(f, "failed_rank");
  j.cancelled_by = f.string("cancelled_by", "");
  j.restarts = f.integer<int>("restarts", 0, INT32_MAX, 0);
  j.ticket = f.integer<int64_t>("ticket", 0, INT64_MAX, 0);
  j.node = f.string("node", "");
  j.launched = f.boolean("launched", false);
  j.credential = f.string("credential", "");
  j.preempted = f.boolean("preempted", false);
  j.cancel_signal = f.integer<int>("cancel_signal", 0, 64, 0);
  const JsonFields s = f.object("spec");
  JobSpec& spec = j.spec;
  spec.name = s.string("name", "");
  spec.owner = s.string("owner");
  spec.uid = s.integer<uint32_t>("uid", 0, UINT32_MAX);
  spec.gid = s.integer<uint32_t>("gid", 0, UINT32_MAX);
  spec.groups = listOf<uint32_t>(s, "groups");
  spec.command = listOf<std::string>(s, "command");
  if (spec.command.empty()) s.failField("command", "a job runs a program: the list is empty");
  spec.cwd = s.string("cwd");
  spec.env = listOf<std::string>(s, "env");
  spec.output = s.string("output", "");
  spec.error = s.string("error", "");
  spec.request = storedRequestFromJson(s.need("request"));
  if (const std::string deps = s.string("dependency", ""); !deps.empty())
    spec.dependencies = parseDependencies(deps);
  if (s.has("time_limit_s"))
    spec.time_limit = std::chrono::seconds(s.integer<int64_t>("time_limit_s", 1, kStoredSecondsMax));
  spec.requeue = s.boolean("requeue", false);
  spec.umask = s.integer<uint32_t>("umask", 0, 0777, 022);
  spec.mem_per_gpu = s.integer<uint64_t>("mem_per_gpu_bytes", 0, kMaxMemPerGpu, 0);
  return j;
}

namespace {

// A string a job hands to exec or open: no NUL, which would cut it short there.
std::string execString(const JsonFields& f, std::string_view key, std::string fallback) {
  std::string v = f.has(key) ? f.string(key) : std::move(fallback);
  if (v.find('\0') != std::string::npos) f.failField(key, "holds a NUL character");
  return v;
}

std::vector<std::string> execStrings(const JsonFields& f, std::string_view key, bool variables) {
  std::vector<std::string> v = listOf<std::string>(f, key);
  if (v.size() > kMaxJobStrings)
    f.failField(key, std::to_string(v.size()) + " entries; at most " + std::to_string(kMaxJobStrings));
  for (const std::string& s : v) {
    if (s.find('\0') != std::string::npos) f.failField(key, "an entry holds a NUL character");
    if (variables && (s.find('=') == std::string::npos || s.front() == '='))
      f.failField(key, "'" + common::printable(s.substr(0, 80)) + "' is not NAME=VALUE");
  }
  return v;
}

// The most units a launch names, and the highest unit number (a node's GPUs and MIG instances).
constexpr size_t kMaxLaunchGpus = 4096;

json launchJson(const JobLaunch& l) {
  return {{"id", l.id},
          {"lease", l.lease},
          {"owner", l.owner},
          {"name", l.name},
          {"task", optionalInt(l.task)},
          {"uid", l.uid},
          {"gid", l.gid},
          {"command", l.command},
          {"env", l.env},
          {"cwd", l.cwd},
          {"output", l.output},
          {"error", l.error},
          {"umask", l.umask},
          {"time_limit_s", l.time_limit ? json(l.time_limit->count()) : json(nullptr)},
          {"credential", l.credential},
          {"allow_root", l.allow_root},
          {"gpus", l.gpus},
          {"memory_bytes", l.memory_bytes}};
}

JobLaunch launchFromJson(const json& doc) {
  const JsonFields f = fieldsOf(doc, "start");
  JobLaunch l;
  l.id = f.string("id");
  if (!isJobId(l.id)) f.failField("id", "'" + common::printable(l.id) + "' is not a job id");
  l.lease = f.string("lease");
  l.owner = f.string("owner");
  l.name = f.string("name", "");
  l.task = optionalIntOf(f, "task");
  l.uid = f.integer<uint32_t>("uid", 0, UINT32_MAX);
  l.gid = f.integer<uint32_t>("gid", 0, UINT32_MAX);
  l.command = execStrings(f, "command", false);
  if (l.command.empty()) f.failField("command", "empty");
  l.env = execStrings(f, "env", true);
  l.cwd = execString(f, "cwd", "");
  l.output = execString(f, "output", "");
  l.error = execString(f, "error", "");
  l.umask = f.integer<uint32_t>("umask", 0, 0777, 022);
  if (f.has("time_limit_s") && !f.need("time_limit_s").is_null())
    l.time_limit = std::chrono::seconds(f.integer<int64_t>("time_limit_s", 1, kStoredSecondsMax));
  l.credential = f.string("credential");
  l.allow_root = f.boolean("allow_root", false);
  l.memory_bytes = f.integer<uint64_t>("memory_bytes", 0, kMaxMemPerGpu * kMaxLaunchGpus, 0);
  if (f.has("gpus")) {
    const json& gpus = f.need("gpus");
    if (!gpus.is_array() || gpus.size() > kMaxLaunchGpus)
      f.failField("gpus", "not a list of at most 4096 units");
    for (const json& g : gpus) {
      if (!g.is_number_unsigned() || g.get<uint64_t>() >= kMaxLaunchGpus)
        f.failField("gpus", "'" + g.dump() + "' is not a unit number");
      l.gpus.push_back(g.get<size_t>());
    }
  }
  return l;
}

}  // namespace

json toJson(const JobSubmission& sub) {
  const JobSpec& s = sub.spec;
  json doc = specFields(s);
  if (!s.dependencies.empty()) doc["dependency"] = dependencyText(s.dependencies);
  if (s.time_limit) doc["time_limit_s"] = s.time_limit->count();
  if (sub.array) {
    std::string text;
    for (int t : sub.array->tasks) text += (text.empty() ? "" : ",") + std::to_string(t);
    if (sub.array->limit > 0) text += "%" + std::to_string(sub.array->limit);
    doc["array"] = text;
  }
  return doc;
}

JobSubmission jobSubmissionFromJson(const json& doc) {
  const JsonFields f =
      clientFields(doc,
                   {"name", "uid", "gid", "groups", "command", "cwd", "env", "output", "error", "umask",
                    "request", "dependency", "time_limit_s", "requeue", "array", "mem_per_gpu_bytes"},
                   "the job");
  JobSubmission sub;
  JobSpec& s = sub.spec;
  s.name = execString(f, "name", "");
  if (s.name.size() > 200) f.failField("name", "longer than 200 bytes");
  s.uid = f.integer<uint32_t>("uid", 0, UINT32_MAX);
  s.gid = f.integer<uint32_t>("gid", 0, UINT32_MAX);
  s.groups = listOf<uint32_t>(f, "groups");
  if (s.groups.size() > 1024) f.failField("groups", "more than 1024 groups");
  s.command = execStrings(f, "command", false);
  if (s.command.empty()) f.failField("command", "a job runs a program: the list is empty");
  s.cwd = execString(f, "cwd", "");
  s.env = execStrings(f, "env", true);
  s.output = execString(f, "output", "");
  s.error = execString(f, "error", "");
  s.umask = f.integer<uint32_t>("umask", 0, 0777, 022);
  s.request = requestFromJson(f.need("request"));
  if (f.has("dependency")) s.dependencies = parseDependencies(f.string("dependency"));
  if (f.has("time_limit_s"))
    s.time_limit = std::chrono::seconds(f.integer<int64_t>("time_limit_s", 1, kStoredSecondsMax));
  s.requeue = f.boolean("requeue", false);
  s.mem_per_gpu = f.integer<uint64_t>("mem_per_gpu_bytes", 0, kMaxMemPerGpu, 0);
  if (f.has("array")) sub.array = parseArray(f.string("array"));
  // The output paths' patterns are checked now, against a record of the job as it will be.
  JobRecord probe;
  probe.id = "J1";
  probe.spec = s;
  for (const char* key : {"output", "error"})
    if (const std::string& p = key[0] == 'o' ? s.output : s.error; !p.empty()) try {
        expandJobPath(p, probe);
      } catch (const Error& e) {
        f.failField(key, e.what());
      }
  return sub;
}

json toJson(const NodeJobWork& work) {
  json start = json::array();
  for (const JobLaunch& l : work.start) start.push_back(launchJson(l));
  json signal = json::array();
  for (const JobSignal& s : work.signal) signal.push_back({{"id", s.id}, {"signal", s.signal}});
  return {{"start", std::move(start)}, {"signal", std::move(signal)}};
}

NodeJobWork nodeJobWorkFromJson(const json& doc) {
  const JsonFields f = fieldsOf(doc);
  NodeJobWork work;
  for (const json& l : f.need("start")) work.start.push_back(launchFromJson(l));
  for (const json& s : f.need("signal")) {
    const JsonFields sf = fieldsOf(s, "signal");
    work.signal.push_back({sf.string("id"), sf.integer<int>("signal", 1, 64)});
  }
  return work;
}

json toJson(const JobReport& r) {
  switch (r.kind) {
    case JobReport::Kind::kStarted:
      return {{"event", "started"}};
    case JobReport::Kind::kSignalled:
      return {{"event", "signalled"}};
    case JobReport::Kind::kEnded:
      break;
  }
  json doc = {{"event", "ended"}, {"exit_status", r.exit.exit_status}, {"signal", r.exit.signal}};
  if (!r.exit.reason.empty()) doc["reason"] = r.exit.reason;
  return doc;
}

JobReport jobReportFromJson(const json& doc) {
  const JsonFields f = clientFields(doc, {"event", "exit_status", "signal", "reason"}, "the job report");
  JobReport r;
  const std::string event = f.string("event");
  if (event == "started") {
    r.kind = JobReport::Kind::kStarted;
  } else if (event == "signalled") {
    r.kind = JobReport::Kind::kSignalled;
  } else if (event == "ended") {
    r.kind = JobReport::Kind::kEnded;
    r.exit.exit_status = f.integer<int>("exit_status", 0, 255);
    r.exit.signal = f.integer<int>("signal", 0, 64, 0);
    r.exit.reason = f.string("reason", "");
    if (r.exit.reason.size() > 4096) r.exit.reason.resize(4096);
  } else {
    f.failField("event", "'" + common::printable(event) + "' is not started, signalled or ended");
  }
  return r;
}

}  // namespace poolrun::pool
