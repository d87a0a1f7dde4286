// The doctor on fake /sys, /proc and /dev trees: a healthy IB node and a healthy RoCE node pass
// every check, and each way of breaking one is found by the check meant for it and by no other.

#include "poolrun/doctor/doctor.hpp"
#include "poolrun/common/error.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "fake_node.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::doctor {
namespace {

using test::FakeNode;
using test::FakePort;
using ::testing::HasSubstr;

class FakeGpus final : public GpuQuery {
 public:
  std::optional<std::vector<GpuHealth>> health(std::string& why) override {
    if (!present) {
      why = "no NVML here";
      return std::nullopt;
    }
    return gpus;
  }
  bool present = true;
  std::vector<GpuHealth> gpus;
};

GpuHealth healthyGpu(int index) {
  GpuHealth g;
  g.index = index;
  g.pci = index == 0 ? "00000000:1B:00.0" : "00000000:9B:00.0";
  g.persistence = true;
  g.ecc_uncorrected = 0;
  g.retired_pages_pending = false;
  g.row_remap_pending = false;
  g.row_remap_failed = false;
  g.clock_event_reasons = 0x1;  // idle
  g.nvlinks_up = 18;
  return g;
}

class FakeTools final : public ToolRunner {
 public:
  std::optional<std::string> run(const std::vector<std::string>& argv) override {
    auto it = outputs.find(argv.front());
    if (it == outputs.end()) return std::nullopt;
    return it->second;
  }
  std::map<std::string, std::string> outputs = {
      {"ompi_info",
       "ompi:version:full:4.1.5\n"
       "mca:pml:ucx:version:mca:2.1.0\n"
       "mca:opal:base:param:opal_built_with_cuda_support:value:true\n"},
      {"ucx_info", "# Library version: 1.15.0\n# Library path: /usr/lib/libucs.so.0\n"},
  };
};

struct Harness {
  explicit Harness(FakeNode::Fabric fabric) : node(fabric) { gpus.gpus = {healthyGpu(0), healthyGpu(1)}; }
  Report run(const Scope& scope = {}) {
    NodeSources sources;
    sources.roots = node.roots();
    sources.gpus = &gpus;
    sources.tools = &tools;
    return checkNode(sources, scope);
  }
  FakeNode node;
  FakeGpus gpus;
  FakeTools tools;
};

std::string describe(const Report& r) {
  return toText(r);
}

// Every check of the report that is neither PASS nor SKIP.
std::vector<std::string> flagged(const Report& r) {
  std::vector<std::string> out;
  for (const Check& c : r.checks) {
    if (c.status == Status::kWarn || c.status == Status::kFail)
      out.push_back(std::string(toString(c.status)) + " " + c.id + " " + c.subject);
  }
  return out;
}

TEST(DoctorTest, HealthyIbNodePassesEverything) {
  Harness h(FakeNode::Fabric::kIb);
  Report r = h.run();
  EXPECT_THAT(flagged(r), ::testing::IsEmpty()) << describe(r);
  EXPECT_EQ(r.count(Status::kSkip), 0) << describe(r);
  std::map<std::string, int> passes;
  for (const Check& c : r.checks) ++passes[c.id];
  EXPECT_EQ(passes["rdma.port"], 2);
  EXPECT_EQ(passes["rdma.uverbs"], 2);
  for (const char* id :
       {"rdma.rate", "rdma.memlock", "gdr.peermem", "gdr.acs", "gdr.iommu", "host.numa_balancing",
        "host.cpufreq", "host.thp", "host.hwloc", "host.openmpi", "host.ucx"}) {
    EXPECT_EQ(passes[id], 1) << id << "\n" << describe(r);
  }
  EXPECT_EQ(passes["gpu.nvlink"], 2);
  EXPECT_EQ(passes.count("roce.gid"), 0u);  // IB ports have no RoCE checks
}

// The hwloc line names the library's release (pkg-config's 2.9.0), not only its API version (2.8.0
// for hwloc 2.8 and 2.9), which named an older library than the one installed.
TEST(DoctorTest, HwlocLineNamesTheLibrarysRelease) {
  Harness h(FakeNode::Fabric::kIb);
  Report r = h.run();
  auto hwloc =
      std::find_if(r.checks.begin(), r.checks.end(), [](const Check& c) { return c.id == "host.hwloc"; });
  ASSERT_NE(hwloc, r.checks.end()) << describe(r);
  EXPECT_THAT(hwloc->evidence, HasSubstr(std::string("library ") + POOLRUN_HWLOC_RELEASE + " (API "));
}

// A topology read from a file (HWLOC_XMLFILE) carries the release of the hwloc that wrote it, which
// is not the library's: the line says the release is unknown rather than name the file's.
TEST(DoctorTest, HwlocLineNamesNoReleaseFromAnXmlFile) {
  poolrun::test::TempDir tmp;
  const char* set = R"( cpuset="0x1" complete_cpuset="0x1" nodeset="0x1" complete_nodeset="0x1")";
  std::string xml = std::string(R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" gp_index="1")") +
                    set + R"( allowed_cpuset="0x1" allowed_nodeset="0x1">
    <info name="hwlocVersion" value="1.2.3"/>
    <object type="NUMANode" os_index="0" gp_index="2")" +
                    set + R"(/>
    <object type="PU" os_index="0" gp_index="3")" +
                    set + R"(/>
  </object>
