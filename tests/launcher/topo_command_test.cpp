// `poolrun topo` as a user runs it: the real binary in a child process, its output and exit status.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/test_names.hpp"

namespace {

using poolrun::test::TempDir;

using Result = poolrun::test::ProcessResult;

Result poolrun(const std::string& args) {
  return poolrun::test::runShell(std::string(POOLRUN_BINARY) + " " + args);
}

std::string shipped() {
  return (poolrun::test::sourceDir() / "topologies/hgx-h100-8gpu-8nic.xml").string();
}

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST(TopoCommandTest, JsonFromAShippedTopology) {
  Result r = poolrun("topo --from " + shipped() + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["schema"], "poolrun.topology/2");
  EXPECT_EQ(doc["gpus"].size(), 8u);
  EXPECT_EQ(doc["nics"].size(), 8u);
  EXPECT_EQ(r.err, "");
}

TEST(TopoCommandTest, WarnsWhereSxmGpusHaveNoNvlinkAndMarksAmdGpus) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  std::string p4d = (dir / "nccl-topo/aws-ofi-nccl_p4d-24xl-topo.xml").string();
  Result r = poolrun("topo --from " + p4d);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err,
            "poolrun: warning: GPUs 0-7 are A100 SXM4, which have NVLink, but " + p4d +
                " records no NVLink: paths between them show PCIe types (PIX to SYS) instead of NV#; give a "
                "topology with NVLink information (poolrun topo --format json on the node, or "
                "NCCL_TOPO_DUMP_FILE)\n");
  Result nv = poolrun("topo --from " + shipped());
  EXPECT_EQ(nv.err, "") << "NVLinks recorded: no warning";
  Result amd = poolrun("topo --from " + (dir / "hwloc-xml/mpibind_epyc-corona.xml").string());
  ASSERT_EQ(amd.status, 0) << amd.err;
  EXPECT_NE(amd.out.find("\nGPU0 (AMD)  X "), std::string::npos) << amd.out;
  EXPECT_NE(amd.out.find("(AMD) = not an NVIDIA GPU"), std::string::npos) << amd.out;
}

