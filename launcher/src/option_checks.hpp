#pragma once

// The option checks poolrun's commands share: every numeric value read as written, with the
// range in the message (topo::parseOption), before Boost.Program_options converts it (which takes
// "1e3" for a double and wraps nothing into range); and an option that takes a value given one.

#include <boost/program_options.hpp>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "poolrun/topo/error.hpp"
#include "poolrun/topo/options.hpp"

namespace poolrun::launcher {

struct NumericOption {
  const char* key;  // as Boost names it: "wait" for --wait, "-n" for a short-only option
  int64_t min;
  int64_t max;
};

// Throws poolrun::Error (kBadInput) "--priority 2147483648: out of range (-1000000 to 1000000)".
inline void checkNumericOptions(const boost::program_options::parsed_options& parsed,
                                std::initializer_list<NumericOption> ranges) {
  for (const boost::program_options::option& o : parsed.options) {
    for (const NumericOption& r : ranges) {
      if (o.string_key != r.key) continue;
      std::string name = r.key[0] == '-' ? std::string(r.key) : "--" + std::string(r.key);
      for (const std::string& v : o.value) topo::parseOption<int64_t>(name, v, r.min, r.max);
    }
  }
}

// "-x needs a value VAR[=VALUE]": an option without its value, or with "--" in its place.
[[noreturn]] inline void missingValue(const std::string& option) {
  throw boost::program_options::error(option + " needs a value" + (option == "-x" ? " VAR[=VALUE]" : ""));
}

// Whether `arg` names an option of `opts` that takes a value given as the next argument.
inline bool takesNextValue(const std::string& arg, const boost::program_options::options_description& opts) {
  if (arg.size() < 2 || arg[0] != '-' || arg == "--" || arg.find('=') != std::string::npos) return false;
  if (!arg.starts_with("--") && arg.size() > 2) return false;  // "-n4"
  std::string name = arg.starts_with("--") ? arg.substr(2) : arg.substr(0, 2);
  const boost::program_options::option_description* d = opts.find_nothrow(name, false);
  return d != nullptr && d->semantic()->max_tokens() > 0;
}

// Every option of `args` that takes a value has one that is not "--".
inline void checkValuesGiven(const std::vector<std::string>& args,
                             const boost::program_options::options_description& opts) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") return;
    if (!takesNextValue(args[i], opts)) continue;
    if (i + 1 >= args.size() || args[i + 1] == "--") missingValue(args[i]);
    ++i;
  }
}

}  // namespace poolrun::launcher
