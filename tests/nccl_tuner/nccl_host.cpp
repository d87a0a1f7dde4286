#include "nccl_host.hpp"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace poolrun::test::nccl {
namespace {

// The plugin ABI as NCCL declares it (ncclResult_t is an int-sized enum).
using Logger_t = void (*)(int, unsigned long, const char*, int, const char*, ...);
struct NvlDomainInfo {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};
struct TunerV2 {
  const char* name;
  int (*init)(size_t nRanks, size_t nNodes, Logger_t log, void** context);
  int (*getCollInfo)(void* context, int collType, size_t nBytes, int collNetSupport, int nvlsSupport,
                     int numPipeOps, int* algorithm, int* protocol, int* nChannels);
  int (*destroy)(void* context);
};
struct TunerV3 {
  const char* name;
  int (*init)(size_t nRanks, size_t nNodes, Logger_t log, void** context);
  int (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                     int numAlgo, int numProto, int* nChannels);
  int (*destroy)(void* context);
};
struct TunerV4 {
  const char* name;
  int (*init)(size_t nRanks, size_t nNodes, Logger_t log, void** context);
  int (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                     int numAlgo, int numProto, int regBuff, int* nChannels);
  int (*destroy)(void* context);
};
struct TunerV5 {
  const char* name;
  int (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, Logger_t log, NvlDomainInfo* nvl,
              Constants* constants);
  int (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps, float** collCostTable,
                     int numAlgo, int numProto, int regBuff, int* nChannels);
  int (*finalize)(void* context);
};
struct TunerV6 {
  TunerV5 v5;
  int (*getChunkSize)(void* context, int collType, size_t nBytes, int algo, int proto, int nChannels,
                      size_t* chunkSize);
};

std::mutex gLogMutex;
std::vector<LogRecord> gLog;

}  // namespace

Constants defaultConstants() {
  Constants c{};
  const double base[7][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0},
                             {0, 0, 0},        {0, 0, 0},        {8, 8, 8}};
  const double hw[3][7][3] = {
      {{0.6, 1.25, 4}, {0.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4}},
      {{1.0, 1.9, 4}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4}},
      {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14}}};
  const double ll[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
  const double ring128[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {73.4, 34.6, 73.4}};
  const double tree128[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
  const double tree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
  const double nvlsTree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0, 57.7, 45.5}, {0, 96.0, 43.8}};
  std::memcpy(c.baseLatencies, base, sizeof base);
  std::memcpy(c.hwLatencies, hw, sizeof hw);
  std::memcpy(c.llMaxBws, ll, sizeof ll);
  std::memcpy(c.perChMaxRingLL128Bws, ring128, sizeof ring128);
  std::memcpy(c.perChMaxTreeLL128Bws, tree128, sizeof tree128);
  std::memcpy(c.perChMaxTreeBws, tree, sizeof tree);
  std::memcpy(c.perChMaxNVLSTreeBws, nvlsTree, sizeof nvlsTree);
  return c;
}

const char* releaseName(Release r) {
  switch (r) {
    case Release::k2_21:
      return "2.21";
    case Release::k2_22:
      return "2.22";
    case Release::k2_24:
      return "2.24";
    case Release::k2_28:
      return "2.28";
    case Release::k2_30:
      return "2.30";
  }
  return "?";
}

void Logger::log(int level, unsigned long flags, const char* /*file*/, int /*line*/, const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(gLogMutex);
  gLog.push_back({level, flags, buf});
}

std::vector<LogRecord> Logger::records() {
  std::lock_guard<std::mutex> lock(gLogMutex);
  return gLog;
}

void Logger::clear() {
  std::lock_guard<std::mutex> lock(gLogMutex);
  gLog.clear();
}

size_t Logger::count(const std::string& text) {
  std::lock_guard<std::mutex> lock(gLogMutex);
  size_t n = 0;
  for (const LogRecord& r : gLog) n += r.message.find(text) != std::string::npos ? 1 : 0;
  return n;
}

std::unique_ptr<Host> Host::load(const std::string& path, Release release, std::string* error) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *error = std::string("dlopen: ") + dlerror();
    return nullptr;
  }
  std::vector<int> order;
  switch (release) {
    case Release::k2_21:
      order = {2};
      break;
    case Release::k2_22:
      order = {3, 2};
      break;
    case Release::k2_24:
      order = {4, 3, 2};
      break;
    case Release::k2_28:
      order = {5, 4, 3, 2};
      break;
    case Release::k2_30:
      order = {6, 5, 4, 3, 2};
      break;
  }
  for (int v : order) {
    std::string symbol = "ncclTunerPlugin_v" + std::to_string(v);
    if (void* sym = dlsym(handle, symbol.c_str())) {
      std::unique_ptr<Host> host(new Host());
      host->handle_ = handle;
      host->version_ = v;
      host->plugin_ = sym;
      return host;
    }
  }
  dlclose(handle);
  *error = std::string("no ncclTunerPlugin_vN that NCCL ") + releaseName(release) + " accepts";
  return nullptr;
}

Host::~Host() {
  if (handle_ != nullptr) dlclose(handle_);
}

const char* Host::pluginName() const {
  return *static_cast<const char* const*>(plugin_);
}

bool Host::hasChunkSizeHook() const {
  return version_ == 6 && static_cast<const TunerV6*>(plugin_)->getChunkSize != nullptr;
}

