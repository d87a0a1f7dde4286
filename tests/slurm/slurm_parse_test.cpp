// What poolrun reads from Slurm: hostlists, GPU index lists and GRES strings in the forms Slurm
// writes them, `scontrol show job -d`, `scontrol show config`, `scontrol show node -o`, and the
// salloc arguments of a request.

#include <gtest/gtest.h>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/slurm.hpp"
#include "poolrun/topo/hostlist.hpp"

namespace poolrun::pool::slurm {
namespace {

using Strings = std::vector<std::string>;
using Ints = std::vector<size_t>;

struct HostlistCase {
  const char* text;
  Strings hosts;
};

TEST(SlurmHostlist, ExpandsTheFormsSlurmWrites) {
  const HostlistCase cases[] = {
      {"a[01-03,07],b5", {"a01", "a02", "a03", "a07", "b5"}},
      {"sn01", {"sn01"}},
      {"gpu[8-10]", {"gpu8", "gpu9", "gpu10"}},
      {"dgx[098-101]", {"dgx098", "dgx099", "dgx100", "dgx101"}},
      {"r[1-2]n[01-02]", {"r1n01", "r1n02", "r2n01", "r2n02"}},
      {"node-[1,3],login", {"node-1", "node-3", "login"}},
      {"n[1-2]-ib", {"n1-ib", "n2-ib"}},
  };
  for (const HostlistCase& c : cases) EXPECT_EQ(topo::expandHostlist(c.text), c.hosts) << c.text;
  EXPECT_EQ(topo::compressHostlist({"a01", "a02", "a03", "a07", "b5"}), "a[01-03,07],b5");
  for (const char* bad : {"a[01-03", "a[3-1]", "a[x]", "a[01-03]]", ""}) {
    EXPECT_THROW(topo::expandHostlist(bad), Error) << bad;
  }
}

TEST(SlurmGpuIndexes, StepAndJobGpuLists) {
  EXPECT_EQ(parseIndexList("0,1"), (Ints{0, 1}));
  EXPECT_EQ(parseIndexList("2,3"), (Ints{2, 3}));
  EXPECT_EQ(parseIndexList("0-1,3"), (Ints{0, 1, 3}));
  EXPECT_EQ(parseIndexList("3,1,1"), (Ints{1, 3}));
  EXPECT_EQ(parseIndexList(""), Ints{});
  EXPECT_EQ(parseIndexList(" 7 "), Ints{7});
  for (const char* bad :
       {"a", "1-", "3-1", "1,,2", "-1", "GPU-0c3e", "1048576", "0-99999999999999999999", "0-65537"}) {
    try {
      parseIndexList(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

struct GresCase {
  const char* gres;
  Ints gpus;
};

TEST(SlurmGpuIndexes, GresOfScontrolShowJob) {
  const GresCase cases[] = {
      {"gpu:2(IDX:0-1)", {0, 1}},
      {"gpu:a100:4(IDX:0,2-3)", {0, 2, 3}},
      {"gpu:a100:1(IDX:0),gpu:v100:1(IDX:3)", {0, 3}},
      {"gpu(IDX:0-1)", {0, 1}},  // GRES_IDX= of older releases
      {"gpu:h100:8(IDX:0-7)", {0, 1, 2, 3, 4, 5, 6, 7}},
      {"nic:1(IDX:0),gpu:1(IDX:5)", {5}},
      {"gpu:0", {}},
      {"gpu:1(IDX:N/A)", {}},
      {"(null)", {}},
      {"", {}},
  };
  for (const GresCase& c : cases) EXPECT_EQ(parseGresIndexes(c.gres), c.gpus) << c.gres;
}

constexpr const char* kJob = R"(JobId=42 JobName=train
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   Partition=gpu AllocNode:Sid=login1:123
   NodeList=dgx[01-03]
   BatchHost=dgx01
   NumNodes=3 NumCPUs=40 NumTasks=24 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=40,node=3,billing=40,gres/gpu=20
   JOB_GRES=gpu:a100:20
     Nodes=dgx[01-02] CPU_IDs=0-15 Mem=0 GRES=gpu:a100:8(IDX:0-7)
     Nodes=dgx03 CPU_IDs=0-3,8-11 Mem=0 GRES=gpu:a100:4(IDX:0,2-3,6)
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
)";

TEST(SlurmJobDetail, NodesAndTheirGpus) {
  JobDetail d = parseJobDetail(kJob);
  EXPECT_EQ(d.id, "42");
  EXPECT_EQ(d.state, "RUNNING");
  EXPECT_EQ(d.partition, "gpu");
  EXPECT_EQ(d.node_list, "dgx[01-03]");
  ASSERT_EQ(d.nodes.size(), 3u);
  EXPECT_EQ(d.nodes[0].first, "dgx01");
  EXPECT_EQ(d.nodes[1].second, (Ints{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(d.nodes[2].first, "dgx03");
  EXPECT_EQ(d.nodes[2].second, (Ints{0, 2, 3, 6}));
  EXPECT_EQ(d.cpus["dgx02"], 16);
  EXPECT_EQ(d.cpus["dgx03"], 8);
  // Which CPUs, as the key of a part of a node's cached topology.
  EXPECT_EQ(d.cpu_ids["dgx02"], "0-15");
  EXPECT_EQ(d.cpu_ids["dgx03"], "0-3,8-11");
}

TEST(SlurmJobDetail, PendingAndNotAJob) {
  JobDetail d =
      parseJobDetail("JobId=7 JobName=x\n   JobState=PENDING Reason=Resources\n   NodeList=(null)\n");
  EXPECT_EQ(d.state, "PENDING");
  EXPECT_TRUE(d.nodes.empty());
  EXPECT_THROW(parseJobDetail("slurm_load_jobs error: Invalid job id specified"), Error);
}

TEST(SlurmConfig, ConstrainDevices) {
  EXPECT_TRUE(
      parseConstrainDevices("Cgroup Support Configuration:\nConstrainCores          = yes\n"
                            "ConstrainDevices        = yes\n"));
  EXPECT_FALSE(parseConstrainDevices("ConstrainDevices        = no\n"));
  EXPECT_FALSE(parseConstrainDevices("SelectType              = select/cons_tres\n"));
}

TEST(SlurmConfig, NodeHardwareKeyChangesWithTheHardware) {
  std::string a =
      "NodeName=dgx01 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 Sockets=2 Boards=1 "
      "ThreadsPerCore=2 RealMemory=2000000 Gres=gpu:h100:8 State=IDLE\n"
      "NodeName=dgx02 Arch=x86_64 CoresPerSocket=56 CPUAlloc=8 CPUTot=224 Sockets=2 Boards=1 "
      "ThreadsPerCore=2 RealMemory=2000000 Gres=gpu:h100:8 State=MIXED\n";
  auto keys = parseNodeHardware(a);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys["dgx01"], keys["dgx02"]) << "load and state are not hardware";
  std::string b = a;
  b.replace(b.find("gpu:h100:8"), 10, "gpu:h100:7");
  EXPECT_NE(parseNodeHardware(b)["dgx01"], keys["dgx01"]);
}

TEST(SlurmSalloc, ArgumentsOfARequest) {
  LeaseRequest r;
  r.gpus = 16;
  r.gpus_per_node = 8;
  r.job_name = "train";
  r.max_duration = std::chrono::seconds(3600 + 60);
  Strings a = sallocArguments(r, "gpu");
  Strings expected = {"salloc",    "--partition=gpu",     "--job-name=train",
                      "--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8",
                      "--time=61", "--switches=1@5:00"};
  EXPECT_EQ(a, expected);

  LeaseRequest one;
  one.gpus = 3;
  one.wait = std::chrono::seconds(30);
  Strings b = sallocArguments(one, "debug");
  Strings expectedOne = {"salloc",     "--partition=debug", "--job-name=poolrun",
                         "--ntasks=3", "--gpus-per-task=1", "--immediate=30"};
  EXPECT_EQ(b, expectedOne);

  LeaseRequest wide = r;
  wide.wait = std::chrono::seconds(90);
  EXPECT_EQ(sallocArguments(wide, "gpu")[7], "--switches=1@1:30");

  // poolrun --exclude, and a job restarted without the nodes that failed (--retries).
  LeaseRequest without = one;
  without.exclude_nodes = {"dgx03", "dgx01", "dgx02", "login1"};
  Strings c = sallocArguments(without, "debug");
  EXPECT_NE(std::find(c.begin(), c.end(), "--exclude=dgx[01-03],login1"), c.end()) << c.size();

  LeaseRequest uneven;
  uneven.gpus = 6;
  uneven.gpus_per_node = 4;
  try {
    sallocArguments(uneven, "gpu");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-n 6 is not a multiple of --gpus-per-node 4"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace poolrun::pool::slurm
