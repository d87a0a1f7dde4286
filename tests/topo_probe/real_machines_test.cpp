// The real-machines tier: every topology in ../shared/fixtures (or $POOLRUN_FIXTURES), checked
// against what the fixtures' README says about each machine, and round-tripped through the
// project's JSON and NCCL XML writers.

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/writers.hpp"
#include "support/fixtures.hpp"
#include "support/test_names.hpp"

namespace poolrun::topo {
namespace {

struct Machine {
  const char* file;  // relative to the fixtures folder
  size_t gpus;
  size_t nvidia_gpus;
  size_t nics;
  size_t numa_nodes;
  std::function<void(const NodeTopology&)> check;  // what the README says beyond the counts
};

size_t nicIndex(const NodeTopology& t, const std::string& name) {
  for (size_t i = 0; i < t.nics.size(); ++i) {
    if (t.nics[i].name == name) return i;
  }
  ADD_FAILURE() << "no NIC " << name;
  return 0;
}

std::string gpuNic(const NodeTopology& t, size_t gpu, const std::string& nic) {
  return t.gpuToNic(gpu, nicIndex(t, nic)).str();
}

size_t gpuByPci(const NodeTopology& t, const std::string& pci) {
  for (const Gpu& g : t.gpus) {
    if (g.pci.str() == pci) return g.index;
  }
  ADD_FAILURE() << "no GPU at " << pci;
  return 0;
}

// NICs that share a PCIe switch (PIX or PXB) with `gpu`.
std::vector<std::string> switchNics(const NodeTopology& t, size_t gpu) {
  std::vector<std::string> out;
  for (size_t n = 0; n < t.nics.size(); ++n) {
    PathType p = t.gpuToNic(gpu, n).type;
    if (p == PathType::kPIX || p == PathType::kPXB) out.push_back(t.nics[n].name);
  }
  return out;
}

const std::vector<Machine>& machines() {
  static const std::vector<Machine> kMachines = {
      {"hwloc-xml/hwloc_nvidiaDGX2.v2.xml", 16, 16, 0, 2,
       [](const NodeTopology& t) {
         EXPECT_TRUE(t.nvswitch);
         for (const Gpu& g : t.gpus) {
           EXPECT_EQ(g.device, 0x1db8);
           EXPECT_EQ(g.nvswitch_links, 6) << "GPU" << g.index << " links to the 6 NVSwitches of its board";
         }
         EXPECT_EQ(t.gpuToGpu(0, 15).str(), "NV6");
         // Two GPUs per PLX switch, two switches under a second level.
         EXPECT_EQ(t.pciPath(t.gpus[0].at, t.gpus[1].at).str(), "PIX");
         EXPECT_EQ(t.pciPath(t.gpus[0].at, t.gpus[2].at).str(), "PXB");
         EXPECT_EQ(t.pciPath(t.gpus[0].at, t.gpus[8].at).str(), "SYS");
       }},
      {"hwloc-xml/hwloc_power8gpudistances.v2.xml", 4, 4, 0, 2,
       [](const NodeTopology& t) {
         EXPECT_EQ(t.gpuToGpu(0, 1).str(), "NV2");
         EXPECT_EQ(t.gpuToGpu(2, 3).str(), "NV2");
         EXPECT_EQ(t.gpuToGpu(0, 2).str(), "SYS");
         // One GPU per PCI domain; NVLink to the CPU as well.
         EXPECT_NE(t.gpus[0].pci.domain, t.gpus[1].pci.domain);
         ASSERT_EQ(t.gpus[0].nvlinks.size(), 2u);
         EXPECT_EQ(t.gpus[0].nvlinks[1].peer, "cpu");
       }},
      {"hwloc-xml/hwloc_32em64t-2n8c2t-pci-normalio.v2.xml", 4, 3, 1, 2,
       [](const NodeTopology& t) {
         size_t amd = gpuByPci(t, "0000:84:00.1");
         EXPECT_FALSE(t.gpus[amd].isNvidia());
         EXPECT_EQ(t.gpus[amd].sm, 0);
         EXPECT_EQ(t.nics[0].name, "mlx5_0");
         EXPECT_EQ(t.nics[0].ports[0].link_layer, LinkLayer::kInfiniBand);
         EXPECT_EQ(t.nics[0].ports[0].state, PortState::kActive);
       }},
      {"hwloc-xml/hwloc_24em64t-2n6c2t-pci.v2.xml", 3, 3, 1, 2,
       [](const NodeTopology& t) {
         // A VPI ConnectX (class 0c06) with one InfiniBand and one Ethernet port on one function.
         const Nic& nic = t.nics[0];
         EXPECT_EQ(nic.name, "mlx4_0");
         EXPECT_EQ(nic.pci_class >> 8, 0x0c06u);
         ASSERT_EQ(nic.ports.size(), 2u);
         std::set<std::string> layers{toString(nic.ports[0].link_layer), toString(nic.ports[1].link_layer)};
         EXPECT_EQ(layers, (std::set<std::string>{"infiniband", "ethernet"}));
         for (const Gpu& g : t.gpus) EXPECT_EQ(g.device, 0x06d2);
       }},
      {"hwloc-xml/hwloc_doc_devel09-pci.xml", 0, 0, 1, 2,
       [](const NodeTopology& t) {
         EXPECT_EQ(t.nics[0].name, "mlx4_0");
         ASSERT_EQ(t.nics[0].ports.size(), 2u);
         EXPECT_EQ(t.nics[0].ports[0].netdev, "ib0");
         EXPECT_EQ(t.nics[0].ports[1].netdev, "ib1");
       }},
      {"hwloc-xml/psmgmt_topo.jrc0323.xml", 4, 4, 4, 8,
       [](const NodeTopology& t) {
         // Each NIC shares a PCIe switch with one GPU; GPUs on NUMA 1, 3, 5, 7.
         EXPECT_EQ(gpuNic(t, gpuByPci(t, "0000:03:00.0"), "mlx5_0"), "PIX");
         EXPECT_EQ(gpuNic(t, gpuByPci(t, "0000:44:00.0"), "mlx5_1"), "PIX");
         EXPECT_EQ(gpuNic(t, gpuByPci(t, "0000:84:00.0"), "mlx5_2"), "PIX");
         EXPECT_EQ(gpuNic(t, gpuByPci(t, "0000:c4:00.0"), "mlx5_3"), "PIX");
         for (const Gpu& g : t.gpus) {
           EXPECT_EQ(switchNics(t, g.index).size(), 1u);
           EXPECT_EQ(g.at.numa % 2, 1);
         }
         for (const Nic& n : t.nics) EXPECT_TRUE(n.ports[0].up()) << n.name;
       }},
      {"hwloc-xml/psmgmt_topo.jwc09n003.xml", 4, 4, 2, 2,
       [](const NodeTopology& t) {
         EXPECT_EQ(switchNics(t, 0), std::vector<std::string>{"mlx5_0"});
         EXPECT_EQ(switchNics(t, 1), std::vector<std::string>{"mlx5_0"});
         EXPECT_EQ(switchNics(t, 2), std::vector<std::string>{"mlx5_1"});
         EXPECT_EQ(switchNics(t, 3), std::vector<std::string>{"mlx5_1"});
         EXPECT_EQ(t.gpus[0].at.package, 0);
         EXPECT_EQ(t.gpus[3].at.package, 1);
       }},
      {"hwloc-xml/flux-core_ipa20.xml", 4, 4, 4, 8,
       [](const NodeTopology& t) {
         size_t lonely = gpuByPci(t, "0000:cb:00.0");
         EXPECT_TRUE(switchNics(t, lonely).empty()) << "GPU2 has no NIC nearby";
         for (size_t n = 0; n < t.nics.size(); ++n) EXPECT_EQ(t.gpuToNic(lonely, int(n)).str(), "SYS");
         // Only mlx5_0 is up.
         for (const Nic& n : t.nics) EXPECT_EQ(n.ports[0].up(), n.name == "mlx5_0") << n.name;
         EXPECT_EQ(t.nicByName("mlx5_0")->ports[0].netdev, "hsi0");
         EXPECT_FALSE(t.nvswitch);
         EXPECT_EQ(t.gpuToGpu(0, 3).str(), "NV6");
       }},
      {"hwloc-xml/flux-core_sierra.xml", 4, 4, 4, 6,
       [](const NodeTopology& t) {
         size_t cpuless = 0;
         for (const NumaNode& n : t.numa_nodes) cpuless += n.cpus.empty() ? 1 : 0;
         EXPECT_EQ(cpuless, 4u);
         for (const Nic& n : t.nics) {
           EXPECT_EQ(n.ports[0].link_layer, LinkLayer::kInfiniBand);
           EXPECT_TRUE(n.ports[0].up());
         }
       }},
      {"hwloc-xml/mpibind_cts1-pascal.xml", 2, 2, 1, 2,
       [](const NodeTopology& t) {
         EXPECT_EQ(t.gpus[0].at.numa, 0);
         EXPECT_EQ(t.gpus[1].at.numa, 0);
         EXPECT_EQ(gpuNic(t, 0, "mlx5_0"), "PIX");
         EXPECT_EQ(gpuNic(t, 1, "mlx5_0"), "PIX");
       }},
      {"hwloc-xml/mpibind_g4dnmetal.xml", 8, 8, 1, 2,
       [](const NodeTopology& t) {
         const Nic& efa = t.nics[0];
         EXPECT_EQ(efa.name, "rdmap197s0");
         EXPECT_EQ(efa.vendor, kVendorAmazon);
         EXPECT_EQ(efa.ports[0].link_layer, LinkLayer::kUnspecified);
         EXPECT_EQ(t.gpus[0].at.package, 0);
         EXPECT_EQ(t.gpus[7].at.package, 1);
       }},
      {"hwloc-xml/mpibind_epyc-corona.xml", 4, 0, 1, 8,
       [](const NodeTopology& t) {
         for (const Gpu& g : t.gpus) {
           EXPECT_EQ(g.vendor, kVendorAmd);
           EXPECT_FALSE(g.isNvidia());
           EXPECT_EQ(g.sm, 0);
         }
       }},
      {"nccl-topo/azure_ndv2-topo.xml", 8, 8, 1, 2,
       [](const NodeTopology& t) {
         EXPECT_EQ(t.nics[0].name, "pci:0101:00:00.0");
         EXPECT_EQ(t.nics[0].ports[0].link_layer, LinkLayer::kInfiniBand);
         EXPECT_EQ(gpuNic(t, 0, "pci:0101:00:00.0"), "PHB");
         EXPECT_EQ(gpuNic(t, 7, "pci:0101:00:00.0"), "SYS");
       }},
      {"nccl-topo/azure_ndv4-topo.xml", 8, 8, 8, 4,
       [](const NodeTopology& t) {
         for (const Gpu& g : t.gpus) EXPECT_EQ(switchNics(t, g.index).size(), 2u) << "GPU" << g.index;
         EXPECT_EQ(t.switches.size(), 4u);
       }},
      {"nccl-topo/azure_ncv4-topo.xml", 4, 4, 1, 4,
       [](const NodeTopology& t) {
         EXPECT_EQ(t.gpus[0].sm, 80);
         EXPECT_EQ(t.nics[0].name, "eth0");
         EXPECT_FALSE(t.nics[0].has_pci);
         EXPECT_EQ(t.nics[0].ports[0].link_layer, LinkLayer::kEthernet);
         EXPECT_EQ(t.gpuToGpu(0, 1).str(), "SYS");  // NVLinks to itself only
       }},
      {"nccl-topo/aws-ofi-nccl_p4d-24xl-topo.xml", 8, 8, 4, 2,
       [](const NodeTopology& t) {
         for (const Nic& n : t.nics) {
           EXPECT_EQ(n.vendor, kVendorAmazon);
           EXPECT_EQ(n.ports[0].link_layer, LinkLayer::kUnspecified);
         }
         for (const Gpu& g : t.gpus) EXPECT_EQ(switchNics(t, g.index).size(), 1u);
       }},
      {"nccl-topo/aws-ofi-nccl_p5.48xl-topo.xml", 0, 0, 0, 2,
       [](const NodeTopology& t) {
         EXPECT_EQ(t.switches.size(), 8u);
         ASSERT_EQ(t.warnings.size(), 1u);
         EXPECT_NE(t.warnings[0].find("32 <pci> devices have no class"), std::string::npos) << t.warnings[0];
       }},
      {"nccl-topo/aws-ofi-nccl_g5.48xl-topo.xml", 0, 0, 0, 2,
       [](const NodeTopology& t) {
         ASSERT_EQ(t.warnings.size(), 1u);
         EXPECT_NE(t.warnings[0].find("9 <pci> devices"), std::string::npos) << t.warnings[0];
       }},
      {"nccl-topo/simai_topo_8A100_4CX6.xml", 8, 8, 5, 2,
       [](const NodeTopology& t) {
         EXPECT_TRUE(t.nvswitch);
         EXPECT_EQ(t.gpuToGpu(0, 7).str(), "NV12");
         EXPECT_EQ(t.nics[0].name, "mlx5_bond_0");
         for (const Gpu& g : t.gpus) {
           EXPECT_EQ(g.sm, 80);
           auto near = switchNics(t, g.index);
           ASSERT_EQ(near.size(), 1u) << "GPU" << g.index;
           EXPECT_NE(near[0], "mlx5_bond_0") << "the frontend NIC is behind no GPU switch";
         }
         for (const Nic& n : t.nics) {
           EXPECT_EQ(n.ports[0].link_layer, LinkLayer::kEthernet);
           EXPECT_EQ(n.ports[0].rate_gbps, 200);
         }
       }},
  };
  return kMachines;
}

class RealMachines : public ::testing::TestWithParam<Machine> {};

TEST_P(RealMachines, MatchesTheReadme) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  const Machine& m = GetParam();
  NodeTopology t = readTopologyFile(dir / m.file);
  EXPECT_EQ(t.gpus.size(), m.gpus);
  size_t nvidia = 0;
  for (const Gpu& g : t.gpus) nvidia += g.isNvidia() ? 1 : 0;
  EXPECT_EQ(nvidia, m.nvidia_gpus);
  EXPECT_EQ(t.nics.size(), m.nics);
  EXPECT_EQ(t.numa_nodes.size(), m.numa_nodes);
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    EXPECT_EQ(t.gpus[i].index, static_cast<int>(i));
    if (i > 0) {
      EXPECT_LT(t.gpus[i - 1].pci, t.gpus[i].pci) << "GPUs in PCI bus order";
    }
  }
  m.check(t);
}

