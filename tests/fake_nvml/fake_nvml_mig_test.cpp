// The fake NVML's Multi-Instance GPU (docs/fake-nvml.md, "MIG"), driven through
// poolrun::topo::nvml::Session as poolrun's prober drives the driver: modes, profiles looked up by
// index, MIG devices enumerated with holes, instances created and destroyed with every error the
// driver answers, the file written back and read by other processes, and hostile files refused.
// This binary loads the fake in-process (fake_nvml_main.cpp).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fake_nvml/fake_nvml_file.hpp"
#include "poolrun/topo/nvml_session.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::topo::nvml {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr unsigned kNoInstance = 0xFFFFFFFFu;

// The MIG calls of nvml_session.hpp, resolved once from a session.
struct Mig {
  explicit Mig(const Session& s)
      : getMigMode(s.get<Return(Device, unsigned*, unsigned*)>("nvmlDeviceGetMigMode")),
        setMigMode(s.get<Return(Device, unsigned, Return*)>("nvmlDeviceSetMigMode")),
        maxMigDeviceCount(s.get<Return(Device, unsigned*)>("nvmlDeviceGetMaxMigDeviceCount")),
        migDeviceByIndex(s.get<Return(Device, unsigned, Device*)>("nvmlDeviceGetMigDeviceHandleByIndex")),
        isMigDevice(s.get<Return(Device, unsigned*)>("nvmlDeviceIsMigDeviceHandle")),
        parentOf(s.get<Return(Device, Device*)>("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")),
        gpuInstanceId(s.get<Return(Device, unsigned*)>("nvmlDeviceGetGpuInstanceId")),
        computeInstanceId(s.get<Return(Device, unsigned*)>("nvmlDeviceGetComputeInstanceId")),
        attributes(s.get<Return(Device, DeviceAttributes*)>("nvmlDeviceGetAttributes_v2")),
        profileInfo(s.get<Return(Device, unsigned, GpuInstanceProfileInfoV2*)>(
            "nvmlDeviceGetGpuInstanceProfileInfoV")),
        remainingCapacity(
            s.get<Return(Device, unsigned, unsigned*)>("nvmlDeviceGetGpuInstanceRemainingCapacity")),
        gpuInstances(s.get<Return(Device, unsigned, GpuInstance*, unsigned*)>("nvmlDeviceGetGpuInstances")),
        gpuInstanceById(s.get<Return(Device, unsigned, GpuInstance*)>("nvmlDeviceGetGpuInstanceById")),
        createGpuInstance(s.get<Return(Device, unsigned, GpuInstance*)>("nvmlDeviceCreateGpuInstance")),
        destroyGpuInstance(s.get<Return(GpuInstance)>("nvmlGpuInstanceDestroy")),
        gpuInstanceInfo(s.get<Return(GpuInstance, GpuInstanceInfo*)>("nvmlGpuInstanceGetInfo")),
        computeProfileInfo(s.get<Return(GpuInstance, unsigned, unsigned, ComputeInstanceProfileInfoV2*)>(
            "nvmlGpuInstanceGetComputeInstanceProfileInfoV")),
        computeInstances(s.get<Return(GpuInstance, unsigned, ComputeInstance*, unsigned*)>(
            "nvmlGpuInstanceGetComputeInstances")),
        computeInstanceById(
            s.get<Return(GpuInstance, unsigned, ComputeInstance*)>("nvmlGpuInstanceGetComputeInstanceById")),
        createComputeInstance(
            s.get<Return(GpuInstance, unsigned, ComputeInstance*)>("nvmlGpuInstanceCreateComputeInstance")),
        destroyComputeInstance(s.get<Return(ComputeInstance)>("nvmlComputeInstanceDestroy")),
        computeInstanceInfo(
            s.get<Return(ComputeInstance, ComputeInstanceInfo*)>("nvmlComputeInstanceGetInfo_v2")),
        uuid(s.get<Return(Device, char*, unsigned)>("nvmlDeviceGetUUID")),
        name(s.get<Return(Device, char*, unsigned)>("nvmlDeviceGetName")),
        memory(s.get<Return(Device, Memory*)>("nvmlDeviceGetMemoryInfo")),
        utilization(s.get<Return(Device, Utilization*)>("nvmlDeviceGetUtilizationRates")),
        processes(s.get<Return(Device, unsigned*, ProcessInfo*)>("nvmlDeviceGetComputeRunningProcesses_v3")) {
  }

  bool complete() const {
    return getMigMode && setMigMode && maxMigDeviceCount && migDeviceByIndex && isMigDevice && parentOf &&
           gpuInstanceId && computeInstanceId && attributes && profileInfo && remainingCapacity &&
           gpuInstances && gpuInstanceById && createGpuInstance && destroyGpuInstance && gpuInstanceInfo &&
           computeProfileInfo && computeInstances && computeInstanceById && createComputeInstance &&
           destroyComputeInstance && computeInstanceInfo && uuid && name && memory && utilization &&
           processes;
  }

  // The profile at `index`, with the version set as poolrun sets it; r is what the call answered.
  GpuInstanceProfileInfoV2 profile(Device gpu, unsigned index, Return& r) const {
    GpuInstanceProfileInfoV2 info{};
    info.version = kGpuInstanceProfileInfoV2Version;
    r = profileInfo(gpu, index, &info);
    return info;
  }

  // Every MIG device of `gpu`, by index, as poolrun enumerates them (holes skipped).
  std::vector<std::pair<unsigned, Device>> devices(Device gpu) const {
    std::vector<std::pair<unsigned, Device>> out;
    unsigned most = 0;
    if (maxMigDeviceCount(gpu, &most) != kSuccess) return out;
    for (unsigned i = 0; i < most; ++i) {
      Device mig = nullptr;
      if (migDeviceByIndex(gpu, i, &mig) == kSuccess) out.push_back({i, mig});
    }
    return out;
  }