</topology>
)";
  setenv("HWLOC_XMLFILE", tmp.write("old.xml", xml).c_str(), 1);
  Harness h(FakeNode::Fabric::kIb);
  Report r = h.run();
  unsetenv("HWLOC_XMLFILE");
  auto hwloc =
      std::find_if(r.checks.begin(), r.checks.end(), [](const Check& c) { return c.id == "host.hwloc"; });
  ASSERT_NE(hwloc, r.checks.end()) << describe(r);
  EXPECT_THAT(hwloc->evidence, HasSubstr("library of unknown release"));
  EXPECT_THAT(hwloc->evidence, ::testing::Not(HasSubstr("1.2.3")));
}

TEST(DoctorTest, HealthyRoceNodePassesEverything) {
  Harness h(FakeNode::Fabric::kRoce);
  Report r = h.run();
  EXPECT_THAT(flagged(r), ::testing::IsEmpty()) << describe(r);
  int gid = 0, mtu = 0, up = 0;
  for (const Check& c : r.checks) {
    gid += c.id == "roce.gid";
    mtu += c.id == "roce.mtu";
    up += c.id == "roce.netdev";
    if (c.id == "roce.gid") {
      EXPECT_THAT(c.evidence, HasSubstr("index 3"));
    }
  }
  EXPECT_EQ(gid, 2);
  EXPECT_EQ(mtu, 2);
  EXPECT_EQ(up, 2);
}

struct Breakage {
  std::string name;
  FakeNode::Fabric fabric;
  std::function<void(Harness&)> breakIt;
  std::vector<std::string> expected;  // flagged() of the report, exactly
  std::string evidence;               // a piece of the first flagged check's evidence or fix
  Scope scope = {};
};

void PrintTo(const Breakage& b, std::ostream* os) {
  *os << b.name;
}

class DoctorBreakageTest : public ::testing::TestWithParam<Breakage> {};

TEST_P(DoctorBreakageTest, FoundByItsCheckAlone) {
  const Breakage& b = GetParam();
  Harness h(b.fabric);
  b.breakIt(h);
  Report r = h.run(b.scope);
  EXPECT_EQ(flagged(r), b.expected) << describe(r);
  for (const Check& c : r.checks) {
    if (c.status != Status::kWarn && c.status != Status::kFail) continue;
    EXPECT_THAT(c.evidence + " | " + c.fix, HasSubstr(b.evidence)) << describe(r);
    EXPECT_FALSE(c.fix.empty()) << c.id;
    break;
  }
}