TEST(TopoCommandTest, MatrixIsTheDefault) {
  Result r = poolrun("topo --from " + shipped());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("GPU0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NV18"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Legend:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NIC0: mlx5_0"), std::string::npos) << r.out;
}

TEST(TopoCommandTest, NcclXmlDotAndSvg) {
  TempDir tmp;
  std::string xml = (tmp.path() / "topo.xml").string();
  Result r = poolrun("topo --from " + shipped() + " --format nccl-xml -o " + xml);
  ASSERT_EQ(r.status, 0) << r.err;
  Result back = poolrun("topo --from " + xml + " --format json");
  ASSERT_EQ(back.status, 0) << back.err;
  EXPECT_EQ(nlohmann::json::parse(back.out)["paths"],
            nlohmann::json::parse(poolrun("topo --from " + shipped() + " --format json").out)["paths"]);
  Result dot = poolrun("topo --from " + shipped() + " --format dot");
  ASSERT_EQ(dot.status, 0) << dot.err;
  EXPECT_TRUE(dot.out.starts_with("graph")) << dot.out.substr(0, 80);
  if (std::system("command -v dot >/dev/null 2>&1") == 0) {
    Result svg = poolrun("topo --from " + shipped() + " --format svg");
    ASSERT_EQ(svg.status, 0) << svg.err;
    EXPECT_NE(svg.out.find("<svg"), std::string::npos);
  }
}

// -o FILE replaces the file whole: a link planted at the name is replaced, never written through
// (the file it points at keeps its text); a device such as /dev/null is written to, not replaced.
TEST(TopoCommandTest, OutputIsNeverWrittenThroughALink) {
  TempDir tmp;
  const std::filesystem::path victim = tmp.write("victim", "the victim's own text\n");
  const std::filesystem::path out = tmp.path() / "topo.json";
  std::filesystem::create_symlink(victim, out);
  Result r = poolrun("topo --from " + shipped() + " --format json -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(poolrun::test::slurp(victim), "the victim's own text\n");
  EXPECT_FALSE(std::filesystem::is_symlink(out));
  EXPECT_TRUE(nlohmann::json::accept(poolrun::test::slurp(out)));
  Result devnull = poolrun("topo --from " + shipped() + " --format json -o /dev/null");
  ASSERT_EQ(devnull.status, 0) << devnull.err;
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

TEST(TopoCommandTest, ThisMachine) {
  Result r = poolrun("topo --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["source"], "live");
  EXPECT_GE(doc["packages"].size(), 1u);
  EXPECT_FALSE(doc["packages"][0]["cpuset"].get<std::string>().empty());
}

TEST(TopoCommandTest, MissingSysfsRootIsAWarningNotAFailure) {
  Result r = poolrun("topo --sysfs-root /nonexistent/sys --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("poolrun: warning: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/sys"), std::string::npos) << r.err;
}

TEST(TopoCommandTest, FakeSysfsNicShowsUpInTheLiveProbe) {
  TempDir sys;
  std::filesystem::path dev = sys.path() / "devices/pci0000:80/0000:80:02.0/0000:82:00.0";
  sys.write("devices/pci0000:80/0000:80:02.0/0000:82:00.0/numa_node", "0\n");
  sys.write("devices/pci0000:80/0000:80:02.0/0000:82:00.0/vendor", "0x15b3\n");
  sys.write("devices/pci0000:80/0000:80:02.0/0000:82:00.0/class", "0x020700\n");
  std::filesystem::path ib = sys.path() / "class/infiniband/mlx5_7";
  sys.write("class/infiniband/mlx5_7/ports/1/link_layer", "InfiniBand\n");
  sys.write("class/infiniband/mlx5_7/ports/1/state", "4: ACTIVE\n");
  sys.write("class/infiniband/mlx5_7/ports/1/rate", "400 Gb/sec (4X NDR)\n");
  std::filesystem::create_directory_symlink(dev, ib / "device");
  Result r = poolrun("topo --sysfs-root " + sys.path().string() + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["nics"].size(), 1u) << r.out;
  EXPECT_EQ(doc["nics"][0]["name"], "mlx5_7");
  EXPECT_EQ(doc["nics"][0]["pci"], "0000:82:00.0");
  EXPECT_EQ(doc["nics"][0]["ports"][0]["rate_gbps"], 400);
  EXPECT_EQ(doc["nics"][0]["ports"][0]["state"], "active");
}

struct BadRun {
  const char* args;
  const char* message;
};

class TopoCommandErrors : public ::testing::TestWithParam<BadRun> {};

TEST_P(TopoCommandErrors, ExitTwoWithOneLine) {
  TempDir tmp;
  tmp.write("truncated.xml", "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\"");
  tmp.write("unknown-attr.xml", "<system version=\"1\"><cpu numaid=\"0\" color=\"red\"/></system>");
  tmp.write("not-topo.txt", "hello\n");
  std::string args = GetParam().args;
  for (size_t at; (at = args.find("TMP")) != std::string::npos;) args.replace(at, 3, tmp.path().string());
  Result r = poolrun(args);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(r.err.starts_with("poolrun: error: ")) << r.err;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
}

void PrintTo(const BadRun& b, std::ostream* os) {
  *os << "poolrun " << b.args << ": \"" << b.message << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TopoCommandErrors,
    ::testing::Values(BadRun{"topo --from TMP/missing.xml", "/missing.xml: no such file"},
                      BadRun{"topo --from TMP/truncated.xml", "truncated.xml: malformed XML at line 1"},
                      BadRun{"topo --from TMP/unknown-attr.xml", "unknown attribute 'color'"},
                      BadRun{"topo --from TMP/not-topo.txt", "not-topo.txt: not a topology file"},
                      BadRun{"topo --from TMP", "is a directory"},
                      BadRun{"topo --format yaml", "unknown --format 'yaml'"},
                      BadRun{"topo --bogus", "unrecognised option"},
                      BadRun{"frobnicate", "unknown command 'frobnicate'"}),
    [](const ::testing::TestParamInfo<BadRun>& p) { return poolrun::test::testName(p.param.message); });

TEST(TopoCommandErrorsTest, ErrorsAreOneLine) {
  Result r = poolrun("topo --from /nonexistent.xml");
  EXPECT_EQ(lines(r.err), 1u) << r.err;
}

TEST(TopoCommandTest, Help) {
  Result r = poolrun("topo --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--sysfs-root"), std::string::npos);
}

}  // namespace
