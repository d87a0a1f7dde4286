#pragma once

// A node's /sys, /proc and /dev as Linux lays them out, written by the tests: a healthy IB or RoCE
// node with two GPUs and two NICs, each pair under a PCIe switch, that each test then breaks in
// one way.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "poolrun/doctor/doctor.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::doctor::test {

struct FakePort {
  std::string link_layer = "InfiniBand";
  std::string state = "4: ACTIVE";
  std::string phys_state = "5: LinkUp";
  std::string rate = "400 Gb/sec (4X NDR)";
  bool ipv4_gid = true;  // RoCE: a RoCE v2 GID with an IPv4 address at index 3
};

class FakeNode {
 public:
  enum class Fabric { kIb, kRoce };
  // A healthy node: GPUs 0000:1b:00.0 and 0000:9b:00.0, NICs mlx5_0 (0000:1c:00.0) and mlx5_1
  // (0000:9c:00.0); downstream ports 0000:1a:00.0/01.0 and 0000:9a:00.0/01.0 carry ACS, off.
  explicit FakeNode(Fabric fabric);

  Roots roots() const;
  const std::filesystem::path& path() const { return dir_.path(); }

  // Writes (replaces) a file under the tree: "sys/...", "proc/...", "dev/...".
  void write(const std::string& relative, const std::string& content) const;
  void remove(const std::string& relative) const;

  void setPort(const std::string& nic, const FakePort& port) const;
  void setAcsControl(const std::string& bdf, uint16_t control) const;
  void truncateConfig(const std::string& bdf, size_t bytes) const;  // as a non-root read sees it
  void setIommu(const std::string& bdf, const std::string& type) const;

  // PCI configuration space bytes with an AER capability at 0x100 followed by ACS at 0x148.
  static std::vector<uint8_t> configWithAcs(uint16_t control);

 private:
  void addFunction(const std::string& chain, const std::string& vendor, const std::string& cls) const;

  poolrun::test::TempDir dir_;
  Fabric fabric_;
};

}  // namespace poolrun::doctor::test
