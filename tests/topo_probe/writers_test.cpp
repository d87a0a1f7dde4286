// toMatrix and toDot on small topologies built by hand.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "poolrun/topo/topology.hpp"
#include "poolrun/topo/writers.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::topo {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

constexpr const char* kGpuBusIds[] = {"0000:11:00.0", "0000:12:00.0", "0000:91:00.0", "0000:92:00.0"};

PciAddress pci(std::string_view text) {
  return PciAddress::parse(text).value();
}

Package package(int os, const CpuSet& cpus, const std::string& model) {
  Package p;
  p.os_index = os;
  p.cpus = cpus;
  p.model = model;
  return p;
}

PciSwitch pciSwitch(std::string_view address, size_t parent, size_t hostBridge, int numa) {
  PciSwitch s;
  s.pci = pci(address);
  s.parent = parent;
  s.host_bridge = hostBridge;
  s.numa = numa;
  return s;
}

NicPort port(LinkLayer layer, PortState state, double rate) {
  NicPort p;
  p.link_layer = layer;
  p.state = state;
  p.rate_gbps = rate;
  return p;
}

// Two packages with one NUMA node each. On each: a root port, a PCIe switch below it with two GPUs
// and one NIC. GPU0-GPU1 and GPU2-GPU3 are NVLink pairs (NV2); NIC1's only port is down.
NodeTopology twoSocketNode() {
  NodeTopology t;
  t.hostname = "node01";
  for (int s = 0; s < 2; ++s) {
    unsigned first = static_cast<unsigned>(16 * s);
    CpuSet cpus = CpuSet::parseList(std::to_string(first) + "-" + std::to_string(first + 15));
    t.packages.push_back(package(s, cpus, "Xeon 8480+"));
    t.numa_nodes.push_back({.os_index = s, .cpus = cpus, .memory_bytes = 64 * kGiB, .package = s});
    t.host_bridges.push_back({.buses = s == 0 ? "0000:[00-7f]" : "0000:[80-ff]", .numa = s});
    const size_t host_bridge = t.host_bridges.size() - 1;
    size_t root = t.switches.size();
    t.switches.push_back(pciSwitch(s == 0 ? "0000:0f:01.0" : "0000:8f:01.0", kNoIndex, s, s));
    t.switches.back().root_port = true;
    size_t sw = t.switches.size();
    t.switches.push_back(pciSwitch(s == 0 ? "0000:10:00.0" : "0000:90:00.0", root, s, s));
    t.switches.back().link = {.speed_gts = 32, .width = 16, .gbyte_s = 63};
    PciPlacement at{.switch_index = sw, .host_bridge = host_bridge, .numa = s, .package = s};
    for (int k = 0; k < 2; ++k) {
      Gpu g;
      g.index = static_cast<size_t>(2 * s + k);
      g.pci = pci(kGpuBusIds[2 * s + k]);
      g.vendor = kVendorNvidia;
      g.model = "NVIDIA H100 80GB HBM3";
      g.cpus = cpus;
      g.at = at;
      size_t peer = static_cast<size_t>(2 * s + (1 - k));
      g.nvlinks.push_back({peer, NodeTopology::gpuLabel(peer), 2});
      t.gpus.push_back(g);
    }
    Nic n;
    n.name = "mlx5_" + std::to_string(s);
    n.pci = pci(s == 0 ? "0000:13:00.0" : "0000:93:00.0");
    n.vendor = kVendorMellanox;
    n.cpus = cpus;
    n.at = at;
    n.ports.push_back(s == 0 ? port(LinkLayer::kInfiniBand, PortState::kActive, 400)
                             : port(LinkLayer::kEthernet, PortState::kDown, 0));
    t.nics.push_back(n);
  }
  return t;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The table part of a matrix, the header and one row per device, split into words.
std::vector<std::vector<std::string>> tableRows(const std::string& matrix) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : lines(matrix)) {
    if (line.empty()) break;
    rows.push_back(words(line));
  }
  return rows;
}

