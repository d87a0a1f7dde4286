// The configuration (JSON and example-tuner CSV) and nccl-tests log reading.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "poolrun/tuner/calibrate.hpp"
#include "poolrun/tuner/config.hpp"
#include "support/test_names.hpp"
#include "tuner_data.hpp"

namespace {

using namespace poolrun::tuner;

using poolrun::test::kTunerData;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kGood =
    R"({"schema": "poolrun.tuner/1", "fabric": "roce", "nodes": 2, "gpus_per_node": 8,
        "gpu": {"sm": 90, "nvlink_gbyte_s": 450, "nvswitch": true, "nvls": true},
        "net": {"nics_per_node": 8, "nic_gbit_s": 400, "gdr": true, "sharp": false}, "cpu_vendor": "amd",
        "rules": [{"coll": "allreduce", "max_bytes": 65536, "algo": "tree", "proto": "LL", "nnodes": 2}],
        "calibration": [{"coll": "allgather", "nranks": 16, "nnodes": 2, "algo": "Ring", "proto": "Simple",
                         "bytes": 1048576, "time_us": 40.5, "source": "ag.log"}]})";

std::string with(const std::string& from, const std::string& to) {
  std::string s = kGood;
  auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  s.replace(pos, from.size(), to);
  return s;
}

TEST(ConfigTest, ReadsEveryField) {
  TunerConfig c = parseConfig(kGood, "t.json");
  EXPECT_TRUE(c.has_hardware);
  EXPECT_EQ(c.fabric, Fabric::kRoce);
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.gpu.sm, 90);
  EXPECT_EQ(c.gpu.nvlink_gbyte_s, 450);
  EXPECT_TRUE(c.gpu.nvswitch);
  EXPECT_TRUE(c.gpu.nvls);
  EXPECT_EQ(c.net.nics_per_node, 8);
  EXPECT_EQ(c.net.nic_gbit_s, 400);
  EXPECT_TRUE(c.net.gdr);
  EXPECT_FALSE(c.net.sharp);
  EXPECT_EQ(c.cpu_vendor, CpuVendor::kAmd);
  ASSERT_EQ(c.rules.size(), 1u);
  EXPECT_EQ(c.rules[0].algo, Algo::kTree);
  EXPECT_EQ(c.rules[0].proto, Proto::kLL);
  EXPECT_EQ(c.rules[0].max_bytes, 65536u);
  EXPECT_EQ(c.rules[0].nnodes, 2);
  ASSERT_EQ(c.calibration.size(), 1u);
  EXPECT_EQ(c.calibration[0].coll, Coll::kAllGather);
  EXPECT_EQ(c.calibration[0].time_us, 40.5);
  // Round trip.
  TunerConfig back = parseConfig(toJson(c).dump(), "back");
  EXPECT_EQ(toJson(back), toJson(c));
}

TEST(ConfigTest, ValueStartingWithABraceIsTheJsonItself) {
  EXPECT_EQ(loadConfig("  " + kGood).origin, "POOLRUN_TUNER_CONFIG");
  EXPECT_EQ(loadConfig(kTunerData + "/a100-8gpu-1node.json").origin, kTunerData + "/a100-8gpu-1node.json");
}

struct Bad {
  std::string json;
  std::string mentions;
};

class BadConfigTest : public ::testing::TestWithParam<Bad> {};

