#pragma once

// NVML opened with dlopen, so that binaries start on machines without the NVIDIA driver: the slice
// of its C ABI poolrun uses (nvml.h is not needed to build) and a session that initialises NVML
// and shuts it down.
//
// The types below are declared from the facts of NVIDIA's public nvml.h (layouts and values that
// NVML keeps stable across drivers): a struct here must match the driver's byte for byte, since the
// driver writes into it.

#include <cstddef>
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
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorInUse = 19;
inline constexpr Return kErrorInsufficientResources = 23;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
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

// Multi-Instance GPU (NVML's "Multi Instance GPU Management" group). A GPU in MIG mode is split
// into GPU instances (a share of its memory and SMs, in slices), each holding one or more compute
// instances; a MIG device is a compute instance as CUDA and NVML see it, with a handle of its own
// (nvmlDeviceGetMigDeviceHandleByIndex) and a "MIG-..." UUID. Creating and destroying instances
// and changing the mode need root (kErrorNoPermission otherwise); a mode change may wait for a
// GPU reset (the pending mode differs from the current one).
struct GpuInstanceSt;
using GpuInstance = GpuInstanceSt*;  // nvmlGpuInstance_t
struct ComputeInstanceSt;
using ComputeInstance = ComputeInstanceSt*;  // nvmlComputeInstance_t

inline constexpr unsigned kMigDisable = 0;  // NVML_DEVICE_MIG_DISABLE
inline constexpr unsigned kMigEnable = 1;   // NVML_DEVICE_MIG_ENABLE

// nvmlDeviceAttributes_t (nvmlDeviceGetAttributes_v2): on a MIG device, its share of the GPU.
struct DeviceAttributes {
  unsigned multiprocessorCount;
  unsigned sharedCopyEngineCount;
  unsigned sharedDecoderCount;
  unsigned sharedEncoderCount;
  unsigned sharedJpegCount;
  unsigned sharedOfaCount;
  unsigned gpuInstanceSliceCount;
  unsigned computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};

struct InstancePlacement {  // nvmlGpuInstancePlacement_t, nvmlComputeInstancePlacement_t
  unsigned start;
  unsigned size;
};

struct GpuInstanceInfo {  // nvmlGpuInstanceInfo_t (nvmlGpuInstanceGetInfo)
  Device device;
  unsigned id;
  unsigned profileId;  // the profile's id (GpuInstanceProfileInfoV2::id), not its index
  InstancePlacement placement;
};

inline constexpr size_t kDeviceNameV2BufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

// nvmlGpuInstanceProfileInfo_v2_t (nvmlDeviceGetGpuInstanceProfileInfoV). The call takes a profile
// index (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0 ... kGpuInstanceProfileCount - 1) and answers the
// profile's device-unique `id`, which the create calls take and instances report; an index the GPU
// does not offer answers kErrorNotSupported or kErrorInvalidArgument. `version` must be set first.
struct GpuInstanceProfileInfoV2 {
  unsigned version;
  unsigned id;
  unsigned isP2pSupported;
  unsigned sliceCount;
  unsigned instanceCount;  // how many instances of it the whole GPU holds at most
  unsigned multiprocessorCount;
  unsigned copyEngineCount;
  unsigned decoderCount;
  unsigned encoderCount;
  unsigned jpegCount;
  unsigned ofaCount;
  unsigned long long memorySizeMB;
  char name[kDeviceNameV2BufferSize];  // "MIG 1g.10gb"
};
inline constexpr unsigned kGpuInstanceProfileInfoV2Version =
    static_cast<unsigned>(sizeof(GpuInstanceProfileInfoV2)) | (2u << 24);  // NVML_STRUCT_VERSION(.., 2)
// Profile indexes up to NVML_GPU_INSTANCE_PROFILE_COUNT of CUDA 13's nvml.h (0x11); older drivers
// answer the later ones kErrorInvalidArgument.
inline constexpr unsigned kGpuInstanceProfileCount = 0x11;