constexpr auto kIb = FakeNode::Fabric::kIb;
constexpr auto kRoce = FakeNode::Fabric::kRoce;

FakePort roce() {
  FakePort p;
  p.link_layer = "Ethernet";
  p.rate = "200 Gb/sec (2X HDR)";
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Breakages, DoctorBreakageTest,
    ::testing::Values(
        Breakage{
            "PortDown",
            kIb,
            [](Harness& h) { h.node.setPort("mlx5_1", {.state = "1: DOWN", .phys_state = "2: Polling"}); },
            {"FAIL rdma.port mlx5_1/1"},
            "check the cable"},
        Breakage{"PortWithoutSubnetManager",
                 kIb,
                 [](Harness& h) { h.node.setPort("mlx5_0", {.state = "2: INIT"}); },
                 {"FAIL rdma.port mlx5_0/1"},
                 "subnet manager"},
        Breakage{
            "PortDisabled",
            kIb,
            [](Harness& h) { h.node.setPort("mlx5_0", {.state = "1: DOWN", .phys_state = "3: Disabled"}); },
            {"FAIL rdma.port mlx5_0/1"},
            "disabled"},
        Breakage{"PortTrainedSlow",
                 kIb,
                 [](Harness& h) { h.node.setPort("mlx5_1", {.rate = "200 Gb/sec (4X HDR)"}); },
                 {"WARN rdma.rate mlx5_1/1"},
                 "200 Gb/s"},
        Breakage{"MemlockTiny",
                 kIb,
                 [](Harness& h) {
                   h.node.write(
                       "proc/self/limits",
                       "Max locked memory         65536                65536                bytes\n");
                 },
                 {"FAIL rdma.memlock ulimit -l"},
                 "65536"},
        Breakage{"MemlockLimited",
                 kIb,
                 [](Harness& h) {
                   h.node.write(
                       "proc/self/limits",
                       "Max locked memory         8589934592           8589934592           bytes\n");
                 },
                 {"WARN rdma.memlock ulimit -l"},
                 "memlock unlimited"},
        Breakage{"UverbsNodeMissing",
                 kIb,
                 [](Harness& h) { h.node.remove("dev/infiniband/uverbs1"); },
                 {"FAIL rdma.uverbs mlx5_1"},
                 "is missing"},
        Breakage{"VerbsModuleNotLoaded",
                 kIb,
                 [](Harness& h) { h.node.remove("sys/class/infiniband_verbs"); },
                 {"FAIL rdma.uverbs mlx5_0", "FAIL rdma.uverbs mlx5_1"},
                 "ib_uverbs"},
        Breakage{"RoceWithoutIpv4Gid",
                 kRoce,
                 [](Harness& h) {
                   FakePort p = roce();
                   p.ipv4_gid = false;
                   h.node.setPort("mlx5_1", p);
                 },
                 {"FAIL roce.gid mlx5_1/1"},
                 "IPv4 address"},
        Breakage{"RoceGidIndexThePlanGotWrong",
                 kRoce,
                 [](Harness&) {},
                 {"FAIL roce.gid mlx5_0/1"},
                 "NCCL_IB_GID_INDEX=3",
                 Scope{.planned = true, .ports = {{"mlx5_0", 1, 0}}, .gdr = {}}},
        Breakage{"RoceMtuNotJumbo",
                 kRoce,
                 [](Harness& h) { h.node.write("sys/class/net/ens0np0/mtu", "1500\n"); },
                 {"WARN roce.mtu ens0np0"},
                 "mtu 9000"},
        Breakage{"RoceNetdevDown",
                 kRoce,
                 [](Harness& h) { h.node.write("sys/class/net/ens1np0/operstate", "down\n"); },
                 {"FAIL roce.netdev ens1np0"},
                 "ip link set ens1np0 up"},
        Breakage{"PeerMemoryNotLoaded",
                 kIb,
                 [](Harness& h) { h.node.write("proc/modules", "mlx5_ib 458752 0 - Live 0x0\n"); },
                 {"WARN gdr.peermem node"},
                 "modprobe nvidia_peermem"},
        Breakage{"AcsRedirectOnASwitchPort",
                 kIb,
                 [](Harness& h) { h.node.setAcsControl("0000:9a:01.0", 0x1d); },
                 {"FAIL gdr.acs 0000:9a:01.0"},
                 "P2P request redirect"},
        Breakage{"AcsNeedsRoot",
                 kIb,
                 [](Harness& h) { h.node.truncateConfig("0000:1a:00.0", 64); },
                 {"WARN gdr.acs 1 bridge"},
                 "cannot read"},
        Breakage{"IommuTranslates",
                 kIb,
                 [](Harness& h) { h.node.setIommu("0000:9b:00.0", "DMA-FQ"); },
                 {"WARN gdr.iommu 1 of 4 devices"},
                 "iommu=pt"},
        Breakage{"NumaBalancingOn",
                 kIb,
                 [](Harness& h) { h.node.write("proc/sys/kernel/numa_balancing", "1\n"); },
                 {"WARN host.numa_balancing kernel"},
                 "numa_balancing=0"},
        Breakage{"GovernorPowersave",
                 kIb,
                 [](Harness& h) {
                   h.node.write("sys/devices/system/cpu/cpu2/cpufreq/scaling_governor", "powersave\n");
                 },
                 {"WARN host.cpufreq CPUs"},
                 "powersave on 1 CPU"},
        Breakage{"HugePagesCompactEagerly",
                 kIb,
                 [](Harness& h) {
                   h.node.write("sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n");
                   h.node.write("sys/kernel/mm/transparent_hugepage/defrag",
                                "[always] defer madvise never\n");
                 },
                 {"WARN host.thp kernel"},
                 "defrag always"},
        Breakage{"OpenMpiWithoutUcx",
                 kIb,
                 [](Harness& h) { h.tools.outputs["ompi_info"] = "ompi:version:full:4.1.4\n"; },
                 {"WARN host.openmpi Open MPI"},
                 "no UCX PML"},
        Breakage{"OpenMpiMissing",
                 kIb,
                 [](Harness& h) { h.tools.outputs.erase("ompi_info"); },
                 {"FAIL host.openmpi ompi_info"},
                 "openmpi-bin"},
        Breakage{"PersistenceOff",
                 kIb,
                 [](Harness& h) { h.gpus.gpus[1].persistence = false; },
                 {"WARN gpu.persistence GPU1 00000000:9B:00.0"},
                 "nvidia-smi -pm 1"},
        Breakage{"UncorrectedEcc",
                 kIb,
                 [](Harness& h) { h.gpus.gpus[0].ecc_uncorrected = 3; },
                 {"FAIL gpu.ecc GPU0 00000000:1B:00.0"},
                 "3 uncorrected"},
        Breakage{"RowRemapPending",
                 kIb,
                 [](Harness& h) { h.gpus.gpus[0].row_remap_pending = true; },
                 {"WARN gpu.retired_pages GPU0 00000000:1B:00.0"},
                 "pending"},
        Breakage{"RowRemapFailed",
                 kIb,
                 [](Harness& h) { h.gpus.gpus[1].row_remap_failed = true; },
                 {"FAIL gpu.retired_pages GPU1 00000000:9B:00.0"},
                 "replace the GPU"},
        Breakage{"ClocksThermalSlowdown",
                 kIb,
                 [](Harness& h) { h.gpus.gpus[0].clock_event_reasons = 0x41; },
                 {"WARN gpu.clocks GPU0 00000000:1B:00.0"},
                 "hardware thermal"},
        Breakage{"NvlinkDown",
                 kIb,
                 [](Harness& h) {
                   h.gpus.gpus[1].nvlinks_up = 16;
                   h.gpus.gpus[1].nvlinks_down = 2;
                 },
                 {"WARN gpu.nvlink GPU1 00000000:9B:00.0"},
                 "16 NVLinks up, 2 down"},
        Breakage{"MigModeWaitsForAReset",
                 kIb,
                 [](Harness& h) {
                   h.gpus.gpus[1].mig_enabled = false;
                   h.gpus.gpus[1].mig_pending = true;
                 },
                 {"WARN gpu.mig GPU1 00000000:9B:00.0"},
                 "nvidia-smi -r -i 1"}),
    [](const ::testing::TestParamInfo<Breakage>& param) { return param.param.name; });

