#pragma once

// The job directory: every file poolrun writes for a job, by one writer with one policy. plan.json,
// rankfile and topo-NODE.xml (the plan), tuner.json, hostfile and rankfile.mpi (what mpirun reads),
// rank-env.json, command and run.sh (the launch, to read or run again by hand).
//
// Every file is written whole under a temporary name in the same folder and renamed over its name,
// so that a reader (mpirun, a user's shell) finds the old file or the whole new one, never a part of
// it; every write, close and rename is checked, and a failed one removes the temporary and throws
// poolrun::Error (kIo) naming the file and the system's reason, before anything reads it.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace poolrun::launcher {

struct JobPlan;

// Creates `path` and opens it for writing as open(2) with O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW
// does, with `mode`; returns a descriptor, or -1 with errno set (EEXIST where anything, a planted
// symbolic link too, has the name). The seam through which tests make writes fail (/dev/full).
using OpenForWrite = std::function<int(const std::filesystem::path& path, mode_t mode)>;
int openForWrite(const std::filesystem::path& path, mode_t mode);

// Checks that `dir` (`what`: "job directory", "state directory") is a directory nobody but the
// user can change: owned by the effective user and not writable by its group or others, unless
// it has the sticky bit (as /tmp). Another user who can write there could plant links under the
// names poolrun writes, or rewrite the run.sh the user is told to run. Throws poolrun::Error
// (kBadInput) naming the directory, its owner and mode and what to do; kIo where it cannot be
// examined.
void checkOwnDirectory(const std::filesystem::path& dir, std::string_view what);

// Creates `dir` and its missing parents (mode 0755 less the umask), then checkOwnDirectory.
void makeOwnDirectory(const std::filesystem::path& dir, std::string_view what);

// The file poolrun writes in each job directory it makes under its state directory, holding the
// lease id the directory is named after: pruneJobDirs removes no directory without it.
inline constexpr std::string_view kJobMarkerFile = ".poolrun-job";

// Whether a written file is also synced (fsync) before its rename, so that it is whole after a crash
// too. On this project's VM (ext4) the ten files of a job cost 60-140 ms synced, against under 1 ms
// not: a launch synced took 606 ms against 465 ms (median of 8, /bin/true on 2 simulated nodes),
// so a launch's files, which mpirun reads at once and a crash makes useless, are not synced.
enum class Durability {
  kSameBoot,  // read back before the next reboot (a launch's files, read by mpirun): not synced
  kSynced,    // the product itself (a dry run's directory, `poolrun plan --out`): synced
};

// Writes `text` to `file` atomically (above). `mode`: the file's permissions exactly (run.sh),
// whatever the umask; nullopt: 0666 less the umask, as any new file. Throws poolrun::Error (kIo)
// "FILE: cannot write (writing TMP: No space left on device); check that ...".
void writeFileAtomically(const std::filesystem::path& file, std::string_view text,
                         std::optional<std::filesystem::perms> mode, Durability durability,
                         const OpenForWrite& open = openForWrite);

class JobDirectory {
 public:
  // Creates `dir` and its parents where missing, and checks that it is the user's own
  // (checkOwnDirectory). Throws poolrun::Error naming it.
  JobDirectory(std::filesystem::path dir, Durability durability, OpenForWrite open = openForWrite);

  const std::filesystem::path& path() const { return dir_; }
  std::filesystem::path file(std::string_view name) const { return dir_ / name; }

  // Writes the file `name` of the directory (above); returns its path.
  std::filesystem::path write(std::string_view name, std::string_view text,
                              std::optional<std::filesystem::perms> mode = std::nullopt) const;
  // plan.json, rankfile, and the NCCL topology XML of every node of the plan (topo-NODE.xml).
  void writePlan(const JobPlan& plan) const;

 private:
  std::filesystem::path dir_;
  Durability durability_;
  OpenForWrite open_;
};

// Removes job directories under `jobs` (poolrun's own, in the state directory) whose modification
// time is older than `max_age`, keeping the `keep` newest whatever their age. A running job's
// directory is touched at every lease renewal, so it never looks old. With `every` above zero it
// looks at most that often (the time of `jobs/.pruned` says when it last did); zero looks every
// time. Best effort: what cannot be read or removed stays. Returns how many were removed.
// Only what poolrun made is a job directory here: one named as a lease id, owned by the user, on
// the file system of `jobs`, holding a kJobMarkerFile that names it. Nothing is removed where
// `jobs` is a symbolic link or not the user's own; nothing is followed through a link, and nothing
// on another file system (a mount inside a job directory) is entered.
size_t pruneJobDirs(const std::filesystem::path& jobs, size_t keep, std::chrono::hours max_age,
                    std::chrono::minutes every = std::chrono::minutes(0));

}  // namespace poolrun::launcher
