// `poolrun doctor` as a user runs it: on this machine (no GPU, no RDMA device in CI), on fake
// trees, and with bad options.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fake_node.hpp"
#include "support/process.hpp"

namespace poolrun::doctor {
namespace {

using poolrun::test::runShell;
using ::testing::HasSubstr;

std::string doctor(const std::string& args) {
  return std::string(POOLRUN_BINARY) + " doctor " + args;
}

std::string rootsOf(const test::FakeNode& node) {
  Roots r = node.roots();
  return "--sysfs-root " + r.sys.string() + " --proc-root " + r.proc.string() + " --dev-root " +
         r.dev.string();
}

TEST(DoctorCliTest, ThisMachineRunsAndSaysWhatItCouldCheck) {
  auto r = runShell(doctor(""));
  ASSERT_TRUE(r.status == 0 || r.status == 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("STATUS"));
  EXPECT_THAT(r.out, HasSubstr("host.hwloc"));
  EXPECT_THAT(r.out, ::testing::MatchesRegex("(.|\n)*[0-9]+ pass, [0-9]+ warn, [0-9]+ fail, [0-9]+ skip\n"));
  // Where this machine has no RDMA device (CI), it says so plainly and still exits 0.
  if (r.out.find("no RDMA device under /sys/class/infiniband") != std::string::npos) {
    EXPECT_THAT(r.out, HasSubstr("Nothing to check for RDMA"));
    EXPECT_EQ(r.out.find("FAIL  rdma"), std::string::npos) << r.out;
  }
  EXPECT_EQ(r.status, r.out.find("\nFAIL ") == std::string::npos ? 0 : 1) << r.out;
}

TEST(DoctorCliTest, JsonOnThisMachine) {
  auto r = runShell(doctor("--json"));
  ASSERT_TRUE(r.status == 0 || r.status == 1) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["schema"], "poolrun.doctor/1");
  ASSERT_FALSE(doc["checks"].empty());
  for (const auto& c : doc["checks"]) {
    EXPECT_THAT(std::vector<std::string>({"PASS", "WARN", "FAIL", "SKIP"}),
                ::testing::Contains(c["status"].get<std::string>()));
  }
}

TEST(DoctorCliTest, FakeTreesDecideTheExitStatus) {
  test::FakeNode healthy(test::FakeNode::Fabric::kRoce);
  auto ok = runShell(doctor(rootsOf(healthy)));
  EXPECT_EQ(ok.status, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("PASS   roce.gid"));
  EXPECT_EQ(ok.out.find("host.openmpi"), std::string::npos) << "tools of this machine judged for another";

  test::FakeNode broken(test::FakeNode::Fabric::kIb);
  broken.setPort("mlx5_1", {.state = "1: DOWN", .phys_state = "2: Polling"});
  auto bad = runShell(doctor(rootsOf(broken)));
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("FAIL   rdma.port"));
  EXPECT_THAT(bad.out, HasSubstr("fix: no link: check the cable"));

  // --nic limits the check to the healthy port.
  auto limited = runShell(doctor(rootsOf(broken) + " --nic mlx5_0:1"));
  EXPECT_EQ(limited.status, 0) << limited.out;
  EXPECT_EQ(limited.out.find("mlx5_1/1"), std::string::npos) << limited.out;
}

TEST(DoctorCliTest, BadOptionsSayWhatIsWrong) {
  struct Case {
    std::string args, message;
  };
  for (const Case& c :
       {Case{"--sysfs-root /nonexistent/sys", "--sysfs-root /nonexistent/sys: not a directory"},
        Case{"--nic mlx5_0:x", "--nic 'mlx5_0:x': expected NIC or NIC:PORT"},
        Case{"--nic ,", "--nic ',': name at least one NIC"},
        Case{"--mtu 12", "--mtu 12: expected 576 to 65535"},
        Case{"--frobnicate", "unrecognised option '--frobnicate'"}}) {
    auto r = runShell(doctor(c.args));
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args;
  }
}

}  // namespace
}  // namespace poolrun::doctor