std::unique_ptr<Comm> Host::init(size_t nRanks, size_t nNodes, Constants* constants, uint64_t commId) {
  std::unique_ptr<Comm> comm(new Comm(*this));
  if (version_ >= 5) {
    const size_t perNode = nNodes > 0 ? nRanks / nNodes : 0;
    const size_t perNodeMax = nNodes > 0 ? (nRanks + nNodes - 1) / nNodes : 0;
    NvlDomainInfo nvl{static_cast<int>(nNodes), static_cast<int>(perNode), static_cast<int>(perNodeMax)};
    Constants local = defaultConstants();
    comm->initResult_ = static_cast<const TunerV5*>(plugin_)->init(
        &comm->context_, commId, nRanks, nNodes, &Logger::log, &nvl, constants ? constants : &local);
  } else {
    // v2..v4 share the init shape (context last); NCCL ignores commId, NVL info and constants for them.
    comm->initResult_ =
        static_cast<const TunerV2*>(plugin_)->init(nRanks, nNodes, &Logger::log, &comm->context_);
  }
  return comm;
}

int Host::finalize(Comm& comm) {
  int rc = version_ >= 5 ? static_cast<const TunerV5*>(plugin_)->finalize(comm.context_)
                         : static_cast<const TunerV2*>(plugin_)->destroy(comm.context_);
  comm.context_ = nullptr;
  return rc;
}

Comm::~Comm() {
  if (context_ != nullptr) const_cast<Host&>(host_).finalize(*this);
}

int Comm::getCollInfo(int func, size_t nBytes, CostTable& table, int* nChannels, int numPipeOps,
                      int regBuff) {
  return getCollInfoRaw(func, nBytes, &table[0][0], kAlgos, nChannels, numPipeOps, regBuff);
}

int Comm::getCollInfoRaw(int func, size_t nBytes, float* table, int numAlgo, int* nChannels, int numPipeOps,
                         int regBuff) {
  *nChannels = 0;
  auto** raw = reinterpret_cast<float**>(table);
  switch (host_.version_) {
    case 2: {
      // NCCL 2.28's v2 wrapper: support flags from the table, the returned cell set to 0 if valid.
      auto cell = [&](int a, int p) { return a < numAlgo ? table[a * kProtos + p] : kIgnore; };
      int nvls = (cell(kNvls, kSimple) != kIgnore || cell(kNvlsTree, kSimple) != kIgnore) ? 1 : 0;
      int collnet = cell(kCollNetChain, kSimple) != kIgnore ? 1 : 0;
      int algo = -1, proto = -1;
      int rc = static_cast<const TunerV2*>(host_.plugin_)
                   ->getCollInfo(context_, func, nBytes, collnet, nvls, numPipeOps, &algo, &proto, nChannels);
      if (algo >= 0 && algo < numAlgo && proto >= 0 && proto < kProtos &&
          table[algo * kProtos + proto] != kIgnore) {
        table[algo * kProtos + proto] = 0.0f;
      }
      return rc;
    }
    case 3:
      return static_cast<const TunerV3*>(host_.plugin_)
          ->getCollInfo(context_, func, nBytes, numPipeOps, raw, numAlgo, kProtos, nChannels);
    case 4:
      return static_cast<const TunerV4*>(host_.plugin_)
          ->getCollInfo(context_, func, nBytes, numPipeOps, raw, numAlgo, kProtos, regBuff, nChannels);
    default:
      return static_cast<const TunerV5*>(host_.plugin_)
          ->getCollInfo(context_, func, nBytes, numPipeOps, raw, numAlgo, kProtos, regBuff, nChannels);
  }
}

std::pair<int, int> ncclPick(const CostTable& table) {
  std::pair<int, int> best{-1, -1};
  float bestCost = 0;
  for (int a = 0; a < kAlgos; ++a) {
    for (int p = 0; p < kProtos; ++p) {
      float c = table[a][p];
      if (c < 0) continue;
      if (best.first < 0 || c < bestCost) {
        best = {a, p};
        bestCost = c;
      }
    }
  }
  return best;
}

CostTable ncclLikeTable(int func, const Hardware& hw) {
  CostTable t;
  for (auto& row : t) row.fill(kIgnore);
  float cost = 10.0f;
  auto open = [&](int a, int p) { t[a][p] = (cost += 1.5f); };
  auto ringLike = [&](int a) {
    open(a, kLL);
    if (hw.ll128) open(a, kLL128);
    open(a, kSimple);
  };
  ringLike(kRing);
  if (func == kAllReduce) {
    ringLike(kTree);
    if (hw.nvls && (hw.nNodes == 1 || hw.collnet)) open(kNvls, kSimple);
    if (hw.nvls && hw.nNodes > 1) open(kNvlsTree, kSimple);
    if (hw.collnet && hw.nNodes > 1) {
      open(kCollNetDirect, kSimple);
      open(kCollNetChain, kSimple);
    }
  } else if (func == kAllGather || func == kReduceScatter) {
    if (hw.pat) open(kPat, kSimple);
    if (hw.nvls && (hw.nNodes == 1 || hw.collnet)) open(kNvls, kSimple);
    if (hw.collnet && hw.nNodes > 1) open(kCollNetDirect, kSimple);
  }
  return t;
}

}  // namespace poolrun::test::nccl