// A GPU in MIG mode, or MIG-capable with MIG off, passes with what it is.
TEST(DoctorTest, MigModesThatNeedNoResetPass) {
  Harness h(kIb);
  h.gpus.gpus[0].mig_enabled = true;
  h.gpus.gpus[0].mig_pending = true;
  h.gpus.gpus[0].mig_instances = 7;
  h.gpus.gpus[1].mig_enabled = false;
  h.gpus.gpus[1].mig_pending = false;
  Report r = h.run();
  EXPECT_THAT(flagged(r), ::testing::IsEmpty()) << describe(r);
  std::vector<std::string> seen;
  for (const Check& c : r.checks)
    if (c.id == "gpu.mig") seen.push_back(c.subject + ": " + c.evidence);
  EXPECT_EQ(seen, (std::vector<std::string>{"GPU0 00000000:1B:00.0: MIG mode enabled, 7 MIG devices",
                                            "GPU1 00000000:9B:00.0: MIG mode disabled"}));
}

TEST(DoctorTest, DmaBufStandsInForPeerMemory) {
  Harness h(kIb);
  h.node.write("proc/modules", "mlx5_ib 458752 0 - Live 0x0\n");
  h.node.write("proc/driver/nvidia/version",
               "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n");
  Report r = h.run();
  EXPECT_THAT(flagged(r), ::testing::IsEmpty()) << describe(r);
  auto it =
      std::find_if(r.checks.begin(), r.checks.end(), [](const Check& c) { return c.id == "gdr.peermem"; });
  ASSERT_NE(it, r.checks.end());
  EXPECT_THAT(it->evidence, HasSubstr("dma-buf"));
  // The same driver on a kernel without dma-buf is not enough.
  h.node.write("proc/sys/kernel/osrelease", "5.4.0-150-generic\n");
  EXPECT_EQ(flagged(h.run()), std::vector<std::string>{"WARN gdr.peermem node"});
}

