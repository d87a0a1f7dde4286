// What detached jobs cost, measured (label bench, never a pass/fail on time; docs/measurements.md):
//  1. 1,000 submissions to a poold over its API (four clients at once, keep-alive), jobs/s;
//  2. from the grant to the program's first line: a detached job (the agent starts its launcher)
//     against a foreground poolrun, each from poold's grant event to the time the program wrote;
//  3. 200 trivial one-GPU jobs to completion through poold and its agent (8 GPUs), against 200
//     through the single-machine Slurm of the tests (`sbatch --wrap`, 2 nodes of 4 fake GPUs).
// Run: ctest --test-dir build -L bench -R JobsBench --output-on-failure (as root, ~1 minute).

#include <pwd.h>

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "jobs_pool.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/pool/open_pool.hpp"

namespace poolrun::test {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class JobsBench : public JobsPoolTest {
 protected:
  // The time of the last event of `kind` (whose `field` is `value`, where one is given).
  std::optional<std::chrono::system_clock::time_point> eventTime(const std::string& kind,
                                                                 const std::string& field,
                                                                 const std::string& value) {
    std::istringstream lines(poolctl("--json events"));  // one event a line
    std::optional<std::chrono::system_clock::time_point> at;
    for (std::string line; std::getline(lines, line);) {
      const json e = json::parse(line, nullptr, false);
      if (e.is_object() && e.value("kind", "") == kind &&
          (field.empty() || (e.contains(field) && e[field] == value)))
        at = common::parseRfc3339(e.value("time", ""));
    }
    return at;
  }

