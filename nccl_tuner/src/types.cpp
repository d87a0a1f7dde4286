#include "poolrun/tuner/types.hpp"

#include <array>
#include <cctype>
#include <string>

#include "poolrun/common/text.hpp"

namespace poolrun::tuner {
namespace {

// How names compare: without case, '_' or '-' (all_reduce, collnet_direct, nvls-tree).
std::string key(std::string_view s) {
  std::string out = common::lower(s);
  std::erase_if(out, [](char c) { return c == '_' || c == '-'; });
  return out;
}

constexpr std::array<std::string_view, kNumColls> kCollNames = {"broadcast", "reduce", "allgather",
                                                                "reducescatter", "allreduce"};
constexpr std::array<std::string_view, kNumAlgos> kAlgoNames = {
    "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
constexpr std::array<std::string_view, kNumProtos> kProtoNames = {"LL", "LL128", "Simple"};

template <typename E, size_t N>
std::optional<E> find(const std::array<std::string_view, N>& names, std::string_view s) {
  std::string wanted = key(s);
  for (size_t i = 0; i < N; ++i) {
    if (key(names[i]) == wanted) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace

std::string_view collName(Coll c) {
  return kCollNames[static_cast<size_t>(c)];
}
std::string_view algoName(Algo a) {
  return kAlgoNames[static_cast<size_t>(a)];
}
std::string_view protoName(Proto p) {
  return kProtoNames[static_cast<size_t>(p)];
}

std::string cellName(Cell c) {
  return std::string(algoName(c.algo)) + "/" + std::string(protoName(c.proto));
}

std::optional<Coll> parseColl(std::string_view s) {
  return find<Coll>(kCollNames, s);
}
std::optional<Algo> parseAlgo(std::string_view s) {
  return find<Algo>(kAlgoNames, s);
}
std::optional<Proto> parseProto(std::string_view s) {
  return find<Proto>(kProtoNames, s);
}

double busBandwidthFactor(Coll c, int nRanks) {
  if (nRanks <= 1) return 1.0;
  double n = nRanks;
  switch (c) {
    case Coll::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
      return (n - 1) / n;
    case Coll::kBroadcast:
    case Coll::kReduce:
      return 1.0;
  }
  return 1.0;
}

}  // namespace poolrun::tuner
