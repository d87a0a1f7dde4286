// A stand-in for the CUDA driver's libcuda.so.1, for tests on machines without a GPU: the few
// driver calls poolrun-cuda-probe makes (cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceGetUuid_v2,
// cuGetErrorName), answered from the fake NVML's file (POOLRUN_FAKE_NVML, docs/fake-nvml.md), so
// that one file is the machine for both. Built beside the fake NVML: LD_LIBRARY_PATH finds both.
//
// Devices: as CUDA enumerates them under CUDA_VISIBLE_DEVICES. Unset: every GPU not in MIG mode.
// A MIG device's UUID ("MIG-..."): that compute instance alone, unless its entry in the file says
// "cuda": false (an instance NVML lists and CUDA cannot open); a GPU's UUID: that GPU. Anything
// else, or nothing found: cuInit fails with CUDA_ERROR_NO_DEVICE, as the driver does.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#define FAKE_CUDA_API extern "C" __attribute__((visibility("default")))

namespace {

using Result = int;
constexpr Result kSuccess = 0;
constexpr Result kInvalidValue = 1;
constexpr Result kNotInitialized = 3;
constexpr Result kNoDevice = 100;
constexpr Result kInvalidDevice = 101;

struct Device {
  std::string uuid;
};
std::vector<Device> devices;
bool initialized = false;

// "MIG-7f3c2a10-0000-4000-8000-000000000001" or "GPU-...": its 16 bytes, where it is written so.
bool uuidBytes(const std::string& text, unsigned char out[16]) {
  const size_t dash = text.find('-');
  if (dash == std::string::npos) return false;
  std::string hex;
  for (char c : text.substr(dash + 1))
    if (c != '-') hex += c;
  if (hex.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    char* end = nullptr;
    const std::string two = hex.substr(2 * i, 2);
    out[i] = static_cast<unsigned char>(std::strtoul(two.c_str(), &end, 16));
    if (end != two.c_str() + 2) return false;
  }
  return true;
}

Result load() {
  const char* file = std::getenv("POOLRUN_FAKE_NVML");
  if (file == nullptr) return kNoDevice;
  std::ifstream in(file);
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  if (!doc.is_object()) return kNoDevice;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string want = visible == nullptr ? "" : visible;
  size_t gpuIndex = 0;
  for (const nlohmann::json& gpu : doc.value("gpus", nlohmann::json::array())) {
    const nlohmann::json mig = gpu.value("mig", nlohmann::json::object());
    const bool inMig = mig.value("current", false);
    if (visible == nullptr ? !inMig : gpu.value("uuid", "") == want)
      devices.push_back({gpu.value("uuid", "")});
    for (const nlohmann::json& gi : mig.value("gpu_instances", nlohmann::json::array()))
      for (const nlohmann::json& ci : gi.value("compute_instances", nlohmann::json::array())) {
        // The fake NVML's UUID where the file gives none (fake_nvml.cpp: migUuid).
        char fallback[64];
        std::snprintf(fallback, sizeof fallback, "MIG-fa4e%04zx-%04x-%04x-0000-000000000000", gpuIndex,
                      gi.value("id", 0u), ci.value("id", 0u));
        if (inMig && visible != nullptr && ci.value("uuid", std::string(fallback)) == want &&
            ci.value("cuda", true))
          devices.push_back({want});
      }
    ++gpuIndex;
  }
  return devices.empty() ? kNoDevice : kSuccess;
}

}  // namespace

FAKE_CUDA_API Result cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  if (initialized) return kSuccess;
  const Result r = load();
  initialized = r == kSuccess;
  return r;
}

FAKE_CUDA_API Result cuDeviceGetCount(int* count) {
  if (!initialized) return kNotInitialized;
  if (count == nullptr) return kInvalidValue;
  *count = static_cast<int>(devices.size());
  return kSuccess;
}

FAKE_CUDA_API Result cuDeviceGet(int* device, int ordinal) {
  if (!initialized) return kNotInitialized;
  if (device == nullptr) return kInvalidValue;
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= devices.size()) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

FAKE_CUDA_API Result cuDeviceGetUuid_v2(unsigned char* uuid, int device) {
  if (!initialized) return kNotInitialized;
  if (uuid == nullptr) return kInvalidValue;
  if (device < 0 || static_cast<size_t>(device) >= devices.size()) return kInvalidDevice;
  if (!uuidBytes(devices[static_cast<size_t>(device)].uuid, uuid)) std::memset(uuid, 0, 16);
  return kSuccess;
}

FAKE_CUDA_API Result cuGetErrorName(Result error, const char** name) {
  if (name == nullptr) return kInvalidValue;
  switch (error) {
    case kSuccess:
      *name = "CUDA_SUCCESS";
      return kSuccess;
    case kInvalidValue:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return kSuccess;
    case kNotInitialized:
      *name = "CUDA_ERROR_NOT_INITIALIZED";
      return kSuccess;
    case kNoDevice:
      *name = "CUDA_ERROR_NO_DEVICE";
      return kSuccess;
    case kInvalidDevice:
      *name = "CUDA_ERROR_INVALID_DEVICE";
      return kSuccess;
    default:
      return kInvalidValue;
  }
}