  std::string uuidOf(Device device) const {
    char text[96] = {};
    return uuid(device, text, sizeof text) == kSuccess ? text : "";
  }

  Return (*getMigMode)(Device, unsigned*, unsigned*);
  Return (*setMigMode)(Device, unsigned, Return*);
  Return (*maxMigDeviceCount)(Device, unsigned*);
  Return (*migDeviceByIndex)(Device, unsigned, Device*);
  Return (*isMigDevice)(Device, unsigned*);
  Return (*parentOf)(Device, Device*);
  Return (*gpuInstanceId)(Device, unsigned*);
  Return (*computeInstanceId)(Device, unsigned*);
  Return (*attributes)(Device, DeviceAttributes*);
  Return (*profileInfo)(Device, unsigned, GpuInstanceProfileInfoV2*);
  Return (*remainingCapacity)(Device, unsigned, unsigned*);
  Return (*gpuInstances)(Device, unsigned, GpuInstance*, unsigned*);
  Return (*gpuInstanceById)(Device, unsigned, GpuInstance*);
  Return (*createGpuInstance)(Device, unsigned, GpuInstance*);
  Return (*destroyGpuInstance)(GpuInstance);
  Return (*gpuInstanceInfo)(GpuInstance, GpuInstanceInfo*);
  Return (*computeProfileInfo)(GpuInstance, unsigned, unsigned, ComputeInstanceProfileInfoV2*);
  Return (*computeInstances)(GpuInstance, unsigned, ComputeInstance*, unsigned*);
  Return (*computeInstanceById)(GpuInstance, unsigned, ComputeInstance*);
  Return (*createComputeInstance)(GpuInstance, unsigned, ComputeInstance*);
  Return (*destroyComputeInstance)(ComputeInstance);
  Return (*computeInstanceInfo)(ComputeInstance, ComputeInstanceInfo*);
  Return (*uuid)(Device, char*, unsigned);
  Return (*name)(Device, char*, unsigned);
  Return (*memory)(Device, Memory*);
  Return (*utilization)(Device, Utilization*);
  Return (*processes)(Device, unsigned*, ProcessInfo*);
};

// H100 80GB profile ids (nvidia-smi mig -lgip).
constexpr unsigned k1g10gb = 19, k1g10gbMe = 20, k1g20gb = 15, k2g20gb = 14, k3g40gb = 9, k4g40gb = 5,
                   k7g80gb = 0;

class MigTest : public ::testing::Test {
 protected:
  // GPU 0: an H100 in MIG mode, privileged, empty. GPU 1: an A100 with MIG off. GPU 2: no MIG.
  void SetUp() override {
    file_ = dir_.path() / "nvml.json";
    doc_ = {
        {"gpus",
         {{{"pci", "0000:18:00.0"},
           {"name", "NVIDIA H100 80GB HBM3"},
           {"uuid", "GPU-h100"},
           {"memory_total_bytes", 80ULL << 30},
           {"utilization", {{"gpu", 5}, {"memory", 1}}},
           {"processes", Json::array()},
           {"mig",
            {{"current", true},
             {"privileged", true},
             {"profiles", test::migProfiles("H100 80GB")},
             {"gpu_instances", Json::array()}}}},
          {{"pci", "0000:2a:00.0"},
           {"name", "NVIDIA A100-SXM4-80GB"},
           {"utilization", {{"gpu", 7}, {"memory", 2}}},
           {"processes", Json::array()},
           {"mig", {{"current", false}, {"privileged", true}, {"profiles", test::migProfiles("A100 80GB")}}}},
          {{"pci", "0000:3b:00.0"}, {"name", "NVIDIA L40S"}}}}};
    write();
    setenv("POOLRUN_FAKE_NVML", file_.c_str(), 1);
  }
  void TearDown() override { unsetenv("POOLRUN_FAKE_NVML"); }

  void write() { test::writeFakeNvml(file_, doc_); }
  Json& mig(size_t gpu) { return doc_["gpus"][gpu]["mig"]; }
  Json onFile() const { return Json::parse(test::slurp(file_)); }

  // A 3g.40gb at placement 4 holding a 1c.3g.40gb (MIG device 0, on its third compute slice) and a
  // 2c.3g.40gb (MIG device 3, on the first two), and a 1g.10gb at placement 0 holding a 1g.10gb (MIG
  // device 5): indexes 1, 2, 4 and 6 are holes.
  void instancesWithHoles() {
    mig(0)["gpu_instances"] = {
        {{"id", 2},
         {"profile_id", k3g40gb},
         {"placement", 4},
         {"memory_used_bytes", 1ULL << 30},
         {"compute_instances",
          {{{"id", 0}, {"profile_id", 0}, {"placement", 2}, {"index", 0}, {"uuid", "MIG-aaaa"}},
           {{"id", 1}, {"profile_id", 1}, {"index", 3}, {"uuid", "MIG-bbbb"}}}}},
        {{"id", 9},
         {"profile_id", k1g10gb},
         {"placement", 0},
         {"compute_instances", {{{"id", 0}, {"index", 5}, {"uuid", "MIG-cccc"}}}}}};
    write();
  }

  test::TempDir dir_;
  std::filesystem::path file_;
  Json doc_;
};

// What a session on the file answers, with the MIG calls resolved.
struct Opened {
  Session session;
  Mig mig{session};
  std::vector<Session::Gpu> gpus = session.gpus();
  Device gpu(size_t i) const { return gpus.at(i).device; }
};

TEST_F(MigTest, ServesEveryMigCallOfTheAbi) {
  Opened o;
  ASSERT_TRUE(o.session.ok()) << o.session.why();
  EXPECT_TRUE(o.mig.complete());
  ASSERT_EQ(o.gpus.size(), 3u);
}

