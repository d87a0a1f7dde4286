// The one writer of a job directory's files (job_directory.hpp).

#include "poolrun/launcher/job_directory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::launcher {
namespace {

// How many temporary names a write tries before giving up: each is taken only by creating it.
constexpr int kTemporaryNames = 64;

// A descriptor closed when it goes.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

int openForWrite(const std::filesystem::path& path, mode_t mode) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
}

void checkOwnDirectory(const std::filesystem::path& dir, std::string_view what) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw Error(ErrorCode::kIo, std::string(what) + " " + dir.string() + ": cannot examine it (" +
                                    std::strerror(errno) + "); check the path and its permissions");
  if (!S_ISDIR(st.st_mode))
    throw badInput(std::string(what) + " " + dir.string() + " is " +
                   std::string(common::fileTypeName(st.st_mode)) + ", not a directory; name a directory");
  const uid_t me = geteuid();
  if (st.st_uid != me)
    throw badInput(std::string(what) + " " + dir.string() + " belongs to " + common::userText(st.st_uid) +
                   ", not to you (" + common::userText(me) +
                   "): its owner could change the plan and run.sh poolrun " +
                   "writes there; use a directory of your own (--job-dir DIR or POOLRUN_STATE_DIR)");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    throw badInput(
        std::string(what) + " " + dir.string() + " is writable by " +
        ((st.st_mode & S_IWOTH) != 0 ? "every user" : "its group") + " (mode " +
        common::modeText(st.st_mode) +
        ", no sticky bit): another user could replace the files poolrun writes there; run `chmod go-w " +
        dir.string() + "` or use a directory of your own");
}

void makeOwnDirectory(const std::filesystem::path& dir, std::string_view what) {
  // Each missing folder is made 0755 (less the umask), never more open than that: a umask of 002
  // would otherwise leave it group-writable, which checkOwnDirectory refuses.
  std::filesystem::path made;
  for (const std::filesystem::path& part : dir) {
    made /= part;
    if (::mkdir(made.c_str(), 0755) == 0) continue;
    std::string why = std::strerror(errno);
    struct stat st {};
    if (errno == EEXIST && ::stat(made.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) continue;
      why += ": it is " + std::string(common::fileTypeName(st.st_mode));
    }
    throw Error(ErrorCode::kIo, made.string() + ": cannot create the " + std::string(what) + " (" + why +
                                    "); check that its folder exists and is writable");
  }
  checkOwnDirectory(dir, what);
}

void writeFileAtomically(const std::filesystem::path& file, std::string_view text,
                         std::optional<std::filesystem::perms> mode, Durability durability,
                         const OpenForWrite& open) {
  // The temporary is created, never reused: a name anyone else has taken (a planted link, another
  // write's temporary) is passed over for the next.
  const std::string stem = "." + file.filename().string() + ".tmp-" + std::to_string(getpid()) + "-";
  std::filesystem::path tmp;
  int fd = -1;
  bool created = false;
  auto fail = [&](const char* what) {
    const int error = errno;
    if (fd >= 0) close(fd);
    if (created) unlink(tmp.c_str());
    throw Error(ErrorCode::kIo, file.string() + ": cannot write (" + what + " " + tmp.string() + ": " +
                                    std::strerror(error) +
                                    "); check that the folder is writable and has space");
  };
  for (int k = 0; fd < 0 && k < kTemporaryNames; ++k) {
    tmp = file.parent_path() / (stem + std::to_string(k));
    fd = open(tmp, mode ? static_cast<mode_t>(*mode) : 0666);
    if (fd < 0 && errno != EEXIST) fail("creating");
  }
  if (fd < 0) fail("creating");  // every name taken: EEXIST, with the last name tried
  created = true;
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("writing");
    if (n == 0) {
      errno = ENOSPC;  // a write that takes nothing would loop for ever
      fail("writing");
    }
    done += static_cast<size_t>(n);
  }
  // The mode given, whatever the umask took from it at creation.
  if (mode && fchmod(fd, static_cast<mode_t>(*mode)) != 0) fail("setting the mode of");
  if (durability == Durability::kSynced && fsync(fd) != 0) fail("syncing");
  const int closing = fd;
  fd = -1;
  if (close(closing) != 0) fail("closing");
  if (rename(tmp.c_str(), file.c_str()) != 0) fail("renaming");
}

JobDirectory::JobDirectory(std::filesystem::path dir, Durability durability, OpenForWrite open)
    : dir_(std::move(dir)), durability_(durability), open_(std::move(open)) {
  makeOwnDirectory(dir_, "job directory");
}

std::filesystem::path JobDirectory::write(std::string_view name, std::string_view text,
                                          std::optional<std::filesystem::perms> mode) const {
  std::filesystem::path path = file(name);
  writeFileAtomically(path, text, mode, durability_, open_);
  return path;
}

