// The NCCL topology XML reader and writer on documents the tests write.

#include <gtest/gtest.h>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/writers.hpp"
#include "support/test_names.hpp"

namespace poolrun::topo {
namespace {

// Two-level Broadcom Gen4 switch (flattened as NCCL does), a GPU pair on NVLink, a RoCE NIC, a
// bare IB hint and an NCCL socket NIC with no PCI function.
constexpr const char* kDump = R"(<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="106">
    <pci busid="0000:0c:00.0" class="0x060400" vendor="0x1000" device="0xc010" subsystem_vendor="0x1000" subsystem_device="0xa096">
      <pci busid="0000:0e:00.0" class="0x060400" vendor="0x1000" device="0xc010" subsystem_vendor="0x1000" subsystem_device="0xa096">
        <pci busid="0000:13:00.0" class="0x030200" vendor="0x10de" device="0x20b2" link_speed="16 GT/s" link_width="16">
          <gpu dev="0" sm="80" rank="0" gdr="1">
            <nvlink target="0000:93:00.0" count="4" tclass="0x030200"/>
          </gpu>
        </pci>
      </pci>
      <pci busid="0000:1a:00.0" class="0x020000" vendor="0x15b3" device="0x101d">
        <nic>
          <net name="mlx5_bond_1" dev="1" speed="200000" port="1" latency="0.000000" guid="0x1" maxconn="262144" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
  <cpu numaid="1" affinity="ffff0000" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:93:00.0" class="0x030200" vendor="0x10de" device="0x20b2">
      <gpu dev="1" sm="80" rank="1" gdr="1">
        <nvlink target="0000:13:00.0" count="4" tclass="0x030200"/>
      </gpu>
    </pci>
    <pci busid="0101:00:00.0" class="0x020700"/>
    <nic>
      <net name="eth0" dev="0" speed="100000" port="0" latency="0.000000" guid="0x0" maxconn="65536" gdr="0"/>
    </nic>
  </cpu>
</system>
)";

TEST(NcclXmlReaderTest, ReadsDumpsAndHints) {
  NodeTopology t = readNcclXmlString(kDump, "dump.xml");
  ASSERT_EQ(t.gpus.size(), 2u);
  ASSERT_EQ(t.nics.size(), 3u);
  EXPECT_EQ(t.switches.size(), 1u) << "the Gen4 pair is one switch";
  EXPECT_EQ(t.gpus[0].sm, 80);
  EXPECT_EQ(t.gpus[0].link.speed_gts, 16);
  EXPECT_EQ(t.gpus[0].link.width, 16);
  EXPECT_EQ(t.gpuToGpu(0, 1).str(), "NV4");
  EXPECT_EQ(t.numa_nodes[1].cpus.toList(), "16-31");
  const Nic* roce = t.nicByName("mlx5_bond_1");
  ASSERT_NE(roce, nullptr);
  EXPECT_EQ(roce->ports[0].link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(roce->ports[0].rate_gbps, 200);
  EXPECT_EQ(t.gpuToNic(0, static_cast<int>(roce - t.nics.data())).str(), "PIX");
  const Nic* hint = t.nicByName("pci:0101:00:00.0");
  ASSERT_NE(hint, nullptr);
  EXPECT_EQ(hint->ports[0].link_layer, LinkLayer::kInfiniBand);
  EXPECT_EQ(hint->ports[0].state, PortState::kUnknown);
  const Nic* socket = t.nicByName("eth0");
  ASSERT_NE(socket, nullptr);
  EXPECT_FALSE(socket->has_pci);
  EXPECT_EQ(socket->at.numa, 1);
}

TEST(NcclXmlWriterTest, WritesWhatItReadsBack) {
  NodeTopology t = readNcclXmlString(kDump, "dump.xml");
  std::string xml = toNcclXml(t);
  EXPECT_NE(
      xml.find(
          "<cpu numaid=\"0\" affinity=\"0000ffff\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" "
          "modelid=\"106\">"),
      std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\">"), std::string::npos) << xml;
  EXPECT_NE(xml.find("link_speed=\"16 GT/s\" link_width=\"16\""), std::string::npos) << xml;
  NodeTopology back = readNcclXmlString(xml, "back.xml");
  ASSERT_EQ(back.gpus.size(), 2u);
  ASSERT_EQ(back.nics.size(), 3u);
  EXPECT_EQ(back.gpuToGpu(0, 1).str(), "NV4");
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_EQ(back.nics[n].name, t.nics[n].name);
    EXPECT_EQ(back.gpuToNic(0, int(n)).str(), t.gpuToNic(0, int(n)).str());
  }
}

