// The TelemetrySampler and the prober's NVML queries against the fake NVML (docs/fake-nvml.md),
// loaded in this process through the same dlopen as the driver: this binary runs itself again with
// the fake's folder on LD_LIBRARY_PATH (fake_nvml_main.cpp). The node is a real machine's fixture
// (4 H100 and 4 ConnectX NICs, flux-core_ipa20.xml).

#include "poolrun/topo/telemetry.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "fake_nvml/fake_nvml_file.hpp"
#include "nvml.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::topo {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Json = nlohmann::json;

class TelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    POOLRUN_REQUIRE_FIXTURES(fixtures);
    topology_ = readTopologyFile(fixtures / "hwloc-xml" / "flux-core_ipa20.xml");
    ASSERT_EQ(topology_.gpus.size(), 4u);
    file_ = dir_.path() / "nvml.json";
    doc_ = test::fakeNvmlFor(topology_);
    write();
    setenv("POOLRUN_FAKE_NVML", file_.c_str(), 1);
  }
  void TearDown() override { unsetenv("POOLRUN_FAKE_NVML"); }

  void write() { test::writeFakeNvml(file_, doc_); }
  Json& gpu(size_t i) { return doc_["gpus"][i]; }

  test::TempDir dir_;
  NodeTopology topology_;
  std::filesystem::path file_;
  Json doc_;
};

TEST_F(TelemetryTest, SamplesTheFakesValuesForEveryGpuOfTheNode) {
  gpu(0)["utilization"] = {{"gpu", 37}, {"memory", 12}};
  gpu(0)["memory_used_bytes"] = 40ULL << 30;
  gpu(0)["temperature_c"] = 61;
  gpu(0)["power_mw"] = 312500;
  gpu(0)["processes"] = {{{"pid", 4242}, {"used_memory_bytes", 1ULL << 30}}, {{"pid", 4343}}};
  gpu(3)["ecc_uncorrected_volatile"] = 2;
  gpu(3)["retired_pages_pending"] = true;
  gpu(3)["remapped_rows"]["failure"] = true;
  write();

  TelemetrySampler sampler(topology_);
  ASSERT_TRUE(sampler.nvmlOk()) << sampler.nvmlWhy();
  EXPECT_THAT(sampler.nvmlWhy(), IsEmpty());
  std::vector<GpuSample> samples = sampler.gpus();
  ASSERT_EQ(samples.size(), 4u);
  for (size_t i = 0; i < samples.size(); ++i) {
    const GpuSample& s = samples[i];
    EXPECT_EQ(s.index, i);
    EXPECT_EQ(s.pci, topology_.gpus[i].pci.str());
    EXPECT_EQ(s.uuid, "GPU-fake-0000-000" + std::to_string(i)) << "NVML's UUID, not the fixture's";
    EXPECT_THAT(s.error, IsEmpty()) << i;
    EXPECT_EQ(s.time, samples[0].time);
    EXPECT_EQ(s.memory_total_bytes, 80ULL << 30);
    EXPECT_THAT(s.xid_events, IsEmpty());
  }
  const GpuSample& busy = samples[0];
  EXPECT_EQ(busy.sm_utilization, 0.37);
  EXPECT_EQ(busy.memory_utilization, 0.12);
  EXPECT_EQ(busy.memory_used_bytes, 40ULL << 30);
  EXPECT_EQ(busy.temperature_c, 61);
  EXPECT_EQ(busy.power_w, 312.5);
  EXPECT_EQ(busy.ecc_uncorrected_volatile, 0u);
  EXPECT_FALSE(busy.retired_pages_pending);
  EXPECT_FALSE(busy.remapping_failure);
  // The second process's memory is NVML_VALUE_NOT_AVAILABLE: 0.
  EXPECT_EQ(busy.processes, (std::vector<GpuProcess>{{4242, 1ULL << 30}, {4343, 0}}));

  const GpuSample& idle = samples[1];
  EXPECT_EQ(idle.sm_utilization, 0.0);
  EXPECT_EQ(idle.power_w, 70.0);
  EXPECT_THAT(idle.processes, IsEmpty());

  const GpuSample& broken = samples[3];
  EXPECT_EQ(broken.ecc_uncorrected_volatile, 2u);
  EXPECT_TRUE(broken.retired_pages_pending);
  EXPECT_TRUE(broken.remapping_failure);
}

