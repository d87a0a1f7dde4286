// The job directory's one writer: every file whole or not at all, every failure one line naming the
// file and the system's reason. A full disk is /dev/full behind the writer's open (its seam).

#include "poolrun/launcher/job_directory.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "poolrun/common/error.hpp"
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

// A planted link under a temporary's name (the .plan.json.tmp-PID of the attack, and the names
// the writer tries now) is passed over, never written through: the victim's file keeps its text.
TEST(JobDirectoryTest, APlantedLinkIsNeverWrittenThrough) {
  test::TempDir tmp;
  const JobDirectory dir(tmp.path() / "job", Durability::kSameBoot);
  const fs::path victim = tmp.write("victim/private", "the victim's own text\n");
  const std::string pid = std::to_string(getpid());
  fs::create_symlink(victim, dir.file(".plan.json.tmp-" + pid));
  for (int k = 0; k < 5; ++k)
    fs::create_symlink(victim, dir.file(".plan.json.tmp-" + pid + "-" + std::to_string(k)));
  dir.write("plan.json", "{}\n");
  EXPECT_EQ(test::slurp(victim), "the victim's own text\n");
  EXPECT_EQ(test::slurp(dir.file("plan.json")), "{}\n");
  EXPECT_TRUE(fs::is_symlink(dir.file(".plan.json.tmp-" + pid + "-0"))) << "another's name is left alone";

  // The real open refuses a link at the name itself (O_EXCL | O_NOFOLLOW): EEXIST, nothing written.
  errno = 0;
  EXPECT_EQ(openForWrite(dir.file(".plan.json.tmp-" + pid), 0600), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(test::slurp(victim), "the victim's own text\n");

  // Where every name is taken, the write fails naming the file, and the target is not replaced.
  for (int k = 5; k < 64; ++k)
    fs::create_symlink(victim, dir.file(".hostfile.tmp-" + pid + "-" + std::to_string(k)));
  for (int k = 0; k < 5; ++k)
    fs::create_symlink(victim, dir.file(".hostfile.tmp-" + pid + "-" + std::to_string(k)));
  const std::string what = errorOf([&] { dir.write("hostfile", "n1 slots=8\n"); });
  EXPECT_EQ(what.find(dir.file("hostfile").string() + ": cannot write (creating "), 0u) << what;
  EXPECT_NE(what.find("File exists"), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(dir.file("hostfile")));
  EXPECT_EQ(test::slurp(victim), "the victim's own text\n");
}

std::string badInputOf(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// A job directory another user owns, or that its group or everyone may write without the sticky
// bit, is refused naming it, its owner or mode, and what to do; nothing is written there.
TEST(JobDirectoryTest, ADirectoryOthersCanChangeIsRefused) {
  test::TempDir tmp;
  const fs::path theirs = tmp.path() / "theirs";
  fs::create_directories(theirs);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    const std::string what = badInputOf([&] { JobDirectory(theirs, Durability::kSameBoot); });
    EXPECT_EQ(what.find("job directory " + theirs.string() + " belongs to "), 0u) << what;
    EXPECT_NE(what.find("uid 65534), not to you (root (uid 0)): "), std::string::npos) << what;
    EXPECT_NE(what.find("use a directory of your own (--job-dir DIR or POOLRUN_STATE_DIR)"),
              std::string::npos)
        << what;
    EXPECT_TRUE(fs::is_empty(theirs));
  }
  const fs::path shared = tmp.path() / "shared";
  fs::create_directories(shared);
  fs::permissions(shared, fs::perms::all);
  std::string what = badInputOf([&] { JobDirectory(shared, Durability::kSameBoot); });
  EXPECT_EQ(what, "job directory " + shared.string() +
                      " is writable by every user (mode 0777, no sticky bit): another user could replace the "
                      "files poolrun writes there; run `chmod go-w " +
                      shared.string() + "` or use a directory of your own");
  fs::permissions(shared, fs::perms(0775));
  what = badInputOf([&] { JobDirectory(shared / ".", Durability::kSameBoot); });
  EXPECT_NE(what.find(" is writable by its group (mode 0775, no sticky bit)"), std::string::npos) << what;
  EXPECT_TRUE(fs::is_empty(shared));
  // The sticky bit keeps others from replacing the user's files (as /tmp): taken.
  fs::permissions(shared, fs::perms(01777));
  JobDirectory(shared, Durability::kSameBoot).write("hostfile", "n1 slots=8\n");
  // A new job directory is made 0755 whatever the umask, so that poolrun does not refuse its own.
  mode_t old = umask(0);
  const JobDirectory made(tmp.path() / "new/job", Durability::kSameBoot);
  umask(old);
  EXPECT_EQ(fs::status(made.path()).permissions(), fs::perms(0755));
  EXPECT_EQ(fs::status(tmp.path() / "new").permissions(), fs::perms(0755));
  // A file where the directory should be says so.
  const fs::path file = tmp.write("a-file", "x");
  what = errorOf([&] { JobDirectory(file, Durability::kSameBoot); });
  EXPECT_EQ(what.find(file.string() + ": cannot create the job directory ("), 0u) << what;
}

// A job directory as poolrun makes it under its state directory: named by `id`, marked, `age` old.
void makeJobDir(const fs::path& jobs, const std::string& id, std::chrono::hours age, bool marked = true) {
  fs::create_directories(jobs / id / "sub");
  std::ofstream(jobs / id / "plan.json") << "{}";
  if (marked) std::ofstream(jobs / id / kJobMarkerFile) << id << "\n";
  fs::last_write_time(jobs / id, fs::file_time_type::clock::now() - age);
}

// A state directory pointed at a scratch folder with a jobs/ of its own: the month-old experiment
// folders there are not poolrun's and stay; so does anything not exactly as poolrun makes it.
TEST(JobDirectoryTest, PruningTakesOnlyWhatPoolrunMade) {
  test::TempDir tmp;
  const fs::path jobs = tmp.path() / "jobs";
  const auto month = std::chrono::hours(24 * 30);
  for (int i = 0; i < 5; ++i) makeJobDir(jobs, "experiment-" + std::to_string(i), month, false);
  makeJobDir(jobs, "L00000000000000a1", month);  // poolrun's: goes
  makeJobDir(jobs, "L00000000000000a2", month);  // its marker names another directory: stays
  std::ofstream(jobs / "L00000000000000a2" / kJobMarkerFile) << "L00000000000000a9\n";
  makeJobDir(jobs, "L00000000000000a3", month, false);  // its marker is a link to a valid one: stays
  fs::create_symlink(jobs / "L00000000000000a1" / kJobMarkerFile,
                     jobs / "L00000000000000a3" / kJobMarkerFile);
  makeJobDir(jobs, "run 2 (copy)", month, false);  // not a lease id's name, even marked: stays
  std::ofstream(jobs / "run 2 (copy)" / kJobMarkerFile) << "run 2 (copy)\n";
  const fs::path elsewhere = tmp.path() / "elsewhere";
  makeJobDir(elsewhere, "L00000000000000b1", month);  // a link to a marked directory: stays, and its target
  fs::create_directory_symlink(elsewhere / "L00000000000000b1", jobs / "L00000000000000b1");
  const bool root = geteuid() == 0;
  if (root) {  // another user's, marked: stays
    makeJobDir(jobs, "L00000000000000c1", month);
    ASSERT_EQ(chown((jobs / "L00000000000000c1").c_str(), 65534, 65534), 0);
  }
  EXPECT_EQ(pruneJobDirs(jobs, 0, std::chrono::hours(24 * 7)), 1u);
  EXPECT_FALSE(fs::exists(jobs / "L00000000000000a1"));
  for (const char* kept :
       {"experiment-0", "experiment-4", "L00000000000000a2", "L00000000000000a3", "run 2 (copy)"})
    EXPECT_TRUE(fs::exists(jobs / kept / "plan.json")) << kept;
  EXPECT_TRUE(fs::is_symlink(jobs / "L00000000000000b1"));
  EXPECT_TRUE(fs::exists(elsewhere / "L00000000000000b1" / "plan.json"));
  if (root) {
    EXPECT_TRUE(fs::exists(jobs / "L00000000000000c1" / "plan.json"));
  }

  // A jobs/ that is itself a link is not followed: the marked directories behind it stay.
  const fs::path linked = tmp.path() / "state2";
  fs::create_directories(linked);
  makeJobDir(elsewhere, "L00000000000000d1", month);
  fs::create_directory_symlink(elsewhere, linked / "jobs");
  EXPECT_EQ(pruneJobDirs(linked / "jobs", 0, std::chrono::hours(24 * 7)), 0u);
  EXPECT_TRUE(fs::exists(elsewhere / "L00000000000000d1" / "plan.json"));
  // Nor one that others may write.
  fs::permissions(jobs, fs::perms::all);
  makeJobDir(jobs, "L00000000000000e1", month);
  EXPECT_EQ(pruneJobDirs(jobs, 0, std::chrono::hours(24 * 7)), 0u);
  fs::permissions(jobs, fs::perms(0755));
  // Links inside a job directory that goes are removed as links: their targets stay.
  fs::create_directory_symlink(elsewhere, jobs / "L00000000000000e1" / "data");
  fs::create_symlink(elsewhere / "L00000000000000d1" / "plan.json", jobs / "L00000000000000e1" / "plan-link");
  fs::last_write_time(jobs / "L00000000000000e1", fs::file_time_type::clock::now() - month);
  EXPECT_EQ(pruneJobDirs(jobs, 0, std::chrono::hours(24 * 7)), 1u);
  EXPECT_FALSE(fs::exists(jobs / "L00000000000000e1"));
  EXPECT_TRUE(fs::exists(elsewhere / "L00000000000000d1" / "plan.json"));
}

// A file system mounted inside a job directory is not entered: what is on it stays, and so does
// the directory above it.
TEST(JobDirectoryTest, PruningStopsAtAFileSystemBoundary) {
  test::TempDir tmp;
  const fs::path jobs = tmp.path() / "jobs";
  makeJobDir(jobs, "L00000000000000f1", std::chrono::hours(24 * 30));
  const fs::path mount_point = jobs / "L00000000000000f1" / "scratch";
  fs::create_directories(mount_point);
  if (::mount("poolrun-test", mount_point.c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "); needs root";
  std::ofstream(mount_point / "results.csv") << "1,2,3\n";
  fs::last_write_time(jobs / "L00000000000000f1",
                      fs::file_time_type::clock::now() - std::chrono::hours(24 * 30));
  const size_t removed = pruneJobDirs(jobs, 0, std::chrono::hours(24 * 7));
  const bool kept = fs::exists(mount_point / "results.csv");
  ::umount(mount_point.c_str());
  EXPECT_EQ(removed, 0u);
  EXPECT_TRUE(kept) << "the mounted file system's files stay";
  EXPECT_TRUE(fs::is_directory(mount_point)) << "the directory above the mount stays";
}

}  // namespace
}  // namespace poolrun::launcher
