// GPU tier: NCCL itself loads the NCCL topology XML that poolrun writes for this machine
// (NCCL_TOPO_FILE), and the topology NCCL then dumps (NCCL_TOPO_DUMP_FILE) has the same GPUs, NICs
// and paths. Skipped with a reason where there is no GPU.

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdlib>
#include <fstream>

#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/writers.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::topo {
namespace {

int gpuCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

TEST(NcclLoadsOurTopology, DumpMatchesWhatWeWrote) {
  int n = gpuCount();
  if (n == 0) GTEST_SKIP() << "no CUDA GPU on this machine (cudaGetDeviceCount found none)";
  NodeTopology live = probeLive();
  ASSERT_EQ(static_cast<int>(live.gpus.size()), n) << "the prober and CUDA disagree on the GPU count";
  poolrun::test::TempDir tmp;
  std::filesystem::path ours = tmp.write("ours.xml", toNcclXml(live));
  std::filesystem::path dump = tmp.path() / "dump.xml";
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
  setenv("NCCL_TOPO_FILE", ours.c_str(), 1);
  setenv("NCCL_TOPO_DUMP_FILE", dump.c_str(), 1);
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  unsetenv("NCCL_TOPO_FILE");
  unsetenv("NCCL_TOPO_DUMP_FILE");
  ASSERT_TRUE(std::filesystem::exists(dump)) << "NCCL wrote no dump";
  NodeTopology back = readNcclXml(dump);
  ASSERT_EQ(back.gpus.size(), live.gpus.size());
  for (size_t g = 0; g < live.gpus.size(); ++g) {
    EXPECT_EQ(back.gpus[g].pci, live.gpus[g].pci);
    for (size_t h = 0; h < live.gpus.size(); ++h) {
      if (g != h) {
        EXPECT_EQ(back.gpuToGpu(int(g), int(h)).type, live.gpuToGpu(int(g), int(h)).type);
      }
    }
  }
  // NCCL lists the NICs its network plugin found active; each of them must be one we wrote.
  for (const Nic& nic : back.nics) {
    EXPECT_NE(live.nicByName(nic.name), nullptr) << "NCCL found " << nic.name << ", which the prober did not";
  }
}

}  // namespace
}  // namespace poolrun::topo