TEST_F(MigTest, ModesAndTheUpperBoundOnMigDevices) {
  mig(1)["pending"] = true;
  write();
  Opened o;
  unsigned current = 9, pending = 9, most = 9;
  ASSERT_EQ(o.mig.getMigMode(o.gpu(0), &current, &pending), kSuccess);
  EXPECT_EQ(current, kMigEnable);
  EXPECT_EQ(pending, kMigEnable);
  ASSERT_EQ(o.mig.getMigMode(o.gpu(1), &current, &pending), kSuccess);
  EXPECT_EQ(current, kMigDisable);
  EXPECT_EQ(pending, kMigEnable) << "waiting for a reset";
  EXPECT_EQ(o.mig.getMigMode(o.gpu(2), &current, &pending), kErrorNotSupported) << "no MIG on an L40S";

  ASSERT_EQ(o.mig.maxMigDeviceCount(o.gpu(0), &most), kSuccess);
  EXPECT_EQ(most, 7u) << "7 compute slices";
  ASSERT_EQ(o.mig.maxMigDeviceCount(o.gpu(1), &most), kSuccess);
  EXPECT_EQ(most, 0u) << "MIG off";
  EXPECT_EQ(o.mig.maxMigDeviceCount(o.gpu(2), &most), kErrorNotSupported);
  Device none = nullptr;
  EXPECT_EQ(o.mig.migDeviceByIndex(o.gpu(1), 0, &none), kErrorInvalidArgument);
}

TEST_F(MigTest, ProfilesByIndexAnswerTheirDeviceUniqueIds) {
  Opened o;
  std::map<unsigned, unsigned> idByIndex;
  for (unsigned index = 0; index < kGpuInstanceProfileCount; ++index) {
    Return r = kErrorUnknown;
    GpuInstanceProfileInfoV2 info = o.mig.profile(o.gpu(0), index, r);
    if (r == kSuccess) {
      idByIndex[index] = info.id;
    } else {
      EXPECT_EQ(r, kErrorNotSupported) << index;
    }
  }
  EXPECT_EQ(idByIndex, (std::map<unsigned, unsigned>{{0, k1g10gb},
                                                     {1, k2g20gb},
                                                     {2, k3g40gb},
                                                     {3, k4g40gb},
                                                     {4, k7g80gb},
                                                     {7, k1g10gbMe},
                                                     {9, k1g20gb}}));
  Return r = kErrorUnknown;
  GpuInstanceProfileInfoV2 three = o.mig.profile(o.gpu(0), 2, r);
  ASSERT_EQ(r, kSuccess);
  EXPECT_EQ(three.version, kGpuInstanceProfileInfoV2Version);
  EXPECT_EQ(three.id, 9u) << "3g.40gb: index 2, id 9";
  EXPECT_STREQ(three.name, "MIG 3g.40gb");
  EXPECT_EQ(three.sliceCount, 3u);
  EXPECT_EQ(three.instanceCount, 2u);
  EXPECT_EQ(three.multiprocessorCount, 60u);
  EXPECT_EQ(three.memorySizeMB, 40448u);
  EXPECT_EQ(three.copyEngineCount, 3u);
  EXPECT_EQ(three.isP2pSupported, 0u);
  GpuInstanceProfileInfoV2 whole = o.mig.profile(o.gpu(0), 4, r);
  EXPECT_STREQ(whole.name, "MIG 7g.80gb");
  EXPECT_EQ(whole.multiprocessorCount, 132u);

  o.mig.profile(o.gpu(0), kGpuInstanceProfileCount, r);
  EXPECT_EQ(r, kErrorInvalidArgument) << "beyond NVML_GPU_INSTANCE_PROFILE_COUNT";
  GpuInstanceProfileInfoV2 old{};
  old.version = static_cast<unsigned>(sizeof(GpuInstanceProfileInfoV2)) | (1u << 24);
  EXPECT_EQ(o.mig.profileInfo(o.gpu(0), 0, &old), kErrorArgumentVersionMismatch);
  GpuInstanceProfileInfoV2 unset{};
  EXPECT_EQ(o.mig.profileInfo(o.gpu(0), 0, &unset), kErrorArgumentVersionMismatch) << "version not set";
  o.mig.profile(o.gpu(1), 0, r);
  EXPECT_EQ(r, kErrorNotSupported) << "MIG off";
}

TEST_F(MigTest, A100ProfilesDifferFromTheH100sWithTheSameIds) {
  mig(1)["current"] = true;
  write();
  Opened o;
  Return r = kErrorUnknown;
  GpuInstanceProfileInfoV2 one = o.mig.profile(o.gpu(1), 0, r);
  ASSERT_EQ(r, kSuccess);
  EXPECT_EQ(one.id, 19u);
  EXPECT_STREQ(one.name, "MIG 1g.10gb");
  EXPECT_EQ(one.multiprocessorCount, 14u);
  GpuInstanceProfileInfoV2 whole = o.mig.profile(o.gpu(1), 4, r);
  EXPECT_EQ(whole.multiprocessorCount, 98u);
  EXPECT_EQ(whole.memorySizeMB, 80896u);
  EXPECT_THROW(test::migProfiles("H200 141GB"), std::invalid_argument);
}

