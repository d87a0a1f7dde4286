#include "file_util.hpp"

#include <algorithm>

namespace poolrun::topo::detail {

int lineOf(const std::string& text, ptrdiff_t offset) {
  offset = std::clamp<ptrdiff_t>(offset, 0, static_cast<ptrdiff_t>(text.size()));
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
}

}  // namespace poolrun::topo::detail
