// poolctl and poold refuse bad option values and names the same way: the option, the value and
// what is allowed, exit status 2, before they connect or start anything. Each run is bounded by
// timeout(1), so that a value accepted by mistake (a poold that starts) cannot hang the test.

#include <gtest/gtest.h>

#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

struct CliCase {
  std::string args;      // shell words after the binary
  std::string expected;  // the first line of standard error
};

// Port 1 on loopback: nothing listens there, so a command that got past its checks fails fast.
const std::string kPoolctl = std::string("timeout 20 ") + POOLCTL_BINARY + " --pool http://127.0.0.1:1 ";

std::string firstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

TEST(CliInputTest, PoolctlOptionValues) {
  const std::vector<CliCase> cases = {
      {"acquire -n 4 --priority 2147483648",
       "poolctl: error: --priority 2147483648: out of range (-1000000 to 1000000)"},
      {"acquire -n 4 --priority abc",
       "poolctl: error: --priority abc: not a whole number (-1000000 to 1000000)"},
      {"acquire -n 4294967297", "poolctl: error: -n 4294967297: out of range (1 to 1000000)"},
      {"acquire -n 4 --gpus-per-node -1", "poolctl: error: --gpus-per-node -1: out of range (0 to 1024)"},
      {"acquire -n 4 --ttl 9223372036854775807",
       "poolctl: error: --ttl 9223372036854775807: out of range (1 to 86400)"},
      {"acquire -n 4 --ttl 0", "poolctl: error: --ttl 0: out of range (1 to 86400)"},
      {"acquire -n 4 --wait -1", "poolctl: error: --wait -1: out of range (0 to 31536000)"},
      {"acquire -n 4 --wait 1.5", "poolctl: error: --wait 1.5: not a whole number (0 to 31536000)"},
      {"acquire -n 4 --max-duration 99999999999",
       "poolctl: error: --max-duration 99999999999: out of range (1 to 31622400)"},
      {"acquire -n 4 --min-memory-gib 17179869184",
       "poolctl: error: --min-memory-gib 17179869184: out of range (0 to 1048576)"},
      {"acquire -n 4 --job \"$(printf 'a\\033[2Jb')\"",
       "poolctl: error: --job 'a\\x1b[2Jb': control character \\x1b at byte 1 (not allowed)"},
      {"acquire -n 4 --ttl", "poolctl: error: --ttl needs a value"},
      {"acquire -n 4 --placement tight",
       "poolctl: error: --placement 'tight': give strict (wait rather than cross a level an empty pool would "
       "not) or best-effort"},
      {"acquire -n 4 --placement ''",
       "poolctl: error: --placement '': give strict (wait rather than cross a level an empty pool would not) "
       "or "
       "best-effort"},
      {"acquire -n 8:4", "poolctl: error: -n '8:4': MIN:MAX with MAX at least MIN"},
      {"acquire -n 4:", "poolctl: error: -n '4:': MIN:MAX needs both numbers (4:16, say)"},
      {"acquire -n :8", "poolctl: error: -n ':8': MIN:MAX needs both numbers (4:16, say)"},
      {"acquire -n 4:x", "poolctl: error: -n x: not a whole number (1 to 1000000)"},
      {"acquire -n 4:1000001", "poolctl: error: -n 1000001: out of range (1 to 1000000)"},
      {"acquire -n 2:4 --resize-interval -1",
       "poolctl: error: --resize-interval -1: out of range (0 to 2592000)"},
      {"fail hgx01:4294967296", "poolctl: error: fail GPU index 4294967296: out of range (0 to 1023)"},
      {"fail hgx01:-1", "poolctl: error: fail GPU index -1: out of range (0 to 1023)"},
      {"--owner -alice status",
       "poolctl: error: --owner '-alice': starts with '-' (an owner is 1 to 64 letters, digits, '-', '_', "
       "'.' "
       "and '@', not starting with '-')"},
      {"--role root status", "poolctl: error: --role 'root': use user or admin"},
      {"node-token create --expires 0", "poolctl: error: --expires 0: a join token lives 1s to 30d"},
      {"node-token create --expires 31d", "poolctl: error: --expires 31d: a join token lives 1s to 30d"},
      {"node-token create --expires -1h",
       "poolctl: error: --expires '-1h': expected a duration such as 90s, 30m, 1h or 7d"},
      {"node-token create --expires 1y",
       "poolctl: error: --expires '1y': expected a duration such as 90s, 30m, 1h or 7d"},
      {"node-token create --expires 9999999999999d",
       "poolctl: error: --expires '9999999999999d': expected a duration such as 90s, 30m, 1h or 7d"},
      {"node-token create --ttl 1h",
       "poolctl: error: node-token create: unexpected '--ttl' (it takes [--expires DURATION])"},
      {"usage --by week", "poolctl: error: usage: --by 'week': give owner, account, job, node or gpu-model"},
      {"usage --by", "poolctl: error: --by needs a value"},
      {"usage --format xml", "poolctl: error: usage: --format 'xml': give table, csv or json"},
      {"--json usage --format csv", "poolctl: error: usage: give --json or --format csv, not both"},
      {"usage --since yesterday",
       "poolctl: error: --since 'yesterday': give a time (2026-12-01T08:00:00Z), a day (2026-12-01) or how "
       "long ago (12h, 7d)"},
      {"usage --since 2026-12-02 --until 2026-12-01",
       "poolctl: error: usage: --until 2026-12-01 is not after --since 2026-12-02"},
      {"usage --until 1970-01-01",
       "poolctl: error: usage: --until 1970-01-01 is not after the ledger's start (1970)"},
      {"usage extra",
       "poolctl: error: usage takes --by B, --since T, --until T and --format F (got 'extra')"},
  };
  for (const CliCase& c : cases) {
    test::ProcessResult r = test::runShell(kPoolctl + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(firstLine(r.err), c.expected) << c.args;
  }
}

TEST(CliInputTest, PoolctlNamesNeverReachAUrl) {
  const std::vector<CliCase> cases = {
      {"release \"$(printf 'L1\\r\\nX-Injected: 1')\"",
       "poolctl: error: lease id 'L1\\x0d\\x0aX-Injected: 1': '\\x0d' at byte 2 is not allowed (a lease id "
       "is 1 "
       "to 128 letters, digits, '-', '_', '.' and '+')"},
      {"renew ../../v1/nodes", "poolctl: error: lease id '../../v1/nodes': '/' at byte 2 is not allowed"},
      {"drain 'hgx01/gpus/0/fail'",
       "poolctl: error: node name 'hgx01/gpus/0/fail': '/' at byte 5 is not allowed"},
      {"resume 'a b'", "poolctl: error: node name 'a b': '\\x20' at byte 1 is not allowed"},
      {"fail '\"x\":0'", "poolctl: error: node name '\"x\"': '\"' at byte 0 is not allowed"},
  };
  for (const CliCase& c : cases) {
    test::ProcessResult r = test::runShell(kPoolctl + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(firstLine(r.err).substr(0, c.expected.size()), c.expected) << c.args << "\n"
                                                                         << firstLine(r.err);
  }
}

TEST(CliInputTest, PooldOptionValues) {
  test::TempDir dir;
  std::filesystem::path tokens = dir.writeSecret("tokens", "tok-root-0123456789 root admin\n");
  // Everything poold needs to start is there: only the value under test can stop it.
  const std::string poold = std::string("timeout 10 ") + POOLD_BINARY + " --listen 127.0.0.1:0 --state " +
                            (dir.path() / "state").string() + " --token-file " + tokens.string() + " ";
  const std::vector<CliCase> cases = {
      {"--max-body abc", "poold: error: --max-body abc: not a whole number (1024 to 1073741824)"},
      {"--max-body -1", "poold: error: --max-body -1: out of range (1024 to 1073741824)"},
      {"--max-body 18446744073709551616",
       "poold: error: --max-body 18446744073709551616: out of range (1024 to 1073741824)"},
      {"--threads -4", "poold: error: --threads -4: out of range (1 to 1024)"},
      {"--threads 8x", "poold: error: --threads 8x: not a whole number (1 to 1024)"},
      {"--max-connections 0", "poold: error: --max-connections 0: out of range (1 to 1000000)"},
      {"--max-connections-per-peer -1",
       "poold: error: --max-connections-per-peer -1: out of range (1 to 1000000)"},
      {"--header-timeout 0", "poold: error: --header-timeout 0: out of range (1 to 3600)"},
      {"--body-timeout 1.5", "poold: error: --body-timeout 1.5: not a whole number (1 to 3600)"},
      {"--idle-timeout 99999999999", "poold: error: --idle-timeout 99999999999: out of range (1 to 86400)"},
      {"--max-ttl 9223372036854775807",
       "poold: error: --max-ttl 9223372036854775807: out of range (1 to 86400)"},
      {"--max-user-priority 2147483648",
       "poold: error: --max-user-priority 2147483648: out of range (-1000000 to 1000000)"},
      {"--listen 127.0.0.1:65536",
       "poold: error: --listen 127.0.0.1:65536: port 65536: out of range (0 to 65535)"},
      {"--threads", "poold: error: --threads needs a value"},
  };
  for (const CliCase& c : cases) {
    test::ProcessResult r = test::runShell(poold + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(firstLine(r.err), c.expected) << c.args;
  }
}

TEST(CliInputTest, PooldHelpShowsTheDefaults) {
  test::ProcessResult r = test::runShell(std::string(POOLD_BINARY) + " --help");
  EXPECT_EQ(r.status, 0);
  for (const char* line :
       {"--max-connections N           open connections in total (default 4096)",
        "--max-connections-per-peer N  open connections from one IP address (default 1024)",
        "--header-timeout SECONDS      from a request's first byte to its last header (default 10)",
        "--body-timeout SECONDS        for a request's whole body (default 30)", "(default 60)",
        "--max-ttl SECONDS", "(default 3600, at most 86400)", "--max-user-priority P", "(default 100)",
        "--threads N         workers that run requests; a queued client's long poll holds one (default 64"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

}  // namespace
}  // namespace poolrun::pool
