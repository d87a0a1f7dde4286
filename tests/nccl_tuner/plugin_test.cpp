// The built libnccl-tuner-poolrun.so, loaded and called the way NCCL 2.21-2.30 do (nccl_host.hpp).

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "counting_malloc.hpp"
#include "nccl_host.hpp"
#include "poolrun/tuner/decision.hpp"
#include "support/temp_dir.hpp"
#include "tuner_data.hpp"

namespace {

namespace nccl = poolrun::test::nccl;
namespace tuner = poolrun::tuner;
using nccl::CostTable;
using nccl::Host;
using nccl::Logger;
using nccl::Release;

const std::string kPlugin = POOLRUN_TUNER_PLUGIN;
using poolrun::test::kTunerData;
constexpr const char* kEnvVars[] = {"POOLRUN_TUNER_CONFIG", "NCCL_TUNER_CONFIG_FILE", "NCCL_ALGO",
                                    "NCCL_PROTO"};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  return out;
}

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kEnvVars) unsetenv(v);
    Logger::clear();
  }
  void TearDown() override {
    for (const char* v : kEnvVars) unsetenv(v);
  }

  static std::unique_ptr<Host> load(Release r = Release::k2_28) {
    std::string error;
    auto host = Host::load(kPlugin, r, &error);
    EXPECT_NE(host, nullptr) << error;
    return host;
  }

  static void useConfig(const std::string& name) {
    setenv("POOLRUN_TUNER_CONFIG", (kTunerData + "/" + name).c_str(), 1);
  }

  static tuner::DecisionTable expected(const std::string& name, int nranks, int nnodes) {
    return tuner::DecisionTable::build(tuner::loadConfig(kTunerData + "/" + name), {nranks, nnodes});
  }
};

std::vector<size_t> sizes() {
  std::vector<size_t> out = {0};
  for (int b = 0; b <= 36; ++b) out.push_back(size_t{1} << b);
  out.push_back(3000);
  out.push_back(size_t{5} << 20);
  return out;
}

CostTable allOpen() {
  CostTable t;
  for (auto& row : t) row.fill(1.0f);
  return t;
}

// ---- the library as a file ---------------------------------------------------------------------------

TEST(PluginLibraryTest, ExportsOnlyTheTunerSymbols) {
  if (std::system("command -v nm >/dev/null 2>&1") != 0) GTEST_SKIP() << "nm not installed (binutils)";
  std::istringstream lines(run("nm -D --defined-only '" + kPlugin + "'"));
  std::set<std::string> exported;
  std::string line;
  while (std::getline(lines, line)) {
    auto space = line.rfind(' ');
    if (space != std::string::npos) exported.insert(line.substr(space + 1));
  }
  EXPECT_EQ(exported, (std::set<std::string>{"ncclTunerPlugin_v2", "ncclTunerPlugin_v3", "ncclTunerPlugin_v4",
                                             "ncclTunerPlugin_v5", "ncclTunerPlugin_v6"}));
}