TEST(NcclXmlWriterTest, WritesOnlyWhatIsKnownOfANic) {
  // NCCL keeps what an NCCL_TOPO_FILE gives and detects only what it leaves out (see the writer):
  // an unknown rate must not be written as speed="0" (NCCL's 10 Gb/s), nor a made-up guid, latency,
  // maxconn or gdr.
  NodeTopology t = readNcclXmlString(kDump, "dump.xml");
  ASSERT_GE(t.nics.size(), 2u);
  t.nics[0].ports[0].rate_gbps = 0;    // unknown
  t.nics[1].ports[0].rate_gbps = 400;  // NDR
  std::string xml = toNcclXml(t);
  std::string first = xml.substr(xml.find("<net name=\"" + t.nics[0].name + "\""));
  first = first.substr(0, first.find("/>"));
  EXPECT_EQ(first.find("speed="), std::string::npos) << first;
  EXPECT_NE(xml.find("<net name=\"" + t.nics[1].name + "\" dev=\"1\" speed=\"400000\" port=\"1\"/>"),
            std::string::npos)
      << xml;
  for (const char* guessed : {"guid=", "latency=", "maxconn=", "speed=\"0\""}) {
    EXPECT_EQ(xml.find(guessed), std::string::npos) << guessed << " in " << xml;
  }
  size_t net = 0;
  while ((net = xml.find("<net ", net)) != std::string::npos) {
    std::string element = xml.substr(net, xml.find("/>", net) - net);
    EXPECT_EQ(element.find("gdr="), std::string::npos) << element;
    ++net;
  }
  NodeTopology back = readNcclXmlString(xml, "back.xml");
  EXPECT_EQ(back.nics[0].ports[0].rate_gbps, 0) << "unknown stays unknown";
  EXPECT_EQ(back.nics[1].ports[0].rate_gbps, 400);
}

TEST(NcclXmlWriterTest, EscapesWhatAValueHoldsAndEndsTagsAsNcclReadsThem) {
  NodeTopology t = readNcclXmlString(kDump, "dump.xml");
  ASSERT_FALSE(t.packages.empty());
  const std::string vendor = "Genuine & <Intel> \"x\" 'y' \xc3\xa9\tz";
  t.packages[0].vendor = vendor;
  std::string xml = toNcclXml(t);
  EXPECT_NE(xml.find("vendor=\"Genuine &amp; &lt;Intel> &quot;x&quot; 'y' \xc3\xa9&#09;z\""),
            std::string::npos)
      << xml;
  // NCCL's parser reads the space of " />" as one more attribute, with an empty name.
  EXPECT_EQ(xml.find(" />"), std::string::npos) << xml;
  EXPECT_NE(xml.find("tclass=\"0x030200\"/>\n"), std::string::npos) << xml;
  EXPECT_TRUE(xml.starts_with("<system version=\"1\">\n  <cpu ")) << xml;
  EXPECT_TRUE(xml.ends_with("  </cpu>\n</system>\n")) << xml;
  NodeTopology back = readNcclXmlString(xml, "back.xml");
  ASSERT_FALSE(back.packages.empty());
  EXPECT_EQ(back.packages[0].vendor, vendor);
}

