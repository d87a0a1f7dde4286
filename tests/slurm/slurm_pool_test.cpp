// The Slurm pool against a scripted Slurm (environment and command outputs), and the launcher's
// Slurm rules: GPUs the probe cannot see, ConstrainDevices numbering, the srun command line.

#include <gtest/gtest.h>

#include <sstream>

#include "poolrun/common/error.hpp"
#include "poolrun/launcher/slurm.hpp"
#include "poolrun/launcher/supervisor.hpp"
#include "poolrun/pool/slurm.hpp"
#include "support/synthetic.hpp"

namespace poolrun::pool::slurm {
namespace {

class FakeSlurm : public SlurmSystem {
 public:
  std::map<std::string, std::string> vars;
  std::map<std::string, Output> outputs;  // joined argv -> output
  std::vector<std::string> calls;
  std::vector<std::string> relinquished;
  Allocation granted;
  bool refuse = false;

  std::optional<std::string> env(const std::string& name) const override {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  Output run(const std::vector<std::string>& argv) override {
    std::string key;
    for (const std::string& a : argv) key += (key.empty() ? "" : " ") + a;
    calls.push_back(key);
    auto it = outputs.find(key);
    return it == outputs.end() ? Output{1, "", "scontrol: error: no such thing"} : it->second;
  }
  Allocation allocate(const std::vector<std::string>& args) override {
    std::string key;
    for (const std::string& a : args) key += (key.empty() ? "" : " ") + a;
    calls.push_back(key);
    if (refuse) throw Error(ErrorCode::kUnsupported, "salloc refused");
    return granted;
  }
  void relinquish(const std::string& job) override { relinquished.push_back(job); }
};

constexpr const char* kTwoNodes =
    "JobId=12 JobName=x\n   JobState=RUNNING\n   NodeList=sn[01-02]\n"
    "     Nodes=sn01 CPU_IDs=0-3 Mem=0 GRES=gpu:4(IDX:0-3)\n"
    "     Nodes=sn02 CPU_IDs=0-3 Mem=0 GRES=gpu:2(IDX:1,3)\n";

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SlurmPool, OutsideAnAllocationSaysWhatToDo) {
  auto fake = std::make_unique<FakeSlurm>();
  auto pool = openSlurmPool("slurm", std::move(fake));
  LeaseRequest r;
  r.gpus = 2;
  std::string msg = what([&] { pool->acquire(r); });
  EXPECT_NE(msg.find("SLURM_JOB_ID is not set"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--pool slurm:PARTITION"), std::string::npos) << msg;
  EXPECT_NE(msg.find("salloc"), std::string::npos) << msg;
  EXPECT_NE(what([] { openSlurmPool("slurm:", std::make_unique<FakeSlurm>()); }).find("slurm:PARTITION"),
            std::string::npos);
}

TEST(SlurmPool, AnAllocationKeepsItsSizeSoNoElasticLease) {
  auto fake = std::make_unique<FakeSlurm>();
  fake->vars["SLURM_JOB_ID"] = "12";
  fake->outputs["scontrol show job -d 12"] = {0, kTwoNodes, ""};
  auto pool = openSlurmPool("slurm", std::move(fake));
  LeaseRequest r;
  r.gpus = 2;
  r.max_gpus = 6;
  std::string msg = what([&] { pool->acquire(r); });
  EXPECT_NE(msg.find("-n 2:6: a Slurm allocation keeps its size, so "), std::string::npos) << msg;
  EXPECT_NE(msg.find("has no elastic leases; ask for -n N"), std::string::npos) << msg;
}

TEST(SlurmPool, InsideTheLeaseIsTheAllocation) {
  auto fake = std::make_unique<FakeSlurm>();
  FakeSlurm& f = *fake;
  f.vars["SLURM_JOB_ID"] = "12";
  f.outputs["scontrol show job -d 12"] = {0, kTwoNodes, ""};
  auto pool = openSlurmPool("slurm", std::move(fake));
  LeaseRequest r;
  r.gpus = 6;
  Lease l = pool->acquire(r);
  EXPECT_EQ(l.id.rfind("slurm-12-", 0), 0u) << l.id;
  EXPECT_EQ(jobOfLease(l.id), "12");
  EXPECT_EQ(jobOfLease("L3646d3dbefa90940"), "");
  EXPECT_EQ(formatGpus(l.gpus), "sn01:0-3 sn02:1,3");
  EXPECT_TRUE(l.env.empty()) << "already inside: nothing to set";
  EXPECT_EQ(pool->renew(l.id).id, l.id);
  pool->release(l.id);
  EXPECT_TRUE(f.relinquished.empty()) << "Slurm owns the allocation";

  r.gpus = 4;
  r.gpus_per_node = 2;
  EXPECT_EQ(formatGpus(pool->acquire(r).gpus), "sn01:0-1 sn02:1,3");
  r.gpus = 8;
  r.gpus_per_node = 0;
  std::string msg = what([&] { pool->acquire(r); });
  EXPECT_NE(msg.find("-n 8 does not fit in Slurm job 12, which holds 6 GPU(s): sn01:0-3 sn02:1,3"),
            std::string::npos)
      << msg;
}

TEST(SlurmPool, InsideAStepItsOwnGpus) {
  auto fake = std::make_unique<FakeSlurm>();
  FakeSlurm& f = *fake;
  f.vars = {{"SLURM_JOB_ID", "12"},
            {"SLURM_STEP_ID", "0"},
            {"SLURM_STEP_GPUS", "2,3"},
            {"SLURMD_NODENAME", "sn01"}};
  f.outputs["scontrol show job -d 12"] = {0, kTwoNodes, ""};
  auto pool = openSlurmPool("slurm", std::move(fake));
  LeaseRequest r;
  r.gpus = 4;
  EXPECT_EQ(formatGpus(pool->acquire(r).gpus), "sn01:2-3 sn02:1,3");
}

TEST(SlurmPool, WithoutScontrolOneNodeFromTheVariables) {
  auto fake = std::make_unique<FakeSlurm>();
  fake->vars = {{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "gpu7"}, {"SLURM_JOB_GPUS", "0,1"}};
  auto pool = openSlurmPool("slurm", std::move(fake));
  LeaseRequest r;
  r.gpus = 2;
  EXPECT_EQ(formatGpus(pool->acquire(r).gpus), "gpu7:0-1");
}

TEST(SlurmPool, AnAllocationWithoutGpus) {
  auto fake = std::make_unique<FakeSlurm>();
  fake->vars["SLURM_JOB_ID"] = "9";
  fake->outputs["scontrol show job -d 9"] = {
      0, "JobId=9\n   NodeList=cpu01\n     Nodes=cpu01 CPU_IDs=0 Mem=0 GRES=\n", ""};
  auto pool = openSlurmPool("slurm", std::move(fake));
  LeaseRequest r;
  r.gpus = 1;
  std::string msg = what([&] { pool->acquire(r); });
  EXPECT_NE(msg.find("Slurm job 9 holds no GPUs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--gpus-per-node"), std::string::npos) << msg;
}

TEST(SlurmPool, OutsideAllocatesAndGivesBack) {
  auto fake = std::make_unique<FakeSlurm>();
  FakeSlurm& f = *fake;
  f.granted = {"12", {{"SLURM_JOB_ID", "12"}, {"SLURM_JOB_NODELIST", "sn[01-02]"}}};
  f.outputs["scontrol show job -d 12"] = {0, kTwoNodes, ""};
  auto pool = openSlurmPool("slurm:gpu", std::move(fake));
  EXPECT_EQ(pool->describe(), "slurm:gpu");
  LeaseRequest r;
  r.gpus = 4;
  r.gpus_per_node = 2;
  Lease l = pool->acquire(r);
  EXPECT_EQ(f.calls.front().rfind("salloc --partition=gpu", 0), 0u) << f.calls.front();
  EXPECT_EQ(l.env.at("SLURM_JOB_NODELIST"), "sn[01-02]");
  pool->release(l.id);
  pool->release(l.id);
  EXPECT_EQ(f.relinquished, std::vector<std::string>{"12"}) << "given back once";

  // A lease that cannot be made from the allocation gives it back at once.
  r.gpus = 8;
  r.gpus_per_node = 4;
  EXPECT_THROW(pool->acquire(r), Error);
  EXPECT_EQ(f.relinquished.size(), 2u);
}

}  // namespace
}  // namespace poolrun::pool::slurm

namespace poolrun::launcher {
namespace {

topo::ClusterNode node(const std::string& name, int gpus, int nics) {
  topo::ClusterNode n;
  n.name = name;
  test::SyntheticSpec spec;
  spec.numa = 1;
  spec.cores_per_numa = 4;
  spec.threads = 1;
  spec.switches = 1;
  spec.gpus = gpus;
  spec.nics = nics;
  n.topology = std::make_shared<topo::NodeTopology>(test::synthetic(spec));
  return n;
}

TEST(SlurmLaunch, GpusTheProbeCannotSeeAreAdded) {
  topo::NodeTopology t = *node("a", 0, 0).topology;
  EXPECT_EQ(addSlurmGpus(t, {1, 3}), (std::vector<size_t>{0, 1, 2, 3}));
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_TRUE(t.gpus[3].isNvidia());
  EXPECT_EQ(t.gpus[3].index, 3);
  // An index no node has is refused, naming it, rather than adding that many GPUs.
  topo::NodeTopology huge = *node("a", 0, 0).topology;
  try {
    addSlurmGpus(huge, {1'000'000});
    ADD_FAILURE() << "GPU 1000000 was added";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1000000"), std::string::npos) << e.what();
    EXPECT_TRUE(huge.gpus.empty());
  }
  // A plan on them: every rank its Slurm index, cores from the whole node, no NIC.
  topo::ClusterNode n = node("sn01", 0, 0);
  auto copy = std::make_shared<topo::NodeTopology>(*n.topology);
  addSlurmGpus(*copy, {0, 1});
  n.topology = copy;
  PlanRequest req;
  req.ranks = 2;
  JobPlan plan = makePlan({{&n, {0, 1}}}, req);
  ASSERT_EQ(plan.ranks.size(), 2u);
  std::map<std::string, std::string> env1(plan.ranks[1].env.begin(), plan.ranks[1].env.end());
  EXPECT_EQ(env1["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_FALSE(plan.ranks[0].cpuset.empty());
  EXPECT_FALSE(plan.ranks[1].rankfile_slots.empty());
}

TEST(SlurmLaunch, ConstrainedDevicesCountFromZero) {
  topo::ClusterNode n = node("sn01", 4, 4);
  PlanRequest req;
  req.ranks = 2;
  JobPlan plan = makePlan({{&n, {2, 3}}}, req);
  renumberForConstrainedDevices(plan, {{"sn01", {2, 3}}});
  for (const RankPlan& r : plan.ranks) {
    std::map<std::string, std::string> env(r.env.begin(), r.env.end());
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], std::to_string(r.gpu - 2)) << "rank " << r.rank;
  }
}

TEST(SlurmLaunch, SrunPutsEveryRankWhereThePlanSays) {
  topo::ClusterNode a = node("sn01", 2, 2), b = node("sn02", 2, 2);
  PlanRequest req;
  req.ranks = 4;
  JobPlan plan = makePlan({{&a, {0, 1}}, {&b, {0, 1}}}, req);
  LaunchSpec spec;
  spec.plan = &plan;
  spec.job_dir = "/jobs/slurm-12";
  spec.rank_wrapper = "/opt/poolrun/bin/poolrun-rank";
  spec.program = {"./train", "--epochs", "3"};
  spec.job_env = {{"POOLRUN_RANK_ENV", "{}"}};
  spec.user_exports = {"USER_A=1", "USER_B"};
  spec.user_mca = {{"btl", "self,tcp"}};
  MpiCommand cmd = buildSrunCommand(spec);
  EXPECT_EQ(cmd.hostfile, "sn01\nsn01\nsn02\nsn02\n");
  std::string line;
  for (const std::string& s : cmd.argv) line += s + " ";
  EXPECT_NE(line.find("srun --ntasks=4 --nodes=2 --distribution=arbitrary --cpu-bind=none"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("--export=ALL /opt/poolrun/bin/poolrun-rank ./train --epochs 3"), std::string::npos)
      << line;
  std::map<std::string, std::string> env(cmd.env.begin(), cmd.env.end());
  EXPECT_EQ(env["SLURM_HOSTFILE"], "/jobs/slurm-12/hostfile");
  EXPECT_EQ(env["USER_A"], "1");
  EXPECT_EQ(env["OMPI_MCA_btl"], "self,tcp");
  EXPECT_EQ(env["OMPI_MCA_pml"], "ucx") << "an IB plan";
  EXPECT_EQ(env["POOLRUN_RANK_ENV"], "{}");
}

TEST(SlurmLaunch, ProbeOutputOfSeveralNodes) {
  std::string out =
      "0: @poolrun-node sn01\n1: @poolrun-node sn02\n1: {\n0: {\n0:   \"a\": 1\n1:   \"b\": 2\n"
      "1: }\n0: }\nsrun: warning: something\n";
  auto probed = parseProbeOutput(out);
  ASSERT_EQ(probed.size(), 2u);
  EXPECT_EQ(probed["sn01"], "{\n  \"a\": 1\n}\n");
  EXPECT_EQ(probed["sn02"], "{\n  \"b\": 2\n}\n");
  EXPECT_TRUE(parseProbeOutput("").empty());
}

TEST(SlurmLaunch, SrunSaysWhichTaskFailed) {
  auto code = parseMpiFailure(
      "srun: error: sn01: task 3: Exited with exit code 7\nsrun: launch/slurm: _step_signal: Terminating\n");
  ASSERT_TRUE(code);
  EXPECT_EQ(code->rank, 3);
  EXPECT_EQ(code->node, "sn01");
  EXPECT_EQ(code->exit_code, 7);
  auto killed = parseMpiFailure("srun: error: gpu12: tasks 4-5: Killed\n");
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->rank, 4);
  EXPECT_EQ(killed->signal, 9);
  auto segv = parseMpiFailure("srun: error: gpu12: task 0: Segmentation fault (core dumped)\n");
  ASSERT_TRUE(segv);
  EXPECT_EQ(segv->signal, 11);
  EXPECT_FALSE(parseMpiFailure("srun: error: Unable to allocate resources: Invalid partition name\n"));
}

// `poolrun doctor --slurm`: one doctor per node through srun, one report with the node on every
// check; a node that sends nothing is a failure naming it.
TEST(SlurmDoctorTest, OneReportForTheAllocation) {
  pool::slurm::FakeSlurm fake;
  fake.vars = {{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "sn[01-03]"}};
  std::string script =
      "printf '@poolrun-node %s\\n' \"$SLURMD_NODENAME\"; exec '/opt/poolrun' doctor --json '--nic' 'mlx5_0'";
  std::string key =
      "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --overlap --label --quiet /bin/sh -c " + script;
  fake.outputs[key] = {
      1,
      "1: @poolrun-node sn02\n0: @poolrun-node sn01\n"
      "0: {\"schema\": \"poolrun.doctor/1\", \"checks\": [\n"
      "1: {\"schema\": \"poolrun.doctor/1\", \"checks\": [{\"id\": \"rdma.port\", \"status\": \"FAIL\",\n"
      "0: {\"id\": \"rdma.port\", \"status\": \"PASS\", \"subject\": \"mlx5_0/1\", \"evidence\": \"4: "
      "ACTIVE\", \"fix\": \"\"}]}\n"
      "1: \"subject\": \"mlx5_0/1\", \"evidence\": \"1: DOWN\", \"fix\": \"check the cable\"}]}\n",
      "srun: error: sn03: task 2: Exited with exit code 127"};
  std::ostringstream err;
  doctor::Report r = launcher::doctorOnAllocation(fake, "/opt/poolrun", {"--nic", "mlx5_0"}, err);
  ASSERT_EQ(r.checks.size(), 3u) << doctor::toText(r);
  EXPECT_EQ(r.checks[0].node, "sn01");
  EXPECT_EQ(r.checks[0].status, doctor::Status::kPass);
  EXPECT_EQ(r.checks[1].node, "sn02");
  EXPECT_EQ(r.checks[1].status, doctor::Status::kFail);
  EXPECT_EQ(r.checks[1].evidence, "1: DOWN");
  EXPECT_EQ(r.checks[2].node, "sn03");
  EXPECT_EQ(r.checks[2].id, "doctor");
  EXPECT_EQ(r.checks[2].status, doctor::Status::kFail);
  EXPECT_NE(r.checks[2].evidence.find("no report from this node"), std::string::npos);
  EXPECT_NE(r.checks[2].evidence.find("task 2: Exited with exit code 127"), std::string::npos);
  EXPECT_NE(doctor::toText(r).find("NODE"), std::string::npos);

  pool::slurm::FakeSlurm outside;
  EXPECT_THROW(
      {
        try {
          launcher::doctorOnAllocation(outside, "/opt/poolrun", {}, err);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("SLURM_JOB_ID is not set"), std::string::npos);
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace poolrun::launcher
