#pragma once

// The backends behind Communicator, made by Runtime.

#include <mpi.h>

#include <memory>

#include "poolrun/runtime/communicator.hpp"

namespace poolrun::runtime::detail {

// Collectives with MPI on host buffers; `comm` is duplicated and owned.
std::unique_ptr<Communicator> makeMpiCommunicator(MPI_Comm comm);

#ifdef POOLRUN_HAVE_NCCL
// Collectives with NCCL on CUDA device `device`, the unique id broadcast over `comm` from rank 0.
std::unique_ptr<Communicator> makeNcclCommunicator(MPI_Comm comm, int device);
int cudaDeviceCount(std::string* reason);
// "[0000:07:00] NVIDIA H100 80GB HBM3": the device's PCI address and name, as nccl-tests prints
// them; "[unknown]" where CUDA cannot tell.
std::string cudaDeviceLabel(int device);
#endif

}  // namespace poolrun::runtime::detail