size_t countOf(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string lineWith(const std::string& text, const std::string& needle) {
  for (const std::string& line : lines(text)) {
    if (line.find(needle) != std::string::npos) return line;
  }
  return "";
}

// The statements that declare node `id` (its quoted id, then its attributes), edges left out.
std::vector<std::string> declarations(const std::string& dot, const std::string& id) {
  std::vector<std::string> out;
  for (const std::string& line : lines(dot)) {
    size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, id.size() + 4, "\"" + id + "\" [") == 0) {
      out.push_back(line);
    }
  }
  return out;
}

// The one statement that declares node `id`, or "".
std::string declaration(const std::string& dot, const std::string& id) {
  auto found = declarations(dot, id);
  return found.size() == 1 ? found[0] : "";
}

// Runs Graphviz on the document; its messages come back in `errors`.
bool dotAccepts(const std::string& doc, std::string& errors) {
  test::TempDir dir;
  auto in = dir.write("topo.dot", doc);
  auto err = dir.path() / "dot.err";
  std::string cmd = "dot -Tsvg '" + in.string() + "' -o '" + (dir.path() / "topo.svg").string() + "' 2>'" +
                    err.string() + "'";
  int rc = std::system(cmd.c_str());
  std::ifstream e(err);
  errors.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  return rc == 0;
}

bool haveDot() {
  return std::system("command -v dot >/dev/null 2>&1") == 0;
}

// Start columns of the words of a line.
std::vector<size_t> wordStarts(const std::string& line) {
  std::vector<size_t> out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != ' ' && (i == 0 || line[i - 1] == ' ')) out.push_back(i);
  }
  return out;
}

// Eight GPUs on an NVSwitch fabric hanging directly off the CPU, GPU0 with NVLinks to the CPU too.
NodeTopology nvSwitchNode() {
  NodeTopology t;
  CpuSet cpus = CpuSet::parseList("0-7");
  t.packages.push_back(package(0, cpus, ""));
  t.numa_nodes.push_back({.os_index = 0, .cpus = cpus, .memory_bytes = 512 * kGiB, .package = 0});
  for (int i = 0; i < 8; ++i) {
    Gpu g;
    g.index = i;
    g.pci = pci("0000:" + std::to_string(10 + i) + ":00.0");
    g.vendor = kVendorNvidia;
    g.cpus = cpus;
    g.at = {.numa = 0, .package = 0};
    g.nvswitch_links = 18;
    t.gpus.push_back(g);
  }
  t.gpus[0].nvlinks.push_back({kNoIndex, "cpu", 4});
  t.nvswitch = true;
  return t;
}

// What an NCCL XML source may give: no packages or NUMA nodes, localities naming ones not listed.
NodeTopology sparseNode() {
  NodeTopology t;
  t.switches.push_back(pciSwitch("0000:20:00.0", kNoIndex, kNoIndex, 3));
  Gpu g;
  g.pci = pci("0000:21:00.0");
  g.at = {.switch_index = 0, .numa = 3, .package = 1};
  g.nvlinks.push_back({kNoIndex, "cpu", 2});
  t.gpus.push_back(g);
  Nic n;
  n.name = "pci:0000:22:00.0";
  n.pci = pci("0000:22:00.0");
  n.at = {.numa = 5};
  t.nics.push_back(n);
  return t;
}

// ---- toMatrix ----

TEST(MatrixTest, HeaderNamesGpusThenNicsThenAffinities) {
  EXPECT_EQ(lines(toMatrix(twoSocketNode()))[0],
            "      GPU0  GPU1  GPU2  GPU3  NIC0  NIC1  CPU Affinity  NUMA Affinity");
}

