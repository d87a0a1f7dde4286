// The doctor on a tree where kernel files are not what they should be: a FIFO (which a plain read
// would block on forever), a character device, a file far larger than any attribute. The doctor ends
// promptly, and the checks that read them report what they found.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "fake_node.hpp"
#include "poolrun/doctor/doctor.hpp"

namespace poolrun::doctor {
namespace {

using test::FakeNode;

const Check* find(const Report& r, const std::string& id, const std::string& subject = "") {
  for (const Check& c : r.checks) {
    if (c.id == id && (subject.empty() || c.subject.find(subject) != std::string::npos)) return &c;
  }
  return nullptr;
}

TEST(HostileFiles, FifosDevicesAndHugeFilesInTheTreeDoNotStopTheDoctor) {
  FakeNode node(FakeNode::Fabric::kIb);
  const std::filesystem::path state = node.path() / "sys/class/infiniband/mlx5_0/ports/1/state";
  std::filesystem::remove(state);
  ASSERT_EQ(::mkfifo(state.c_str(), 0600), 0);
  const std::filesystem::path limits = node.path() / "proc/self/limits";
  std::filesystem::remove(limits);
  std::filesystem::create_directories(limits.parent_path());
  std::filesystem::create_symlink("/dev/zero", limits);
  const std::filesystem::path modules = node.path() / "proc/modules";
  node.write("proc/modules", "nvidia_peermem 16384 0 - Live 0x0000000000000000\n");
  ASSERT_EQ(::truncate(modules.c_str(), off_t{1} << 30), 0);  // sparse: no disk used

  NodeSources sources;
  sources.roots = node.roots();
  auto report = std::async(std::launch::async, [&] { return checkNode(sources, {}); });
  if (report.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "the doctor blocked on the FIFO " << state;
    int fd = ::open(state.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
  }
  Report r = report.get();
  const Check* memlock = find(r, "rdma.memlock");
  ASSERT_NE(memlock, nullptr) << toText(r);
  EXPECT_EQ(memlock->status, Status::kWarn);
  EXPECT_NE(memlock->evidence.find(limits.string() + " is a character device, not a regular file"),
            std::string::npos)
      << memlock->evidence;
  const Check* sysfs = find(r, "rdma.sysfs");
  ASSERT_NE(sysfs, nullptr) << toText(r);
  EXPECT_NE(sysfs->evidence.find(state.string() + " is a FIFO, not a regular file"), std::string::npos)
      << toText(r);
  const Check* port = find(r, "rdma.port", "mlx5_0");
  ASSERT_NE(port, nullptr) << toText(r);
  EXPECT_NE(port->status, Status::kPass) << toText(r);
  // Of a 1 GiB /proc/modules, the head is read.
  const Check* peermem = find(r, "gdr.peermem");
  ASSERT_NE(peermem, nullptr) << toText(r);
  EXPECT_EQ(peermem->status, Status::kPass) << toText(r);
}

}  // namespace
}  // namespace poolrun::doctor
