// Table-driven placement: a compact inventory, a request, the GPUs it must get.

#include <gtest/gtest.h>

#include "inventory.hpp"
#include "poolrun/pool/placement.hpp"

namespace poolrun::pool {
namespace {

using test::addInventory;
using test::gpuList;
using test::parseRequest;

struct PlacementCase {
  const char* name;
  const char* inventory;
  const char* request;
  const char* expected;  // GPU list; "-" does not fit now; "never" can never fit
};

const PlacementCase kCases[] = {
    {"first node, one NUMA half", "n[01-04]/gpu[0-7]", "4", "n01:0-3"},
    {"best fit fills a partly used node", "n[01-04]/gpu[0-7]; n01 leased 0-3", "4", "n01:4-7"},
    {"one node rather than two", "n[01-04]/gpu[0-7]; n01 leased 0-5", "4", "n02:0-3"},
    {"tightest partly used node", "n[01-04]/gpu[0-7]; n01 leased 0-5; n02 leased 0-3", "2", "n01:6-7"},
    {"two PCIe-switch neighbours", "n[01-02]/gpu[0-7]", "2", "n01:0-1"},
    {"fewest nodes, no waste", "n[01-04]/gpu[0-7]; n01 leased 0-3", "12", "n01:4-7 n02:0-7"},
    {"partly used nodes keep whole ones free",
     "n[01-04]/gpu[0-7]; n01 leased 0-1; n02 leased 0-1; n03 leased 0-3", "12", "n01:2-7 n02:2-7"},
    {"one leaf switch when it fits there", "n[01-02]/gpu[0-7]@leaf1; n[03-06]/gpu[0-7]@leaf2; n01 leased 0-7",
     "16", "n03:0-7 n04:0-7"},
    {"across switches when no switch has room", "n[01-02]/gpu[0-7]@leaf1; n[03-04]/gpu[0-7]@leaf2", "24",
     "n01:0-7 n02:0-7 n03:0-7"},
    {"one-switch constraint", "n[01-02]/gpu[0-7]@leaf1; n[03-04]/gpu[0-7]@leaf2", "24 one-switch", "never"},
    {"one-switch picks the switch with room",
     "n[01-02]/gpu[0-7]@leaf1; n[03-05]/gpu[0-7]@leaf2; n03 leased 0-1", "20 one-switch",
     "n03:4-7 n04:0-7 n05:0-7"},
    {"gpus per node", "n[01-04]/gpu[0-7]; n01 leased 0-3", "8 ppn=4", "n01:4-7 n02:0-3"},
    {"gpus per node skips nodes with too few", "n[01-03]/gpu[0-7]; n01 leased 0-5", "8 ppn=4",
     "n02:0-3 n03:0-3"},
    {"whole nodes", "n[01-04]/gpu[0-7]; n01 leased 0", "16 whole", "n02:0-7 n03:0-7"},
    {"whole nodes never on a node with a failed GPU", "n[01-02]/gpu[0-7]; n01 failed 3", "16 whole", "never"},
    {"never a failed GPU or a draining node", "n[01-03]/gpu[0-7]; n01 failed 0-7; n02 draining", "4",
     "n03:0-3"},
    {"never a down node", "n[01-02]/gpu[0-7]; n02 down", "12", "never"},
    {"draining capacity may come back: waits", "n[01-02]/gpu[0-7]; n02 draining", "12", "-"},
    {"GPU model", "n[01-02]/gpu[0-7] model=A100; n[03-04]/gpu[0-7] model=H100", "4 model=H100", "n03:0-3"},
    {"GPU memory", "n01/gpu[0-7] mem=40; n02/gpu[0-7] mem=80", "2 mem=80", "n02:0-1"},
    {"labels", "n01/gpu[0-7] label=rack:r1; n02/gpu[0-7] label=rack:r2", "2 label=rack:r2", "n02:0-1"},
    {"all or nothing: not now", "n[01-02]/gpu[0-7]; n01 leased 0-7", "10", "-"},
    {"never more than the pool", "n[01-02]/gpu[0-7]", "17", "never"},
    {"never a GPU in MIG mode, nor one switching to it", "n01/gpu[0-7] mig=0-1 mig-after-reset=7", "5",
     "n01:2-6"},
    {"GPUs in MIG mode do not count towards a whole-GPU request", "n01/gpu[0-7] mig=0-1 mig-after-reset=7",
     "6", "never"},
    {"whole nodes never on a node with a GPU in MIG mode", "n01/gpu[0-7] mig=3; n02/gpu[0-7]", "8 whole",
     "n02:0-7"},
    // MIG instances: units 8-14 are GPU 0's seven, 15-21 GPU 1's (UUIDs MIG-<GPU>-<GPU instance>).
    {"MIG: seven instances of one GPU", "n01/gpu[0-7] layout=0-1:1g.10gb*7", "7 mig=1g.10gb",
     "n01:MIG-0-1,MIG-0-2,MIG-0-3,MIG-0-4,MIG-0-5,MIG-0-6,MIG-0-7"},
    {"MIG: packed onto the GPU already in use", "n01/gpu[0-7] layout=0-1:1g.10gb*7; n01 leased 8-12",
     "2 mig=1g.10gb", "n01:MIG-0-6,MIG-0-7"},
    {"MIG: onto a second GPU only for what the first cannot hold",
     "n01/gpu[0-7] layout=0-1:1g.10gb*7; n01 leased 8-12", "9 mig=1g.10gb",
     "n01:MIG-0-6,MIG-0-7,MIG-1-1,MIG-1-2,MIG-1-3,MIG-1-4,MIG-1-5,MIG-1-6,MIG-1-7"},
    {"MIG: fewest nodes", "n[01-02]/gpu[0-7] layout=0:1g.10gb*7; n01 leased 8-12", "3 mig=1g.10gb",
     "n02:MIG-0-1,MIG-0-2,MIG-0-3"},
    {"MIG: another profile never", "n01/gpu[0-7] layout=0:1g.10gb*7", "1 mig=3g.40gb", "never"},
    {"MIG: PROFILE+ takes a larger one", "n01/gpu[0-7] layout=0:3g.40gb*2", "1 mig=1g.10gb+", "n01:MIG-0-1"},
    {"MIG: PROFILE+ takes the smallest that will do", "n01/gpu[0-7] layout=0:3g.40gb*1+1g.20gb*2",
     "1 mig=1g.10gb+", "n01:MIG-0-2"},
    {"MIG: PROFILE+ never a smaller one", "n01/gpu[0-7] layout=0:1g.10gb*7", "1 mig=2g.20gb+", "never"},
    {"MIG: instance memory", "n01/gpu[0-7] layout=0:1g.10gb*1+1g.20gb*1", "1 mig=1g.10gb+ mem=15",
     "n01:MIG-0-2"},
    {"MIG: a whole-GPU request never takes an instance", "n01/gpu[0-1] layout=0:1g.10gb*7", "2", "never"},
    {"MIG: a whole-GPU request takes the GPU not in MIG mode", "n01/gpu[0-1] layout=0:1g.10gb*7", "1",
     "n01:1"},
    {"MIG: a MIG request never takes a whole GPU", "n01/gpu[0-7]", "1 mig=1g.10gb", "never"},
    {"MIG: never an instance of a failed GPU", "n01/gpu[0-7] layout=0-1:1g.10gb*7; n01 failed 0",
     "7 mig=1g.10gb", "n01:MIG-1-1,MIG-1-2,MIG-1-3,MIG-1-4,MIG-1-5,MIG-1-6,MIG-1-7"},
    {"MIG: the instances of a failed GPU do not count", "n01/gpu[0-7] layout=0-1:1g.10gb*7; n01 failed 0",
     "8 mig=1g.10gb", "never"},
    {"MIG: all held: waits", "n01/gpu[0-7] layout=0:1g.10gb*7; n01 leased 8-14", "1 mig=1g.10gb", "-"},
    // MPS shares: one per GPU of the job, packed beside the owner's shares, never beside a whole
    // lease, another owner's shares or a MIG instance.
    {"MPS: a share of a free GPU, its memory the same part", "n01/gpu[0-3]", "1 share=0.25",
     "n01:0(25% 20 GiB)"},
    {"MPS: memory alone leaves the SMs unlimited", "n01/gpu[0-3]", "1 gpumem=10G", "n01:0(10 GiB)"},
    {"MPS: packed beside the owner's shares", "n01/gpu[0-3]; n01 leased 2 share=25 owner=alice",
     "1 share=0.5", "n01:2(50% 40 GiB)"},
    {"MPS: the fullest GPU of the owner's first",
     "n01/gpu[0-3]; n01 leased 1 share=25 owner=alice; "
     "n01 leased 3 share=50 owner=alice",
     "1 share=0.25", "n01:3(25% 20 GiB)"},
    {"MPS: never beside another owner's shares", "n01/gpu[0-1]; n01 leased 0 share=25 owner=bob",
     "1 share=0.25", "n01:1(25% 20 GiB)"},
    {"MPS: a GPU's shares add up to its SMs at most", "n01/gpu[0]; n01 leased 0 share=80 owner=alice",
     "1 share=0.25", "-"},
    {"MPS: and to its memory", "n01/gpu[0]; n01 leased 0 share=10:70 owner=alice", "1 gpumem=20G", "-"},
    {"MPS: one share of a job per GPU", "n01/gpu[0-1]", "3 share=0.25", "never"},
    {"MPS: fewest nodes", "n[01-02]/gpu[0-1]; n01 leased 0", "2 share=0.5",
     "n02:0(50% 40 GiB),1(50% 40 GiB)"},
    {"MPS: across nodes where no node has room", "n[01-02]/gpu[0-1]; n01 leased 0; n02 leased 1",
     "2 share=0.5", "n01:1(50% 40 GiB) n02:0(50% 40 GiB)"},
    {"MPS: never a GPU a whole lease holds", "n01/gpu[0-1]; n01 leased 0", "2 share=0.25", "-"},
    {"MPS: never a GPU in MIG mode", "n01/gpu[0-1] mig=0", "2 share=0.25", "never"},
    {"MPS: never more memory than a GPU has", "n01/gpu[0-1]", "1 gpumem=100G", "never"},
    {"MPS: GPU memory as a constraint too", "n01/gpu[0-1] mem=40; n02/gpu[0-1] mem=80", "2 share=0.5 mem=80",
     "n02:0(50% 40 GiB),1(50% 40 GiB)"},
    {"MPS: a whole-GPU request never takes a shared GPU", "n01/gpu[0-1]; n01 leased 0 share=25 owner=alice",
     "2", "-"},
    {"MPS: a whole-GPU request takes the GPU without shares", "n01/gpu[0-1]; n01 leased 0 share=25", "1",
     "n01:1"},
    // MIG, MPS and whole GPUs on one node: GPU 0 in MIG mode, GPU 1 held whole, GPU 2 half shared by
    // alice, GPU 3 free. Each kind of request takes only what is its kind.
    {"mixed: shares beside alice's and on the free GPU",
     "n01/gpu[0-3] layout=0:1g.10gb*7; n01 leased 1; n01 leased 2 share=50 owner=alice", "2 share=0.5",
     "n01:2(50% 40 GiB),3(50% 40 GiB)"},
    {"mixed: a MIG instance of GPU 0", "n01/gpu[0-3] layout=0:1g.10gb*7; n01 leased 1; n01 leased 2 share=50",
     "1 mig=1g.10gb", "n01:MIG-0-1"},
    {"mixed: the one whole GPU left", "n01/gpu[0-3] layout=0:1g.10gb*7; n01 leased 1; n01 leased 2 share=50",
     "1", "n01:3"},
    {"mixed: no second whole GPU", "n01/gpu[0-3] layout=0:1g.10gb*7; n01 leased 1; n01 leased 2 share=50",
     "2", "-"},
    {"mixed: bob's share never beside alice's",
     "n01/gpu[0-3] layout=0:1g.10gb*7; n01 leased 1; "
     "n01 leased 2 share=50 owner=alice",
     "2 share=0.25 owner=bob", "-"},
};

class PlacementTable : public ::testing::TestWithParam<PlacementCase> {};

TEST_P(PlacementTable, Places) {
  const PlacementCase& c = GetParam();
  PoolState state;
  TimePoint now = std::chrono::system_clock::now();
  addInventory(state, c.inventory, now);
  std::string got;
  try {
    SubmitResult r = state.submit(parseRequest(c.request), now, false);
    got = r.lease ? gpuList(r.lease->gpus) : "-";
    if (r.lease) {
      // The grant holds exactly those GPUs and no lease shares one.
      for (const GpuRef& g : r.lease->gpus) {
        if (!g.share) {
          EXPECT_EQ(*state.holder(g.node, g.index), r.lease->id);
        }
      }
    }
    EXPECT_EQ(state.checkInvariants(), "");
  } catch (const PoolError& e) {
    ASSERT_EQ(e.failure(), PoolFailure::kNeverFits) << e.what();
    got = "never";
  }
  EXPECT_EQ(got, c.expected) << c.inventory << " | request " << c.request;
  EXPECT_TRUE(state.queueMap().empty()) << "a request that is not queued leaves no entry";
}

void PrintTo(const PlacementCase& c, std::ostream* os) {
  *os << c.name << ": " << c.inventory << " | request " << c.request << " -> " << c.expected;
}

INSTANTIATE_TEST_SUITE_P(Pool, PlacementTable, ::testing::ValuesIn(kCases), [](const auto& param_info) {
  std::string n;
  for (const char* p = param_info.param.name; *p; ++p) n += std::isalnum(*p) ? *p : '_';
  return n;
});

// A GPU in MIG mode (or switching to it at its next reset) is `mig`, counted apart, never free.
TEST(Placement, GpusInMigModeAreShownAndCountedApart) {
  PoolState state;
  addInventory(state, "n01/gpu[0-3] mig=0 mig-after-reset=1", std::chrono::system_clock::now());
  EXPECT_EQ(state.gpuState("n01", 0), GpuState::kMig);
  EXPECT_EQ(state.gpuState("n01", 1), GpuState::kMig);
  EXPECT_EQ(state.gpuState("n01", 2), GpuState::kFree);
  EXPECT_EQ(toString(GpuState::kMig), "mig");
  PoolStatus s = state.status();
  EXPECT_EQ(s.gpus_mig, 2);
  EXPECT_EQ(s.gpus_free, 2);
  try {
    state.submit(parseRequest("3"), std::chrono::system_clock::now(), false);
    ADD_FAILURE() << "3 GPUs granted from 2 whole ones";
  } catch (const PoolError& e) {
    EXPECT_NE(
        std::string(e.what()).find("the pool has 2 usable GPUs that match it (and 2 in MIG mode, which no "
                                   "whole-GPU request takes)"),
        std::string::npos)
        << e.what();
  }
}

TEST(Placement, TenThousandGpusUnderAMillisecondScale) {
  // Not a timing assertion (that is the benchmark's job): 1,250 nodes place correctly.
  PoolState state;
  TimePoint now = std::chrono::system_clock::now();
  addInventory(state, "n[0001-0625]/gpu[0-7]@leaf1; n[0626-1250]/gpu[0-7]@leaf2; n0007 leased 0-4", now);
  SubmitResult r = state.submit(parseRequest("3"), now, false);
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(gpuList(r.lease->gpus), "n0007:5-7");
  r = state.submit(parseRequest("5000"), now, false);
  ASSERT_TRUE(r.lease);
  EXPECT_EQ(r.lease->gpus.size(), 5000u);
  std::set<std::string> switches;
  for (const GpuRef& g : r.lease->gpus) switches.insert(g.node <= "n0625" ? "leaf1" : "leaf2");
  EXPECT_EQ(switches.size(), 1u) << "5,000 GPUs fit under leaf2 (exactly 5,000 free there)";
}

TEST(Placement, RequestValidation) {
  PoolState state;
  TimePoint now = std::chrono::system_clock::now();
  addInventory(state, "n[01-02]/gpu[0-7]", now);
  for (const char* bad : {"0", "6 ppn=4", "8 ppn=4 whole"}) {
    try {
      state.submit(parseRequest(bad), now);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput) << bad;
      EXPECT_NE(std::string(e.what()).find("bad lease request"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace poolrun::pool