TEST_F(TelemetryTest, WhatTheFileLeavesOutStaysEmptyWithoutAnError) {
  for (const char* key :
       {"utilization", "temperature_c", "power_mw", "ecc_uncorrected_volatile", "processes"})
    gpu(2).erase(key);
  write();
  TelemetrySampler sampler(topology_);
  GpuSample s = sampler.gpus()[2];
  EXPECT_FALSE(s.sm_utilization);
  EXPECT_FALSE(s.temperature_c);
  EXPECT_FALSE(s.power_w);
  EXPECT_FALSE(s.ecc_uncorrected_volatile);
  EXPECT_EQ(s.memory_used_bytes, 0u);
  EXPECT_THAT(s.error, IsEmpty()) << "NVML_ERROR_NOT_SUPPORTED is no error";
}

TEST_F(TelemetryTest, AValueChangedWhileTheSamplerLivesIsInTheNextSample) {
  TelemetrySampler sampler(topology_);
  std::vector<GpuSample> before = sampler.gpus();
  ASSERT_EQ(before[1].sm_utilization, 0.0);

  gpu(1)["utilization"]["gpu"] = 93;
  gpu(1)["memory_used_bytes"] = 70ULL << 30;
  gpu(1)["processes"] = {{{"pid", 777}, {"used_memory_bytes", 5ULL << 30}}};
  write();
  std::vector<GpuSample> after = sampler.gpus();
  EXPECT_EQ(after[1].sm_utilization, 0.93);
  EXPECT_EQ(after[1].memory_used_bytes, 70ULL << 30);
  EXPECT_EQ(after[1].processes, (std::vector<GpuProcess>{{777, 5ULL << 30}}));
  EXPECT_EQ(after[0].sm_utilization, 0.0);
  EXPECT_GE(after[1].time, before[1].time);

  // A file that turns malformed keeps the last values (and the fake says so on stderr).
  {
    std::ofstream(file_.string() + ".new") << "{ \"gpus\": [";
    std::filesystem::rename(file_.string() + ".new", file_);
  }
  testing::internal::CaptureStderr();
  std::vector<GpuSample> kept = sampler.gpus();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("malformed JSON"));
  EXPECT_THAT(err, HasSubstr("the previous values stay"));
  EXPECT_EQ(kept[1].sm_utilization, 0.93);
}

TEST_F(TelemetryTest, XidEventsAreReturnedOnceEach) {
  gpu(2)["xid_events"] = {{{"seq", 1}, {"xid", 79}}, {{"seq", 2}, {"xid", 13}}};
  write();
  TelemetrySampler sampler(topology_);
  std::vector<GpuSample> first = sampler.gpus();
  ASSERT_EQ(first[2].xid_events.size(), 2u);
  EXPECT_EQ(first[2].xid_events[0], (XidEvent{79, first[2].time}));
  EXPECT_EQ(first[2].xid_events[1].xid, 13u);
  for (size_t i : {0, 1, 3}) EXPECT_THAT(first[i].xid_events, IsEmpty()) << i;

  EXPECT_THAT(sampler.gpus()[2].xid_events, IsEmpty()) << "returned again";

  gpu(2)["xid_events"].push_back({{"seq", 3}, {"xid", 48}});
  gpu(0)["xid_events"] = {{{"seq", 1}, {"xid", 31}}};
  write();
  std::vector<GpuSample> third = sampler.gpus();
  ASSERT_EQ(third[2].xid_events.size(), 1u);
  EXPECT_EQ(third[2].xid_events[0].xid, 48u);
  ASSERT_EQ(third[0].xid_events.size(), 1u);
  EXPECT_EQ(third[0].xid_events[0].xid, 31u);
  EXPECT_TRUE(xidFailsGpu(third[2].xid_events[0].xid));
  EXPECT_FALSE(xidFailsGpu(third[0].xid_events[0].xid));
}

