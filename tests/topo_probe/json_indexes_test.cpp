// The topology JSON of vector indexes (switch, host_bridge, parent, NVLink peers) is the same as
// before they became size_t with kNoIndex: null where there is none, and a file that says -1 (as
// hand-written ones may) reads the same as null.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "poolrun/topo/writers.hpp"
#include "support/fixtures.hpp"

namespace poolrun::topo {
namespace {

// The shipped topology JSON, written before the index types changed, reads and writes its indexes
// back as they are (switches' parents and host bridges, devices' switches and host bridges).
TEST(JsonIndexes, ShippedFileWritesItsIndexesTheSame) {
  const std::filesystem::path file = test::sourceDir() / "topologies/hgx-h100-8gpu-8roce.json";
  nlohmann::json before = nlohmann::json::parse(std::ifstream(file));
  NodeTopology t = fromJson(before, file.string());
  ASSERT_FALSE(t.switches.empty());
  nlohmann::json after = nlohmann::json::parse(toJson(t).dump());
  EXPECT_EQ(after["switches"], before["switches"]);
  for (const char* devices : {"gpus", "nics"}) {
    ASSERT_EQ(after[devices].size(), before[devices].size());
    for (size_t i = 0; i < before[devices].size(); ++i)
      EXPECT_EQ(after[devices][i]["placement"], before[devices][i]["placement"]) << devices << " " << i;
  }
}

// -1 and null both mean "none"; written back as null.
TEST(JsonIndexes, MinusOneReadsAsNone) {
  const std::filesystem::path file = test::sourceDir() / "topologies/hgx-h100-8gpu-8roce.json";
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(file));
  NodeTopology withNull = fromJson(doc, "null.json");
  size_t replaced = 0;
  auto minusOne = [&](nlohmann::json& j, const char* key) {
    if (j.contains(key) && j[key].is_null()) {
      j[key] = -1;
      ++replaced;
    }
  };
  for (nlohmann::json& s : doc["switches"]) {
    minusOne(s, "parent");
    minusOne(s, "host_bridge");
  }
  for (const char* devices : {"gpus", "nics"}) {
    for (nlohmann::json& d : doc[devices]) {
      minusOne(d["placement"], "switch");
      minusOne(d["placement"], "host_bridge");
    }
  }
  ASSERT_GT(replaced, 0u) << "nothing in the file says none";
  NodeTopology withMinusOne = fromJson(doc, "null.json");
  EXPECT_EQ(withMinusOne, withNull);
  EXPECT_EQ(toJson(withMinusOne).dump(), toJson(withNull).dump());
}

}  // namespace
}  // namespace poolrun::topo
