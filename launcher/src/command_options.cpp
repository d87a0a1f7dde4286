// One way to parse a command's options (command_options.hpp).

#include "command_options.hpp"

#include <filesystem>

#include "poolrun/common/error.hpp"
#include "poolrun/common/options.hpp"

namespace po = boost::program_options;

namespace poolrun::launcher {
namespace {

// Throws poolrun::Error (kBadInput) "--priority 2147483648: out of range (-1000000 to 1000000)".
void checkRanges(const po::parsed_options& parsed, const std::vector<NumericOption>& ranges) {
  for (const po::option& o : parsed.options) {
    for (const NumericOption& r : ranges) {
      if (o.string_key != r.key) continue;
      std::string name = r.key[0] == '-' ? std::string(r.key) : "--" + std::string(r.key);
      for (const std::string& v : o.value) common::parseOption<int64_t>(name, v, r.min, r.max);
    }
  }
}

}  // namespace

void missingValue(const std::string& option, const po::option_description& d) {
  throw po::error(option + " needs a value: " + d.semantic()->name() + ", " + d.description());
}

const po::option_description* takesNextValue(const std::string& arg, const po::options_description& opts) {
  if (arg.size() < 2 || arg[0] != '-' || arg == "--" || arg.find('=') != std::string::npos) return nullptr;
  if (!arg.starts_with("--") && arg.size() > 2) return nullptr;  // "-n4"
  std::string name = arg.starts_with("--") ? arg.substr(2) : arg.substr(0, 2);
  const po::option_description* d = opts.find_nothrow(name, false);
  return d != nullptr && d->semantic()->max_tokens() > 0 ? d : nullptr;
}

CommandOptions::CommandOptions(const char* caption, CommandHelp help)
    : options_(caption), help_(std::move(help)) {
  options_.add_options()("help,h", "show this help");
}

CommandOptions& CommandOptions::ranges(std::initializer_list<NumericOption> ranges) {
  ranges_.insert(ranges_.end(), ranges.begin(), ranges.end());
  return *this;
}

CommandOptions& CommandOptions::positional(const char* name) {
  positional_.add(name, -1);
  return *this;
}

std::optional<int> CommandOptions::parse(const std::vector<std::string>& args, po::variables_map& vm,
                                         std::ostream& out, std::ostream& err) const {
  try {
    std::vector<std::string> given = args;
    const po::option_description* n = options_.find_nothrow("-n", false);
    for (size_t i = 0; i < given.size() && given[i] != "--"; ++i) {
      if (n != nullptr && (given[i] == "-np" || given[i] == "--np")) {
        if (i + 1 >= given.size() || given[i + 1] == "--") missingValue(given[i], *n);
        given[i] = "-n";
      }
      const po::option_description* d = takesNextValue(given[i], options_);
      if (d == nullptr) continue;
      if (i + 1 >= given.size() || given[i + 1] == "--") missingValue(given[i], *d);
      ++i;
    }
    po::command_line_parser parser(given);
    parser.options(options_);
    const bool takesArguments = positional_.max_total_count() > 0;
    if (takesArguments) parser.positional(positional_);
    po::parsed_options parsed = parser.run();
    for (const std::string& stray : po::collect_unrecognized(parsed.options, po::include_positional)) {
      if (!takesArguments)
        throw po::error("unexpected argument '" + stray + "': this command takes only options (see --help)");
    }
    checkRanges(parsed, ranges_);
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return usageError(e.what(), err);
  } catch (const Error& e) {
    return usageError(e.what(), err);
  }
  if (vm.count("help")) {
    out << help_.usage << help_.before_options << options_ << help_.after_options;
    return 0;
  }
  return std::nullopt;
}

int CommandOptions::usageError(std::string_view what, std::ostream& err) const {
  err << "poolrun: error: " << what << "\n" << help_.usage;
  return kExitUsage;
}

std::string sibling(const std::string& name) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path dir = ec ? std::filesystem::current_path() : exe.parent_path();
  for (const char* sub :
       {".", "../runtime", "../launcher", "../nccl_tuner", "../doctor", "../lib", "../bin"}) {
    std::filesystem::path p = dir / sub / name;
    if (std::filesystem::exists(p)) return std::filesystem::weakly_canonical(p).string();
  }
  return name;  // from PATH
}

}  // namespace poolrun::launcher
