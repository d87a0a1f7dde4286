// The TelemetrySampler where NVML is absent (this binary never loads the fake NVML): every GPU of
// the topology still has a sample, with its identity and the reason, and NIC ports are read.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "poolrun/topo/dynamic_library.hpp"
#include "poolrun/topo/telemetry.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::topo {
namespace {

using ::testing::HasSubstr;

TEST(TelemetryNoNvmlTest, EveryGpuHasASampleThatSaysWhy) {
  if (DynamicLibrary("libnvidia-ml.so.1")) GTEST_SKIP() << "this machine has an NVML (libnvidia-ml.so.1)";
  NodeTopology topology = test::synthetic(test::SyntheticSpec());
  topology.gpus[5].uuid = "GPU-from-the-topology";
  TelemetrySampler sampler(topology);
  EXPECT_FALSE(sampler.nvmlOk());
  EXPECT_THAT(sampler.nvmlWhy(), HasSubstr("NVML (libnvidia-ml.so.1) is not installed"));
  std::vector<GpuSample> samples = sampler.gpus();
  ASSERT_EQ(samples.size(), 8u);
  for (size_t i = 0; i < samples.size(); ++i) {
    const GpuSample& s = samples[i];
    EXPECT_EQ(s.index, i);
    EXPECT_EQ(s.pci, topology.gpus[i].pci.str());
    EXPECT_EQ(s.error, sampler.nvmlWhy());
    EXPECT_NE(s.time, SampleTime{});
    EXPECT_FALSE(s.sm_utilization || s.memory_used_bytes || s.temperature_c || s.power_w ||
                 s.ecc_uncorrected_volatile);
    EXPECT_TRUE(s.processes.empty() && s.xid_events.empty());
  }
  EXPECT_EQ(samples[5].uuid, "GPU-from-the-topology");
}

TEST(TelemetryNoNvmlTest, NicPortsAreSampledWithoutNvml) {
  test::SyntheticSpec spec;
  spec.gpus = 2;
  spec.nics = 2;
  NodeTopology topology = test::synthetic(spec);
  test::TempDir root;
  root.write("sys/class/infiniband/" + topology.nics[1].name + "/ports/1/state", "4: ACTIVE\n");
  root.write("sys/class/infiniband/" + topology.nics[1].name + "/ports/1/rate", "400 Gb/sec (4X NDR)\n");
  TelemetrySampler sampler(topology, root.path().string());
  std::vector<NicPortSample> ports = sampler.nics();
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0].state, PortState::kUnknown);
  EXPECT_EQ(ports[1].nic, topology.nics[1].name);
  EXPECT_EQ(ports[1].state, PortState::kActive);
  EXPECT_EQ(ports[1].rate_gbps, 400);
  EXPECT_NE(ports[1].time, SampleTime{});
}

TEST(TelemetryNoNvmlTest, OnlyDoubleBitErrorsAndAGpuOffTheBusFailIt) {
  for (uint64_t xid : {48, 79}) EXPECT_TRUE(xidFailsGpu(xid)) << xid;
  for (uint64_t xid : {0, 13, 31, 43, 45, 63, 64, 74, 92, 94, 95, 999}) EXPECT_FALSE(xidFailsGpu(xid)) << xid;
}

}  // namespace
}  // namespace poolrun::topo
