// A stand-in for NVIDIA's libnvidia-ml.so.1, for tests on machines without a GPU: the NVML calls
// poolrun makes, answered from the JSON file that POOLRUN_FAKE_NVML names (docs/fake-nvml.md).
// Loaded the way the real library is (dlopen of libnvidia-ml.so.1, found through LD_LIBRARY_PATH).
//
// Every call looks at the file (one stat) and reads it again when it changed, so that a test can
// change a GPU while a process samples it. What the file leaves out is NVML_ERROR_NOT_SUPPORTED. A
// malformed file fails nvmlInit_v2 with a message on standard error; a file that turns malformed
// later keeps the last good values, with a message. No poolrun code: it stands in for the driver.

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
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
constexpr Return kUnknown = 999;

constexpr size_t kMaxGpus = 256;
constexpr unsigned kMaxLinks = 18;
constexpr unsigned long long kXidEvent = 0x8;  // nvmlEventTypeXidCriticalError
constexpr unsigned kNoInstance = 0xFFFFFFFFu;
constexpr const char* kEnv = "POOLRUN_FAKE_NVML";

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

struct Link {
  bool active = false;
  std::optional<std::string> remote_pci;
  std::optional<int> remote_type;
};

struct Process {
  unsigned pid = 0;
  unsigned long long used = 0;
};

struct Xid {
  unsigned long long seq = 0, xid = 0;
};

struct Remap {
  unsigned corrected = 0, uncorrected = 0;
  bool pending = false, failure = false;
};

struct Gpu {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  std::string pci;  // as the file spells it, to name the GPU in messages and events
  std::optional<std::string> name, uuid;
  std::optional<unsigned long long> memory_total, memory_used;
  std::optional<std::pair<int, int>> compute_capability;
  std::optional<Utilization> utilization;
  std::optional<unsigned> temperature_c, power_mw;
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
};

using Json = nlohmann::json;

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
  static const std::map<std::string, Return> kNames = {
      {"uninitialized", kUninitialized}, {"invalid_argument", kInvalidArgument},
      {"not_supported", kNotSupported},  {"no_permission", kNoPermission},
      {"not_found", kNotFound},          {"timeout", kTimeout},
      {"gpu_is_lost", kGpuIsLost},       {"unknown", kUnknown}};
  if (value.is_number_integer()) {
    Return r = value.get<Return>();
    if (r == kSuccess) throw BadFile{where + ": 0 is success, not an error"};
    return r;
  }
  auto it = value.is_string() ? kNames.find(value.get<std::string>()) : kNames.end();
  if (it == kNames.end()) {
    throw BadFile{where + ": unknown error " + value.dump() +
                  " (use not_supported, gpu_is_lost, unknown, no_permission, not_found, timeout, "
                  "invalid_argument, uninitialized, or an NVML error number)"};
  }
  return it->second;
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
            {"pci", "name", "uuid", "memory_total_bytes", "memory_used_bytes", "compute_capability",
             "utilization", "temperature_c", "power_mw", "persistence", "ecc_uncorrected_volatile",
             "retired_pages_pending", "remapped_rows", "clocks_event_reasons", "nvlinks", "processes",
             "xid_events", "xid_events_supported", "fail"});
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
      allowOnly(list[i], at.c_str(), {"pid", "used_memory_bytes"});
      if (!list[i].contains("pid")) throw BadFile{at + ": no 'pid'"};
      processes.push_back({list[i].at("pid").get<unsigned>(),
                           list[i].value("used_memory_bytes", ~0ULL)});  // NVML_VALUE_NOT_AVAILABLE
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
  return g;
}

std::vector<Gpu> parseFile(const std::string& text) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw BadFile{"malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what()};
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
    return gpus;
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
  std::vector<Gpu> gpus;
  std::set<nvmlEventSet_st*> sets;
  nvmlDevice_st handles[kMaxGpus];

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
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    try {
      gpus = parseFile(text.str());
      id = now;
      refused.reset();
    } catch (const BadFile& bad) {
      say(bad.what + (id ? "; the previous values stay" : ""));
      refused = now;
    }
    return id.has_value();
  }

  Gpu* find(nvmlDevice_st* handle) {
    auto at = reinterpret_cast<uintptr_t>(handle), first = reinterpret_cast<uintptr_t>(handles);
    if (at < first || at >= first + kMaxGpus * sizeof(nvmlDevice_st)) return nullptr;  // not a handle of ours
    size_t index = (at - first) / sizeof(nvmlDevice_st);
    return index < gpus.size() ? &gpus[index] : nullptr;
  }
};

Driver& driver() {
  static Driver d;
  return d;
}

// Runs `body(gpu)` for the GPU behind `handle`, with the file fresh and the error `fn` is told to
// fail with (or "*") returned instead.
template <typename Body>
Return withGpu(const char* fn, nvmlDevice_st* handle, Body body) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (d.inits == 0) return kUninitialized;
  d.refresh();
  Gpu* g = d.find(handle);
  if (g == nullptr) return kInvalidArgument;
  for (const char* key : {fn, "*"}) {
    if (auto it = g->fail.find(key); it != g->fail.end()) return it->second;
  }
  return body(*g);
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

template <typename Info>
Return listProcesses(const char* fn, nvmlDevice_st* device, unsigned* count, Info* infos) {
  return withGpu(fn, device, [&](const Gpu& g) {
    if (!g.processes) return kNotSupported;
    if (count == nullptr) return kInvalidArgument;
    unsigned n = static_cast<unsigned>(g.processes->size());
    if (*count < n || (n > 0 && infos == nullptr)) {
      *count = n;
      return kInsufficientSize;
    }
    for (unsigned i = 0; i < n; ++i) {
      Info info{};
      info.pid = (*g.processes)[i].pid;
      info.usedGpuMemory = (*g.processes)[i].used;
      if constexpr (sizeof(Info) == sizeof(ProcessInfo)) {
        info.gpuInstanceId = kNoInstance;
        info.computeInstanceId = kNoInstance;
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

FAKE_NVML_API Return nvmlDeviceGetName(nvmlDevice_st* device, char* name, unsigned length) {
  return withGpu("nvmlDeviceGetName", device, [&](const Gpu& g) { return copyString(g.name, name, length); });
}

FAKE_NVML_API Return nvmlDeviceGetUUID(nvmlDevice_st* device, char* uuid, unsigned length) {
  return withGpu("nvmlDeviceGetUUID", device, [&](const Gpu& g) { return copyString(g.uuid, uuid, length); });
}

FAKE_NVML_API Return nvmlDeviceGetMemoryInfo(nvmlDevice_st* device, Memory* memory) {
  return withGpu("nvmlDeviceGetMemoryInfo", device, [&](const Gpu& g) {
    if (!g.memory_total && !g.memory_used) return kNotSupported;
    if (memory == nullptr) return kInvalidArgument;
    memory->total = g.memory_total.value_or(0);
    memory->used = std::min(g.memory_used.value_or(0), memory->total);
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

FAKE_NVML_API Return nvmlDeviceGetUtilizationRates(nvmlDevice_st* device, Utilization* utilization) {
  return withGpu("nvmlDeviceGetUtilizationRates", device,
                 [&](const Gpu& g) { return give(g.utilization, utilization); });
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
