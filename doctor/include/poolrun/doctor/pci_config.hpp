#pragma once

// PCI Express Access Control Services (ACS) in a device's configuration space, as
// /sys/bus/pci/devices/BDF/config holds it. With P2P request or completion redirect on, a bridge
// sends peer-to-peer traffic (GPU to NIC: GPUDirect RDMA) up to the root complex instead of across
// the switch: slower, and with an IOMMU it can hang.

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace poolrun::doctor {

inline constexpr uint16_t kAcsCapabilityId = 0x000D;
inline constexpr size_t kExtendedConfigStart = 0x100;
inline constexpr size_t kExtendedConfigSize = 4096;

struct AcsCapability {
  size_t offset = 0;        // of the capability header in the configuration space
  uint16_t capability = 0;  // ACS Capability register (offset + 4)
  uint16_t control = 0;     // ACS Control register (offset + 6)

  bool redirectsPeerToPeer() const;     // P2P request/completion redirect or egress control on
  std::string describeControl() const;  // "source validation, P2P request redirect" or "off"
};

enum class AcsLookup {
  kFound,
  kAbsent,      // the device has no ACS capability
  kUnreadable,  // the file ends before the extended space (not root: only 64 bytes are readable)
};

struct AcsResult {
  AcsLookup lookup = AcsLookup::kAbsent;
  AcsCapability acs;
};

// Walks the extended capability list of `config` (the bytes of the configuration file). Never
// reads outside `config` and stops on loops and malformed lists (reported as kAbsent).
AcsResult findAcs(std::span<const uint8_t> config);

}  // namespace poolrun::doctor
