// Job scripts' #POOLRUN lines (script_options.hpp).

#include "script_options.hpp"

#include <fstream>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"

namespace poolrun::launcher {
namespace {

constexpr std::string_view kMark = "#POOLRUN";

// The words of `text` as a shell splits them; throws kBadInput (naming `where`) for an unclosed
// quote or a backslash that ends the line.
std::vector<std::string> shellWords(std::string_view text, const std::string& where) {
  std::vector<std::string> words;
  std::string word;
  bool inWord = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      if (inWord) words.push_back(std::move(word));
      word.clear();
      inWord = false;
      continue;
    }
    inWord = true;
    if (c == '\\') {
      if (++i == text.size())
        throw badInput(where + ": the line ends in a backslash: each #POOLRUN line stands alone");
      word += text[i];
    } else if (c == '\'' || c == '"') {
      const size_t end = text.find(c, i + 1);
      if (end == std::string_view::npos)
        throw badInput(where + ": the quote " + std::string(1, c) + " is not closed on its line: close it");
      std::string_view quoted = text.substr(i + 1, end - i - 1);
      if (c == '"') {  // within double quotes, a backslash escapes " and itself
        for (size_t k = 0; k < quoted.size(); ++k)
          word +=
              quoted[k] == '\\' && k + 1 < quoted.size() && (quoted[k + 1] == '"' || quoted[k + 1] == '\\')
                  ? quoted[++k]
                  : quoted[k];
      } else {
        word += quoted;
      }
      i = end;
    } else {
      word += c;
    }
  }
  if (inWord) words.push_back(std::move(word));
  return words;
}

bool blankOrComment(std::string_view line) {
  const size_t first = line.find_first_not_of(" \t\r");
  return first == std::string_view::npos || line[first] == '#';
}

}  // namespace

std::vector<ScriptOption> readScriptOptions(const std::filesystem::path& script) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(script, ec)) return {};
  std::ifstream in(script, std::ios::binary);
  std::string text(kMaxScriptBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  if (!text.starts_with("#!")) return {};
  std::vector<ScriptOption> out;
  size_t number = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    // A line cut by the byte limit is not read: its words may be cut too.
    if (end == std::string::npos && text.size() == kMaxScriptBytes) break;
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++number;
    if (number == 1) continue;  // #!
    if (!blankOrComment(line)) break;
    if (!line.starts_with(kMark)) continue;
    const std::string_view rest = line.substr(kMark.size());
    if (!rest.empty() && rest[0] != ' ' && rest[0] != '\t' && rest[0] != '\r') continue;  // #POOLRUNX
    const std::string where = common::printable(script.string()) + " line " + std::to_string(number);
    std::vector<std::string> words = shellWords(rest, where);
    if (!words.empty()) out.push_back({std::move(words), where});
  }
  return out;
}

}  // namespace poolrun::launcher