TEST_P(RealMachines, JsonRoundTripIsExact) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  NodeTopology t = readTopologyFile(dir / GetParam().file);
  NodeTopology back = fromJson(nlohmann::json::parse(toJson(t).dump()), "round-trip.json");
  back.source = t.source;
  back.warnings = t.warnings;
  EXPECT_EQ(back, t);
}

TEST_P(RealMachines, NcclXmlRoundTripKeepsDevicesAndPaths) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  NodeTopology t = readTopologyFile(dir / GetParam().file);
  NodeTopology back = readNcclXmlString(toNcclXml(t), "round-trip.xml");
  ASSERT_EQ(back.gpus.size(), t.gpus.size());
  ASSERT_EQ(back.nics.size(), t.nics.size());
  // NCCL's format has no host bridges: NODE reads back as PHB.
  auto nccl = [](Path p) { return p.type == PathType::kNODE ? Path{PathType::kPHB} : p; };
  for (size_t a = 0; a < t.gpus.size(); ++a) {
    EXPECT_EQ(back.gpus[a].pci, t.gpus[a].pci);
    EXPECT_EQ(back.gpus[a].at.numa, t.gpus[a].at.numa);
    for (size_t b = 0; b < t.gpus.size(); ++b) {
      if (a == b) continue;
      // NVLink survives where NCCL can carry it (<gpu> needs a known compute capability).
      Path want = nccl(t.gpuToGpu(int(a), int(b)));
      if (want.type == PathType::kNVLink && t.gpus[a].sm == 0)
        want = nccl(t.pciPath(t.gpus[a].at, t.gpus[b].at));
      EXPECT_EQ(back.gpuToGpu(int(a), int(b)).str(), want.str()) << "GPU" << a << "-GPU" << b;
    }
    for (size_t n = 0; n < t.nics.size(); ++n) {
      EXPECT_EQ(back.nics[n].name, t.nics[n].name);
      EXPECT_EQ(back.gpuToNic(int(a), int(n)).str(), nccl(t.gpuToNic(int(a), int(n))).str())
          << "GPU" << a << "-" << t.nics[n].name;
    }
  }
}