TEST_F(TelemetryTest, AGpuWithoutXidEventsIsNoError) {
  gpu(1)["xid_events_supported"] = false;
  write();
  TelemetrySampler sampler(topology_);
  EXPECT_THAT(sampler.gpus()[1].error, IsEmpty());
}

TEST_F(TelemetryTest, AGpuThatFailsACallHasItsErrorAndTheOthersTheirValues) {
  gpu(1)["fail"] = {{"nvmlDeviceGetTemperature", "gpu_is_lost"}, {"nvmlDeviceGetPowerUsage", 999}};
  write();
  TelemetrySampler sampler(topology_);
  std::vector<GpuSample> samples = sampler.gpus();
  EXPECT_FALSE(samples[1].temperature_c);
  EXPECT_FALSE(samples[1].power_w);
  EXPECT_THAT(samples[1].error,
              HasSubstr("temperature: nvmlDeviceGetTemperature failed: GPU is lost (NVML error 15)"));
  EXPECT_THAT(samples[1].error,
              HasSubstr("power: nvmlDeviceGetPowerUsage failed: Unknown Error (NVML error 999)"));
  EXPECT_EQ(samples[1].sm_utilization, 0.0) << "the calls that work still give their values";
  for (size_t i : {0, 2, 3}) {
    EXPECT_THAT(samples[i].error, IsEmpty()) << i;
    EXPECT_EQ(samples[i].temperature_c, 35) << i;
  }

  // The GPU falls off the bus: every call fails, every value is empty, each failure is named.
  gpu(1)["fail"] = {{"*", "gpu_is_lost"}};
  write();
  GpuSample lost = sampler.gpus()[1];
  EXPECT_FALSE(lost.sm_utilization);
  EXPECT_FALSE(lost.memory_used_bytes);
  EXPECT_THAT(lost.processes, IsEmpty());
  for (const char* call :
       {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows", "nvmlDeviceGetComputeRunningProcesses_v3"})
    EXPECT_THAT(lost.error, HasSubstr(call));
  EXPECT_EQ(sampler.gpus()[0].temperature_c, 35);
}

TEST_F(TelemetryTest, AGpuNvmlDoesNotListIsSaidSo) {
  doc_["gpus"].erase(3);
  write();
  TelemetrySampler sampler(topology_);
  std::vector<GpuSample> samples = sampler.gpus();
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_THAT(samples[3].error, HasSubstr("NVML does not list the GPU at 0000:db:00.0"));
  EXPECT_EQ(samples[3].uuid, topology_.gpus[3].uuid) << "the topology's UUID where NVML has none";
  EXPECT_FALSE(samples[3].sm_utilization);
  EXPECT_THAT(samples[2].error, IsEmpty());
}

TEST_F(TelemetryTest, AMalformedFileFailsNvmlInitWithAMessage) {
  struct Case {
    std::string text, message;
  };
  for (const Case& c :
       {Case{"{ \"gpus\": [ {\"pci\": \"0000:4e:00.0\",", "malformed JSON at byte"},
        Case{R"({"gpus": [{"pci": "0000:4e:00.0", "temprature_c": 40}]})",
             "gpus[0]: unknown key 'temprature_c'"},
        Case{R"({"gpus": [{"pci": "4e:00"}]})", "gpus[0].pci: bad PCI address '4e:00'"},
        Case{R"({"gpus": [{"pci": "0000:4e:00.0", "power_mw": "lots"}]})",
             "gpus[0].power_mw: type must be number, but is string (\"lots\")"},
        Case{R"({"gpus": [{"pci": "0000:4e:00.0", "fail": {"*": "broken"}}]})",
             "gpus[0].fail.*: unknown error \"broken\""},
        Case{R"({"gpus": [{"pci": "0000:4e:00.0", "temperature_c": 1e999}]})", "malformed JSON: "}}) {
    { std::ofstream(file_) << c.text; }
    testing::internal::CaptureStderr();
    TelemetrySampler sampler(topology_);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(sampler.nvmlOk()) << c.text;
    EXPECT_THAT(sampler.nvmlWhy(), HasSubstr("NVML failed to initialise (Unknown Error (NVML error 999))"));
    EXPECT_THAT(err, HasSubstr("fake NVML: " + file_.string() + ": " + c.message)) << c.text;
    std::vector<GpuSample> samples = sampler.gpus();
    ASSERT_EQ(samples.size(), 4u);
    for (const GpuSample& s : samples) {
      EXPECT_EQ(s.error, sampler.nvmlWhy());
      EXPECT_FALSE(s.sm_utilization);
      EXPECT_EQ(s.pci, topology_.gpus[s.index].pci.str());
    }
  }
}

// A folder, a pipe or a device in the file's place: said, and NVML fails to initialise; nothing
// blocks on the pipe or reads the device without end.
TEST_F(TelemetryTest, AFileThatIsNoRegularFileFailsNvmlInitWithAMessage) {
  for (const std::string kind : {"folder", "pipe", "device"}) {
    SCOPED_TRACE(kind);
    std::filesystem::remove_all(file_);
    if (kind == "folder") std::filesystem::create_directory(file_);
    if (kind == "pipe") {
      ASSERT_EQ(mkfifo(file_.c_str(), 0600), 0);
    }
    if (kind == "device") std::filesystem::create_symlink("/dev/zero", file_);
    testing::internal::CaptureStderr();
    TelemetrySampler sampler(topology_);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(sampler.nvmlOk());
    EXPECT_THAT(err, HasSubstr("fake NVML: " + file_.string() + ": not a regular file"));
  }
  std::filesystem::remove_all(file_);
}

TEST_F(TelemetryTest, NicPortsAreReadFromSysfs) {
  test::TempDir root;
  root.write("sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  root.write("sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
  root.write("sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  root.write("sys/class/infiniband/mlx5_1/ports/1/rate", "10 Gb/sec (4X SDR)\n");
  TelemetrySampler sampler(topology_, root.path().string());
  std::vector<NicPortSample> ports = sampler.nics();
  ASSERT_EQ(ports.size(), 4u);
  EXPECT_EQ(ports[0].nic, "mlx5_0");
  EXPECT_EQ(ports[0].port, 1);
  EXPECT_EQ(ports[0].state, PortState::kActive);
  EXPECT_EQ(ports[0].rate_gbps, 200);
  EXPECT_EQ(ports[1].state, PortState::kDown);
  EXPECT_EQ(ports[1].rate_gbps, 10);
  EXPECT_EQ(ports[2].state, PortState::kUnknown) << "no files for mlx5_2";
  EXPECT_EQ(ports[2].rate_gbps, 0);

  root.write("sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
  EXPECT_EQ(sampler.nics()[0].state, PortState::kDown) << "read again at each sample";
}

TEST_F(TelemetryTest, AGpuLostBeforeTheSamplerStartsIsNotListed) {
  gpu(2)["fail"] = {{"*", "gpu_is_lost"}};
  write();
  TelemetrySampler sampler(topology_);
  std::vector<GpuSample> samples = sampler.gpus();
  EXPECT_THAT(samples[2].error, HasSubstr("NVML does not list the GPU at 0000:cb:00.0"));
  EXPECT_THAT(samples[1].error, IsEmpty());
}

// The example of docs/fake-nvml.md is a file the fake serves, with the values it says.
TEST_F(TelemetryTest, TheDocumentedExampleIsServed) {
  std::ifstream in(test::sourceDir() / "docs" / "fake-nvml.md");
  std::stringstream text;
  text << in.rdbuf();
  std::string doc = text.str();
  size_t start = doc.find("```json\n");
  ASSERT_NE(start, std::string::npos);
  start += 8;
  { std::ofstream(file_) << doc.substr(start, doc.find("```", start) - start); }
  NodeTopology node;
  for (const char* pci : {"0000:18:00.0", "0000:2a:00.0"}) {
    Gpu g;
    g.index = node.gpus.size();
    g.pci = *PciAddress::parse(pci);
    node.gpus.push_back(g);
  }
  TelemetrySampler sampler(node);
  ASSERT_TRUE(sampler.nvmlOk()) << sampler.nvmlWhy();
  std::vector<GpuSample> samples = sampler.gpus();
  EXPECT_EQ(samples[1].uuid, "GPU-7c1d9f02-0000-0000-0000-000000000000");
  EXPECT_EQ(samples[1].sm_utilization, 0.97);
  EXPECT_EQ(samples[1].power_w, 655);
  EXPECT_EQ(samples[1].ecc_uncorrected_volatile, 1u);
  EXPECT_TRUE(samples[1].retired_pages_pending);
  EXPECT_EQ(samples[1].processes, (std::vector<GpuProcess>{{31337, 40ULL << 30}}));
  ASSERT_EQ(samples[1].xid_events.size(), 1u);
  EXPECT_EQ(samples[1].xid_events[0].xid, 48u);
  EXPECT_THAT(samples[0].error, IsEmpty());
  EXPECT_THAT(samples[1].error, IsEmpty());
}

// The prober's NVML path (poolrun topo on a live node): UUIDs and NVLinks from NVML replace what
// hwloc said. GPUs 0 and 1 have 4 links to each other and 8 to an NVSwitch; GPUs 2 and 3 the same,
// but their driver does not say what is at the far end of a link (resolved by PCI address).
TEST_F(TelemetryTest, QueryAndMergeNvmlGiveUuidsAndNvlinks) {
  for (size_t i = 0; i < 4; ++i) {
    Json links = Json::array();
    for (int l = 0; l < 4; ++l) {
      Json link = {{"link", l}, {"remote_pci", topology_.gpus[i ^ 1].pci.str()}};
      if (i < 2) link["remote_type"] = "gpu";
      links.push_back(link);
    }
    for (int l = 4; l < 12; ++l)
      links.push_back({{"link", l}, {"remote_pci", "0000:c0:00.0"}, {"remote_type", "switch"}});
    links.push_back({{"link", 12}, {"active", false}});
    gpu(i)["nvlinks"] = links;
  }
  write();
  std::string why;
  std::optional<std::vector<detail::NvmlGpu>> gpus = detail::queryNvml(why);
  ASSERT_TRUE(gpus) << why;
  ASSERT_EQ(gpus->size(), 4u);
  EXPECT_EQ((*gpus)[0].links.size(), 12u) << "the inactive link is left out";
  EXPECT_EQ((*gpus)[0].sm, 90);

  NodeTopology merged = topology_;
  detail::mergeNvml(merged, *gpus);
  for (size_t i = 0; i < 4; ++i) {
    const Gpu& g = merged.gpus[i];
    EXPECT_EQ(g.uuid, "GPU-fake-0000-000" + std::to_string(i));
    ASSERT_EQ(g.nvlinks.size(), 1u) << i << ": hwloc's links to all three peers are replaced";
    EXPECT_EQ(g.nvlinks[0].gpu, i ^ 1);
    EXPECT_EQ(g.nvlinks[0].count, 4);
    EXPECT_EQ(g.nvswitch_links, 8);
  }
}

}  // namespace
}  // namespace poolrun::topo