TEST_P(BadConfigTest, OneLineNamingTheValue) {
  try {
    parseConfig(GetParam().json, "cfg.json");
    FAIL() << "accepted: " << GetParam().json;
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(GetParam().mentions), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

void PrintTo(const Bad& b, std::ostream* os) {
  *os << "error naming \"" << b.mentions << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Config, BadConfigTest,
    ::testing::Values(Bad{"", "not valid JSON"}, Bad{"[]", "JSON object"}, Bad{"{\"schema\": 1}", "schema"},
                      Bad{with("poolrun.tuner/1", "poolrun.tuner/9"), "poolrun.tuner/9"},
                      Bad{with("\"roce\"", "\"ethernet\""), "ethernet"},
                      Bad{with("\"nodes\": 2", "\"nodes\": -1"), "field 'nodes': -1 is out of range"},
                      Bad{with("\"nodes\": 2", "\"nodes\": 2.5"), "nodes"},
                      Bad{with("\"gpus_per_node\": 8,", ""), "gpus_per_node"},
                      Bad{with("\"sm\": 90", "\"sm\": 35"), "field 'gpu.sm': 35 is out of range (60 to 199)"},
                      Bad{with("\"nvswitch\": true", "\"nvswitch\": \"yes\""), "gpu.nvswitch"},
                      Bad{with("\"nvswitch\": true", "\"nvswitch\": false"), "gpu.nvls"},
                      Bad{with("\"nvlink_gbyte_s\": 450", "\"nvlink_gbyte_s\": -4"), "gpu.nvlink_gbyte_s"},
                      Bad{with("\"nics_per_node\": 8", "\"nics_per_node\": 0"), "no network"},
                      Bad{with("\"roce\"", "\"tcp\""), "net.gdr"}, Bad{with("\"amd\"", "\"via\""), "via"},
                      Bad{with("\"fabric\"", "\"fabirc\""), "fabirc"},
                      Bad{with("\"sharp\": false", "\"sharp\": false, \"shrap\": true"), "net.shrap"},
                      Bad{with("\"algo\": \"tree\"", "\"algo\": \"Rign\""), "Rign"},
                      Bad{with("\"algo\": \"tree\", \"proto\": \"LL\", ", ""), "neither algo nor proto"},
                      Bad{with("\"algo\": \"tree\"", "\"algo\": \"NVLS\""), "Simple"},
                      Bad{with("\"max_bytes\": 65536", "\"min_bytes\": 9, \"max_bytes\": 8"), "min_bytes 9"},
                      Bad{with("\"max_bytes\": 65536", "\"max_bytes\": -5"), "max_bytes"},
                      Bad{with("\"time_us\": 40.5", "\"time_us\": 0"), "time_us"},
                      Bad{with("\"coll\": \"allgather\"", "\"coll\": \"alltoall\""), "alltoall"},
                      Bad{with("\"rules\": [", "\"rules\": 5, \"x-ignored\": ["), "rules must be an array"},
                      // A key twice in one object: refused wherever it is, not the last one kept.
                      Bad{with("\"nodes\": 2", "\"nodes\": 2, \"nodes\": 4"), "field 'nodes' given twice"},
                      Bad{with("\"sm\": 90", "\"sm\": 90, \"sm\": 80"), "field 'gpu.sm' given twice"},
                      Bad{with("\"proto\": \"LL\"", "\"proto\": \"LL\", \"proto\": \"Simple\""),
                          "field 'rules[0].proto' given twice"},
                      Bad{with("\"source\": \"ag.log\"", "\"source\": \"ag.log\", \"x-a\": 1, \"x-a\": 2"),
                          "field 'calibration[0].x-a' given twice"}),
    [](const ::testing::TestParamInfo<Bad>& p) { return poolrun::test::testName(p.param.mentions); });

TEST(ExampleCsvTest, ReadsTheExampleTunersFormat) {
  auto rules = parseExampleCsv(
      "# comment\n\n  allreduce , 0, 65536, ring, ll128, 4, -1, -1\n"
      "allgather,1,2,nvls_tree,simple,-1,2,16,3,1\nreducescatter,0,10,collnet_direct,simple,-1,-1,-1,-1\n",
      "r.conf");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].coll, Coll::kAllReduce);
  EXPECT_EQ(rules[0].algo, Algo::kRing);
  EXPECT_EQ(rules[0].proto, Proto::kLL128);
  EXPECT_EQ(rules[0].channels, 4);
  EXPECT_EQ(rules[0].nnodes, -1);
  EXPECT_EQ(rules[0].origin, "r.conf:3");
  EXPECT_EQ(rules[1].algo, Algo::kNvlsTree);
  EXPECT_EQ(rules[1].channels, 0);
  EXPECT_EQ(rules[1].nranks, 16);
  EXPECT_EQ(rules[1].pipe_ops, 3);
  EXPECT_EQ(rules[1].reg_buff, 1);
  EXPECT_EQ(rules[2].algo, Algo::kCollNetDirect);
}

