// What a client may send the pool: every number checked for type and range, unknown fields
// refused, names and text checked, invalid UTF-8 refused where it is read. Table-driven over the
// JSON readers poold calls (requestFromJson, clusterNodeFromJson, registrationFromJson) and the
// readers of the pool's own replies.

#include <gtest/gtest.h>

#include <functional>

#include "poolrun/pool/json.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/topo/writers.hpp"
#include "support/blocking.hpp"
#include "support/synthetic.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

std::string messageOf(const std::function<void()>& fn) {
  return test::badInputMessage(fn);
}

json goodRequest() {
  return json::parse(R"({"gpus": 8, "ttl_s": 60, "request_id": "L0123456789abcdef"})");
}

struct BadField {
  std::string name;  // what the case is about
  std::function<void(json&)> change;
  std::string expected;  // a part of the message
};

TEST(InputTest, RequestNumbersAreWholeAndInRange) {
  const std::vector<BadField> cases = {
      {"gpus past 32 bits", [](json& d) { d["gpus"] = 4294967297ULL; },
       "field 'gpus': 4294967297 is out of range (1 to 1000000)"},
      {"gpus a float", [](json& d) { d["gpus"] = 1.9; },
       "field 'gpus': 1.9 is not a whole number (1 to 1000000)"},
      {"gpus 1.0", [](json& d) { d["gpus"] = 1.0; }, "field 'gpus': 1.0 is not a whole number"},
      {"gpus a bool", [](json& d) { d["gpus"] = true; },
       "field 'gpus': true is not a whole number (1 to 1000000)"},
      {"gpus a string", [](json& d) { d["gpus"] = "8"; }, "field 'gpus': \"8\" is not a whole number"},
      {"gpus zero", [](json& d) { d["gpus"] = 0; }, "field 'gpus': 0 is out of range (1 to 1000000)"},
      {"gpus negative", [](json& d) { d["gpus"] = -8; }, "field 'gpus': -8 is out of range"},
      {"gpus missing", [](json& d) { d.erase("gpus"); }, "missing field 'gpus'"},
      {"gpus past 64 bits", [](json& d) { d["gpus"] = json::parse("18446744073709551617"); },
       "field 'gpus': 1.8446744073709552e+19 is out of range (1 to 1000000)"},
      {"gpus_per_node", [](json& d) { d["gpus_per_node"] = 4294967304ULL; },
       "field 'gpus_per_node': 4294967304 is out of range (0 to 1024)"},
      {"priority past 32 bits", [](json& d) { d["priority"] = 99999999999LL; },
       "field 'priority': 99999999999 is out of range (-1000000 to 1000000)"},
      {"priority too low", [](json& d) { d["priority"] = -1000001; },
       "field 'priority': -1000001 is out of range (-1000000 to 1000000)"},
      {"ttl_s never expiring", [](json& d) { d["ttl_s"] = INT64_MAX; },
       "field 'ttl_s': 9223372036854775807 is out of range (1 to 86400)"},
      {"ttl_s zero", [](json& d) { d["ttl_s"] = 0; }, "field 'ttl_s': 0 is out of range (1 to 86400)"},
      {"ttl_s a float", [](json& d) { d["ttl_s"] = 0.5; }, "field 'ttl_s': 0.5 is not a whole number"},
      {"wait_s negative", [](json& d) { d["wait_s"] = -1; },
       "field 'wait_s': -1 is out of range (0 to 31536000)"},
      {"wait_s huge", [](json& d) { d["wait_s"] = UINT64_MAX; },
       "field 'wait_s': 18446744073709551615 is out of range (0 to 31536000)"},
      {"max_duration_s", [](json& d) { d["max_duration_s"] = INT64_MIN; },
       "field 'max_duration_s': -9223372036854775808 is out of range (1 to 31622400)"},
      {"min_memory_bytes negative", [](json& d) { d["min_memory_bytes"] = -1; },
       "field 'min_memory_bytes': -1 is out of range (0 to 1125899906842624)"},
      {"min_memory_bytes a string", [](json& d) { d["min_memory_bytes"] = "80G"; },
       "field 'min_memory_bytes': \"80G\" is not a whole number"},
      {"whole_nodes a number", [](json& d) { d["whole_nodes"] = 1; },
       "field 'whole_nodes': 1 is not true or false"},
      {"one_switch a string", [](json& d) { d["one_switch"] = "yes"; },
       "field 'one_switch': \"yes\" is not true or false"},
      {"placement empty", [](json& d) { d["placement"] = ""; },
       "field 'placement': '': give strict or best-effort"},
      {"placement unknown", [](json& d) { d["placement"] = "tight"; },
       "field 'placement': 'tight': give strict or best-effort"},
      {"placement huge", [](json& d) { d["placement"] = std::string(1 << 20, 's'); },
       "field 'placement': 'ssss"},
      {"placement not UTF-8", [](json& d) { d["placement"] = "str\xffict"; },
       "field 'placement': 'str\\xffict': give strict or best-effort"},
      {"placement a number", [](json& d) { d["placement"] = 1; }, "field 'placement': 1 is not a string"},
      {"placement an object",
       [](json& d) {
         d["placement"] = json{{"a", json{{"b", 1}}}};
       },
       "field 'placement': "},
      {"max_gpus negative", [](json& d) { d["max_gpus"] = -1; },
       "field 'max_gpus': -1 is out of range (0 to 1000000)"},
      {"max_gpus past 32 bits", [](json& d) { d["max_gpus"] = 4294967297ULL; },
       "field 'max_gpus': 4294967297 is out of range (0 to 1000000)"},
      {"max_gpus a float", [](json& d) { d["max_gpus"] = 8.5; },
       "field 'max_gpus': 8.5 is not a whole number"},
      {"max_gpus a string", [](json& d) { d["max_gpus"] = "16"; },
       "field 'max_gpus': \"16\" is not a whole number"},
      {"resize_interval_s negative", [](json& d) { d["resize_interval_s"] = -1; },
       "field 'resize_interval_s': -1 is out of range (0 to 2592000)"},
      {"resize_interval_s huge", [](json& d) { d["resize_interval_s"] = INT64_MAX; },
       "field 'resize_interval_s': 9223372036854775807 is out of range (0 to 2592000)"},
  };
  for (const BadField& c : cases) {
    json doc = goodRequest();
    c.change(doc);
    std::string msg = messageOf([&] { requestFromJson(doc); });
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.name << ": '" << msg << "'";
  }
}

