// Jobs the pool keeps (docs/jobs.md): /v1/jobs... for their owners (submit, list, look, cancel), and
// /v1/nodes/NAME/jobs... for the agent of the node a job runs on (what to start or signal, and how
// it went). Each launcher gets a credential of its own (kJobCredentialPrefix), made here when its
// agent asks for the job; poold keeps its SHA-256 alone, and it counts for the job's lease alone
// while the job runs (dispatch.cpp).

#include "poolrun/common/names.hpp"
#include "poolrun/common/secret.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/pool/job_plan.hpp"
#include "poolrun/pool/json_read.hpp"
#include "poolrun/pool/service.hpp"
#include "poolrun/pool/usage_json.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

// Where a job's output goes where it does not say (sbatch's slurm-%j.out).
constexpr const char* kDefaultOutput = "poolrun-%j.out";
// Jobs a list answers at most, the newest first where there are more.
constexpr int64_t kMaxListed = 10'000;

// A job as its owner and administrators see it; others see it without its environment, which may
// hold what its owner would not show. The launcher's credential is nobody's to see.
json jobView(const PoolState& s, const JobRecord& job, const Caller& who, bool detail) {
  json doc = toJson(job);
  doc.erase("credential");
  if (job.spec.owner != who.owner && !who.admin) doc["spec"].erase("env");
  if (job.state == JobState::kPending) {
    const std::optional<TimePoint> planned = plannedJobStart(s, job);
    doc["planned_start_ms"] = planned ? json(toMillis(*planned)) : json(nullptr);
    if (detail && job.ticket != 0) doc["wait_reason"] = s.waitReason(job.ticket);
  }
  // What its leases used (the usage ledger, docs/accounting.md), where it ran.
  const UsageTotals used = s.usage().ofJobTotals(job.id, std::chrono::system_clock::now());
  if (used.leases > 0) doc["usage"] = toJson(used);
  return doc;
}

json submitJob(ServerCore& m, Context& c) {
  const json body = parseBody(c.req.body);
  JobSubmission sub = jobSubmissionFromJson(body);
  m.checkLimits(sub.spec.request, c.who);
  sub.spec.owner = PoolService(c.who).ownerOf(sub.spec.request.owner);
  return m.mutate([&](PoolState& s, TimePoint now) {
    const std::vector<std::string> ids = s.submitJob(sub.spec, sub.array, now);
    c.status = 201;
    const std::string id = ids.front().substr(0, ids.front().find('_'));
    json fields = {{"job", id}, {"tasks", ids.size()}};
    fields.update(auditOf(c));
    m.events->record("job_accepted", fields, now);
    return json{{"job", id}, {"tasks", ids}};
  });
}

// Filters: ?user=OWNER&state=STATE&name=NAME, and for ended jobs (poolctl history) ended=true,
// ended_after_ms=T, ended_before_ms=T (milliseconds since the epoch: [after, before)); the oldest
// first.
json jobList(ServerCore& m, Context& c) {
  auto query = [&c](const char* key) {
    auto it = c.req.query.find(key);
    return it == c.req.query.end() ? std::string() : it->second;
  };
  const std::string user = query("user"), name = query("name"), state = query("state"),
                    endedText = query("ended");
  if (!endedText.empty() && endedText != "true" && endedText != "false")
    throw badRequest("ended '" + common::printable(endedText) + "': give true or false");
  const int64_t after = c.query("ended_after_ms", 0, 0, INT64_MAX),
                before = c.query("ended_before_ms", INT64_MAX, 0, INT64_MAX);
  const bool ended = endedText == "true" || after > 0 || before < INT64_MAX;
  std::optional<JobState> wanted;
  if (!state.empty() && !(wanted = jobStateFromString(state)))
    throw badRequest("state '" + common::printable(state) +
                     "' is not a job state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, "
                     "PREEMPTED, REQUEUED, NODE_FAIL)");
  const int64_t most = c.query("limit", kMaxListed, 1, kMaxListed);
  return m.read([&](const PoolState& s) {
    std::vector<const JobRecord*> picked;
    for (auto it = s.jobs().records().rbegin(); it != s.jobs().records().rend(); ++it) {
      const JobRecord& j = it->second;
      if ((!user.empty() && j.spec.owner != user) || (!name.empty() && j.spec.name != name) ||
          (wanted && j.state != *wanted))
        continue;
      if (ended && (!isFinal(j.state) || toMillis(j.ended) < after || toMillis(j.ended) >= before)) continue;
      picked.push_back(&j);
      if (static_cast<int64_t>(picked.size()) == most) break;
    }
    json out = json::array();
    for (auto it = picked.rbegin(); it != picked.rend(); ++it) out.push_back(jobView(s, **it, c.who, false));
    return out;
  });
}

json jobDetail(ServerCore& m, Context& c) {
  return m.read([&](const PoolState& s) {
    const std::vector<const JobRecord*> named = s.jobs().named(c.params[0]);
    if (named.empty())
      throw HttpError("not_found", "no job " + common::printable(c.params[0]) +
                                       " (poolctl jobs lists them; ended ones are kept for poold's "
                                       "--job-retention)");
    json out = json::array();
    for (const JobRecord* j : named) out.push_back(jobView(s, *j, c.who, true));
    return out;
  });
}