TEST(PluginLibraryTest, NeedsNothingButTheCAndCxxRuntime) {
  if (std::system("command -v readelf >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "readelf not installed (binutils)";
  std::istringstream lines(run("readelf -d '" + kPlugin + "'"));
  const std::set<std::string> allowed = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1",
                                         "ld-linux-x86-64.so.2"};
  std::string line;
  int needed = 0;
  while (std::getline(lines, line)) {
    if (line.find("(NEEDED)") == std::string::npos) continue;
    ++needed;
    auto open = line.find('['), close = line.find(']');
    std::string lib = line.substr(open + 1, close - open - 1);
#ifdef POOLRUN_SANITIZED
    if (lib.starts_with("libasan") || lib.starts_with("libubsan")) continue;
#endif
    EXPECT_TRUE(allowed.count(lib)) << "the plugin needs " << lib;
  }
  EXPECT_GT(needed, 0);
  // RTLD_NOW (as NCCL opens it) resolves every symbol or fails.
  void* h = dlopen(kPlugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_EQ(dlsym(h, "ncclTunerPlugin_v1"), nullptr);
  dlclose(h);
}

// ---- each NCCL release finds a version it accepts ---------------------------------------------------

class ReleaseTest : public PluginTest, public ::testing::WithParamInterface<Release> {};

TEST_P(ReleaseTest, FindsAVersionItAccepts) {
  auto host = load(GetParam());
  ASSERT_NE(host, nullptr);
  const int expectedVersion[] = {2, 3, 4, 5, 6};
  EXPECT_EQ(host->abiVersion(), expectedVersion[static_cast<int>(GetParam())]);
  EXPECT_STREQ(host->pluginName(), "poolrun");
  EXPECT_FALSE(host->hasChunkSizeHook());
}

TEST_P(ReleaseTest, ChoosesOnlyCellsNcclLeftValidAndRevivesNone) {
  useConfig("h100-roce-4node.json");
  auto host = load(GetParam());
  ASSERT_NE(host, nullptr);
  std::mt19937 rng(4);
  struct Shape {
    int nranks, nnodes;
    nccl::Hardware hw;
  };
  const Shape shapes[] = {{32, 4, {true, false, true, false, 4}},
                          {8, 1, {true, false, true, false, 1}},
                          {4, 4, {false, false, true, true, 4}}};
  for (const Shape& s : shapes) {
    auto comm = host->init(static_cast<size_t>(s.nranks), static_cast<size_t>(s.nnodes));
    ASSERT_EQ(comm->initResult(), 0);
    ASSERT_TRUE(comm->hasContext()) << s.nranks << " ranks, " << s.nnodes << " nodes";
    for (int func = 0; func < 5; ++func) {
      for (size_t bytes : sizes()) {
        for (int trial = 0; trial < 4; ++trial) {
          CostTable before = nccl::ncclLikeTable(func, s.hw);
          // Trials 1-3 rule out random valid cells, as NCCL_ALGO/NCCL_PROTO or support checks would.
          for (auto& row : before) {
            for (float& c : row) {
              if (trial > 0 && c >= 0 && rng() % 3 == 0) c = nccl::kIgnore;
            }
          }
          CostTable table = before;
          int channels = -7;
          ASSERT_EQ(comm->getCollInfo(func, bytes, table, &channels), 0);
          EXPECT_EQ(channels, 0);
          int changed = 0;
          for (int a = 0; a < nccl::kAlgos; ++a) {
            for (int p = 0; p < nccl::kProtos; ++p) {
              if (before[a][p] < 0) {
                EXPECT_EQ(table[a][p], before[a][p]) << "revived IGNORE cell " << a << "/" << p;
              } else if (table[a][p] != before[a][p]) {
                ++changed;
                EXPECT_EQ(table[a][p], 0.0f);
              }
            }
          }
          EXPECT_LE(changed, 1);
          if (GetParam() == Release::k2_21 && changed == 1) {
            EXPECT_NE(table[nccl::kPat][nccl::kSimple], 0.0f) << "v2 (NCCL 2.21) knows no PAT";
          }
          auto [a, p] = nccl::ncclPick(table);
          if (a >= 0) {
            EXPECT_GE(before[a][p], 0.0f);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Nccl, ReleaseTest,
                         ::testing::Values(Release::k2_21, Release::k2_22, Release::k2_24, Release::k2_28,
                                           Release::k2_30),
                         [](const auto& p) {
                           std::string name = std::string("v") + nccl::releaseName(p.param);
                           for (char& c : name) c = c == '.' ? '_' : c;
                           return name;
                         });

// ---- decisions -------------------------------------------------------------------------------------

TEST_F(PluginTest, TakesTheNextCandidateWhereThePreferredIsIgnored) {
  useConfig("h100-roce-4node.json");
  auto host = load();
  auto comm = host->init(32, 4);
  auto table = expected("h100-roce-4node.json", 32, 4);
  for (int func = 0; func < 5; ++func) {
    for (size_t bytes : sizes()) {
      auto cands = table.candidates(static_cast<tuner::Coll>(func), bytes);
      ASSERT_FALSE(cands.empty());
      CostTable t = allOpen();
      for (size_t skip = 0; skip < cands.size(); ++skip) {
        CostTable call = t;
        int channels = 0;
        ASSERT_EQ(comm->getCollInfo(func, bytes, call, &channels), 0);
        auto [a, p] = nccl::ncclPick(call);
        EXPECT_EQ(a, static_cast<int>(cands[skip].cell.algo)) << "func " << func << " bytes " << bytes;
        EXPECT_EQ(p, static_cast<int>(cands[skip].cell.proto)) << "func " << func << " bytes " << bytes;
        t[static_cast<size_t>(cands[skip].cell.algo)][static_cast<size_t>(cands[skip].cell.proto)] =
            nccl::kIgnore;
      }
      // Every candidate ruled out: the table is left alone and NCCL decides.
      CostTable call = t;
      int channels = 0;
      ASSERT_EQ(comm->getCollInfo(func, bytes, call, &channels), 0);
      EXPECT_EQ(call, t);
    }
  }
}

TEST_F(PluginTest, OneNodeSubCommunicatorIsModelledAsOneNode) {
  useConfig("h100-roce-4node.json");
  auto host = load();
  auto tp = host->init(8, 1);  // tensor-parallel group inside one node of the 4-node job
  auto all = host->init(32, 4);
  auto oneNode = expected("h100-roce-4node.json", 8, 1);
  bool differs = false;
  for (int func = 0; func < 5; ++func) {
    for (size_t bytes : sizes()) {
      CostTable a = allOpen(), b = allOpen();
      int ch = 0;
      tp->getCollInfo(func, bytes, a, &ch);
      all->getCollInfo(func, bytes, b, &ch);
      auto first = oneNode.candidates(static_cast<tuner::Coll>(func), bytes)[0].cell;
      EXPECT_EQ(nccl::ncclPick(a),
                std::make_pair(static_cast<int>(first.algo), static_cast<int>(first.proto)));
      differs = differs || nccl::ncclPick(a) != nccl::ncclPick(b);
    }
  }
  EXPECT_TRUE(differs);
  // NVLink SHARP is usable inside a node but needs SHARP across nodes: at 1 GiB the node's group
  // reduces in the switch, the whole job does not.
  CostTable a = allOpen(), b = allOpen();
  int ch = 0;
  tp->getCollInfo(nccl::kAllReduce, size_t{1} << 30, a, &ch);
  all->getCollInfo(nccl::kAllReduce, size_t{1} << 30, b, &ch);
  EXPECT_EQ(nccl::ncclPick(a),
            std::make_pair(static_cast<int>(nccl::kNvls), static_cast<int>(nccl::kSimple)));
  EXPECT_NE(nccl::ncclPick(b).first, static_cast<int>(nccl::kNvls));
}

TEST_F(PluginTest, ConfigurationTextInTheEnvironmentActsLikeTheFile) {
  setenv("POOLRUN_TUNER_CONFIG", slurp(kTunerData + "/h100-ib-4node.json").c_str(), 1);
  auto host = load();
  auto comm = host->init(32, 4);
  ASSERT_TRUE(comm->hasContext());
  auto table = expected("h100-ib-4node.json", 32, 4);
  for (size_t bytes : sizes()) {
    CostTable t = allOpen();
    int ch = 0;
    comm->getCollInfo(nccl::kAllReduce, bytes, t, &ch);
    auto first = table.candidates(tuner::Coll::kAllReduce, bytes)[0].cell;
    EXPECT_EQ(nccl::ncclPick(t), std::make_pair(static_cast<int>(first.algo), static_cast<int>(first.proto)));
  }
}

TEST_F(PluginTest, JsonRulesMatchRegBuffAndSetChannels) {
  poolrun::test::TempDir tmp;
  std::string cfg = slurp(kTunerData + "/h100-ib-4node.json");
  cfg.insert(cfg.rfind('}'), R"(, "rules": [
    {"coll": "allreduce", "max_bytes": 1048576, "algo": "Ring", "proto": "Simple", "reg_buff": 1, "channels": 8},
    {"coll": "allgather", "min_bytes": 4096, "max_bytes": 8191, "proto": "LL", "nnodes": 4}
  ])");
  setenv("POOLRUN_TUNER_CONFIG", tmp.write("tuner.json", cfg).c_str(), 1);
  auto host = load();
  auto comm = host->init(32, 4);
  ASSERT_TRUE(comm->hasContext());
  CostTable t = allOpen();
  int ch = 0;
  comm->getCollInfo(nccl::kAllReduce, 65536, t, &ch, 1, /*regBuff=*/1);
  EXPECT_EQ(nccl::ncclPick(t),
            std::make_pair(static_cast<int>(nccl::kRing), static_cast<int>(nccl::kSimple)));
  EXPECT_EQ(ch, 8);
  t = allOpen();
  comm->getCollInfo(nccl::kAllReduce, 65536, t, &ch, 1, /*regBuff=*/0);
  EXPECT_NE(nccl::ncclPick(t),
            std::make_pair(static_cast<int>(nccl::kRing), static_cast<int>(nccl::kSimple)));
  EXPECT_EQ(ch, 0);
  for (size_t bytes : {size_t{4096}, size_t{6000}, size_t{8191}}) {
    t = allOpen();
    comm->getCollInfo(nccl::kAllGather, bytes, t, &ch);
    EXPECT_EQ(nccl::ncclPick(t).second, static_cast<int>(nccl::kLL)) << bytes;
  }
  // The rule's cell ruled out by NCCL: the rule is passed over.
  t = allOpen();
  t[nccl::kRing][nccl::kSimple] = nccl::kIgnore;
  comm->getCollInfo(nccl::kAllReduce, 65536, t, &ch, 1, 1);
  EXPECT_NE(nccl::ncclPick(t),
            std::make_pair(static_cast<int>(nccl::kRing), static_cast<int>(nccl::kSimple)));
  EXPECT_EQ(t[nccl::kRing][nccl::kSimple], nccl::kIgnore);
  EXPECT_EQ(ch, 0);
}

TEST_F(PluginTest, ExampleTunerCsvRules) {
  poolrun::test::TempDir tmp;
  setenv("NCCL_TUNER_CONFIG_FILE",
         tmp.write("nccl_tuner.conf",
                   "# collective,min,max,algo,proto,channels,nNodes,nRanks[,pipeOps[,regBuff]]\n"
                   "\n"
                   "allreduce, 0, 65536, ring, ll128, 4, -1, -1\n"
                   "allgather,0,1048576,pat,simple,-1,2,2\n"
                   "allreduce,65537,1073741824,tree,simple,-1,4,32,1\n")
             .c_str(),
         1);
  auto host = load();
  auto comm = host->init(32, 4);
  ASSERT_TRUE(comm->hasContext());
  CostTable t = allOpen();
  int ch = 0;
  comm->getCollInfo(nccl::kAllReduce, 4096, t, &ch);
  EXPECT_EQ(nccl::ncclPick(t), std::make_pair(static_cast<int>(nccl::kRing), static_cast<int>(nccl::kLL128)));
  EXPECT_EQ(ch, 4);
  t = allOpen();
  comm->getCollInfo(nccl::kAllReduce, 1 << 20, t, &ch, /*numPipeOps=*/1);
  EXPECT_EQ(nccl::ncclPick(t),
            std::make_pair(static_cast<int>(nccl::kTree), static_cast<int>(nccl::kSimple)));
  EXPECT_EQ(ch, 0);
  // numPipeOps 2 matches no rule; with rules only there is no model: NCCL decides.
  t = allOpen();
  comm->getCollInfo(nccl::kAllReduce, 1 << 20, t, &ch, 2);
  EXPECT_EQ(t, allOpen());
  // The PAT rule is for 2 nodes only.
  t = allOpen();
  comm->getCollInfo(nccl::kAllGather, 1024, t, &ch);
  EXPECT_EQ(t, allOpen());
}

TEST_F(PluginTest, PoolrunConfigurationWinsOverTheCsvAndSaysSoOnce) {
  poolrun::test::TempDir tmp;
  setenv("NCCL_TUNER_CONFIG_FILE",
         tmp.write("r.conf", "allreduce,0,1099511627776,ring,ll,-1,-1,-1\n").c_str(), 1);
  useConfig("h100-ib-4node.json");
  auto host = load();
  auto c1 = host->init(32, 4);
  auto c2 = host->init(32, 4);
  EXPECT_EQ(Logger::count("ignoring"), 1u);
  CostTable t = allOpen();
  int ch = 0;
  c1->getCollInfo(nccl::kAllReduce, size_t{1} << 30, t, &ch);
  EXPECT_NE(nccl::ncclPick(t), std::make_pair(static_cast<int>(nccl::kRing), static_cast<int>(nccl::kLL)));
}

// ---- declining --------------------------------------------------------------------------------------

void expectUntouched(nccl::Comm& comm) {
  for (int func = 0; func < 5; ++func) {
    for (size_t bytes : sizes()) {
      CostTable before = nccl::ncclLikeTable(func, {true, true, true, false, 2});
      CostTable t = before;
      int ch = 0;
      ASSERT_EQ(comm.getCollInfo(func, bytes, t, &ch), 0);
      ASSERT_EQ(t, before);
      ASSERT_EQ(ch, 0);
    }
  }
}

TEST_F(PluginTest, DeclinesWithoutAConfigurationAndSaysSoOnce) {
  auto host = load();
  auto c1 = host->init(16, 2);
  auto c2 = host->init(16, 2);
  EXPECT_EQ(c1->initResult(), 0);
  EXPECT_FALSE(c1->hasContext());
  expectUntouched(*c1);
  EXPECT_EQ(Logger::count("POOLRUN_TUNER_CONFIG is not set"), 1u);
}

TEST_F(PluginTest, DeclinesWhenTheUserForcedAnAlgorithmOrProtocol) {
  useConfig("h100-ib-4node.json");
  for (const char* var : {"NCCL_ALGO", "NCCL_PROTO"}) {
    Logger::clear();
    setenv(var, "Ring", 1);
    auto host = load();
    auto comm = host->init(32, 4);
    EXPECT_EQ(comm->initResult(), 0);
    EXPECT_FALSE(comm->hasContext()) << var;
    expectUntouched(*comm);
    unsetenv(var);
  }
}

struct BadConfig {
  const char* name;
  const char* json;  // written to a file; nullptr: `env` is the value itself
  const char* env;
  const char* mentions;  // what the warning must name
  int nnodes = 2;
};

class BadConfigTest : public PluginTest, public ::testing::WithParamInterface<BadConfig> {};

constexpr const char* kGood =
    R"({"schema": "poolrun.tuner/1", "fabric": "ib", "nodes": 2, "gpus_per_node": 8,
        "gpu": {"sm": 90, "nvlink_gbyte_s": 450, "nvswitch": true, "nvls": true},
        "net": {"nics_per_node": 8, "nic_gbit_s": 400, "gdr": true, "sharp": false}, "cpu_vendor": "intel"})";

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  s.replace(s.find(from), from.size(), to);
  return s;
}

TEST_P(BadConfigTest, DeclinesAndWarnsOnce) {
  const BadConfig& bad = GetParam();
  poolrun::test::TempDir tmp;
  std::string value = bad.env;
  if (bad.json != nullptr) value = tmp.write("tuner.json", bad.json).string();
  if (std::string(bad.name) == "csv_fields") {
    setenv("NCCL_TUNER_CONFIG_FILE", tmp.write("bad.conf", "allreduce,0,100,ring,simple\n").c_str(), 1);
  } else {
    setenv("POOLRUN_TUNER_CONFIG", value.c_str(), 1);
  }
  auto host = load();
  auto c1 = host->init(16, static_cast<size_t>(bad.nnodes));
  auto c2 = host->init(16, static_cast<size_t>(bad.nnodes));
  EXPECT_EQ(c1->initResult(), 0);
  EXPECT_EQ(c2->initResult(), 0);
  EXPECT_FALSE(c1->hasContext());
  expectUntouched(*c1);
  auto records = Logger::records();
  int warnings = 0;
  for (const auto& r : records) {
    if (r.level != 2) continue;
    ++warnings;
    EXPECT_NE(r.message.find(bad.mentions), std::string::npos) << r.message;
    EXPECT_EQ(r.message.find('\n'), std::string::npos) << r.message;
  }
  EXPECT_EQ(warnings, 1);
}

const std::string kMissingSchema = replaced(kGood, R"("schema": "poolrun.tuner/1", )", "");
const std::string kWrongSchema = replaced(kGood, "poolrun.tuner/1", "poolrun.tuner/2");
const std::string kTypo = replaced(kGood, R"("fabric")", R"("fabirc")");
const std::string kBadFabric = replaced(kGood, R"("ib")", R"("omnipath")");
const std::string kNvlsOnAmpere = replaced(kGood, R"("sm": 90)", R"("sm": 80)");
const std::string kSmString = replaced(kGood, R"("sm": 90)", R"("sm": "90")");
const std::string kNoNodes = replaced(kGood, R"("nodes": 2)", R"("nodes": 0)");
const std::string kBadRule =
    replaced(kGood, R"("cpu_vendor")", R"("rules": [{"algo": "Rign"}], "cpu_vendor")");
const std::string kNoNetwork = replaced(replaced(kGood, R"("nodes": 2)", R"("nodes": 1)"),
                                        R"("nics_per_node": 8)", R"("nics_per_node": 0)");

void PrintTo(const BadConfig& b, std::ostream* os) {
  *os << b.name << ": a warning naming \"" << b.mentions << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Plugin, BadConfigTest,
    ::testing::Values(BadConfig{"missing_file", nullptr, "/nonexistent/tuner.json",
                                "/nonexistent/tuner.json"},
                      BadConfig{"blank", nullptr, "   ", "empty"},
                      BadConfig{"not_json", nullptr, "{\"schema\": ", "not valid JSON"},
                      BadConfig{"no_schema", kMissingSchema.c_str(), "", "schema"},
                      BadConfig{"wrong_schema", kWrongSchema.c_str(), "", "poolrun.tuner/2"},
                      BadConfig{"typo", kTypo.c_str(), "", "fabirc"},
                      BadConfig{"fabric", kBadFabric.c_str(), "", "omnipath"},
                      BadConfig{"nvls_ampere", kNvlsOnAmpere.c_str(), "", "gpu.nvls"},
                      BadConfig{"sm_string", kSmString.c_str(), "", "gpu.sm"},
                      BadConfig{"no_nodes", kNoNodes.c_str(), "", "nodes"},
                      BadConfig{"bad_rule", kBadRule.c_str(), "", "Rign"},
                      BadConfig{"no_network", kNoNetwork.c_str(), "", "no network"},
                      BadConfig{"csv_fields", nullptr, "", "5 fields"},
                      BadConfig{"more_nodes_than_ranks", kGood, "", "cannot be modelled", 32}),
    [](const auto& p) { return std::string(p.param.name); });

// ---- NCCL's constants (v5+) -------------------------------------------------------------------------

TEST_F(PluginTest, V5BringsNcclsOwnModelToTheFabric) {
  const nccl::Constants defaults = nccl::defaultConstants();
  auto same = [](const nccl::Constants& a, const nccl::Constants& b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
  };
  {
    useConfig("h100-roce-4node.json");
    auto host = load(Release::k2_30);
    nccl::Constants c = defaults;
    auto comm = host->init(32, 4, &c);
    EXPECT_DOUBLE_EQ(c.hwLatencies[2][nccl::kRing][nccl::kLL], 2.7 + 1.4);
    EXPECT_DOUBLE_EQ(c.hwLatencies[2][nccl::kRing][nccl::kSimple], 14.0 + 2.8);
    EXPECT_DOUBLE_EQ(c.hwLatencies[2][nccl::kCollNetDirect][nccl::kLL], 0.0);  // a cell NCCL never runs
    EXPECT_DOUBLE_EQ(c.hwLatencies[0][nccl::kRing][nccl::kLL], 0.6);           // NVLink untouched
    EXPECT_DOUBLE_EQ(c.perChMaxRingLL128Bws[2][2], 36.7 * 0.8);
    EXPECT_DOUBLE_EQ(c.perChMaxRingLL128Bws[2][0], 36.7);  // one node: no network hop
    nccl::Constants oneNode = defaults;
    auto tp = host->init(8, 1, &oneNode);
    EXPECT_TRUE(same(oneNode, defaults));
  }
  {
    useConfig("h100-ib-4node.json");
    auto host = load(Release::k2_28);
    nccl::Constants c = defaults;
    auto comm = host->init(32, 4, &c);
    EXPECT_TRUE(comm->hasContext());
    EXPECT_TRUE(same(c, defaults)) << "IB is what NCCL's constants describe";
  }
  {
    useConfig("h100-roce-4node.json");
    setenv("NCCL_PROTO", "Simple", 1);
    auto host = load(Release::k2_28);
    nccl::Constants c = defaults;
    auto comm = host->init(32, 4, &c);
    EXPECT_TRUE(same(c, defaults)) << "declining touches nothing";
  }
}

// ---- robustness -------------------------------------------------------------------------------------

TEST_F(PluginTest, OddArgumentsChangeNothingAndSucceed) {
  useConfig("h100-roce-4node.json");
  auto host = load();
  auto comm = host->init(32, 4);
  for (int func : {5, 6, 7, 8, 10, 14, -1, 1000}) {
    CostTable t = allOpen();
    int ch = 0;
    EXPECT_EQ(comm->getCollInfo(func, 1 << 20, t, &ch), 0);
    EXPECT_EQ(t, allOpen()) << "collective " << func;
  }
  for (size_t bytes : {size_t{0}, SIZE_MAX, SIZE_MAX / 2 + 1}) {
    CostTable t = allOpen();
    int ch = 0;
    EXPECT_EQ(comm->getCollInfo(nccl::kAllReduce, bytes, t, &ch), 0);
    EXPECT_NE(t, allOpen()) << bytes;
  }
  // NCCL 2.22: six algorithms (no PAT) in a 6x3 table; nothing past it is touched.
  float six[7 * 3];
  std::fill(std::begin(six), std::end(six), 1.0f);
  six[18] = six[19] = six[20] = 42.0f;
  auto pat = host->init(4, 4);
  int ch = 0;
  for (size_t bytes : sizes()) {
    for (int func = 0; func < 5; ++func) EXPECT_EQ(pat->getCollInfoRaw(func, bytes, six, 6, &ch), 0);
  }
  EXPECT_EQ(six[18] + six[19] + six[20], 126.0f);
  // Zero ranks or nodes: declined, not a crash.
  auto zero = host->init(0, 0);
  EXPECT_EQ(zero->initResult(), 0);
  EXPECT_FALSE(zero->hasContext());
}

TEST_F(PluginTest, ManyCommunicatorsFromManyThreads) {
  useConfig("h100-roce-4node.json");
  auto host = load();
  const std::pair<int, int> shapes[] = {{32, 4}, {8, 1}, {16, 2}, {4, 4}};
  std::map<std::tuple<int, int, size_t>, std::pair<int, int>> expectedPick;
  for (auto [n, k] : shapes) {
    auto table = expected("h100-roce-4node.json", n, k);
    for (int func = 0; func < 5; ++func) {
      for (size_t bytes : sizes()) {
        auto c = table.candidates(static_cast<tuner::Coll>(func), bytes)[0].cell;
        expectedPick[{n * 10 + k, func, bytes}] = {static_cast<int>(c.algo), static_cast<int>(c.proto)};
      }
    }
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 10; ++round) {
        auto [n, k] = shapes[(t + round) % 4];
        auto comm =
            host->init(static_cast<size_t>(n), static_cast<size_t>(k), nullptr, static_cast<uint64_t>(t));
        for (int func = 0; func < 5; ++func) {
          for (size_t bytes : sizes()) {
            CostTable tab = allOpen();
            int ch = 0;
            comm->getCollInfo(func, bytes, tab, &ch);
            if (nccl::ncclPick(tab) != expectedPick[{n * 10 + k, func, bytes}]) ++mismatches;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- hostile configurations, on NCCL's small threads -----------------------------------------------------

// Runs `fn` on a thread with a stack of `bytes` (NCCL inits communicators on threads of its own).
void onStackOf(size_t bytes, const std::function<void()>& fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, bytes), 0);
  pthread_t thread;
  auto body = [](void* f) -> void* {
    (*static_cast<const std::function<void()>*>(f))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, body, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

std::string repeated(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST_F(PluginTest, HostileFilesDeclineOnA256KiBStackWithoutCrashing) {
  poolrun::test::TempDir tmp;
  constexpr int kDeep = 100'000;
  const std::string good = slurp(kTunerData + "/h100-ib-4node.json");
  std::filesystem::path fifo = tmp.path() / "tuner.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::path big = tmp.write("big.json", "");
  ASSERT_EQ(truncate(big.c_str(), off_t{9} << 20), 0);
  struct Case {
    std::string value;
    const char* mentions;
  };
  const Case cases[] = {
      {repeated("{\"x-a\":", kDeep) + "1" + repeated("}", kDeep), "nests deeper than 64 levels"},
      {tmp.write("deep.json", repeated("[", kDeep) + repeated("]", kDeep)).string(),
       "nests deeper than 64 levels"},
      {tmp.write("comment.json",
                 good.substr(0, good.rfind('}')) + ", \"comment\": " + repeated("[", kDeep) + "]}")
           .string(),
       "nests deeper than 64 levels"},
      {"/dev/zero", "/dev/zero is a character device"},
      {fifo.string(), "is a FIFO"},
      {tmp.path().string(), "is a directory"},
      {big.string(), "is 9 MiB; tuner config files are at most 8 MiB"},
  };
  for (const Case& c : cases) {
    setenv("POOLRUN_TUNER_CONFIG", c.value.c_str(), 1);
    auto host = load();
    Logger::clear();
    std::unique_ptr<nccl::Comm> comm;
    onStackOf(256 << 10, [&] { comm = host->init(16, 2); });
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(comm->initResult(), 0);
    EXPECT_FALSE(comm->hasContext()) << c.mentions;
    EXPECT_EQ(Logger::count(c.mentions), 1u) << c.mentions;
  }
  // And a good configuration works on such a thread.
  useConfig("h100-ib-4node.json");
  auto host = load();
  std::unique_ptr<nccl::Comm> comm;
  onStackOf(256 << 10, [&] { comm = host->init(32, 4); });
  EXPECT_TRUE(comm->hasContext());
}

TEST_F(PluginTest, TheFileIsParsedOncePerProcessWhileItIsUnchanged) {
  poolrun::test::TempDir tmp;
  const std::string good = slurp(kTunerData + "/h100-ib-4node.json");
  auto forcing = [&](const std::string& algo) {
    return good.substr(0, good.rfind('}')) + R"(, "rules": [{"coll": "allreduce", "algo": ")" + algo +
           R"(", "proto": "Simple"}]})";
  };
  std::filesystem::path cfg = tmp.write("tuner.json", forcing("Ring"));
  setenv("POOLRUN_TUNER_CONFIG", cfg.c_str(), 1);
  auto host = load();
  auto pick = [](nccl::Comm& comm) {
    CostTable t = allOpen();
    int ch = 0;
    comm.getCollInfo(nccl::kAllReduce, 1 << 20, t, &ch);
    return nccl::ncclPick(t).first;
  };
  auto first = host->init(32, 4);
  EXPECT_EQ(pick(*first), nccl::kRing);
  // Rewritten to force Tree, at the same size and with its modification time put back: the second
  // communicator gets the first one's parse, which shows the file was not read again.
  struct stat st {};
  ASSERT_EQ(stat(cfg.c_str(), &st), 0);
  tmp.write("tuner.json", forcing("Tree"));
  timespec times[2] = {st.st_mtim, st.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, cfg.c_str(), times, 0), 0);
  auto second = host->init(32, 4);
  EXPECT_EQ(pick(*second), nccl::kRing);
  // Touched: read again.
  times[0].tv_sec = times[1].tv_sec = st.st_mtim.tv_sec + 1;
  ASSERT_EQ(utimensat(AT_FDCWD, cfg.c_str(), times, 0), 0);
  auto third = host->init(32, 4);
  EXPECT_EQ(pick(*third), nccl::kTree);
  EXPECT_EQ(pick(*first), nccl::kRing);
}

TEST_F(PluginTest, GetCollInfoDoesNotAllocate) {
  if (!poolrun::test::countingMallocAvailable()) GTEST_SKIP() << "malloc counting is off in sanitizer builds";
  {
    poolrun::test::AllocationCounter probe;
    // The counter sees allocations at all (through a volatile pointer: the compiler may drop a visible
    // malloc/free pair).
    void* (*volatile allocate)(size_t) = &std::malloc;
    std::free(allocate(16));
    EXPECT_GE(probe.count(), 1);
  }
  useConfig("h100-roce-4node.json");
  poolrun::test::TempDir tmp;
  for (Release r : {Release::k2_21, Release::k2_24, Release::k2_28, Release::k2_30}) {
    auto host = load(r);
    auto comm = host->init(32, 4);
    ASSERT_TRUE(comm->hasContext());
    std::vector<CostTable> tables(5 * sizes().size(), allOpen());
    const auto sz = sizes();
    poolrun::test::AllocationCounter counter;
    size_t i = 0;
    for (int func = 0; func < 5; ++func) {
      for (size_t bytes : sz) {
        int ch = 0;
        comm->getCollInfo(func, bytes, tables[i++], &ch);
      }
    }
    EXPECT_EQ(counter.count(), 0) << "NCCL " << nccl::releaseName(r);
  }
}

// ---- explain and the plugin --------------------------------------------------------------------------

TEST_F(PluginTest, ExplainAndThePluginAgreeOnEveryChoice) {
  poolrun::test::TempDir tmp;
  std::string withRules = slurp(kTunerData + "/h100-roce-4node.json");
  withRules.insert(withRules.rfind('}'), R"(, "rules": [
    {"coll": "allreduce", "min_bytes": 1000, "max_bytes": 300000, "algo": "Ring", "channels": 12},
    {"coll": "reducescatter", "min_bytes": 1048576, "proto": "Simple", "nranks": 32}
  ])");
  const std::string rulesPath = tmp.write("rules.json", withRules).string();
  struct Case {
    std::string config;
    int nranks, nnodes;
  };
  const Case cases[] = {
      {kTunerData + "/a100-8gpu-1node.json", 8, 1},  {kTunerData + "/h100-ib-4node.json", 32, 4},
      {kTunerData + "/h100-roce-4node.json", 32, 4}, {kTunerData + "/h100-roce-4node.json", 8, 1},
      {kTunerData + "/h100-roce-4node.json", 4, 4},  {rulesPath, 32, 4}};
  int rows = 0;
  for (const Case& c : cases) {
    setenv("POOLRUN_TUNER_CONFIG", c.config.c_str(), 1);
    auto host = load();
    auto comm = host->init(static_cast<size_t>(c.nranks), static_cast<size_t>(c.nnodes));
    ASSERT_TRUE(comm->hasContext()) << c.config;
    for (const char* coll : {"allreduce", "allgather", "reducescatter", "broadcast", "reduce"}) {
      const std::string cmd = std::string(POOLRUN_BINARY) + " tuner explain --json --config '" + c.config +
                              "' --coll " + coll + " --nranks " + std::to_string(c.nranks) + " --nnodes " +
                              std::to_string(c.nnodes) + " --min-bytes 1 --max-bytes 64G";
      auto doc = nlohmann::json::parse(run(cmd));
      ASSERT_EQ(doc["schema"], "poolrun.tuner-explain/1");
      const int func = static_cast<int>(*tuner::parseColl(coll));
      for (const auto& row : doc["rows"]) {
        // NCCL's table: the cells explain lists as candidates are open, the rest IGNORE.
        CostTable t;
        for (auto& r : t) r.fill(nccl::kIgnore);
        for (const auto& cand : row["candidates"]) {
          t[static_cast<size_t>(*tuner::parseAlgo(cand["algo"].get<std::string>()))]
           [static_cast<size_t>(*tuner::parseProto(cand["proto"].get<std::string>()))] = 1.0f;
        }
        int ch = 0;
        comm->getCollInfo(func, row["bytes"].get<size_t>(), t, &ch);
        auto [a, p] = nccl::ncclPick(t);
        ASSERT_FALSE(row["algo"].is_null());
        EXPECT_EQ(std::string(tuner::algoName(static_cast<tuner::Algo>(a))), row["algo"])
            << cmd << " " << row["bytes"];
        EXPECT_EQ(std::string(tuner::protoName(static_cast<tuner::Proto>(p))), row["proto"])
            << cmd << " " << row["bytes"];
        EXPECT_EQ(ch, row["channels"].get<int>()) << cmd << " " << row["bytes"];
        ++rows;
      }
    }
  }
  EXPECT_EQ(rows, 6 * 5 * 37);
}

}  // namespace
