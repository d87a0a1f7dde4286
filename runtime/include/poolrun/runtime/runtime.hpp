#pragma once

// libpoolrun_runtime: what a C++ program links to run collectives as poolrun planned them.
//
//   poolrun::runtime::Runtime rt(&argc, &argv);        // MPI, then NCCL where a GPU is
//   auto& comm = rt.world();
//   poolrun::runtime::Buffer grad(comm, n * sizeof(float));
//   comm.allReduce(grad.data(), grad.data(), n, DataType::kFloat32, ReduceOp::kSum);
//   comm.synchronize();
//
// The rank's identity comes from MPI and the variables its plan gave it (RankInfo). The NCCL
// communicator is bootstrapped over MPI: rank 0 makes the unique id and broadcasts it.

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "poolrun/runtime/communicator.hpp"
#include "poolrun/runtime/rank_info.hpp"

namespace poolrun::runtime {

enum class BackendChoice { kAuto, kMpi, kNccl };
// "auto" | "mpi" | "nccl"; throws poolrun::Error (kBadInput) naming any other text.
BackendChoice backendChoiceFromString(std::string_view text);

struct RuntimeOptions {
  BackendChoice backend = BackendChoice::kAuto;  // auto: NCCL where this rank sees a GPU, else MPI
  std::ostream* log = nullptr;                   // rank 0's notes (which backend and why); nullptr: stderr
};

// Whether this build has the NCCL backend, and the GPUs this process sees (0 without CUDA).
bool ncclBuilt();
int visibleGpus();

// What a rank runs on, as nccl-tests' "# Using devices" lines name it.
struct RankDevice {
  int pid = 0;
  int device = -1;    // the CUDA device of the NCCL backend; -1: host buffers (MPI backend)
  std::string label;  // "[0000:07:00] NVIDIA H100 80GB HBM3", or "host memory"
};

class Runtime {
 public:
  // Initialises MPI (unless the program did) and the world communicator. Throws poolrun::Error:
  // kUnsupported for --backend nccl without a GPU or without NCCL in this build, kBadInput when the
  // rank's variables contradict MPI (see rankInfo), CollectiveError when NCCL cannot start.
  Runtime(int* argc, char*** argv, const RuntimeOptions& options = {});
  // Destroys the communicators, then finalises MPI if this object initialised it. When it goes
  // because an exception is leaving its scope, it does neither: the process then ends without
  // MPI_Finalize and mpirun ends the job, rather than leave the other ranks waiting.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RankInfo& info() const { return info_; }
  Communicator& world() { return *world_; }
  // The node of every rank (POOLRUN_NODE, else the host name), indexed by rank.
  const std::vector<std::string>& nodes() const { return nodes_; }
  // The process and device of every rank, indexed by rank.
  const std::vector<RankDevice>& devices() const { return devices_; }
  // One line for the log: "NCCL backend on GPU 0 (CUDA device 0)" or "MPI backend (host buffers): ...".
  const std::string& description() const { return description_; }

 private:
  void gatherDevices(const RankDevice& mine, int size);

  RankInfo info_;
  std::vector<std::string> nodes_;
  std::vector<RankDevice> devices_;
  std::string description_;
  std::unique_ptr<Communicator> world_;
  bool finalize_ = false;
};

}  // namespace poolrun::runtime
