#include "poolrun/runtime/communicator.hpp"

#include <array>

namespace poolrun::runtime {
namespace {

constexpr std::array<std::string_view, 8> kTypeNames = {"int8",  "uint8",  "int32", "uint32",
                                                        "int64", "uint64", "float", "double"};
constexpr std::array<std::string_view, 5> kOpNames = {"sum", "prod", "max", "min", "avg"};

}  // namespace

std::string_view toString(Backend backend) {
  return backend == Backend::kNccl ? "nccl" : "mpi";
}

std::string_view toString(DataType type) {
  return kTypeNames[static_cast<size_t>(type)];
}

std::string_view toString(ReduceOp op) {
  return kOpNames[static_cast<size_t>(op)];
}

size_t sizeOf(DataType type) {
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
  }
  return 1;
}

std::optional<DataType> dataTypeFromString(std::string_view name) {
  for (size_t i = 0; i < kTypeNames.size(); ++i) {
    if (name == kTypeNames[i]) return static_cast<DataType>(i);
  }
  if (name == "char") return DataType::kInt8;
  if (name == "int") return DataType::kInt32;
  if (name == "uint") return DataType::kUint32;
  if (name == "float32") return DataType::kFloat32;
  if (name == "float64") return DataType::kFloat64;
  return std::nullopt;
}

std::optional<ReduceOp> reduceOpFromString(std::string_view name) {
  for (size_t i = 0; i < kOpNames.size(); ++i) {
    if (name == kOpNames[i]) return static_cast<ReduceOp>(i);
  }
  return std::nullopt;
}

CollectiveError::CollectiveError(int rank, std::string operation, const std::string& reason)
    : Error(ErrorCode::kIo, "rank " + std::to_string(rank) + ": " + operation + " failed: " + reason),
      rank_(rank),
      operation_(std::move(operation)) {}

}  // namespace poolrun::runtime
