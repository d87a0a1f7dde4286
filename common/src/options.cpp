#include "poolrun/common/options.hpp"

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"

namespace poolrun::common::detail {
namespace {

std::string shown(std::string_view text) {
  std::string p = printable(text);
  return text.empty() || p != text || text.find(' ') != std::string_view::npos ? "'" + p + "'" : p;
}

}  // namespace

void throwNotWholeNumber(std::string_view option, std::string_view text, const std::string& min,
                         const std::string& max) {
  throw badInput(std::string(option) + " " + shown(text) + ": not a whole number (" + min + " to " + max +
                 ")");
}

void throwOutOfRange(std::string_view option, std::string_view text, const std::string& min,
                     const std::string& max) {
  throw badInput(std::string(option) + " " + shown(text) + ": out of range (" + min + " to " + max + ")");
}

}  // namespace poolrun::common::detail
