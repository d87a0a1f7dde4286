#pragma once

#include <cstddef>
#include <string>

namespace poolrun::topo::detail {

// Line number (1-based) of a byte offset in `text`.
int lineOf(const std::string& text, ptrdiff_t offset);

}  // namespace poolrun::topo::detail
