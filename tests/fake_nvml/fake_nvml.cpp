// A stand-in for NVIDIA's libnvidia-ml.so.1, for tests on machines without a GPU: the NVML calls
// poolrun makes, answered from the JSON file that POOLRUN_FAKE_NVML names (docs/fake-nvml.md).
// Loaded the way the real library is (dlopen of libnvidia-ml.so.1, found through LD_LIBRARY_PATH).
//
// Every call looks at the file (one stat) and reads it again when it changed, so that a test can
// change a GPU while a process samples it. What the file leaves out is NVML_ERROR_NOT_SUPPORTED. A
// malformed file fails nvmlInit_v2 with a message on standard error; a file that turns malformed
// later keeps the last good values, with a message. No poolrun code: it stands in for the driver.
//
// Multi-Instance GPU: a GPU's "mig" object holds its modes, profiles and instances; the calls that
// create or destroy instances or change the mode write the file back (under a lock file, to a
// temporary name renamed over it), so that later calls and other processes see the change.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#define FAKE_NVML_API extern "C" __attribute__((visibility("default")))

struct nvmlDevice_st {
  char unused;
};
struct nvmlEventSet_st;
struct nvmlGpuInstance_st {
  char unused;
};
struct nvmlComputeInstance_st {
  char unused;
};

namespace {

using Return = int;
constexpr Return kSuccess = 0;
constexpr Return kUninitialized = 1;
constexpr Return kInvalidArgument = 2;
constexpr Return kNotSupported = 3;
constexpr Return kNoPermission = 4;
constexpr Return kNotFound = 6;
constexpr Return kInsufficientSize = 7;
constexpr Return kDriverNotLoaded = 9;
constexpr Return kTimeout = 10;
constexpr Return kGpuIsLost = 15;
constexpr Return kResetRequired = 16;
constexpr Return kInUse = 19;
constexpr Return kInsufficientResources = 23;
constexpr Return kArgumentVersionMismatch = 25;
constexpr Return kUnknown = 999;

constexpr size_t kMaxGpus = 256;
constexpr long long kMaxFileBytes = 64LL << 20;  // a fixture of 256 GPUs with their processes is a few MiB
constexpr unsigned kMaxLinks = 18;
constexpr unsigned long long kXidEvent = 0x8;  // nvmlEventTypeXidCriticalError
constexpr unsigned kNoInstance = 0xFFFFFFFFu;
constexpr const char* kEnv = "POOLRUN_FAKE_NVML";

// MIG: placements count in the GPU's 8 memory slices (A100, H100); GPU instance ids, compute
// instance ids and MIG device indexes stay below these bounds, so that each has a handle of its own.
constexpr unsigned kMemorySlices = 8;
constexpr unsigned kGpuInstanceIds = 64;
constexpr unsigned kComputeInstanceIds = 8;
constexpr unsigned kMigDevices = 64;
constexpr unsigned kGpuInstanceProfileCount = 0x11;     // NVML_GPU_INSTANCE_PROFILE_COUNT
constexpr unsigned kComputeInstanceProfileCount = 0x8;  // NVML_COMPUTE_INSTANCE_PROFILE_COUNT
// The compute slices of NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE ... _1_SLICE_REV1, by index.
constexpr unsigned kComputeSlices[kComputeInstanceProfileCount] = {1, 2, 3, 4, 7, 8, 6, 1};
constexpr size_t kNameV2 = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

// The structs NVML fills, as nvml.h lays them out.
struct PciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct Utilization {
  unsigned gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfo {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
};
struct ProcessInfoV1 {
  unsigned pid;
  unsigned long long usedGpuMemory;
};
struct EventData {
  nvmlDevice_st* device;
  unsigned long long eventType, eventData;
  unsigned gpuInstanceId, computeInstanceId;
};
struct DeviceAttributes {
  unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
      sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};
struct InstancePlacement {
  unsigned start, size;
};
struct GpuInstanceInfo {
  nvmlDevice_st* device;
  unsigned id, profileId;
  InstancePlacement placement;
};
struct ComputeInstanceInfo {
  nvmlDevice_st* device;
  nvmlGpuInstance_st* gpuInstance;
  unsigned id, profileId;
  InstancePlacement placement;
};
struct GpuInstanceProfileInfoV2 {
  unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
  char name[kNameV2];
};
struct ComputeInstanceProfileInfoV2 {
  unsigned version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
  char name[kNameV2];
};
// nvml.h's sizes on LP64, which the versions below carry: a caller with another layout is refused.
static_assert(sizeof(DeviceAttributes) == 40 && sizeof(GpuInstanceInfo) == 24 &&
              sizeof(ComputeInstanceInfo) == 32);
static_assert(sizeof(GpuInstanceProfileInfoV2) == 152 && sizeof(ComputeInstanceProfileInfoV2) == 136);
// NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2) and NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2).
constexpr unsigned kGpuInstanceProfileInfoV2Version = sizeof(GpuInstanceProfileInfoV2) | (2u << 24);
constexpr unsigned kComputeInstanceProfileInfoV2Version = sizeof(ComputeInstanceProfileInfoV2) | (2u << 24);

struct Link {
  bool active = false;
  std::optional<std::string> remote_pci;
  std::optional<int> remote_type;
};

struct Process {
  unsigned pid = 0;
  unsigned long long used = 0;
  std::optional<unsigned> gi, ci;  // the MIG device it runs on
};

struct Xid {
  unsigned long long seq = 0, xid = 0;
};

struct Remap {
  unsigned corrected = 0, uncorrected = 0;
  bool pending = false, failure = false;
};

// A compute instance profile of a GPU instance profile ("MIG 1c.3g.40gb").
struct ComputeProfile {
  unsigned index = 0, id = 0, slices = 1, instances = 1, sm = 0;
  std::string name;     // as NVML answers it, "MIG " first
  bool sm_set = false;  // the file gave "sm"
};

// A GPU instance profile ("MIG 3g.40gb"): `index` is what nvmlDeviceGetGpuInstanceProfileInfoV takes,
// `id` what the create calls take and instances report.
struct GpuProfile {
  unsigned index = 0, id = 0, slices = 1, instances = 1, sm = 0;
  unsigned copy_engines = 0, decoders = 0, encoders = 0, jpegs = 0, ofas = 0;
  bool p2p = false;
  unsigned long long memory_mb = 0;
  std::string name;                  // as NVML answers it, "MIG " first
  unsigned placement_size = 1;       // memory slices
  std::vector<unsigned> placements;  // where an instance may start, in memory slices
  std::vector<ComputeProfile> compute;

  const ComputeProfile* computeById(unsigned wanted) const {
    for (const ComputeProfile& c : compute)
      if (c.id == wanted) return &c;
    return nullptr;
  }
};

struct ComputeInstance {
  unsigned id = 0, profile_id = 0, placement = 0;  // placement in the GPU instance's compute slices
  unsigned index = 0;                              // of its MIG device (nvmlDeviceGetMigDeviceHandleByIndex)
  std::string uuid;
};

struct GpuInstance {
  unsigned id = 0, profile_id = 0, placement = 0;
  unsigned long long memory_used = 0;
  std::vector<ComputeInstance> cis;

  const ComputeInstance* ci(unsigned wanted) const {
    for (const ComputeInstance& c : cis)
      if (c.id == wanted) return &c;
    return nullptr;
  }
};

struct Mig {
  bool current = false, pending = false, reset_required = false, privileged = false;
  unsigned max_devices = 0;
  std::vector<GpuProfile> profiles;
  std::vector<GpuInstance> gis;

  const GpuProfile* profileById(unsigned wanted) const {
    for (const GpuProfile& p : profiles)
      if (p.id == wanted) return &p;
    return nullptr;
  }
  const GpuProfile* profileByIndex(unsigned wanted) const {
    for (const GpuProfile& p : profiles)
      if (p.index == wanted) return &p;
    return nullptr;
  }
  const GpuInstance* gi(unsigned wanted) const {
    for (const GpuInstance& g : gis)
      if (g.id == wanted) return &g;
    return nullptr;
  }
  // The compute instance behind MIG device `index`, with its GPU instance; nulls where none is.
  std::pair<const GpuInstance*, const ComputeInstance*> device(unsigned index) const {
    for (const GpuInstance& g : gis)
      for (const ComputeInstance& c : g.cis)
        if (c.index == index) return {&g, &c};
    return {nullptr, nullptr};
  }
};

unsigned sliceMask(unsigned start, unsigned size) {
  return ((1u << size) - 1u) << start;
}

// The memory slices the GPU instances hold.
unsigned heldMemorySlices(const Mig& m) {
  unsigned held = 0;
  for (const GpuInstance& g : m.gis)
    held |= sliceMask(g.placement, m.profileById(g.profile_id)->placement_size);
  return held;
}

// The placements where `count` more instances of `p` would go, first free first (fewer where the GPU
// has no room for `count`).
std::vector<unsigned> freeGpuPlacements(const Mig& m, const GpuProfile& p, unsigned count) {
  unsigned existing = 0;
  for (const GpuInstance& g : m.gis) existing += g.profile_id == p.id ? 1 : 0;
  unsigned held = heldMemorySlices(m);
  std::vector<unsigned> out;
  for (unsigned start : p.placements) {
    if (existing + out.size() >= p.instances || out.size() >= count) break;
    unsigned want = sliceMask(start, p.placement_size);
    if ((held & want) != 0) continue;
    held |= want;
    out.push_back(start);
  }
  return out;
}

// Where a compute instance of `c` may start in a GPU instance of `p`: every multiple of its size.
std::vector<unsigned> computePlacements(const GpuProfile& p, const ComputeProfile& c) {
  std::vector<unsigned> out;
  for (unsigned start = 0; start + c.slices <= p.slices && out.size() < c.instances; start += c.slices)
    out.push_back(start);
  return out;
}

std::vector<unsigned> freeComputePlacements(const GpuInstance& g, const GpuProfile& p,
                                            const ComputeProfile& c, unsigned count) {
  unsigned existing = 0, held = 0;
  for (const ComputeInstance& ci : g.cis) {
    existing += ci.profile_id == c.id ? 1 : 0;
    held |= sliceMask(ci.placement, p.computeById(ci.profile_id)->slices);
  }
  std::vector<unsigned> out;
  for (unsigned start : computePlacements(p, c)) {
    if (existing + out.size() >= c.instances || out.size() >= count) break;
    unsigned want = sliceMask(start, c.slices);
    if ((held & want) != 0) continue;
    held |= want;
    out.push_back(start);
  }
  return out;
}

std::string migUuid(size_t gpu, unsigned gi, unsigned ci) {
  char text[64];
  std::snprintf(text, sizeof text, "MIG-fa4e%04zx-%04x-%04x-0000-000000000000", gpu, gi, ci);
  return text;
}

struct Gpu {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  std::string pci;  // as the file spells it, to name the GPU in messages and events
  std::optional<std::string> name, uuid;
  std::optional<unsigned long long> memory_total, memory_used;
  std::optional<std::pair<int, int>> compute_capability;
  std::optional<Utilization> utilization;
  std::optional<unsigned> temperature_c, power_mw;
  std::optional<unsigned long long> total_energy_mj;  // nvmlDeviceGetTotalEnergyConsumption
  std::optional<bool> persistence;
  std::optional<unsigned long long> ecc_uncorrected_volatile;
  std::optional<bool> retired_pages_pending;
  std::optional<Remap> remapped_rows;
  std::optional<unsigned long long> clocks_event_reasons;
  std::optional<std::map<unsigned, Link>> nvlinks;
  std::optional<std::vector<Process>> processes;
  std::vector<Xid> xid_events;
  bool xid_events_supported = true;
  std::map<std::string, Return> fail;  // NVML function name (or "*") -> the error it returns
  std::optional<Mig> mig;

