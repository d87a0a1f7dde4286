#include "poolrun/topo/cpuset.hpp"

#include <gtest/gtest.h>

#include "poolrun/common/error.hpp"

namespace poolrun::topo {
namespace {

TEST(CpuSetTest, ParsesAndPrintsCpuLists) {
  struct Case {
    const char* in;
    const char* out;
    size_t size;
  };
  for (const Case& c : {Case{"", "", 0}, Case{"0", "0", 1}, Case{"0-11,96-107", "0-11,96-107", 24},
                        Case{"3,1,2", "1-3", 3}, Case{" 0-1 , 4 \n", "0-1,4", 3}, Case{"5-5", "5", 1}}) {
    CpuSet s = CpuSet::parseList(c.in);
    EXPECT_EQ(s.toList(), c.out) << c.in;
    EXPECT_EQ(s.size(), c.size) << c.in;
  }
}

TEST(CpuSetTest, RejectsMalformedListsNamingTheItem) {
  for (const char* bad : {"a", "1-", "-3", "3-1", "1,,2", "99999999"}) {
    try {
      CpuSet::parseList(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find("bad CPU list item"), std::string::npos) << e.what();
    }
  }
}

TEST(CpuSetTest, ParsesMasksMostSignificantWordFirst) {
  EXPECT_EQ(CpuSet::parseMask("00000000,00ffffff").toList(), "0-23");
  EXPECT_EQ(CpuSet::parseMask("ffffff00,00000000,00000000").toList(), "72-95");
  EXPECT_EQ(CpuSet::parseMask("0x0000000f").toList(), "0-3");
  EXPECT_THROW(CpuSet::parseMask("xyz"), Error);
  EXPECT_THROW(CpuSet::parseMask("123456789"), Error);
}

TEST(CpuSetTest, MaskRoundTrip) {
  CpuSet s = CpuSet::parseList("0-3,40-43,95");
  EXPECT_EQ(s.toMask(), "80000000,00000f00,0000000f");
  EXPECT_EQ(CpuSet::parseMask(s.toMask()), s);
  EXPECT_EQ(CpuSet().toMask(2), "00000000,00000000");
}

TEST(CpuSetTest, SetOperations) {
  CpuSet a = CpuSet::parseList("0-7"), b = CpuSet::parseList("4-11");
  EXPECT_EQ((a & b).toList(), "4-7");
  EXPECT_EQ((a | b).toList(), "0-11");
  EXPECT_TRUE(a.intersects(b));
  EXPECT_FALSE(a.intersects(CpuSet::parseList("8-9")));
  EXPECT_TRUE(a.contains(7));
  EXPECT_FALSE(a.contains(8));
}

}  // namespace
}  // namespace poolrun::topo
