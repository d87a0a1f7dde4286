// `poolrun doctor`'s gpu.* checks against the fake NVML (docs/fake-nvml.md): the NVML path of the
// doctor (doctor/src/gpu.cpp) that CI never ran, through the real binary in a child process that
// loads the fake as it would load the driver. Only the gpu checks are judged: the rest describe
// the machine the test runs on.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "fake_nvml/fake_nvml_file.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::doctor {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

struct Verdict {
  std::string status, evidence, fix;
};

// GPU0 healthy; GPU1 the test breaks.
Json healthyGpu(const std::string& pci, const std::string& uuid) {
  Json links = Json::array();
  for (int l = 0; l < 18; ++l) links.push_back({{"link", l}, {"active", true}});
  return {{"pci", pci},
          {"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", uuid},
          {"persistence", true},
          {"ecc_uncorrected_volatile", 0},
          {"retired_pages_pending", false},
          {"remapped_rows", {{"pending", false}, {"failure", false}}},
          {"clocks_event_reasons", 1},
          {"nvlinks", links}};
}

class DoctorNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    doc_ = {{"gpus", {healthyGpu("0000:4e:00.0", "GPU-a"), healthyGpu("0000:5f:00.0", "GPU-b")}}};
    file_ = dir_.path() / "nvml.json";
  }

  // The doctor on this machine with the fake as its NVML: "gpu..." checks by "ID SUBJECT". Its exit
  // status is `expectStatus`, or with -1 (other checks of this machine decide it) 0 or 1.
  std::map<std::string, Verdict> doctor(int expectStatus) {
    test::writeFakeNvml(file_, doc_);
    err_.clear();
    test::ProcessResult r = test::runShell("timeout 120 " + test::fakeNvmlEnv(file_) +
                                           std::string(POOLRUN_BINARY) + " doctor --json");
    err_ = r.err;
    if (expectStatus >= 0) {
      EXPECT_EQ(r.status, expectStatus) << r.out << r.err;
    } else {
      EXPECT_TRUE(r.status == 0 || r.status == 1) << r.status << r.out << r.err;
    }
    std::map<std::string, Verdict> out;
    Json report = Json::parse(r.out);
    for (const Json& c : report["checks"]) {
      std::string id = c["id"];
      if (id.rfind("gpu", 0) != 0) continue;
      out[id + " " + c["subject"].get<std::string>()] = {c["status"], c["evidence"], c["fix"]};
    }
    return out;
  }

  test::TempDir dir_;
  std::filesystem::path file_;
  Json doc_;
  std::string err_;
};

TEST_F(DoctorNvmlTest, HealthyGpusPassEveryGpuCheck) {
  std::map<std::string, Verdict> checks = doctor(-1);
  for (const char* gpu : {"GPU0 00000000:4E:00.0", "GPU1 00000000:5F:00.0"}) {
    for (const char* id : {"gpu.persistence", "gpu.ecc", "gpu.retired_pages", "gpu.clocks", "gpu.nvlink"}) {
      auto it = checks.find(std::string(id) + " " + gpu);
      ASSERT_NE(it, checks.end()) << id << " " << gpu;
      EXPECT_EQ(it->second.status, "PASS") << id << " " << gpu << ": " << it->second.evidence;
    }
  }
  EXPECT_EQ(checks["gpu.ecc GPU0 00000000:4E:00.0"].evidence,
            "0 uncorrected ECC errors since the driver loaded");
  EXPECT_EQ(checks["gpu.nvlink GPU1 00000000:5F:00.0"].evidence, "18 NVLinks up, 0 down");
}

TEST_F(DoctorNvmlTest, EachBreakageIsFoundByItsCheck) {
  Json& bad = doc_["gpus"][1];
  bad["persistence"] = false;
  bad["ecc_uncorrected_volatile"] = 3;
  bad["remapped_rows"]["failure"] = true;
  bad["clocks_event_reasons"] = 0x8 | 0x40;
  bad["nvlinks"][16]["active"] = false;
  bad["nvlinks"][17]["active"] = false;
  std::map<std::string, Verdict> checks = doctor(1);
  const std::string gpu = " GPU1 00000000:5F:00.0";
  EXPECT_EQ(checks["gpu.persistence" + gpu].status, "WARN");
  EXPECT_THAT(checks["gpu.persistence" + gpu].fix, HasSubstr("nvidia-smi -pm 1"));
  EXPECT_EQ(checks["gpu.ecc" + gpu].status, "FAIL");
  EXPECT_EQ(checks["gpu.ecc" + gpu].evidence, "3 uncorrected ECC errors since the driver loaded");
  EXPECT_EQ(checks["gpu.retired_pages" + gpu].status, "FAIL");
  EXPECT_EQ(checks["gpu.retired_pages" + gpu].evidence, "a row remapping failed");
  EXPECT_EQ(checks["gpu.clocks" + gpu].status, "WARN");
  EXPECT_EQ(checks["gpu.clocks" + gpu].evidence,
            "clocks event reasons 0x48 (hardware slowdown, hardware thermal)");
  EXPECT_EQ(checks["gpu.nvlink" + gpu].status, "WARN");
  EXPECT_EQ(checks["gpu.nvlink" + gpu].evidence, "16 NVLinks up, 2 down");
  for (const char* id : {"gpu.persistence", "gpu.ecc", "gpu.retired_pages", "gpu.clocks", "gpu.nvlink"})
    EXPECT_EQ(checks[std::string(id) + " GPU0 00000000:4E:00.0"].status, "PASS") << id;
}

