// The doctor on the real sysfs sample in shared/fixtures/rdma (a ConnectX-3 FDR InfiniBand node,
// kernel of 2013), rebuilt as a tree from its "path = content" and "path -> target" lines.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "poolrun/doctor/doctor.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::doctor {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void rebuild(const fs::path& sample, const poolrun::test::TempDir& sys) {
  std::ifstream in(sample);
  ASSERT_TRUE(in) << sample;
  std::string line;
  static const std::regex kLink(R"(^(\S+) -> (\S+)$)");
  static const std::regex kFile(R"(^(\S+[^/]) = (.*)$)");
  int files = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.empty() || line[0] == '#' || line[0] == '(') continue;
    if (std::regex_match(line, m, kLink)) {
      fs::create_directories((sys.path() / m[1].str()).parent_path());
      fs::create_directory_symlink(m[2].str(), sys.path() / m[1].str());
      // The sample lists the class links but not the `device` link the kernel puts in every RDMA
      // device's folder, back to its PCI function (.../BDF/infiniband/DEV/device -> ../../../BDF).
      static const std::regex kRdmaUnderPci(
          R"(^class/infiniband/\S+ -> \.\./\.\./(devices/.*/([0-9a-f:.]+)/infiniband/\S+)$)");
      std::smatch dev;
      if (std::regex_match(line, dev, kRdmaUnderPci)) {
        fs::create_directories(sys.path() / dev[1].str());
        fs::create_directory_symlink(fs::path("../../..") / dev[2].str(),
                                     sys.path() / dev[1].str() / "device");
      }
    } else if (std::regex_match(line, m, kFile)) {
      sys.write(m[1].str(), m[2].str() + "\n");
      ++files;
    }
  }
  ASSERT_GT(files, 20) << "the sample's format changed: " << sample;
}

TEST(DoctorRealSysfsTest, ConnectX3FdrNode) {
  POOLRUN_REQUIRE_FIXTURES(fixtures);
  poolrun::test::TempDir root;
  rebuild(fixtures / "rdma" / "sysfs_mlx4_0_connectx3-fdr-ib_hwloc-tarball.txt", root);
  NodeSources sources;
  sources.roots = {root.path(), root.path() / "proc", root.path() / "dev"};
  sources.host = false;
  Report r = checkNode(sources, {});
  std::map<std::string, const Check*> byId;
  for (const Check& c : r.checks) {
    if (c.subject == "mlx4_0/1" || c.subject == "mlx4_0" || c.id == "rdma.rate") byId[c.id] = &c;
  }
  ASSERT_TRUE(byId.count("rdma.port")) << toText(r);
  EXPECT_EQ(byId["rdma.port"]->status, Status::kPass);
  EXPECT_THAT(byId["rdma.port"]->evidence, HasSubstr("state 4: ACTIVE, phys_state 5: LinkUp"));
  ASSERT_TRUE(byId.count("rdma.rate"));
  EXPECT_EQ(byId["rdma.rate"]->status, Status::kPass);
  EXPECT_THAT(byId["rdma.rate"]->evidence, HasSubstr("56 Gb/s (56 Gb/sec (4X FDR))"));
  EXPECT_EQ(byId["rdma.rate"]->subject, "1 15b3:1003 InfiniBand port");
  // The snapshot holds no /sys/class/infiniband_verbs and no /dev: the verbs device is reported
  // missing rather than assumed.
  ASSERT_TRUE(byId.count("rdma.uverbs"));
  EXPECT_EQ(byId["rdma.uverbs"]->status, Status::kFail);
  // IB ports get no RoCE checks; the GPU-less node gets no GPUDirect verdicts.
  for (const Check& c : r.checks) {
    EXPECT_FALSE(c.id.starts_with("roce.")) << c.id;
    if (c.id.starts_with("gdr")) {
      EXPECT_EQ(c.status, Status::kSkip) << c.id << ": " << c.evidence;
    }
  }
}

}  // namespace
}  // namespace poolrun::doctor
