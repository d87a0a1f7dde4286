// The poolrun.topology/2 JSON document, and /1 read.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/writers.hpp"
#include "support/fixtures.hpp"
#include "support/synthetic.hpp"

namespace poolrun::topo {
namespace {

using nlohmann::json;

NodeTopology shipped() {
  return readTopologyFile(poolrun::test::sourceDir() / "topologies/hgx-h100-8gpu-8nic.xml");
}

TEST(TopologyJsonTest, HasTheStableFields) {
  json doc = json::parse(toJson(shipped()).dump());
  EXPECT_EQ(doc["schema"], "poolrun.topology/2");
  ASSERT_EQ(doc["gpus"].size(), 8u);
  const json& g = doc["gpus"][0];
  EXPECT_EQ(g["index"], 0);
  EXPECT_EQ(g["pci"], "0000:13:00.0");
  EXPECT_EQ(g["vendor"], "NVIDIA");
  EXPECT_EQ(g["numa"], 0);
  EXPECT_TRUE(g.contains("model"));
  const json& n = doc["nics"][0];
  EXPECT_EQ(n["name"], "mlx5_0");
  EXPECT_EQ(n["pci"], "0000:12:00.0");
  EXPECT_EQ(n["numa"], 0);
  const json& p = n["ports"][0];
  EXPECT_EQ(p["port"], 1);
  EXPECT_EQ(p["link_layer"], "infiniband");
  EXPECT_EQ(p["state"], "active");
  EXPECT_EQ(p["rate_gbps"], 400);
  EXPECT_TRUE(p["netdev"].is_null());
  EXPECT_TRUE(p["roce_v2_gid_index"].is_null());
  EXPECT_EQ(doc["paths"]["GPU0"]["GPU7"], "NV18");
  EXPECT_EQ(doc["paths"]["GPU0"]["mlx5_0"], "PIX");
  EXPECT_EQ(doc["paths"]["GPU0"]["mlx5_4"], "SYS");
  EXPECT_EQ(doc["paths"]["mlx5_0"]["GPU0"], "PIX");
  EXPECT_FALSE(doc["paths"]["GPU0"].contains("GPU0"));
}

TEST(TopologyJsonTest, RoundTripsExactly) {
  NodeTopology t = shipped();
  t.nics[1].ports[0].link_layer = LinkLayer::kEthernet;
  t.nics[1].ports[0].roce_v2_gid_index = 3;
  t.nics[1].ports[0].netdev = "enp18s0np0";
  t.gpus[2].uuid = "GPU-1234";
  NodeTopology back = fromJson(json::parse(toJson(t).dump()), "t.json");
  back.source = t.source;
  EXPECT_EQ(back, t);
}

NodeTopology withMig() {
  NodeTopology t = shipped();
  MigState& m = t.gpus[1].mig;
  m = test::migState(true, false);
  m.profiles = {
      {.id = 19, .name = "1g.10gb", .slices = 1, .max_instances = 7, .sm = 16, .memory_bytes = 9856ull << 20},
      {.id = 9,
       .name = "3g.40gb",
       .slices = 3,
       .max_instances = 2,
       .sm = 60,
       .memory_bytes = 40192ull << 20}};
  m.instances = {test::migInstance(2, 0, "3g.40gb", 9, 3, 60, 40192, "MIG-5f3a"),
                 test::migInstance(9, 0, "1g.10gb", 19, 1, 16, 9856, "MIG-77b1")};
  t.gpus[2].mig = test::migState(false, true);
  return t;
}

// MIG round-trips; a GPU without MIG is null; a /1 document (no MIG) still reads.
// More GPUs or NICs than a node may have: refused naming the count, before anything is built
// from them (the path matrix grows with the square of the count).
TEST(TopologyJsonTest, MoreDevicesThanANodeHasAreRefused) {
  json doc = json::parse(toJson(shipped()).dump());
  for (const char* key : {"gpus", "nics"}) {
    SCOPED_TRACE(key);
    json many = doc;
    const json one = many[key][0];
    many[key] = json::array();
    auto add = [&](int i) {
      many[key].push_back(one);
      if (std::string(key) == "gpus") many[key].back()["index"] = i;
    };
    for (int i = 0; i < 256; ++i) add(i);
    const NodeTopology t = fromJson(many, "t.json");
    EXPECT_EQ(std::string(key) == "gpus" ? t.gpus.size() : t.nics.size(), 256u);
    add(256);
    try {
      fromJson(many, "many.json");
      FAIL() << "257 " << key << " read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("many.json: field '" + std::string(key) +
                                           "': 257 entries, more than a node may have (at most 256)"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(TopologyJsonTest, MigRoundTripsAndVersionOneStillReads) {
  NodeTopology t = withMig();
  json doc = json::parse(toJson(t).dump());
  EXPECT_TRUE(doc["gpus"][0]["mig"].is_null());
  EXPECT_EQ(doc["gpus"][1]["mig"]["instances"][0]["uuid"], "MIG-5f3a");
  EXPECT_EQ(doc["gpus"][1]["mig"]["profiles"][1]["id"], 9);
  EXPECT_EQ(doc["gpus"][2]["mig"]["pending"], true);
  NodeTopology back = fromJson(doc, "t.json");
  back.source = t.source;
  EXPECT_EQ(back, t);
  EXPECT_TRUE(back.gpus[2].mig.resetPending());
  doc["schema"] = "poolrun.topology/1";
  for (json& g : doc["gpus"]) g.erase("mig");
  NodeTopology old = fromJson(doc, "old.json");
  EXPECT_EQ(old.gpus.size(), t.gpus.size());
  for (const Gpu& g : old.gpus) EXPECT_FALSE(g.mig.capable);
}

// Hostile MIG fields: named with their path, never a crash or a silent wrap.
TEST(TopologyJsonTest, BadMigFieldsAreNamed) {
  struct Bad {
    std::function<void(json&)> mutate;
    const char* says;
  };
  const std::vector<Bad> cases = {
      {[](json& m) { m["instances"][0]["gpu_instance"] = -1; },
       "field 'gpus[1].mig.instances[0].gpu_instance': -1 is out of range"},
      {[](json& m) { m["profiles"][0]["id"] = 4294967296; },
       "field 'gpus[1].mig.profiles[0].id': 4294967296 is out"},
      {[](json& m) { m["instances"][1]["memory_bytes"] = 1.5; }, "is not a whole number"},
      {[](json& m) { m["enabled"] = "yes"; }, "field 'gpus[1].mig.enabled'"},
      {[](json& m) {
         m["instances"] = json::array();
         for (int i = 0; i < 65; ++i) m["instances"].push_back(json::object());
       },
       "field 'gpus[1].mig.instances': 65 entries (at most 64)"},
      {[](json& m) { m = 7; }, "expected a JSON object"},
      {[](json& m) { m["profiles"] = json::object(); }, "field 'gpus[1].mig.profiles': {} is not a list"},
  };
  for (const Bad& c : cases) {
    json doc = json::parse(toJson(withMig()).dump());
    c.mutate(doc["gpus"][1]["mig"]);
    try {
      fromJson(doc, "bad.json");
      ADD_FAILURE() << "accepted: " << c.says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
}

TEST(TopologyJsonTest, UnknownMeasurementsAreNullAndReadBackAsUnknown) {
  NodeTopology t = shipped();
  t.nics[0].ports[0].rate_gbps = 0;
  t.gpus[0].memory_bytes = 0;
  t.gpus[0].link = {};
  json doc = json::parse(toJson(t).dump());
  EXPECT_TRUE(doc["nics"][0]["ports"][0]["rate_gbps"].is_null()) << doc["nics"][0].dump();
  EXPECT_TRUE(doc["gpus"][0]["memory_bytes"].is_null());
  for (const char* key : {"speed_gts", "width", "gbyte_s"})
    EXPECT_TRUE(doc["gpus"][0]["link"][key].is_null()) << key;
  EXPECT_EQ(doc["nics"][1]["ports"][0]["rate_gbps"], 400) << "what is known stays";
  NodeTopology back = fromJson(doc, "t.json");
  back.source = t.source;
  EXPECT_EQ(back, t);
  // Files written before, with 0 for unknown, read the same.
  doc["nics"][0]["ports"][0]["rate_gbps"] = 0;
  doc["gpus"][0]["memory_bytes"] = 0;
  NodeTopology old = fromJson(doc, "old.json");
  old.source = t.source;
  EXPECT_EQ(old, t);
}

struct BadDocument {
  const char* name;
  std::function<void(json&)> mutate;
  const char* message;
};

class TopologyJsonBadInput : public ::testing::TestWithParam<BadDocument> {};

TEST_P(TopologyJsonBadInput, NamesTheField) {
  json doc = json::parse(toJson(shipped()).dump());
  GetParam().mutate(doc);
  try {
    fromJson(doc, "bad.json");
    FAIL() << "accepted " << GetParam().name;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
    EXPECT_TRUE(std::string(e.what()).starts_with("bad.json: ")) << e.what();
  }
}

void PrintTo(const BadDocument& b, std::ostream* os) {
  *os << b.name << ": error with \"" << b.message << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TopologyJsonBadInput,
    ::testing::Values(
        BadDocument{"schema", [](json& d) { d["schema"] = "poolrun.topology/9"; },
                    "expected \"poolrun.topology/2\" (or \"poolrun.topology/1\")"},
        BadDocument{"not object", [](json& d) { d = json::array(); }, "expected a JSON object, got array"},
        BadDocument{"gpu pci", [](json& d) { d["gpus"][1]["pci"] = "nope"; },
                    "field 'gpus[1].pci': \"nope\" is not a PCI address"},
        BadDocument{"gpus type", [](json& d) { d["gpus"] = 3; }, "field 'gpus': 3 is not a list"},
        BadDocument{"gpu index", [](json& d) { d["gpus"][1]["index"] = 5; },
                    "field 'gpus[1].index': 5 is not the GPU's place in the list (1)"},
        BadDocument{"negative sm", [](json& d) { d["gpus"][0]["sm"] = -1; },
                    "field 'gpus[0].sm': -1 is out of range (0 to 1000)"},
        BadDocument{"negative rate", [](json& d) { d["nics"][0]["ports"][0]["rate_gbps"] = -400; },
                    "field 'nics[0].ports[0].rate_gbps': -400"},
        BadDocument{"huge rate", [](json& d) { d["nics"][0]["ports"][0]["rate_gbps"] = 1e308; },
                    "field 'nics[0].ports[0].rate_gbps': 1e+308"},
        BadDocument{"negative width", [](json& d) { d["switches"][0]["link"]["width"] = -1; },
                    "field 'switches[0].link.width': -1 is out of range (0 to 64)"},
        BadDocument{"cpuset", [](json& d) { d["numa_nodes"][0]["cpuset"] = "0-"; },
                    "field 'numa_nodes[0].cpuset': bad CPU list item '0-'"},
        BadDocument{"switch parent", [](json& d) { d["switches"][0]["parent"] = 5; },
                    "must name an earlier switch"},
        BadDocument{"placement", [](json& d) { d["gpus"][0]["placement"]["switch"] = 99; },
                    "switch 99 does not exist"},
        BadDocument{"nvlink peer",
                    [](json& d) {
                      d["gpus"][0]["nvlinks"] = json::array({{{"peer", "GPU42"}, {"count", 2}}});
                    },
                    "peer GPU42 does not exist"},
        BadDocument{"nic name", [](json& d) { d["nics"][0].erase("name"); }, "missing field 'nics[0].name'"},
        BadDocument{"int type", [](json& d) { d["nics"][0]["ports"][0]["port"] = "one"; },
                    "field 'nics[0].ports[0].port': \"one\" is not a whole number"}),
    [](const ::testing::TestParamInfo<BadDocument>& param) {
      std::string n = param.param.name;
      for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return n;
    });

TEST(TopologyJsonTest, ReadsJsonFilesAndReportsSyntaxErrors) {
  EXPECT_THROW(fromJson(json::parse("{}"), "empty.json"), Error);
}

}  // namespace
}  // namespace poolrun::topo
