// The doctor on the real sysfs sample in shared/fixtures/rdma (a ConnectX-3 FDR InfiniBand node,
// kernel of 2013), rebuilt as a tree from its "path = content" and "path -> target" lines.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string_view>
#include <utility>

#include "poolrun/common/text.hpp"
#include "poolrun/doctor/doctor.hpp"
#include "support/fixtures.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::doctor {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Not empty, and no white space in it.
bool isWord(std::string_view text) {
  return !common::takeWord(text).empty() && text.empty();
}

// "class/infiniband/DEV -> ../../devices/.../BDF/infiniband/DEV": the RDMA device's folder (from
// devices/) and the address of its PCI function, where `target` is one.
std::optional<std::pair<std::string_view, std::string_view>> rdmaUnderPci(std::string_view path,
                                                                          std::string_view target) {
  if (path.size() <= 17 || !path.starts_with("class/infiniband/") || !common::takePrefix(target, "../../") ||
      !target.starts_with("devices/"))
    return std::nullopt;
  for (size_t ib = target.rfind("/infiniband/"); ib != std::string_view::npos && ib > 0;
       ib = target.rfind("/infiniband/", ib - 1)) {
    size_t slash = target.rfind('/', ib - 1);
    std::string_view pci = target.substr(slash + 1, ib - slash - 1);
    if (slash >= 8 && !pci.empty() && pci.find_first_not_of("0123456789abcdef:.") == std::string_view::npos &&
        ib + 12 < target.size())
      return std::pair{target, pci};
  }
  return std::nullopt;
}

// "path -> target" lines are links, "path = content" lines files (a path ending in '/' is a listing
// of its folder: skipped); paths and targets are one word.
void rebuild(const fs::path& sample, const poolrun::test::TempDir& sys) {
  std::ifstream in(sample);
  ASSERT_TRUE(in) << sample;
  std::string line;
  int files = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line[0] == '(') continue;
    std::string_view rest = line;
    std::string_view path = common::takeWord(rest), content = rest, target = rest;
    if (!path.empty() && common::takePrefix(target, " -> ") && isWord(target)) {
      fs::create_directories((sys.path() / path).parent_path());
      fs::create_directory_symlink(target, sys.path() / path);
      // The sample lists the class links but not the `device` link the kernel puts in every RDMA
      // device's folder, back to its PCI function (.../BDF/infiniband/DEV/device -> ../../../BDF).
      if (auto dev = rdmaUnderPci(path, target)) {
        fs::create_directories(sys.path() / dev->first);
        fs::create_directory_symlink(fs::path("../../..") / dev->second, sys.path() / dev->first / "device");
      }
    } else if (path.size() >= 2 && !path.ends_with('/') && common::takePrefix(content, " = ")) {
      sys.write(std::string(path), std::string(content) + "\n");
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