TEST(InputTest, RequestLimitsAreAccepted) {
  json doc = goodRequest();
  doc["gpus"] = kGpusRange.max;
  doc["gpus_per_node"] = kGpusPerNodeRange.max;
  doc["priority"] = kPriorityRange.min;
  doc["ttl_s"] = kTtlSecondsRange.max;
  doc["wait_s"] = 0;
  doc["max_duration_s"] = kMaxDurationSecondsRange.max;
  doc["min_memory_bytes"] = kMinMemoryBytesRange.max;
  doc["max_gpus"] = kMaxGpusRange.max;
  doc["resize_interval_s"] = kResizeIntervalSecondsRange.max;
  LeaseRequest r = requestFromJson(doc);
  EXPECT_EQ(r.max_gpus, 1'000'000);
  EXPECT_EQ(r.resize_interval, std::chrono::seconds(2'592'000));
  EXPECT_EQ(r.gpus, 1'000'000);
  EXPECT_EQ(r.gpus_per_node, 1024);
  EXPECT_EQ(r.priority, -1'000'000);
  EXPECT_EQ(r.ttl, std::chrono::seconds(86'400));
  EXPECT_EQ(r.wait, std::chrono::seconds(0));
  EXPECT_EQ(r.max_duration, std::chrono::seconds(31'622'400));
  EXPECT_EQ(r.min_memory_bytes, uint64_t{1} << 50);
  // null is "not given", as the client writes it.
  doc["wait_s"] = nullptr;
  EXPECT_EQ(requestFromJson(doc).wait, std::nullopt);
}

TEST(InputTest, WhatTheClientWritesReadsBack) {
  // poolrun's and poolctl's requests, and the queue rows of the store, go through toJson.
  LeaseRequest r;
  r.gpus = 16;
  r.gpus_per_node = 8;
  r.gpu_model = "H100";
  r.min_memory_bytes = uint64_t{80} << 30;
  r.fabric = topo::Fabric::kIb;
  r.labels = {{"rack", "r1"}};
  r.exclude_nodes = {"dgx07", "dgx08"};
  r.priority = -3;
  r.owner = "alice@EXAMPLE.ORG";
  r.job_name = "train résumé";
  r.account = "physics.theory-2";
  r.wait = std::chrono::seconds(5);
  r.ttl = std::chrono::seconds(90);
  r.max_duration = std::chrono::seconds(3600);
  json doc = toJson(r);
  doc["request_id"] = newLeaseId();
  LeaseRequest back = requestFromJson(json::parse(doc.dump()));
  EXPECT_EQ(toJson(back), toJson(r));
}

TEST(InputTest, UnknownRequestFieldsAreNamed) {
  for (const char* key : {"ttl", "gpu", "Gpus", "priority ", "max_duration"}) {
    json doc = goodRequest();
    doc[key] = 5;
    std::string msg = messageOf([&] { requestFromJson(doc); });
    EXPECT_EQ(
        msg.rfind(
            std::string("unknown field '") + key + "' in the lease request (known: gpus, gpus_per_node, ", 0),
        0u)
        << msg;
    EXPECT_NE(msg.find("ttl_s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("request_id"), std::string::npos) << msg;
  }
  EXPECT_NE(messageOf([] { requestFromJson(json::array()); }).find("expected a JSON object, got array"),
            std::string::npos);
}

TEST(InputTest, RequestStringsAreCheckedWhereRead) {
  const std::vector<BadField> cases = {
      {"job name Latin-1", [](json& d) { d["job_name"] = "r\xe9sum\xe9"; },
       "field 'job_name' 'r\\xe9sum\\xe9': byte \\xe9 at byte 1 is not UTF-8"},
      {"job name control character", [](json& d) { d["job_name"] = "a\nb"; },
       "field 'job_name' 'a\\x0ab': control character \\x0a at byte 1"},
      // A right-to-left override shows "train\u202Egnp.exe" as "trainexe.png" in a listing.
      {"job name bidirectional override", [](json& d) { d["job_name"] = "train\u202Egnp.exe"; },
       "field 'job_name' 'train\\xe2\\x80\\xaegnp.exe': bidirectional control U+202E at byte 5"},
      {"job name C1 control", [](json& d) { d["job_name"] = "a\u009B2Jb"; },
       "field 'job_name' 'a\\xc2\\x9b2Jb': C1 control U+009B at byte 1"},
      {"job name too long", [](json& d) { d["job_name"] = std::string(257, 'j'); },
       "257 bytes long (at most 256)"},
      {"job name a number", [](json& d) { d["job_name"] = 5; }, "field 'job_name': 5 is not a string"},
      {"owner with a space", [](json& d) { d["owner"] = "al ice"; }, "field 'owner' 'al ice': "},
      {"account with a space", [](json& d) { d["account"] = "a b"; },
       "field 'account' 'a b': only letters, digits, '.', '_' and '-' are allowed"},
      {"account Latin-1", [](json& d) { d["account"] = "r\xe9"; }, "field 'account' 'r\\xe9': "},
      {"account too long", [](json& d) { d["account"] = std::string(65, 'a'); }, "longer than 64 bytes"},
      {"account a number", [](json& d) { d["account"] = 5; }, "field 'account': 5 is not a string"},
      {"owner Latin-1", [](json& d) { d["owner"] = "r\xe9mi"; }, "field 'owner' 'r\\xe9mi': byte \\xe9"},
      {"gpu model", [](json& d) { d["gpu_model"] = "H\xff"; }, "field 'gpu_model' 'H\\xff': "},
      {"fabric", [](json& d) { d["fabric"] = "ethernet"; }, "field 'fabric': "},
      {"fabric not UTF-8", [](json& d) { d["fabric"] = "\xff"; }, "field 'fabric' '\\xff': "},
      {"labels a list", [](json& d) { d["labels"] = json::array({"rack"}); },
       "field 'labels': [\"rack\"] is not"},
      {"label value a number",
       [](json& d) {
         d["labels"] = {{"rack", 1}};
       },
       "field 'labels.rack': 1 is not a string"},
      {"label value Latin-1",
       [](json& d) {
         d["labels"] = {{"rack", "r\xe9"}};
       },
       "field 'labels.rack' 'r\\xe9'"},
      {"label key Latin-1",
       [](json& d) {
         d["labels"] = {{"r\xe9", "1"}};
       },
       "a key of field 'labels' 'r\\xe9'"},
      {"request id with CR-LF", [](json& d) { d["request_id"] = "L1\r\nX: y"; },
       "field 'request_id' 'L1\\x0d\\x0aX: y': "},
      {"request id a number", [](json& d) { d["request_id"] = 7; }, "field 'request_id': 7 is not a string"},
      {"excluded nodes a string", [](json& d) { d["exclude_nodes"] = "n01"; }, "field 'exclude_nodes'"},
      {"excluded node a number", [](json& d) { d["exclude_nodes"] = json::array({1}); },
       "field 'exclude_nodes': expected a list of node names, not 1"},
      {"excluded node with a slash", [](json& d) { d["exclude_nodes"] = json::array({"../n01"}); },
       "field 'exclude_nodes[0]' '../n01'"},
      {"excluded node empty", [](json& d) { d["exclude_nodes"] = json::array({""}); },
       "field 'exclude_nodes[0]'"},
      {"excluded node Latin-1", [](json& d) { d["exclude_nodes"] = json::array({"n\xe9"}); },
       "field 'exclude_nodes[0]' 'n\\xe9'"},
      {"too many excluded nodes",
       [](json& d) {
         d["exclude_nodes"] = json::array();
         for (size_t i = 0; i <= kMaxExcludedNodes; ++i)
           d["exclude_nodes"].push_back("n" + std::to_string(i));
       },
       "field 'exclude_nodes': at most 1024 nodes, not 1025"},
  };
  for (const BadField& c : cases) {
    json doc = goodRequest();
    c.change(doc);
    std::string msg = messageOf([&] { requestFromJson(doc); });
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.name << ": '" << msg << "'";
  }
}

json goodNode() {
  topo::ClusterNode n;
  n.name = "dgx01";
  n.levels.switch_name = "leaf1";
  n.labels = {{"rack", "r1"}};
  n.topology = std::make_shared<topo::NodeTopology>(test::synthetic({}));
  return json::parse(toJson(n).dump());
}

TEST(InputTest, NodeRegistrationIsCheckedFieldByField) {
  EXPECT_EQ(clusterNodeFromJson(goodNode()).name, "dgx01");
  const std::vector<BadField> cases = {
      {"name with a newline", [](json& d) { d["name"] = "dgx01\nX"; },
       "field 'name' 'dgx01\\x0aX': '\\x0a' at byte 5"},
      {"name with a space", [](json& d) { d["name"] = "dgx 01"; },
       "field 'name' 'dgx 01': '\\x20' at byte 3"},
      {"name with a slash", [](json& d) { d["name"] = "../x"; }, "field 'name' '../x': '.' at byte 0"},
      {"name with a quote", [](json& d) { d["name"] = "a\"b"; }, "field 'name' 'a\"b': '\"' at byte 1"},
      {"name empty", [](json& d) { d["name"] = ""; }, "field 'name' '': empty"},
      {"name a number", [](json& d) { d["name"] = 1; }, "field 'name': 1 is not a string"},
      {"name Latin-1", [](json& d) { d["name"] = "n\xe9"; }, "field 'name' 'n\\xe9': "},
      {"unknown field", [](json& d) { d["switch_name"] = "leaf1"; },
       "unknown field 'switch_name' in the node (known: name, nvlink_domain, block, switch, rail_group, "
       "spine, "
       "labels, topology_file, fabric, topology)"},
      {"nvlink_domain with a control character", [](json& d) { d["nvlink_domain"] = "rack\x07"; },
       "field 'nvlink_domain' 'rack\\x07': control character"},
      {"spine not a string", [](json& d) { d["spine"] = 7; }, "field 'spine': 7 is not a string"},
      {"block too long", [](json& d) { d["block"] = std::string(300, 'b'); }, "field 'block'"},
      {"switch with a control character", [](json& d) { d["switch"] = "leaf\x1b[2J"; },
       "field 'switch' 'leaf\\x1b[2J': control character"},
      {"switch with a bidirectional isolate", [](json& d) { d["switch"] = "leaf\u2066x"; },
       "field 'switch' 'leaf\\xe2\\x81\\xa6x': bidirectional control U+2066 at byte 4"},
      {"label Latin-1", [](json& d) { d["labels"]["rack"] = "r\xe9"; }, "field 'labels.rack' 'r\\xe9'"},
      {"fabric", [](json& d) { d["fabric"] = "myrinet"; }, "node dgx01: field 'fabric': "},
      {"topology missing", [](json& d) { d.erase("topology"); }, "missing field 'topology'"},
      {"topology a string", [](json& d) { d["topology"] = "x"; },
       "field 'topology' is not a poolrun.topology/1"},
      {"topology string Latin-1", [](json& d) { d["topology"]["hostname"] = "h\xe9"; },
       "field 'topology.hostname' 'h\\xe9': byte 1 is not UTF-8"},
      {"topology key Latin-1", [](json& d) { d["topology"]["x\xe9"] = 1; },
       "field 'topology' has a key that is not UTF-8 ('x\\xe9')"},
      {"topology nested deep",
       [](json& d) {
         json deep = json::array();
         for (int i = 0; i < 100; ++i) deep = json::array({deep});
         d["topology"]["extra"] = deep;
       },
       "is nested more than 64 levels deep"},
  };
  for (const BadField& c : cases) {
    json doc = goodNode();
    c.change(doc);
    std::string msg = messageOf([&] { clusterNodeFromJson(doc); });
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.name << ": '" << msg << "'";
  }
}

TEST(InputTest, RegistrationBodies) {
  json body = {{"nodes", json::array({goodNode(), goodNode()})}};
  body["nodes"][1]["name"] = "dgx02";
  EXPECT_EQ(registrationFromJson(body).size(), 2u);
  body["nodes"][1]["name"] = "dgx 02";
  EXPECT_EQ(messageOf([&] { registrationFromJson(body); }).rfind("nodes[1]: field 'name' 'dgx 02'", 0), 0u);
  EXPECT_EQ(messageOf([] {
              registrationFromJson({{"nodes", json::array()}, {"node", 1}});
            }),
            "unknown field 'node' in the registration (known: nodes)");
  EXPECT_NE(messageOf([] {
              registrationFromJson({{"nodes", 5}});
            }).find("field 'nodes': 5 is not a list"),
            std::string::npos);
}

TEST(InputTest, StateRefusesBadNodeNamesWhateverTheEntryPoint) {
  PoolState state;
  topo::ClusterNode n = clusterNodeFromJson(goodNode());
  for (const char* bad : {"dgx 01", "dgx01\r\n", "a/b", "a\"b", "-dgx"}) {
    n.name = bad;
    std::string msg = messageOf([&] { state.registerNode(n); });
    EXPECT_NE(msg.find("cannot register node '"), std::string::npos) << bad << ": " << msg;
  }
  EXPECT_TRUE(state.nodeMap().empty());
}

TEST(InputTest, RepliesWithBadNumbersOrNamesAreRefused) {
  Lease l;
  l.id = "L0123456789abcdef";
  l.owner = "alice";
  l.gpus = {{"dgx01", 0}, {"dgx01", 1}};
  l.created = std::chrono::system_clock::now();
  l.expires = l.created + std::chrono::seconds(60);
  const json lease = json::parse(toJson(l).dump());
  EXPECT_EQ(leaseFromJson(lease).gpus, l.gpus);
  // A reply from a newer pool may carry more fields.
  json newer = lease;
  newer["colour"] = "blue";
  EXPECT_NO_THROW(leaseFromJson(newer));
  json never = lease;
  never["expires_ms"] = json::parse("9223372036854775807");
  EXPECT_EQ(leaseFromJson(never).expires, kNever);
  // What an older pool accepted and stored (a TTL of 2^63 s, a priority past 32 bits) is clamped
  // into what the clock and an int hold, so that such a pool still starts.
  json old = lease;
  old["ttl_s"] = INT64_MAX;
  old["priority"] = 99999999999LL;
  EXPECT_EQ(leaseFromJson(old).ttl, std::chrono::seconds(int64_t{100} * 366 * 86400));
  EXPECT_EQ(leaseFromJson(old).priority, INT32_MAX);

  const std::vector<BadField> cases = {
      {"GPU index past 32 bits", [](json& d) { d["gpus"][0]["index"] = 4294967296ULL; },
       "field 'gpus[0].index': 4294967296 is out of range (0 to 66559: a GPU, or a MIG instance past the "
       "GPUs)"},
      {"GPU node with a path", [](json& d) { d["gpus"][1]["node"] = "../../etc"; },
       "field 'gpus[1].node' '../../etc'"},
      {"lease id with a path", [](json& d) { d["id"] = "../../x"; }, "field 'id' '../../x': '/' at byte 2"},
      {"time past system_clock", [](json& d) { d["expires_ms"] = INT64_MAX - 1; },
       "field 'expires_ms': 9223372036854775806 is out of range (0 to 9223372036854"},
      {"ttl not a whole number", [](json& d) { d["ttl_s"] = 1.5; },
       "field 'ttl_s': 1.5 is not a whole number"},
      {"gpus not a list",
       [](json& d) {
         d["gpus"] = {{"node", "dgx01"}};
       },
       "field 'gpus': "},
      {"owner Latin-1", [](json& d) { d["owner"] = "r\xe9mi"; },
       "field 'owner' 'r\\xe9mi': byte 1 is not UTF-8"},
  };
  for (const BadField& c : cases) {
    json doc = lease;
    c.change(doc);
    std::string msg = messageOf([&] { leaseFromJson(doc); });
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.name << ": '" << msg << "'";
  }
  EXPECT_NE(messageOf([] { fromMillis(INT64_MAX - 1); }).find("out of range"), std::string::npos);
}

TEST(InputTest, StoredRequestsOfAnOlderPoolAreReadClamped) {
  // The queue in a state file written before the ranges: read, never refused, never overflowing.
  json stored = json::parse(R"({"gpus": 4294967297, "ttl_s": 9223372036854775807, "wait_s": -5,
      "priority": 99999999999, "max_duration_s": 9223372036854775807, "job_name": "a\u0001b",
      "colour": "blue"})");
  LeaseRequest r = storedRequestFromJson(stored);
  EXPECT_EQ(r.gpus, INT32_MAX);
  EXPECT_EQ(r.ttl, std::chrono::seconds(int64_t{100} * 366 * 86400));
  EXPECT_EQ(r.wait, std::chrono::seconds(0));
  EXPECT_EQ(r.priority, INT32_MAX);
  EXPECT_EQ(r.job_name, std::string("a\x01") + "b");
  EXPECT_NE(messageOf([&] { requestFromJson(stored); }), "") << "a client sending the same is refused";
  EXPECT_NE(messageOf([&] { storedRequestFromJson(json::parse(R"({"gpus": 1.5})")); }), "");
}

TEST(InputTest, StatusNodesAndQueueRepliesAreChecked) {
  PoolStatus s;
  json status = toJson(s);
  status["gpus"]["free"] = 4294967296ULL;
  EXPECT_NE(messageOf([&] { statusFromJson(status); }).find("field 'gpus.free': 4294967296 is out of range"),
            std::string::npos);

  NodeInfo n;
  n.name = "dgx01";
  n.gpus.push_back({});
  json node = toJson(n);
  EXPECT_EQ(nodeInfoFromJson(node).gpus.size(), 1u);
  node["gpus"][0]["index"] = -1;
  EXPECT_NE(messageOf([&] {
              nodeInfoFromJson(node);
            }).find("field 'gpus[0].index': -1 is out of range (0 to 1023)"),
            std::string::npos);
  node = toJson(n);
  node["gpus"] = 3;
  EXPECT_NE(messageOf([&] { nodeInfoFromJson(node); }).find("field 'gpus': 3 is not a list"),
            std::string::npos);
  node = toJson(n);
  node["name"] = "a b";
  EXPECT_NE(messageOf([&] { nodeInfoFromJson(node); }).find("field 'name' 'a b'"), std::string::npos);

  QueueInfo q;
  q.gpus = 4;
  json entry = toJson(q);
  entry["position"] = 1.5;
  EXPECT_NE(messageOf([&] { queueInfoFromJson(entry); }).find("field 'position': 1.5 is not a whole number"),
            std::string::npos);
}

}  // namespace
}  // namespace poolrun::pool
