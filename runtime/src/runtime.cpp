#include "poolrun/runtime/runtime.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <iostream>

#include "backends.hpp"

namespace poolrun::runtime {
namespace {

constexpr size_t kNodeNameBytes = 64;

std::string thisNode() {
  if (const char* n = std::getenv("POOLRUN_NODE"); n != nullptr && *n != '\0') return n;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

BackendChoice backendChoiceFromString(std::string_view text) {
  if (text == "auto") return BackendChoice::kAuto;
  if (text == "mpi") return BackendChoice::kMpi;
  if (text == "nccl") return BackendChoice::kNccl;
  throw badInput("backend '" + std::string(text) + "': use nccl, mpi or auto");
}

bool ncclBuilt() {
#ifdef POOLRUN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

int visibleGpus() {
#ifdef POOLRUN_HAVE_NCCL
  return detail::cudaDeviceCount(nullptr);
#else
  return 0;
#endif
}

void Runtime::gatherDevices(const RankDevice& mine, int size) {
  struct Record {
    int32_t pid;
    int32_t device;
    char label[120];
  } record{mine.pid, mine.device, {}};
  std::memcpy(record.label, mine.label.data(), std::min(mine.label.size(), sizeof record.label - 1));
  std::vector<Record> all(static_cast<size_t>(size));
  MPI_Allgather(&record, sizeof record, MPI_BYTE, all.data(), sizeof record, MPI_BYTE, MPI_COMM_WORLD);
  for (const Record& r : all)
    devices_.push_back({r.pid, r.device, std::string(r.label, strnlen(r.label, sizeof r.label))});
}

Runtime::Runtime(int* argc, char*** argv, const RuntimeOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      throw Error(ErrorCode::kIo, "MPI_Init failed: start the program with poolrun or mpirun");
    finalize_ = true;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Environment env = processEnvironment();
  info_ = rankInfo(env);
  if (info_.rank != rank || info_.world_size != size) {
    throw badInput("rank " + std::to_string(rank) + " of " + std::to_string(size) +
                   ": the environment says RANK=" + std::to_string(info_.rank) +
                   " WORLD_SIZE=" + std::to_string(info_.world_size) +
                   " (stale variables from another launcher? unset them or start the job with poolrun)");
  }

  char mine[kNodeNameBytes] = {};
  std::string node = thisNode();
  std::memcpy(mine, node.data(), std::min(node.size(), kNodeNameBytes - 1));
  std::vector<char> all(kNodeNameBytes * static_cast<size_t>(size));
  MPI_Allgather(mine, kNodeNameBytes, MPI_CHAR, all.data(), kNodeNameBytes, MPI_CHAR, MPI_COMM_WORLD);
  for (int r = 0; r < size; ++r) nodes_.emplace_back(all.data() + kNodeNameBytes * static_cast<size_t>(r));

  std::string why;
  int gpus = 0;
#ifdef POOLRUN_HAVE_NCCL
  gpus = options.backend == BackendChoice::kMpi ? 0 : detail::cudaDeviceCount(&why);
#else
  why = "this build has no NCCL (CUDA and NCCL were not found when it was configured)";
#endif
  // Every rank must choose the same backend: the job uses NCCL only where every rank sees a GPU.
  int local = gpus > 0 ? 1 : 0, everywhere = 0;
  MPI_Allreduce(&local, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (everywhere == 0 && local == 1) why = "another rank sees no GPU";
  if (!why.empty() && gpus == 0 && why.find("build") == std::string::npos) why = "CUDA: " + why;
  if (options.backend == BackendChoice::kNccl && everywhere == 0) {
    throw Error(ErrorCode::kUnsupported, "rank " + std::to_string(rank) +
                                             ": the NCCL backend needs a GPU on every rank (" +
                                             (why.empty() ? "none here" : why) + "); use --backend mpi");
  }
  if (options.backend != BackendChoice::kMpi && everywhere == 1) {
#ifdef POOLRUN_HAVE_NCCL
    // The plan leaves each rank one visible GPU; without a plan, ranks of a node share them in turn.
    int device = gpus == 1 ? 0 : info_.local_rank % gpus;
    world_ = detail::makeNcclCommunicator(MPI_COMM_WORLD, device);
    description_ = "NCCL backend (GPU buffers) on CUDA device " + std::to_string(device) + " of " +
                   std::to_string(gpus) + " visible";
#endif
  } else {
    world_ = detail::makeMpiCommunicator(MPI_COMM_WORLD);
    description_ = "MPI backend (host buffers)";
    if (options.backend == BackendChoice::kAuto) description_ += ": no usable GPU (" + why + ")";
  }
  RankDevice me{static_cast<int>(getpid()), -1, "host memory"};
#ifdef POOLRUN_HAVE_NCCL
  if (world_->backend() == Backend::kNccl) {
    me.device = gpus == 1 ? 0 : info_.local_rank % gpus;
    me.label = detail::cudaDeviceLabel(me.device);
  }
#endif
  gatherDevices(me, size);
  if (rank == 0) (options.log != nullptr ? *options.log : std::cerr) << "poolrun: " << description_ << "\n";
}

Runtime::~Runtime() {
  if (std::uncaught_exceptions() > 0) {
    // Leaving by an exception: other ranks may be waiting in a collective that this one will never
    // join. MPI stays initialised, so that this process ends without MPI_Finalize and mpirun ends
    // the whole job instead of leaving the others waiting.
    (void)world_.release();
    return;
  }
  world_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalize_ && !finalized) MPI_Finalize();
}

}  // namespace poolrun::runtime
