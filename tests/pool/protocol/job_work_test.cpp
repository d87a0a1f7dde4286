// The work poold gives an agent for its detached jobs (GET /v1/nodes/NAME/jobs): written and read
// back whole, and a document an agent must not act on (a bad id, an empty command, a unit list
// that is not one) refused, naming the field.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "poolrun/common/error.hpp"
#include "poolrun/pool/job_json.hpp"

namespace poolrun::test {
namespace {

using nlohmann::json;

pool::NodeJobWork sample() {
  pool::JobLaunch l;
  l.id = "J12_3";
  l.lease = "L0123456789abcdef";
  l.owner = "alice";
  l.task = 3;
  l.uid = 1000;
  l.gid = 1000;
  l.command = {"-n", "2", "--", "/bin/true"};
  l.env = {"A=1"};
  l.cwd = "/home/alice";
  l.output = l.error = "/home/alice/poolrun-J12_3.out";
  l.credential = "pj-secret";
  l.gpus = {0, 5, 9};
  l.memory_bytes = uint64_t{3} << 30;
  return {{l}, {{"J11", 15}}};
}

TEST(JobWork, RoundTripsWithTheLeasesUnits) {
  const pool::NodeJobWork work = sample();
  EXPECT_EQ(pool::nodeJobWorkFromJson(pool::toJson(work)), work);
  json doc = pool::toJson(work);
  doc["start"][0].erase("gpus");  // from a poold before units were sent: none
  EXPECT_TRUE(pool::nodeJobWorkFromJson(doc).start.at(0).gpus.empty());
}

TEST(JobWork, RefusesAMemoryLimitOutOfRange) {
  for (const json& bad : {json(-1), json("1G"), json(1.5), json(uint64_t{1} << 63)}) {
    json doc = pool::toJson(sample());
    doc["start"][0]["memory_bytes"] = bad;
    EXPECT_THROW(pool::nodeJobWorkFromJson(doc), Error) << bad.dump();
  }
}

TEST(JobWork, RefusesUnitsThatAreNotAList) {
  for (const json& bad : {json("0,1"), json::array({-1}), json::array({1.5}), json::array({"0"}),
                          json::array({4096}), json(std::vector<int>(5000, 0))}) {
    json doc = pool::toJson(sample());
    doc["start"][0]["gpus"] = bad;
    try {
      pool::nodeJobWorkFromJson(doc);
      ADD_FAILURE() << bad.dump().substr(0, 60) << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gpus"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace poolrun::test
