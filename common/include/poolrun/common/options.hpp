#pragma once

// The one reader of numeric command-line values (poolrun, poolctl, poold): a whole number in a
// range, or a message that names the option, the value and the range:
//   "--priority 2147483648: out of range (-1000000 to 1000000)"
//   "--max-body abc: not a whole number (1024 to 1073741824)"
// Refused: an empty value, a sign, space or anything else around the digits, a '-' for an option
// whose range has no negative numbers, and values past the type's range. No exponent, no hex.

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace poolrun::common {

namespace detail {
[[noreturn]] void throwNotWholeNumber(std::string_view option, std::string_view text, const std::string& min,
                                      const std::string& max);
[[noreturn]] void throwOutOfRange(std::string_view option, std::string_view text, const std::string& min,
                                  const std::string& max);
}  // namespace detail

// `text` as a T in [min, max]. Throws poolrun::Error (kBadInput) as above; the caller's usage
// error path turns it into exit status 2. `option` may be any label ("fail GPU index").
template <std::integral T>
T parseOption(std::string_view option, std::string_view text, T min, T max) {
  const char* first = text.data();
  const char* last = first + text.size();
  bool number = false, inRange = false;
  T value{};
  auto take = [&](auto parsed) {
    auto [end, ec] = std::from_chars(first, last, parsed);
    number = !text.empty() && end == last && (ec == std::errc() || ec == std::errc::result_out_of_range);
    inRange = number && ec == std::errc() && std::cmp_greater_equal(parsed, min) &&
              std::cmp_less_equal(parsed, max);
    if (inRange) value = static_cast<T>(parsed);
  };
  if (!text.empty() && text.front() == '-')
    take(0LL);
  else
    take(0ULL);
  if (!number) detail::throwNotWholeNumber(option, text, std::to_string(min), std::to_string(max));
  if (!inRange) detail::throwOutOfRange(option, text, std::to_string(min), std::to_string(max));
  return value;
}

}  // namespace poolrun::common