TEST_F(DoctorNvmlTest, PendingRetirementOrRemappingIsAWarning) {
  doc_["gpus"][0]["retired_pages_pending"] = true;
  doc_["gpus"][1]["remapped_rows"]["pending"] = true;
  std::map<std::string, Verdict> checks = doctor(-1);
  EXPECT_EQ(checks["gpu.retired_pages GPU0 00000000:4E:00.0"].status, "WARN");
  EXPECT_EQ(checks["gpu.retired_pages GPU0 00000000:4E:00.0"].evidence, "a page retirement is pending");
  EXPECT_EQ(checks["gpu.retired_pages GPU1 00000000:5F:00.0"].evidence, "a row remapping is pending");
}

// MIG through the fake's NVML: GPU0 split in MIG mode (three MIG devices, the indexes with holes),
// GPU1 with MIG switched on but waiting for a reset.
TEST_F(DoctorNvmlTest, AMigModeWaitingForAResetIsAWarning) {
  Json instances =
      Json::array({{{"id", 1}, {"profile_id", 9}, {"compute_instances", {{{"id", 0}, {"index", 2}}}}},
                   {{"id", 7}, {"profile_id", 19}, {"compute_instances", {{{"id", 0}, {"index", 6}}}}},
                   {{"id", 8}, {"profile_id", 19}, {"compute_instances", {{{"id", 0}, {"index", 0}}}}}});
  doc_["gpus"][0]["mig"] = {
      {"current", true}, {"profiles", test::migProfiles("H100 80GB")}, {"gpu_instances", instances}};
  doc_["gpus"][1]["mig"] = {
      {"current", false}, {"pending", true}, {"profiles", test::migProfiles("H100 80GB")}};
  std::map<std::string, Verdict> checks = doctor(-1);
  EXPECT_EQ(checks["gpu.mig GPU0 00000000:4E:00.0"].status, "PASS");
  EXPECT_EQ(checks["gpu.mig GPU0 00000000:4E:00.0"].evidence, "MIG mode enabled, 3 MIG devices");
  EXPECT_EQ(checks["gpu.mig GPU1 00000000:5F:00.0"].status, "WARN");
  EXPECT_EQ(checks["gpu.mig GPU1 00000000:5F:00.0"].evidence,
            "MIG mode disabled now, enabled after the next GPU reset");
  EXPECT_THAT(checks["gpu.mig GPU1 00000000:5F:00.0"].fix, HasSubstr("nvidia-smi -r -i 1"));
}

// The MIG devices NVML lists are put to CUDA (poolrun-cuda-probe, one process each; here the fake
// libcuda.so.1 beside the fake NVML answers from the same file): one CUDA cannot open fails the
// check, naming it and what CUDA said.
TEST_F(DoctorNvmlTest, AMigDeviceCudaCannotOpenFailsNamingIt) {
  auto slice = [](int gi, int index, const std::string& uuid) {
    return Json{{"id", gi},
                {"profile_id", 19},
                {"compute_instances", {{{"id", 0}, {"index", index}, {"uuid", uuid}}}}};
  };
  const std::string a = "MIG-7f3c2a10-0000-4000-8000-000000000001",
                    b = "MIG-7f3c2a10-0000-4000-8000-000000000002";
  doc_["gpus"][0]["mig"] = {{"current", true},
                            {"profiles", test::migProfiles("H100 80GB")},
                            {"gpu_instances", {slice(7, 0, a), slice(8, 1, b)}}};
  std::map<std::string, Verdict> checks = doctor(-1);
  EXPECT_EQ(checks["gpu.mig_cuda GPU0 00000000:4E:00.0"].status, "PASS") << err_;
  EXPECT_EQ(checks["gpu.mig_cuda GPU0 00000000:4E:00.0"].evidence, "CUDA opens each of its 2 MIG devices");
  EXPECT_EQ(checks.count("gpu.mig_cuda GPU1 00000000:5F:00.0"), 0u) << "not in MIG mode: nothing to ask";

  doc_["gpus"][0]["mig"]["gpu_instances"][1]["compute_instances"][0]["cuda"] = false;
  checks = doctor(1);
  const Verdict& v = checks["gpu.mig_cuda GPU0 00000000:4E:00.0"];
  EXPECT_EQ(v.status, "FAIL");
  EXPECT_EQ(v.evidence, "1 of its 2 MIG devices that NVML lists CUDA cannot open: " + b +
                            ": cuInit failed with CUDA_ERROR_NO_DEVICE with CUDA_VISIBLE_DEVICES set to it");
  EXPECT_THAT(v.fix, HasSubstr("poolctl mig NODE:GPU"));
}

TEST_F(DoctorNvmlTest, WhatNvmlDoesNotSayIsNotJudged) {
  doc_["gpus"] = {{{"pci", "0000:4e:00.0"}}};  // a GPU whose driver supports none of the calls
  std::map<std::string, Verdict> checks = doctor(-1);
  EXPECT_TRUE(checks.empty()) << checks.begin()->first;
}

TEST_F(DoctorNvmlTest, NoGpuOrABrokenNvmlIsASkipWithTheReason) {
  doc_["gpus"] = Json::array();
  std::map<std::string, Verdict> none = doctor(-1);
  EXPECT_EQ(none["gpu node"].status, "SKIP");
  EXPECT_EQ(none["gpu node"].evidence, "NVML sees no GPU");

  // A malformed file: nvmlInit_v2 fails, the doctor says why and the fake says what is wrong.
  doc_ = {{"gpus", {{{"pci", "0000:4e:00.0"}, {"ecc", 1}}}}};
  std::map<std::string, Verdict> broken = doctor(-1);
  EXPECT_EQ(broken["gpu node"].status, "SKIP");
  EXPECT_THAT(broken["gpu node"].evidence, HasSubstr("NVML failed to initialise"));
  EXPECT_THAT(err_, HasSubstr("gpus[0]: unknown key 'ecc'"));
}

}  // namespace
}  // namespace poolrun::doctor