  bool busy() const { return processes && !processes->empty(); }
};

// Ordered, so that a file written back keeps the test's order of keys.
using Json = nlohmann::ordered_json;

// A file the test wrote wrong: what and where, for the message.
struct BadFile {
  std::string what;
};

void allowOnly(const Json& object, const char* where, std::initializer_list<const char*> keys) {
  if (!object.is_object()) throw BadFile{std::string(where) + " must be a JSON object"};
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; })) {
      std::string known;
      for (const char* k : keys) known += (known.empty() ? "" : ", ") + std::string(k);
      throw BadFile{std::string(where) + ": unknown key '" + key + "' (known: " + known + ")"};
    }
  }
}

// nlohmann's message without its "[json.exception.type_error.302] ".
std::string jsonWhat(const Json::exception& e) {
  std::string what = e.what();
  size_t at = what.find("] ");
  return at == std::string::npos ? what : what.substr(at + 2);
}

template <typename T>
std::optional<T> optional(const Json& object, const std::string& where, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const Json::exception& e) {
    throw BadFile{where + "." + key + ": " + jsonWhat(e) + " (" + it->dump() + ")"};
  }
}

Return errorCode(const Json& value, const std::string& where) {
  static const std::map<std::string, Return> kNames = {{"uninitialized", kUninitialized},
                                                       {"invalid_argument", kInvalidArgument},
                                                       {"not_supported", kNotSupported},
                                                       {"no_permission", kNoPermission},
                                                       {"not_found", kNotFound},
                                                       {"timeout", kTimeout},
                                                       {"gpu_is_lost", kGpuIsLost},
                                                       {"unknown", kUnknown},
                                                       {"in_use", kInUse},
                                                       {"insufficient_resources", kInsufficientResources},
                                                       {"reset_required", kResetRequired}};
  if (value.is_number_integer()) {
    Return r = value.get<Return>();
    if (r == kSuccess) throw BadFile{where + ": 0 is success, not an error"};
    return r;
  }
  auto it = value.is_string() ? kNames.find(value.get<std::string>()) : kNames.end();
  if (it == kNames.end()) {
    throw BadFile{where + ": unknown error " + value.dump() +
                  " (use not_supported, gpu_is_lost, unknown, no_permission, not_found, timeout, "
                  "invalid_argument, uninitialized, in_use, insufficient_resources, reset_required, or an "
                  "NVML error number)"};
  }
  return it->second;
}

// A whole number from 0 to `max` (nlohmann would wrap a negative one into an unsigned).
unsigned long long wholeNumber(const Json& value, const std::string& at, unsigned long long max) {
  if (!value.is_number_unsigned() || value.get<unsigned long long>() > max)
    throw BadFile{at + ": " + value.dump() + " is not a whole number from 0 to " + std::to_string(max)};
  return value.get<unsigned long long>();
}

std::optional<unsigned long long> number(const Json& object, const std::string& where, const char* key,
                                         unsigned long long max) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  return wholeNumber(*it, where + "." + key, max);
}

unsigned required(const Json& object, const std::string& where, const char* key, unsigned max) {
  auto value = number(object, where, key, max);
  if (!value) throw BadFile{where + ": no '" + key + "'"};
  return static_cast<unsigned>(*value);
}

// Each element of the list `key` of `object` (none where it is absent), with where it is.
template <typename Each>
void forEach(const Json& object, const std::string& where, const char* key, Each each) {
  auto it = object.find(key);
  if (it == object.end()) return;
  if (!it->is_array()) throw BadFile{where + "." + key + " must be a list"};
  for (size_t i = 0; i < it->size(); ++i) each((*it)[i], where + "." + key + "[" + std::to_string(i) + "]");
}

// A profile's name as NVML answers it ("MIG 1g.10gb"), from the file's "1g.10gb" or "MIG 1g.10gb".
std::string migName(const std::string& name, const std::string& where) {
  std::string served = name.rfind("MIG ", 0) == 0 ? name : "MIG " + name;
  if (name.empty() || served.size() >= kNameV2) {
    throw BadFile{where + ": name '" + name + "' must have 1 to " + std::to_string(kNameV2 - 5) +
                  " bytes (NVML's buffer holds 96 with \"MIG \")"};
  }
  return served;
}

// The compute instance profiles NVIDIA's GPUs offer in a GPU instance of `p`'s size: 1, 2, 3 and 4
// slices where they fit (but 3 on a 4-slice instance), and the whole instance, each as many times as
// it fits ("MIG 1c.3g.40gb" 3 times, "MIG 2c.3g.40gb" once, "MIG 3g.40gb" once).
std::vector<ComputeProfile> defaultComputeProfiles(const GpuProfile& p) {
  std::vector<ComputeProfile> out;
  std::string shortName = p.name.substr(4);
  for (unsigned index = 0; index < 7; ++index) {
    unsigned c = kComputeSlices[index];
    bool offered = c == p.slices || (c < p.slices && c <= 4 && !(p.slices == 4 && c == 3));
    if (!offered) continue;
    ComputeProfile cp;
    cp.index = cp.id = index;
    cp.slices = c;
    cp.instances = p.slices / c;
    cp.name = c == p.slices ? p.name : "MIG " + std::to_string(c) + "c." + shortName;
    out.push_back(cp);
  }
  return out;
}

ComputeProfile parseComputeProfile(const Json& j, const std::string& at, const GpuProfile& p) {
  allowOnly(j, at.c_str(), {"index", "id", "name", "slices", "instances", "sm"});
  ComputeProfile c;
  c.index = required(j, at, "index", kComputeInstanceProfileCount - 1);
  c.id = static_cast<unsigned>(number(j, at, "id", 1023).value_or(c.index));
  c.slices = static_cast<unsigned>(number(j, at, "slices", p.slices).value_or(kComputeSlices[c.index]));
  if (c.slices == 0 || c.slices > p.slices)
    throw BadFile{at + ".slices: " + std::to_string(c.slices) + " does not fit the GPU instance's " +
                  std::to_string(p.slices)};
  c.instances = static_cast<unsigned>(number(j, at, "instances", p.slices).value_or(p.slices / c.slices));
  if (c.instances == 0) throw BadFile{at + ".instances: 0 (a profile offers at least one instance)"};
  auto sm = number(j, at, "sm", 4096);
  c.sm = static_cast<unsigned>(sm.value_or(0));
  c.sm_set = sm.has_value();
  auto name = optional<std::string>(j, at, "name");
  c.name =
      name ? migName(*name, at + ".name")
           : (c.slices == p.slices ? p.name : "MIG " + std::to_string(c.slices) + "c." + p.name.substr(4));
  return c;
}

GpuProfile parseGpuProfile(const Json& j, const std::string& at) {
  allowOnly(j, at.c_str(),
            {"index", "id", "name", "slices", "instances", "sm", "memory_mb", "copy_engines", "decoders",
             "encoders", "jpegs", "ofas", "p2p", "placement_size", "placements", "compute_profiles"});
  GpuProfile p;
  p.index = required(j, at, "index", kGpuInstanceProfileCount - 1);
  p.id = required(j, at, "id", 1023);
  auto name = optional<std::string>(j, at, "name");
  if (!name) throw BadFile{at + ": no 'name' (e.g. \"1g.10gb\")"};
  p.name = migName(*name, at + ".name");
  p.slices = required(j, at, "slices", kMemorySlices);
  p.instances = required(j, at, "instances", kMemorySlices);
  if (p.slices == 0 || p.instances == 0)
    throw BadFile{at + ": a profile has at least one slice and one instance"};
  p.sm = static_cast<unsigned>(number(j, at, "sm", 4096).value_or(0));
  p.memory_mb = number(j, at, "memory_mb", 1ULL << 32).value_or(0);
  p.copy_engines = static_cast<unsigned>(number(j, at, "copy_engines", 64).value_or(0));
  p.decoders = static_cast<unsigned>(number(j, at, "decoders", 64).value_or(0));
  p.encoders = static_cast<unsigned>(number(j, at, "encoders", 64).value_or(0));
  p.jpegs = static_cast<unsigned>(number(j, at, "jpegs", 64).value_or(0));
  p.ofas = static_cast<unsigned>(number(j, at, "ofas", 64).value_or(0));
  p.p2p = optional<bool>(j, at, "p2p").value_or(false);
  unsigned size = p.slices == 1   ? 1
                  : p.slices == 2 ? 2
                  : p.slices <= 4 ? 4
                                  : 8;  // the memory slices it takes
  p.placement_size = static_cast<unsigned>(number(j, at, "placement_size", kMemorySlices).value_or(size));
  if (p.placement_size == 0) throw BadFile{at + ".placement_size: 0"};
  if (j.contains("placements")) {
    forEach(j, at, "placements", [&](const Json& start, const std::string& where) {
      auto s = static_cast<unsigned>(wholeNumber(start, where, kMemorySlices));
      if (s + p.placement_size > kMemorySlices)
        throw BadFile{where + ": " + std::to_string(s) + "+" + std::to_string(p.placement_size) +
                      " goes past the GPU's 8 memory slices"};
      if (std::find(p.placements.begin(), p.placements.end(), s) != p.placements.end())
        throw BadFile{where + ": placement " + std::to_string(s) + " listed twice"};
      p.placements.push_back(s);
    });
  } else {
    for (unsigned s = 0; s + p.placement_size <= kMemorySlices && p.placements.size() < p.instances;
         s += p.placement_size)
      p.placements.push_back(s);
  }
  if (j.contains("compute_profiles")) {
    forEach(j, at, "compute_profiles", [&](const Json& c, const std::string& where) {
      ComputeProfile cp = parseComputeProfile(c, where, p);
      for (const ComputeProfile& other : p.compute) {
        if (other.index == cp.index || other.id == cp.id)
          throw BadFile{where + ": index " + std::to_string(cp.index) + " or id " + std::to_string(cp.id) +
                        " listed twice"};
      }
      p.compute.push_back(cp);
    });
  } else {
    p.compute = defaultComputeProfiles(p);
  }
  return p;
}