TEST(MatrixTest, EveryRowHasXOnTheDiagonalOnly) {
  auto rows = tableRows(toMatrix(twoSocketNode()));
  ASSERT_EQ(rows.size(), 7u);  // header + 4 GPUs + 2 NICs
  const std::vector<std::string> labels{"GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"};
  for (size_t r = 1; r < rows.size(); ++r) {
    SCOPED_TRACE(labels[r - 1]);
    ASSERT_EQ(rows[r].size(), 9u);  // label, 6 paths, CPU and NUMA affinity
    EXPECT_EQ(rows[r][0], labels[r - 1]);
    EXPECT_EQ(rows[r][r], "X");
    EXPECT_EQ(std::count(rows[r].begin(), rows[r].end(), "X"), 1);
  }
}

TEST(MatrixTest, CellsNameThePathBetweenDevices) {
  auto rows = tableRows(toMatrix(twoSocketNode()));
  ASSERT_EQ(rows.size(), 7u);
  // rows[1 + a][1 + b]: device a to device b, GPUs 0-3 then NICs 0-1.
  auto cell = [&](size_t a, size_t b) { return rows[1 + a][1 + b]; };
  EXPECT_EQ(cell(0, 1), "NV2");
  EXPECT_EQ(cell(1, 0), "NV2");
  EXPECT_EQ(cell(2, 3), "NV2");
  EXPECT_EQ(cell(0, 4), "PIX");  // GPU0-NIC0: one switch
  EXPECT_EQ(cell(4, 0), "PIX");
  EXPECT_EQ(cell(0, 2), "SYS");  // across the sockets
  EXPECT_EQ(cell(1, 3), "SYS");
  EXPECT_EQ(cell(0, 5), "SYS");
  EXPECT_EQ(cell(3, 5), "PIX");
  EXPECT_EQ(cell(4, 5), "SYS");
}

TEST(MatrixTest, AffinityColumnsGiveCpuListAndNumaNode) {
  NodeTopology t = twoSocketNode();
  t.gpus[3].cpus = CpuSet();
  t.gpus[3].at.numa = kNone;
  t.nics[0].cpus = CpuSet::parseList("0-3,8");
  auto rows = tableRows(toMatrix(t));
  ASSERT_EQ(rows.size(), 7u);
  EXPECT_EQ(rows[1][7], "0-15");
  EXPECT_EQ(rows[1][8], "0");
  EXPECT_EQ(rows[3][7], "16-31");
  EXPECT_EQ(rows[3][8], "1");
  EXPECT_EQ(rows[4][7], "N/A");
  EXPECT_EQ(rows[4][8], "N/A");
  EXPECT_EQ(rows[5][7], "0-3,8");
  EXPECT_EQ(rows[5][8], "0");
  EXPECT_EQ(rows[6][7], "16-31");
  EXPECT_EQ(rows[6][8], "1");
}

TEST(MatrixTest, ColumnsAreAlignedWithTheHeader) {
  NodeTopology t = twoSocketNode();
  t.gpus[0].cpus = CpuSet::parseList("0-3,5,7,9-15,100-127");  // wider than "CPU Affinity"
  std::string matrix = toMatrix(t);
  std::vector<std::string> all = lines(matrix);
  std::vector<size_t> header = wordStarts(all[0]);
  ASSERT_EQ(header.size(), 10u);     // 6 devices, "CPU Affinity", "NUMA Affinity"
  header.erase(header.begin() + 9);  // the second word of "NUMA Affinity"
  header.erase(header.begin() + 7);  // ... and of "CPU Affinity"
  for (size_t r = 1; r <= 6; ++r) {
    SCOPED_TRACE(all[r]);
    std::vector<size_t> starts = wordStarts(all[r]);
    ASSERT_EQ(starts.size(), 9u);
    EXPECT_EQ(starts[0], 0u);
    EXPECT_EQ(std::vector<size_t>(starts.begin() + 1, starts.end()), header);
    EXPECT_NE(all[r].back(), ' ');
  }
}

