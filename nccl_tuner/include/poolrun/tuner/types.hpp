#pragma once

// NCCL's vocabulary as the tuner ABI sees it: collective, algorithm and protocol indices (the values
// NCCL passes and expects; identical in every NCCL release from 2.23 to 2.30) and their spellings.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace poolrun::tuner {

// ncclFunc_t values of the five collectives that reach a tuner.
enum class Coll : std::uint8_t {
  kBroadcast = 0,
  kReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kAllReduce = 4
};
inline constexpr int kNumColls = 5;

// NCCL_ALGO_* indices.
enum class Algo : std::uint8_t {
  kTree = 0,
  kRing = 1,
  kCollNetDirect = 2,
  kCollNetChain = 3,
  kNvls = 4,
  kNvlsTree = 5,
  kPat = 6,
};
inline constexpr int kNumAlgos = 7;

// NCCL_PROTO_* indices.
enum class Proto : std::uint8_t { kLL = 0, kLL128 = 1, kSimple = 2 };
inline constexpr int kNumProtos = 3;

// One cell of NCCL's cost table.
struct Cell {
  Algo algo = Algo::kRing;
  Proto proto = Proto::kSimple;
  friend bool operator==(const Cell&, const Cell&) = default;
};

// The spellings users see: `allreduce`, ...; `Ring`, ... and `LL128`, ... as NCCL_ALGO/NCCL_PROTO
// take them.
std::string_view collName(Coll c);
std::string_view algoName(Algo a);
std::string_view protoName(Proto p);
std::string cellName(Cell c);  // "Ring/LL128"

// Case-insensitive parsing. Collectives accept `allreduce`, `all_reduce` and NCCL's `AllReduce`;
// algorithms accept the NCCL_ALGO tokens and the example tuner's `collnet_direct`, `nvls_tree`.
std::optional<Coll> parseColl(std::string_view s);
std::optional<Algo> parseAlgo(std::string_view s);
std::optional<Proto> parseProto(std::string_view s);

// The nccl-tests bus-bandwidth factor: busbw = algbw * factor (2(n-1)/n for allreduce, (n-1)/n for
// allgather and reducescatter, 1 for broadcast and reduce).
double busBandwidthFactor(Coll c, int nRanks);

}  // namespace poolrun::tuner
