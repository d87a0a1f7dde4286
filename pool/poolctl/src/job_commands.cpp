// poolctl jobs, job ID, cancel ID...: the jobs a poold keeps (docs/jobs.md), as squeue, scontrol
// show job and scancel show and end Slurm's.

#include <algorithm>
#include <charconv>
#include <csignal>
#include <iomanip>
#include <sstream>

#include "poolctl.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/pool/usage_json.hpp"

namespace poolrun::pool::ctl {

std::string takeOption(std::vector<std::string>& args, const std::string& name) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] != name) continue;
    if (i + 1 >= args.size()) throw badInput(name + " needs a value");
    std::string v = args[i + 1];
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
               args.begin() + static_cast<std::ptrdiff_t>(i + 2));
    return v;
  }
  return "";
}

namespace {

using nlohmann::json;

std::string when(TimePoint t) {
  return t == TimePoint{} ? "-" : common::rfc3339(t);
}

// "1:02:03" of a running job, "-" for one not started.
std::string elapsed(const JobRecord& j) {
  if (j.started == TimePoint{}) return "-";
  const TimePoint end = j.ended != TimePoint{} ? j.ended : std::chrono::system_clock::now();
  auto s = std::chrono::duration_cast<std::chrono::seconds>(end - j.started).count();
  if (s < 0) s = 0;
  std::ostringstream out;
  out << s / 3600 << ":" << std::setw(2) << std::setfill('0') << (s / 60) % 60 << ":" << std::setw(2)
      << s % 60;
  return out.str();
}

json viewJson(const JobView& v) {
  json doc = toJson(v.record);
  doc.erase("credential");
  doc["planned_start"] = v.planned_start ? json(common::rfc3339(*v.planned_start)) : json(nullptr);
  if (!v.wait_reason.empty()) doc["wait_reason"] = v.wait_reason;
  if (v.usage) doc["usage"] = toJson(*v.usage);
  return doc;
}

int listJobs(const Command& c) {
  std::vector<std::string> args = c.args;
  const std::string user = takeOption(args, "--user"), state = takeOption(args, "--state"),
                    name = takeOption(args, "--name");
  if (!args.empty()) throw badInput("jobs takes --user U, --state S and --name N (got '" + args[0] + "')");
  const std::vector<JobView> jobs = c.pool().jobs({user, state, name});
  if (c.json) {
    json out = json::array();
    for (const JobView& v : jobs) out.push_back(viewJson(v));
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(12) << "JOBID" << std::setw(16) << "NAME" << std::setw(10) << "USER"
            << std::setw(10) << "STATE" << std::setw(10) << "TIME" << std::setw(6) << "GPUS" << std::setw(12)
            << "NODE"
            << "REASON\n";
  for (const JobView& v : jobs) {
    const JobRecord& j = v.record;
    std::string reason = j.reason;
    if (v.planned_start) reason += " (planned start " + common::rfc3339(*v.planned_start) + ")";
    std::cout << std::setw(12) << j.id << std::setw(16) << j.spec.name.substr(0, 15) << std::setw(10)
              << j.spec.owner.substr(0, 9) << std::setw(10) << toString(j.state) << std::setw(10)
              << elapsed(j) << std::setw(6) << j.spec.request.gpus << std::setw(12)
              << (j.node.empty() ? "-" : j.node) << reason << "\n";
  }
  return 0;
}

int showJob(const Command& c) {
  const std::vector<JobView> tasks = c.pool().job(c.one("job ID"));
  if (c.json) {
    json out = json::array();
    for (const JobView& v : tasks) out.push_back(viewJson(v));
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  for (const JobView& v : tasks) {
    const JobRecord& j = v.record;
    std::cout << "job " << j.id << " (" << j.spec.name << ") of " << j.spec.owner << ": " << toString(j.state)
              << (j.reason.empty() ? "" : " - " + j.reason) << "\n";
    std::cout << "  request   " << j.spec.request.gpus << " GPUs"
              << (j.spec.request.gpus_per_node > 0
                      ? ", " + std::to_string(j.spec.request.gpus_per_node) + " per node"
                      : "")
              << ", priority " << j.spec.request.priority
              << (j.spec.request.account.empty() ? "" : ", account " + j.spec.request.account)
              << (j.spec.requeue ? ", requeued when preempted" : "") << "\n";
    std::cout << "  command  ";
    for (const std::string& a : j.spec.command) std::cout << " " << a;
    std::cout << "\n  directory " << j.spec.cwd << "\n";
    std::cout << "  output    " << (j.spec.output.empty() ? "poolrun-%j.out" : j.spec.output)
              << (j.spec.error.empty() ? "" : ", errors " + j.spec.error) << "\n";
    if (!j.spec.dependencies.empty())
      std::cout << "  depends   " << dependencyText(j.spec.dependencies) << "\n";
    std::cout << "  submitted " << when(j.submitted) << ", started " << when(j.started) << ", ended "
              << when(j.ended) << ", run " << elapsed(j) << ", restarts " << j.restarts << "\n";
    if (!j.lease.empty()) std::cout << "  lease     " << j.lease << " (launcher on " << j.node << ")\n";
    if (j.exit_status || j.signal)
      std::cout << "  exit      " << (j.exit_status ? std::to_string(*j.exit_status) : "-")
                << (j.signal ? ", signal " + std::to_string(*j.signal) : "") << "\n";
    if (!j.cancelled_by.empty()) std::cout << "  cancelled by " << j.cancelled_by << "\n";
    if (v.planned_start) std::cout << "  planned start " << common::rfc3339(*v.planned_start) << "\n";
    if (!v.wait_reason.empty()) std::cout << "  waiting   " << v.wait_reason << "\n";
    if (v.usage) std::cout << "  usage     " << usageLine(*v.usage) << "\n";
  }
  return 0;
}

std::string exitText(const JobRecord& j) {
  if (j.signal) return "signal " + std::to_string(*j.signal);
  return j.exit_status ? std::to_string(*j.exit_status) : "-";
}

void historyCsv(const std::vector<JobView>& jobs) {
  std::cout << "job,name,user,state,exit_status,signal,gpus,node,submitted,started,ended,elapsed_s,restarts,"
               "reason,allocated_gpu_hours,used_gpu_hours,energy_kwh\n";
  for (const JobView& v : jobs) {
    const JobRecord& j = v.record;
    const int64_t seconds =
        j.started == TimePoint{} || j.ended < j.started
            ? 0
            : std::chrono::duration_cast<std::chrono::seconds>(j.ended - j.started).count();
    const std::vector<std::string> fields = {j.id,
                                             j.spec.name,
                                             j.spec.owner,
                                             std::string(toString(j.state)),
                                             j.exit_status ? std::to_string(*j.exit_status) : "",
                                             j.signal ? std::to_string(*j.signal) : "",
                                             std::to_string(j.spec.request.gpus),
                                             j.node,
                                             j.submitted == TimePoint{} ? "" : common::rfc3339(j.submitted),
                                             j.started == TimePoint{} ? "" : common::rfc3339(j.started),
                                             j.ended == TimePoint{} ? "" : common::rfc3339(j.ended),
                                             std::to_string(seconds),
                                             std::to_string(j.restarts),
                                             j.reason,
                                             v.usage ? decimal(v.usage->allocated_s / 3600, 4) : "",
                                             v.usage ? decimal(v.usage->used_s / 3600, 4) : "",
                                             v.usage ? decimal(v.usage->energy_j / 3.6e6, 6) : ""};
    for (size_t i = 0; i < fields.size(); ++i) std::cout << (i ? "," : "") << csvField(fields[i]);
    std::cout << "\n";
  }
}

}  // namespace

TimePoint timeOption(const std::string& option, const std::string& text) {
  if (auto t = common::parseRfc3339(text)) return *t;
  if (text.size() == 10 && text[4] == '-' && text[7] == '-')
    if (auto t = common::parseRfc3339(text + "T00:00:00Z")) return *t;
  if (!text.empty() && text.find_first_not_of("0123456789smhd") == std::string::npos)
    return std::chrono::time_point_cast<TimePoint::duration>(std::chrono::system_clock::now() -
                                                             durationSeconds(option, text));
  throw badInput(option + " '" + common::printable(text) +
                 "': give a time (2026-12-01T08:00:00Z), a day (2026-12-01) or how long ago (12h, 7d)");
}

std::string csvField(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

int historyCommand(const Command& c) {
  std::vector<std::string> args = c.args;
  JobQuery q;
  q.ended = true;
  q.user = takeOption(args, "--user");
  q.state = takeOption(args, "--state");
  q.name = takeOption(args, "--name");
  const std::string since = takeOption(args, "--since"), until = takeOption(args, "--until");
  bool csv = false;
  if (auto it = std::find(args.begin(), args.end(), "--csv"); it != args.end()) {
    csv = true;
    args.erase(it);
  }
  if (!args.empty())
    throw badInput("history takes --since T, --until T, --user U, --state S, --name N and --csv (got '" +
                   common::printable(args[0]) + "')");
  if (csv && c.json) throw badInput("history: give --json or --csv, not both");
  if (!since.empty()) q.ended_after = timeOption("--since", since);
  if (!until.empty()) q.ended_before = timeOption("--until", until);
  if (q.ended_after && q.ended_before && *q.ended_before <= *q.ended_after)
    throw badInput("history: --until " + until + " is not after --since " + since);
  const std::vector<JobView> jobs = c.pool().jobs(q);
  if (c.json) {
    json out = json::array();
    for (const JobView& v : jobs) out.push_back(viewJson(v));
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (csv) {
    historyCsv(jobs);
    return 0;
  }
  std::cout << std::left << std::setw(12) << "JOBID" << std::setw(16) << "NAME" << std::setw(10) << "USER"
            << std::setw(11) << "STATE" << std::setw(10) << "EXIT" << std::setw(25) << "START"
            << std::setw(25) << "END" << std::setw(10) << "ELAPSED" << std::setw(6) << "GPUS"
            << "NODE\n";
  for (const JobView& v : jobs) {
    const JobRecord& j = v.record;
    std::cout << std::setw(12) << j.id << std::setw(16) << j.spec.name.substr(0, 15) << std::setw(10)
              << j.spec.owner.substr(0, 9) << std::setw(11) << toString(j.state) << std::setw(10)
              << exitText(j) << std::setw(25) << when(j.started) << std::setw(25) << when(j.ended)
              << std::setw(10) << elapsed(j) << std::setw(6) << j.spec.request.gpus
              << (j.node.empty() ? "-" : j.node) << "\n";
  }
  return 0;
}

int jobsCommand(const Command& c) {
  return listJobs(c);
}

int jobCommand(const Command& c) {
  return showJob(c);
}

int cancelCommand(const Command& c) {
  std::vector<std::string> args = c.args;
  const std::string sig = takeOption(args, "--signal");
  int signal = SIGTERM;
  if (!sig.empty()) {
    const std::optional<int> n = signalNumber(sig);
    if (!n)
      throw badInput("--signal '" + sig + "': give a signal's name or number (TERM, INT, KILL, USR1, 9)");
    signal = *n;
  }
  // --name N, --user U: every job of theirs not ended yet (a user may cancel their own alone).
  const std::string name = takeOption(args, "--name"), user = takeOption(args, "--user");
  if (!name.empty() || !user.empty()) {
    if (!args.empty())
      throw badInput("cancel takes job IDs or --name N / --user U, not both (got '" +
                     common::printable(args[0]) + "')");
    for (const JobView& v : c.pool().jobs({user, "", name}))
      if (!isFinal(v.record.state) && std::find(args.begin(), args.end(), v.record.id) == args.end())
        args.push_back(v.record.id);
    if (args.empty()) {
      std::cout << (c.json ? "{\"cancelled\":[]}" : "no job to cancel") << "\n";
      return 0;
    }
  }
  if (args.empty()) throw badInput("cancel needs a job ID (or several), or --name N or --user U");
  json out = json::array();
  for (const std::string& id : args) {
    const std::vector<std::string> ids = c.pool().cancelJob(id, signal);
    for (const std::string& done : ids) out.push_back(done);
    if (!c.json)
      std::cout << id << ": "
                << (ids.empty() ? "already ended" : "cancelled (" + std::to_string(ids.size()) + ")") << "\n";
  }
  if (c.json) std::cout << json{{"cancelled", out}}.dump() << "\n";
  return 0;
}

std::optional<int> signalNumber(const std::string& text) {
  static const std::pair<const char*, int> kNames[] = {
      {"TERM", SIGTERM}, {"INT", SIGINT},   {"KILL", SIGKILL}, {"HUP", SIGHUP},  {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"QUIT", SIGQUIT}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}};
  std::string name = text;
  for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (name.starts_with("SIG")) name = name.substr(3);
  for (const auto& [n, v] : kNames)
    if (name == n) return v;
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && p == text.data() + text.size() && v >= 1 && v <= 64) return v;
  return std::nullopt;
}

}  // namespace poolrun::pool::ctl
