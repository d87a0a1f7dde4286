// What names may contain (node names, lease ids, owners, text) and the one reader of numeric
// command-line values.

#include <gtest/gtest.h>

#include <cstdint>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/options.hpp"
#include "poolrun/topo/cluster.hpp"
#include "support/blocking.hpp"
#include "support/fixtures.hpp"

namespace poolrun::topo {
namespace {

std::string messageOf(const std::function<void()>& fn) {
  return test::badInputMessage(fn);
}

struct NameCase {
  std::string value;
  bool valid;
  std::string problem;  // a part of the problem where invalid
};

TEST(NamesTest, NodeNames) {
  const std::vector<NameCase> cases = {
      {"dgx01", true, ""},
      {"n1-ib", true, ""},
      {"jwc09n003.juwels", true, ""},
      {"gpu_07", true, ""},
      {"7node", true, ""},
      {std::string(253, 'a'), true, ""},
      {"", false, "empty"},
      {std::string(254, 'a'), false, "254 bytes long"},
      {"-n1", false, "'-' at byte 0"},
      {".n1", false, "'.' at byte 0"},
      {"a b", false, "'\\x20' at byte 1"},
      {"a/b", false, "'/' at byte 1"},
      {"a\"b", false, "'\"' at byte 1"},
      {"a\nb", false, "'\\x0a' at byte 1"},
      {"a\r\nHost: x", false, "'\\x0d' at byte 1"},
      {"n[1-2]", false, "'[' at byte 1"},
      {"n1,n2", false, "',' at byte 2"},
      {"a:b", false, "':' at byte 1"},
      {"caf\xc3\xa9", false, "'\\xc3' at byte 3"},
      {std::string("a\0b", 3), false, "'\\x00' at byte 1"},
  };
  for (const NameCase& c : cases) {
    std::string problem = common::nodeNameProblem(c.value);
    EXPECT_EQ(problem.empty(), c.valid) << common::printable(c.value) << ": " << problem;
    if (!c.valid) {
      EXPECT_NE(problem.find(c.problem), std::string::npos) << common::printable(c.value) << ": " << problem;
      std::string msg = messageOf([&] { common::checkNodeName(c.value); });
      EXPECT_EQ(msg.rfind("node name '" + common::printable(c.value) + "': ", 0), 0u) << msg;
      EXPECT_NE(msg.find("letters, digits, '-', '_' and '.'"), std::string::npos) << msg;
    }
  }
}

TEST(NamesTest, LeaseIdsAndOwners) {
  for (const char* id : {"L0123456789abcdef", "slurm-4242-1777-1", "123_4", "123+0"})
    EXPECT_EQ(common::leaseIdProblem(id), "") << id;
  for (const char* id : {"", "L1\r\nX-Injected: 1", "../../etc", "L 1", "L%2F"})
    EXPECT_NE(common::leaseIdProblem(id), "") << id;
  EXPECT_NE(common::leaseIdProblem(std::string(129, 'a')), "");

  for (const char* owner : {"alice", "bob.smith", "svc_ci-2", "alice@EXAMPLE.ORG", "uid1000"})
    EXPECT_EQ(common::ownerProblem(owner), "") << owner;
  for (const char* owner : {"", "-alice", "al ice", "alice\n", "r\xe9mi", "a/b", "a:b"})
    EXPECT_NE(common::ownerProblem(owner), "") << common::printable(owner);
  EXPECT_NE(common::ownerProblem(std::string(65, 'a')), "");
  EXPECT_EQ(messageOf([] { common::checkOwner("-x", "--owner"); }).rfind("--owner '-x': starts with '-'", 0),
            0u);
}

// The UTF-8 form of a code point below U+10000.
std::string utf8Of(uint32_t cp) {
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp < 0x800) return {static_cast<char>(0xc0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3f))};
  return {static_cast<char>(0xe0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3f)),
          static_cast<char>(0x80 | (cp & 0x3f))};
}

