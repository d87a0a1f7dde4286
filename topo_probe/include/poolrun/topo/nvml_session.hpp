#pragma once

// NVML opened with dlopen, so that binaries start on machines without the NVIDIA driver: the slice
// of its C ABI poolrun uses (nvml.h is not needed to build) and a session that initialises NVML
// and shuts it down.
//
// The types below are declared from the facts of NVIDIA's public nvml.h (layouts and values that
// NVML keeps stable across drivers): a struct here must match the driver's byte for byte, since the
// driver writes into it.

#include <cstdint>
#include <string>
#include <vector>

#include "poolrun/topo/dynamic_library.hpp"

namespace poolrun::topo::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorUnknown = 999;

inline constexpr unsigned kMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS
struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t
struct EventSetSt;
using EventSet = EventSetSt*;  // nvmlEventSet_t

struct PciInfo {  // nvmlPciInfo_t (nvmlDeviceGetPciInfo_v3 and _v2)
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
};

struct Utilization {  // nvmlUtilization_t: percent of the last sample period
  unsigned gpu;
  unsigned memory;
};

struct Memory {  // nvmlMemory_t (nvmlDeviceGetMemoryInfo, the unversioned call)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_v2_t, which nvmlDeviceGetComputeRunningProcesses_v3 and _v2 fill.
struct ProcessInfo {
  unsigned pid;
  unsigned long long usedGpuMemory;  // kValueNotAvailable where the driver does not say
  unsigned gpuInstanceId;            // MIG only; 0xFFFFFFFF otherwise
  unsigned computeInstanceId;
};
// nvmlProcessInfo_v1_t, which the unversioned nvmlDeviceGetComputeRunningProcesses fills.
struct ProcessInfoV1 {
  unsigned pid;
  unsigned long long usedGpuMemory;
};

// nvmlEventData_t as nvmlEventSetWait_v2 fills it (the MIG fields came with the _v2 call).
struct EventData {
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID, for kEventTypeXidCriticalError
  unsigned gpuInstanceId;
  unsigned computeInstanceId;
};

inline constexpr unsigned long long kValueNotAvailable = ~0ULL;        // NVML_VALUE_NOT_AVAILABLE
inline constexpr int kTemperatureGpu = 0;                              // NVML_TEMPERATURE_GPU
inline constexpr int kMemoryErrorUncorrected = 1;                      // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
inline constexpr int kVolatileEcc = 0;                                 // NVML_VOLATILE_ECC
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;  // nvmlEventTypeXidCriticalError
// nvmlIntNvLinkDeviceType_t
inline constexpr int kNvLinkRemoteGpu = 0;
inline constexpr int kNvLinkRemoteIbmNpu = 1;
inline constexpr int kNvLinkRemoteSwitch = 2;

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

  // What an NVML error code means, in NVML's words where the driver has nvmlErrorString:
  // "GPU is lost (NVML error 15)".
  std::string errorText(Return r) const;

 private:
  DynamicLibrary lib_;
  bool initialised_ = false;
  std::string why_;
};

}  // namespace poolrun::topo::nvml
