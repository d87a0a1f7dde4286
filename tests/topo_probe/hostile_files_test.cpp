// Files a hostile or careless user names as a topology or a cluster: devices, FIFOs, folders, files
// over the limit, and documents nested 100,000 levels deep. Each must fail at once with a message
// naming the file, never read until memory runs out, block, or overflow the stack.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <chrono>
#include <functional>
#include <future>
#include <string>

#include "poolrun/common/error.hpp"
#include "poolrun/common/nesting.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/blocking.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::topo {
namespace {

constexpr int kDeep = 100'000;

std::string repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string errorOf(const std::function<void()>& read, const std::filesystem::path& unblock = {}) {
  return test::errorOf<Error>(read, unblock);
}

std::filesystem::path sparseFile(const test::TempDir& tmp, const std::string& name, off_t size) {
  std::filesystem::path p = tmp.write(name, "");
  EXPECT_EQ(::truncate(p.c_str(), size), 0) << p;
  return p;
}

std::filesystem::path fifo(const test::TempDir& tmp, const std::string& name) {
  std::filesystem::path p = tmp.path() / name;
  EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
  return p;
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

TEST(HostileFiles, TopologyFromACharacterDeviceIsRefused) {
  std::string e = errorOf([] { readTopologyFile("/dev/zero"); });
  EXPECT_HAS(e, "/dev/zero is a character device, not a regular file");
  EXPECT_HAS(e, "topology files");
}

TEST(HostileFiles, TopologyFromAFifoIsRefusedWithoutBlocking) {
  test::TempDir tmp;
  std::filesystem::path p = fifo(tmp, "topo.fifo");
  std::string e = errorOf([&] { readTopologyFile(p); }, p);
  EXPECT_HAS(e, p.string() + " is a FIFO, not a regular file");
}

TEST(HostileFiles, TopologyFromAFolderIsRefused) {
  test::TempDir tmp;
  std::string e = errorOf([&] { readTopologyFile(tmp.path()); });
  EXPECT_HAS(e, tmp.path().string() + " is a directory, not a regular file");
}

TEST(HostileFiles, TopologyOverTheLimitIsRefusedBeforeItIsRead) {
  test::TempDir tmp;
  std::filesystem::path p = sparseFile(tmp, "big.xml", off_t{70} << 20);
  std::string e = errorOf([&] { readTopologyFile(p); });
  EXPECT_HAS(e, p.string() + " is 70 MiB; topology files are at most 64 MiB");
  std::filesystem::path over =
      sparseFile(tmp, "over.xml", static_cast<off_t>(common::kTopologyFileLimit) + 1);
  EXPECT_HAS(errorOf([&] { readTopologyFile(over); }),
             "is 67108865 bytes; topology files are at most 64 MiB");
}

TEST(HostileFiles, MissingTopologyIsNamed) {
  EXPECT_HAS(errorOf([] { readTopologyFile("/nonexistent/topo.xml"); }),
             "/nonexistent/topo.xml: no such file");
}

TEST(HostileFiles, RegularFileReaderReadsProcFilesWhoseSizeIsZero) {
  common::FileIdentity id;
  std::string text =
      common::readRegularFile("/proc/self/status", common::kSysfsFileLimit, "status files", &id);
  EXPECT_HAS(text, "Name:");
  EXPECT_NE(id.inode, 0u);
  // A file whose size says nothing (0 in /proc) is still cut at the limit.
  EXPECT_HAS(errorOf([] { common::readRegularFile("/proc/self/maps", 16, "map files"); }),
             "/proc/self/maps is more than 16 bytes (it grew while read); map files are at most 16 bytes");
}

// A file written a moment ago may be half written (emptied by `>` and not yet filled): a watcher
// reads a new version once it has seen it unchanged for kFileSettleTime, or at once where it was
// modified kFileTrustedAge before.
struct stat statOfVersion(int64_t inode, off_t size, common::FileWatch::Wall::time_point mtime) {
  struct stat st {};
  st.st_ino = static_cast<ino_t>(inode);
  st.st_size = size;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count();
  st.st_mtim.tv_sec = ns / 1'000'000'000;
  st.st_mtim.tv_nsec = ns % 1'000'000'000;
  return st;
}

TEST(HostileFiles, AWatcherReadsAVersionSeenUnchangedForTheSettleTime) {
  using std::chrono::milliseconds;
  const common::FileWatch::Steady::time_point t0{std::chrono::hours(1)};
  const common::FileWatch::Wall::time_point wall0{std::chrono::seconds(1'800'000'000)};
  const struct stat old = statOfVersion(7, 100, wall0 - std::chrono::hours(1));
  common::FileWatch watch(common::identityOf(old));
  EXPECT_FALSE(watch.due(old, t0, wall0)) << "the version read is not read again";

  const struct stat written = statOfVersion(7, 120, wall0);
  EXPECT_FALSE(watch.due(written, t0, wall0));
  EXPECT_FALSE(watch.due(written, t0 + common::kFileSettleTime - milliseconds(1), wall0 + milliseconds(199)));
  EXPECT_TRUE(watch.due(written, t0 + common::kFileSettleTime, wall0 + common::kFileSettleTime));
}

// The failure seen on a loaded machine: the file emptied, its writer held off the CPU past the
// settle time (or its time rounded down to the second), then filled. Going by the modification
// time alone, a look in between read the empty file; a watcher that saw it first waits, and starts
// again when the file is filled.
TEST(HostileFiles, AFileEmptiedLongerThanTheSettleTimeIsNotReadAtTheFirstLook) {
  using std::chrono::milliseconds;
  const common::FileWatch::Steady::time_point t0{std::chrono::hours(1)};
  const common::FileWatch::Wall::time_point wall0{std::chrono::seconds(1'800'000'000)};
  common::FileWatch watch(common::identityOf(statOfVersion(7, 100, wall0 - std::chrono::hours(1))));
  const struct stat emptied = statOfVersion(7, 0, wall0 - milliseconds(900));
  EXPECT_FALSE(watch.due(emptied, t0, wall0)) << "an empty file dated 900 ms ago was read at first sight";
  const struct stat filled = statOfVersion(7, 26, wall0 + milliseconds(150));
  EXPECT_FALSE(watch.due(filled, t0 + milliseconds(150), wall0 + milliseconds(150)));
  EXPECT_FALSE(watch.due(filled, t0 + milliseconds(300), wall0 + milliseconds(300)))
      << "the settle time counts from the first look at the filled file";
  EXPECT_TRUE(watch.due(filled, t0 + milliseconds(350), wall0 + milliseconds(350)));
}

TEST(HostileFiles, AWatcherReadsAtOnceAVersionWrittenLongBefore) {
  const common::FileWatch::Steady::time_point t0{std::chrono::hours(1)};
  const common::FileWatch::Wall::time_point wall0{std::chrono::seconds(1'800'000'000)};
  common::FileWatch watch(common::identityOf(statOfVersion(7, 100, wall0 - std::chrono::hours(1))));
  EXPECT_TRUE(watch.due(statOfVersion(8, 100, wall0 - common::kFileTrustedAge), t0, wall0))
      << "a file replaced while nobody looked";
  EXPECT_FALSE(watch.due(
      statOfVersion(9, 100, wall0 - common::kFileTrustedAge + std::chrono::milliseconds(1)), t0, wall0));
  // A time far ahead (another machine's clock, on a network file system) is waited for by sight.
  const struct stat ahead = statOfVersion(10, 100, wall0 + std::chrono::hours(1));
  EXPECT_FALSE(watch.due(ahead, t0, wall0));
  EXPECT_TRUE(watch.due(ahead, t0 + common::kFileSettleTime, wall0 + common::kFileSettleTime));
}

// Through the file system: a version is read once, an error once per version, and a version that
// changed while it was read is dropped.
TEST(HostileFiles, AWatchedFileIsReadOncePerVersion) {
  test::TempDir tmp;
  const std::filesystem::path file = tmp.write("watched", "one\n");
  auto setBack = [&] {
    std::filesystem::last_write_time(file, std::filesystem::file_time_type::clock::now() -
                                               common::kFileTrustedAge - std::chrono::seconds(1));
  };
  setBack();
  common::FileWatch watch;
  int reads = 0;
  auto read = [&] {
    ++reads;
    return common::readRegularFile(file, 64, "watched files");
  };
  EXPECT_EQ(watch.readIfChanged(file, read), std::optional<std::string>("one\n"));
  EXPECT_EQ(watch.readIfChanged(file, read), std::nullopt);
  EXPECT_EQ(reads, 1);

  tmp.write("watched", std::string(100, 'x'));
  setBack();
  EXPECT_THROW(watch.readIfChanged(file, read), Error) << "over the limit";
  EXPECT_EQ(watch.readIfChanged(file, read), std::nullopt) << "an error is said once for each version";
  EXPECT_EQ(reads, 2);

  tmp.write("watched", "two\n");
  setBack();
  auto rewrittenWhileRead = [&] {
    std::string text = read();
    tmp.write("watched", "three\n");
    setBack();
    return text;
  };
  EXPECT_EQ(watch.readIfChanged(file, rewrittenWhileRead), std::nullopt)
      << "a version that changed while read";
  EXPECT_EQ(watch.readIfChanged(file, read), std::optional<std::string>("three\n"));
}

TEST(HostileFiles, JsonTopologyNested100000DeepIsRefused) {
  test::TempDir tmp;
  std::filesystem::path objects =
      tmp.write("objects.json", repeat("{\"a\":", kDeep) + "1" + repeat("}", kDeep));
  EXPECT_HAS(errorOf([&] { readTopologyFile(objects); }),
             objects.string() + ": JSON nests deeper than 64 levels at byte ");
  std::filesystem::path arrays =
      tmp.write("arrays.json", "{\"gpus\":" + repeat("[", kDeep) + repeat("]", kDeep) + "}");
  EXPECT_HAS(errorOf([&] { readTopologyFile(arrays); }), "nests deeper than 64 levels at byte 71");
  // Truncated: no closing brackets at all.
  std::filesystem::path open = tmp.write("open.json", "{\"gpus\":" + repeat("[", kDeep));
  EXPECT_HAS(errorOf([&] { readTopologyFile(open); }), "nests deeper than 64 levels");
}

TEST(HostileFiles, NumberBeyondADoubleIsBadInput) {
  test::TempDir tmp;
  std::filesystem::path p = tmp.write("huge.json", R"({"schema": 1e999})");
  EXPECT_HAS(errorOf([&] { readTopologyFile(p); }),
             p.string() + ": unusable JSON: number overflow parsing '1e999'");
}

TEST(HostileFiles, NestingScannerSkipsStrings) {
  EXPECT_EQ(common::jsonTooDeepAt(R"({"a":"[[[[[[","b":["\"[[[["]})", 2), std::nullopt);
  EXPECT_EQ(common::jsonTooDeepAt(R"({"a":[[1]]})", 2), std::optional<size_t>(6));
  EXPECT_EQ(common::jsonTooDeepAt("]]]]{}", 1), std::nullopt);
}

TEST(HostileFiles, HwlocXmlNested100000DeepIsRefused) {
  test::TempDir tmp;
  std::filesystem::path p =
      tmp.write("deep.xml", "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n" +
                                repeat("<object type=\"Group\" os_index=\"0\">\n", kDeep) +
                                repeat("</object>", kDeep) + "</topology>\n");
  EXPECT_HAS(errorOf([&] { readTopologyFile(p); }),
             p.string() + ": XML nests deeper than 128 levels at line 131");
}

// A DOCTYPE without a system id crashed hwloc 2.9's libxml2 import (a segfault in every program
// that reads topology files); hwloc's own parser refuses the file with an error naming it.
TEST(HostileFiles, HwlocXmlWithABareDoctypeIsRefusedNotACrash) {
  test::TempDir tmp;
  std::filesystem::path p = tmp.write("doctype.xml",
                                      "<?xml version=\"1.0\"?><!DOCTYPE t><topology version=\"2.0\">"
                                      "<object type=\"Machine\" os_index=\"0\"></object></topology>");
  EXPECT_HAS(errorOf([&] { readTopologyFile(p); }), p.string() + ": hwloc could not import this XML");
}

TEST(HostileFiles, NcclXmlNested100000DeepIsRefused) {
  test::TempDir tmp;
  std::filesystem::path p = tmp.write(
      "deep.xml",
      "<system version=\"1\"><cpu numaid=\"0\" affinity=\"ff\" arch=\"x86_64\" vendor=\"GenuineIntel\">" +
          repeat("<pci busid=\"0000:01:00.0\" class=\"0x060400\">", kDeep) + repeat("</pci>", kDeep) +
          "</cpu></system>");
  EXPECT_HAS(errorOf([&] { readTopologyFile(p); }), "PCI tree deeper than 32 levels");
  std::filesystem::path unknown = tmp.write(
      "unknown.xml", "<system version=\"1\">" + repeat("<x>", kDeep) + repeat("</x>", kDeep) + "</system>");
  EXPECT_HAS(errorOf([&] { readTopologyFile(unknown); }), "unexpected <x> under <system>");
}

class HostileClusterFiles : public ::testing::Test {
 protected:
  std::string cluster(const std::string& topology) {
    return "[[group]]\nnodes = \"n[1-2]\"\ntopology = \"" + topology + "\"\n";
  }
  test::TempDir tmp_;
};

TEST_F(HostileClusterFiles, TopologyThatIsADeviceIsNamedWithItsGroup) {
  std::filesystem::path c = tmp_.write("c.toml", cluster("/dev/zero"));
  EXPECT_HAS(errorOf([&] { readClusterFile(c); }),
             c.string() + ": group 1: topology: /dev/zero is a character device, not a regular file");
}

TEST_F(HostileClusterFiles, TopologyThatIsAFifoDoesNotBlock) {
  std::filesystem::path p = fifo(tmp_, "topo.fifo");
  std::filesystem::path c = tmp_.write("c.toml", cluster(p.string()));
  EXPECT_HAS(errorOf([&] { readClusterFile(c); }, p), p.string() + " is a FIFO");
}

TEST_F(HostileClusterFiles, ClusterFileItselfMustBeARegularFileWithinTheLimit) {
  EXPECT_HAS(errorOf([] { readClusterFile("/dev/zero"); }), "/dev/zero is a character device");
  EXPECT_HAS(errorOf([&] { readClusterFile(tmp_.path()); }), "is a directory");
  std::filesystem::path p = fifo(tmp_, "c.fifo");
  EXPECT_HAS(errorOf([&] { readClusterFile(p); }, p), "is a FIFO");
  std::filesystem::path big = sparseFile(tmp_, "big.toml", off_t{20} << 20);
  EXPECT_HAS(errorOf([&] { readClusterFile(big); }),
             big.string() + " is 20 MiB; cluster files are at most 16 MiB");
}

TEST_F(HostileClusterFiles, Nested100000DeepIsRefused) {
  const std::string head = cluster("x.json");
  for (const std::string& deep : {
           head + "labels = " + repeat("[", kDeep) + repeat("]", kDeep) + "\n",
           head + "labels = " + repeat("{a=", kDeep) + "1" + repeat("}", kDeep) + "\n",
           // toml++ parses a million key parts (2 MiB) and then overflows the stack destroying them.
           head + "labels." + repeat("a.", 10 * kDeep) + "b = 1\n",
           head + "[group." + repeat("\"a\" . ", kDeep) + "b]\n",
       }) {
    std::filesystem::path c = tmp_.write("deep.toml", deep);
    std::string e = errorOf([&] { readClusterFile(c); });
    EXPECT_HAS(e, c.string() + ":");
    EXPECT_HAS(e, "nest");
  }
  EXPECT_HAS(errorOf([&] {
               readClusterFile(tmp_.write("dots.toml", head + "labels." + repeat("a.", 70) + "b = 1\n"));
             }),
             "dots.toml:4: a key nests deeper than 64 levels");
}

TEST_F(HostileClusterFiles, DotsInStringsCommentsAndNumbersAreNotKeyParts) {
  const std::string dots = repeat(".", 200);
  std::filesystem::path c =
      tmp_.write("c.toml", "# " + dots + "\n[[group]]\nnodes = \"n[1-2]\"\ntopology = \"missing" + dots +
                               "\"\nlabels = { a = '" + dots + "', b = \"\"\"\n" + dots + "\n\"\"\" }\n");
  EXPECT_HAS(errorOf([&] { readClusterFile(c); }), "no such file");
}

}  // namespace
}  // namespace poolrun::topo