TEST(NamesTest, TextIsUtf8WithoutControlCharacters) {
  EXPECT_EQ(common::textProblem("train résumé 日本 🚀", 256), "");
  EXPECT_EQ(common::textProblem("", 256), "");
  EXPECT_NE(common::textProblem("a\nb", 256).find("control character \\x0a at byte 1"), std::string::npos);
  EXPECT_NE(common::textProblem("a\x7f", 256).find("control character \\x7f"), std::string::npos);
  EXPECT_NE(common::textProblem("abc", 2).find("3 bytes long (at most 2)"), std::string::npos);
  // C1 controls and bidirectional embeddings, overrides and isolates: valid UTF-8 that a terminal or a
  // page shows as something else. Their neighbours stay allowed.
  for (uint32_t cp : {0x80u, 0x85u, 0x9bu, 0x9fu, 0x202au, 0x202eu, 0x2066u, 0x2069u}) {
    std::string bad = "a" + utf8Of(cp) + "b";
    EXPECT_NE(common::textProblem(bad, 256).find(" at byte 1 (not allowed: C1 controls and bidirectional"),
              std::string::npos)
        << cp;
    EXPECT_EQ(common::printable(bad).find(utf8Of(cp)), std::string::npos) << cp;  // escaped where shown
  }
  for (uint32_t cp : {0xa0u, 0xe9u, 0x2029u, 0x202fu, 0x2065u, 0x206au})
    EXPECT_EQ(common::textProblem("a" + utf8Of(cp) + "b", 256), "") << cp;
  EXPECT_EQ(common::textProblem("x\u202E", 256),
            "bidirectional control U+202E at byte 1 (not allowed: C1 controls and bidirectional overrides "
            "change how a terminal or page shows the text around them)");
  EXPECT_EQ(common::printable("x\u202Ey"), "x\\xe2\\x80\\xaey");
  // Latin-1, a lone continuation byte, overlong forms, a surrogate, past U+10FFFF, truncated.
  for (const char* bad :
       {"caf\xe9", "\x80", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe6\x97"}) {
    EXPECT_NE(common::textProblem(bad, 256).find("is not UTF-8"), std::string::npos)
        << common::printable(bad);
    EXPECT_LT(common::utf8ErrorOffset(bad), std::string_view(bad).size()) << common::printable(bad);
  }
  EXPECT_EQ(common::utf8ErrorOffset("caf\xc3\xa9"), 5u);
  EXPECT_EQ(common::utf8ErrorOffset("ab\xff"), 2u);
  std::string msg = messageOf([] { common::checkText("a\xffz", 256, "field 'job_name'"); });
  EXPECT_EQ(msg, "field 'job_name' 'a\\xffz': byte \\xff at byte 1 is not UTF-8") << msg;
}

TEST(NamesTest, PrintableEscapesWhatATerminalWouldInterpret) {
  EXPECT_EQ(common::printable("dgx01"), "dgx01");
  EXPECT_EQ(common::printable("日本"), "日本");
  EXPECT_EQ(common::printable("a\r\nb\x1b[2J'\\"), "a\\x0d\\x0ab\\x1b[2J\\x27\\x5c");
  EXPECT_EQ(common::printable("\xe9t\xe9"), "\\xe9t\\xe9");
  EXPECT_EQ(common::printable(std::string(100, 'x')), std::string(80, 'x') + "...");
}

TEST(NamesTest, ClusterFilesRefuseBadNodeNames) {
  std::string topology = (test::sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
  for (const char* nodes : {"a b", "n/1", "n\\\"1", "-n1"}) {
    std::string toml = std::string("[[group]]\nnodes = \"") + nodes + "\"\ntopology = \"" + topology + "\"\n";
    std::string msg = messageOf([&] { readClusterString(toml, "c.toml"); });
    EXPECT_NE(msg.find("c.toml: group 1: node name '"), std::string::npos) << nodes << ": " << msg;
  }
}

struct OptionCase {
  std::string text;
  int64_t min, max;
  std::string expected;  // the value, or the message
};

TEST(OptionsTest, SignedValues) {
  const std::vector<OptionCase> cases = {
      {"0", -5, 5, "0"},
      {"-5", -5, 5, "-5"},
      {"5", -5, 5, "5"},
      {"1000000", -1000000, 1000000, "1000000"},
      {"2147483648", -1000000, 1000000, "--opt 2147483648: out of range (-1000000 to 1000000)"},
      {"-1000001", -1000000, 1000000, "--opt -1000001: out of range (-1000000 to 1000000)"},
      {"99999999999999999999", -5, 5, "--opt 99999999999999999999: out of range (-5 to 5)"},
      {"-99999999999999999999", -5, 5, "--opt -99999999999999999999: out of range (-5 to 5)"},
      {"", -5, 5, "--opt '': not a whole number (-5 to 5)"},
      {"abc", -5, 5, "--opt abc: not a whole number (-5 to 5)"},
      {"3x", -5, 5, "--opt 3x: not a whole number (-5 to 5)"},
      {"1.5", -5, 5, "--opt 1.5: not a whole number (-5 to 5)"},
      {"+3", -5, 5, "--opt +3: not a whole number (-5 to 5)"},
      {" 3", -5, 5, "--opt ' 3': not a whole number (-5 to 5)"},
      {"3 ", -5, 5, "--opt '3 ': not a whole number (-5 to 5)"},
      {"0x10", -5, 5, "--opt 0x10: not a whole number (-5 to 5)"},
      {"1e3", -5, 5, "--opt 1e3: not a whole number (-5 to 5)"},
      {"-", -5, 5, "--opt -: not a whole number (-5 to 5)"},
      {"--", -5, 5, "--opt --: not a whole number (-5 to 5)"},
      {"4\n", -5, 5, "--opt '4\\x0a': not a whole number (-5 to 5)"},
  };
  for (const OptionCase& c : cases) {
    std::string got;
    try {
      got = std::to_string(
          common::parseOption<int>("--opt", c.text, static_cast<int>(c.min), static_cast<int>(c.max)));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      got = e.what();
    }
    EXPECT_EQ(got, c.expected) << "'" << c.text << "'";
  }
}

TEST(OptionsTest, UnsignedAndWideValues) {
  EXPECT_EQ(common::parseOption<uint64_t>("--max-body", "18446744073709551615", 0, UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(
      messageOf([] { common::parseOption<uint64_t>("--max-body", "18446744073709551616", 0, UINT64_MAX); }),
      "--max-body 18446744073709551616: out of range (0 to 18446744073709551615)");
  EXPECT_EQ(messageOf([] { common::parseOption<size_t>("--max-body", "-1", 1024, 1 << 30); }),
            "--max-body -1: out of range (1024 to 1073741824)");
  EXPECT_EQ(messageOf([] { common::parseOption<size_t>("--max-body", "abc", 1024, 1 << 30); }),
            "--max-body abc: not a whole number (1024 to 1073741824)");
  EXPECT_EQ(common::parseOption<int64_t>("--x", "-9223372036854775808", INT64_MIN, INT64_MAX), INT64_MIN);
  EXPECT_EQ(common::parseOption<int64_t>("--x", "9223372036854775807", INT64_MIN, INT64_MAX), INT64_MAX);
  EXPECT_EQ(messageOf([] { common::parseOption<int64_t>("--x", "9223372036854775808", 0, INT64_MAX); }),
            "--x 9223372036854775808: out of range (0 to 9223372036854775807)");
  EXPECT_EQ(messageOf([] { common::parseOption<int>("--threads", "-4", 1, 1024); }),
            "--threads -4: out of range (1 to 1024)");
  EXPECT_EQ(common::parseOption<unsigned>("--port", "0", 0u, 65535u), 0u);
}

}  // namespace
}  // namespace poolrun::topo
