#pragma once

// Times as logs, event streams and JSON documents show them: RFC 3339 in UTC with milliseconds,
// "2026-12-01T15:04:05.123Z".

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace poolrun::common {

std::string rfc3339(std::chrono::system_clock::time_point t);
// Reads what rfc3339() writes, and also without the fraction or with an offset ("+01:00");
// nullopt for anything else (a date out of range, a missing zone).
std::optional<std::chrono::system_clock::time_point> parseRfc3339(std::string_view text);

}  // namespace poolrun::common