TEST(MatrixTest, LegendsFollowTheTable) {
  std::string matrix = toMatrix(twoSocketNode());
  EXPECT_NE(matrix.find("\n\nLegend:\n\n  X    = Self\n"), std::string::npos) << matrix;
  for (const char* entry : {"  SYS  = ", "  NODE = ", "  PHB  = ", "  PXB  = ", "  PIX  = ",
                            "  NV#  = Connection traversing a bonded set of # NVLinks\n"}) {
    EXPECT_NE(matrix.find(entry), std::string::npos) << entry;
  }
  EXPECT_NE(matrix.find("\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1 (down)\n"), std::string::npos)
      << matrix;
  EXPECT_LT(matrix.find("Legend:"), matrix.find("NIC Legend:"));
}

// MIG: each MIG-capable GPU's mode, a reset that is pending, and its instances as nvidia-smi -L
// names them; a node without MIG has no section.
TEST(MatrixTest, MigSectionListsModesAndInstances) {
  NodeTopology t = twoSocketNode();
  EXPECT_EQ(toMatrix(t).find("MIG:"), std::string::npos);
  t.gpus[0].mig = test::migState(true, true);
  t.gpus[0].mig.instances = {test::migInstance(1, 0, "3g.40gb", 9, 3, 60, 40192, "MIG-aaaa"),
                             test::migInstance(2, 0, "", 19, 1, 16, 0, "")};
  t.gpus[1].mig = test::migState(false, true);
  t.gpus[2].mig = test::migState(false, false);
  const std::string matrix = toMatrix(t);
  EXPECT_NE(matrix.find("\nMIG:\n\n"
                        "  GPU0: MIG enabled, 2 instances\n"
                        "    GI  CI  PROFILE       SMS   MEMORY     UUID\n"
                        "    1   0   3g.40gb       60    39.2 GiB   MIG-aaaa\n"
                        "    2   0   ?             16    -          -\n"
                        "  GPU1: MIG disabled now, enabled after the next GPU reset (pending)\n"
                        "  GPU2: MIG disabled\n"),
            std::string::npos)
      << matrix;
  EXPECT_EQ(matrix.find("GPU3: MIG"), std::string::npos) << "not MIG-capable";
  EXPECT_LT(matrix.find("NIC Legend:"), matrix.find("MIG:"));
}

TEST(MatrixTest, NicLegendNamesPortStatesOnlyWhenNoPortIsUp) {
  NodeTopology t = twoSocketNode();
  t.nics[0].ports.push_back(port(LinkLayer::kInfiniBand, PortState::kDown, 0));  // one of two up
  t.nics[1].ports = {port(LinkLayer::kEthernet, PortState::kInit, 0)};
  std::string matrix = toMatrix(t);
  EXPECT_NE(matrix.find("  NIC0: mlx5_0\n"), std::string::npos) << matrix;
  EXPECT_NE(matrix.find("  NIC1: mlx5_1 (init)\n"), std::string::npos) << matrix;

  t.nics[1].ports = {port(LinkLayer::kEthernet, PortState::kUnknown, 0)};  // the source did not say
  EXPECT_NE(toMatrix(t).find("  NIC1: mlx5_1\n"), std::string::npos);
}

TEST(MatrixTest, WithoutNicsHasNoNicColumnsOrLegend) {
  NodeTopology t = twoSocketNode();
  t.nics.clear();
  std::string matrix = toMatrix(t);
  EXPECT_EQ(lines(matrix)[0], "      GPU0  GPU1  GPU2  GPU3  CPU Affinity  NUMA Affinity");
  EXPECT_EQ(matrix.find("NIC"), std::string::npos) << matrix;
  EXPECT_NE(matrix.find("Legend:"), std::string::npos);
}