TEST(ExampleCsvTest, RejectsWhatTheExampleSilentlyAccepts) {
  for (auto [text, mentions] : std::vector<std::pair<std::string, std::string>>{
           {"allreduce,0,1,ring,simple,-1,-1\n", "7 fields"},
           {"allredcue,0,1,ring,simple,-1,-1,-1\n", "allredcue"},
           {"allreduce,0,1,rign,simple,-1,-1,-1\n", "rign"},
           {"allreduce,0,1,ring,ll256,-1,-1,-1\n", "ll256"},
           {"allreduce,x,1,ring,simple,-1,-1,-1\n", "min_bytes 'x'"},
           {"allreduce,5,1,ring,simple,-1,-1,-1\n", "min_bytes 5"},
           {"allreduce,0,1,nvls,ll,-1,-1,-1\n", "Simple"},
           {"allreduce,0,1,ring,simple,65,-1,-1\n", "channels 65"},
           {"allreduce,0,1,ring,simple,-1,-1,-1,-1,2\n", "regBuff 2"}}) {
    try {
      parseExampleCsv("\n" + text, "r.conf");
      FAIL() << text;
    } catch (const ConfigError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("r.conf:2"), std::string::npos) << msg;
      EXPECT_NE(msg.find(mentions), std::string::npos) << msg;
    }
  }
}

// ---- nccl-tests logs -------------------------------------------------------------------------------

TEST(NcclTestsLogTest, ForcedAllreduceOnOneNode) {
  const std::string path = kTunerData + "/all_reduce_perf_1x8_ring_ll128.log";
  ParsedLog log = parseNcclTestsLog(slurp(path), path, {});
  EXPECT_TRUE(log.warnings.empty());
  ASSERT_EQ(log.measurements.size(), 25u);  // 8 B .. 128 MiB
  for (const Measurement& m : log.measurements) {
    EXPECT_EQ(m.coll, Coll::kAllReduce);
    EXPECT_EQ(m.nranks, 8);
    EXPECT_EQ(m.nnodes, 1);
    EXPECT_EQ(m.algo, Algo::kRing);
    EXPECT_EQ(m.proto, Proto::kLL128);
    EXPECT_EQ(m.source, path);
  }
  EXPECT_EQ(log.measurements[0].bytes, 8u);
  EXPECT_DOUBLE_EQ(log.measurements[0].time_us, 37.81);  // the better of out-of-place and in-place
}

TEST(NcclTestsLogTest, UnforcedAllgatherOnTwoNodesSkipsWrongResults) {
  const std::string path = kTunerData + "/all_gather_perf_2x4.log";
  ParsedLog log = parseNcclTestsLog(slurp(path), path, {});
  ASSERT_EQ(log.measurements.size(), 7u);  // 8 sizes, one with wrong results
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_NE(log.warnings[0].find("wrong"), std::string::npos);
  for (const Measurement& m : log.measurements) {
    EXPECT_EQ(m.coll, Coll::kAllGather);
    EXPECT_EQ(m.nranks, 8);
    EXPECT_EQ(m.nnodes, 2);
    EXPECT_FALSE(m.algo);
    EXPECT_NE(m.bytes, 262144u);
  }
  LogOverrides forced;
  forced.algo = Algo::kRing;
  forced.proto = Proto::kSimple;
  EXPECT_EQ(parseNcclTestsLog(slurp(path), path, forced).measurements[0].algo, Algo::kRing);
}

