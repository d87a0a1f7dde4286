#pragma once

// Reading a file a user names: a regular file only, and never more than a limit that fits its format.
// `poolrun topo --from /dev/zero` or a FIFO given as a tuner configuration must fail at once with a
// message, not read until memory runs out or block forever. Header-only, so that the NCCL tuner
// plugin, which links nothing of topo_probe (its only run-time dependency is libc), shares it.

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "poolrun/common/error.hpp"
#include "poolrun/common/text.hpp"

namespace poolrun::common {

// The limits of the formats, in bytes. Each is far above the largest real file (an 8-GPU hwloc XML
// export with every PCI device is about 400 KiB). The tuner's are in poolrun/tuner/config.hpp.
inline constexpr size_t kTopologyFileLimit = size_t{64} << 20;  // hwloc XML, NCCL XML, poolrun JSON
inline constexpr size_t kClusterFileLimit = size_t{16} << 20;   // cluster TOML
inline constexpr size_t kTokenFileLimit = size_t{64} << 10;     // bearer token files
inline constexpr size_t kSysfsFileLimit = size_t{64} << 10;     // one /sys or /proc attribute

// What identifies one version of a file: a cache keyed by it reads again a file that was replaced
// (another inode) or rewritten (another size or modification time).
// Its owner and mode are part of it: a token file made writable by others is looked at again.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  uid_t owner = 0;
  mode_t mode = 0;
  bool operator==(const FileIdentity&) const = default;
};

inline FileIdentity identityOf(const struct stat& st) {
  return {st.st_dev, st.st_ino, st.st_size, int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
          st.st_uid, st.st_mode};
}

// When a watcher (poold's token, scrape token and quotas files) reads again a file that changed.
// `cat > FILE`, `echo ... > FILE` and editors that save in place empty the file first and fill it
// after, and a watcher that read it in between would take the empty file for the new version (for
// the quotas: nobody has a guarantee any more). A new version is read once it is whole by one of
// two signs:
// - this watcher has seen it unchanged (inode, size, modification time) for kFileSettleTime, or
// - its modification time is kFileTrustedAge old: a file changed while nobody looked (a token file
//   rotated on an idle pool) is read at the first look.
// The modification time alone is not enough: on a loaded machine the writer can be held off the
// CPU between emptying and filling for longer than the settle time, and file systems that keep
// whole seconds date a file up to a second early; the trusted age leaves a second for both. A
// version that changes while it is read is dropped and looked at again.
inline constexpr std::chrono::milliseconds kFileSettleTime{200};
inline constexpr std::chrono::seconds kFileTrustedAge{2};

class FileWatch {
 public:
  using Steady = std::chrono::steady_clock;
  using Wall = std::chrono::system_clock;

  FileWatch() = default;
  // A watch of a file whose version `read` was read already.
  explicit FileWatch(const FileIdentity& read) : taken_(read) {}

  // Whether the file as `st` describes it is a new version that is whole (see above). Each call is
  // a look: the settle time counts from the first look that saw this version.
  bool due(const struct stat& st, Steady::time_point now = Steady::now(),
           Wall::time_point wall = Wall::now()) {
    const FileIdentity seen = identityOf(st);
    if (seen == taken_) {
      pending_.reset();
      return false;
    }
    if (!pending_ || *pending_ != seen) {
      pending_ = seen;
      first_seen_ = now;
    }
    const auto mtime = Wall::time_point(std::chrono::duration_cast<Wall::duration>(
        std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
    return now - first_seen_ >= kFileSettleTime || wall - mtime >= kFileTrustedAge;
  }

  // `read()`'s value where `file` has a new version that is due and that stayed the same while it
  // was read; nullopt where it is unchanged, still settling, gone, or changed while read. An
  // exception from `read` is passed on once for each version (the version counts as read).
  template <class Read>
  auto readIfChanged(const std::filesystem::path& file, Read read) -> std::optional<decltype(read())> {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0 || !due(st)) return std::nullopt;
    const FileIdentity before = identityOf(st);
    auto unchanged = [&] {
      struct stat after {};
      return ::stat(file.c_str(), &after) == 0 && identityOf(after) == before;
    };
    std::optional<decltype(read())> value;
    try {
      value = read();
    } catch (...) {
      if (!unchanged()) return std::nullopt;  // a half-written version: look again
      taken_ = before;
      throw;
    }
    if (!unchanged()) return std::nullopt;
    taken_ = before;
    pending_.reset();
    return value;
  }

 private:
  FileIdentity taken_;                   // the version read last
  std::optional<FileIdentity> pending_;  // a newer version seen, not yet read
  Steady::time_point first_seen_{};      // when pending_ was first seen
};

// "a FIFO", "a character device", "a directory", ...: what a file that is not regular is, for messages.
inline std::string_view fileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

// "20 GiB", "64 MiB", "4 KiB", "1000 bytes": exact, so that a file one byte over the limit does not
// read as the limit itself.
inline std::string byteSizeText(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0)
    return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (uint64_t{1} << 10) && bytes % (uint64_t{1} << 10) == 0)
    return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

