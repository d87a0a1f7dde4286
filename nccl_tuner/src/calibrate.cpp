#include "poolrun/tuner/calibrate.hpp"

#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "poolrun/common/text.hpp"

namespace poolrun::tuner {
namespace {

std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  std::istringstream in{std::string(line)};
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

bool parseNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool parseInteger(const std::string& s, long long* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtoll(s.c_str(), &end, 10);
  return end == s.c_str() + s.size();
}

std::optional<Coll> collOfProgram(std::string name) {
  if (auto slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  if (name.ends_with("_mpi")) name.resize(name.size() - 4);
  if (name.ends_with("_perf")) name.resize(name.size() - 5);
  return parseColl(name);
}

int typeSize(const std::string& type) {
  static const std::map<std::string, int> kSizes = {
      {"int8", 1},     {"uint8", 1},    {"char", 1},   {"f8e4m3", 1},  {"f8e5m2", 1},
      {"fp8_e4m3", 1}, {"fp8_e5m2", 1}, {"half", 2},   {"float16", 2}, {"bfloat16", 2},
      {"int32", 4},    {"uint32", 4},   {"int", 4},    {"float", 4},   {"float32", 4},
      {"int64", 8},    {"uint64", 8},   {"double", 8}, {"float64", 8}};
  auto it = kSizes.find(type);
  return it == kSizes.end() ? 0 : it->second;
}

// "Ring", "allreduce:ring" -> the one token; lists and exclusions ("ring,tree", "^ll128") force no
// single cell.
std::string singleToken(std::string value) {
  if (auto colon = value.find(':'); colon != std::string::npos && value.find(';') == std::string::npos) {
    value = value.substr(colon + 1);
  }
  if (value.empty() || value.find_first_of(",;^") != std::string::npos) return "";
  return value;
}

}  // namespace

ParsedLog parseNcclTestsLog(std::string_view text, const std::string& source, const LogOverrides& overrides) {
  ParsedLog result;
  std::optional<Coll> programColl;
  std::optional<Algo> algo;
  std::optional<Proto> proto;
  std::set<long long> ranks;
  std::set<std::string> hosts;
  std::vector<std::string> columns;
  std::vector<Measurement> section;  // shape filled in when the section ends
  int gpusPerProcess = 0;            // from the section's "# nThread T nGpus G" line
  size_t lineNo = 0;

  auto finishSection = [&]() {
    if (section.empty()) return;
    const int nranks = overrides.nranks ? *overrides.nranks : static_cast<int>(ranks.size());
    const int nnodes = overrides.nnodes ? *overrides.nnodes : static_cast<int>(hosts.size());
    if (nranks < 1 || nnodes < 1) {
      throw ConfigError(source +
                        ": no '# Using devices' rank lines before the results (keep nccl-tests' "
                        "header in the log, or give --nranks and --nnodes)");
    }
    if (nnodes > nranks) {
      throw ConfigError(source + ": " + std::to_string(nnodes) + " nodes for " + std::to_string(nranks) +
                        " ranks (check --nranks/--nnodes)");
    }
    for (Measurement& m : section) {
      m.nranks = nranks;
      m.nnodes = nnodes;
      if (gpusPerProcess > 0 && gpusPerProcess <= nranks) m.gpus_per_process = gpusPerProcess;
      result.measurements.push_back(std::move(m));
    }
    section.clear();
    ranks.clear();
    hosts.clear();
    algo.reset();
    proto.reset();
    programColl.reset();
    gpusPerProcess = 0;
  };

  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string where = source + ":" + std::to_string(lineNo);

    if (auto pos = line.find("Collective test starting:"); pos != std::string_view::npos) {
      finishSection();
      auto w = words(line.substr(pos + 25));
      if (!w.empty()) {
        programColl = collOfProgram(w[0]);
        if (!programColl) {
          throw ConfigError(source + ": " + w[0] +
                            " is not a collective the tuner decides (give logs of all_reduce_perf, "
                            "all_gather_perf, reduce_scatter_perf, broadcast_perf or reduce_perf)");
        }
      }
      continue;
    }
    if (line.find("# nThread") != std::string_view::npos) {
      finishSection();
      // "# nThread 1 nGpus 4 ...": the GPUs each process drives (threads x GPUs per thread).
      auto w = words(common::trim(line).substr(1));
      long long threads = 0, gpus = 0;
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        if (w[i] == "nThread") parseInteger(w[i + 1], &threads);
        if (w[i] == "nGpus") parseInteger(w[i + 1], &gpus);
      }
      gpusPerProcess =
          threads > 0 && gpus > 0 && threads * gpus <= (1 << 24) ? static_cast<int>(threads * gpus) : 0;
      continue;
    }
    for (const char* var : {"NCCL_ALGO set by environment to ", "NCCL_PROTO set by environment to "}) {
      auto pos = line.find(var);
      if (pos == std::string_view::npos) continue;
      auto w = words(line.substr(pos + std::string_view(var).size()));
      std::string token = w.empty() ? "" : singleToken(w[0]);
      const bool isAlgo = std::string_view(var).starts_with("NCCL_ALGO");
      if (isAlgo && !token.empty()) algo = parseAlgo(token);
      if (!isAlgo && !token.empty()) proto = parseProto(token);
      if (token.empty() || (isAlgo ? !algo : !proto)) {
        result.warnings.push_back(where + ": " + (isAlgo ? "NCCL_ALGO" : "NCCL_PROTO") + " '" +
                                  (w.empty() ? "" : w[0]) +
                                  "' does not force one cell; its figures are kept as unforced");
      }
    }
    std::string_view trimmed = common::trim(line);
    if (trimmed.starts_with("#")) {
      auto w = words(trimmed.substr(1));
      if (w.size() >= 9 && w[0] == "Rank" && w[2] == "Group") {
        long long rank = 0;
        if (parseInteger(w[1], &rank)) ranks.insert(rank);
        // poolrun-allreduce-bench's MPI backend names no GPU but "host memory": its times are
        // MPI's over host buffers, which would teach the tuner nothing true about NCCL's.
        if (common::trim(trimmed).ends_with("host memory")) {
          throw ConfigError(where + ": rank " + w[1] +
                            " ran on host memory (CPU buffers, MPI), not on a GPU, so its times say "
                            "nothing of NCCL's; calibrate with a run on GPUs (poolrun-allreduce-bench "
                            "--backend nccl, or nccl-tests' *_perf)");
        }
        for (size_t i = 3; i + 1 < w.size(); ++i) {
          if (w[i] == "on") {
            hosts.insert(w[i + 1]);
            break;
          }
        }
      } else if (!w.empty() && w[0] == "size" && std::find(w.begin(), w.end(), "busbw") != w.end()) {
        columns = w;
      }
      continue;
    }
    auto w = words(trimmed);
    long long size = 0;
    if (w.size() < 8 || !parseInteger(w[0], &size) || size < 0) continue;
    if (columns.empty()) {
      columns = {"size",  "count",  "type", "redop", "root",  "time",  "algbw",
                 "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"};
    }
    auto column = [&](const std::string& name, int nth) -> std::string {
      int seen = 0;
      for (size_t i = 0; i < columns.size() && i < w.size(); ++i) {
        if (columns[i] == name && seen++ == nth) return w[i];
      }
      return "";
    };
    double bestUs = 0;
    bool any = false, wrong = false;
    for (int nth = 0; nth < 2; ++nth) {
      double t = 0;
      if (!parseNumber(column("time", nth), &t) || t <= 0) continue;
      std::string errors = column("#wrong", nth);
      long long nWrong = 0;
      if (parseInteger(errors, &nWrong) && nWrong > 0) {
        wrong = true;
        continue;
      }
      bestUs = any ? std::min(bestUs, t) : t;
      any = true;
    }
    if (wrong) result.warnings.push_back(where + ": wrong results reported; figure skipped");
    if (!any) continue;

