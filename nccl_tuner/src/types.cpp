#include "poolrun/tuner/types.hpp"

#include <array>
#include <cctype>
#include <string>

namespace poolrun::tuner {
namespace {

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '_' || c == '-') continue;  // all_reduce, collnet_direct, nvls-tree
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

constexpr std::array<std::string_view, kNumColls> kCollNames = {"broadcast", "reduce", "allgather",
                                                                "reducescatter", "allreduce"};
constexpr std::array<std::string_view, kNumAlgos> kAlgoNames = {
    "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
constexpr std::array<std::string_view, kNumProtos> kProtoNames = {"LL", "LL128", "Simple"};

template <typename E, size_t N>
std::optional<E> find(const std::array<std::string_view, N>& names, std::string_view s) {
  std::string key = lower(s);
  for (size_t i = 0; i < N; ++i) {
    if (lower(names[i]) == key) return static_cast<E>(i);
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