  // Waits until `count` jobs of `name` have ended; those that did not complete, each with why.
  std::vector<std::string> waitEnded(const std::string& name, size_t count, seconds limit) {
    for (auto end = Clock::now() + limit; Clock::now() < end; std::this_thread::sleep_for(milliseconds(50))) {
      const json jobs = json::parse(poolctl("--json history --name " + name), nullptr, false);
      if (jobs.size() < count) continue;
      std::vector<std::string> failed;
      for (const json& j : jobs)
        if (j.value("state", "") != "COMPLETED")
          failed.push_back(j.value("id", "") + " " + j.value("state", "") + ": " + j.value("reason", ""));
      return failed;
    }
    ADD_FAILURE() << count << " jobs of " << name
                  << " did not end; agent: " << slurp(dir.path() / "agent-err");
    return {};
  }
};

TEST_F(JobsBench, SubmissionsStartsAndThroughputAgainstSlurm) {
  // 1. Submissions, held by a dependency on a job that sleeps, cancelled after.
  const std::string blocker = submit("-n 1 --name blocker /bin/sleep 600");
  waitForState(blocker, "RUNNING");
  pool::JobSubmission sub;
  sub.spec.name = "held";
  sub.spec.uid = getpwnam(user.c_str())->pw_uid;
  sub.spec.gid = getpwnam(user.c_str())->pw_gid;
  sub.spec.cwd = work.string();
  sub.spec.command = {"-n", "1", "--simulate", "--", "/bin/true"};
  sub.spec.request.gpus = 1;
  sub.spec.dependencies = pool::parseDependencies("afterok:" + blocker);
  constexpr int kClients = 4, kEach = 250;
  std::atomic<int> refused = 0;
  const auto submitStart = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&] {
      pool::ClientOptions o;
      o.token = "tok-" + user + "-0123456789";
      std::unique_ptr<pool::PoolControl> pool = pool::openPoolControl(uri, o);
      for (int i = 0; i < kEach; ++i) try {
          pool->submitJob(sub);
        } catch (const std::exception&) {
          ++refused;
        }
    });
  for (std::thread& t : clients) t.join();
  const double submitSeconds = secondsSince(submitStart);
  EXPECT_EQ(refused, 0);
  // The command line's own cost: 20 `poolrun --detach` one after another.
  const auto cliStart = Clock::now();
  for (int i = 0; i < 20; ++i) submit("--dependency afterok:" + blocker + " --name held -n 1 /bin/true");
  const double cliSeconds = secondsSince(cliStart) / 20;
  poolctl("cancel --name held");
  poolctl("cancel --name blocker");
  waitForState(blocker, "CANCELLED");

  // 2. Grant to the program's first line, detached and in the foreground (five of each).
  script("stamp.sh", "#!/bin/sh\ndate +%s.%N > \"$1\"\n");
  auto stampedAt = [&](const std::filesystem::path& file) {
    for (auto end = Clock::now() + seconds(30); Clock::now() < end && slurp(file).empty();)
      std::this_thread::sleep_for(milliseconds(20));
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::duration<double>(std::atof(slurp(file).c_str()))));
  };
  std::vector<double> detached, foreground;
  for (int i = 0; i < 5; ++i) {
    const std::filesystem::path d = work / ("d" + std::to_string(i)), f = work / ("f" + std::to_string(i));
    const std::string id = submit("-n 1 --name stamp ./stamp.sh " + d.string());
    const json j = waitForState(id, "COMPLETED");
    const auto granted = eventTime("grant", "lease", j.value("lease", ""));
    if (granted) detached.push_back(std::chrono::duration<double>(stampedAt(d) - *granted).count() * 1e3);
    const ProcessResult r = asUser("--simulate -n 1 ./stamp.sh " + f.string());
    ASSERT_EQ(r.status, 0) << r.err;
    const auto lastGrant = eventTime("grant", "", "");
    if (lastGrant)
      foreground.push_back(std::chrono::duration<double>(stampedAt(f) - *lastGrant).count() * 1e3);
  }
  std::sort(detached.begin(), detached.end());
  std::sort(foreground.begin(), foreground.end());
  ASSERT_EQ(detached.size(), 5u);
  ASSERT_EQ(foreground.size(), 5u);

  // 3. 200 one-GPU jobs to completion, poold and its agent.
  constexpr int kJobs = 200;
  const auto ours = Clock::now();
  for (int i = 0; i < kJobs; ++i) submit("-n 1 --name many --output many-%j.out /bin/true");
  const double oursSubmitted = secondsSince(ours);
  const std::vector<std::string> failed = waitEnded("many", kJobs, seconds(600));
  const double oursSeconds = secondsSince(ours);
  for (const std::string& f : failed) {
    const std::string id = f.substr(0, f.find(' '));
    ADD_FAILURE() << f << "\n" << slurp(work / ("many-" + id + ".out"));
  }

  // ... and Slurm's.
  TempDir slurm;
  const std::string cluster = (sourceDir() / "scripts" / "slurm-test-cluster.sh").string();
  const ProcessResult started = runShell(cluster + " start " + slurm.path().string() + " 4");
  double slurmSeconds = 0, slurmSubmitted = 0;
  if (started.status == 0) {
    const std::string env = "SLURM_CONF=" + (slurm.path() / "etc" / "slurm.conf").string() + " ";
    const auto theirs = Clock::now();
    for (int i = 0; i < kJobs; ++i) {
      const ProcessResult s = runShell(env + "sbatch --gres=gpu:1 -o /dev/null --wrap /bin/true");
      ASSERT_EQ(s.status, 0) << s.err;
    }
    slurmSubmitted = secondsSince(theirs);
    for (auto end = Clock::now() + seconds(600); Clock::now() < end;) {
      if (runShell(env + "squeue -h | wc -l").out == "0\n") break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    slurmSeconds = secondsSince(theirs);
  }
  runShell(cluster + " stop " + slurm.path().string());

  std::printf(
      "jobs-bench: 1,000 submissions over the API (%d clients): %.2f s, %.0f jobs/s; poolrun --detach: %.1f "
      "ms "
      "each\n",
      kClients, submitSeconds, kClients * kEach / submitSeconds, cliSeconds * 1e3);
  std::printf(
      "jobs-bench: grant to the program's first line, median of 5: detached %.0f ms (%.0f-%.0f), "
      "foreground %.0f ms (%.0f-%.0f), difference %.0f ms\n",
      detached[2], detached[0], detached[4], foreground[2], foreground[0], foreground[4],
      detached[2] - foreground[2]);
  std::printf("jobs-bench: %d one-GPU jobs to completion: poold %.1f s (%.1f jobs/s; submitted in %.1f s)",
              kJobs, oursSeconds, kJobs / oursSeconds, oursSubmitted);
  if (slurmSeconds > 0)
    std::printf(", Slurm %.1f s (%.1f jobs/s; submitted in %.1f s), poold/Slurm %.2f\n", slurmSeconds,
                kJobs / slurmSeconds, slurmSubmitted, slurmSeconds / oursSeconds);
  else
    std::printf("; Slurm did not start: %s\n", started.err.c_str());
}

}  // namespace
}  // namespace poolrun::test