const Check* findCheck(const Report& r, const std::string& id) {
  auto it = std::find_if(r.checks.begin(), r.checks.end(), [&](const Check& c) { return c.id == id; });
  return it == r.checks.end() ? nullptr : &*it;
}

// The driver's major version as /proc/driver/nvidia/version writes it on each architecture: the
// number after "Module", the architecture (if any) and white space; 0 where there is none.
TEST(DoctorTest, DriverVersionOnEachArchitecture) {
  struct Case {
    std::string version;
    std::string evidence;
  };
  for (const Case& c : std::vector<Case>{
           {"NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  535.104.05  Release Build\n",
            "NVIDIA open kernel module 535"},
           {"NVRM version: NVIDIA UNIX Open Kernel Module for ppc64le  525.60.13  Release Build\n",
            "NVIDIA open kernel module 525"},
           {"NVRM version: NVIDIA UNIX Open Kernel Module  560.28.03  Release Build\n",
            "NVIDIA open kernel module 560"},
           {"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64\t1000.1\n",
            "NVIDIA open kernel module 1000"},
           {"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  510.47.03  Release Build\n",
            "NVIDIA driver 510 is older than 515"},
           {"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550 Release Build\n",
            "NVIDIA driver 0 is older than 515"},
           {"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64550.54.15\n",
            "NVIDIA driver 0 is older than 515"},
           {"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  Release Build\n",
            "NVIDIA driver 0 is older than 515"},
       }) {
    Harness h(kIb);
    h.node.write("proc/modules", "mlx5_ib 458752 0 - Live 0x0\n");
    h.node.write("proc/driver/nvidia/version", c.version);
    Report r = h.run();
    const Check* peermem = findCheck(r, "gdr.peermem");
    ASSERT_NE(peermem, nullptr) << describe(r);
    EXPECT_THAT(peermem->evidence, HasSubstr(c.evidence)) << c.version;
  }
}