TEST_F(MigTest, EnumeratesMigDevicesWithHoles) {
  instancesWithHoles();
  doc_["gpus"][0]["processes"] = {{{"pid", 100}, {"used_memory_bytes", 1 << 20}},
                                  {{"pid", 200}, {"gpu_instance_id", 2}, {"compute_instance_id", 1}},
                                  {{"pid", 300}, {"gpu_instance_id", 9}, {"compute_instance_id", 0}}};
  write();
  Opened o;
  Device gpu = o.gpu(0);
  auto devices = o.mig.devices(gpu);
  std::vector<unsigned> indexes;
  for (auto& [i, d] : devices) indexes.push_back(i);
  EXPECT_THAT(indexes, ElementsAre(0u, 3u, 5u));
  Device none = nullptr;
  EXPECT_EQ(o.mig.migDeviceByIndex(gpu, 1, &none), kErrorNotFound) << "a hole";
  EXPECT_EQ(o.mig.migDeviceByIndex(gpu, 7, &none), kErrorInvalidArgument) << "at the upper bound";
  ASSERT_EQ(devices.size(), 3u);

  struct Expected {
    unsigned gi, ci;
    const char* uuid;
    const char* name;
    unsigned sm, ciSlices, giSlices;
    unsigned long long memoryMb, usedBytes;
  };
  const Expected expected[] = {
      {2, 0, "MIG-aaaa", "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", 16, 1, 3, 40448, 1ULL << 30},
      {2, 1, "MIG-bbbb", "NVIDIA H100 80GB HBM3 MIG 2c.3g.40gb", 32, 2, 3, 40448, 1ULL << 30},
      {9, 0, "MIG-cccc", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16, 1, 1, 9984, 0}};
  for (size_t k = 0; k < 3; ++k) {
    Device d = devices[k].second;
    const Expected& e = expected[k];
    unsigned is = 0, gi = 0, ci = 0;
    Device parent = nullptr;
    ASSERT_EQ(o.mig.isMigDevice(d, &is), kSuccess);
    EXPECT_EQ(is, 1u);
    ASSERT_EQ(o.mig.parentOf(d, &parent), kSuccess);
    EXPECT_EQ(parent, gpu);
    ASSERT_EQ(o.mig.gpuInstanceId(d, &gi), kSuccess);
    ASSERT_EQ(o.mig.computeInstanceId(d, &ci), kSuccess);
    EXPECT_EQ(gi, e.gi);
    EXPECT_EQ(ci, e.ci);
    EXPECT_EQ(o.mig.uuidOf(d), e.uuid);
    char name[96] = {};
    ASSERT_EQ(o.mig.name(d, name, sizeof name), kSuccess);
    EXPECT_STREQ(name, e.name);
    DeviceAttributes a{};
    ASSERT_EQ(o.mig.attributes(d, &a), kSuccess);
    EXPECT_EQ(a.multiprocessorCount, e.sm) << e.name;
    EXPECT_EQ(a.computeInstanceSliceCount, e.ciSlices);
    EXPECT_EQ(a.gpuInstanceSliceCount, e.giSlices);
    EXPECT_EQ(a.memorySizeMB, e.memoryMb);
    Memory m{};
    ASSERT_EQ(o.mig.memory(d, &m), kSuccess);
    EXPECT_EQ(m.total, e.memoryMb << 20) << "its GPU instance's share";
    EXPECT_EQ(m.used, e.usedBytes);
    Utilization u{};
    EXPECT_EQ(o.mig.utilization(d, &u), kErrorNotSupported);
  }

  // The GPU's processes carry their MIG device; a MIG device lists its own.
  ProcessInfo infos[8] = {};
  unsigned n = 8;
  ASSERT_EQ(o.mig.processes(gpu, &n, infos), kSuccess);
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(infos[0].gpuInstanceId, kNoInstance);
  EXPECT_EQ(infos[1].gpuInstanceId, 2u);
  EXPECT_EQ(infos[1].computeInstanceId, 1u);
  n = 8;
  ASSERT_EQ(o.mig.processes(devices[1].second, &n, infos), kSuccess);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(infos[0].pid, 200u);
  n = 8;
  ASSERT_EQ(o.mig.processes(devices[0].second, &n, infos), kSuccess);
  EXPECT_EQ(n, 0u);

  // A whole GPU is no MIG device.
  unsigned is = 9, id = 0;
  DeviceAttributes a{};
  Device parent = nullptr;
  ASSERT_EQ(o.mig.isMigDevice(gpu, &is), kSuccess);
  EXPECT_EQ(is, 0u);
  EXPECT_EQ(o.mig.gpuInstanceId(gpu, &id), kErrorNotSupported);
  EXPECT_EQ(o.mig.computeInstanceId(gpu, &id), kErrorNotSupported);
  EXPECT_EQ(o.mig.attributes(gpu, &a), kErrorNotSupported);
  EXPECT_EQ(o.mig.parentOf(gpu, &parent), kErrorInvalidArgument);
  EXPECT_EQ(o.mig.uuidOf(gpu), "GPU-h100");
  EXPECT_EQ(o.mig.migDeviceByIndex(devices[0].second, 0, &none), kErrorInvalidArgument)
      << "not on a MIG device";
}

