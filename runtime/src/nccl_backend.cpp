// The NCCL backend: GPU buffers, collectives enqueued on one CUDA stream, the communicator
// bootstrapped over MPI (rank 0 makes the unique id and broadcasts it). Compiled where CUDA and
// NCCL are found; run where a GPU is. The CUDA runtime and NCCL are opened with dlopen, so that
// programs built with them start on machines without them (and use the MPI backend there).

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>

#include "backends.hpp"
#include "poolrun/topo/dynamic_library.hpp"

namespace poolrun::runtime::detail {
namespace {

#define POOLRUN_STR2(x) #x
#define POOLRUN_STR(x) POOLRUN_STR2(x)
// The sonames this build was compiled against, and where CMake found them.
constexpr const char* kCudart = "libcudart.so." POOLRUN_STR(POOLRUN_CUDART_MAJOR);
constexpr const char* kNccl = "libnccl.so." POOLRUN_STR(NCCL_MAJOR);

std::unique_ptr<topo::DynamicLibrary> openLibrary(const char* soname) {
  auto lib = std::make_unique<topo::DynamicLibrary>(soname);
  if (!*lib)
    lib = std::make_unique<topo::DynamicLibrary>((std::string(POOLRUN_CUDA_LIBDIR) + "/" + soname).c_str());
  return lib;
}

template <auto Fn>
using FnType = std::remove_pointer_t<decltype(Fn)>;

// The CUDA runtime and NCCL functions the backend calls, from the libraries opened once.
struct Api {
  std::unique_ptr<topo::DynamicLibrary> cudart = openLibrary(kCudart);
  std::unique_ptr<topo::DynamicLibrary> nccl = openLibrary(kNccl);
  std::string missing;  // why the backend cannot run; empty where it can

#define POOLRUN_CUDA_FN(name) decltype(&::name) name = cudart->get<FnType<&::name>>(#name)
#define POOLRUN_NCCL_FN(name) decltype(&::name) name = nccl->get<FnType<&::name>>(#name)
  POOLRUN_CUDA_FN(cudaGetDeviceCount);
  POOLRUN_CUDA_FN(cudaSetDevice);
  // cuda_runtime.h overloads cudaMalloc for C++: the C function's type is named here.
  cudaError_t (*cudaMalloc)(void**, size_t) = cudart->get<cudaError_t(void**, size_t)>("cudaMalloc");
  POOLRUN_CUDA_FN(cudaFree);
  POOLRUN_CUDA_FN(cudaMemcpy);
  POOLRUN_CUDA_FN(cudaStreamCreateWithFlags);
  POOLRUN_CUDA_FN(cudaStreamSynchronize);
  POOLRUN_CUDA_FN(cudaStreamDestroy);
  POOLRUN_CUDA_FN(cudaGetErrorString);
  POOLRUN_CUDA_FN(cudaDeviceGetPCIBusId);
  // cuda_runtime_api.h maps cudaGetDeviceProperties to its _v2 symbol (CUDA 12 and later).
  cudaError_t (*cudaGetDeviceProperties)(cudaDeviceProp*, int) =
      cudart->get<cudaError_t(cudaDeviceProp*, int)>("cudaGetDeviceProperties_v2");
  POOLRUN_NCCL_FN(ncclGetUniqueId);
  POOLRUN_NCCL_FN(ncclCommInitRank);
  POOLRUN_NCCL_FN(ncclCommFinalize);
  POOLRUN_NCCL_FN(ncclCommDestroy);
  POOLRUN_NCCL_FN(ncclCommGetAsyncError);
  POOLRUN_NCCL_FN(ncclGetErrorString);
  POOLRUN_NCCL_FN(ncclGetLastError);
  POOLRUN_NCCL_FN(ncclAllReduce);
  POOLRUN_NCCL_FN(ncclAllGather);
  POOLRUN_NCCL_FN(ncclReduceScatter);
  POOLRUN_NCCL_FN(ncclBroadcast);
#undef POOLRUN_CUDA_FN
#undef POOLRUN_NCCL_FN

