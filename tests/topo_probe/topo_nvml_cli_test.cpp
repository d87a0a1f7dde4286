// `poolrun topo` on a live probe with the fake NVML (docs/fake-nvml.md): the NVML path that CI never
// ran. hwloc reads a real machine's export instead of this machine (HWLOC_XMLFILE, which hwloc
// honours for a live probe), so that the probe finds GPUs for NVML to describe; the fake gives them
// UUIDs and NVLinks unlike the export's.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "fake_nvml/fake_nvml_file.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::topo {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

class TopoNvmlCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    POOLRUN_REQUIRE_FIXTURES(fixtures);
    xml_ = fixtures / "hwloc-xml" / "flux-core_ipa20.xml";
    NodeTopology topology = readTopologyFile(xml_);
    ASSERT_EQ(topology.gpus.size(), 4u);
    // GPUs 0-1 and 2-3 joined by 4 links each (the export says 6 links between every pair).
    doc_ = test::fakeNvmlFor(topology);
    for (size_t i = 0; i < 4; ++i) {
      Json links = Json::array();
      for (int l = 0; l < 4; ++l)
        links.push_back(
            {{"link", l}, {"remote_pci", topology.gpus[i ^ 1].pci.str()}, {"remote_type", "gpu"}});
      doc_["gpus"][i]["nvlinks"] = links;
    }
    file_ = dir_.path() / "nvml.json";
    test::writeFakeNvml(file_, doc_);
    std::filesystem::create_directories(dir_.path() / "sys");
  }

  // The live probe of the fixture machine; `nvml` in front of it: the environment that loads the fake.
  test::ProcessResult topo(const std::string& nvml, const std::string& format) {
    return test::runShell("timeout 60 " + nvml + " env HWLOC_XMLFILE='" + xml_.string() + "' " +
                          POOLRUN_BINARY + " topo --sysfs-root " + (dir_.path() / "sys").string() +
                          " --format " + format);
  }

  test::TempDir dir_;
  std::filesystem::path xml_, file_;
  Json doc_;
};

