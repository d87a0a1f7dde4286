// The job directory's one writer: every file whole or not at all, every failure one line naming the
// file and the system's reason. A full disk is /dev/full behind the writer's open (its seam).

#include "poolrun/launcher/job_directory.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "poolrun/topo/error.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::launcher {
namespace {

namespace fs = std::filesystem;

// Creates the temporary file as the real open does, then hands back a descriptor of /dev/full,
// where every write fails with ENOSPC.
int openOnAFullDisk(const fs::path& path, mode_t mode) {
  int fd = openForWrite(path, mode);
  if (fd < 0) return fd;
  close(fd);
  return ::open("/dev/full", O_WRONLY | O_CLOEXEC);
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string errorOf(const std::function<void()>& write) {
  try {
    write();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(JobDirectoryTest, AFullDiskLeavesTheOldFileOrNone) {
  test::TempDir tmp;
  const JobDirectory good(tmp.path() / "job", Durability::kSynced);
  good.write("rankfile.mpi", "rank 0=n1 slot=0\n");
  const JobDirectory full(tmp.path() / "job", Durability::kSynced, openOnAFullDisk);
  for (const char* name : {"rankfile.mpi", "hostfile"}) {
    const std::string what = errorOf([&] { full.write(name, std::string(100'000, 'x')); });
    const std::string file = (tmp.path() / "job" / name).string();
    EXPECT_EQ(what.find(file + ": cannot write (writing "), 0u) << what;
    EXPECT_NE(what.find(": No space left on device); check that the folder is writable and has space"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
  // The rankfile written before is whole, no hostfile was made, no temporary is left.
  EXPECT_EQ(test::slurp(tmp.path() / "job/rankfile.mpi"), "rank 0=n1 slot=0\n");
  EXPECT_EQ(entries(tmp.path() / "job"), std::vector<std::string>{"rankfile.mpi"});
}

// What the system refuses is named with its reason: a file where the directory should be, a
// directory where a file should be (a rename that cannot replace it).
TEST(JobDirectoryTest, WhatCannotBeWrittenIsNamedWithTheReason) {
  test::TempDir tmp;
  const fs::path notADir = tmp.write("job", "a file, not a directory");
  const std::string what = errorOf([&] { JobDirectory(notADir, Durability::kSameBoot); });
  EXPECT_EQ(what.find(notADir.string() + ": cannot create the job directory ("), 0u) << what;

  const JobDirectory dir(tmp.path() / "job2", Durability::kSameBoot);
  tmp.write("job2/hostfile/inside", "");
  const std::string rename = errorOf([&] { dir.write("hostfile", "n1 slots=8\n"); });
  EXPECT_EQ(rename.find((tmp.path() / "job2/hostfile").string() + ": cannot write (renaming "), 0u) << rename;
  EXPECT_NE(rename.find("Is a directory"), std::string::npos) << rename;
  EXPECT_EQ(entries(tmp.path() / "job2"), std::vector<std::string>{"hostfile"}) << "no temporary left";
}

// A file without a mode given gets 0666 less the umask, as any new file; write() returns its path.
TEST(JobDirectoryTest, FilesGetTheUmasksMode) {
  test::TempDir tmp;
  const JobDirectory dir(tmp.path() / "a/b/job", Durability::kSameBoot);
  mode_t old = umask(027);
  const fs::path written = dir.write("command", "mpirun -np 2 x\n");
  umask(old);
  EXPECT_EQ(written, tmp.path() / "a/b/job/command");
  EXPECT_EQ(fs::status(written).permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  EXPECT_EQ(test::slurp(written), "mpirun -np 2 x\n");
}

}  // namespace
}  // namespace poolrun::launcher