// `where` is "gpus[N].mig"; `gpu` the GPU's index, for the UUIDs of compute instances.
Mig parseMig(const Json& j, const std::string& where, size_t gpu) {
  allowOnly(
      j, where.c_str(),
      {"current", "pending", "reset_required", "privileged", "max_devices", "profiles", "gpu_instances"});
  Mig m;
  m.current = optional<bool>(j, where, "current").value_or(false);
  m.pending = optional<bool>(j, where, "pending").value_or(m.current);
  m.reset_required = optional<bool>(j, where, "reset_required").value_or(false);
  m.privileged = optional<bool>(j, where, "privileged").value_or(false);
  forEach(j, where, "profiles", [&](const Json& item, const std::string& at) {
    GpuProfile p = parseGpuProfile(item, at);
    for (const GpuProfile& other : m.profiles) {
      if (other.index == p.index) throw BadFile{at + ".index: " + std::to_string(p.index) + " listed twice"};
      if (other.id == p.id) throw BadFile{at + ".id: " + std::to_string(p.id) + " listed twice"};
    }
    m.profiles.push_back(std::move(p));
  });
  // A compute instance's SMs, where the file does not say: those of the GPU instance profile of its
  // size (a 1c.3g.40gb has a 1g.10gb's), as NVIDIA's GPUs have them.
  for (GpuProfile& p : m.profiles) {
    for (ComputeProfile& c : p.compute) {
      if (c.sm_set) continue;
      const GpuProfile* same = c.slices == p.slices ? &p : m.profileByIndex(c.index);
      c.sm = same != nullptr && same->slices == c.slices ? same->sm : p.sm * c.slices / p.slices;
    }
  }
  unsigned most = 0;  // the most compute instances the GPU could hold: its slices, in the smallest profile
  for (const GpuProfile& p : m.profiles) most = std::max(most, std::min(p.slices * p.instances, kMigDevices));
  m.max_devices = static_cast<unsigned>(number(j, where, "max_devices", kMigDevices).value_or(most));

  std::set<unsigned> indexes;
  std::vector<std::pair<size_t, size_t>> unindexed;  // (GPU instance, compute instance) without "index"
  forEach(j, where, "gpu_instances", [&](const Json& item, const std::string& at) {
    if (!m.current)
      throw BadFile{at + ": a GPU instance on a GPU whose MIG mode is off (set \"current\": true)"};
    allowOnly(item, at.c_str(), {"id", "profile_id", "placement", "memory_used_bytes", "compute_instances"});
    GpuInstance g;
    g.id = required(item, at, "id", kGpuInstanceIds - 1);
    if (m.gi(g.id) != nullptr)
      throw BadFile{at + ".id: GPU instance " + std::to_string(g.id) + " listed twice"};
    g.profile_id = required(item, at, "profile_id", 1023);
    const GpuProfile* p = m.profileById(g.profile_id);
    if (p == nullptr)
      throw BadFile{at + ".profile_id: no profile has id " + std::to_string(g.profile_id) + " in profiles"};
    std::vector<unsigned> free = freeGpuPlacements(m, *p, kMemorySlices);
    if (auto placement = number(item, at, "placement", kMemorySlices)) {
      if (std::find(free.begin(), free.end(), *placement) == free.end())
        throw BadFile{
            at + ".placement: " + std::to_string(*placement) + " is not a free placement of " + p->name +
            " (taken by another instance, beyond its instance count, or not one of its placements)"};
      g.placement = static_cast<unsigned>(*placement);
    } else {
      if (free.empty()) throw BadFile{at + ": no room left for another " + p->name};
      g.placement = free.front();
    }
    g.memory_used = number(item, at, "memory_used_bytes", ~0ULL).value_or(0);
    m.gis.push_back(g);
    GpuInstance& added = m.gis.back();
    forEach(item, at, "compute_instances", [&](const Json& cj, const std::string& cat) {
      // "cuda": for the fake libcuda.so.1 beside this one (fake_cuda.cpp): false, CUDA cannot open it.
      allowOnly(cj, cat.c_str(), {"id", "profile_id", "placement", "index", "uuid", "cuda"});
      ComputeInstance c;
      c.id = required(cj, cat, "id", kComputeInstanceIds - 1);
      if (added.ci(c.id) != nullptr)
        throw BadFile{cat + ".id: compute instance " + std::to_string(c.id) + " listed twice"};
      const ComputeProfile* whole = nullptr;
      for (const ComputeProfile& cp : p->compute)
        if (cp.slices == p->slices) whole = &cp;
      auto profile = number(cj, cat, "profile_id", 1023);
      if (!profile && whole == nullptr) throw BadFile{cat + ": no 'profile_id'"};
      c.profile_id = profile ? static_cast<unsigned>(*profile) : whole->id;
      const ComputeProfile* cp = p->computeById(c.profile_id);
      if (cp == nullptr)
        throw BadFile{cat + ".profile_id: " + p->name + " has no compute instance profile with id " +
                      std::to_string(c.profile_id)};
      std::vector<unsigned> cfree = freeComputePlacements(added, *p, *cp, kComputeInstanceIds);
      if (auto placement = number(cj, cat, "placement", kComputeInstanceIds)) {
        if (std::find(cfree.begin(), cfree.end(), *placement) == cfree.end())
          throw BadFile{cat + ".placement: " + std::to_string(*placement) + " is not a free placement of " +
                        cp->name};
        c.placement = static_cast<unsigned>(*placement);
      } else {
        if (cfree.empty()) throw BadFile{cat + ": no room left for another " + cp->name};
        c.placement = cfree.front();
      }
      if (auto index = number(cj, cat, "index", kMigDevices - 1)) {
        if (*index >= m.max_devices)
          throw BadFile{cat + ".index: " + std::to_string(*index) + " is not below the GPU's " +
                        std::to_string(m.max_devices) + " MIG devices (max_devices)"};
        if (!indexes.insert(static_cast<unsigned>(*index)).second)
          throw BadFile{cat + ".index: MIG device " + std::to_string(*index) + " listed twice"};
        c.index = static_cast<unsigned>(*index);
      } else {
        unindexed.push_back({m.gis.size() - 1, added.cis.size()});
      }
      c.uuid = optional<std::string>(cj, cat, "uuid").value_or(migUuid(gpu, added.id, c.id));
      added.cis.push_back(c);
    });
  });
  for (auto [g, c] : unindexed) {  // the lowest free indexes, in the order of the file
    unsigned index = 0;
    while (indexes.count(index) != 0) ++index;
    if (index >= m.max_devices)
      throw BadFile{where + ": more compute instances than the GPU's " + std::to_string(m.max_devices) +
                    " MIG devices (max_devices)"};
    indexes.insert(index);
    m.gis[g].cis[c].index = index;
  }
  return m;
}

void parsePci(const std::string& text, const std::string& where, unsigned& domain, unsigned& bus,
              unsigned& device, unsigned& function) {
  char tail = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) != 4 ||
      bus > 0xff || device > 0x1f || function > 7) {
    throw BadFile{where + ": bad PCI address '" + text + "' (expected DDDD:BB:DD.F, e.g. 0000:18:00.0)"};
  }
}

int remoteType(const std::string& text, const std::string& where) {
  if (text == "gpu") return 0;
  if (text == "ibmnpu") return 1;
  if (text == "switch") return 2;
  throw BadFile{where + ": unknown remote_type '" + text + "' (use gpu, switch or ibmnpu)"};
}

