#pragma once

// A stand-in for NCCL's side of the tuner plugin ABI, written from the published layout of NCCL
// 2.21-2.30 independently of the plugin's own header (a layout mistake in one shows up against the
// other). It opens the library as NCCL does (dlopen RTLD_NOW | RTLD_LOCAL), resolves ncclTunerPlugin_vN
// in the order of the NCCL release it imitates, wraps older versions into the v5 shape as NCCL 2.28
// does, and hands the plugin a contiguous algorithm x protocol float table with IGNORE (-1) cells.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

namespace poolrun::test::nccl {

constexpr int kAlgos = 7;   // Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT
constexpr int kProtos = 3;  // LL, LL128, Simple
constexpr float kIgnore = -1.0f;
enum Algo { kTree = 0, kRing, kCollNetDirect, kCollNetChain, kNvls, kNvlsTree, kPat };
enum Proto { kLL = 0, kLL128, kSimple };
enum Func { kBroadcast = 0, kReduce, kAllGather, kReduceScatter, kAllReduce };

using CostTable = std::array<std::array<float, kProtos>, kAlgos>;  // contiguous, as NCCL's
static_assert(sizeof(CostTable) == sizeof(float) * kAlgos * kProtos);

// ncclTunerConstants_v5_t (all double).
struct Constants {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
};
static_assert(sizeof(Constants) == 1152, "NCCL 2.28's ncclTunerConstants_v5_t is 1152 bytes");

// NCCL's defaults (ncclTopoInitTunerConstants in 2.28.9).
Constants defaultConstants();

// The NCCL releases whose plugin lookup this host imitates.
enum class Release { k2_21, k2_22, k2_24, k2_28, k2_30 };
const char* releaseName(Release r);
// How GoogleTest shows a Release parameter: "NCCL 2.21".
inline void PrintTo(Release r, std::ostream* os) {
  *os << "NCCL " << releaseName(r);
}

struct LogRecord {
  int level = 0;
  unsigned long flags = 0;
  std::string message;
};

// NCCL's logger: records every call (thread-safe).
class Logger {
 public:
  static void log(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
  static std::vector<LogRecord> records();
  static void clear();
  // Records whose message contains `text`.
  static size_t count(const std::string& text);
};

class Host;

// One communicator's tuner context.
class Comm {
 public:
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // As NCCL 2.28's getAlgoInfo: nChannels preset to 0; returns the plugin's ncclResult_t.
  int getCollInfo(int func, size_t nBytes, CostTable& table, int* nChannels, int numPipeOps = 1,
                  int regBuff = 0);
  // A table of `numAlgo` rows (NCCL 2.22 has 6): contiguous numAlgo x 3 floats.
  int getCollInfoRaw(int func, size_t nBytes, float* table, int numAlgo, int* nChannels, int numPipeOps = 1,
                     int regBuff = 0);
  int initResult() const { return initResult_; }
  bool hasContext() const { return context_ != nullptr; }

 private:
  friend class Host;
  Comm(const Host& host) : host_(host) {}
  const Host& host_;
  void* context_ = nullptr;
  int initResult_ = 0;
};

class Host {
 public:
  // Opens `path` and resolves the plugin as `release` does; nullptr with `error` set on failure.
  static std::unique_ptr<Host> load(const std::string& path, Release release, std::string* error);
  ~Host();

  int abiVersion() const { return version_; }  // the N of the ncclTunerPlugin_vN taken
  const char* pluginName() const;
  bool hasChunkSizeHook() const;  // v6 getChunkSize non-NULL

  // init for one communicator (v5+: with commId, NVL domain info and the constants).
  std::unique_ptr<Comm> init(size_t nRanks, size_t nNodes, Constants* constants = nullptr,
                             uint64_t commId = 0x5eed);
  int finalize(Comm& comm);

 private:
  friend class Comm;
  Host() = default;
  void* handle_ = nullptr;
  int version_ = 0;
  const void* plugin_ = nullptr;
};

// NCCL's selection after the tuner: the lowest cost >= 0, ties to the lower algorithm, then protocol.
// {-1, -1} when nothing is valid.
std::pair<int, int> ncclPick(const CostTable& table);

// The cells NCCL 2.28 leaves valid for a collective on given hardware (its rules, §2.3 of the
// reference), with made-up positive costs; everything else IGNORE.
struct Hardware {
  bool nvls = false;
  bool collnet = false;
  bool ll128 = true;
  bool pat = false;  // one GPU per node
  int nNodes = 1;
};
CostTable ncclLikeTable(int func, const Hardware& hw);

}  // namespace poolrun::test::nccl