TEST_F(MigTest, GpuAndComputeInstancesAsTheFileListsThem) {
  instancesWithHoles();
  Opened o;
  Device gpu = o.gpu(0);
  GpuInstance list[7] = {};
  unsigned n = 0;
  ASSERT_EQ(o.mig.gpuInstances(gpu, k3g40gb, list, &n), kSuccess);
  ASSERT_EQ(n, 1u);
  GpuInstanceInfo info{};
  ASSERT_EQ(o.mig.gpuInstanceInfo(list[0], &info), kSuccess);
  EXPECT_EQ(info.device, gpu);
  EXPECT_EQ(info.id, 2u);
  EXPECT_EQ(info.profileId, k3g40gb);
  EXPECT_EQ(info.placement.start, 4u);
  EXPECT_EQ(info.placement.size, 4u) << "a 3g takes 4 of the 8 memory slices";
  ASSERT_EQ(o.mig.gpuInstances(gpu, k7g80gb, list, &n), kSuccess);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(o.mig.gpuInstances(gpu, 77, list, &n), kErrorInvalidArgument) << "no such profile id";

  GpuInstance byId = nullptr;
  EXPECT_EQ(o.mig.gpuInstanceById(gpu, 3, &byId), kErrorNotFound);
  ASSERT_EQ(o.mig.gpuInstanceById(gpu, 2, &byId), kSuccess);
  EXPECT_EQ(byId, list[0]) << "one handle per GPU instance";

  // Compute instance profiles of a 3g.40gb, by index 0..7, engine profile 0.
  std::vector<std::string> names;
  for (unsigned index = 0; index < kComputeInstanceProfileCount; ++index) {
    ComputeInstanceProfileInfoV2 c{};
    c.version = kComputeInstanceProfileInfoV2Version;
    Return r = o.mig.computeProfileInfo(byId, index, kComputeInstanceShared, &c);
    if (r == kSuccess) {
      names.push_back(std::string(c.name) + " id " + std::to_string(c.id) + " x" +
                      std::to_string(c.instanceCount) + " " + std::to_string(c.multiprocessorCount) + " SMs");
    } else {
      EXPECT_EQ(r, kErrorNotSupported) << index;
    }
  }
  EXPECT_THAT(names, ElementsAre("MIG 1c.3g.40gb id 0 x3 16 SMs", "MIG 2c.3g.40gb id 1 x1 32 SMs",
                                 "MIG 3g.40gb id 2 x1 60 SMs"));
  ComputeInstanceProfileInfoV2 c{};
  EXPECT_EQ(o.mig.computeProfileInfo(byId, 0, 0, &c), kErrorArgumentVersionMismatch);
  c.version = kComputeInstanceProfileInfoV2Version;
  EXPECT_EQ(o.mig.computeProfileInfo(byId, 0, 1, &c), kErrorInvalidArgument) << "engine profile 1";
  EXPECT_EQ(o.mig.computeProfileInfo(byId, 8, 0, &c), kErrorInvalidArgument);

  ComputeInstance cis[3] = {};
  ASSERT_EQ(o.mig.computeInstances(byId, 1, cis, &n), kSuccess);
  ASSERT_EQ(n, 1u);
  ComputeInstanceInfo ci{};
  ASSERT_EQ(o.mig.computeInstanceInfo(cis[0], &ci), kSuccess);
  EXPECT_EQ(ci.device, gpu);
  EXPECT_EQ(ci.gpuInstance, byId);
  EXPECT_EQ(ci.id, 1u);
  EXPECT_EQ(ci.profileId, 1u);
  EXPECT_EQ(ci.placement.size, 2u);
  ComputeInstance one = nullptr;
  EXPECT_EQ(o.mig.computeInstanceById(byId, 5, &one), kErrorNotFound);
  ASSERT_EQ(o.mig.computeInstanceById(byId, 1, &one), kSuccess);
  EXPECT_EQ(one, cis[0]);
}

TEST_F(MigTest, CreatesAndDestroysInstancesAndWritesTheFileBack) {
  Opened o;
  Device gpu = o.gpu(0);
  unsigned left = 0;
  ASSERT_EQ(o.mig.remainingCapacity(gpu, k3g40gb, &left), kSuccess);
  EXPECT_EQ(left, 2u);
  GpuInstance gi = nullptr;
  ASSERT_EQ(o.mig.createGpuInstance(gpu, k3g40gb, &gi), kSuccess);
  ASSERT_EQ(o.mig.remainingCapacity(gpu, k3g40gb, &left), kSuccess);
  EXPECT_EQ(left, 1u);
  ASSERT_EQ(o.mig.remainingCapacity(gpu, k4g40gb, &left), kSuccess);
  EXPECT_EQ(left, 0u) << "the 4g's only placement is taken";
  GpuInstanceInfo info{};
  ASSERT_EQ(o.mig.gpuInstanceInfo(gi, &info), kSuccess);
  EXPECT_EQ(info.profileId, k3g40gb);
  EXPECT_EQ(info.id, 1u);
  EXPECT_EQ(info.placement.start, 0u);

  ComputeInstance ci = nullptr;
  ASSERT_EQ(o.mig.createComputeInstance(gi, 2, &ci), kSuccess) << "the whole 3g.40gb";
  ComputeInstanceInfo cinfo{};
  ASSERT_EQ(o.mig.computeInstanceInfo(ci, &cinfo), kSuccess);
  EXPECT_EQ(cinfo.gpuInstance, gi);
  EXPECT_EQ(cinfo.id, 0u);
  auto devices = o.mig.devices(gpu);
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].first, 0u);
  std::string uuid = o.mig.uuidOf(devices[0].second);
  EXPECT_THAT(uuid, ::testing::StartsWith("MIG-"));

  // On the file, for every later reader.
  Json written = onFile();
  ASSERT_EQ(written["gpus"][0]["mig"]["gpu_instances"].size(), 1u);
  const Json& entry = written["gpus"][0]["mig"]["gpu_instances"][0];
  EXPECT_EQ(entry["id"], 1);
  EXPECT_EQ(entry["profile_id"], k3g40gb);
  EXPECT_EQ(entry["compute_instances"][0]["uuid"], uuid);
  EXPECT_EQ(written["gpus"][1], doc_["gpus"][1]) << "the other GPUs as they were";
  {
    Opened second;
    EXPECT_EQ(second.mig.uuidOf(second.mig.devices(second.gpu(0)).at(0).second), uuid);
  }

  EXPECT_EQ(o.mig.destroyGpuInstance(gi), kErrorInUse) << "it holds a compute instance";
  ASSERT_EQ(o.mig.destroyComputeInstance(ci), kSuccess);
  EXPECT_EQ(o.mig.computeInstanceInfo(ci, &cinfo), kErrorInvalidArgument) << "a destroyed instance's handle";
  EXPECT_TRUE(o.mig.devices(gpu).empty());
  ASSERT_EQ(o.mig.destroyGpuInstance(gi), kSuccess);
  EXPECT_EQ(o.mig.gpuInstanceInfo(gi, &info), kErrorInvalidArgument);
  EXPECT_TRUE(onFile()["gpus"][0]["mig"]["gpu_instances"].empty());
}

