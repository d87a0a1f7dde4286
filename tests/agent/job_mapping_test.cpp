// dcgm-exporter's job-mapping files: one per GPU index naming its lease, none for a free GPU.

#include <gtest/gtest.h>

#include "poolrun/agent/agent.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

std::vector<std::string> names(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(JobMappingFiles, OneFilePerLeasedGpuAndNoneForAFreeOne) {
  TempDir dir;
  agent::JobMappingFiles files(dir.path(), 4);
  files.update({{0, "La"}, {2, "Lb"}, {9, "Lbeyond"}});
  EXPECT_EQ(names(dir.path()), (std::vector<std::string>{"0", "2"}));
  EXPECT_EQ(slurp(dir.path() / "0"), "La\n");
  EXPECT_EQ(slurp(dir.path() / "2"), "Lb\n");
  files.update({{2, "Lc"}});
  EXPECT_EQ(names(dir.path()), (std::vector<std::string>{"2"}));
  EXPECT_EQ(slurp(dir.path() / "2"), "Lc\n");
  files.update({});
  EXPECT_TRUE(names(dir.path()).empty());
}

TEST(JobMappingFiles, TheFirstUpdateClearsWhatAnEarlierRunLeft) {
  TempDir dir;
  dir.write("1", "Lstale\n");
  dir.write("3", "Lstale\n");
  dir.write("notes.txt", "not ours\n");
  agent::JobMappingFiles files(dir.path(), 4);
  files.update({{3, "Lnew"}});
  EXPECT_EQ(names(dir.path()), (std::vector<std::string>{"3", "notes.txt"}));
  EXPECT_EQ(slurp(dir.path() / "3"), "Lnew\n");
}

TEST(JobMappingFiles, OnlyAFileWhoseLeaseChangesIsWrittenAgain) {
  TempDir dir;
  agent::JobMappingFiles files(dir.path(), 2);
  files.update({{0, "La"}, {1, "Lb"}});
  dir.write("0", "marker\n");  // were it rewritten, the marker would go
  files.update({{0, "La"}, {1, "Lc"}});
  EXPECT_EQ(slurp(dir.path() / "0"), "marker\n");
  EXPECT_EQ(slurp(dir.path() / "1"), "Lc\n");
}

TEST(JobMappingFiles, AFileThatCannotBeWrittenIsNamedAndWrittenOnTheNextUpdate) {
  TempDir dir;
  // A file where the folder should be: no one, root included, can write in it.
  std::filesystem::path sub = dir.write("map", "a file\n");
  agent::JobMappingFiles files(sub, 2);
  try {
    files.update({{1, "La"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find((sub / "0").string() + ": cannot remove it"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(sub);
  std::filesystem::create_directories(sub);
  files.update({{1, "La"}});
  EXPECT_EQ(slurp(sub / "1"), "La\n");
}

}  // namespace
}  // namespace poolrun::test
