#include "poolrun/agent/join.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "poolrun/common/error.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/secret.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::agent {
namespace {

constexpr std::chrono::seconds kFirstRetry{2};
constexpr std::chrono::seconds kLongestRetry{60};

Error cannot(const std::string& what, const std::filesystem::path& file) {
  return Error(ErrorCode::kIo, "cannot " + what + " " + file.string() + ": " + std::strerror(errno));
}

void syncFolder(const std::filesystem::path& folder) {
  int fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw cannot("open the folder", folder);
  const int rc = fsync(fd);
  close(fd);
  if (rc != 0) throw cannot("sync the folder", folder);
}

// The credential of an attempt cut off half-way, where `pending` holds a whole one.
std::string pendingCredential(const std::filesystem::path& pending, std::ostream& log) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(pending, ec))) return "";
  std::string text;
  try {
    text = common::readSecretFile(pending, 4096, "node credentials", nullptr, nullptr, "credential");
  } catch (const Error& e) {
    throw badInput(std::string(e.what()) + " (remove it to let poold-agent make a new credential)");
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (pool::isSecretOf(pool::kNodeCredentialPrefix, text)) {
    log << "poold-agent: joining again with the credential of an attempt cut off half-way ("
        << pending.string() << ")" << std::endl;
    return text;
  }
  // Cut off while it was written: it was never sent.
  if (unlink(pending.c_str()) != 0) throw cannot("remove the broken", pending);
  return "";
}

std::string newPendingCredential(const std::filesystem::path& pending) {
  const std::string credential = common::randomSecret(pool::kNodeCredentialPrefix);
  int fd = open(pending.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw cannot("create", pending);
  const std::string line = credential + "\n";
  const bool written =
      write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && fsync(fd) == 0;
  const int saved = errno;
  close(fd);
  if (!written) {
    unlink(pending.c_str());
    errno = saved;
    throw cannot("write", pending);
  }
  syncFolder(pending.parent_path().empty() ? "." : pending.parent_path());
  return credential;
}

}  // namespace

bool joinIfNeeded(const std::filesystem::path& tokenFile, const JoinCall& join, StopSignal& stop,
                  std::ostream& log) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(tokenFile, ec))) {
    log << "poold-agent: " << tokenFile.string() << " holds this node's token already: --join is not needed"
        << std::endl;
    return true;
  }
  const std::filesystem::path folder = tokenFile.parent_path().empty() ? "." : tokenFile.parent_path();
  if (!std::filesystem::is_directory(folder, ec))
    throw badInput("--token-file " + tokenFile.string() + ": its folder " + folder.string() +
                   " does not exist (make it, mode 0700, or name another)");
  std::filesystem::path pending = tokenFile;
  pending += ".joining";
  std::string credential = pendingCredential(pending, log);
  if (credential.empty()) credential = newPendingCredential(pending);
  std::chrono::seconds wait = kFirstRetry;
  for (;;) {
    try {
      const bool first = join(credential);
      if (rename(pending.c_str(), tokenFile.c_str()) != 0)
        throw cannot("rename " + pending.string() + " to", tokenFile);
      syncFolder(folder);
      log << "poold-agent: "
          << (first ? "joined the pool" : "joined the pool (poold had taken this join already)")
          << "; this node's credential is in " << tokenFile.string() << std::endl;
      return true;
    } catch (const pool::PoolError&) {
      throw;  // refused: poold's words say why and what to do
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kIo) throw;
      log << "poold-agent: cannot join yet: " << e.what() << "; trying again in " << wait.count() << " s"
          << std::endl;
    }
    if (!stop.waitFor(wait)) return false;
    wait = std::min(wait * 2, kLongestRetry);
  }
}

}  // namespace poolrun::agent
