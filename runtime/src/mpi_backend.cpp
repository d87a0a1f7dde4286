// The MPI backend: host buffers, blocking collectives, MPI's errors returned (not fatal) so that
// they become CollectiveErrors naming the rank and the operation.

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends.hpp"

namespace poolrun::runtime::detail {
namespace {

MPI_Datatype mpiType(DataType type) {
  switch (type) {
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kUint8:
      return MPI_UINT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kUint32:
      return MPI_UINT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUint64:
      return MPI_UINT64_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

// MPI has no average: it is a sum, then a division here.
MPI_Op mpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return MPI_SUM;
    case ReduceOp::kProd:
      return MPI_PROD;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}

template <typename T>
void divide(void* data, size_t count, int by) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(by));
}

void divideBy(void* data, size_t count, DataType type, int by) {
  switch (type) {
    case DataType::kInt8:
      return divide<int8_t>(data, count, by);
    case DataType::kUint8:
      return divide<uint8_t>(data, count, by);
    case DataType::kInt32:
      return divide<int32_t>(data, count, by);
    case DataType::kUint32:
      return divide<uint32_t>(data, count, by);
    case DataType::kInt64:
      return divide<int64_t>(data, count, by);
    case DataType::kUint64:
      return divide<uint64_t>(data, count, by);
    case DataType::kFloat32:
      return divide<float>(data, count, by);
    case DataType::kFloat64:
      return divide<double>(data, count, by);
  }
}

// MPI takes counts as int; larger messages go in pieces.
constexpr size_t kMaxCount = static_cast<size_t>(1) << 30;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm parent) {
    MPI_Comm_dup(parent, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  Backend backend() const override { return Backend::kMpi; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    if (p == nullptr)
      throw CollectiveError(rank_, "allocate " + std::to_string(bytes) + " bytes", "out of host memory");
    return p;
  }
  void release(void* buffer) noexcept override { std::free(buffer); }
  void copyIn(void* buffer, const void* host, size_t bytes) override { std::memcpy(buffer, host, bytes); }
  void copyOut(void* host, const void* buffer, size_t bytes) override { std::memcpy(host, buffer, bytes); }

  void allReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) override {
    size_t element = sizeOf(type);
    size_t done = 0;
    do {
      size_t n = std::min(kMaxCount, count - done);
      char* out = static_cast<char*>(recv) + done * element;
      const void* in = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + done * element;
      check(MPI_Allreduce(in, out, static_cast<int>(n), mpiType(type), mpiOp(op), comm_), "allreduce", count,
            type, op);
      done += n;
    } while (done < count);
    if (op == ReduceOp::kAvg) divideBy(recv, count, type, size_);
  }

  void allGather(const void* send, void* recv, size_t sendCount, DataType type) override {
    fits(sendCount * static_cast<size_t>(size_), "allgather", type);
    const char* mine = static_cast<const char*>(recv) + static_cast<size_t>(rank_) * sendCount * sizeOf(type);
    const void* in = send == mine ? MPI_IN_PLACE : send;
    check(MPI_Allgather(in, static_cast<int>(sendCount), mpiType(type), recv, static_cast<int>(sendCount),
                        mpiType(type), comm_),
          "allgather", sendCount, type, std::nullopt);
  }

  void reduceScatter(const void* send, void* recv, size_t recvCount, DataType type, ReduceOp op) override {
    fits(recvCount * static_cast<size_t>(size_), "reduce-scatter", type);
    size_t bytes = recvCount * sizeOf(type);
    const char* mine = static_cast<const char*>(send) + static_cast<size_t>(rank_) * bytes;
    if (recv == mine) {
      // MPI leaves an in-place result at the start of the buffer; this API keeps it at the rank's slice.
      void* whole = const_cast<void*>(send);
      check(MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, static_cast<int>(recvCount), mpiType(type),
                                     mpiOp(op), comm_),
            "reduce-scatter", recvCount, type, op);
      std::memmove(recv, whole, bytes);
    } else {
      check(
          MPI_Reduce_scatter_block(send, recv, static_cast<int>(recvCount), mpiType(type), mpiOp(op), comm_),
          "reduce-scatter", recvCount, type, op);
    }
    if (op == ReduceOp::kAvg) divideBy(recv, recvCount, type, size_);
  }

  void broadcast(const void* send, void* recv, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size_) {
      throw CollectiveError(
          rank_, "broadcast",
          "root " + std::to_string(root) + " is not a rank (0-" + std::to_string(size_ - 1) + ")");
    }
    fits(count, "broadcast", type);
    if (rank_ == root && send != recv) std::memcpy(recv, send, count * sizeOf(type));
    check(MPI_Bcast(recv, static_cast<int>(count), mpiType(type), root, comm_), "broadcast", count, type,
          std::nullopt);
  }

  void barrier() override {
    int rc = MPI_Barrier(comm_);
    if (rc != MPI_SUCCESS) throw CollectiveError(rank_, "barrier", errorString(rc));
  }
  void synchronize() override {}

 private:
  static std::string errorString(int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return std::string(text, static_cast<size_t>(len)) + " (MPI error " + std::to_string(rc) + ")";
  }
  static std::string describe(const char* what, size_t count, DataType type, std::optional<ReduceOp> op) {
    std::string s = std::string(what) + " of " + std::to_string(count) + " " + std::string(toString(type));
    if (op) s += " (" + std::string(toString(*op)) + ")";
    return s;
  }
  void check(int rc, const char* what, size_t count, DataType type, std::optional<ReduceOp> op) const {
    if (rc != MPI_SUCCESS) throw CollectiveError(rank_, describe(what, count, type, op), errorString(rc));
  }
  void fits(size_t count, const char* what, DataType type) const {
    if (count > kMaxCount) {
      throw CollectiveError(rank_, describe(what, count, type, std::nullopt),
                            "more than 2^30 elements; split it into several calls");
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> makeMpiCommunicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace poolrun::runtime::detail