TEST_F(MigTest, CreationWithoutRoomAnswersInsufficientResources) {
  Opened o;
  Device gpu = o.gpu(0);
  GpuInstance a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(o.mig.createGpuInstance(gpu, k3g40gb, &a), kSuccess);
  ASSERT_EQ(o.mig.createGpuInstance(gpu, k3g40gb, &b), kSuccess);
  EXPECT_EQ(o.mig.createGpuInstance(gpu, k1g10gb, &c), kErrorInsufficientResources)
      << "two 3g.40gb hold all 8 memory slices, though a compute slice is left";
  unsigned left = 9;
  ASSERT_EQ(o.mig.remainingCapacity(gpu, k1g10gb, &left), kSuccess);
  EXPECT_EQ(left, 0u);
  EXPECT_EQ(o.mig.createGpuInstance(gpu, 1234, &c), kErrorInvalidArgument) << "no such profile id";
  ASSERT_EQ(o.mig.destroyGpuInstance(b), kSuccess);

  GpuInstance me = nullptr, again = nullptr;
  ASSERT_EQ(o.mig.createGpuInstance(gpu, k1g10gbMe, &me), kSuccess);
  EXPECT_EQ(o.mig.createGpuInstance(gpu, k1g10gbMe, &again), kErrorInsufficientResources)
      << "one +me at most";

  ComputeInstance x = nullptr, y = nullptr;
  ASSERT_EQ(o.mig.createComputeInstance(me, 0, &x), kSuccess);
  EXPECT_EQ(o.mig.createComputeInstance(me, 0, &y), kErrorInsufficientResources) << "a 1g holds one 1g";
  EXPECT_EQ(o.mig.createComputeInstance(me, 4, &y), kErrorInvalidArgument) << "no 7-slice profile on a 1g";
  ComputeInstance ones[3] = {};
  for (ComputeInstance& one : ones) ASSERT_EQ(o.mig.createComputeInstance(a, 0, &one), kSuccess);
  EXPECT_EQ(o.mig.createComputeInstance(a, 0, &y), kErrorInsufficientResources) << "three 1c on a 3g";
  std::vector<unsigned> indexes;
  for (auto& [i, d] : o.mig.devices(gpu)) indexes.push_back(i);
  EXPECT_THAT(indexes, ElementsAre(0u, 1u, 2u, 3u));
}

TEST_F(MigTest, WithoutThePrivilegeNothingChanges) {
  instancesWithHoles();
  mig(0)["privileged"] = false;
  mig(1)["privileged"] = false;
  write();
  std::string before = test::slurp(file_);
  Opened o;
  Device gpu = o.gpu(0);
  GpuInstance gi = nullptr, made = nullptr;
  ComputeInstance ci = nullptr, madeCi = nullptr;
  ASSERT_EQ(o.mig.gpuInstanceById(gpu, 9, &gi), kSuccess);
  ASSERT_EQ(o.mig.computeInstanceById(gi, 0, &ci), kSuccess);
  EXPECT_EQ(o.mig.createGpuInstance(gpu, k1g10gb, &made), kErrorNoPermission);
  EXPECT_EQ(o.mig.createComputeInstance(gi, 0, &madeCi), kErrorNoPermission);
  EXPECT_EQ(o.mig.destroyComputeInstance(ci), kErrorNoPermission);
  EXPECT_EQ(o.mig.destroyGpuInstance(gi), kErrorNoPermission);
  Return status = kErrorUnknown;
  EXPECT_EQ(o.mig.setMigMode(o.gpu(1), kMigEnable, &status), kErrorNoPermission);
  EXPECT_EQ(test::slurp(file_), before);
}

TEST_F(MigTest, MigOffRefusesInstancesAsTheDriverDoes) {
  Opened o;
  Device a100 = o.gpu(1), l40s = o.gpu(2);
  GpuInstance gi = nullptr;
  unsigned n = 0;
  EXPECT_EQ(o.mig.createGpuInstance(a100, k1g10gb, &gi), kErrorNotSupported);
  EXPECT_EQ(o.mig.gpuInstances(a100, k1g10gb, &gi, &n), kErrorNotSupported);
  EXPECT_EQ(o.mig.remainingCapacity(a100, k1g10gb, &n), kErrorNotSupported);
  EXPECT_EQ(o.mig.createGpuInstance(l40s, k1g10gb, &gi), kErrorNotSupported);
  Return status = kErrorUnknown;
  EXPECT_EQ(o.mig.setMigMode(l40s, kMigEnable, &status), kErrorNotSupported);
  EXPECT_TRUE(o.mig.devices(a100).empty());
}

TEST_F(MigTest, InstancesInUseStay) {
  instancesWithHoles();
  doc_["gpus"][0]["processes"] = {{{"pid", 300}, {"gpu_instance_id", 9}, {"compute_instance_id", 0}}};
  write();
  Opened o;
  Device gpu = o.gpu(0);
  GpuInstance gi = nullptr;
  ComputeInstance ci = nullptr;
  ASSERT_EQ(o.mig.gpuInstanceById(gpu, 9, &gi), kSuccess);
  ASSERT_EQ(o.mig.computeInstanceById(gi, 0, &ci), kSuccess);
  EXPECT_EQ(o.mig.destroyComputeInstance(ci), kErrorInUse) << "a process runs on it";
  EXPECT_EQ(o.mig.destroyGpuInstance(gi), kErrorInUse);
  Return status = kErrorUnknown;
  EXPECT_EQ(o.mig.setMigMode(gpu, kMigDisable, &status), kErrorInUse) << "its instances go first";

  doc_ = onFile();  // the process ends
  doc_["gpus"][0]["processes"] = Json::array();
  write();
  EXPECT_EQ(o.mig.destroyComputeInstance(ci), kSuccess);
  EXPECT_EQ(o.mig.destroyGpuInstance(gi), kSuccess);
}

