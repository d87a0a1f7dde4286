// fmt, compiled once for all of poolrun: the parts that use it link this library rather than
// fmt::fmt-header-only, whose every including file would compile fmt's implementation again (about
// 5 s of compile time each). Static, so that nothing of fmt is needed at run time.

#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

// What fmt/format.h declares `extern template` where it is not header-only.
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;

}  // namespace detail
FMT_END_NAMESPACE