TEST(NcclTestsLogTest, OlderOutputWithoutTheProgramName) {
  const std::string head =
      "#  Rank  0 Group  0 Pid 1 on h1 device  0 [0x07] GPU\n#  Rank  1 Group  0 Pid 2 on h1 device  1 "
      "[0x0f] GPU\n";
  auto collOf = [&](const std::string& row) {
    return parseNcclTestsLog(head + row, "old.log", {}).measurements.at(0).coll;
  };
  EXPECT_EQ(collOf("  1024  256  float  sum  -1  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n"), Coll::kAllReduce);
  EXPECT_EQ(collOf("  1024  128  float  sum  -1  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n"),
            Coll::kReduceScatter);
  EXPECT_EQ(collOf("  1024  128  float  none  -1  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n"), Coll::kAllGather);
  EXPECT_EQ(collOf("  1024  256  float  none  0  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n"), Coll::kBroadcast);
  EXPECT_EQ(collOf("  1024  256  float  sum  0  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n"), Coll::kReduce);
}

// poolrun-allreduce-bench on its MPI backend: host buffers, no GPU. Its times are MPI's, refused
// in one line that names the rank line and says what to calibrate with, even with --nranks/--nnodes.
TEST(NcclTestsLogTest, HostMemoryRunsAreRefused) {
  const std::string log =
      "# Collective test starting: all_reduce_perf\n# Using devices\n"
      "#  Rank  0 Group  0 Pid   4242 on       sn01 device -1 host memory\n"
      "#  Rank  1 Group  0 Pid   4243 on       sn01 device -1 host memory\n"
      "  1024  256  float  sum  -1  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n";
  LogOverrides shape;
  shape.nranks = 2;
  shape.nnodes = 1;
  for (const LogOverrides& o : {LogOverrides{}, shape}) {
    try {
      parseNcclTestsLog(log, "mpi.txt", o);
      FAIL() << "a log of host-memory runs was read";
    } catch (const ConfigError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("mpi.txt:3: rank 0 ran on host memory"), std::string::npos) << msg;
      EXPECT_NE(msg.find("--backend nccl"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(NcclTestsLogTest, Errors) {
  EXPECT_THROW(parseNcclTestsLog("hello\n", "x.log", {}), ConfigError);
  EXPECT_THROW(parseNcclTestsLog("# Collective test starting: alltoall_perf\n", "x.log", {}), ConfigError);
  EXPECT_THROW(
      parseNcclTestsLog("  1024  256  float  sum  -1  10.0  0.1  0.1  0  10.0  0.1  0.1  0\n", "x.log", {}),
      ConfigError);  // no rank lines
  // Lists in NCCL_ALGO force no single cell: kept as unforced, with a warning.
  std::string log = slurp(kTunerData + "/all_reduce_perf_1x8_ring_ll128.log");
  log.replace(log.find("to Ring"), 7, "to ring,tree");
  ParsedLog parsed = parseNcclTestsLog(log, "l.log", {});
  EXPECT_FALSE(parsed.measurements[0].algo);
  EXPECT_EQ(parsed.warnings.size(), 1u);
}

TEST(CalibrationMergeTest, ReplacesEqualKeysAndKeepsTheRest) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(kGood);
  Measurement m{Coll::kAllGather, 16, 2, Algo::kRing, Proto::kSimple, 1048576, 33.0, "new.log"};
  Measurement n = m;
  n.bytes = 2097152;
  MergeStats s = mergeCalibration(doc, {m, n});
  EXPECT_EQ(s.replaced, 1u);
  EXPECT_EQ(s.added, 1u);
  TunerConfig c = parseConfig(doc.dump(), "merged");
  ASSERT_EQ(c.calibration.size(), 2u);
  EXPECT_EQ(c.calibration[0].time_us, 33.0);
  EXPECT_EQ(doc.begin().key(), "schema");  // order kept
}

}  // namespace