// ucx_info -v names the version after "version" in any case and ':', '=' or spaces: the first
// "major.minor" or "major.minor.patch" so written.
TEST(DoctorTest, UcxVersionAsUcxInfoPrintsIt) {
  for (auto [output, evidence] : std::vector<std::pair<std::string, std::string>>{
           {"# UCT version=1.12.1 revision dc92435\n", "version 1.12.1"},
           {"# Library VERSION: 1.16\n", "version 1.16"},
           {"# Library version: 1.15.0.1\n", "version 1.15.0"},
           {"# Library version:: = 1.17.0rc1\n", "version 1.17.0"},
           {"# Library version: 1\n# API headers version: 1.14.1\n", "version 1.14.1"},
       }) {
    Harness h(kIb);
    h.tools.outputs["ucx_info"] = output;
    Report r = h.run();
    const Check* ucx = findCheck(r, "host.ucx");
    ASSERT_NE(ucx, nullptr) << describe(r);
    EXPECT_EQ(ucx->status, Status::kPass) << output;
    EXPECT_EQ(ucx->evidence, evidence) << output;
  }
  for (const char* output :
       {"# Library versions: 1.15.0\n", "# Library version: 1.\n", "# Library version 15\n"}) {
    Harness h(kIb);
    h.tools.outputs["ucx_info"] = output;
    EXPECT_EQ(flagged(h.run()), std::vector<std::string>{"WARN host.ucx ucx_info"}) << output;
  }
}

// Only cpuN directories are CPUs: cpufreq, cpuidle and the like under /sys/devices/system/cpu are not.
TEST(DoctorTest, GovernorsOfCpuDirectoriesOnly) {
  Harness h(kIb);
  for (const char* dir : {"cpufreq", "cpuidle", "cpu", "cpu1a", "vcpu1", "cpu-1"}) {
    h.node.write(std::string("sys/devices/system/cpu/") + dir + "/cpufreq/scaling_governor", "powersave\n");
  }
  Report r = h.run();
  EXPECT_THAT(flagged(r), ::testing::IsEmpty()) << describe(r);
  h.node.write("sys/devices/system/cpu/cpu12/cpufreq/scaling_governor", "powersave\n");
  r = h.run();
  EXPECT_EQ(flagged(r), std::vector<std::string>{"WARN host.cpufreq CPUs"});
  const Check* governor = findCheck(r, "host.cpufreq");
  ASSERT_NE(governor, nullptr);
  EXPECT_THAT(governor->evidence, HasSubstr("performance on 4 CPUs, powersave on 1 CPU"));
}