TEST_F(MigTest, ModeChangesWaitForAResetWhereTheFileSaysSo) {
  Opened o;
  Device a100 = o.gpu(1);
  unsigned current = 9, pending = 9;
  Return status = kErrorUnknown;
  ASSERT_EQ(o.mig.setMigMode(a100, kMigEnable, &status), kSuccess);
  EXPECT_EQ(status, kSuccess);
  ASSERT_EQ(o.mig.getMigMode(a100, &current, &pending), kSuccess);
  EXPECT_EQ(current, kMigEnable) << "an idle GPU without reset_required switches at once";
  EXPECT_EQ(onFile()["gpus"][1]["mig"]["current"], true);
  ASSERT_EQ(o.mig.setMigMode(a100, kMigDisable, &status), kSuccess);

  doc_ = onFile();
  mig(1)["reset_required"] = true;
  write();
  ASSERT_EQ(o.mig.setMigMode(a100, kMigEnable, &status), kSuccess);
  EXPECT_EQ(status, kErrorResetRequired);
  ASSERT_EQ(o.mig.getMigMode(a100, &current, &pending), kSuccess);
  EXPECT_EQ(current, kMigDisable);
  EXPECT_EQ(pending, kMigEnable);
  Utilization u{};
  EXPECT_EQ(o.mig.utilization(a100, &u), kSuccess) << "not in MIG mode yet";
  doc_ = onFile();  // the reset
  mig(1)["current"] = true;
  write();
  ASSERT_EQ(o.mig.getMigMode(a100, &current, &pending), kSuccess);
  EXPECT_EQ(current, kMigEnable);
  EXPECT_EQ(o.mig.utilization(a100, &u), kErrorNotSupported) << "a GPU in MIG mode";

  // A busy GPU: the mode is pending and the activation says why not.
  doc_ = onFile();
  mig(1)["reset_required"] = false;
  doc_["gpus"][1]["processes"] = {{{"pid", 42}}};
  write();
  ASSERT_EQ(o.mig.setMigMode(a100, kMigDisable, &status), kSuccess);
  EXPECT_EQ(status, kErrorInUse);
  ASSERT_EQ(o.mig.getMigMode(a100, &current, &pending), kSuccess);
  EXPECT_EQ(current, kMigEnable);
  EXPECT_EQ(pending, kMigDisable);
}

TEST_F(MigTest, UtilisationIsNotSampledInMigMode) {
  Opened o;
  Utilization u{};
  EXPECT_EQ(o.mig.utilization(o.gpu(0), &u), kErrorNotSupported);
  ASSERT_EQ(o.mig.utilization(o.gpu(1), &u), kSuccess);
  EXPECT_EQ(u.gpu, 7u);
}

TEST_F(MigTest, AFailEntryNamingAMigCallStillWorks) {
  instancesWithHoles();
  doc_["gpus"][0]["fail"] = {{"nvmlDeviceCreateGpuInstance", "in_use"},
                             {"nvmlDeviceGetMigDeviceHandleByIndex", "gpu_is_lost"},
                             {"nvmlGpuInstanceGetInfo", 999}};
  write();
  Opened o;
  Device gpu = o.gpu(0), mig = nullptr;
  GpuInstance gi = nullptr;
  EXPECT_EQ(o.mig.createGpuInstance(gpu, k1g10gb, &gi), kErrorInUse);
  EXPECT_EQ(o.mig.migDeviceByIndex(gpu, 0, &mig), kErrorGpuIsLost);
  ASSERT_EQ(o.mig.gpuInstanceById(gpu, 2, &gi), kSuccess);
  GpuInstanceInfo info{};
  EXPECT_EQ(o.mig.gpuInstanceInfo(gi, &info), kErrorUnknown);
  EXPECT_EQ(o.session.errorText(kErrorInsufficientResources), "Insufficient resources (NVML error 23)");
}

