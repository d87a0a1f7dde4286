// findAcs() on configuration spaces built byte by byte: found, absent, unreadable, and lists that
// loop or point outside the space.

#include "poolrun/doctor/pci_config.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "fake_node.hpp"

namespace poolrun::doctor {
namespace {

void put32(std::vector<uint8_t>& c, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) c[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

TEST(PciConfigTest, FindsAcsBehindAnotherCapability) {
  std::vector<uint8_t> config = test::FakeNode::configWithAcs(0x001d);
  AcsResult r = findAcs(config);
  ASSERT_EQ(r.lookup, AcsLookup::kFound);
  EXPECT_EQ(r.acs.offset, 0x148u);
  EXPECT_EQ(r.acs.capability, 0x005f);
  EXPECT_EQ(r.acs.control, 0x001d);
  EXPECT_TRUE(r.acs.redirectsPeerToPeer());
  EXPECT_EQ(r.acs.describeControl(),
            "source validation, P2P request redirect, P2P completion redirect, upstream forwarding");
}

TEST(PciConfigTest, SourceValidationAloneDoesNotRedirect) {
  AcsResult r = findAcs(test::FakeNode::configWithAcs(0x0011));
  ASSERT_EQ(r.lookup, AcsLookup::kFound);
  EXPECT_FALSE(r.acs.redirectsPeerToPeer());
  EXPECT_EQ(findAcs(test::FakeNode::configWithAcs(0)).acs.describeControl(), "off");
  EXPECT_TRUE(findAcs(test::FakeNode::configWithAcs(0x0020)).acs.redirectsPeerToPeer());  // egress control
}

TEST(PciConfigTest, NoExtendedCapabilitiesMeansAbsent) {
  std::vector<uint8_t> config(4096, 0);
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kAbsent);
  std::fill(config.begin() + 0x100, config.end(), 0xff);  // a device that went away reads all ones
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kAbsent);
}

TEST(PciConfigTest, ShortFileIsUnreadable) {
  std::vector<uint8_t> config = test::FakeNode::configWithAcs(0x1d);
  config.resize(64);  // what a non-root read of /sys/bus/pci/devices/*/config returns
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kUnreadable);
  config.resize(256);
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kUnreadable);
  EXPECT_EQ(findAcs({}).lookup, AcsLookup::kUnreadable);
}

TEST(PciConfigTest, LoopsAndWildPointersEndAsAbsent) {
  std::vector<uint8_t> config(4096, 0);
  put32(config, 0x100, 0x0001u | (0x100u << 20));  // points at itself
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kAbsent);
  put32(config, 0x100, 0x0001u | (0x40u << 20));  // into the legacy space
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kAbsent);
  put32(config, 0x100, 0x0001u | (0xffcu << 20));  // the last dword: no room for the registers
  put32(config, 0xffc, 0x000Du);
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kAbsent);
  put32(config, 0x100, 0x0001u | (0x102u << 20));  // misaligned
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kAbsent);
  config.resize(0x150);  // the list runs past the end of what could be read
  put32(config, 0x100, 0x0001u | (0x148u << 20));
  put32(config, 0x148, 0x000Du);
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kFound);
  config.resize(0x14c);
  EXPECT_EQ(findAcs(config).lookup, AcsLookup::kAbsent);
}

// Whatever the bytes, the walk ends inside them (AddressSanitizer checks the "inside").
TEST(PciConfigTest, RandomSpacesNeverReadOutside) {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::vector<uint8_t> config(static_cast<size_t>(rng() % 4097));
    for (uint8_t& b : config) b = static_cast<uint8_t>(rng());
    AcsResult r = findAcs(config);
    if (r.lookup == AcsLookup::kFound) {
      EXPECT_LE(r.acs.offset + 8, config.size());
    }
  }
}

}  // namespace
}  // namespace poolrun::doctor
