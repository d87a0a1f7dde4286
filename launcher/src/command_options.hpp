#pragma once

// How every poolrun command reads its options and prints its help: one CommandOptions per command,
// whose parse() checks what Boost.Program_options does not (a value given to every option that
// takes one, every number read as written and within its range: common::parseOption, which refuses
// "1e3" for a whole number and wraps nothing into range), and answers a bad command line the same
// way everywhere: "poolrun: error: WHAT", the usage, exit status 2.

#include <boost/program_options.hpp>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "poolrun/launcher/supervisor.hpp"  // kExitUsage

namespace poolrun::launcher {

struct NumericOption {
  const char* key;  // as Boost names it: "wait" for --wait, "-n" for a short-only option
  int64_t min;
  int64_t max;
};

// What a command prints of itself: `usage` after every error, and its --help as `usage`,
// `before_options`, the options, `after_options` (environment, exit status).
struct CommandHelp {
  std::string usage;  // "usage: poolrun plan ...\nShows ...\n"
  std::string before_options;
  std::string after_options;
};

class CommandOptions {
 public:
  // `caption`: the title of the options in --help ("poolrun plan options"). Adds -h, --help.
  CommandOptions(const char* caption, CommandHelp help);

  // The command's own options, as boost::program_options::options_description::add_options.
  boost::program_options::options_description_easy_init add() { return options_.add_options(); }
  // Ranges of its numeric options, checked on the text given (NumericOption).
  CommandOptions& ranges(std::initializer_list<NumericOption> ranges);
  // Arguments without an option name are values of `name` (tuner calibrate's LOG...). Without it,
  // such an argument is a usage error naming it.
  CommandOptions& positional(const char* name);

  const boost::program_options::options_description& options() const { return options_; }

  // Parses `args` into `vm` and the variables the options are bound to. mpirun's -np N is -n N
  // where the command has -n. Returns nullopt to go on; 0 after printing --help on `out`;
  // kExitUsage (2) after printing the error and the usage on `err`.
  std::optional<int> parse(const std::vector<std::string>& args, boost::program_options::variables_map& vm,
                           std::ostream& out, std::ostream& err) const;

  // Prints "poolrun: error: WHAT" and the usage on `err`; returns kExitUsage.
  int usageError(std::string_view what, std::ostream& err) const;

 private:
  boost::program_options::options_description options_;
  boost::program_options::positional_options_description positional_;
  std::vector<NumericOption> ranges_;
  CommandHelp help_;
};

// "-n needs a value: N, the number of ranks, one per GPU": an option without its value, or with "--"
// in its place, named as the user wrote it, with its value's name and help. Throws
// boost::program_options::error.
[[noreturn]] void missingValue(const std::string& option,
                               const boost::program_options::option_description& d);

// The option of `opts` that `arg` names if it takes a value given as the next argument, else null.
const boost::program_options::option_description* takesNextValue(
    const std::string& arg, const boost::program_options::options_description& opts);

// A binary or library built next to poolrun (build tree) or installed beside it: its path, else
// `name` (found on PATH).
std::string sibling(const std::string& name);

}  // namespace poolrun::launcher