void PrintTo(const Machine& m, std::ostream* os) {
  *os << m.file << " (" << m.gpus << " GPUs, " << m.nics << " NICs, " << m.numa_nodes << " NUMA nodes)";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealMachines, ::testing::ValuesIn(machines()),
                         [](const ::testing::TestParamInfo<Machine>& param) {
                           std::string name = std::filesystem::path(param.param.file).stem().string();
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// What the files under-describe, said where the topology is shown: SXM GPUs whose NVLinks the file
// does not record get a warning, files that record them (or hold no SXM GPUs) none; GPUs that are
// not NVIDIA's are marked in the matrix.
struct Gap {
  const char* file;
  const char* nvlink_warning;       // the warning's start, or "" for none
  std::vector<std::string> marked;  // matrix row labels with a vendor mark
};

class RealMachineGaps : public ::testing::TestWithParam<Gap> {};

TEST_P(RealMachineGaps, AreSaid) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  const Gap& g = GetParam();
  std::filesystem::path file = dir / g.file;
  NodeTopology t = readTopologyFile(file);
  std::vector<std::string> warnings = missingNvlinkWarnings(t);
  if (std::string(g.nvlink_warning).empty()) {
    EXPECT_TRUE(warnings.empty()) << warnings.front();
  } else {
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0], std::string(g.nvlink_warning) + ", which have NVLink, but " + file.string() +
                               " records no NVLink: paths between them show PCIe types (PIX to SYS) instead "
                               "of NV#; give a topology with NVLink information (poolrun topo --format json "
                               "on the node, or NCCL_TOPO_DUMP_FILE)");
  }
  std::vector<std::string> marked;
  std::istringstream matrix(toMatrix(t));
  for (std::string line; std::getline(matrix, line) && !line.empty();) {
    if (size_t close = line.find(')'); line.starts_with("GPU") && close != std::string::npos)
      marked.push_back(line.substr(0, close + 1));
  }
  EXPECT_EQ(marked, g.marked);
}

