#pragma once

// What the names poolrun passes between machines may contain. Every entry point (cluster files,
// poold's request bodies, poolctl's arguments, PoolState itself) checks them with these functions,
// so that a name can go into a URL path, a hostfile, a log line and a JSON document unquoted.
//
//   node name   1 to 253 ASCII letters, digits, '-', '_' and '.', starting with a letter or digit:
//               a DNS host name (labels of letters, digits and '-'), plus the '_' Slurm node names
//               allow. Nothing else: no space, '/', '"', ':', '[' or ',' (hostlist syntax), no
//               control character, no byte above 0x7f.
//   lease id    1 to 128 ASCII letters, digits, '-', '_', '.' and '+' ("L0123abcd...",
//               "slurm-4242-1777-1", Slurm's "123_4" and "123+0" job ids); also client request ids.
//   owner       1 to 64 ASCII letters, digits, '-', '_', '.' and '@' (user names, "user@REALM"),
//               not starting with '-'.
//   text        job names, labels, switch and GPU model names: valid UTF-8 without control
//               characters (U+0000-U+001F, U+007F), at most a given number of bytes.

#include <cstddef>
#include <string>
#include <string_view>

namespace poolrun::common {

inline constexpr size_t kMaxNodeNameBytes = 253;
inline constexpr size_t kMaxLeaseIdBytes = 128;
inline constexpr size_t kMaxOwnerBytes = 64;
inline constexpr size_t kMaxJobNameBytes = 256;
inline constexpr size_t kMaxLabelBytes = 256;  // label keys and values, switch and rail group names

// Each returns "" where the value is valid, else what is wrong with it ("' ' at byte 3 is not
// allowed in a node name (...)"), to be put after the value in a message.
std::string nodeNameProblem(std::string_view name);
std::string leaseIdProblem(std::string_view id);
std::string ownerProblem(std::string_view owner);
std::string textProblem(std::string_view text, size_t max_bytes);

// Throw poolrun::Error (kBadInput) "WHAT 'VALUE': PROBLEM", VALUE as printable() shows it.
void checkNodeName(std::string_view name, std::string_view what = "node name");
void checkLeaseId(std::string_view id, std::string_view what = "lease id");
void checkOwner(std::string_view owner, std::string_view what = "owner");
void checkText(std::string_view text, size_t max_bytes, std::string_view what);

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
// Returns the offset of the first bad byte, or text.size() where there is none.
size_t utf8ErrorOffset(std::string_view text);

// `text` for an error message: printable characters as they are, control characters, bytes that
// are not UTF-8, '\\' and '\'' as \xNN; cut after 80 bytes ("...").
std::string printable(std::string_view text);

}  // namespace poolrun::common
