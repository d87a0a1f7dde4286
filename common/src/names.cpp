#include "poolrun/common/names.hpp"

#include <cstdint>

#include "poolrun/common/error.hpp"

namespace poolrun::common {
namespace {

bool isAsciiAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The length of the well-formed UTF-8 sequence at text[i], 0 where there is none; its code point
// in `code` where given.
size_t utf8Length(std::string_view text, size_t i, uint32_t* code = nullptr) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) {
    if (code != nullptr) *code = c;
    return 1;
  }
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;  // a continuation byte, an overlong lead (0xc0, 0xc1) or past U+10FFFF
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;  // overlong
  if (cp >= 0xd800 && cp <= 0xdfff) return 0;                                           // a surrogate
  if (code != nullptr) *code = cp;
  return n;
}

std::string hexByte(unsigned char c) {
  static const char* hex = "0123456789abcdef";
  return std::string("\\x") + hex[c >> 4] + hex[c & 0xf];
}

// What is wrong with the byte at `i` of a name whose characters are ASCII letters, digits and
// `extra`; `rule` describes the whole rule.
std::string badCharacter(std::string_view name, size_t i, const std::string& rule) {
  unsigned char c = static_cast<unsigned char>(name[i]);
  std::string shown =
      c > 0x20 && c < 0x7f && c != '\'' && c != '\\' ? std::string(1, static_cast<char>(c)) : hexByte(c);
  return "'" + shown + "' at byte " + std::to_string(i) + " is not allowed (" + rule + ")";
}

std::string asciiNameProblem(std::string_view name, size_t max, std::string_view extra, bool alnumFirst,
                             const std::string& rule) {
  if (name.empty()) return "empty (" + rule + ")";
  if (name.size() > max) return std::to_string(name.size()) + " bytes long (" + rule + ")";
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = isAsciiAlnum(c) || (extra.find(c) != std::string_view::npos && !(i == 0 && alnumFirst));
    if (!ok) return badCharacter(name, i, rule);
  }
  return "";
}

// C1 controls (U+0080-U+009F: a terminal may read U+009B as CSI) and the bidirectional embeddings,
// overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder what follows them on screen:
// valid UTF-8 that shows a name as something else.
bool isHiddenCodePoint(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

// "U+202E", "C1 control U+009B".
std::string codePointName(uint32_t cp) {
  static const char* hex = "0123456789ABCDEF";
  std::string u = "U+";
  for (int shift = 12; shift >= 0; shift -= 4) u += hex[(cp >> shift) & 0xf];
  return cp <= 0x9f ? "C1 control " + u : "bidirectional control " + u;
}

[[noreturn]] void fail(std::string_view what, std::string_view value, const std::string& problem) {
  throw badInput(std::string(what) + " '" + printable(value) + "': " + problem);
}

}  // namespace

std::string nodeNameProblem(std::string_view name) {
  return asciiNameProblem(name, kMaxNodeNameBytes, "-_.", true,
                          "a node name is 1 to 253 letters, digits, '-', '_' and '.', starting with a "
                          "letter or digit");
}

std::string leaseIdProblem(std::string_view id) {
  return asciiNameProblem(id, kMaxLeaseIdBytes, "-_.+", false,
                          "a lease id is 1 to 128 letters, digits, '-', '_', '.' and '+'");
}

std::string ownerProblem(std::string_view owner) {
  if (owner.starts_with('-'))
    return "starts with '-' (an owner is 1 to 64 letters, digits, '-', '_', '.' and '@', not starting "
           "with '-')";
  return asciiNameProblem(
      owner, kMaxOwnerBytes, "-_.@", false,
      "an owner is 1 to 64 letters, digits, '-', '_', '.' and '@', not starting with '-'");
}

std::string textProblem(std::string_view text, size_t max_bytes) {
  if (text.size() > max_bytes)
    return std::to_string(text.size()) + " bytes long (at most " + std::to_string(max_bytes) + ")";
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f)
      return "control character " + hexByte(c) + " at byte " + std::to_string(i) + " (not allowed)";
    uint32_t cp = 0;
    size_t n = utf8Length(text, i, &cp);
    if (n == 0) return "byte " + hexByte(c) + " at byte " + std::to_string(i) + " is not UTF-8";
    if (isHiddenCodePoint(cp))
      return codePointName(cp) + " at byte " + std::to_string(i) +
             " (not allowed: C1 controls and bidirectional overrides change how a terminal or page shows "
             "the text around them)";
    i += n;
  }
  return "";
}

void checkNodeName(std::string_view name, std::string_view what) {
  if (std::string p = nodeNameProblem(name); !p.empty()) fail(what, name, p);
}

void checkLeaseId(std::string_view id, std::string_view what) {
  if (std::string p = leaseIdProblem(id); !p.empty()) fail(what, id, p);
}

void checkOwner(std::string_view owner, std::string_view what) {
  if (std::string p = ownerProblem(owner); !p.empty()) fail(what, owner, p);
}

void checkText(std::string_view text, size_t max_bytes, std::string_view what) {
  if (std::string p = textProblem(text, max_bytes); !p.empty()) fail(what, text, p);
}

size_t utf8ErrorOffset(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8Length(text, i);
    if (n == 0) return i;
    i += n;
  }
  return text.size();
}

std::string printable(std::string_view text) {
  constexpr size_t kShown = 80;
  std::string out;
  size_t i = 0;
  while (i < text.size() && i < kShown) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    uint32_t cp = 0;
    size_t n = utf8Length(text, i, &cp);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\' || n == 0) {
      out += hexByte(c);
      ++i;
    } else if (isHiddenCodePoint(cp)) {
      for (size_t k = 0; k < n; ++k) out += hexByte(static_cast<unsigned char>(text[i + k]));
      i += n;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  if (i < text.size()) out += "...";
  return out;
}

}  // namespace poolrun::common
