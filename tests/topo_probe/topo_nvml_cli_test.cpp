// `poolrun topo` on a live probe with the fake NVML (docs/fake-nvml.md): the NVML path that CI never
// ran. hwloc reads a real machine's export instead of this machine (HWLOC_XMLFILE, which hwloc
// honours for a live probe), so that the probe finds GPUs for NVML to describe; the fake gives them
// UUIDs and NVLinks unlike the export's.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
