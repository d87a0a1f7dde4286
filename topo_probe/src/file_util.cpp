#include "file_util.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "poolrun/topo/error.hpp"

namespace poolrun::topo::detail {

std::string readWholeFile(const std::filesystem::path& file, size_t limit) {
  std::error_code ec;
  auto status = std::filesystem::status(file, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw Error(ErrorCode::kNotFound, file.string() + ": no such file (check the path)");
  }
  if (std::filesystem::is_directory(status)) {
    throw badInput(file.string() + ": is a directory, not a topology file");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(ErrorCode::kIo, file.string() + ": cannot open: " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  std::string text = std::move(out).str();
  if (text.size() > limit) {
    throw badInput(file.string() + ": file is " + std::to_string(text.size() >> 20) +
                   " MiB, larger than any topology (limit " + std::to_string(limit >> 20) + " MiB)");
  }
  return text;
}

int lineOf(const std::string& text, ptrdiff_t offset) {
  offset = std::clamp<ptrdiff_t>(offset, 0, static_cast<ptrdiff_t>(text.size()));
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
}

}  // namespace poolrun::topo::detail
