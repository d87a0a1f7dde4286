// poolrun and `poolrun plan` refuse bad option values the same way: the option, the value and the
// range, exit status 2, before a lease is taken or a job directory written. Every run is a
// --dry-run on a simulated cluster under timeout(1), so that a value accepted by mistake ends.

#include <gtest/gtest.h>

#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

struct Case {
  std::string args;
  std::string expected;  // the first line of standard error
};

std::string firstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

TEST(OptionsTest, RunRefusesBadValuesBeforeLeasing) {
  poolrun::test::TempDir tmp;
  const std::string cluster = (poolrun::test::sourceDir() / "clusters" / "sim-ib.toml").string();
  const std::string job = (tmp.path() / "job").string();
  const std::vector<Case> cases = {
      {"-n 2 --priority 2147483648",
       "poolrun: error: --priority 2147483648: out of range (-1000000 to 1000000)"},
      {"-n 2 --priority -2147483649",
       "poolrun: error: --priority -2147483649: out of range (-1000000 to 1000000)"},
      {"-n 2 --wait -1", "poolrun: error: --wait -1: out of range (0 to 31536000)"},
      {"-n 2 --wait 1e3", "poolrun: error: --wait 1e3: not a whole number (0 to 31536000)"},
      {"-n 2 --timeout -5", "poolrun: error: --timeout -5: out of range (0 to 31536000)"},
      {"-n 2 --timeout inf", "poolrun: error: --timeout inf: not a whole number (0 to 31536000)"},
      {"-n 2 --lease-ttl 2", "poolrun: error: --lease-ttl 2: out of range (3 to 86400)"},
      {"-n 2 --lease-ttl nan", "poolrun: error: --lease-ttl nan: not a whole number (3 to 86400)"},
      {"-n 2 --roce-tc 999", "poolrun: error: --roce-tc 999: out of range (0 to 255)"},
      {"-n 2 --roce-tc -1", "poolrun: error: --roce-tc -1: out of range (0 to 255)"},
      {"-n 0", "poolrun: error: -n 0: out of range (1 to 1000000)"},
      {"-n 4294967298", "poolrun: error: -n 4294967298: out of range (1 to 1000000)"},
      {"-n 2 --gpus-per-node -1", "poolrun: error: --gpus-per-node -1: out of range (0 to 1024)"},
      {"-n 2 -x --", "poolrun: error: -x needs a value VAR[=VALUE]"},
      {"-n 2 --tuner maybe", "poolrun: error: --tuner 'maybe': use on or off"},
      {"-n 2 --fabric myrinet", "poolrun: error: unknown fabric 'myrinet'"},
      {"-n 2 --name \"$(printf 'a\\nb')\"",
       "poolrun: error: --name 'a\\x0ab': control character \\x0a at byte 1 (not allowed)"},
  };
  for (const Case& c : cases) {
    poolrun::test::ProcessResult r =
        poolrun::test::runShell("POOLRUN_STATE_DIR=" + (tmp.path() / "state").string() + " timeout 60 " +
                                std::string(POOLRUN_BINARY) + " --pool sim:" + cluster +
                                " --dry-run --job-dir " + job + " " + c.args + " /bin/true");
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(firstLine(r.err).substr(0, c.expected.size()), c.expected) << c.args << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(job + "/plan.json")) << c.args << ": a plan was written";
    std::filesystem::remove_all(job);
  }
}

TEST(OptionsTest, PlanRefusesWhatARunRefuses) {
  const std::string from = (poolrun::test::sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
  const std::vector<Case> cases = {
      {"-n 2 --roce-tc 999", "poolrun: error: --roce-tc 999: out of range (0 to 255)"},
      {"-n 2 --gpus-per-node -1", "poolrun: error: --gpus-per-node -1: out of range (0 to 1024)"},
      {"-n 99999999999", "poolrun: error: -n 99999999999: out of range (1 to 1000000)"},
      {"-n two", "poolrun: error: -n two: not a whole number (1 to 1000000)"},
      {"-n 2 -x --", "poolrun: error: -x needs a value VAR[=VALUE]"},
      {"-n 2 -x", "poolrun: error: -x needs a value VAR[=VALUE]"},
  };
  for (const Case& c : cases) {
    poolrun::test::ProcessResult r = poolrun::test::runShell("timeout 60 " + std::string(POOLRUN_BINARY) +
                                                             " plan --from " + from + " " + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(firstLine(r.err), c.expected) << c.args;
  }
}

}  // namespace
