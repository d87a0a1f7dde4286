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

// "-n needs a value: N, the number of ranks, one per GPU": an option without its value, or with "--"
// in its place, named as the user wrote it, with its value's name and help.
[[noreturn]] inline void missingValue(const std::string& option,
                                      const boost::program_options::option_description& d) {
  throw boost::program_options::error(option + " needs a value: " + d.semantic()->name() + ", " +
                                      d.description());
}

// The option of `opts` that `arg` names if it takes a value given as the next argument, else null.
inline const boost::program_options::option_description* takesNextValue(
    const std::string& arg, const boost::program_options::options_description& opts) {
  if (arg.size() < 2 || arg[0] != '-' || arg == "--" || arg.find('=') != std::string::npos) return nullptr;
  if (!arg.starts_with("--") && arg.size() > 2) return nullptr;  // "-n4"
  std::string name = arg.starts_with("--") ? arg.substr(2) : arg.substr(0, 2);
  const boost::program_options::option_description* d = opts.find_nothrow(name, false);
  return d != nullptr && d->semantic()->max_tokens() > 0 ? d : nullptr;
}

// Every option of `args` that takes a value has one that is not "--".
inline void checkValuesGiven(const std::vector<std::string>& args,
                             const boost::program_options::options_description& opts) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") return;
    const boost::program_options::option_description* d = takesNextValue(args[i], opts);
    if (d == nullptr) continue;
    if (i + 1 >= args.size() || args[i + 1] == "--") missingValue(args[i], *d);
    ++i;
  }
}

}  // namespace poolrun::launcher