TEST_F(TopoNvmlCliTest, LiveProbeTakesUuidsAndNvlinksFromNvml) {
  test::ProcessResult r = topo(test::fakeNvmlEnv(file_), "json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("NVML"))) << "NVML was there to ask";
  Json doc = Json::parse(r.out);
  ASSERT_EQ(doc["gpus"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const Json& g = doc["gpus"][i];
    EXPECT_EQ(g["uuid"], "GPU-fake-0000-000" + std::to_string(i));
    EXPECT_EQ(g["nvlinks"], Json::parse(R"([{"peer": "GPU)" + std::to_string(i ^ 1) + R"(", "count": 4}])"))
        << i;
    EXPECT_EQ(g["nvswitch_links"], 0);
  }

  test::ProcessResult matrix = topo(test::fakeNvmlEnv(file_), "matrix");
  ASSERT_EQ(matrix.status, 0) << matrix.err;
  std::string row0 =
      matrix.out.substr(matrix.out.find("\nGPU0"), matrix.out.find("\nGPU1") - matrix.out.find("\nGPU0"));
  EXPECT_THAT(row0, HasSubstr("NV4"));
  EXPECT_THAT(row0, Not(HasSubstr("NV6")));
}

// MIG through the live probe: GPU0 in MIG mode with a 3g.40gb split into two compute instances and
// a 1g.10gb, whose MIG devices sit at indexes 0, 3 and 5 (holes between); GPU1 waiting for a reset;
// GPU2 MIG-capable and off; GPU3 without MIG.
TEST_F(TopoNvmlCliTest, LiveProbeReadsMigModesProfilesAndInstances) {
  const Json profiles = test::migProfiles("H100 80GB");
  doc_["gpus"][0]["mig"] = {
      {"current", true},
      {"profiles", profiles},
      {"gpu_instances",
       {{{"id", 2},
         {"profile_id", 9},
         {"compute_instances",
          {{{"id", 0}, {"profile_id", 0}, {"placement", 2}, {"index", 0}, {"uuid", "MIG-aaaa"}},
           {{"id", 1}, {"profile_id", 1}, {"placement", 0}, {"index", 3}, {"uuid", "MIG-bbbb"}}}}},
        {{"id", 9},
         {"profile_id", 19},
         {"compute_instances", {{{"id", 0}, {"index", 5}, {"uuid", "MIG-cccc"}}}}}}}};
  doc_["gpus"][1]["mig"] = {{"current", false}, {"pending", true}, {"profiles", profiles}};
  doc_["gpus"][2]["mig"] = {{"current", false}, {"profiles", profiles}};
  test::writeFakeNvml(file_, doc_);

  test::ProcessResult r = topo(test::fakeNvmlEnv(file_), "json");
  ASSERT_EQ(r.status, 0) << r.err;
  Json doc = Json::parse(r.out);
  const Json& mig = doc["gpus"][0]["mig"];
  ASSERT_TRUE(mig.is_object()) << r.err << doc["gpus"][0].dump();
  EXPECT_EQ(mig["enabled"], true);
  EXPECT_EQ(mig["pending"], true);
  ASSERT_EQ(mig["profiles"].size(), profiles.size()) << mig.dump();
  std::map<std::string, unsigned> idOf;
  for (const Json& p : mig["profiles"]) idOf[p["name"]] = p["id"];
  EXPECT_EQ(idOf["1g.10gb"], 19u);
  EXPECT_EQ(idOf["3g.40gb"], 9u);
  std::vector<std::string> seen;
  for (const Json& i : mig["instances"])
    seen.push_back(i["uuid"].get<std::string>() + " " + std::to_string(i["gpu_instance"].get<int>()) + "/" +
                   std::to_string(i["compute_instance"].get<int>()) + " " + i["profile"].get<std::string>() +
                   " of " + std::to_string(i["profile_id"].get<unsigned>()) + ", " +
                   std::to_string(i["slices"].get<int>()) + " slices");
  EXPECT_EQ(seen, (std::vector<std::string>{"MIG-aaaa 2/0 1c.3g.40gb of 9, 3 slices",
                                            "MIG-bbbb 2/1 2c.3g.40gb of 9, 3 slices",
                                            "MIG-cccc 9/0 1g.10gb of 19, 1 slices"}));
  EXPECT_GT(mig["instances"][2]["sm"], 0);
  EXPECT_GT(mig["instances"][2]["memory_bytes"], 9'000ull << 20);
  EXPECT_EQ(doc["gpus"][1]["mig"]["enabled"], false);
  EXPECT_EQ(doc["gpus"][1]["mig"]["pending"], true);
  EXPECT_TRUE(doc["gpus"][1]["mig"]["instances"].empty());
  EXPECT_TRUE(doc["gpus"][3]["mig"].is_null());

  test::ProcessResult matrix = topo(test::fakeNvmlEnv(file_), "matrix");
  ASSERT_EQ(matrix.status, 0) << matrix.err;
  EXPECT_THAT(matrix.out, HasSubstr("  GPU0: MIG enabled, 3 instances\n"));
  EXPECT_THAT(matrix.out, HasSubstr("    9   0   1g.10gb       "));
  EXPECT_THAT(matrix.out,
              HasSubstr("  GPU1: MIG disabled now, enabled after the next GPU reset (pending)\n"));
  EXPECT_THAT(matrix.out, HasSubstr("  GPU2: MIG disabled\n"));
  EXPECT_THAT(matrix.out, Not(HasSubstr("GPU3: MIG")));
}

TEST_F(TopoNvmlCliTest, WithoutNvmlTheProbeSaysSoAndKeepsHwlocsLinks) {
  test::ProcessResult r = topo("env -u LD_LIBRARY_PATH", "json");
  ASSERT_EQ(r.status, 0) << r.err;
  if (r.err.find("NVML") == std::string::npos) GTEST_SKIP() << "this machine has an NVML";
  EXPECT_THAT(r.err, HasSubstr("NVML (libnvidia-ml.so.1) is not installed"));
  EXPECT_EQ(Json::parse(r.out)["gpus"][0]["nvlinks"].size(), 3u) << "hwloc's links to the three peers";
}

TEST_F(TopoNvmlCliTest, AMalformedFakeIsAWarningAndTheProbeGoesOn) {
  { std::ofstream(file_) << "{\"gpus\": 7}"; }
  test::ProcessResult r = topo(test::fakeNvmlEnv(file_), "json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("fake NVML: " + file_.string() + ": no 'gpus' list"));
  EXPECT_THAT(r.err, HasSubstr("NVML failed to initialise"));
  EXPECT_EQ(Json::parse(r.out)["gpus"].size(), 4u);
}

}  // namespace
}  // namespace poolrun::topo