struct BadNcclXml {
  const char* name;
  std::string xml;
  const char* message;
};

class NcclXmlBadInput : public ::testing::TestWithParam<BadNcclXml> {};

TEST_P(NcclXmlBadInput, OneClearLineNamingTheFile) {
  try {
    readNcclXmlString(GetParam().xml, "bad.xml");
    FAIL() << "accepted " << GetParam().name;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kBadInput);
    EXPECT_TRUE(what.starts_with("bad.xml: ")) << what;
    EXPECT_NE(what.find(GetParam().message), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

std::string nest(int depth) {
  std::string s = "<system version=\"1\"><cpu numaid=\"0\">";
  for (int i = 0; i < depth; ++i) s += "<pci busid=\"0000:01:00.0\" class=\"0x060400\">";
  for (int i = 0; i < depth; ++i) s += "</pci>";
  return s + "</cpu></system>";
}

void PrintTo(const BadNcclXml& b, std::ostream* os) {
  *os << b.name << ": error with \"" << b.message << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, NcclXmlBadInput,
    ::testing::Values(
        BadNcclXml{"truncated", std::string(kDump).substr(0, 300), "malformed XML at line"},
        BadNcclXml{"unclosed", "<system version=\"1\"><cpu numaid=\"0\">", "malformed XML at line 1"},
        BadNcclXml{"graph", "<graphs version=\"1\"><graph id=\"0\"/></graphs>", "NCCL graph file"},
        BadNcclXml{"other root", "<html/>", "not an NCCL topology"},
        BadNcclXml{"unknown attribute",
                   "<system version=\"1\"><cpu numaid=\"0\"><pci busId=\"0000:01:00.0\"/></cpu></system>",
                   "unknown attribute 'busId'"},
        BadNcclXml{"unknown element", "<system version=\"1\"><cpu numaid=\"0\"><gpu/></cpu></system>",
                   "unexpected <gpu>"},
        BadNcclXml{
            "bad busid",
            "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"zz\" class=\"0x030200\"/></cpu></system>",
            "bad busid \"zz\""},
        BadNcclXml{"bad class",
                   "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" "
                   "class=\"display\"/></cpu></system>",
                   "class=\"display\" is not a hexadecimal number"},
        BadNcclXml{"bad numaid", "<system version=\"1\"><cpu numaid=\"x\"/></system>",
                   "numaid=\"x\" is not an integer"},
        BadNcclXml{"duplicate numa", "<system version=\"1\"><cpu numaid=\"0\"/><cpu numaid=\"0\"/></system>",
                   "appears twice"},
        BadNcclXml{"no cpu", "<system version=\"1\"/>", "no <cpu> element"},
        BadNcclXml{"bad affinity", "<system version=\"1\"><cpu numaid=\"0\" affinity=\"xyz\"/></system>",
                   "affinity"},
        BadNcclXml{"deep", nest(40), "deeper than"}),
    [](const ::testing::TestParamInfo<BadNcclXml>& p) { return poolrun::test::testName(p.param.name); });

TEST(NcclXmlReaderTest, WarnsAboutNvLinkToAMissingGpu) {
  std::string xml =
      "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\">"
      "<gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\"><nvlink target=\"0000:02:00.0\" count=\"2\" "
      "tclass=\"0x030200\"/>"
      "</gpu></pci></cpu></system>";
  NodeTopology t = readNcclXmlString(xml, "x.xml");
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find("0000:02:00.0"), std::string::npos);
  EXPECT_TRUE(t.gpus[0].nvlinks.empty());
}

TEST(TopologyFileTest, DetectsFormatsAndRejectsOthers) {
  EXPECT_THROW(readTopologyFile("/nonexistent/topo.xml"), Error);
  try {
    readTopologyFile("/nonexistent/topo.xml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_STREQ(e.what(), "/nonexistent/topo.xml: no such file (check the path)");
  }
}

}  // namespace
}  // namespace poolrun::topo
