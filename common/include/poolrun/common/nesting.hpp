#pragma once

// How deep a JSON text nests, checked before it is parsed. nlohmann::json parses iteratively, but
// copying, comparing and dumping a value recurse once per level: a document nested 100,000 levels
// deep overflows the stack of whatever formats an error message about it (and the NCCL tuner plugin
// runs on NCCL's threads, whose stacks are small). Rejecting such a text up front keeps every later
// step bounded. Header-only, for the tuner plugin, as regular_file.hpp.

#include <optional>
#include <string_view>

namespace poolrun::common {

// The nesting depths the readers accept. Real documents nest far less: a poolrun topology JSON 4
// levels, a poolrun.tuner/1 configuration 3 (its "comment" and "x-" keys may hold more).
inline constexpr int kMaxJsonDepth = 64;
// hwloc XML nests one level per object (machine, package, caches, cores, PUs, PCI bridges): about 15 on
// real machines; hwloc's importer recurses per level.
inline constexpr int kMaxXmlDepth = 128;

// The byte offset of the first '[' or '{' of `text` (read as JSON) that opens level maxDepth + 1, or
// nullopt when the text nests no deeper than `maxDepth`. Brackets inside strings do not count. O(n),
// no allocation; the text need not be valid JSON (the parser judges that).
inline std::optional<size_t> jsonTooDeepAt(std::string_view text, int maxDepth) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        inString = false;
      }
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace poolrun::common
