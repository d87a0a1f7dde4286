#pragma once

// The options a job script carries in its `#POOLRUN` lines (docs/jobs.md), as sbatch reads
// `#SBATCH` lines: `poolrun --detach job.sh` with `#POOLRUN -n 8` in job.sh runs 8 ranks.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace poolrun::launcher {

// One option as a script line gave it: its words, and where ("job.sh line 3").
struct ScriptOption {
  std::vector<std::string> words;
  std::string where;
};

// The words of `script`'s `#POOLRUN` lines, each line's with where it is. Read only where `script`
// is a regular file that starts with "#!" (anything else has none: a program, a missing file);
// lines are read up to the first that is neither blank nor a comment, as sbatch does, and within
// the first kMaxScriptBytes. A line's words are split as a shell splits them (single and double
// quotes, backslash). Throws kBadInput for an unclosed quote, naming the file and line.
inline constexpr size_t kMaxScriptBytes = 1 << 20;
std::vector<ScriptOption> readScriptOptions(const std::filesystem::path& script);

}  // namespace poolrun::launcher
