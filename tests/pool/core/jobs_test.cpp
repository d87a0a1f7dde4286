// Jobs the pool keeps (jobs.hpp): states by name, --dependency and --array as a user writes them
// (and as a hostile one does), and the verdict of a job's dependencies.

#include "poolrun/pool/jobs.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/job_json.hpp"

namespace poolrun::pool {
namespace {

std::string refusal(std::string_view text, bool array) {
  try {
    array ? (void)parseArray(text) : (void)parseDependencies(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    return e.what();
  }
  return "";
}

TEST(JobStates, ReadAndWrittenAsSqueueNamesThem) {
  for (JobState s :
       {JobState::kPending, JobState::kRunning, JobState::kCompleted, JobState::kFailed, JobState::kCancelled,
        JobState::kTimeout, JobState::kPreempted, JobState::kRequeued, JobState::kNodeFail})
    EXPECT_EQ(jobStateFromString(toString(s)), s) << toString(s);
  EXPECT_EQ(jobStateFromString("node_fail"), JobState::kNodeFail);
  EXPECT_EQ(jobStateFromString("DONE"), std::nullopt);
  EXPECT_FALSE(isFinal(JobState::kPending));
  EXPECT_FALSE(isFinal(JobState::kRequeued));
  EXPECT_TRUE(isFinal(JobState::kCancelled));
}

TEST(JobIds, AreJAndDigitsWithATaskIndex) {
  for (const char* good : {"J1", "J123456789012345678", "J12_0", "J12_9999999"})
    EXPECT_TRUE(isJobId(good)) << good;
  for (const char* bad : {"", "J", "j12", "J12_", "J_3", "J1234567890123456789", "J12_12345678", "J12x",
                          "L12", "J1 2", "J12_3_4", "J-1"})
    EXPECT_FALSE(isJobId(bad)) << bad;
}

TEST(JobDependencies, ReadEveryKindAndWriteThemBack) {
  const auto deps = parseDependencies("afterok:J1:J2_3,afterany:J4,afternotok:J5,singleton");
  ASSERT_EQ(deps.size(), 4u);
  EXPECT_EQ(deps[0].kind, JobDependency::Kind::kAfterOk);
  EXPECT_EQ(deps[0].jobs, (std::vector<std::string>{"J1", "J2_3"}));
  EXPECT_EQ(deps[3].kind, JobDependency::Kind::kSingleton);
  EXPECT_EQ(dependencyText(deps), "afterok:J1:J2_3,afterany:J4,afternotok:J5,singleton");
}

TEST(JobDependencies, BadOnesAreNamed) {
  EXPECT_NE(refusal("", false).find("is empty"), std::string::npos);
  EXPECT_NE(refusal("before:J1", false).find("'before' is not a kind of dependency"), std::string::npos);
  EXPECT_NE(refusal("afterok", false).find("afterok needs a job"), std::string::npos);
  EXPECT_NE(refusal("afterok:", false).find("'' is not a job id"), std::string::npos);
  EXPECT_NE(refusal("afterok:12", false).find("'12' is not a job id"), std::string::npos);
  EXPECT_NE(refusal("singleton:J1", false).find("singleton takes no job"), std::string::npos);
  EXPECT_NE(refusal("afterok:J1,,afterany:J2", false).find("is not a kind"), std::string::npos);
  EXPECT_NE(refusal("afterok:J\xff", false).find("\\xff"), std::string::npos);
  std::string many = "afterok";
  for (int i = 0; i < 101; ++i) many += ":J" + std::to_string(i + 1);
  EXPECT_NE(refusal(many, false).find("names 101 jobs; at most 100"), std::string::npos);
  EXPECT_NE(refusal(std::string(100'000, 'a'), false).find("is not a kind"), std::string::npos);
}

TEST(JobArrays, RangesListsStepsAndALimit) {
  EXPECT_EQ(parseArray("0-99%8").tasks.size(), 100u);
  EXPECT_EQ(parseArray("0-99%8").limit, 8);
  EXPECT_EQ(parseArray("1,3,5-7").tasks, (std::vector<int>{1, 3, 5, 6, 7}));
  EXPECT_EQ(parseArray("0-15:4").tasks, (std::vector<int>{0, 4, 8, 12}));
  EXPECT_EQ(parseArray("3,3,1").tasks, (std::vector<int>{1, 3}));
  EXPECT_EQ(parseArray("7").limit, 0);
}

TEST(JobArrays, BadOnesAreNamed) {
  EXPECT_NE(refusal("", true).find("no index"), std::string::npos);
  EXPECT_NE(refusal("0-9%0", true).find("a limit of 0"), std::string::npos);
  EXPECT_NE(refusal("0-9%", true).find("not a whole number"), std::string::npos);
  EXPECT_NE(refusal("0-9%-1", true).find("not a whole number"), std::string::npos);
  EXPECT_NE(refusal("9-0", true).find("runs backwards"), std::string::npos);
  EXPECT_NE(refusal("-1", true).find("is not an index"), std::string::npos);
  EXPECT_NE(refusal("0-9:0", true).find("step"), std::string::npos);
  EXPECT_NE(refusal("0-2000000", true).find("over 1000000"), std::string::npos);
  EXPECT_NE(refusal("0-10000", true).find("more than 10000 tasks"), std::string::npos);
  EXPECT_NE(refusal("99999999999999999999", true).find("is not an index"), std::string::npos);
  EXPECT_NE(refusal("a-b", true).find("'a-b' is not an index"), std::string::npos);
  EXPECT_NE(refusal("1,,2", true).find("'' is not an index"), std::string::npos);
}

TEST(JobDependencies, TheVerdictFollowsTheStatesOfTheJobsNamed) {
  std::map<std::string, JobState> states{{"J1", JobState::kCompleted},
                                         {"J2", JobState::kFailed},
                                         {"J3", JobState::kRunning},
                                         {"J4", JobState::kRequeued}};
  auto stateOf = [&](const std::string& id) -> std::optional<JobState> {
    auto it = states.find(id);
    return it == states.end() ? std::nullopt : std::optional<JobState>(it->second);
  };
  auto judge = [&](std::string_view deps, bool busy = false) {
    return judgeDependencies(parseDependencies(deps), stateOf, [busy] { return busy; });
  };
  using K = DependencyVerdict::Kind;
  EXPECT_EQ(judge("afterok:J1").kind, K::kReady);
  EXPECT_EQ(judge("afterany:J1:J2").kind, K::kReady);
  EXPECT_EQ(judge("afternotok:J2").kind, K::kReady);
  const DependencyVerdict running = judge("afterok:J1:J3");
  EXPECT_EQ(running.kind, K::kWaiting);
  EXPECT_EQ(running.reason, "Dependency (afterok:J3 RUNNING)");
  EXPECT_EQ(judge("afterany:J4").kind, K::kWaiting);  // requeued: pending again
  const DependencyVerdict failed = judge("afterok:J3,afterok:J2");
  EXPECT_EQ(failed.kind, K::kImpossible);
  EXPECT_EQ(failed.reason, "DependencyNeverSatisfied (afterok:J2 ended FAILED)");
  EXPECT_EQ(judge("afternotok:J1").kind, K::kImpossible);
  EXPECT_EQ(judge("afterany:J99").reason, "DependencyNeverSatisfied (afterany:J99: no such job)");
  EXPECT_EQ(judge("singleton", true).kind, K::kWaiting);
  EXPECT_EQ(judge("singleton", false).kind, K::kReady);
}

}  // namespace
}  // namespace poolrun::pool

namespace poolrun::pool {
namespace {

JobRecord sampleJob() {
  JobRecord j;
  j.id = "J12_3";
  j.task = 3;
  j.array_limit = 4;
  j.spec.name = "train";
  j.spec.owner = "alice";
  j.spec.uid = 1000;
  j.spec.gid = 1000;
  j.spec.groups = {27, 1000};
  j.spec.command = {"-n", "8", "./train", "--epochs", "3"};
  j.spec.cwd = "/home/alice/run";
  j.spec.env = {"PATH=/usr/bin", "OMP_NUM_THREADS=4"};
  j.spec.output = "out-%j_%a.log";
  j.spec.request.gpus = 8;
  j.spec.request.owner = "alice";
  j.spec.dependencies = parseDependencies("afterok:J11,singleton");
  j.spec.time_limit = std::chrono::seconds(3600);
  j.spec.requeue = true;
  j.state = JobState::kFailed;
  j.reason = "rank 3 on n02 exited with 1";
  j.submitted = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'764'000'000'000));
  j.started = j.submitted + std::chrono::seconds(5);
  j.ended = j.started + std::chrono::seconds(60);
  j.lease = "L0123456789abcdef";
  j.exit_status = 1;
  j.failed_node = "n02";
  j.failed_rank = 3;
  j.restarts = 1;
  return j;
}

TEST(JobRecords, RoundTripThroughTheirJson) {
  const JobRecord j = sampleJob();
  EXPECT_EQ(jobFromJson(toJson(j)), j);
  JobRecord plain;
  plain.id = "J1";
  plain.spec.owner = "bob";
  plain.spec.command = {"./a.out"};
  plain.spec.cwd = "/tmp";
  plain.spec.request.gpus = 1;
  EXPECT_EQ(jobFromJson(toJson(plain)), plain);
}

TEST(JobRecords, ABrokenRecordIsNamedByItsField) {
  auto broken = [](const std::function<void(nlohmann::json&)>& change) -> std::string {
    nlohmann::json doc = toJson(sampleJob());
    change(doc);
    try {
      jobFromJson(doc);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(broken([](auto& d) { d["id"] = "X1"; }).find("'X1' is not a job id"), std::string::npos);
  EXPECT_NE(broken([](auto& d) { d["state"] = "DONE"; }).find("'DONE' is not a job state"),
            std::string::npos);
  EXPECT_NE(broken([](auto& d) { d["schema"] = "poolrun.job/9"; }).find("is not poolrun.job/1"),
            std::string::npos);
  EXPECT_NE(broken([](auto& d) {
              d["spec"]["command"] = {1, 2};
            }).find("expected a list of strings"),
            std::string::npos);
  EXPECT_NE(broken([](auto& d) { d["spec"]["command"] = nlohmann::json::array(); }).find("the list is empty"),
            std::string::npos);
  EXPECT_NE(broken([](auto& d) { d["spec"]["uid"] = -1; }).find("uid"), std::string::npos);
  EXPECT_NE(broken([](auto& d) { d["spec"].erase("owner"); }).find("owner"), std::string::npos);
  EXPECT_NE(broken([](auto& d) { d["spec"]["dependency"] = "after:J1"; }).find("not a kind of dependency"),
            std::string::npos);
}

TEST(JobRecords, OutputPathsTakeTheJobsIdTaskOwnerAndName) {
  const JobRecord j = sampleJob();
  EXPECT_EQ(expandJobPath("out-%j_%a.log", j), "/home/alice/run/out-J12_3.log");
  EXPECT_EQ(expandJobPath("/scratch/%u/%x-%j.%%", j), "/scratch/alice/train-J12.%");
  JobRecord alone = j;
  alone.id = "J7";
  alone.task.reset();
  EXPECT_EQ(expandJobPath("poolrun-%j%a.out", alone), "/home/alice/run/poolrun-J7.out");
  for (const char* bad : {"out-%q", "out-%", "%\xff"}) EXPECT_THROW(expandJobPath(bad, j), Error) << bad;
}

}  // namespace
}  // namespace poolrun::pool