struct ComputeInstanceInfo {  // nvmlComputeInstanceInfo_t (nvmlComputeInstanceGetInfo_v2)
  Device device;
  GpuInstance gpuInstance;
  unsigned id;
  unsigned profileId;
  InstancePlacement placement;
};

// nvmlComputeInstanceProfileInfo_v2_t (nvmlGpuInstanceGetComputeInstanceProfileInfoV, with a
// profile index up to kComputeInstanceProfileCount and the engine profile kComputeInstanceShared).
// Its name is the one nvidia-smi -L prints for a MIG device ("MIG 1g.10gb", "MIG 1c.3g.40gb").
struct ComputeInstanceProfileInfoV2 {
  unsigned version;
  unsigned id;
  unsigned sliceCount;
  unsigned instanceCount;
  unsigned multiprocessorCount;
  unsigned sharedCopyEngineCount;
  unsigned sharedDecoderCount;
  unsigned sharedEncoderCount;
  unsigned sharedJpegCount;
  unsigned sharedOfaCount;
  char name[kDeviceNameV2BufferSize];
};
inline constexpr unsigned kComputeInstanceProfileInfoV2Version =
    static_cast<unsigned>(sizeof(ComputeInstanceProfileInfoV2)) | (2u << 24);
inline constexpr unsigned kComputeInstanceProfileCount = 0x8;  // NVML_COMPUTE_INSTANCE_PROFILE_COUNT
inline constexpr unsigned kComputeInstanceShared = 0;          // NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED

// The MIG calls, as this ABI declares them (each resolved with Session::get<...>(name)):
//   nvmlDeviceGetMigMode(Device, unsigned* current, unsigned* pending)
//   nvmlDeviceSetMigMode(Device, unsigned mode, Return* activationStatus)
//   nvmlDeviceGetMaxMigDeviceCount(Device, unsigned*)           an upper bound, not a count
//   nvmlDeviceGetMigDeviceHandleByIndex(Device, unsigned, Device*)  fails for unused indexes
//   nvmlDeviceIsMigDeviceHandle(Device, unsigned*)
//   nvmlDeviceGetDeviceHandleFromMigDeviceHandle(Device mig, Device* parent)
//   nvmlDeviceGetGpuInstanceId(Device mig, unsigned*), nvmlDeviceGetComputeInstanceId(...)
//   nvmlDeviceGetAttributes_v2(Device mig, DeviceAttributes*)
//   nvmlDeviceGetGpuInstanceProfileInfoV(Device, unsigned index, GpuInstanceProfileInfoV2*)
//   nvmlDeviceGetGpuInstanceRemainingCapacity(Device, unsigned profileId, unsigned*)
//   nvmlDeviceGetGpuInstances(Device, unsigned profileId, GpuInstance*, unsigned* count)
//   nvmlDeviceGetGpuInstanceById(Device, unsigned id, GpuInstance*)
//   nvmlDeviceCreateGpuInstance(Device, unsigned profileId, GpuInstance*)
//   nvmlGpuInstanceDestroy(GpuInstance)
//   nvmlGpuInstanceGetInfo(GpuInstance, GpuInstanceInfo*)
//   nvmlGpuInstanceGetComputeInstanceProfileInfoV(GpuInstance, unsigned index, unsigned engine,
//                                                 ComputeInstanceProfileInfoV2*)
//   nvmlGpuInstanceGetComputeInstances(GpuInstance, unsigned profileId, ComputeInstance*, unsigned*)
//   nvmlGpuInstanceGetComputeInstanceById(GpuInstance, unsigned id, ComputeInstance*)
//   nvmlGpuInstanceCreateComputeInstance(GpuInstance, unsigned profileId, ComputeInstance*)
//   nvmlComputeInstanceDestroy(ComputeInstance)
//   nvmlComputeInstanceGetInfo_v2(ComputeInstance, ComputeInstanceInfo*)

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
