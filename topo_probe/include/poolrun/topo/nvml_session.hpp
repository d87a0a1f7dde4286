#pragma once

// NVML opened with dlopen, so that binaries start on machines without the NVIDIA driver: the slice
// of its C ABI poolrun uses (nvml.h is not needed to build) and a session that initialises NVML
// and shuts it down.

#include <string>
#include <vector>

#include "poolrun/topo/dynamic_library.hpp"

namespace poolrun::topo::nvml {

using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr unsigned kMaxNvLinks = 18;
struct DeviceSt;
using Device = DeviceSt*;
struct PciInfo {
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
};

class Session {
 public:
  // Opens libnvidia-ml.so.1 and initialises NVML; where it cannot, ok() is false and why() says.
  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  bool ok() const { return initialised_; }
  const std::string& why() const { return why_; }

  // The devices in NVML's order, each with its PCI bus id ("00000000:18:00.0", "" where unknown).
  struct Gpu {
    Device device = nullptr;
    std::string bus_id;
  };
  std::vector<Gpu> gpus() const;

  // An NVML function with the signature `Fn`, or nullptr where this driver lacks it.
  template <typename Fn>
  Fn* get(const char* name) const {
    return lib_.get<Fn>(name);
  }

 private:
  DynamicLibrary lib_;
  bool initialised_ = false;
  std::string why_;
};

}  // namespace poolrun::topo::nvml
