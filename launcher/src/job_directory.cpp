// The one writer of a job directory's files (job_directory.hpp).

#include "poolrun/launcher/job_directory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "poolrun/launcher/plan.hpp"
#include "poolrun/topo/error.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::launcher {

int openForWrite(const std::filesystem::path& path, mode_t mode) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
}

void writeFileAtomically(const std::filesystem::path& file, std::string_view text,
                         std::optional<std::filesystem::perms> mode, Durability durability,
                         const OpenForWrite& open) {
  const std::filesystem::path tmp =
      file.parent_path() / ("." + file.filename().string() + ".tmp-" + std::to_string(getpid()));
  int fd = -1;
  auto fail = [&](const char* what) {
    const int error = errno;
    if (fd >= 0) close(fd);
    unlink(tmp.c_str());
    throw Error(ErrorCode::kIo, file.string() + ": cannot write (" + what + " " + tmp.string() + ": " +
                                    std::strerror(error) +
                                    "); check that the folder is writable and has space");
  };
  fd = open(tmp, mode ? static_cast<mode_t>(*mode) : 0666);
  if (fd < 0) fail("creating");
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
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    throw Error(ErrorCode::kIo, dir_.string() + ": cannot create the job directory (" + ec.message() +
                                    "); check that its folder exists and is writable");
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
  std::vector<fs::path> candidates;
  for (fs::directory_iterator it(jobs, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e;
    if (it->is_directory(e) && !it->is_symlink(e)) candidates.push_back(it->path());
  }
  if (ec) return 0;  // no job directory yet, or one poolrun cannot read: nothing to do
  if (every.count() > 0) {
    std::ofstream(stamp).close();  // created where missing; its time is the last look's
    fs::last_write_time(stamp, now, ec);
  }
  if (candidates.size() <= keep) return 0;
  std::vector<std::pair<fs::file_time_type, fs::path>> dirs;
  for (fs::path& p : candidates) {
    std::error_code e;
    fs::file_time_type t = fs::last_write_time(p, e);
    if (!e) dirs.emplace_back(t, std::move(p));
  }
  std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const fs::file_time_type cutoff = now - max_age;
  size_t removed = 0;
  for (size_t i = keep; i < dirs.size(); ++i) {
    std::error_code e;
    if (dirs[i].first < cutoff && fs::remove_all(dirs[i].second, e) > 0 && !e) ++removed;
  }
  return removed;
}

}  // namespace poolrun::launcher