json cancelJob(ServerCore& m, Context& c) {
  const json body = c.req.body.empty() ? json::object() : parseBody(c.req.body);
  const auto f = json_read::clientFields(body, {"signal"}, "the cancel request");
  const int signal = f.integer<int>("signal", 1, 64, 15);
  return m.mutate([&](PoolState& s, TimePoint now) {
    const std::vector<std::string> ids = s.cancelJob(c.params[0], c.who.owner, c.who.admin, signal, now);
    json fields = {{"job", c.params[0]}, {"cancelled", ids}, {"signal", signal}};
    fields.update(auditOf(c));
    m.events->record("job_cancel", fields, now);
    return json{{"cancelled", ids}};
  });
}

JobLaunch launchOf(const JobRecord& job, std::string credential, bool allowRoot) {
  JobLaunch l;
  l.id = job.id;
  l.lease = job.lease;
  l.owner = job.spec.owner;
  l.name = job.spec.name;
  l.task = job.task;
  l.uid = job.spec.uid;
  l.gid = job.spec.gid;
  l.command = job.spec.command;
  l.env = job.spec.env;
  l.cwd = job.spec.cwd;
  l.output = expandJobPath(job.spec.output.empty() ? kDefaultOutput : job.spec.output, job);
  l.error = job.spec.error.empty() ? l.output : expandJobPath(job.spec.error, job);
  l.umask = job.spec.umask;
  l.time_limit = job.spec.time_limit;
  l.credential = std::move(credential);
  l.allow_root = allowRoot;
  return l;
}

// What the node's agent is to do now. A launcher to start gets a new credential each time it is
// asked for (a reply lost on the way leaves the last one unused, and no longer good).
json nodeJobWork(ServerCore& m, Context& c) {
  const std::string node = c.params[0];
  return m.mutate([&](PoolState& s, TimePoint) {
    NodeJobWork work;
    for (const JobRecord* job : s.jobWork(node)) {
      if (job->cancel_signal != 0) work.signal.push_back({job->id, job->cancel_signal});
      if (job->launched) continue;
      std::string credential = common::randomSecret(kJobCredentialPrefix);
      const JobRecord copy = *job;  // setJobCredential changes the record `job` points at
      s.setJobCredential(node, copy.id, secretHash(credential));
      work.start.push_back(launchOf(copy, std::move(credential), m.opt.jobs.allow_root));
      if (auto lease = s.leaseMap().find(copy.lease); lease != s.leaseMap().end())
        for (const GpuRef& g : lease->second.gpus)
          if (g.node == node) work.start.back().gpus.push_back(g.index);
      work.start.back().memory_bytes = copy.spec.mem_per_gpu * work.start.back().gpus.size();
    }
    return toJson(work);
  });
}

// A long poll for the node's agent: answers {"work": true} once the node has a launcher to start or
// a cancel's signal to send, else {"work": false} at wait_ms (at most 5 s, and at once where poold's
// long polls are all taken: LongPolls). The agent then asks GET /v1/nodes/NAME/jobs for the work, so
// that one path alone makes launchers' credentials.
json nodeJobWait(ServerCore& m, Context& c) {
  const std::string node = c.params[0];
  const int64_t waitMs = c.query("wait_ms", 0, 0, 3'600'000);
  const LongPolls::Slot slot(m.long_polls, c.who.owner);
  const auto deadline = std::chrono::system_clock::now() + slot.wait(waitMs);
  return m.waitFor(deadline, [&](PoolState& s, TimePoint, bool last) -> std::optional<json> {
    const bool work = !s.jobWork(node).empty();
    if (!work && !last) return std::nullopt;
    return json{{"work", work}};
  });
}

json jobReport(ServerCore& m, Context& c) {
  const json body = parseBody(c.req.body);
  const JobReport report = jobReportFromJson(body);
  return m.mutate([&](PoolState& s, TimePoint now) {
    const std::string &node = c.params[0], &id = c.params[1];
    switch (report.kind) {
      case JobReport::Kind::kStarted:
        s.jobStarted(node, id, now);
        break;
      case JobReport::Kind::kSignalled:
        s.jobSignalled(node, id);
        break;
      case JobReport::Kind::kEnded:
        s.jobEnded(node, id, report.exit, now);
        break;
    }
    const JobRecord* job = s.jobs().find(id);
    return json{{"job", id}, {"state", job ? toString(job->state) : "FORGOTTEN"}};
  });
}

}  // namespace

std::vector<RouteSpec> jobRoutes() {
  return {
      {"POST", "/v1/jobs", Role::kUser, StateLock::kChange, "", submitJob},
      {"GET", "/v1/jobs", Role::kUser, StateLock::kRead, "", jobList},
      {"GET", "/v1/jobs/*", Role::kUser, StateLock::kRead, "", jobDetail},
      {"POST", "/v1/jobs/*/cancel", Role::kUser, StateLock::kChange, "", cancelJob},
      {"GET", "/v1/nodes/*/jobs", Role::kAgent, StateLock::kChange, "start jobs", nodeJobWork},
      {"GET", "/v1/nodes/*/jobs/wait", Role::kAgent, StateLock::kChange, "wait for jobs", nodeJobWait},
      {"POST", "/v1/nodes/*/jobs/*", Role::kAgent, StateLock::kChange, "report jobs", jobReport},
  };
}

}  // namespace poolrun::pool
