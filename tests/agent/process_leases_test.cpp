// Which lease a process on a GPU belongs to, from a /proc the test writes.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "poolrun/agent/agent.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using agent::kMaxEnvironBytes;
using agent::processLease;

std::string entries(std::initializer_list<std::string> list) {
  std::string out;
  for (const std::string& e : list) out += e + std::string(1, '\0');
  return out;
}

TEST(ProcessLease, TheFirstPoolrunLeaseOfTheEnvironment) {
  TempDir proc;
  proc.write("100/environ",
             entries({"PATH=/bin", "POOLRUN_LEASE=L0123456789abcdef", "POOLRUN_LEASE=Lother"}));
  proc.write("101/environ", entries({"PATH=/bin", "MY_POOLRUN_LEASE=Lnot", "XPOOLRUN_LEASE=Lnot"}));
  proc.write("102/environ", "POOLRUN_LEASE=Llast-without-nul");
  proc.write("103/environ", "");
  EXPECT_EQ(processLease(proc.path(), 100), "L0123456789abcdef");
  EXPECT_EQ(processLease(proc.path(), 101), std::nullopt);
  EXPECT_EQ(processLease(proc.path(), 102), "Llast-without-nul");
  EXPECT_EQ(processLease(proc.path(), 103), std::nullopt);
}

TEST(ProcessLease, AProcessThatIsGoneOrUnreadableHasNone) {
  TempDir proc;
  std::filesystem::create_directories(proc.path() / "200" / "environ");  // not a regular file
  EXPECT_EQ(processLease(proc.path(), 199), std::nullopt);
  EXPECT_EQ(processLease(proc.path(), 200), std::nullopt);
  std::filesystem::path locked = proc.write("201/environ", entries({"POOLRUN_LEASE=Llocked"}));
  chmod(locked.c_str(), 0);
  if (geteuid() != 0) {  // root reads it anyway
    EXPECT_EQ(processLease(proc.path(), 201), std::nullopt);
  }
}

TEST(ProcessLease, BytesThatAreNotUtf8AroundTheEntryDoNotMatter) {
  TempDir proc;
  proc.write("300/environ", entries({"BLOB=\xff\xfe\x80", "POOLRUN_LEASE=Lgood", "MORE=\xc0"}));
  proc.write("301/environ", entries({"POOLRUN_LEASE=L\xff\xfe"}));      // poold would refuse it
  proc.write("302/environ", entries({"POOLRUN_LEASE=L1 ; rm -rf /"}));  // not a lease id
  proc.write("303/environ", entries({"POOLRUN_LEASE="}));
  EXPECT_EQ(processLease(proc.path(), 300), "Lgood");
  EXPECT_EQ(processLease(proc.path(), 301), std::nullopt);
  EXPECT_EQ(processLease(proc.path(), 302), std::nullopt);
  EXPECT_EQ(processLease(proc.path(), 303), std::nullopt);
}

TEST(ProcessLease, AHugeEnvironmentIsReadOnlyToItsFirstMebibyte) {
  TempDir proc;
  const std::string filler = "FILLER=" + std::string(4 * kMaxEnvironBytes, 'x');
  proc.write("400/environ", entries({"POOLRUN_LEASE=Learly", filler}));
  proc.write("401/environ", entries({filler, "POOLRUN_LEASE=Llate"}));
  // An entry that the limit cuts: "POOLRUN_LEASE=Lcut" would read as "Lcu" or so.
  std::string cut =
      std::string(kMaxEnvironBytes - 20, 'y') + std::string(1, '\0') + "POOLRUN_LEASE=Lcut0123456789";
  proc.write("402/environ", cut + std::string(1, '\0'));
  EXPECT_EQ(processLease(proc.path(), 400), "Learly");
  EXPECT_EQ(processLease(proc.path(), 401), std::nullopt);
  EXPECT_EQ(processLease(proc.path(), 402), std::nullopt);
}

TEST(ProcessLeases, OneEntryPerProcessOfAnyGpuThatNamesALease) {
  TempDir proc;
  proc.write("10/environ", entries({"POOLRUN_LEASE=La"}));
  proc.write("11/environ", entries({"POOLRUN_LEASE=Lb"}));
  proc.write("12/environ", entries({"USER=eve"}));
  std::vector<topo::GpuSample> gpus(3);
  gpus[0].processes = {{10, 1}, {12, 1}};
  gpus[1].processes = {{10, 1}, {11, 1}, {13, 1}};
  EXPECT_EQ(agent::processLeases(gpus, proc.path()),
            (std::map<uint32_t, std::string>{{10, "La"}, {11, "Lb"}}));
}

}  // namespace
}  // namespace poolrun::test