TEST(MatrixTest, NicsWithoutGpusStillMakeATable) {
  NodeTopology t = twoSocketNode();
  t.gpus.clear();
  auto rows = tableRows(toMatrix(t));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"NIC0", "NIC1", "CPU", "Affinity", "NUMA", "Affinity"}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"NIC0", "X", "SYS", "0-15", "0"}));
  EXPECT_EQ(rows[2], (std::vector<std::string>{"NIC1", "SYS", "X", "16-31", "1"}));
}

TEST(MatrixTest, MarksGpusThatAreNotNvidia) {
  NodeTopology t = twoSocketNode();
  t.gpus[2].vendor = kVendorAmd;
  t.gpus[3].vendor = 0;  // a source that does not say
  std::string matrix = toMatrix(t);
  std::vector<std::string> all = lines(matrix);
  EXPECT_EQ(words(all[0])[0], "GPU0") << "column headers keep nvidia-smi's labels";
  EXPECT_EQ(words(all[1])[0], "GPU0");
  EXPECT_EQ(words(all[2])[0], "GPU1");
  EXPECT_TRUE(all[3].starts_with("GPU2 (AMD) ")) << all[3];
  EXPECT_TRUE(all[4].starts_with("GPU3 (vendor unknown) ")) << all[4];
  // The paths still line up under their headers.
  EXPECT_EQ(all[3].find("NV2"), all[0].find("GPU3"));
  EXPECT_NE(matrix.find(
                "\n  (AMD) = not an NVIDIA GPU: no CUDA device, so poolrun plans no CUDA/NCCL ranks on it\n"),
            std::string::npos)
      << matrix;
  EXPECT_NE(matrix.find("\n  (vendor unknown) = not an NVIDIA GPU"), std::string::npos) << matrix;
  EXPECT_EQ(toMatrix(twoSocketNode()).find("not an NVIDIA GPU"), std::string::npos) << "only where one is";
}

TEST(MatrixTest, EmptyTopologyPrintsANote) {
  EXPECT_EQ(toMatrix(NodeTopology{}), "this node: no GPUs or RDMA NICs found (0 CPUs in 0 NUMA nodes)\n");
}

// ---- toDot ----

TEST(DotTest, IsAnUndirectedGraph) {
  std::string dot = toDot(twoSocketNode());
  EXPECT_EQ(dot.rfind("graph ", 0), 0u) << dot;
  EXPECT_EQ(dot.find("digraph"), std::string::npos);
  EXPECT_EQ(dot.find("->"), std::string::npos);
  EXPECT_EQ(dot.back(), '\n');
  EXPECT_EQ(dot[dot.size() - 2], '}');
}

TEST(DotTest, NestsNumaClustersInPackageClusters) {
  std::string dot = toDot(twoSocketNode());
  size_t pkg0 = dot.find("subgraph \"cluster_pkg0\" {");
  size_t numa0 = dot.find("subgraph \"cluster_numa0\" {");
  size_t pkg1 = dot.find("subgraph \"cluster_pkg1\" {");
  size_t numa1 = dot.find("subgraph \"cluster_numa1\" {");
  ASSERT_NE(pkg0, std::string::npos) << dot;
  ASSERT_NE(pkg1, std::string::npos) << dot;
  ASSERT_NE(numa0, std::string::npos) << dot;
  ASSERT_NE(numa1, std::string::npos) << dot;
  EXPECT_LT(pkg0, numa0);
  EXPECT_LT(numa0, pkg1);
  EXPECT_LT(pkg1, numa1);
  EXPECT_NE(dot.find("label=\"NUMA 0\\nCPUs 0-15\\n64.0 GiB\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"NUMA 1\\nCPUs 16-31\\n64.0 GiB\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"Package 0\\nXeon 8480+\\nCPUs 0-15\""), std::string::npos) << dot;
}