// A plan that uses one port checks that port and its GPU-NIC pair, and nothing of the rest.
TEST(DoctorTest, PlannedScopeChecksOnlyWhatThePlanUses) {
  Harness h(kIb);
  h.node.setPort("mlx5_1", {.state = "1: DOWN", .phys_state = "2: Polling"});
  h.node.setAcsControl("0000:9a:01.0", 0x1d);
  h.node.remove("dev/infiniband/uverbs1");
  Scope scope{.planned = true, .ports = {{"mlx5_0", 1, std::nullopt}}, .gdr = {}};
  scope.gdr.push_back({*topo::PciAddress::parse("0000:1b:00.0"), "mlx5_0"});
  NodeSources sources;
  sources.roots = h.node.roots();
  sources.host = false;
  Report r = checkNode(sources, scope);
  EXPECT_THAT(flagged(r), ::testing::IsEmpty()) << describe(r);
  std::vector<std::string> subjects;
  for (const Check& c : r.checks) subjects.push_back(c.id + " " + c.subject);
  EXPECT_THAT(subjects, ::testing::Contains("rdma.port mlx5_0/1"));
  EXPECT_THAT(subjects, ::testing::Not(::testing::Contains("rdma.port mlx5_1/1")));
  EXPECT_THAT(subjects, ::testing::Contains("gdr.acs 2 bridges"));

  // The broken pair is found once the plan uses it; a port the node lacks is a failure too.
  scope.ports = {{"mlx5_1", 1, std::nullopt}, {"mlx5_7", 1, std::nullopt}};
  scope.gdr = {{*topo::PciAddress::parse("0000:9b:00.0"), "mlx5_1"}};
  r = checkNode(sources, scope);
  EXPECT_EQ(flagged(r), (std::vector<std::string>{"FAIL rdma.port mlx5_7/1", "FAIL rdma.port mlx5_1/1",
                                                  "FAIL rdma.uverbs mlx5_1", "FAIL gdr.acs 0000:9a:01.0"}))
      << describe(r);
}

TEST(DoctorTest, NoRdmaNoGpuIsSkippedNotFailed) {
  poolrun::test::TempDir empty;
  NodeSources sources;
  sources.roots = {empty.path(), empty.path(), empty.path()};
  FakeGpus gpus;
  gpus.present = false;
  sources.gpus = &gpus;
  Report r = checkNode(sources, {});
  EXPECT_FALSE(r.failed()) << describe(r);
  EXPECT_EQ(flagged(r), std::vector<std::string>{}) << describe(r);
  std::vector<std::string> skipped;
  for (const Check& c : r.checks) {
    if (c.status == Status::kSkip) skipped.push_back(c.id);
  }
  EXPECT_THAT(skipped, ::testing::IsSupersetOf(
                           {"rdma", "gdr", "gpu", "host.numa_balancing", "host.cpufreq", "host.thp"}));
}

TEST(DoctorTest, ReportJsonCarriesEveryField) {
  Harness h(kIb);
  h.node.setPort("mlx5_1", {.state = "1: DOWN", .phys_state = "2: Polling"});
  Report r = h.run();
  nlohmann::json doc = nlohmann::json::parse(toJson(r));
  EXPECT_EQ(doc["schema"], "poolrun.doctor/1");
  ASSERT_EQ(doc["checks"].size(), r.checks.size());
  bool found = false;
  for (const auto& c : doc["checks"]) {
    for (const char* key : {"id", "status", "subject", "evidence", "fix"})
      EXPECT_TRUE(c.contains(key)) << key;
    if (c["id"] == "rdma.port" && c["status"] == "FAIL") {
      found = true;
      EXPECT_EQ(c["subject"], "mlx5_1/1");
      EXPECT_THAT(c["evidence"].get<std::string>(), HasSubstr("1: DOWN"));
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(doc["summary"]["fail"], 1);
}

TEST(DoctorTest, AReportNestedTooDeepIsRefusedNotRecursedInto) {
  // A check that is a list nested 100,000 deep: printed in the error, it would overflow the stack.
  std::string deep = R"({"schema": "poolrun.doctor/1", "checks": [)" + std::string(100000, '[') +
                     std::string(100000, ']') + "]}";
  try {
    reportFromJson(deep);
    ADD_FAILURE() << "accepted";
  } catch (const poolrun::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("nests deeper than 64"));
  }
}

}  // namespace
}  // namespace poolrun::doctor
