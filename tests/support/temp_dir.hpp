#pragma once

// A fresh directory under $TMPDIR, removed with everything in it when the object goes.

#include <filesystem>
#include <string>

namespace poolrun::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `content` to path()/relative, creating parent folders; returns the full path.
  std::filesystem::path write(const std::filesystem::path& relative, const std::string& content) const;
  // As write, mode 0600: a token file as its readers want it (common::readSecretFile).
  std::filesystem::path writeSecret(const std::filesystem::path& relative, const std::string& content) const;

 private:
  std::filesystem::path path_;
};

}  // namespace poolrun::test
