// GPU tier: the NCCL backend on this machine's GPUs: every collective checked, and the allreduce
// benchmark with #wrong 0. Skipped with a reason where there is no GPU.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "poolrun/runtime/runtime.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

// Why the GPU tests cannot run here; empty where they can.
std::string noGpu() {
  if (!poolrun::runtime::ncclBuilt()) return "this build has no NCCL backend";
  if (poolrun::runtime::visibleGpus() == 0)
    return "no CUDA GPU on this machine (cudaGetDeviceCount found none)";
  return "";
}

std::string asRoot() {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
}

TEST(NcclBackendTest, EveryCollectiveOnOneGpu) {
  if (std::string why = noGpu(); !why.empty()) GTEST_SKIP() << why;
  auto r = poolrun::test::runShell(asRoot() + "timeout 300 " + COLLECTIVES_CHECK + " --backend nccl");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("collectives OK (NCCL backend"), std::string::npos) << r.out << r.err;
}

TEST(NcclBackendTest, AllreduceBenchOnEveryGpuOfThisMachine) {
  if (std::string why = noGpu(); !why.empty()) GTEST_SKIP() << why;
  int gpus = poolrun::runtime::visibleGpus();
  auto r = poolrun::test::runShell(asRoot() + "timeout 300 mpirun -np " + std::to_string(gpus) + " " +
                                   ALLREDUCE_BENCH + " --backend nccl -b 8 -e 64M -f 4 -n 5 -w 2");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out << r.err;
}

TEST(NcclBackendTest, DataParallelOnOneGpuMatchesTheCpu) {
  if (std::string why = noGpu(); !why.empty()) GTEST_SKIP() << why;
  poolrun::test::TempDir tmp;
  std::string gpu = (tmp.path() / "gpu.json").string(), cpu = (tmp.path() / "cpu.json").string();
  auto g = poolrun::test::runShell(asRoot() + DATA_PARALLEL + " --backend nccl --steps 100 --out " + gpu);
  auto c = poolrun::test::runShell(asRoot() + DATA_PARALLEL + " --backend mpi --steps 100 --out " + cpu);
  ASSERT_EQ(g.status, 0) << g.err;
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(nlohmann::json::parse(poolrun::test::slurp(gpu))["weights"],
            nlohmann::json::parse(poolrun::test::slurp(cpu))["weights"]);
}

}  // namespace