// Hostile or impossible files fail nvmlInit_v2, the fake naming the key on standard error.
TEST_F(MigTest, RefusesHostileFiles) {
  struct Case {
    const char* what;
    std::function<void(Json&)> edit;
    const char* said;
  };
  const Case cases[] = {
      {"negative GI id",
       [](Json& m) {
         m["gpu_instances"] = {{{"id", -1}, {"profile_id", 19}}};
       },
       "gpu_instances[0].id: -1 is not a whole number"},
      {"negative profile id", [](Json& m) { m["profiles"][0]["id"] = -19; }, "profiles[0].id: -19"},
      {"huge instance count", [](Json& m) { m["profiles"][0]["instances"] = 4294967297ULL; },
       "profiles[0].instances: 4294967297 is not a whole number from 0 to 8"},
      {"duplicate GI id",
       [](Json& m) {
         m["gpu_instances"] = {{{"id", 1}, {"profile_id", 19}}, {{"id", 1}, {"profile_id", 19}}};
       },
       "gpu_instances[1].id: GPU instance 1 listed twice"},
      {"duplicate profile id", [](Json& m) { m["profiles"][1]["id"] = 19; },
       "profiles[1].id: 19 listed twice"},
      {"unknown key in mig", [](Json& m) { m["curent"] = true; }, "mig: unknown key 'curent'"},
      {"unknown key in a profile", [](Json& m) { m["profiles"][0]["slice"] = 1; },
       "profiles[0]: unknown key 'slice'"},
      {"unknown key in a compute instance",
       [](Json& m) {
         m["gpu_instances"] = {
             {{"id", 1}, {"profile_id", 19}, {"compute_instances", {{{"id", 0}, {"gpu", 1}}}}}};
       },
       "compute_instances[0]: unknown key 'gpu'"},
      {"overlapping GPU instances",
       [](Json& m) {
         m["gpu_instances"] = {{{"id", 1}, {"profile_id", 9}, {"placement", 0}},
                               {{"id", 2}, {"profile_id", 19}, {"placement", 1}}};
       },
       "gpu_instances[1].placement: 1 is not a free placement of MIG 1g.10gb"},
      {"an instance with MIG off",
       [](Json& m) {
         m["current"] = false;
         m["gpu_instances"] = {{{"id", 1}, {"profile_id", 19}}};
       },
       "a GPU instance on a GPU whose MIG mode is off"},
      {"a MIG device index beyond the bound",
       [](Json& m) {
         m["gpu_instances"] = {
             {{"id", 1}, {"profile_id", 19}, {"compute_instances", {{{"id", 0}, {"index", 7}}}}}};
       },
       "index: 7 is not below the GPU's 7 MIG devices"},
      {"a profile name too long", [](Json& m) { m["profiles"][0]["name"] = std::string(200, 'g'); },
       "must have 1 to 91 bytes"},
      {"an unknown profile id",
       [](Json& m) {
         m["gpu_instances"] = {{{"id", 1}, {"profile_id", 77}}};
       },
       "no profile has id 77"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    SetUp();
    c.edit(mig(0));
    write();
    ::testing::internal::CaptureStderr();
    bool ok = Session().ok();
    std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(ok);
    EXPECT_THAT(said, HasSubstr(c.said));
  }

  SetUp();  // a process naming a MIG device the GPU does not have
  doc_["gpus"][0]["processes"] = {{{"pid", 1}, {"gpu_instance_id", 3}, {"compute_instance_id", 0}}};
  write();
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(Session().ok());
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("processes[0]: no compute instance 0"));

  SetUp();  // a name that is not UTF-8
  std::string text = doc_.dump();
  text.replace(text.find("\"3g.40gb\""), 9, "\"3g.\xff\xfe\"");
  std::ofstream(file_, std::ios::binary | std::ios::trunc) << text;
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(Session().ok());
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("malformed JSON at byte"));
}

// docs/fake-nvml.md's second example (its first is TelemetryTest's) is served as it says.
TEST_F(MigTest, TheDocumentedMigExampleIsServed) {
  std::string doc = test::slurp(test::sourceDir() / "docs" / "fake-nvml.md");
  size_t start = doc.find("```json\n");
  ASSERT_NE(start, std::string::npos);
  start = doc.find("```json\n", start + 1);
  ASSERT_NE(start, std::string::npos) << "no second example";
  start += 8;
  { std::ofstream(file_) << doc.substr(start, doc.find("```", start) - start); }
  Opened o;
  ASSERT_TRUE(o.session.ok()) << o.session.why();
  auto devices = o.mig.devices(o.gpu(0));
  std::vector<std::string> uuids;
  for (auto& [i, d] : devices) uuids.push_back(std::to_string(i) + " " + o.mig.uuidOf(d));
  EXPECT_THAT(uuids, ElementsAre("0 MIG-2c1e9f02-0000-0000-0000-000000000000",
                                 "3 MIG-2c1e9f02-0000-0000-0000-000000000001",
                                 "5 MIG-fa4e0000-0009-0000-0000-000000000000"));
  ProcessInfo infos[2] = {};
  unsigned n = 2;
  ASSERT_EQ(o.mig.processes(devices.at(1).second, &n, infos), kSuccess);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(infos[0].pid, 4242u);
  GpuInstance gi = nullptr;
  EXPECT_EQ(o.mig.createGpuInstance(o.gpu(0), k1g10gb, &gi), kErrorNoPermission);
}

// Another process sees what this one created, and two processes creating at once lose nothing (the
// lock file): each child creates one 1g.10gb with its compute instance.
TEST_F(MigTest, OtherProcessesSeeTheInstancesAndDoNotLoseThem) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string child =
      "'" + self +
      "' --gtest_also_run_disabled_tests --gtest_filter=MigChild.DISABLED_CreatesOneMigDevice "
      ">/dev/null 2>&1";
  test::Reaped a{test::spawnShell(child)}, b{test::spawnShell(child)}, c{test::spawnShell(child)};
  EXPECT_EQ(a.wait(), 0);
  EXPECT_EQ(b.wait(), 0);
  EXPECT_EQ(c.wait(), 0);
  Opened o;
  EXPECT_EQ(o.mig.devices(o.gpu(0)).size(), 3u);
  EXPECT_EQ(onFile()["gpus"][0]["mig"]["gpu_instances"].size(), 3u);
}

// Run by OtherProcessesSeeTheInstancesAndDoNotLoseThem in a process of its own.
TEST(MigChild, DISABLED_CreatesOneMigDevice) {
  if (getenv("POOLRUN_FAKE_NVML") == nullptr)
    GTEST_SKIP() << "run by OtherProcessesSeeTheInstancesAndDoNotLoseThem";
  Opened o;
  ASSERT_TRUE(o.session.ok()) << o.session.why();
  GpuInstance gi = nullptr;
  ComputeInstance ci = nullptr;
  ASSERT_EQ(o.mig.createGpuInstance(o.gpu(0), k1g10gb, &gi), kSuccess);
  ASSERT_EQ(o.mig.createComputeInstance(gi, 0, &ci), kSuccess);
}

}  // namespace
}  // namespace poolrun::topo::nvml