void PrintTo(const Gap& g, std::ostream* os) {
  *os << g.file
      << (*g.nvlink_warning ? ": warns \"" + std::string(g.nvlink_warning) + "\"" : ": no NVLink warning");
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, RealMachineGaps,
    ::testing::Values(
        Gap{"nccl-topo/aws-ofi-nccl_p4d-24xl-topo.xml", "GPUs 0-7 are A100 SXM4", {}},
        Gap{"hwloc-xml/psmgmt_topo.jrc0323.xml", "GPUs 0-3 are A100 SXM4", {}},
        Gap{"hwloc-xml/psmgmt_topo.jwc09n003.xml", "GPUs 0-3 are V100 SXM2", {}},
        Gap{"hwloc-xml/flux-core_sierra.xml", "GPUs 0-3 are V100 SXM2", {}},
        Gap{"hwloc-xml/flux-core_ipa20.xml", "", {}},              // NVLinkBandwidth distances
        Gap{"hwloc-xml/hwloc_nvidiaDGX2.v2.xml", "", {}},          // NVSwitch
        Gap{"hwloc-xml/hwloc_power8gpudistances.v2.xml", "", {}},  // P100 SXM2 with NVLink recorded
        Gap{"nccl-topo/simai_topo_8A100_4CX6.xml", "", {}},        // <nvlink> to NVSwitches
        Gap{"nccl-topo/azure_ncv4-topo.xml", "", {}},              // A100 PCIe
        Gap{"hwloc-xml/mpibind_cts1-pascal.xml", "", {}},          // P100 PCIe
        Gap{"hwloc-xml/mpibind_g4dnmetal.xml", "", {}},            // T4
        Gap{"hwloc-xml/mpibind_epyc-corona.xml",
            "",
            {"GPU0 (AMD)", "GPU1 (AMD)", "GPU2 (AMD)", "GPU3 (AMD)"}},
        Gap{"hwloc-xml/hwloc_32em64t-2n8c2t-pci-normalio.v2.xml", "", {"GPU3 (AMD)"}}),
    [](const ::testing::TestParamInfo<Gap>& param) {
      std::string name = std::filesystem::path(param.param.file).stem().string();
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// Files that are not topologies this build can read: one clear error naming the file.
struct BadFixture {
  const char* file;
  const char* message;
};

class RealMachineRejects : public ::testing::TestWithParam<BadFixture> {};

TEST_P(RealMachineRejects, WithAClearError) {
  POOLRUN_REQUIRE_FIXTURES(dir);
  std::filesystem::path file = dir / GetParam().file;
  try {
    readTopologyFile(file);
    FAIL() << "expected an error for " << file;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_TRUE(what.starts_with(file.string() + ": ")) << what;
    EXPECT_NE(what.find(GetParam().message), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line";
  }
}

void PrintTo(const BadFixture& b, std::ostream* os) {
  *os << b.file << ": error with \"" << b.message << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, RealMachineRejects,
    ::testing::Values(BadFixture{"hwloc-xml/hwloc_nvidiaDGX2.v3.xml", "version 3.0 needs hwloc 3"},
                      BadFixture{"nccl-topo/azure_ncv4-graph.xml", "NCCL graph file"}),
    [](const ::testing::TestParamInfo<BadFixture>& p) {
      return poolrun::test::testName(std::filesystem::path(p.param.file).stem().string());
    });

}  // namespace
}  // namespace poolrun::topo
