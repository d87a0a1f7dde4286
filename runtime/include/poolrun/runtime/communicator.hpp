#pragma once

// One interface for the collectives a rank runs, with two backends: NCCL (buffers in GPU memory,
// collectives enqueued on a CUDA stream) and MPI (buffers in host memory, collectives complete on
// return). Programs allocate and fill buffers through the communicator, so the same code runs on
// either backend.
//
// Every collective is called by every rank of the communicator in the same order. A failure throws
// CollectiveError naming the rank, the operation and the backend's own reason.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "poolrun/common/error.hpp"

namespace poolrun::runtime {

enum class Backend { kMpi, kNccl };
enum class DataType { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kFloat32, kFloat64 };
enum class ReduceOp { kSum, kProd, kMax, kMin, kAvg };

std::string_view toString(Backend backend);  // mpi | nccl
std::string_view toString(DataType type);    // int8 uint8 int32 uint32 int64 uint64 float double
std::string_view toString(ReduceOp op);      // sum prod max min avg
size_t sizeOf(DataType type);
std::optional<DataType> dataTypeFromString(std::string_view name);  // also char, int, uint, float32/64
std::optional<ReduceOp> reduceOpFromString(std::string_view name);

class CollectiveError : public Error {
 public:
  CollectiveError(int rank, std::string operation, const std::string& reason);
  int rank() const noexcept { return rank_; }
  const std::string& operation() const noexcept { return operation_; }

 private:
  int rank_;
  std::string operation_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual Backend backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Buffers where this backend wants them (GPU memory for NCCL, host memory for MPI), and copies
  // between them and the host. allocate() throws CollectiveError when memory runs out.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* buffer) noexcept = 0;
  virtual void copyIn(void* buffer, const void* host, size_t bytes) = 0;
  virtual void copyOut(void* host, const void* buffer, size_t bytes) = 0;

  // `count` elements per rank. In place where send == recv (for allGather: send is recv's slice of
  // this rank; for reduceScatter: recv is send's slice of this rank). The NCCL backend enqueues and
  // returns; synchronize() waits until everything enqueued is done.
  virtual void allReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) = 0;
  virtual void allGather(const void* send, void* recv, size_t sendCount, DataType type) = 0;
  virtual void reduceScatter(const void* send, void* recv, size_t recvCount, DataType type, ReduceOp op) = 0;
  virtual void broadcast(const void* send, void* recv, size_t count, DataType type, int root) = 0;
  virtual void barrier() = 0;
  virtual void synchronize() = 0;
};

// A buffer of a communicator, released when it goes.
class Buffer {
 public:
  Buffer(Communicator& comm, size_t bytes) : comm_(&comm), data_(comm.allocate(bytes)), bytes_(bytes) {}
  ~Buffer() { comm_->release(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Communicator* comm_;
  void* data_;
  size_t bytes_;
};

}  // namespace poolrun::runtime
