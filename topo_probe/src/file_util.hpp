#pragma once

#include <filesystem>
#include <string>

namespace poolrun::topo::detail {

// The whole file as text. Throws poolrun::Error naming the file when it is missing, a directory,
// unreadable or larger than `limit` bytes.
std::string readWholeFile(const std::filesystem::path& file, size_t limit = size_t{256} << 20);

// Line number (1-based) of a byte offset in `text`.
int lineOf(const std::string& text, ptrdiff_t offset);

}  // namespace poolrun::topo::detail