TEST(DotTest, DeclaresEveryDeviceOnce) {
  std::string dot = toDot(twoSocketNode());
  for (const char* id : {"GPU0", "GPU1", "GPU2", "GPU3", "nic:mlx5_0", "nic:mlx5_1", "sw0", "sw1", "sw2",
                         "sw3", "pkg0", "pkg1", "numa0", "numa1"}) {
    EXPECT_EQ(declarations(dot, id).size(), 1u) << id << "\n" << dot;
  }
  EXPECT_NE(declaration(dot, "GPU2").find("label=\"GPU2\\nNVIDIA H100 80GB HBM3\\n0000:91:00.0\""),
            std::string::npos)
      << dot;
  EXPECT_NE(declaration(dot, "sw0").find("label=\"root port\\n0000:0f:01.0\""), std::string::npos) << dot;
  EXPECT_NE(declaration(dot, "sw1").find("label=\"PCIe switch\\n0000:10:00.0\\n32 GT/s x16\""),
            std::string::npos)
      << dot;
  EXPECT_NE(declaration(dot, "nic:mlx5_0").find("port 1: infiniband active 400 Gb/s"), std::string::npos);
  EXPECT_NE(declaration(dot, "nic:mlx5_1").find("port 1: ethernet down"), std::string::npos);
}

TEST(DotTest, GpusAndNicsHaveTheirOwnColours) {
  std::string dot = toDot(twoSocketNode());
  std::string gpu = declaration(dot, "GPU0");
  std::string nic = declaration(dot, "nic:mlx5_0");
  auto fill = [](const std::string& line) {
    size_t at = line.find("fillcolor=");
    return at == std::string::npos ? std::string() : line.substr(at, line.find(',', at) - at);
  };
  EXPECT_FALSE(fill(gpu).empty()) << gpu;
  EXPECT_FALSE(fill(nic).empty()) << nic;
  EXPECT_NE(fill(gpu), fill(nic));
  EXPECT_EQ(fill(gpu), fill(declaration(dot, "GPU3")));
}

TEST(DotTest, ConnectsTheTreeFromNumaNodeToDevices) {
  std::string dot = toDot(twoSocketNode());
  for (const char* e :
       {"\"pkg0\" -- \"numa0\"", "\"numa0\" -- \"sw0\"", "\"sw0\" -- \"sw1\"", "\"sw1\" -- \"GPU0\"",
        "\"sw1\" -- \"GPU1\"", "\"sw1\" -- \"nic:mlx5_0\"", "\"numa1\" -- \"sw2\"", "\"sw2\" -- \"sw3\"",
        "\"sw3\" -- \"GPU2\"", "\"sw3\" -- \"nic:mlx5_1\""}) {
    EXPECT_EQ(countOf(dot, e), 1u) << e << "\n" << dot;
  }
}

TEST(DotTest, DrawsOneNvLinkEdgePerPair) {
  std::string dot = toDot(twoSocketNode());
  EXPECT_EQ(countOf(dot, "\"GPU0\" -- \"GPU1\""), 1u) << dot;
  EXPECT_EQ(countOf(dot, "\"GPU1\" -- \"GPU0\""), 0u) << dot;
  EXPECT_EQ(countOf(dot, "\"GPU2\" -- \"GPU3\""), 1u) << dot;
  EXPECT_EQ(countOf(dot, "label=\"NV2\""), 2u) << dot;
  EXPECT_NE(lineWith(dot, "\"GPU0\" -- \"GPU1\"").find("bold"), std::string::npos);
  EXPECT_EQ(countOf(dot, "\"GPU0\" -- \"GPU2\""), 0u);

  NodeTopology oneSided = twoSocketNode();  // a source that recorded the link on one side only
  oneSided.gpus[1].nvlinks.clear();
  EXPECT_EQ(countOf(toDot(oneSided), "\"GPU0\" -- \"GPU1\" [style=bold"), 1u);
}

