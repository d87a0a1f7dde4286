// dcgm-exporter's HPC job-mapping files, written whole and renamed into place.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "poolrun/agent/agent.hpp"
#include "poolrun/common/error.hpp"

namespace poolrun::agent {
namespace {

void writeWhole(const std::filesystem::path& file, const std::string& text) {
  const std::filesystem::path tmp =
      file.parent_path() / ("." + file.filename().string() + ".poold-agent.tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw Error(ErrorCode::kIo, tmp.string() + ": cannot create it: " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(ErrorCode::kIo, tmp.string() + ": cannot write it: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || std::rename(tmp.c_str(), file.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::kIo, file.string() + ": cannot put it in place: " + std::strerror(err));
  }
}

void removeIfThere(const std::filesystem::path& file) {
  if (::unlink(file.c_str()) != 0 && errno != ENOENT)
    throw Error(ErrorCode::kIo, file.string() + ": cannot remove it: " + std::strerror(errno));
}

}  // namespace

JobMappingFiles::JobMappingFiles(std::filesystem::path dir, size_t gpu_count)
    : dir_(std::move(dir)), gpu_count_(gpu_count) {}

void JobMappingFiles::update(const std::map<size_t, std::string>& leases) {
  for (size_t i = 0; i < gpu_count_; ++i) {
    std::optional<std::string> want;
    if (auto it = leases.find(i); it != leases.end()) want = it->second;
    auto known = files_.find(i);
    if (known != files_.end() && known->second == want) continue;
    const std::filesystem::path file = dir_ / std::to_string(i);
    if (want)
      writeWhole(file, *want + "\n");
    else
      removeIfThere(file);
    files_[i] = want;  // only once done: a file that failed is tried again next time
  }
}

}  // namespace poolrun::agent