Gpu parseGpu(const Json& j, size_t index) {
  std::string where = "gpus[" + std::to_string(index) + "]";
  allowOnly(j, where.c_str(),
            {"pci",
             "name",
             "uuid",
             "memory_total_bytes",
             "memory_used_bytes",
             "compute_capability",
             "utilization",
             "temperature_c",
             "power_mw",
             "total_energy_mj",
             "persistence",
             "ecc_uncorrected_volatile",
             "retired_pages_pending",
             "remapped_rows",
             "clocks_event_reasons",
             "nvlinks",
             "processes",
             "xid_events",
             "xid_events_supported",
             "fail",
             "mig"});
  Gpu g;
  if (!j.contains("pci")) throw BadFile{where + ": no 'pci' (every GPU needs its PCI address)"};
  g.pci = j.at("pci").get<std::string>();
  parsePci(g.pci, where + ".pci", g.domain, g.bus, g.device, g.function);
  g.name = optional<std::string>(j, where, "name");
  g.uuid = optional<std::string>(j, where, "uuid");
  g.memory_total = optional<unsigned long long>(j, where, "memory_total_bytes");
  g.memory_used = optional<unsigned long long>(j, where, "memory_used_bytes");
  if (auto cc = optional<std::vector<int>>(j, where, "compute_capability")) {
    if (cc->size() != 2) throw BadFile{where + ".compute_capability: expected [major, minor], e.g. [9, 0]"};
    g.compute_capability = std::pair{(*cc)[0], (*cc)[1]};
  }
  if (j.contains("utilization")) {
    const Json& u = j.at("utilization");
    allowOnly(u, (where + ".utilization").c_str(), {"gpu", "memory"});
    g.utilization = Utilization{u.value("gpu", 0u), u.value("memory", 0u)};
  }
  g.temperature_c = optional<unsigned>(j, where, "temperature_c");
  g.power_mw = optional<unsigned>(j, where, "power_mw");
  g.total_energy_mj = optional<unsigned long long>(j, where, "total_energy_mj");
  g.persistence = optional<bool>(j, where, "persistence");
  g.ecc_uncorrected_volatile = optional<unsigned long long>(j, where, "ecc_uncorrected_volatile");
  g.retired_pages_pending = optional<bool>(j, where, "retired_pages_pending");
  if (j.contains("remapped_rows")) {
    const Json& r = j.at("remapped_rows");
    allowOnly(r, (where + ".remapped_rows").c_str(), {"corrected", "uncorrected", "pending", "failure"});
    g.remapped_rows = Remap{r.value("corrected", 0u), r.value("uncorrected", 0u), r.value("pending", false),
                            r.value("failure", false)};
  }
  g.clocks_event_reasons = optional<unsigned long long>(j, where, "clocks_event_reasons");
  if (j.contains("nvlinks")) {
    std::map<unsigned, Link> links;
    const Json& list = j.at("nvlinks");
    if (!list.is_array()) throw BadFile{where + ".nvlinks must be a list"};
    for (size_t i = 0; i < list.size(); ++i) {
      std::string at = where + ".nvlinks[" + std::to_string(i) + "]";
      allowOnly(list[i], at.c_str(), {"link", "active", "remote_pci", "remote_type"});
      unsigned number = list[i].value("link", static_cast<unsigned>(i));
      if (number >= kMaxLinks)
        throw BadFile{at + ".link: " + std::to_string(number) + " is beyond NVML's 18 links"};
      if (links.count(number) != 0)
        throw BadFile{at + ".link: link " + std::to_string(number) + " listed twice"};
      Link l;
      l.active = list[i].value("active", true);
      l.remote_pci = optional<std::string>(list[i], at, "remote_pci");
      if (l.remote_pci) {
        unsigned d, b, dv, f;
        parsePci(*l.remote_pci, at + ".remote_pci", d, b, dv, f);
      }
      if (auto type = optional<std::string>(list[i], at, "remote_type"))
        l.remote_type = remoteType(*type, at);
      links[number] = l;
    }
    g.nvlinks = std::move(links);
  }
  if (j.contains("processes")) {
    std::vector<Process> processes;
    const Json& list = j.at("processes");
    if (!list.is_array()) throw BadFile{where + ".processes must be a list"};
    for (size_t i = 0; i < list.size(); ++i) {
      std::string at = where + ".processes[" + std::to_string(i) + "]";
      allowOnly(list[i], at.c_str(), {"pid", "used_memory_bytes", "gpu_instance_id", "compute_instance_id"});
      if (!list[i].contains("pid")) throw BadFile{at + ": no 'pid'"};
      Process p;
      p.pid = list[i].at("pid").get<unsigned>();
      p.used = list[i].value("used_memory_bytes", ~0ULL);  // NVML_VALUE_NOT_AVAILABLE
      auto gi = number(list[i], at, "gpu_instance_id", kGpuInstanceIds - 1);
      auto ci = number(list[i], at, "compute_instance_id", kComputeInstanceIds - 1);
      if (gi.has_value() != ci.has_value())
        throw BadFile{at + ": a process on a MIG device names both gpu_instance_id and compute_instance_id"};
      if (gi) {
        p.gi = static_cast<unsigned>(*gi);
        p.ci = static_cast<unsigned>(*ci);
      }
      processes.push_back(p);
    }
    g.processes = std::move(processes);
  }
  if (j.contains("xid_events")) {
    const Json& list = j.at("xid_events");
    if (!list.is_array()) throw BadFile{where + ".xid_events must be a list"};
    std::set<unsigned long long> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      std::string at = where + ".xid_events[" + std::to_string(i) + "]";
      allowOnly(list[i], at.c_str(), {"seq", "xid"});
      if (!list[i].contains("seq") || !list[i].contains("xid"))
        throw BadFile{at + ": each event needs 'seq' (unique for the GPU) and 'xid'"};
      Xid x{list[i].at("seq").get<unsigned long long>(), list[i].at("xid").get<unsigned long long>()};
      if (!seen.insert(x.seq).second) throw BadFile{at + ".seq: " + std::to_string(x.seq) + " listed twice"};
      g.xid_events.push_back(x);
    }
    std::sort(g.xid_events.begin(), g.xid_events.end(),
              [](const Xid& a, const Xid& b) { return a.seq < b.seq; });
  }
  g.xid_events_supported = j.value("xid_events_supported", true);
  if (j.contains("fail")) {
    const Json& fail = j.at("fail");
    if (!fail.is_object()) throw BadFile{where + ".fail must be an object {\"nvmlFunction\": \"error\"}"};
    for (const auto& [fn, code] : fail.items()) g.fail[fn] = errorCode(code, where + ".fail." + fn);
  }
  if (j.contains("mig")) g.mig = parseMig(j.at("mig"), where + ".mig", index);
  for (size_t i = 0; g.processes && i < g.processes->size(); ++i) {
    const Process& p = (*g.processes)[i];
    if (!p.gi) continue;
    const GpuInstance* gi = g.mig ? g.mig->gi(*p.gi) : nullptr;
    if (gi == nullptr || gi->ci(*p.ci) == nullptr) {
      throw BadFile{where + ".processes[" + std::to_string(i) + "]: no compute instance " +
                    std::to_string(*p.ci) + " in GPU instance " + std::to_string(*p.gi) +
                    " (mig.gpu_instances)"};
    }
  }
  return g;
}

struct Parsed {
  Json doc;
  std::vector<Gpu> gpus;
};

Parsed parseFile(const std::string& text) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw BadFile{"malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what()};
  } catch (const Json::exception& e) {  // a number past a double ("1e999")
    throw BadFile{"malformed JSON: " + jsonWhat(e)};
  }
  try {
    allowOnly(doc, "the file", {"gpus"});
    if (!doc.contains("gpus") || !doc.at("gpus").is_array()) throw BadFile{"no 'gpus' list"};
    const Json& list = doc.at("gpus");
    if (list.size() > kMaxGpus)
      throw BadFile{std::to_string(list.size()) + " GPUs: the fake serves at most 256"};
    std::vector<Gpu> gpus;
    std::set<std::tuple<unsigned, unsigned, unsigned, unsigned>> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      gpus.push_back(parseGpu(list[i], i));
      const Gpu& g = gpus.back();
      if (!seen.insert({g.domain, g.bus, g.device, g.function}).second)
        throw BadFile{"gpus[" + std::to_string(i) + "].pci: " + g.pci + " listed twice"};
    }
    return {std::move(doc), std::move(gpus)};
  } catch (const Json::exception& e) {
    throw BadFile{"a value of the wrong type: " + jsonWhat(e)};
  }
}

// What identifies one version of the file: a rewrite (or a rename over it) changes one of these.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  long long mtime_ns = -1;
  off_t size = -1;
  bool operator==(const FileId&) const = default;
};