TEST(DotTest, DrawsADownNicDashedAndGrey) {
  std::string dot = toDot(twoSocketNode());
  std::string down = declaration(dot, "nic:mlx5_1");
  EXPECT_NE(down.find("dashed"), std::string::npos) << down;
  EXPECT_NE(down.find("grey"), std::string::npos) << down;
  EXPECT_NE(lineWith(dot, "\"sw3\" -- \"nic:mlx5_1\"").find("dashed"), std::string::npos);
  EXPECT_EQ(declaration(dot, "nic:mlx5_0").find("dashed"), std::string::npos);
  EXPECT_EQ(lineWith(dot, "\"sw1\" -- \"nic:mlx5_0\"").find("dashed"), std::string::npos);
}

TEST(DotTest, ConnectsNvSwitchAndCpuLinks) {
  std::string dot = toDot(nvSwitchNode());
  EXPECT_EQ(declarations(dot, "nvswitch").size(), 1u) << dot;
  EXPECT_EQ(countOf(dot, "-- \"nvswitch\" [style=bold"), 8u) << dot;
  EXPECT_EQ(countOf(dot, "label=\"NV18\""), 8u);
  EXPECT_NE(lineWith(dot, "\"GPU0\" -- \"pkg0\"").find("label=\"NV4\""), std::string::npos) << dot;
  // No PCIe switch above them: the GPUs hang from their NUMA node.
  EXPECT_EQ(countOf(dot, "\"numa0\" -- \"GPU"), 8u);
  // The fabric is drawn through the NVSwitch node, not as 28 GPU pairs.
  EXPECT_EQ(countOf(dot, "\"GPU0\" -- \"GPU1\""), 0u);
}

TEST(DotTest, EscapesQuotesAndBackslashesInLabels) {
  NodeTopology t = twoSocketNode();
  t.hostname = "lab \"7\"\\rack";
  t.gpus[0].model = "H100 \"SXM\" \\ x";
  t.nics[0].name = "we\"ird\\nic";
  std::string dot = toDot(t);
  EXPECT_NE(dot.find("label=\"lab \\\"7\\\"\\\\rack\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("GPU0\\nH100 \\\"SXM\\\" \\\\ x\\n"), std::string::npos) << dot;
  EXPECT_NE(dot.find("\"nic:we\\\"ird\\\\nic\" ["), std::string::npos) << dot;
}

TEST(DotTest, PlacesDevicesWhoseLocalityIsNotListed) {
  std::string dot = toDot(sparseNode());
  EXPECT_EQ(dot.find("cluster_"), std::string::npos) << dot;
  EXPECT_EQ(countOf(dot, "\"sw0\" -- \"GPU0\""), 1u) << dot;
  EXPECT_EQ(countOf(dot, "\"GPU0\" -- \"cpu\""), 1u) << dot;
  EXPECT_EQ(declarations(dot, "cpu").size(), 1u) << dot;
  EXPECT_EQ(declarations(dot, "nic:pci:0000:22:00.0").size(), 1u) << dot;
}

TEST(DotGraphvizTest, DotAcceptsEveryDocument) {
  if (!haveDot()) GTEST_SKIP() << "Graphviz `dot` is not on PATH";
  NodeTopology escaped = twoSocketNode();
  escaped.hostname = "lab \"7\"\\rack\nline two";
  escaped.gpus[0].model = "H100 \"SXM\" \\";
  escaped.nics[0].name = "we\"ird\\nic";
  const std::vector<std::pair<std::string, NodeTopology>> cases{
      {"two sockets", twoSocketNode()}, {"nvswitch", nvSwitchNode()},
      {"sparse", sparseNode()},         {"escaped", escaped},
      {"empty", NodeTopology{}},
  };
  for (const auto& [name, topo] : cases) {
    SCOPED_TRACE(name);
    std::string doc = toDot(topo);
    std::string errors;
    EXPECT_TRUE(dotAccepts(doc, errors)) << errors << "\n" << doc;
    EXPECT_EQ(errors, "") << doc;
  }
}

}  // namespace
}  // namespace poolrun::topo
