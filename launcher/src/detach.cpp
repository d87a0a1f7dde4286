// poolrun --detach: a job handed to a poold, which keeps it and has a node's agent run it later
// (docs/jobs.md). What can be known now is checked now: the directory, the output files' folders,
// the dependencies and the array; the rest is the pool's.

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/launcher/commands.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/job_json.hpp"
#include "run_options.hpp"

extern char** environ;

namespace poolrun::launcher {
namespace {

// The options the stored command keeps: the agent gives the pool and the credential, and the
// detach options are the pool's, not the launcher's.
bool keptOption(const std::string& a) {
  for (const char* dropped :
       {"--detach", "--output=", "--error=", "--chdir=", "--export=", "--dependency=", "--array=", "--pool=",
        "--token-file=", "--ca=", "--adopt-lease=", "--mem-per-gpu="})
    if (a == dropped || (std::string_view(dropped).ends_with('=') && a.starts_with(dropped))) return false;
  return true;
}

std::vector<std::string> storedCommand(const RunOptions& o) {
  std::vector<std::string> out;
  for (const std::string& a : o.option_args)
    if (keptOption(a)) out.push_back(a);
  for (const auto& [key, value] : o.mca) out.insert(out.end(), {"--mca", key, value});
  out.push_back("--");
  out.insert(out.end(), o.program.begin(), o.program.end());
  return out;
}

// --export: ALL (this environment but the plan's variables and the pool credentials), NONE, or the
// variables named.
std::vector<std::string> jobEnvironment(const std::string& mode) {
  std::set<std::string> planned(plannedVariables().begin(), plannedVariables().end());
  for (const char* own :
       {"POOLRUN_TOKEN", "POOLRUN_CA", "POOLRUN_POOL", "POOLRUN_JOB_ID", "POOLRUN_ARRAY_TASK_ID"})
    planned.insert(own);
  std::set<std::string> named;
  const bool all = mode == "ALL";
  if (!all && mode != "NONE") {
    for (size_t at = 0; at <= mode.size();) {
      const size_t end = std::min(mode.find(',', at), mode.size());
      const std::string name = mode.substr(at, end - at);
      if (name.empty() || name.find('=') != std::string::npos)
        throw badInput("--export '" + common::printable(mode) +
                       "': give ALL, NONE or variable names (VAR,VAR)");
      named.insert(name);
      at = end + 1;
    }
  }
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = entry.substr(0, eq);
    if ((all && !planned.count(name)) || named.count(name)) env.push_back(entry);
  }
  return env;
}

// The folder `pattern` puts a file in must be one this user can write to (checked here, where the
// job is submitted: a shared file system shows the nodes' view).
void checkOutputFolder(const std::string& option, const std::string& pattern, const pool::JobRecord& probe) {
  const std::filesystem::path file = pool::expandJobPath(pattern, probe);
  const std::filesystem::path folder = file.parent_path();
  if (access(file.c_str(), W_OK) == 0) return;  // a file there already that this user may write (/dev/null)
  if (access(folder.c_str(), W_OK | X_OK) != 0)
    throw badInput(option + " '" + common::printable(pattern) + "': the job could not write to " +
                   folder.string() + " (" + std::strerror(errno) + "): give a folder you can write to");
}

// The program must be one the job can run: a path (from the job's directory) to an executable
// file, or a name found on the PATH. Checked here, where the job is submitted (a shared file system
// shows the nodes' view); a program that only the nodes have cannot be checked, so a name not on
// this PATH is refused with what to do.
void checkProgram(const std::string& program, const std::filesystem::path& cwd) {
  if (program.find('/') != std::string::npos) {
    const std::filesystem::path path = cwd / program;  // cwd / "/abs" is "/abs"
    std::string why;
    if (access(path.c_str(), X_OK) != 0)
      why = std::strerror(errno);
    else if (std::filesystem::is_directory(path))
      why = "a directory";
    if (!why.empty())
      throw badInput("the program '" + common::printable(program) + "' cannot be run from " + cwd.string() +
                     " (" + why + "): give an executable file");
    return;
  }
  const char* path = std::getenv("PATH");
  for (std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin"; !dirs.empty();) {
    const size_t colon = std::min(dirs.find(':'), dirs.size());
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(0, colon)) / program;
    if (access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return;
    dirs.remove_prefix(std::min(colon + 1, dirs.size()));
  }
  throw badInput("the program '" + common::printable(program) +
                 "' is not on the PATH here: give its path (./train.sh, /opt/app/bin/train)");
}

}  // namespace

int submitDetached(const RunOptions& o, std::ostream& out, std::ostream& err) {
  try {
    pool::JobSubmission sub;
    pool::JobSpec& s = sub.spec;
    s.name = o.job_name;
    s.uid = getuid();
    s.gid = getgid();
    std::vector<gid_t> groups(static_cast<size_t>(std::max(getgroups(0, nullptr), 0)));
    groups.resize(
        static_cast<size_t>(std::max(getgroups(static_cast<int>(groups.size()), groups.data()), 0)));
    s.groups.assign(groups.begin(), groups.end());
    s.command = storedCommand(o);
    std::error_code ec;
    s.cwd = std::filesystem::absolute(
                o.chdir.empty() ? std::filesystem::current_path() : std::filesystem::path(o.chdir), ec)
                .string();
    if (ec || access(s.cwd.c_str(), R_OK | X_OK) != 0)
      throw badInput("--chdir '" + common::printable(o.chdir.empty() ? s.cwd : o.chdir) +
                     "': the job could not work there (" + std::strerror(errno) +
                     "): give a directory you can enter and read");
    checkProgram(o.program.front(), s.cwd);
    s.env = jobEnvironment(o.export_mode);
    s.output = o.output;
    s.error = o.error;
    const mode_t mask = umask(022);
    umask(mask);
    s.umask = mask;
    s.request = leaseRequest(o);
    if (!o.dependency.empty()) s.dependencies = pool::parseDependencies(o.dependency);
    s.time_limit = o.timeout;
    s.requeue = o.requeue;
    s.mem_per_gpu = o.mem_per_gpu;
    if (!o.array.empty()) sub.array = pool::parseArray(o.array);
    pool::JobRecord probe;
    probe.id = "J1";
    probe.task = sub.array ? std::optional<int>(sub.array->tasks.front()) : std::nullopt;
    probe.spec = s;
    probe.spec.owner = pool::currentUser();
    checkOutputFolder("--output", s.output.empty() ? "poolrun-%j.out" : s.output, probe);
    if (!s.error.empty()) checkOutputFolder("--error", s.error, probe);

    std::unique_ptr<pool::PoolClient> pool = openJobPool(o);
    auto* control = dynamic_cast<pool::PoolControl*>(pool.get());
    if (control == nullptr) throw badInput("--detach needs a poold (pool here: '" + o.pool + "')");
    const pool::PoolControl::SubmittedJob job = control->submitJob(sub);
    out << job.id << "\n";
    return 0;
  } catch (const std::exception& e) {
    err << "poolrun: error: " << e.what() << "\n";
    const auto* pe = dynamic_cast<const Error*>(&e);
    return pe != nullptr && pe->code() == ErrorCode::kInternal ? 1 : 125;
  }
}

}  // namespace poolrun::launcher
