// The rank side without processes: a rank's identity and torch.distributed variables from its
// environment, binding against a fake machine, and what the launcher hands every rank.

#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <optional>

#include "poolrun/common/error.hpp"
#include "poolrun/launcher/mpi.hpp"
#include "poolrun/runtime/port_check.hpp"
#include "poolrun/runtime/rank_env.hpp"
#include "poolrun/runtime/rank_info.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

// The rank core, which poolrun-rank runs on.
#include "core/binding.hpp"
#include "core/system.hpp"
#include "core_adapters.hpp"

namespace poolrun::runtime {
namespace {

using topo::CpuSet;

std::map<std::string, std::string> vars(const std::vector<std::pair<std::string, std::string>>& v) {
  return {v.begin(), v.end()};
}

TEST(RankInfoTest, FromThePlan) {
  RankInfo i = rankInfo({{"RANK", "5"},
                         {"WORLD_SIZE", "16"},
                         {"LOCAL_RANK", "5"},
                         {"LOCAL_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_RANK", "5"},
                         {"MASTER_ADDR", "node01"},
                         {"MASTER_PORT", "29500"}});
  EXPECT_EQ(vars(torchVariables(i)), (std::map<std::string, std::string>{{"RANK", "5"},
                                                                         {"WORLD_SIZE", "16"},
                                                                         {"LOCAL_RANK", "5"},
                                                                         {"LOCAL_WORLD_SIZE", "8"},
                                                                         {"MASTER_ADDR", "node01"},
                                                                         {"MASTER_PORT", "29500"}}));
}

TEST(RankInfoTest, FromOpenMpiAloneWithoutRendezvous) {
  RankInfo i = rankInfo({{"OMPI_COMM_WORLD_RANK", "3"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(vars(torchVariables(i)),
            (std::map<std::string, std::string>{
                {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}));
}

TEST(RankInfoTest, NothingIsRankZeroOfOne) {
  RankInfo i = rankInfo({});
  EXPECT_EQ(i.rank, 0);
  EXPECT_EQ(i.world_size, 1);
  EXPECT_EQ(i.local_world_size, 1);
}

TEST(RankInfoTest, ErrorsNameTheVariableAndItsValue) {
  struct Case {
    Environment env;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {{{"RANK", "x"}}, "RANK='x'"},
           {{{"RANK", "-1"}}, "RANK='-1'"},
           {{{"WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_SIZE", "8"}},
            "WORLD_SIZE=16 but OMPI_COMM_WORLD_SIZE=8"},
           {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "rank 4 is not below WORLD_SIZE=4"},
           {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
            "LOCAL_RANK=2"},
           {{{"MASTER_PORT", "70000"}}, "MASTER_PORT=70000"},
           {{{"MASTER_PORT", "http"}}, "MASTER_PORT='http'"},
       }) {
    try {
      rankInfo(c.env);
      ADD_FAILURE() << "accepted " << c.says;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
}

TEST(RankInfoTest, TheProcessEnvironment) {
  setenv("POOLRUN_TEST_NAMED_A", "1", 1);
  setenv("POOLRUN_TEST_NAMED_B", "", 1);
  unsetenv("POOLRUN_TEST_NAMED_C");
  Environment all = processEnvironment();
  EXPECT_EQ(all.at("POOLRUN_TEST_NAMED_A"), "1");
  EXPECT_EQ(all.at("POOLRUN_TEST_NAMED_B"), "");
  EXPECT_EQ(all.count("POOLRUN_TEST_NAMED_C"), 0u);
  unsetenv("POOLRUN_TEST_NAMED_A");
  unsetenv("POOLRUN_TEST_NAMED_B");
}

// Binding, through the rank core's one Binder: a fake machine here, the kernel below.
core::CpuMask mask(const char* list) {
  core::CpuMask m;
  EXPECT_TRUE(m.parseList(list)) << list;
  return m;
}

template <unsigned kBits>
std::string listOf(const core::Bits<kBits>& bits) {
  core::LongLine line;
  bits.addList(line);
  return line.c_str();
}

std::vector<std::string> problems(const core::BindingResult& r) {
  std::vector<std::string> out;
  for (unsigned i = 0; i < r.problems.count; ++i) out.push_back(r.problems.items[i].c_str());
  return out;
}

// A machine of 2 NUMA nodes x 4 CPUs; it may refuse or alter bindings.
class FakeBinder final : public core::Binder {
 public:
  core::CpuMask machine = mask("0-7");
  std::vector<std::pair<unsigned, core::CpuMask>> numa = {{0, mask("0-3")}, {1, mask("4-7")}};
  core::CpuMask bound = mask("0-7");
  core::NodeMask memory;
  bool refuseCpus = false, refuseMemory = false;
  std::optional<core::CpuMask> kernelGives;  // a cgroup that narrows what is asked

  core::CpuMask machineCpus() override { return machine; }
  bool numaNode(unsigned i, unsigned& index, core::CpuMask& cpus) override {
    if (i >= numa.size()) return false;
    index = numa[i].first;
    cpus = numa[i].second;
    return true;
  }
  bool bindCpus(const core::CpuMask& cpus, core::Line& why) override {
    if (refuseCpus) why.add("Operation not permitted");
    if (!refuseCpus) bound = kernelGives ? *kernelGives : cpus;
    return !refuseCpus;
  }
  core::CpuMask boundCpus() override { return bound; }
  bool bindMemory(const core::NodeMask& nodes, core::Line& why) override {
    if (refuseMemory) why.add("Operation not permitted");
    if (!refuseMemory) memory = nodes;
    return !refuseMemory;
  }
  core::NodeMask boundMemory() override { return memory; }
};

// The core's result is 7 KiB: on the heap.
std::unique_ptr<core::BindingResult> bind(core::Binder& machine, const char* cpus, int numa) {
  core::BindingRequest request;
  request.cpus = mask(cpus);
  request.numa = numa;
  auto result = std::make_unique<core::BindingResult>();
  core::applyBinding(machine, request, *result);
  return result;
}

TEST(BindingTest, BindsCoresAndTheirNumaNode) {
  FakeBinder m;
  auto r = bind(m, "4-5", 1);
  EXPECT_TRUE(r->cpus_as_planned);
  EXPECT_TRUE(r->memory_as_planned);
  EXPECT_EQ(listOf(m.bound), "4-5");
  EXPECT_EQ(listOf(r->memory), "1");
  EXPECT_TRUE(problems(*r).empty());
}

TEST(BindingTest, WithoutAPlannedNodeMemoryGoesWhereTheCoresAre) {
  FakeBinder m;
  auto r = bind(m, "3-4", -1);
  EXPECT_EQ(listOf(r->memory), "0-1");
  EXPECT_TRUE(r->memory_as_planned);
}

TEST(BindingTest, SaysPlainlyWhenTheKernelNarrowsTheBinding) {
  FakeBinder m;
  m.kernelGives = mask("4");
  auto r = bind(m, "4-5", 1);
  EXPECT_FALSE(r->cpus_as_planned);
  ASSERT_EQ(problems(*r).size(), 1u);
  EXPECT_NE(problems(*r)[0].find("asked for cores 4-5, the kernel says 4"), std::string::npos)
      << problems(*r)[0];
}

TEST(BindingTest, RefusalsAreProblemsNotCrashes) {
  FakeBinder m;
  m.refuseCpus = true;
  m.refuseMemory = true;
  auto r = bind(m, "0-1", 0);
  EXPECT_FALSE(r->cpus_as_planned);
  EXPECT_FALSE(r->memory_as_planned);
  auto said = problems(*r);
  ASSERT_GE(said.size(), 2u);
  EXPECT_NE(said[0].find("binding to cores 0-1 was refused: Operation not permitted"), std::string::npos);
  EXPECT_NE(said.back().find("NUMA node 0 was refused"), std::string::npos) << said.back();
}

TEST(BindingTest, CoresThatDoNotExistHere) {
  FakeBinder m;
  auto r = bind(m, "6-9", 3);
  EXPECT_FALSE(r->cpus_as_planned);
  EXPECT_EQ(listOf(m.bound), "6-7") << "binds to the planned cores that exist";
  auto said = problems(*r);
  ASSERT_EQ(said.size(), 2u);
  EXPECT_NE(said[0].find("planned cores 6-9 are not all usable here"), std::string::npos);
  EXPECT_NE(said[1].find("planned NUMA node 3 does not exist here"), std::string::npos);
}

TEST(BindingTest, OneNumaNodeNeedsNoMemoryBinding) {
  FakeBinder m;
  m.numa = {{0, mask("0-7")}};
  m.refuseMemory = true;  // a container without CAP_SYS_NICE: nothing to say on one node
  auto r = bind(m, "0-1", 0);
  EXPECT_TRUE(r->memory_as_planned);
  EXPECT_TRUE(problems(*r).empty());
}

// What to bind to from the rank's variables: the request, or the message naming a malformed one.
struct Request {
  core::BindingRequest request;
  core::BindMode mode = core::BindMode::kOn;
  std::string error;  // empty: accepted
};
std::unique_ptr<Request> request(const Environment& env, const char* current = "0-1") {
  auto r = std::make_unique<Request>();
  core::Line error;
  if (!core::bindingRequest(EnvironmentVariables(env), mask(current), r->request, r->mode, error))
    r->error = error.c_str();
  return r;
}

TEST(BindingTest, RequestFromTheRankVariables) {
  auto real = request({{"POOLRUN_CPUSET", "8-15"}, {"POOLRUN_NUMA", "1"}});
  EXPECT_EQ(real->error, "");
  EXPECT_EQ(listOf(real->request.cpus), "8-15");
  EXPECT_EQ(real->request.numa, 1);
  auto sim = request({{"POOLRUN_PLANNED_CPUSET", "48-59"}});
  EXPECT_EQ(listOf(sim->request.cpus), "0-1")
      << "a simulated rank keeps the cores its mapped rankfile gave it";
  EXPECT_EQ(request({{"POOLRUN_BIND", "off"}})->mode, core::BindMode::kOff);
  EXPECT_EQ(request({{"POOLRUN_BIND", "strict"}})->mode, core::BindMode::kStrict);
  EXPECT_EQ(
      request({{"POOLRUN_BIND", "maybe"}})->error,
      "POOLRUN_BIND='maybe': use on (the default: warn when the binding did not take), strict (fail the "
      "rank) or off");
  EXPECT_EQ(request({{"POOLRUN_CPUSET", "0-"}})->error,
            "POOLRUN_CPUSET='0-' is not a cpulist like 0-3,8 (it is written by poolrun)");
  EXPECT_EQ(request({{"POOLRUN_NUMA", "first"}})->error,
            "POOLRUN_NUMA='first' is not a NUMA node index (it is written by poolrun)");
}

TEST(BindingTest, ThisMachineThroughTheKernel) {
  core::SystemBinder binder;
  core::CpuMask before = binder.boundCpus();
  ASSERT_FALSE(before.empty());
  EXPECT_TRUE((binder.machineCpus() & before) == before) << "the cgroup allows what the process runs on";
  std::string one = std::to_string(before.next(0));
  auto r = bind(binder, one.c_str(), -1);
  EXPECT_TRUE(r->cpus_as_planned) << (problems(*r).empty() ? "" : problems(*r)[0]);
  EXPECT_EQ(listOf(binder.boundCpus()), one);
  core::Line why;
  ASSERT_TRUE(binder.bindCpus(before, why)) << why.c_str();
  // Memory: bound and read back, or refused with the system's reason (a container without
  // CAP_SYS_NICE); either way no crash.
  unsigned node = 0;
  core::CpuMask cpus;
  ASSERT_TRUE(binder.numaNode(0, node, cpus));
  core::NodeMask nodes;
  nodes.set(node);
  if (binder.bindMemory(nodes, why)) {
    EXPECT_EQ(listOf(binder.boundMemory()), std::to_string(node));
  } else {
    EXPECT_FALSE(why.empty());
    std::cerr << "memory binding refused here: " << why.c_str() << "\n";
  }
}

// The machine as the kernel describes it, from a captured tree: the cgroup's CPUs come from the
// nearest cgroup up the path that has the cpuset controller, and memory goes only to NUMA nodes
// that have memory and that the cgroup allows.
TEST(BindingTest, TheMachineFromProcAndSys) {
  poolrun::test::TempDir root;
  std::string path = root.path().string();
  root.write("sys/devices/system/cpu/online", "0-15\n");
  root.write("sys/devices/system/node/online", "0-3\n");
  root.write("sys/devices/system/node/has_memory", "0-1,3\n");
  for (int n = 0; n < 4; ++n) {
    root.write("sys/devices/system/node/node" + std::to_string(n) + "/cpulist",
               n == 3 ? "\n" : std::to_string(4 * n) + "-" + std::to_string(4 * n + 3) + "\n");
  }
  // cgroup v2: the job's step has no cpuset controller of its own, the job has.
  root.write("proc/self/cgroup", "0::/slurm/job_7/step_0\n");
  root.write("sys/fs/cgroup/slurm/job_7/cpuset.cpus.effective", "2-9\n");
  root.write("sys/fs/cgroup/slurm/job_7/cpuset.mems.effective", "0,2-3\n");
  root.write("sys/fs/cgroup/slurm/cpuset.cpus.effective", "0-15\n");
  auto numaNodes = [&] {
    core::SystemBinder machine(coreText(path));
    std::vector<std::pair<unsigned, std::string>> out;
    unsigned index = 0;
    core::CpuMask cpus;
    for (unsigned i = 0; machine.numaNode(i, index, cpus); ++i) out.emplace_back(index, listOf(cpus));
    return out;
  };
  auto machineCpus = [&] { return listOf(core::SystemBinder(coreText(path)).machineCpus()); };
  EXPECT_EQ(machineCpus(), "2-9");
  auto numa = numaNodes();
  ASSERT_EQ(numa.size(), 2u) << "node 1 is not allowed, node 2 has no memory";
  EXPECT_EQ(numa[0], (std::pair<unsigned, std::string>{0, "0-3"}));
  EXPECT_EQ(numa[1], (std::pair<unsigned, std::string>{3, ""})) << "a node of memory alone";

  // cgroup v1: the hierarchy that has the cpuset controller, among others.
  root.write("proc/self/cgroup", "5:cpuacct,cpu:/\n3:cpuset,memory:/docker/abc\n");
  root.write("sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus", "12-15,0");
  EXPECT_EQ(machineCpus(), "0,12-15");
  // No cgroup that says (a kernel without cpusets): every online CPU.
  root.write("proc/self/cgroup", "0::/user.slice\n");
  EXPECT_EQ(machineCpus(), "0-15");
  // No NUMA in the kernel: one node of every CPU.
  std::filesystem::remove_all(root.path() / "sys/devices/system/node");
  auto flat = numaNodes();
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_EQ(flat[0], (std::pair<unsigned, std::string>{0, "0-15"}));
}

// One reader of the cpulist form (poolrun/topo/cpu_list.hpp) for the rank core and topo::CpuSet:
// both accept and refuse the same lists.
TEST(BindingTest, CpuListsAsTheyAreWritten) {
  for (const char* list : {"0-3, 8", "0-3,8,", " 0-3,8\n", "8,0-3"}) {
    auto r = request({{"POOLRUN_CPUSET", list}});
    EXPECT_EQ(r->error, "") << list;
    EXPECT_EQ(listOf(r->request.cpus), "0-3,8") << list;
    EXPECT_EQ(CpuSet::parseList(list).toList(), "0-3,8") << list;
  }
  for (const char* empty : {"", " \n"}) {
    core::CpuMask m = mask("0");
    EXPECT_TRUE(m.parseList(empty) && m.empty()) << "'" << empty << "'";
    EXPECT_TRUE(CpuSet::parseList(empty).empty()) << "'" << empty << "'";
  }
  for (const char* list : {",0", ",", "0,,1", "3-1", "x", "0-", "-3", "1 2", "+1", "1048576"}) {
    EXPECT_NE(request({{"POOLRUN_CPUSET", list}})->error, "") << list;
    EXPECT_THROW(CpuSet::parseList(list), Error) << list;
  }
  auto far = request({{"POOLRUN_CPUSET", "100000"}, {"POOLRUN_NUMA", "2000"}});
  EXPECT_EQ(far->error, "")
      << "planned CPUs and nodes this kernel cannot have are reported when binding, not refused";
  EXPECT_EQ(far->request.beyond, 1u);
  EXPECT_TRUE(far->request.cpus.empty());
  EXPECT_EQ(far->request.numa, 2000);
  core::NodeMask nodes;
  EXPECT_FALSE(nodes.parseList("1024"))
      << "a NUMA node past what a kernel can have, with nothing to count it";
}

// What the launcher gives every rank: the same rendezvous, the cores and memory node to bind to.
TEST(LaunchToRankTest, RendezvousAndBinding) {
  topo::ClusterNode n1, n2;
  auto t = std::make_shared<const topo::NodeTopology>(test::synthetic({}));
  n1.name = "gpu07";
  n2.name = "gpu08";
  n1.topology = n2.topology = t;
  launcher::PlanRequest req;
  req.ranks = 16;
  launcher::JobPlan plan =
      launcher::makePlan({{&n1, {0, 1, 2, 3, 4, 5, 6, 7}}, {&n2, {0, 1, 2, 3, 4, 5, 6, 7}}}, req);
  EXPECT_EQ(vars(launcher::rendezvousVariables(plan, false, 41234, {})),
            (std::map<std::string, std::string>{{"MASTER_ADDR", "gpu07"}, {"MASTER_PORT", "41234"}}));
  EXPECT_EQ(vars(launcher::rendezvousVariables(plan, true, 41234, {}))["MASTER_ADDR"], "127.0.0.1");
  EXPECT_EQ(vars(launcher::rendezvousVariables(plan, false, 41234, {{"MASTER_PORT", "1234"}})),
            (std::map<std::string, std::string>{{"MASTER_ADDR", "gpu07"}}))
      << "the user's -x MASTER_PORT wins";
  int port = launcher::pickRendezvousPort();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);

  std::string doc = launcher::encodeRankEnv(plan, false);
  for (const launcher::RankPlan& r : plan.ranks) {
    auto env = rankEnvironment(doc, r.rank);
    EXPECT_EQ(env["POOLRUN_CPUSET"], r.cpuset.toList());
    EXPECT_EQ(env["POOLRUN_NUMA"], std::to_string(r.numa));
    env["RANK"] = std::to_string(r.rank);
    env["OMPI_COMM_WORLD_RANK"] = std::to_string(r.rank);
    env["OMPI_COMM_WORLD_SIZE"] = "16";
    RankInfo info = rankInfo(env);
    EXPECT_EQ(info.local_rank, r.rank % 8);
    EXPECT_EQ(info.local_world_size, 8);
    EXPECT_EQ(info.world_size, 16);
  }
  EXPECT_EQ(rankEnvironment(launcher::encodeRankEnv(plan, true), 0).count("POOLRUN_CPUSET"), 0u)
      << "a simulated node's planned cores are a fixture's";
}

// The rank core's JSON reader (poolrun-rank has no C++ library, so no JSON library either): what
// JSON allows is read as JSON means it, and anything else is refused with a reason.
std::string rankEnvDoc(const std::string& sets, const std::string& rest = "") {
  return R"({"schema": "poolrun.rank-env/1", "sets": )" + sets +
         R"(, "templates": [[0, 1]], "runs": [[0, 2, 2, 0]])" + rest + "}";
}

TEST(RankEnvTest, ReadsWhatJsonAllows) {
  std::string doc = "\n\t" +
                    rankEnvDoc(R"([{"A": "caf\u00e9 \ud83d\ude80 \"q\" \\ \/ \b\f\n\r\t", "B": ""},
                                              {"A": "second", "A": "last wins"}])",
                               R"(, "unknown": [1.5e3, -0, true, false, null, {"x": [[]]}, "s"])") +
                    " \r\n";
  EXPECT_EQ(rankEnvironment(doc, 0),
            (std::map<std::string, std::string>{{"A", "caf\xc3\xa9 \xf0\x9f\x9a\x80 \"q\" \\ / \b\f\n\r\t"},
                                                {"B", ""}}));
  EXPECT_EQ(rankEnvironment(doc, 1), (std::map<std::string, std::string>{{"A", "last wins"}}));
  // Members in any order, runs that skip ranks, templates with several node types.
  std::string runs =
      R"({"runs": [[0, 1, 2, 1], [4, 2, 1, 0]], "templates": [[2], [0, 1]], "sets": [{"X": "a"}, {"X": "b"}, {"X": "c"}],
                         "schema": "poolrun.rank-env/1"})";
  EXPECT_EQ(rankEnvironment(runs, 1).at("X"), "b");
  EXPECT_EQ(rankEnvironment(runs, 5).at("X"), "c");
  EXPECT_THROW(rankEnvironment(runs, 3), Error) << "rank 3 is in no run";
}

TEST(RankEnvTest, RefusesMalformedDocumentsSayingWhy) {
  struct Case {
    std::string doc;
    const char* says;
  };
  std::string nested(100, '[');
  for (
      const Case& c : std::vector<Case>{
          {"", "not a JSON object"},
          {"[]", "not a JSON object"},
          {rankEnvDoc("[{}]") + "x", "not a JSON object"},
          {rankEnvDoc("[{}]").substr(1), "not a JSON object"},
          {rankEnvDoc(R"([{"A": "\x"}])"), "not a JSON object"},
          {rankEnvDoc(R"([{"A": "\ud83d"}])"), "not a JSON object"},
          {rankEnvDoc(R"([{"A": "\udc00"}])"), "not a JSON object"},
          {rankEnvDoc("[{\"A\": \"tab\there\"}]"), "not a JSON object"},
          {rankEnvDoc("[{}]", ", \"x\": 01"), "not a JSON object"},
          {rankEnvDoc("[{}]", ", \"x\": " + nested), "not a JSON object"},
          {R"({"schema": "poolrun.rank-env/2", "sets": [], "templates": [], "runs": []})", "schema is not"},
          {R"({"schema": 1, "sets": [], "templates": [], "runs": []})", "schema is not"},
          {R"({"schema": "poolrun.rank-env/1", "sets": {}, "templates": [], "runs": []})", "must be arrays"},
          {R"({"schema": "poolrun.rank-env/1", "sets": [], "templates": [], "runs": [[0, 1, 1]]})",
           "each run must be"},
          {R"({"schema": "poolrun.rank-env/1", "sets": [], "templates": [], "runs": [[0, 1, 1, -1]]})",
           "each run must be"},
          {R"({"schema": "poolrun.rank-env/1", "sets": [], "templates": [], "runs": [[0, 1, 1, 1.0]]})",
           "each run must be"},
          {R"({"schema": "poolrun.rank-env/1", "sets": [], "templates": [], "runs": [[0, 1, 1, 4294967296]]})",
           "each run must be"},
          {R"({"schema": "poolrun.rank-env/1", "sets": [], "templates": [], "runs": [[0, 1, 1, 0]]})",
           "missing template"},
          {R"({"schema": "poolrun.rank-env/1", "sets": [], "templates": [[0]], "runs": [[0, 1, 1, 0]]})",
           "has no set for local rank 0"},
          {R"({"schema": "poolrun.rank-env/1", "sets": [{}], "templates": [["0"]], "runs": [[0, 1, 1, 0]]})",
           "has no set"},
          {rankEnvDoc(R"([[], {}])"), "a set must be an object"},
          {rankEnvDoc(R"([{"A=B": "1"}, {}])"), "bad variable 'A=B'"},
          {rankEnvDoc(R"([{"": "1"}, {}])"), "bad variable ''"},
          {rankEnvDoc(R"([{"A": 1}, {}])"), "bad variable 'A'"},
          {rankEnvDoc(R"([{"A": "nul\u0000"}, {}])"), "bad variable 'A'"},
      }) {
    try {
      rankEnvironment(c.doc, 0);
      ADD_FAILURE() << "accepted " << c.doc;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.doc << "\n" << e.what();
      EXPECT_NE(std::string(e.what()).find("POOLRUN_RANK_ENV: "), std::string::npos) << e.what();
    }
  }
}

// The rank's own RDMA ports, read from a fake /sys: only ACTIVE ones pass.
TEST(PortCheckTest, DownMissingAndExcludedPorts) {
  poolrun::test::TempDir sys;
  auto port = [&](const std::string& nic, int n, const std::string& state) {
    sys.write("class/infiniband/" + nic + "/ports/" + std::to_string(n) + "/state", state + "\n");
  };
  port("mlx5_0", 1, "4: ACTIVE");
  port("mlx5_1", 1, "1: DOWN");
  port("mlx5_2", 1, "2: INIT");
  port("mlx5_3", 2, "5: ACTIVE_DEFER");
  EXPECT_TRUE(downPorts("=mlx5_0:1,mlx5_3:2", sys.path()).empty());
  EXPECT_TRUE(downPorts("mlx5_0", sys.path()).empty()) << "port 1 where none is named";
  EXPECT_TRUE(downPorts("^mlx5_1", sys.path()).empty()) << "an exclusion list names no port to use";
  std::vector<std::string> p = downPorts("=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_9:1", sys.path());
  ASSERT_EQ(p.size(), 3u);
  EXPECT_NE(p[0].find("mlx5_1 port 1 is 1: DOWN"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find("mlx5_2 port 1 is 2: INIT"), std::string::npos) << p[1];
  EXPECT_NE(p[2].find("mlx5_9 port 1 does not exist on this node"), std::string::npos) << p[2];
}

}  // namespace
}  // namespace poolrun::runtime
