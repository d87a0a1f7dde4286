// The shared text helpers: white space, case, first lines, hexadecimal numbers, cursors.

#include "poolrun/common/text.hpp"

#include <gtest/gtest.h>

#include <climits>

namespace poolrun::common {
namespace {

TEST(TextTest, TrimTakesEveryAsciiSpaceFromBothEnds) {
  EXPECT_EQ(trim(" \t\r\n\f\v 4: ACTIVE \n"), "4: ACTIVE");
  EXPECT_EQ(trim("a b"), "a b");
  EXPECT_EQ(trim(" \n "), "");
  EXPECT_EQ(trim(""), "");
  // Not a space: NUL and the bytes of UTF-8 characters stay.
  EXPECT_EQ(trim(std::string_view("\0x", 2)), std::string_view("\0x", 2));
  EXPECT_EQ(trim("\xc2\xa0x\xc2\xa0"), "\xc2\xa0x\xc2\xa0");
}

TEST(TextTest, LowerChangesAsciiLettersOnly) {
  EXPECT_EQ(lower("Transfer-Encoding: CHUNKED"), "transfer-encoding: chunked");
  EXPECT_EQ(lower("\xc3\x89tat"), "\xc3\x89tat");  // É stays: not ASCII
  EXPECT_EQ(lower("[@Z]"), "[@z]");                // the neighbours of A-Z stay
}

TEST(TextTest, FirstLineIsTheFirstWithText) {
  EXPECT_EQ(firstLine("\n  \nsalloc: error: Invalid partition  \nsecond\n"),
            "salloc: error: Invalid partition");
  EXPECT_EQ(firstLine("one line"), "one line");
  EXPECT_EQ(firstLine("line\r\nnext"), "line");
  EXPECT_EQ(firstLine(" \n\t\n"), "");
}

TEST(TextTest, HexNumberAsNcclAndSysfsWriteIt) {
  EXPECT_EQ(hexNumber(0x15b3, 4), "0x15b3");
  EXPECT_EQ(hexNumber(0x30200, 6), "0x030200");
  EXPECT_EQ(hexNumber(0, 4), "0x0000");
  EXPECT_EQ(hexNumber(0x1234567, 4), "0x1234567");  // never cut short
  EXPECT_EQ(hexNumber(UINT64_MAX, 1), "0xffffffffffffffff");
}

TEST(TextTest, ParseHexTakesAllOfTheTextWithinTheType) {
  EXPECT_EQ(parseHex<uint16_t>("0x15b3"), 0x15b3);
  EXPECT_EQ(parseHex<uint16_t>("0X15B3"), 0x15b3);
  EXPECT_EQ(parseHex<uint16_t>("15b3"), 0x15b3);
  EXPECT_EQ(parseHex<uint32_t>("0x030200"), 0x030200u);
  EXPECT_EQ(parseHex<uint16_t>("0x115b3"), std::nullopt);  // too large for a vendor id
  EXPECT_EQ(parseHex<uint32_t>("0x100000000"), std::nullopt);
  for (const char* bad : {"", "0x", "-1", "+1", " 1", "1 ", "0x1g", "x1", "0x-1"}) {
    EXPECT_EQ(parseHex<uint32_t>(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(TextTest, CursorsTakeFromTheFrontOnlyWhatTheyRead) {
  std::string_view rest = "Exit code:  \t 12a b\xc2\xa0z\n";
  EXPECT_FALSE(takePrefix(rest, "exit"));
  EXPECT_EQ(rest, "Exit code:  \t 12a b\xc2\xa0z\n");
  EXPECT_TRUE(takePrefix(rest, "Exit code:"));
  EXPECT_EQ(takeDigits(rest), "");
  EXPECT_EQ(takeSpace(rest), "  \t ");
  EXPECT_EQ(takeSpace(rest), "");
  EXPECT_EQ(takeDigits(rest), "12");
  EXPECT_EQ(takeWord(rest), "a");
  EXPECT_EQ(takeSpace(rest), " ");
  EXPECT_EQ(takeWord(rest), "b\xc2\xa0z");  // a UTF-8 no-break space is no white space
  EXPECT_EQ(rest, "\n");
  EXPECT_EQ(takeWord(rest), "");
  EXPECT_EQ(takeSpace(rest), "\n");
  EXPECT_TRUE(rest.empty());
  EXPECT_TRUE(takePrefix(rest, ""));
  EXPECT_FALSE(takePrefix(rest, "x"));
  EXPECT_EQ(takeDigits(rest), "");
  EXPECT_EQ(takeWord(rest), "");
  std::string_view digits = "0123456789/:";  // the neighbours of 0-9 are no digits
  EXPECT_EQ(takeDigits(digits), "0123456789");
  EXPECT_EQ(digits, "/:");
  std::string_view spaces = "\f\v\r\n\t x";
  EXPECT_EQ(takeSpace(spaces), "\f\v\r\n\t ");
}

TEST(DigitsValue, ReadsDigitsAndSaturatesInsteadOfThrowing) {
  EXPECT_EQ(common::digitsValue("0"), 0);
  EXPECT_EQ(common::digitsValue("535"), 535);
  EXPECT_EQ(common::digitsValue("2147483647"), 2147483647);
  EXPECT_EQ(common::digitsValue("2147483648"), INT_MAX);
  EXPECT_EQ(common::digitsValue("99999999999999999999999"), INT_MAX);
  EXPECT_EQ(common::digitsValue(""), 0);
}
}  // namespace
}  // namespace poolrun::common