namespace detail {

// readRegularFile, and with `head` readRegularFileHead.
inline std::string readRegular(const std::filesystem::path& file, size_t limit, std::string_view kind,
                               FileIdentity* identity, bool head) {
  const std::string name = file.string();
  int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      throw Error(ErrorCode::kNotFound, name + ": no such file (check the path)");
    }
    throw Error(ErrorCode::kIo,
                name + ": cannot open it: " + std::strerror(errno) + " (check its permissions)");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(ErrorCode::kIo, name + ": cannot stat it: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    throw badInput(name + " is " + std::string(fileTypeName(st.st_mode)) + ", not a regular file (" +
                   std::string(kind) + " are read only from regular files; give the path of one)");
  }
  auto tooLarge = [&](const std::string& size) {
    return badInput(name + " is " + size + "; " + std::string(kind) + " are at most " + byteSizeText(limit) +
                    " (is it the right file?)");
  };
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (!head && size > limit) throw tooLarge(byteSizeText(size));
  // st_size can be 0 or a page for files of /proc and /sys: read to the end, or one byte past the limit.
  const size_t most = head ? limit : limit + 1;
  std::string text(std::min<uint64_t>(size + 1, most), '\0');
  size_t got = 0;
  while (got < most) {
    if (got == text.size()) text.resize(std::min(most, std::max<size_t>(2 * got, 4096)));
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorCode::kIo, name + ": cannot read it: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > limit) throw tooLarge("more than " + byteSizeText(limit) + " (it grew while read)");
  text.resize(got);
  if (identity != nullptr) *identity = identityOf(st);
  return text;
}

}  // namespace detail

// The whole of `file` as bytes. `kind` names the format in the plural for messages ("topology
// files"). Opens with O_NONBLOCK, so that a FIFO without a writer does not block, and refuses
// anything fstat does not call a regular file. Reads at most `limit` bytes: a file that is, or grows,
// larger is refused. Fills `identity` (when given) from the same descriptor that was read.
// Throws poolrun::Error naming the file: kNotFound (missing), kBadInput (not a regular file, too
// large), kIo (the system refused to open or read it).
inline std::string readRegularFile(const std::filesystem::path& file, size_t limit, std::string_view kind,
                                   FileIdentity* identity = nullptr) {
  return detail::readRegular(file, limit, kind, identity, false);
}

// As readRegularFile, but the first `limit` bytes of a longer file rather than an error: kernel
// files whose size says nothing (/proc/modules), binary headers (a PCI configuration space).
inline std::string readRegularFileHead(const std::filesystem::path& file, size_t limit,
                                       std::string_view kind) {
  return detail::readRegular(file, limit, kind, nullptr, true);
}

// "alice (uid 1000)", or "uid 1000" for a user the system cannot name.
inline std::string userText(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buffer[4096];
  if (getpwuid_r(uid, &pw, buffer, sizeof buffer, &found) == 0 && found != nullptr)
    return std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  return "uid " + std::to_string(uid);
}

// "0640": a file's permission bits as chmod takes them.
inline std::string modeText(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Whether a file of secrets (a bearer token file) as `id` describes it may hold what its reader
// trusts, as ssh asks of a private key: it belongs to root or to the reader (the effective user),
// and nobody but its owner may write it. Returns "" where it may, else what is wrong and what to
// do ("FILE is writable by every user (mode 0666): ..."). `readable` (where given) is set to a
// warning where its group or others may read it, else cleared.
inline std::string secretFileProblem(const std::filesystem::path& file, const FileIdentity& id,
                                     std::string* readable = nullptr, std::string_view secret = "token") {
  const std::string name = file.string();
  if (readable != nullptr) readable->clear();
  const uid_t me = ::geteuid();
  if (id.owner != 0 && id.owner != me)
    return name + " belongs to " + userText(id.owner) + ", not to root or to you (" + userText(me) +
           "): its owner could put any " + std::string(secret) + " in it; `chown " + std::to_string(me) +
           " " + name + "` or use a file of your own";
  if ((id.mode & (S_IWGRP | S_IWOTH)) != 0)
    return name + " is writable by " + ((id.mode & S_IWOTH) != 0 ? "every user" : "its group") + " (mode " +
           modeText(id.mode) + "): anyone who can write it could add a " + std::string(secret) +
           "; run `chmod go-w " + name + "`";
  if (readable != nullptr && (id.mode & (S_IRGRP | S_IROTH)) != 0)
    *readable = name + " is readable by " + ((id.mode & S_IROTH) != 0 ? "every user" : "its group") +
                " (mode " + modeText(id.mode) + "): they can use its " + std::string(secret) +
                "s; run `chmod 600 " + name + "`";
  return "";
}

// readRegularFile for a file of secrets: refused (poolrun::Error kBadInput) where
// secretFileProblem says it is not safe, checked on the descriptor that was read. `readable` as
// secretFileProblem's.
inline std::string readSecretFile(const std::filesystem::path& file, size_t limit, std::string_view kind,
                                  FileIdentity* identity = nullptr, std::string* readable = nullptr,
                                  std::string_view secret = "token") {
  FileIdentity read;
  std::string text = detail::readRegular(file, limit, kind, &read, false);
  if (std::string problem = secretFileProblem(file, read, readable, secret); !problem.empty())
    throw badInput(problem);
  if (identity != nullptr) *identity = read;
  return text;
}

// A kernel attribute file (/sys, /proc): its text without the white space around it, or nullopt
// with `why` (where given) saying what was wrong, as readRegularFile's errors say it ("FILE is a
// FIFO, not a regular file (...)"). Read as readRegularFile, or with `head` as readRegularFileHead.
// For probes that go on without a value: nothing is thrown.
inline std::optional<std::string> readAttributeFile(const std::filesystem::path& file, size_t limit,
                                                    bool head, std::string* why = nullptr) {
  try {
    return std::string(
        common::trim(detail::readRegular(file, limit, "kernel attribute files", nullptr, head)));
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return std::nullopt;
  }
}

}  // namespace poolrun::common
