#pragma once

// Small text helpers every part needs: white space, case, first lines, hexadecimal numbers. One
// home for each, so that two parsers of the same format cannot disagree on what " 0x15b3\n" is.
// ASCII only: the formats read here (sysfs, HTTP headers, Slurm output, NCCL names) are ASCII, and
// the results do not depend on the locale.

#include <charconv>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace poolrun::common {

// ' ', '\t', '\n', '\r', '\f' and '\v', as std::isspace in the "C" locale.
constexpr bool isSpace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// `text` without the white space at its start and end. The view points into `text`.
std::string_view trim(std::string_view text);

// `text` with ASCII letters in lower case; every other byte as it is.
std::string lower(std::string_view text);

// The first line of `text` that holds more than white space, without white space around it: what
// an error message quotes of a command's output ("" when there is none).
std::string firstLine(std::string_view text);

// Cursors for reading a format from the front, as plain code instead of a regular expression: each
// removes what it reads from the front of `rest` and returns it.
// True, and `prefix` removed, where `rest` starts with it; false, `rest` as it was, where not.
bool takePrefix(std::string_view& rest, std::string_view prefix);
// The ASCII digits 0-9 at the front ("" where there are none).
std::string_view takeDigits(std::string_view& rest);
// ASCII digits as an int, INT_MAX where they stand for more (a version or exit code a tool printed:
// never a reason to throw).
int digitsValue(std::string_view digits);
// The white space (isSpace) at the front ("" where there is none).
std::string_view takeSpace(std::string_view& rest);
// What comes before the first white space: a word, as \S+ reads it (all of `rest` where none).
std::string_view takeWord(std::string_view& rest);

// "0x15b3", "0x030200": `value` in lower-case hexadecimal with at least `digits` digits, after "0x",
// as NCCL's XML, sysfs and lspci write PCI ids and classes.
std::string hexNumber(uint64_t value, int digits);

// A hexadecimal number with or without "0x"/"0X" in front ("0x15b3", "15B3"), all of `text`,
// within T; nullopt for anything else (empty, a sign, white space, other characters, too large).
template <std::unsigned_integral T>
std::optional<T> parseHex(std::string_view text) {
  if (text.starts_with("0x") || text.starts_with("0X")) text.remove_prefix(2);
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A TOML file's text before toml++ parses it: a dotted key or table header ("labels.a.b",
// "[group.a.b]") makes one table per part, and toml++ destroys tables recursively, so that a key of a
// million parts (2 MiB of "a.") overflows the stack. toml++ bounds arrays and inline tables itself
// (TOML_MAX_NESTED_VALUES, 256); this bounds the keys: it counts the dots of one chain of key parts
// outside strings and comments (a value such as 1.5 counts one, which no real file takes near the
// bound) and throws poolrun::Error (kBadInput) "NAME:LINE: a key nests deeper than 64 levels (HINT)".
void checkTomlKeyDepth(std::string_view text, const std::string& name, std::string_view hint);

}  // namespace poolrun::common