    Measurement m;
    if (overrides.coll) {
      m.coll = *overrides.coll;
    } else if (programColl) {
      m.coll = *programColl;
    } else {
      // Older nccl-tests print no program name: tell the collective by its columns.
      const std::string redop = column("redop", 0), root = column("root", 0), type = column("type", 0);
      long long count = 0, rootRank = -1;
      parseInteger(column("count", 0), &count);
      parseInteger(root, &rootRank);
      if (redop.empty() || typeSize(type) == 0) {
        throw ConfigError(where + ": cannot tell the collective of this nccl-tests output (give --coll)");
      }
      if (redop == "none") {
        m.coll = rootRank >= 0 ? Coll::kBroadcast : Coll::kAllGather;
      } else if (rootRank >= 0) {
        m.coll = Coll::kReduce;
      } else {
        m.coll = count * typeSize(type) == size ? Coll::kAllReduce : Coll::kReduceScatter;
      }
    }
    m.algo = overrides.algo ? overrides.algo : algo;
    m.proto = overrides.proto ? overrides.proto : proto;
    m.bytes = static_cast<std::uint64_t>(size);
    m.time_us = bestUs;
    m.source = source;
    section.push_back(std::move(m));
  }
  finishSection();
  if (result.measurements.empty()) {
    throw ConfigError(source + ": no result lines found (is it the output of an nccl-tests *_perf program?)");
  }
  return result;
}

MergeStats mergeCalibration(nlohmann::ordered_json& doc, const std::vector<Measurement>& measurements) {
  MergeStats stats;
  if (!doc.contains("calibration") || !doc["calibration"].is_array()) {
    doc["calibration"] = nlohmann::ordered_json::array();
  }
  auto& cal = doc["calibration"];
  auto keyOf = [](const nlohmann::ordered_json& j) {
    auto str = [&](const char* k) {
      return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
    };
    auto num = [&](const char* k) {
      return j.contains(k) && j[k].is_number_integer() ? j[k].get<long long>() : -1LL;
    };
    std::string coll = str("coll"), algo = str("algo"), proto = str("proto");
    if (auto c = parseColl(coll)) coll = collName(*c);
    if (auto a = parseAlgo(algo)) algo = algoName(*a);
    if (auto p = parseProto(proto)) proto = protoName(*p);
    return std::make_tuple(coll, num("nranks"), num("nnodes"), algo, proto, num("bytes"));
  };
  for (const Measurement& m : measurements) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::parse(measurementToJson(m).dump());
    // measurementToJson sorts keys; write them in reading order instead.
    nlohmann::ordered_json ordered = {
        {"coll", entry["coll"]}, {"nranks", entry["nranks"]}, {"nnodes", entry["nnodes"]}};
    if (entry.contains("algo")) ordered["algo"] = entry["algo"];
    if (entry.contains("proto")) ordered["proto"] = entry["proto"];
    ordered["bytes"] = entry["bytes"];
    ordered["time_us"] = entry["time_us"];
    if (entry.contains("source")) ordered["source"] = entry["source"];
    if (entry.contains("gpus_per_process")) ordered["gpus_per_process"] = entry["gpus_per_process"];
    bool replaced = false;
    for (auto& existing : cal) {
      if (existing.is_object() && keyOf(existing) == keyOf(ordered)) {
        existing = ordered;
        replaced = true;
        break;
      }
    }
    if (replaced) {
      ++stats.replaced;
    } else {
      cal.push_back(std::move(ordered));
      ++stats.added;
    }
  }
  return stats;
}

}  // namespace poolrun::tuner
