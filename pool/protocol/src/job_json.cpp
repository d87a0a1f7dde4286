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

}  // namespace

json toJson(const JobRecord& j) {
  const JobSpec& s = j.spec;
  json spec = {{"name", s.name},
               {"owner", s.owner},
               {"uid", s.uid},
               {"gid", s.gid},
               {"groups", s.groups},
               {"command", s.command},
               {"cwd", s.cwd},
               {"env", s.env},
               {"output", s.output},
               {"error", s.error},
               {"request", toJson(s.request)},
               {"dependency", dependencyText(s.dependencies)},
               {"time_limit_s", s.time_limit ? json(s.time_limit->count()) : json(nullptr)},
               {"requeue", s.requeue},
               {"umask", s.umask}};
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
  return j;
}

}  // namespace poolrun::pool