// An exclusive lock on "<file>.lock", which every call that writes the file holds from reading it to
// renaming the new version over it, so that two processes do not write one over the other.
class FileLock {
 public:
  explicit FileLock(const std::string& file)
      : fd_(::open((file + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

struct EventSetState {
  std::set<size_t> devices;                                       // GPU indexes registered
  std::set<std::pair<std::string, unsigned long long>> returned;  // (GPU PCI, seq) already returned
};

struct Driver {
  std::mutex mu;
  int inits = 0;
  std::string path;
  std::optional<FileId> id;       // of the file `gpus` came from
  std::optional<FileId> refused;  // of the last malformed version, said once
  Json doc;                       // the file as `gpus` came from it, to write back
  std::vector<Gpu> gpus;
  std::set<nvmlEventSet_st*> sets;
  nvmlDevice_st handles[kMaxGpus];
  // A handle for each MIG device index, GPU instance id and compute instance id of each GPU.
  nvmlDevice_st mig_handles[kMaxGpus][kMigDevices];
  nvmlGpuInstance_st gi_handles[kMaxGpus][kGpuInstanceIds];
  nvmlComputeInstance_st ci_handles[kMaxGpus][kGpuInstanceIds][kComputeInstanceIds];

  void say(const std::string& what) {
    std::fprintf(stderr, "fake NVML: %s: %s (see docs/fake-nvml.md)\n", path.c_str(), what.c_str());
  }

  // Reads the file again where it changed. False where no good version was ever read.
  bool refresh() {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (!refused) say(std::string("cannot read the file: ") + std::strerror(errno));
      refused = FileId{};
      return id.has_value();
    }
    FileId now{st.st_dev, st.st_ino,
               static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec, st.st_size};
    if (now == id || now == refused) return id.has_value();
    // A device, a pipe or a folder in its place would be read without end, block, or read as no
    // JSON; a file past any fixture's size is refused before it is read.
    if (!S_ISREG(st.st_mode) || st.st_size > kMaxFileBytes) {
      say(!S_ISREG(st.st_mode) ? std::string("not a regular file (a folder, device or pipe)")
                               : std::to_string(st.st_size) + " bytes, more than the fake reads (" +
                                     std::to_string(kMaxFileBytes) + ")");
      refused = now;
      return id.has_value();
    }
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    try {
      Parsed parsed = parseFile(text.str());
      doc = std::move(parsed.doc);
      gpus = std::move(parsed.gpus);
      id = now;
      refused.reset();
    } catch (const BadFile& bad) {
      say(bad.what + (id ? "; the previous values stay" : ""));
      refused = now;
    }
    return id.has_value();
  }

  // The position of `handle` among the `count` handles from `first`; nullopt where it is not one.
  template <typename T>
  static std::optional<size_t> slot(const T* handle, const T* first, size_t count) {
    auto at = reinterpret_cast<uintptr_t>(handle), begin = reinterpret_cast<uintptr_t>(first);
    if (at < begin || at >= begin + count * sizeof(T)) return std::nullopt;
    return (at - begin) / sizeof(T);
  }

  // What a device handle stands for: a GPU, or a MIG device (a compute instance) of a GPU in MIG mode.
  struct Target {
    Gpu* gpu = nullptr;
    size_t index = 0;  // of the GPU
    const GpuInstance* gi = nullptr;
    const ComputeInstance* ci = nullptr;
  };
  std::optional<Target> resolve(nvmlDevice_st* handle) {
    if (auto index = slot(handle, handles, kMaxGpus)) {
      if (*index >= gpus.size()) return std::nullopt;
      return Target{&gpus[*index], *index};
    }
    auto at = slot(handle, &mig_handles[0][0], kMaxGpus * kMigDevices);
    if (!at || *at / kMigDevices >= gpus.size()) return std::nullopt;
    Gpu& g = gpus[*at / kMigDevices];
    if (!g.mig || !g.mig->current) return std::nullopt;
    auto [gi, ci] = g.mig->device(static_cast<unsigned>(*at % kMigDevices));
    if (ci == nullptr) return std::nullopt;
    return Target{&g, *at / kMigDevices, gi, ci};
  }

  nvmlDevice_st* migHandle(size_t gpu, const ComputeInstance& ci) { return &mig_handles[gpu][ci.index]; }
  nvmlGpuInstance_st* giHandle(size_t gpu, unsigned gi) { return &gi_handles[gpu][gi]; }
  nvmlComputeInstance_st* ciHandle(size_t gpu, unsigned gi, unsigned ci) { return &ci_handles[gpu][gi][ci]; }

  // Applies `edit` to the "mig" object of GPU `index` in the file, writes the file back whole (a
  // temporary file renamed over it) and reads it again. The caller holds the FileLock and read the
  // file under it. The instances' defaults (placements, MIG device indexes, UUIDs) are written out
  // first, so that they do not move when the file changes.
  Return commit(size_t index, const std::function<void(Json&)>& edit) {
    Json next = doc;
    Json& mig = next["gpus"][index]["mig"];
    const Mig& m = *gpus[index].mig;
    for (size_t i = 0; i < m.gis.size(); ++i) {
      Json& gi = mig["gpu_instances"][i];
      gi["placement"] = m.gis[i].placement;
      for (size_t k = 0; k < m.gis[i].cis.size(); ++k) {
        Json& ci = gi["compute_instances"][k];
        const ComputeInstance& c = m.gis[i].cis[k];
        ci["profile_id"] = c.profile_id;
        ci["placement"] = c.placement;
        ci["index"] = c.index;
        ci["uuid"] = c.uuid;
      }
    }
    edit(mig);
    std::string text = next.dump(2) + "\n";
    try {
      parseFile(text);
    } catch (const BadFile& bad) {  // a bug of the fake's: say it rather than write it
      say("the change would make the file malformed (" + bad.what + "); it is not made");
      return kUnknown;
    }
    std::string temporary = path + ".fake-nvml-" + std::to_string(::getpid()) + ".tmp";
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out << text;
      out.flush();
      if (!out) {
        say("cannot write " + temporary + ": " + std::strerror(errno) + "; the change is not made");
        return kUnknown;
      }
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      say("cannot rename " + temporary + " over the file: " + std::strerror(errno) +
          "; the change is not made");
      std::remove(temporary.c_str());
      return kUnknown;
    }
    id.reset();
    refresh();
    return kSuccess;
  }
};

Driver& driver() {
  static Driver d;
  return d;
}

// The error the file tells `fn` of `g` to fail with (or "*"), kSuccess where none.
Return told(const Gpu& g, const char* fn) {
  for (const char* key : {fn, "*"}) {
    if (auto it = g.fail.find(key); it != g.fail.end()) return it->second;
  }
  return kSuccess;
}

// Reads the file where it changed; for a call that `writes` it, under the FileLock (held until
// `lock` goes), refusing where the file is malformed now rather than writing over it.
Return fresh(Driver& d, bool writes, std::optional<FileLock>& lock) {
  if (d.inits == 0) return kUninitialized;
  if (writes) lock.emplace(d.path);
  d.refresh();
  if (writes && d.refused) {
    d.say("the file is malformed or unreadable now: the change is not made");
    return kUnknown;
  }
  return kSuccess;
}

// Runs `body(target)` for the GPU or MIG device behind `handle`, with the file fresh and the error
// `fn` is told to fail with (or "*", a MIG device failing as its GPU) returned instead.
template <typename Body>
Return withDevice(const char* fn, nvmlDevice_st* handle, Body body, bool writes = false) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  std::optional<FileLock> file;
  if (Return r = fresh(d, writes, file); r != kSuccess) return r;
  auto target = d.resolve(handle);
  if (!target) return kInvalidArgument;
  if (Return r = told(*target->gpu, fn); r != kSuccess) return r;
  return body(*target);
}

// As withDevice, for a call of a whole GPU: `body(gpu)`. A MIG device answers kNotSupported.
template <typename Body>
Return withGpu(const char* fn, nvmlDevice_st* handle, Body body) {
  return withDevice(fn, handle,
                    [&](Driver::Target& t) { return t.ci != nullptr ? kNotSupported : body(*t.gpu); });
}

// As withDevice, for the MIG calls of a GPU: `body(gpu, its index, its mig)`. A GPU the file gives no
// "mig" answers kNotSupported (no MIG), a MIG device kInvalidArgument.
template <typename Body>
Return withMig(const char* fn, nvmlDevice_st* handle, Body body, bool writes = false) {
  return withDevice(
      fn, handle,
      [&](Driver::Target& t) {
        if (t.ci != nullptr) return kInvalidArgument;
        if (!t.gpu->mig) return kNotSupported;
        return body(*t.gpu, t.index, *t.gpu->mig);
      },
      writes);
}

// As withMig, where MIG mode must be on (kNotSupported otherwise, as the driver answers).
template <typename Body>
Return withMigOn(const char* fn, nvmlDevice_st* handle, Body body, bool writes = false) {
  return withMig(
      fn, handle, [&](Gpu& g, size_t index, Mig& m) { return m.current ? body(g, index, m) : kNotSupported; },
      writes);
}

// Runs `body(gpu, its index, its mig, the GPU instance)` for the GPU instance behind `handle`: one
// that exists now on a GPU in MIG mode, kInvalidArgument otherwise (after a destroy, for one).
template <typename Body>
Return withGpuInstance(const char* fn, nvmlGpuInstance_st* handle, Body body, bool writes = false) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  std::optional<FileLock> file;
  if (Return r = fresh(d, writes, file); r != kSuccess) return r;
  auto at = Driver::slot(handle, &d.gi_handles[0][0], kMaxGpus * kGpuInstanceIds);
  if (!at || *at / kGpuInstanceIds >= d.gpus.size()) return kInvalidArgument;
  size_t index = *at / kGpuInstanceIds;
  Gpu& g = d.gpus[index];
  if (Return r = told(g, fn); r != kSuccess) return r;
  const GpuInstance* gi =
      g.mig && g.mig->current ? g.mig->gi(static_cast<unsigned>(*at % kGpuInstanceIds)) : nullptr;
  if (gi == nullptr) return kInvalidArgument;
  return body(g, index, *g.mig, *gi);
}

// As withGpuInstance, for a compute instance: `body(gpu, its index, its mig, GPU instance, compute
// instance)`.
template <typename Body>
Return withComputeInstance(const char* fn, nvmlComputeInstance_st* handle, Body body, bool writes = false) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  std::optional<FileLock> file;
  if (Return r = fresh(d, writes, file); r != kSuccess) return r;
  constexpr size_t kPerGpu = kGpuInstanceIds * kComputeInstanceIds;
  auto at = Driver::slot(handle, &d.ci_handles[0][0][0], kMaxGpus * kPerGpu);
  if (!at || *at / kPerGpu >= d.gpus.size()) return kInvalidArgument;
  size_t index = *at / kPerGpu;
  Gpu& g = d.gpus[index];
  if (Return r = told(g, fn); r != kSuccess) return r;
  auto giId = static_cast<unsigned>(*at % kPerGpu / kComputeInstanceIds);
  auto ciId = static_cast<unsigned>(*at % kComputeInstanceIds);
  const GpuInstance* gi = g.mig && g.mig->current ? g.mig->gi(giId) : nullptr;
  const ComputeInstance* ci = gi != nullptr ? gi->ci(ciId) : nullptr;
  if (ci == nullptr) return kInvalidArgument;
  return body(g, index, *g.mig, *gi, *ci);
}

void formatBusIds(const Gpu& g, PciInfo* out) {
  *out = {};
  std::snprintf(out->busIdLegacy, sizeof out->busIdLegacy, "%04X:%02X:%02X.%X", g.domain & 0xffff, g.bus,
                g.device, g.function);
  std::snprintf(out->busId, sizeof out->busId, "%08X:%02X:%02X.%X", g.domain, g.bus, g.device, g.function);
  out->domain = g.domain;
  out->bus = g.bus;
  out->device = g.device;
}

Return copyString(const std::optional<std::string>& value, char* out, unsigned length) {
  if (!value) return kNotSupported;
  if (out == nullptr) return kInvalidArgument;
  if (value->size() + 1 > length) return kInsufficientSize;
  std::memcpy(out, value->c_str(), value->size() + 1);
  return kSuccess;
}

// The GPU's processes, each with its MIG device where it runs on one; on a MIG device, its own.
template <typename Info>
Return listProcesses(const char* fn, nvmlDevice_st* device, unsigned* count, Info* infos) {
  return withDevice(fn, device, [&](const Driver::Target& t) {
    const Gpu& g = *t.gpu;
    if (!g.processes) return kNotSupported;
    if (count == nullptr) return kInvalidArgument;
    std::vector<const Process*> listed;
    for (const Process& p : *g.processes) {
      if (t.ci == nullptr || (p.gi == t.gi->id && p.ci == t.ci->id)) listed.push_back(&p);
    }
    auto n = static_cast<unsigned>(listed.size());
    if (*count < n || (n > 0 && infos == nullptr)) {
      *count = n;
      return kInsufficientSize;
    }
    for (unsigned i = 0; i < n; ++i) {
      Info info{};
      info.pid = listed[i]->pid;
      info.usedGpuMemory = listed[i]->used;
      if constexpr (sizeof(Info) == sizeof(ProcessInfo)) {
        info.gpuInstanceId = listed[i]->gi.value_or(kNoInstance);
        info.computeInstanceId = listed[i]->ci.value_or(kNoInstance);
      }
      infos[i] = info;
    }
    *count = n;
    return kSuccess;
  });
}

