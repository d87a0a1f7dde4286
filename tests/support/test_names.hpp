#pragma once

// Readable names for parameterised tests, so that `--gtest_list_tests` and CTest show
// `Cases/ClusterFileErrors.NameTheFileAndTheProblem/unknown_key_swich` rather than `/7`.

#include <cctype>
#include <string>
#include <string_view>

namespace poolrun::test {

// `text` as a GoogleTest name (letters, digits and '_' only): every run of other characters becomes
// one '_', none at either end ("unknown key 'swich'" -> "unknown_key_swich"); "case" if nothing is
// left. Names must stay unique within an instantiation (GoogleTest refuses duplicates at start-up).
inline std::string testName(std::string_view text) {
  std::string name;
  bool gap = false;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      if (gap && !name.empty()) name += '_';
      name += c;
      gap = false;
    } else {
      gap = true;
    }
  }
  return name.empty() ? "case" : name;
}

// For INSTANTIATE_TEST_SUITE_P over a table whose cases have a `name`: each case is named by it.
struct ByCaseName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return testName(info.param.name);
  }
};

}  // namespace poolrun::test
