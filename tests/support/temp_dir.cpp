#include "support/temp_dir.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace poolrun::test {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "poolrun-test-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::filesystem::path TempDir::write(const std::filesystem::path& relative,
                                     const std::string& content) const {
  std::filesystem::path full = path_ / relative;
  std::filesystem::create_directories(full.parent_path());
  std::ofstream out(full, std::ios::binary);
  out << content;
  if (!out) throw std::runtime_error("cannot write " + full.string());
  return full;
}

std::filesystem::path TempDir::writeSecret(const std::filesystem::path& relative,
                                           const std::string& content) const {
  std::filesystem::path full = write(relative, content);
  std::filesystem::permissions(full,
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return full;
}

}  // namespace poolrun::test