template <typename T, typename Out>
Return give(const std::optional<T>& value, Out* out) {
  if (!value) return kNotSupported;
  if (out == nullptr) return kInvalidArgument;
  *out = static_cast<Out>(*value);
  return kSuccess;
}

}  // namespace

FAKE_NVML_API Return nvmlInit_v2() {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  const char* path = std::getenv(kEnv);
  if (path == nullptr || *path == '\0') {
    std::fprintf(
        stderr, "fake NVML: %s is not set: name the JSON file of the GPUs to serve (see docs/fake-nvml.md)\n",
        kEnv);
    return kDriverNotLoaded;
  }
  if (d.inits == 0 || d.path != path) {
    d.path = path;
    d.id.reset();
    d.refused.reset();
    d.gpus.clear();
  }
  if (!d.refresh()) return kUnknown;
  ++d.inits;
  return kSuccess;
}

FAKE_NVML_API Return nvmlShutdown() {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (d.inits == 0) return kUninitialized;
  --d.inits;
  return kSuccess;
}

FAKE_NVML_API const char* nvmlErrorString(Return r) {
  switch (r) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kNoPermission:
      return "Insufficient Permissions";
    case kNotFound:
      return "Not Found";
    case kInsufficientSize:
      return "Insufficient Size";
    case kDriverNotLoaded:
      return "Driver Not Loaded";
    case kTimeout:
      return "Timeout";
    case kGpuIsLost:
      return "GPU is lost";
    case kResetRequired:
      return "GPU requires restart";
    case kInUse:
      return "In use by another client";
    case kInsufficientResources:
      return "Insufficient resources";
    case kArgumentVersionMismatch:
      return "Version mismatch between the caller's struct and NVML";
    default:
      return "Unknown Error";
  }
}

FAKE_NVML_API Return nvmlDeviceGetCount_v2(unsigned* count) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (d.inits == 0) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  d.refresh();
  *count = static_cast<unsigned>(d.gpus.size());
  return kSuccess;
}

FAKE_NVML_API Return nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_st** device) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (d.inits == 0) return kUninitialized;
  d.refresh();
  if (device == nullptr || index >= d.gpus.size()) return kInvalidArgument;
  // Not failed by "*": a lost GPU still has a handle, whose calls fail.
  if (auto it = d.gpus[index].fail.find("nvmlDeviceGetHandleByIndex_v2"); it != d.gpus[index].fail.end())
    return it->second;
  *device = &d.handles[index];
  return kSuccess;
}

