#include "poolrun/doctor/pci_config.hpp"

#include <vector>

namespace poolrun::doctor {
namespace {

// ACS Control register bits (PCIe base specification, ACS Extended Capability).
constexpr uint16_t kSourceValidation = 1u << 0;
constexpr uint16_t kTranslationBlocking = 1u << 1;
constexpr uint16_t kP2pRequestRedirect = 1u << 2;
constexpr uint16_t kP2pCompletionRedirect = 1u << 3;
constexpr uint16_t kUpstreamForwarding = 1u << 4;
constexpr uint16_t kP2pEgressControl = 1u << 5;
constexpr uint16_t kDirectTranslatedP2p = 1u << 6;

uint32_t read32(std::span<const uint8_t> bytes, size_t at) {
  return static_cast<uint32_t>(bytes[at]) | static_cast<uint32_t>(bytes[at + 1]) << 8 |
         static_cast<uint32_t>(bytes[at + 2]) << 16 | static_cast<uint32_t>(bytes[at + 3]) << 24;
}

uint16_t read16(std::span<const uint8_t> bytes, size_t at) {
  return static_cast<uint16_t>(bytes[at] | bytes[at + 1] << 8);
}

}  // namespace

bool AcsCapability::redirectsPeerToPeer() const {
  return (control & (kP2pRequestRedirect | kP2pCompletionRedirect | kP2pEgressControl)) != 0;
}

std::string AcsCapability::describeControl() const {
  static constexpr std::pair<uint16_t, const char*> kBits[] = {
      {kSourceValidation, "source validation"},        {kTranslationBlocking, "translation blocking"},
      {kP2pRequestRedirect, "P2P request redirect"},   {kP2pCompletionRedirect, "P2P completion redirect"},
      {kUpstreamForwarding, "upstream forwarding"},    {kP2pEgressControl, "P2P egress control"},
      {kDirectTranslatedP2p, "direct translated P2P"},
  };
  std::string out;
  for (auto [bit, name] : kBits) {
    if ((control & bit) == 0) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out.empty() ? "off" : out;
}

AcsResult findAcs(std::span<const uint8_t> config) {
  AcsResult result;
  if (config.size() < kExtendedConfigStart + 4) {
    result.lookup = AcsLookup::kUnreadable;
    return result;
  }
  size_t offset = kExtendedConfigStart;
  // Each capability is at least 4 bytes and aligned: no list can be longer than this.
  for (size_t hops = 0; hops < (kExtendedConfigSize - kExtendedConfigStart) / 4; ++hops) {
    if (offset < kExtendedConfigStart || offset % 4 != 0 || offset + 8 > config.size()) break;
    uint32_t header = read32(config, offset);
    if (header == 0 || header == 0xffffffffu) break;  // no extended capabilities / no device
    if ((header & 0xffffu) == kAcsCapabilityId) {
      result.lookup = AcsLookup::kFound;
      result.acs = {offset, read16(config, offset + 4), read16(config, offset + 6)};
      return result;
    }
    size_t next = header >> 20;
    if (next == 0) break;
    offset = next;
  }
  return result;
}

}  // namespace poolrun::doctor