void JobDirectory::writePlan(const JobPlan& plan) const {
  write("plan.json", planToJson(plan).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  write("rankfile", rankfile(plan));
  std::map<const topo::NodeTopology*, std::string> xml;
  for (const NodePlan& n : plan.nodes) {
    auto it = xml.find(n.node.topology.get());
    if (it == xml.end()) it = xml.emplace(n.node.topology.get(), topo::toNcclXml(*n.node.topology)).first;
    write("topo-" + n.name + ".xml", it->second);
  }
}

namespace {

// How deep removeTree goes: each level holds a descriptor open.
constexpr int kMaxRemoveDepth = 128;

// Removes the entry `name` of the directory `parent` and, for a directory, everything in it, as the
// user: never through a symbolic link (each level is opened with O_NOFOLLOW and every entry looked
// at with AT_SYMLINK_NOFOLLOW), never into another file system than `device`, at most
// kMaxRemoveDepth levels down. Returns whether the entry is gone; what could not be removed stays.
bool removeTree(int parent, const char* name, dev_t device, int depth = 0) {
  struct stat st {};
  if (::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  if (!S_ISDIR(st.st_mode)) return ::unlinkat(parent, name, 0) == 0;
  if (st.st_dev != device || depth >= kMaxRemoveDepth) return false;  // a mount point: not entered
  int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* listing = ::fdopendir(fd);
  if (listing == nullptr) {
    ::close(fd);
    return false;
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(listing)) {
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  for (const std::string& n : names) removeTree(::dirfd(listing), n.c_str(), device, depth + 1);
  ::closedir(listing);
  return ::unlinkat(parent, name, AT_REMOVEDIR) == 0;
}

// Whether `entry` of the jobs folder (descriptor `jobs`, on `device`) is a job directory poolrun
// made for the user: a lease id's name, a directory (not a link) on the same file system, owned by
// the user, with a marker that is a regular file holding that name.
bool isPoolrunJobDir(int jobs, const std::string& entry, dev_t device) {
  if (!common::leaseIdProblem(entry).empty()) return false;
  struct stat st {};
  if (::fstatat(jobs, entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_dev != device || st.st_uid != geteuid())
    return false;
  int dir = ::openat(jobs, entry.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) return false;
  Fd closeDir(dir);
  int marker =
      ::openat(dir, std::string(kJobMarkerFile).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (marker < 0) return false;
  Fd closeMarker(marker);
  struct stat ms {};
  if (::fstat(marker, &ms) != 0 || !S_ISREG(ms.st_mode) || ms.st_size > 4096) return false;
  char text[4097];
  ssize_t n = ::read(marker, text, sizeof text - 1);
  if (n <= 0) return false;
  return common::trim(std::string_view(text, static_cast<size_t>(n))) == entry;
}

}  // namespace

size_t pruneJobDirs(const std::filesystem::path& jobs, size_t keep, std::chrono::hours max_age,
                    std::chrono::minutes every) {
  namespace fs = std::filesystem;
  // Listing a week of job directories with their times costs milliseconds, so a launch looks only
  // when the last look is `every` old, and reads times only when there are more than `keep`.
  const fs::path stamp = jobs / ".pruned";
  const fs::file_time_type now = fs::file_time_type::clock::now();
  std::error_code ec;
  if (every.count() > 0) {
    fs::file_time_type last = fs::last_write_time(stamp, ec);
    if (!ec && now - last < every && last <= now) return 0;
  }
  // The folder itself, not what a link there points at, and only where it is the user's own.
  int fd = ::open(jobs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;  // no job directory yet, a link, or one poolrun cannot read: nothing to do
  DIR* listing = ::fdopendir(fd);
  if (listing == nullptr) {
    ::close(fd);
    return 0;
  }
  struct Closer {
    DIR* d;
    ~Closer() { ::closedir(d); }
  } closer{listing};
  struct stat self {};
  if (::fstat(fd, &self) != 0 || self.st_uid != geteuid() ||
      ((self.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (self.st_mode & S_ISVTX) == 0))
    return 0;
  std::vector<std::string> candidates;
  while (const dirent* e = ::readdir(listing)) {
    const std::string name = e->d_name;
    if (name != "." && name != ".." && isPoolrunJobDir(fd, name, self.st_dev)) candidates.push_back(name);
  }
  if (every.count() > 0) {
    try {
      writeFileAtomically(stamp, "", std::nullopt, Durability::kSameBoot);  // its time is the last look's
    } catch (const Error&) {  // best effort: looked at again next time
    }
  }
  if (candidates.size() <= keep) return 0;
  std::vector<std::pair<struct timespec, std::string>> dirs;
  for (std::string& name : candidates) {
    struct stat st {};
    if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      dirs.emplace_back(st.st_mtim, std::move(name));
  }
  auto newer = [](const struct timespec& a, const struct timespec& b) {
    return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
  };
  std::sort(dirs.begin(), dirs.end(), [&](const auto& a, const auto& b) { return newer(a.first, b.first); });
  const auto cutoff = std::chrono::system_clock::now() - max_age;
  const struct timespec cut = {std::chrono::system_clock::to_time_t(cutoff), 0};
  size_t removed = 0;
  for (size_t i = keep; i < dirs.size(); ++i)
    if (newer(cut, dirs[i].first) && removeTree(fd, dirs[i].second.c_str(), self.st_dev)) ++removed;
  return removed;
}

}  // namespace poolrun::launcher
