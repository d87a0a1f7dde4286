// poolrun tuner explain | calibrate: what the NCCL tuner plugin decides, and feeding it measurements.

#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "command_options.hpp"
#include "poolrun/launcher/commands.hpp"
#include "poolrun/launcher/job_directory.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/tuner/calibrate.hpp"
#include "poolrun/tuner/config.hpp"
#include "poolrun/tuner/explain.hpp"

namespace po = boost::program_options;

namespace poolrun::launcher {
namespace {

constexpr const char* kTunerUsage =
    "usage: poolrun tuner explain --config FILE [--coll C] [--nranks N] [--nnodes M] [--min-bytes B]\n"
    "                             [--max-bytes B] [--json] [--compare TABLE]\n"
    "       poolrun tuner calibrate --config FILE [-o OUT] [--coll C] [--algo A] [--proto P]\n"
    "                               [--nranks N] [--nnodes M] LOG...\n"
    "explain: what the NCCL tuner plugin chooses for each power-of-two size, and every candidate;\n"
    "         with --compare, the model against measured figures (nccl-tests output or a data file).\n"
    "calibrate: read nccl-tests outputs and write their times into the configuration's calibration.\n";

// nccl-tests prints a few lines per size and run: 64 MiB is thousands of runs.
constexpr size_t kNcclTestsLogLimit = size_t{64} << 20;

constexpr const char* kCollHint = "allreduce, allgather, reducescatter, broadcast or reduce";

// The counts a run's logs may name: at least one, at most as many as a pool grants.
constexpr NumericOption kNranks{"nranks", 1, pool::kGpusRange.max};
constexpr NumericOption kNnodes{"nnodes", 1, pool::kGpusRange.max};

// The tuner's commands need a configuration: nullopt to go on, else the exit status.
std::optional<int> parse(const CommandOptions& command, const std::vector<std::string>& args,
                         po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (std::optional<int> status = command.parse(args, vm, out, err)) return status;
  if (!vm.count("config"))
    return command.usageError("--config FILE is required (a poolrun.tuner/1 JSON file)", err);
  return std::nullopt;
}

int explainCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CommandOptions command("poolrun tuner explain options", {kTunerUsage, "", ""});
  std::string config, coll = "allreduce", minBytes = "8", maxBytes = "1GiB", table;
  int nranks = 0, nnodes = 0;
  // clang-format off
  command.add()
      ("config", po::value(&config)->value_name("FILE"), "the tuner configuration (JSON)")
      ("coll", po::value(&coll)->value_name("COLL"),
       "allreduce (default), allgather, reducescatter, broadcast or reduce")
      ("nranks", po::value(&nranks)->value_name("N"),
       "communicator size (default: nodes x gpus_per_node of the configuration)")
      ("nnodes", po::value(&nnodes)->value_name("M"),
       "nodes the communicator spans (default: the configuration's nodes)")
      ("min-bytes", po::value(&minBytes)->value_name("BYTES"), "smallest size, e.g. 8, 64K, 1MiB (default 8)")
      ("max-bytes", po::value(&maxBytes)->value_name("BYTES"), "largest size (default 1GiB)")
      ("json", "print a poolrun.tuner-explain/1 document")
      ("compare", po::value(&table)->value_name("TABLE"),
       "nccl-tests output or a poolrun.tuner/1 table: print size, predicted, measured and error");
  // clang-format on
  command.ranges({kNranks, kNnodes});
  po::variables_map vm;
  if (std::optional<int> status = parse(command, args, vm, out, err)) return *status;
  auto c = tuner::parseColl(coll);
  if (!c) {
    err << "poolrun: error: unknown --coll '" << coll << "' (use " << kCollHint << ")\n";
    return 2;
  }
  try {
    tuner::TunerConfig cfg = tuner::parseConfig(tuner::readConfigFile(config, "tuner config"), config);
    tuner::ExplainOptions options;
    options.coll = *c;
    options.nranks = nranks;
    options.nnodes = nnodes;
    options.min_bytes = tuner::parseBytes(minBytes, "--min-bytes");
    options.max_bytes = tuner::parseBytes(maxBytes, "--max-bytes");
    if (vm.count("compare")) {
      if (!vm.count("max-bytes")) options.max_bytes = std::numeric_limits<std::uint64_t>::max();
      tuner::LogOverrides overrides;
      if (nranks > 0) overrides.nranks = nranks;
      if (nnodes > 0) overrides.nnodes = nnodes;
      const auto figures = tuner::readComparisonTable(
          tuner::readConfigFile(table, "comparison table", kNcclTestsLogLimit), table, overrides);
      tuner::Comparison cmp = tuner::compare(cfg, figures, table, options);
      out << (vm.count("json") ? tuner::compareJson(cfg, cmp).dump(2) + "\n" : tuner::compareText(cfg, cmp));
      return 0;
    }
    tuner::Explanation e = tuner::explain(cfg, options);
    if (vm.count("json")) {
      out << tuner::explainJson(cfg, e).dump(2) << "\n";
    } else {
      out << tuner::explainText(cfg, e);
    }
    return 0;
  } catch (const tuner::ConfigError& e) {
    err << "poolrun: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    return reportError(e, err);
  }
}

int calibrateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CommandOptions command("poolrun tuner calibrate options", {kTunerUsage, "", ""});
  std::string config, output, coll, algo, proto;
  int nranks = 0, nnodes = 0;
  std::vector<std::string> logs;
  // clang-format off
  command.add()
      ("config", po::value(&config)->value_name("FILE"), "the tuner configuration (JSON)")
      ("output,o", po::value(&output)->value_name("OUT"),
       "write the result here ('-' for standard output; default: --config in place)")
      ("coll", po::value(&coll)->value_name("COLL"), "the collective, where the logs do not name it")
      ("algo", po::value(&algo)->value_name("ALGO"),
       "the algorithm the runs forced (NCCL_ALGO), where the logs do not show it")
      ("proto", po::value(&proto)->value_name("PROTO"),
       "the protocol the runs forced (NCCL_PROTO), where the logs do not show it")
      ("nranks", po::value(&nranks)->value_name("N"), "ranks of the runs, where the logs do not list them")
      ("nnodes", po::value(&nnodes)->value_name("M"), "nodes of the runs, where the logs do not list them")
      ("log", po::value(&logs)->value_name("LOG"), "nccl-tests output (positional)");
  // clang-format on
  command.ranges({kNranks, kNnodes}).positional("log");
  po::variables_map vm;
  if (std::optional<int> status = parse(command, args, vm, out, err)) return *status;
  if (logs.empty()) {
    err << "poolrun: error: no nccl-tests logs given (poolrun tuner calibrate --config FILE LOG...)\n";
    return 2;
  }
  tuner::LogOverrides overrides;
  if (!coll.empty() && !(overrides.coll = tuner::parseColl(coll))) {
    err << "poolrun: error: unknown --coll '" << coll << "' (use " << kCollHint << ")\n";
    return 2;
  }
  if (!algo.empty() && !(overrides.algo = tuner::parseAlgo(algo))) {
    err << "poolrun: error: unknown --algo '" << algo
        << "' (use Ring, Tree, NVLS, NVLSTree, CollNetDirect, CollNetChain or PAT)\n";
    return 2;
  }
  if (!proto.empty() && !(overrides.proto = tuner::parseProto(proto))) {
    err << "poolrun: error: unknown --proto '" << proto << "' (use LL, LL128 or Simple)\n";
    return 2;
  }
  if (vm.count("nranks")) overrides.nranks = nranks;
  if (vm.count("nnodes")) overrides.nnodes = nnodes;
  try {
    const std::string text = tuner::readConfigFile(config, "tuner config");
    tuner::parseConfig(text, config);  // the configuration must be valid before it is extended
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text);
    std::vector<tuner::Measurement> all;
    for (const std::string& log : logs) {
      tuner::ParsedLog parsed = tuner::parseNcclTestsLog(
          tuner::readConfigFile(log, "nccl-tests log", kNcclTestsLogLimit), log, overrides);
      for (const std::string& w : parsed.warnings) err << "poolrun: warning: " << w << "\n";
      all.insert(all.end(), parsed.measurements.begin(), parsed.measurements.end());
    }
    tuner::MergeStats stats = tuner::mergeCalibration(doc, all);
    const std::string result = doc.dump(2) + "\n";
    tuner::parseConfig(result, output.empty() ? config : output);
    size_t forced = 0;
    for (const auto& m : all) forced += m.algo && m.proto ? 1 : 0;
    const std::string target = output.empty() ? config : output;
    if (target == "-") {
      out << result;
    } else {
      writeFileAtomically(target, result, std::nullopt, Durability::kSynced);
    }
    (target == "-" ? err : out) << "poolrun: tuner calibrate: " << all.size() << " figures from "
                                << logs.size() << (logs.size() == 1 ? " log" : " logs") << " (" << forced
                                << " with a forced algorithm and protocol; " << stats.added << " added, "
                                << stats.replaced << " replaced) written to "
                                << (target == "-" ? "stdout" : target) << "\n";
    return 0;
  } catch (const tuner::ConfigError& e) {
    err << "poolrun: error: " << e.what() << "\n";
    return 2;
  } catch (const nlohmann::json::exception& e) {
    err << "poolrun: error: " << config << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    return reportError(e, err);
  }
}

}  // namespace

int tunerCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << kTunerUsage;
    return 2;
  }
  if (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    out << kTunerUsage;
    return 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "explain") return explainCommand(rest, out, err);
  if (args[0] == "calibrate") return calibrateCommand(rest, out, err);
  err << "poolrun: error: unknown tuner command '" << args[0] << "' (use explain or calibrate)\n"
      << kTunerUsage;
  return 2;
}

}  // namespace poolrun::launcher
