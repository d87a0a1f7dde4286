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

#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/error.hpp"
#include "poolrun/topo/nesting.hpp"
#include "poolrun/topo/regular_file.hpp"
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
  std::filesystem::path over = sparseFile(tmp, "over.xml", static_cast<off_t>(kTopologyFileLimit) + 1);
  EXPECT_HAS(errorOf([&] { readTopologyFile(over); }),
             "is 67108865 bytes; topology files are at most 64 MiB");
}

TEST(HostileFiles, MissingTopologyIsNamed) {
  EXPECT_HAS(errorOf([] { readTopologyFile("/nonexistent/topo.xml"); }),
             "/nonexistent/topo.xml: no such file");
}

TEST(HostileFiles, RegularFileReaderReadsProcFilesWhoseSizeIsZero) {
  FileIdentity id;
  std::string text = readRegularFile("/proc/self/status", kSysfsFileLimit, "status files", &id);
  EXPECT_HAS(text, "Name:");
  EXPECT_NE(id.inode, 0u);
  // A file whose size says nothing (0 in /proc) is still cut at the limit.
  EXPECT_HAS(errorOf([] { readRegularFile("/proc/self/maps", 16, "map files"); }),
             "/proc/self/maps is more than 16 bytes (it grew while read); map files are at most 16 bytes");
}

// A file written a moment ago may be half written (emptied by `>` and not yet filled): a watcher
// waits until its modification time is kFileSettleTime old; a time far ahead is not waited for.
TEST(HostileFiles, AFileJustWrittenIsNotSettled) {
  struct stat st {};
  st.st_mtim.tv_sec = 1'800'000'000;
  st.st_mtim.tv_nsec = 500'000'000;
  const auto mtime = std::chrono::system_clock::time_point(std::chrono::seconds(1'800'000'000)) +
                     std::chrono::milliseconds(500);
  EXPECT_FALSE(settled(st, mtime));
  EXPECT_FALSE(settled(st, mtime + kFileSettleTime - std::chrono::milliseconds(1)));
  EXPECT_TRUE(settled(st, mtime + kFileSettleTime));
  EXPECT_TRUE(settled(st, mtime + std::chrono::hours(24)));
  EXPECT_FALSE(settled(st, mtime - std::chrono::milliseconds(900)));  // a little ahead: wait
  EXPECT_TRUE(settled(st, mtime - std::chrono::seconds(2)));          // far ahead: another clock
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
  EXPECT_EQ(jsonTooDeepAt(R"({"a":"[[[[[[","b":["\"[[[["]})", 2), std::nullopt);
  EXPECT_EQ(jsonTooDeepAt(R"({"a":[[1]]})", 2), std::optional<size_t>(6));
  EXPECT_EQ(jsonTooDeepAt("]]]]{}", 1), std::nullopt);
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