FAKE_NVML_API Return nvmlDeviceGetPciInfo_v3(nvmlDevice_st* device, PciInfo* pci) {
  return withGpu("nvmlDeviceGetPciInfo_v3", device, [&](const Gpu& g) {
    if (pci == nullptr) return kInvalidArgument;
    formatBusIds(g, pci);
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetPciInfo_v2(nvmlDevice_st* device, PciInfo* pci) {
  return withGpu("nvmlDeviceGetPciInfo_v2", device, [&](const Gpu& g) {
    if (pci == nullptr) return kInvalidArgument;
    formatBusIds(g, pci);
    return kSuccess;
  });
}

// A MIG device's compute instance profile and GPU instance profile.
std::pair<const GpuProfile*, const ComputeProfile*> profilesOf(const Driver::Target& t) {
  const GpuProfile* p = t.gpu->mig->profileById(t.gi->profile_id);
  return {p, p->computeById(t.ci->profile_id)};
}

// A MIG device is named after its GPU and its compute instance profile, as the driver names it:
// "NVIDIA H100 80GB HBM3 MIG 1g.10gb".
FAKE_NVML_API Return nvmlDeviceGetName(nvmlDevice_st* device, char* name, unsigned length) {
  return withDevice("nvmlDeviceGetName", device, [&](const Driver::Target& t) {
    if (t.ci == nullptr || !t.gpu->name) return copyString(t.gpu->name, name, length);
    return copyString(*t.gpu->name + " " + profilesOf(t).second->name, name, length);
  });
}

FAKE_NVML_API Return nvmlDeviceGetUUID(nvmlDevice_st* device, char* uuid, unsigned length) {
  return withDevice("nvmlDeviceGetUUID", device, [&](const Driver::Target& t) {
    return copyString(t.ci != nullptr ? std::optional(t.ci->uuid) : t.gpu->uuid, uuid, length);
  });
}

// A MIG device's memory is its GPU instance's, shared by the instance's compute instances.
FAKE_NVML_API Return nvmlDeviceGetMemoryInfo(nvmlDevice_st* device, Memory* memory) {
  return withDevice("nvmlDeviceGetMemoryInfo", device, [&](const Driver::Target& t) {
    const Gpu& g = *t.gpu;
    if (t.ci == nullptr && !g.memory_total && !g.memory_used) return kNotSupported;
    if (memory == nullptr) return kInvalidArgument;
    memory->total = t.ci != nullptr ? profilesOf(t).first->memory_mb << 20 : g.memory_total.value_or(0);
    memory->used = std::min(t.ci != nullptr ? t.gi->memory_used : g.memory_used.value_or(0), memory->total);
    memory->free = memory->total - memory->used;
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetCudaComputeCapability(nvmlDevice_st* device, int* major, int* minor) {
  return withGpu("nvmlDeviceGetCudaComputeCapability", device, [&](const Gpu& g) {
    if (!g.compute_capability) return kNotSupported;
    if (major == nullptr || minor == nullptr) return kInvalidArgument;
    *major = g.compute_capability->first;
    *minor = g.compute_capability->second;
    return kSuccess;
  });
}

// A link the file lists, kNotSupported for a GPU without NVLink or a link it does not list.
template <typename Body>
Return withLink(const char* fn, nvmlDevice_st* device, unsigned link, Body body) {
  return withGpu(fn, device, [&](const Gpu& g) {
    if (link >= kMaxLinks) return kInvalidArgument;
    if (!g.nvlinks) return kNotSupported;
    auto it = g.nvlinks->find(link);
    if (it == g.nvlinks->end()) return kNotSupported;
    return body(it->second);
  });
}

FAKE_NVML_API Return nvmlDeviceGetNvLinkState(nvmlDevice_st* device, unsigned link, int* active) {
  return withLink("nvmlDeviceGetNvLinkState", device, link, [&](const Link& l) {
    if (active == nullptr) return kInvalidArgument;
    *active = l.active ? 1 : 0;
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_st* device, unsigned link, PciInfo* pci) {
  return withLink("nvmlDeviceGetNvLinkRemotePciInfo_v2", device, link, [&](const Link& l) {
    if (!l.remote_pci) return kNotSupported;
    if (pci == nullptr) return kInvalidArgument;
    Gpu remote;
    parsePci(*l.remote_pci, "remote_pci", remote.domain, remote.bus, remote.device, remote.function);
    formatBusIds(remote, pci);
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_st* device, unsigned link, int* type) {
  return withLink("nvmlDeviceGetNvLinkRemoteDeviceType", device, link,
                  [&](const Link& l) { return give(l.remote_type, type); });
}

FAKE_NVML_API Return nvmlDeviceGetPersistenceMode(nvmlDevice_st* device, int* mode) {
  return withGpu("nvmlDeviceGetPersistenceMode", device,
                 [&](const Gpu& g) { return give(g.persistence, mode); });
}

FAKE_NVML_API Return nvmlDeviceGetTotalEccErrors(nvmlDevice_st* device, int errorType, int counterType,
                                                 unsigned long long* count) {
  return withGpu("nvmlDeviceGetTotalEccErrors", device, [&](const Gpu& g) {
    // The file holds the volatile uncorrected count only; corrected and aggregate counts are not served.
    if (errorType != 1 || counterType != 0) return kNotSupported;
    return give(g.ecc_uncorrected_volatile, count);
  });
}

FAKE_NVML_API Return nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_st* device, int* pending) {
  return withGpu("nvmlDeviceGetRetiredPagesPendingStatus", device,
                 [&](const Gpu& g) { return give(g.retired_pages_pending, pending); });
}

FAKE_NVML_API Return nvmlDeviceGetRemappedRows(nvmlDevice_st* device, unsigned* corrected,
                                               unsigned* uncorrected, unsigned* pending, unsigned* failure) {
  return withGpu("nvmlDeviceGetRemappedRows", device, [&](const Gpu& g) {
    if (!g.remapped_rows) return kNotSupported;
    if (corrected == nullptr || uncorrected == nullptr || pending == nullptr || failure == nullptr)
      return kInvalidArgument;
    *corrected = g.remapped_rows->corrected;
    *uncorrected = g.remapped_rows->uncorrected;
    *pending = g.remapped_rows->pending ? 1 : 0;
    *failure = g.remapped_rows->failure ? 1 : 0;
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_st* device,
                                                            unsigned long long* reasons) {
  return withGpu("nvmlDeviceGetCurrentClocksEventReasons", device,
                 [&](const Gpu& g) { return give(g.clocks_event_reasons, reasons); });
}

FAKE_NVML_API Return nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_st* device,
                                                               unsigned long long* reasons) {
  return withGpu("nvmlDeviceGetCurrentClocksThrottleReasons", device,
                 [&](const Gpu& g) { return give(g.clocks_event_reasons, reasons); });
}

// Not on a GPU in MIG mode (nor on its MIG devices): the driver does not sample it there.
FAKE_NVML_API Return nvmlDeviceGetUtilizationRates(nvmlDevice_st* device, Utilization* utilization) {
  return withGpu("nvmlDeviceGetUtilizationRates", device, [&](const Gpu& g) {
    if (g.mig && g.mig->current) return kNotSupported;
    return give(g.utilization, utilization);
  });
}

FAKE_NVML_API Return nvmlDeviceGetTemperature(nvmlDevice_st* device, int sensor, unsigned* celsius) {
  return withGpu("nvmlDeviceGetTemperature", device, [&](const Gpu& g) {
    if (sensor != 0) return kInvalidArgument;  // NVML_TEMPERATURE_GPU is the only sensor
    return give(g.temperature_c, celsius);
  });
}

FAKE_NVML_API Return nvmlDeviceGetPowerUsage(nvmlDevice_st* device, unsigned* milliwatts) {
  return withGpu("nvmlDeviceGetPowerUsage", device,
                 [&](const Gpu& g) { return give(g.power_mw, milliwatts); });
}

FAKE_NVML_API Return nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_st* device,
                                                         unsigned long long* millijoules) {
  return withGpu("nvmlDeviceGetTotalEnergyConsumption", device,
                 [&](const Gpu& g) { return give(g.total_energy_mj, millijoules); });
}

FAKE_NVML_API Return nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_st* device, unsigned* count,
                                                             ProcessInfo* infos) {
  return listProcesses("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos);
}

FAKE_NVML_API Return nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_st* device, unsigned* count,
                                                             ProcessInfo* infos) {
  return listProcesses("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos);
}

FAKE_NVML_API Return nvmlDeviceGetComputeRunningProcesses(nvmlDevice_st* device, unsigned* count,
                                                          ProcessInfoV1* infos) {
  return listProcesses("nvmlDeviceGetComputeRunningProcesses", device, count, infos);
}

FAKE_NVML_API Return nvmlEventSetCreate(nvmlEventSet_st** set) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (d.inits == 0) return kUninitialized;
  if (set == nullptr) return kInvalidArgument;
  *set = reinterpret_cast<nvmlEventSet_st*>(new EventSetState);
  d.sets.insert(*set);
  return kSuccess;
}

FAKE_NVML_API Return nvmlEventSetFree(nvmlEventSet_st* set) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (d.sets.erase(set) == 0) return kInvalidArgument;
  delete reinterpret_cast<EventSetState*>(set);
  return kSuccess;
}

FAKE_NVML_API Return nvmlDeviceRegisterEvents(nvmlDevice_st* device, unsigned long long types,
                                              nvmlEventSet_st* set) {
  return withGpu("nvmlDeviceRegisterEvents", device, [&](const Gpu& g) {
    Driver& d = driver();  // the lock is held
    if (d.sets.count(set) == 0) return kInvalidArgument;
    if ((types & kXidEvent) == 0) return kSuccess;  // the fake has XID events only
    if (!g.xid_events_supported) return kNotSupported;
    reinterpret_cast<EventSetState*>(set)->devices.insert(static_cast<size_t>(&g - d.gpus.data()));
    return kSuccess;
  });
}

// Each event of a registered GPU once per set, lowest sequence number first; waits up to
// `timeoutms` for the file to list one (polling it), as the driver waits for the next event.
FAKE_NVML_API Return nvmlEventSetWait_v2(nvmlEventSet_st* set, EventData* data, unsigned timeoutms) {
  Driver& d = driver();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutms);
  std::unique_lock lock(d.mu);
  if (d.inits == 0) return kUninitialized;
  if (d.sets.count(set) == 0 || data == nullptr) return kInvalidArgument;
  auto* state = reinterpret_cast<EventSetState*>(set);
  for (;;) {
    d.refresh();
    for (size_t index : state->devices) {
      if (index >= d.gpus.size()) continue;
      const Gpu& g = d.gpus[index];
      for (const Xid& x : g.xid_events) {
        if (!state->returned.insert({g.pci, x.seq}).second) continue;
        *data = {&d.handles[index], kXidEvent, x.xid, kNoInstance, kNoInstance};
        return kSuccess;
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return kTimeout;
    lock.unlock();
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(20)));
    lock.lock();
  }
}

// Multi-Instance GPU (docs/fake-nvml.md, "MIG"). A GPU the file gives no "mig" has no MIG
// (kNotSupported); the GPU instance and compute instance calls want MIG mode on.

namespace {

Return copyName(const std::string& name, char (&out)[kNameV2]) {
  std::memset(out, 0, sizeof out);
  std::memcpy(out, name.data(), std::min(name.size(), sizeof out - 1));
  return kSuccess;
}

}  // namespace

FAKE_NVML_API Return nvmlDeviceGetMigMode(nvmlDevice_st* device, unsigned* current, unsigned* pending) {
  return withMig("nvmlDeviceGetMigMode", device, [&](Gpu&, size_t, Mig& m) {
    if (current == nullptr || pending == nullptr) return kInvalidArgument;
    *current = m.current ? 1 : 0;
    *pending = m.pending ? 1 : 0;
    return kSuccess;
  });
}

// The new mode is pending; it is current at once where the GPU is idle and the file does not say
// "reset_required", otherwise `activationStatus` says why not (kInUse: processes run on it;
// kResetRequired) and the mode waits for a reset: the test sets "current" in the file.
FAKE_NVML_API Return nvmlDeviceSetMigMode(nvmlDevice_st* device, unsigned mode, Return* activationStatus) {
  return withMig(
      "nvmlDeviceSetMigMode", device,
      [&](Gpu& g, size_t index, Mig& m) {
        if (mode > 1 || activationStatus == nullptr) return kInvalidArgument;
        if (!m.privileged) return kNoPermission;
        bool on = mode == 1;
        if (on == m.current && on == m.pending) {
          *activationStatus = kSuccess;
          return kSuccess;
        }
        if (!m.gis.empty()) return kInUse;  // its instances must go first
        Return status = on == m.current    ? kSuccess
                        : g.busy()         ? kInUse
                        : m.reset_required ? kResetRequired
                                           : kSuccess;
        Return r = driver().commit(index, [&](Json& mig) {
          mig["pending"] = on;
          if (status == kSuccess) mig["current"] = on;
        });
        if (r == kSuccess) *activationStatus = status;
        return r;
      },
      true);
}

// An upper bound on the MIG device indexes: 0 with MIG off.
FAKE_NVML_API Return nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_st* device, unsigned* count) {
  return withMig("nvmlDeviceGetMaxMigDeviceCount", device, [&](Gpu&, size_t, Mig& m) {
    if (count == nullptr) return kInvalidArgument;
    *count = m.current ? m.max_devices : 0;
    return kSuccess;
  });
}

// kInvalidArgument at or beyond nvmlDeviceGetMaxMigDeviceCount; kNotFound for an index below it that
// no compute instance has (the enumeration has holes).
FAKE_NVML_API Return nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_st* device, unsigned index,
                                                         nvmlDevice_st** migDevice) {
  return withMig("nvmlDeviceGetMigDeviceHandleByIndex", device, [&](Gpu&, size_t gpu, Mig& m) {
    if (migDevice == nullptr || !m.current || index >= m.max_devices) return kInvalidArgument;
    auto [gi, ci] = m.device(index);
    if (ci == nullptr) return kNotFound;
    *migDevice = driver().migHandle(gpu, *ci);
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceIsMigDeviceHandle(nvmlDevice_st* device, unsigned* isMigDevice) {
  return withDevice("nvmlDeviceIsMigDeviceHandle", device, [&](const Driver::Target& t) {
    if (isMigDevice == nullptr) return kInvalidArgument;
    *isMigDevice = t.ci != nullptr ? 1 : 0;
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_st* migDevice,
                                                                  nvmlDevice_st** device) {
  return withDevice("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice, [&](const Driver::Target& t) {
    if (t.ci == nullptr || device == nullptr) return kInvalidArgument;
    *device = &driver().handles[t.index];
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetGpuInstanceId(nvmlDevice_st* device, unsigned* id) {
  return withDevice("nvmlDeviceGetGpuInstanceId", device, [&](const Driver::Target& t) {
    if (t.ci == nullptr) return kNotSupported;
    if (id == nullptr) return kInvalidArgument;
    *id = t.gi->id;
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetComputeInstanceId(nvmlDevice_st* device, unsigned* id) {
  return withDevice("nvmlDeviceGetComputeInstanceId", device, [&](const Driver::Target& t) {
    if (t.ci == nullptr) return kNotSupported;
    if (id == nullptr) return kInvalidArgument;
    *id = t.ci->id;
    return kSuccess;
  });
}

// MIG devices only, as the driver serves it: the compute instance's SMs, its GPU instance's engines,
// slices and memory.
FAKE_NVML_API Return nvmlDeviceGetAttributes_v2(nvmlDevice_st* device, DeviceAttributes* attributes) {
  return withDevice("nvmlDeviceGetAttributes_v2", device, [&](const Driver::Target& t) {
    if (t.ci == nullptr) return kNotSupported;
    if (attributes == nullptr) return kInvalidArgument;
    auto [p, c] = profilesOf(t);
    *attributes = {c->sm,   p->copy_engines, p->decoders, p->encoders, p->jpegs,
                   p->ofas, p->slices,       c->slices,   p->memory_mb};
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_st* device, unsigned profile,
                                                          GpuInstanceProfileInfoV2* info) {
  return withMigOn("nvmlDeviceGetGpuInstanceProfileInfoV", device, [&](Gpu&, size_t, Mig& m) {
    if (info == nullptr) return kInvalidArgument;
    if (info->version != kGpuInstanceProfileInfoV2Version) return kArgumentVersionMismatch;
    if (profile >= kGpuInstanceProfileCount) return kInvalidArgument;
    const GpuProfile* p = m.profileByIndex(profile);
    if (p == nullptr) return kNotSupported;
    unsigned version = info->version;
    *info = {version,     p->id,       p->p2p ? 1u : 0u, p->slices, p->instances, p->sm, p->copy_engines,
             p->decoders, p->encoders, p->jpegs,         p->ofas,   p->memory_mb, {}};
    return copyName(p->name, info->name);
  });
}

// How many more instances of the profile would fit now, with those the GPU holds.
FAKE_NVML_API Return nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_st* device, unsigned profileId,
                                                               unsigned* count) {
  return withMigOn("nvmlDeviceGetGpuInstanceRemainingCapacity", device, [&](Gpu&, size_t, Mig& m) {
    const GpuProfile* p = m.profileById(profileId);
    if (p == nullptr || count == nullptr) return kInvalidArgument;
    *count = static_cast<unsigned>(freeGpuPlacements(m, *p, kMemorySlices).size());
    return kSuccess;
  });
}

// `instances` must hold the profile's instanceCount handles, as the driver asks.
FAKE_NVML_API Return nvmlDeviceGetGpuInstances(nvmlDevice_st* device, unsigned profileId,
                                               nvmlGpuInstance_st** instances, unsigned* count) {
  return withMigOn("nvmlDeviceGetGpuInstances", device, [&](Gpu&, size_t gpu, Mig& m) {
    if (m.profileById(profileId) == nullptr || count == nullptr) return kInvalidArgument;
    unsigned n = 0;
    for (const GpuInstance& g : m.gis) {
      if (g.profile_id != profileId) continue;
      if (instances == nullptr) return kInvalidArgument;
      instances[n++] = driver().giHandle(gpu, g.id);
    }
    *count = n;
    return kSuccess;
  });
}

FAKE_NVML_API Return nvmlDeviceGetGpuInstanceById(nvmlDevice_st* device, unsigned id,
                                                  nvmlGpuInstance_st** gpuInstance) {
  return withMigOn("nvmlDeviceGetGpuInstanceById", device, [&](Gpu&, size_t gpu, Mig& m) {
    if (gpuInstance == nullptr) return kInvalidArgument;
    if (m.gi(id) == nullptr) return kNotFound;
    *gpuInstance = driver().giHandle(gpu, id);
    return kSuccess;
  });
}

// At the profile's first free placement, with the lowest free id (the driver picks its own).
FAKE_NVML_API Return nvmlDeviceCreateGpuInstance(nvmlDevice_st* device, unsigned profileId,
                                                 nvmlGpuInstance_st** gpuInstance) {
  return withMigOn(
      "nvmlDeviceCreateGpuInstance", device,
      [&](Gpu&, size_t gpu, Mig& m) {
        if (gpuInstance == nullptr) return kInvalidArgument;
        if (!m.privileged) return kNoPermission;
        const GpuProfile* p = m.profileById(profileId);
        if (p == nullptr) return kInvalidArgument;
        std::vector<unsigned> free = freeGpuPlacements(m, *p, 1);
        unsigned id = 1;
        while (id < kGpuInstanceIds && m.gi(id) != nullptr) ++id;
        if (free.empty() || id >= kGpuInstanceIds) return kInsufficientResources;
        Return r = driver().commit(gpu, [&](Json& mig) {
          mig["gpu_instances"].push_back({{"id", id},
                                          {"profile_id", profileId},
                                          {"placement", free.front()},
                                          {"memory_used_bytes", 0},
                                          {"compute_instances", Json::array()}});
        });
        if (r == kSuccess) *gpuInstance = driver().giHandle(gpu, id);
        return r;
      },
      true);
}

// Only an empty one: kInUse while it holds compute instances (or processes run on it).
FAKE_NVML_API Return nvmlGpuInstanceDestroy(nvmlGpuInstance_st* gpuInstance) {
  return withGpuInstance(
      "nvmlGpuInstanceDestroy", gpuInstance,
      [&](Gpu& g, size_t gpu, Mig& m, const GpuInstance& gi) {
        if (!m.privileged) return kNoPermission;
        bool running = g.processes && std::any_of(g.processes->begin(), g.processes->end(),
                                                  [&](const Process& p) { return p.gi == gi.id; });
        if (!gi.cis.empty() || running) return kInUse;
        unsigned id = gi.id;
        return driver().commit(gpu, [&](Json& mig) {
          Json& list = mig["gpu_instances"];
          for (auto it = list.begin(); it != list.end(); ++it) {
            if (it->at("id").get<unsigned>() == id) {
              list.erase(it);
              break;
            }
          }
        });
      },
      true);
}

FAKE_NVML_API Return nvmlGpuInstanceGetInfo(nvmlGpuInstance_st* gpuInstance, GpuInstanceInfo* info) {
  return withGpuInstance("nvmlGpuInstanceGetInfo", gpuInstance,
                         [&](Gpu&, size_t gpu, Mig& m, const GpuInstance& gi) {
                           if (info == nullptr) return kInvalidArgument;
                           *info = {&driver().handles[gpu],
                                    gi.id,
                                    gi.profile_id,
                                    {gi.placement, m.profileById(gi.profile_id)->placement_size}};
                           return kSuccess;
                         });
}

FAKE_NVML_API Return nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_st* gpuInstance,
                                                                   unsigned profile, unsigned engineProfile,
                                                                   ComputeInstanceProfileInfoV2* info) {
  return withGpuInstance("nvmlGpuInstanceGetComputeInstanceProfileInfoV", gpuInstance,
                         [&](Gpu&, size_t, Mig& m, const GpuInstance& gi) {
                           if (info == nullptr) return kInvalidArgument;
                           if (info->version != kComputeInstanceProfileInfoV2Version)
                             return kArgumentVersionMismatch;
                           if (profile >= kComputeInstanceProfileCount || engineProfile != 0)
                             return kInvalidArgument;
                           const GpuProfile* p = m.profileById(gi.profile_id);
                           const ComputeProfile* c = nullptr;
                           for (const ComputeProfile& each : p->compute)
                             if (each.index == profile) c = &each;
                           if (c == nullptr) return kNotSupported;
                           unsigned version = info->version;
                           *info = {version,     c->id,       c->slices, c->instances, c->sm, p->copy_engines,
                                    p->decoders, p->encoders, p->jpegs,  p->ofas,      {}};
                           return copyName(c->name, info->name);
                         });
}

// `instances` must hold the compute profile's instanceCount handles, as the driver asks.
FAKE_NVML_API Return nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_st* gpuInstance, unsigned profileId,
                                                        nvmlComputeInstance_st** instances, unsigned* count) {
  return withGpuInstance(
      "nvmlGpuInstanceGetComputeInstances", gpuInstance,
      [&](Gpu&, size_t gpu, Mig& m, const GpuInstance& gi) {
        if (m.profileById(gi.profile_id)->computeById(profileId) == nullptr || count == nullptr)
          return kInvalidArgument;
        unsigned n = 0;
        for (const ComputeInstance& c : gi.cis) {
          if (c.profile_id != profileId) continue;
          if (instances == nullptr) return kInvalidArgument;
          instances[n++] = driver().ciHandle(gpu, gi.id, c.id);
        }
        *count = n;
        return kSuccess;
      });
}

FAKE_NVML_API Return nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_st* gpuInstance, unsigned id,
                                                           nvmlComputeInstance_st** computeInstance) {
  return withGpuInstance("nvmlGpuInstanceGetComputeInstanceById", gpuInstance,
                         [&](Gpu&, size_t gpu, Mig&, const GpuInstance& gi) {
                           if (computeInstance == nullptr) return kInvalidArgument;
                           if (gi.ci(id) == nullptr) return kNotFound;
                           *computeInstance = driver().ciHandle(gpu, gi.id, id);
                           return kSuccess;
                         });
}

// At the first free placement, with the lowest free id and the lowest free MIG device index.
FAKE_NVML_API Return nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_st* gpuInstance, unsigned profileId,
                                                          nvmlComputeInstance_st** computeInstance) {
  return withGpuInstance(
      "nvmlGpuInstanceCreateComputeInstance", gpuInstance,
      [&](Gpu&, size_t gpu, Mig& m, const GpuInstance& gi) {
        if (computeInstance == nullptr) return kInvalidArgument;
        if (!m.privileged) return kNoPermission;
        const GpuProfile* p = m.profileById(gi.profile_id);
        const ComputeProfile* c = p->computeById(profileId);
        if (c == nullptr) return kInvalidArgument;
        std::vector<unsigned> free = freeComputePlacements(gi, *p, *c, 1);
        unsigned id = 0, index = 0;
        while (id < kComputeInstanceIds && gi.ci(id) != nullptr) ++id;
        while (index < m.max_devices && m.device(index).second != nullptr) ++index;
        if (free.empty() || id >= kComputeInstanceIds || index >= m.max_devices)
          return kInsufficientResources;
        unsigned giId = gi.id;
        std::string uuid = migUuid(gpu, giId, id);
        Return r = driver().commit(gpu, [&](Json& mig) {
          for (Json& each : mig["gpu_instances"]) {
            if (each.at("id").get<unsigned>() != giId) continue;
            each["compute_instances"].push_back({{"id", id},
                                                 {"profile_id", profileId},
                                                 {"placement", free.front()},
                                                 {"index", index},
                                                 {"uuid", uuid}});
          }
        });
        if (r == kSuccess) *computeInstance = driver().ciHandle(gpu, giId, id);
        return r;
      },
      true);
}

// kInUse while processes run on it.
FAKE_NVML_API Return nvmlComputeInstanceDestroy(nvmlComputeInstance_st* computeInstance) {
  return withComputeInstance(
      "nvmlComputeInstanceDestroy", computeInstance,
      [&](Gpu& g, size_t gpu, Mig& m, const GpuInstance& gi, const ComputeInstance& ci) {
        if (!m.privileged) return kNoPermission;
        bool running =
            g.processes && std::any_of(g.processes->begin(), g.processes->end(),
                                       [&](const Process& p) { return p.gi == gi.id && p.ci == ci.id; });
        if (running) return kInUse;
        unsigned giId = gi.id, ciId = ci.id;
        return driver().commit(gpu, [&](Json& mig) {
          for (Json& each : mig["gpu_instances"]) {
            if (each.at("id").get<unsigned>() != giId) continue;
            Json& list = each["compute_instances"];
            for (auto it = list.begin(); it != list.end(); ++it) {
              if (it->at("id").get<unsigned>() == ciId) {
                list.erase(it);
                break;
              }
            }
          }
        });
      },
      true);
}

FAKE_NVML_API Return nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_st* computeInstance,
                                                   ComputeInstanceInfo* info) {
  return withComputeInstance("nvmlComputeInstanceGetInfo_v2", computeInstance,
                             [&](Gpu&, size_t gpu, Mig& m, const GpuInstance& gi, const ComputeInstance& ci) {
                               if (info == nullptr) return kInvalidArgument;
                               const ComputeProfile* c =
                                   m.profileById(gi.profile_id)->computeById(ci.profile_id);
                               *info = {&driver().handles[gpu],
                                        driver().giHandle(gpu, gi.id),
                                        ci.id,
                                        ci.profile_id,
                                        {ci.placement, c->slices}};
                               return kSuccess;
                             });
}
