// Every kind of pool says where the ranks of its leases run, which is all the launcher learns of
// the pool's kind (it never reads the URI).

#include <gtest/gtest.h>

#include "poolrun/pool/client.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/lsan_interface.h>
#define POOLRUN_LSAN 1
#endif
#endif

namespace poolrun::pool {
namespace {

// The local pool probes this machine when it opens: hwloc's PCI plugin (libpciaccess) keeps what
// it allocates, and hwloc unloads the plugin at the end, so LeakSanitizer could not even name the
// library. Not poolrun's memory: left out of leak checking, and only here.
std::unique_ptr<PoolClient> openLocal(const ClientOptions& options) {
#ifdef POOLRUN_LSAN
  __lsan::ScopedDisabler thirdPartyProbe;
#endif
  return openPool("local", options);
}

TEST(RankSiteTest, EveryPoolSaysWhereItsRanksRun) {
  test::TempDir tmp;
  ClientOptions options;
  options.state_dir = tmp.path().string();
  const std::string cluster = (test::sourceDir() / "clusters" / "sim-ib.toml").string();
  // Opening touches nothing remote: http connects at the first call, Slurm runs nothing yet.
  EXPECT_EQ(openLocal(options)->rankSite(), RankSite::kThisMachine);
  EXPECT_EQ(openPool("sim:" + cluster, options)->rankSite(), RankSite::kSimulated);
  EXPECT_EQ(openPool("http://127.0.0.1:1", options)->rankSite(), RankSite::kRemoteNodes);
  EXPECT_EQ(openPool("slurm", options)->rankSite(), RankSite::kSlurmAllocation);
  EXPECT_EQ(openPool("slurm:gpu", options)->rankSite(), RankSite::kSlurmAllocation);
}

TEST(RankSiteTest, SimClusterFileOfAUri) {
  EXPECT_EQ(simClusterFile("sim:clusters/a.toml"), "clusters/a.toml");
  EXPECT_EQ(simClusterFile("sim:"), "");
  EXPECT_EQ(simClusterFile("local"), std::nullopt);
  EXPECT_EQ(simClusterFile("http://h:1"), std::nullopt);
  EXPECT_EQ(simClusterFile("slurm:sim"), std::nullopt);
}

}  // namespace
}  // namespace poolrun::pool