  Api() {
    if (!*cudart) {
      missing = std::string(kCudart) + " not found (install the CUDA runtime or add it to LD_LIBRARY_PATH)";
    } else if (!*nccl) {
      missing = std::string(kNccl) + " not found (install NCCL or add it to LD_LIBRARY_PATH)";
    } else if (!cudaGetDeviceCount || !cudaSetDevice || !cudaMalloc || !cudaFree || !cudaMemcpy ||
               !cudaStreamCreateWithFlags || !cudaStreamSynchronize || !cudaStreamDestroy ||
               !cudaGetErrorString) {
      missing =
          std::string(kCudart) + " lacks a function the backend needs (an older CUDA than this build's?)";
    } else if (!ncclGetUniqueId || !ncclCommInitRank || !ncclCommFinalize || !ncclCommDestroy ||
               !ncclCommGetAsyncError || !ncclGetErrorString || !ncclGetLastError || !ncclAllReduce ||
               !ncclAllGather || !ncclReduceScatter || !ncclBroadcast) {
      missing = std::string(kNccl) + " lacks a function the backend needs (NCCL 2.14 or later is required)";
    }
  }
};

const Api& api() {
  static const Api loaded;
  return loaded;
}

ncclDataType_t ncclType(DataType type) {
  switch (type) {
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUint8:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kUint32:
      return ncclUint32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUint64:
      return ncclUint64;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
  }
  return ncclInt8;
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

std::string describe(const char* what, size_t count, DataType type, const ReduceOp* op) {
  std::string s = std::string(what) + " of " + std::to_string(count) + " " + std::string(toString(type));
  if (op != nullptr) s += " (" + std::string(toString(*op)) + ")";
  return s;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm parent, int device) : device_(device) {
    MPI_Comm_rank(parent, &rank_);
    MPI_Comm_size(parent, &size_);
    cuda(api().cudaSetDevice(device_), "select CUDA device " + std::to_string(device_));
    // Rank 0 says whether it has an id, so that the others fail with it instead of waiting.
    struct {
      ncclUniqueId id;
      int ok;
    } boot{};
    ncclResult_t made = rank_ == 0 ? api().ncclGetUniqueId(&boot.id) : ncclSuccess;
    boot.ok = made == ncclSuccess ? 1 : 0;
    if (MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, parent) != MPI_SUCCESS)
      throw CollectiveError(rank_, "NCCL bootstrap", "broadcasting the unique id over MPI failed");
    if (rank_ == 0) nccl(made, "ncclGetUniqueId");
    if (boot.ok == 0) throw CollectiveError(rank_, "NCCL bootstrap", "rank 0 could not make the unique id");
    ncclUniqueId id = boot.id;
    nccl(api().ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    cuda(api().cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "create a CUDA stream");
    MPI_Comm_dup(parent, &mpi_);
  }
  ~NcclCommunicator() override {
    if (stream_ != nullptr) api().cudaStreamSynchronize(stream_);
    if (comm_ != nullptr) {
      api().ncclCommFinalize(comm_);
      api().ncclCommDestroy(comm_);
    }
    if (stream_ != nullptr) api().cudaStreamDestroy(stream_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  Backend backend() const override { return Backend::kNccl; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void* allocate(size_t bytes) override {
    void* p = nullptr;
    cuda(api().cudaMalloc(&p, std::max<size_t>(bytes, 1)),
         "allocate " + std::to_string(bytes) + " bytes on the GPU");
    return p;
  }
  void release(void* buffer) noexcept override { api().cudaFree(buffer); }
  void copyIn(void* buffer, const void* host, size_t bytes) override {
    cuda(api().cudaMemcpy(buffer, host, bytes, cudaMemcpyHostToDevice), "copy to the GPU");
  }
  void copyOut(void* host, const void* buffer, size_t bytes) override {
    synchronize();
    cuda(api().cudaMemcpy(host, buffer, bytes, cudaMemcpyDeviceToHost), "copy from the GPU");
  }

  void allReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) override {
    nccl(api().ncclAllReduce(send, recv, count, ncclType(type), ncclOp(op), comm_, stream_),
         describe("allreduce", count, type, &op));
  }
  void allGather(const void* send, void* recv, size_t sendCount, DataType type) override {
    nccl(api().ncclAllGather(send, recv, sendCount, ncclType(type), comm_, stream_),
         describe("allgather", sendCount, type, nullptr));
  }
  void reduceScatter(const void* send, void* recv, size_t recvCount, DataType type, ReduceOp op) override {
    nccl(api().ncclReduceScatter(send, recv, recvCount, ncclType(type), ncclOp(op), comm_, stream_),
         describe("reduce-scatter", recvCount, type, &op));
  }
  void broadcast(const void* send, void* recv, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size_) {
      throw CollectiveError(
          rank_, "broadcast",
          "root " + std::to_string(root) + " is not a rank (0-" + std::to_string(size_ - 1) + ")");
    }
    nccl(api().ncclBroadcast(send, recv, count, ncclType(type), root, comm_, stream_),
         describe("broadcast", count, type, nullptr));
  }
  void barrier() override {
    synchronize();
    if (MPI_Barrier(mpi_) != MPI_SUCCESS) throw CollectiveError(rank_, "barrier", "MPI_Barrier failed");
  }
  void synchronize() override {
    cuda(api().cudaStreamSynchronize(stream_), "synchronize the CUDA stream");
    ncclResult_t async = ncclSuccess;
    api().ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess) nccl(async, "a collective enqueued earlier");
  }

 private:
  void cuda(cudaError_t rc, const std::string& what) const {
    if (rc != cudaSuccess) {
      throw CollectiveError(
          rank_, what,
          std::string(api().cudaGetErrorString(rc)) + " (CUDA device " + std::to_string(device_) + ")");
    }
  }
  void nccl(ncclResult_t rc, const std::string& what) const {
    if (rc == ncclSuccess || rc == ncclInProgress) return;
    std::string reason = api().ncclGetErrorString(rc);
    if (const char* last = api().ncclGetLastError(comm_); last != nullptr && *last != '\0')
      reason += ": " + std::string(last);
    throw CollectiveError(rank_, what, reason + " (run with NCCL_DEBUG=WARN for NCCL's own account)");
  }

  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  MPI_Comm mpi_ = MPI_COMM_NULL;
};

}  // namespace

std::unique_ptr<Communicator> makeNcclCommunicator(MPI_Comm comm, int device) {
  return std::make_unique<NcclCommunicator>(comm, device);
}

int cudaDeviceCount(std::string* reason) {
  if (!api().missing.empty()) {
    if (reason != nullptr) *reason = api().missing;
    return 0;
  }
  int n = 0;
  cudaError_t rc = api().cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (reason != nullptr) *reason = api().cudaGetErrorString(rc);
    return 0;
  }
  if (n == 0 && reason != nullptr) *reason = "CUDA sees no device";
  return n;
}

std::string cudaDeviceLabel(int device) {
  char bus[32] = {};
  if (!api().missing.empty() || api().cudaDeviceGetPCIBusId == nullptr ||
      api().cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess)
    return "[unknown]";
  // "0000:07:00.0" -> "0000:07:00", as nccl-tests prints it.
  std::string address(bus);
  if (size_t dot = address.rfind('.'); dot != std::string::npos) address.resize(dot);
  for (char& c : address) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string label = "[" + address + "]";
  cudaDeviceProp prop{};
  if (api().cudaGetDeviceProperties != nullptr && api().cudaGetDeviceProperties(&prop, device) == cudaSuccess)
    label += " " + std::string(prop.name, strnlen(prop.name, sizeof prop.name));
  return label;
}

}  // namespace poolrun::runtime::detail
