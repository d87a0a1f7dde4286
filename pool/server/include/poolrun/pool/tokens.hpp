#pragma once

// poold's bearer tokens: the token file, read at start and again whenever it changes (its size,
// inode, modification time, owner or mode). A file another user owns (neither root nor poold's),
// or that its group or others may write, is refused as common::readSecretFile says (at start poold
// does not start; later the tokens read before stay); one others may read is warned of once. A malformed line
// is named and skipped with a warning, so that one typo never locks every user out nor stops poold; a file
// that cannot be read at all (or is not a regular file, or is over 16 MiB) keeps the tokens read before.

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/server.hpp"

namespace poolrun::pool {

class TokenStore {
 public:
  using Warn = std::function<void(const std::string&)>;

  // Reads the file. Throws poolrun::Error (kNotFound, kBadInput) when it cannot be read at all.
  TokenStore(std::filesystem::path file, Warn warn);

  // The entry for `token`, re-reading the file first when it changed; nullopt when unknown. The
  // file is looked at once per kLookEvery at most; a change is read once it is whole
  // (common::FileWatch: seen unchanged for kFileSettleTime, or written kFileTrustedAge ago).
  std::optional<Caller> find(const std::string& token);

  // Whether a line of the file is a token of role node for `node` (such a node joins no more).
  bool namesNode(const std::string& node);

  static constexpr std::chrono::milliseconds kLookEvery{25};

 private:
  void reload(bool initial);
  std::chrono::steady_clock::time_point looked_{};  // when the file was last looked at

  std::filesystem::path file_;
  Warn warn_;
  std::mutex mu_;
  std::map<std::string, Caller> tokens_;
  common::FileWatch watch_;
  bool warned_readable_ = false;  // whether the file's being readable by others was said
};

}  // namespace poolrun::pool
