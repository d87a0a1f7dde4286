#include "poolrun/tuner/explain.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace poolrun::tuner {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pad(std::string s, size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string source(const ExplainRow& row) {
  if (!row.choice) return "nccl";
  if (row.choice->rule >= 0) return "rule";
  for (const Candidate& c : row.candidates) {
    if (c.cell == row.choice->cell) return c.measured ? "measured" : "model";
  }
  return "model";
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", fraction * 100.0);
  return buf;
}

std::string shapeName(const CommShape& s) {
  return std::to_string(s.nranks) + " ranks, " + std::to_string(s.nnodes) +
         (s.nnodes == 1 ? " node" : " nodes");
}

// The worst error at or above `from` bytes; none where no row is that large.
const CompareRow* worstFrom(const Comparison& c, std::uint64_t from) {
  const CompareRow* worst = nullptr;
  for (const CompareRow& r : c.rows) {
    if (r.bytes >= from && (worst == nullptr || std::fabs(r.error()) > std::fabs(worst->error()))) worst = &r;
  }
  return worst;
}

}  // namespace

std::vector<Measurement> readComparisonTable(std::string_view text, const std::string& origin,
                                             const LogOverrides& overrides) {
  size_t first = 0;
  while (first < text.size() && std::isspace(static_cast<unsigned char>(text[first]))) ++first;
  if (first == text.size()) {
    throw ConfigError(
        origin +
        ": is empty (give the output of an nccl-tests *_perf program, or a poolrun.tuner/1 file "
        "with calibration figures)");
  }
  if (text[first] == '{') {
    TunerConfig doc = parseConfig(text, origin);
    if (doc.calibration.empty()) {
      throw ConfigError(origin +
                        ": holds no calibration figures to compare with (a poolrun.tuner/1 table lists "
                        "them under \"calibration\")");
    }
    return doc.calibration;
  }
  return parseNcclTestsLog(text, origin, overrides).measurements;
}

Comparison compare(const TunerConfig& config, const std::vector<Measurement>& table,
                   const std::string& origin, const ExplainOptions& options, const ModelFit& fit) {
  Comparison c;
  c.coll = options.coll;
  c.table = origin;
  std::set<std::pair<int, int>> shapes;  // (nranks, nnodes) of the figures of this collective
  std::set<std::string> others;
  for (const Measurement& m : table) {
    if (m.coll != options.coll) {
      others.insert(std::string(collName(m.coll)));
      continue;
    }
    if (options.nranks > 0 && m.nranks != options.nranks) continue;
    if (options.nnodes > 0 && m.nnodes != options.nnodes) continue;
    shapes.insert({m.nranks, m.nnodes});
  }
  if (shapes.empty()) {
    std::string has;
    for (const std::string& o : others) has += (has.empty() ? "" : ", ") + o;
    throw ConfigError(origin + ": no " + std::string(collName(options.coll)) + " figures" +
                      (options.nranks > 0 || options.nnodes > 0 ? " of the shape asked for" : "") +
                      (has.empty() ? "" : " (it has " + has + "; use --coll)"));
  }
  if (shapes.size() > 1) {
    std::string list;
    for (const auto& [n, k] : shapes)
      list += (list.empty() ? "" : ", ") + std::to_string(n) + "x" + std::to_string(k);
    throw ConfigError(origin + ": figures of several shapes (ranks x nodes: " + list +
                      "); choose one with --nranks and --nnodes");
  }
  c.shape = {shapes.begin()->first, shapes.begin()->second};
  TunerConfig modelOnly = config;
  modelOnly.calibration.clear();
  modelOnly.rules.clear();
  const CostModel model(modelOnly, c.shape, fit);

  // The fastest figure per size and forced cell, as calibrate keeps them.
  using Key = std::tuple<std::uint64_t, int, int>;
  std::map<Key, const Measurement*> best;
  for (const Measurement& m : table) {
    if (m.coll != c.coll || m.nranks != c.shape.nranks || m.nnodes != c.shape.nnodes) continue;
    if (m.bytes < options.min_bytes || m.bytes > options.max_bytes || m.bytes == 0) continue;
    const Key k{m.bytes, m.algo ? static_cast<int>(*m.algo) : -1, m.proto ? static_cast<int>(*m.proto) : -1};
    auto [it, inserted] = best.emplace(k, &m);
    if (!inserted && m.time_us < it->second->time_us) it->second = &m;
  }
  for (const auto& [k, m] : best) {
    CompareRow row;
    row.bytes = m->bytes;
    row.forced_algo = m->algo;
    row.forced_proto = m->proto;
    row.measured_us = m->time_us;
    double bestUs = std::numeric_limits<double>::infinity();
    for (int a = 0; a < kNumAlgos; ++a) {
      for (int p = 0; p < kNumProtos; ++p) {
        const Cell cell{static_cast<Algo>(a), static_cast<Proto>(p)};
        if ((m->algo && *m->algo != cell.algo) || (m->proto && *m->proto != cell.proto)) continue;
        if (!model.valid(c.coll, cell)) continue;
        const double t = model.predictUs(c.coll, cell, m->bytes);
        if (t < bestUs) {
          bestUs = t;
          row.cell = cell;
        }
      }
    }
    if (!(bestUs < std::numeric_limits<double>::infinity())) {
      c.skipped.push_back(formatBytes(m->bytes) + ": the run forced " +
                          (m->algo ? std::string(algoName(*m->algo)) : "any algorithm") + "/" +
                          (m->proto ? std::string(protoName(*m->proto)) : "any protocol") +
                          ", which NCCL's rules do not allow on this hardware and shape");
      continue;
    }
    row.predicted_us = model.callUs(c.coll, row.cell, m->bytes, m->gpus_per_process);
    c.rows.push_back(row);
  }

  // The choices: per size, the fastest figure of each forced algorithm (protocol left free or not), and
  // of each forced protocol where the algorithm was left to NCCL.
  std::map<std::uint64_t, std::map<int, double>> byAlgo, byProto;
  for (const auto& [k, m] : best) {
    auto keep = [](std::map<int, double>& slot, int i, double us) {
      auto [it, inserted] = slot.emplace(i, us);
      if (!inserted) it->second = std::min(it->second, us);
    };
    if (m->algo) {
      keep(byAlgo[m->bytes], static_cast<int>(*m->algo), m->time_us);
    } else if (m->proto) {
      keep(byProto[m->bytes], static_cast<int>(*m->proto), m->time_us);
    }
  }
  auto addChoices = [&](const std::map<std::uint64_t, std::map<int, double>>& measured, bool algo) {
    for (const auto& [bytes, times] : measured) {
      if (times.size() < 2) continue;
      ChoiceRow ch;
      ch.bytes = bytes;
      ch.by_algo = algo;
      ch.measured_count = static_cast<int>(times.size());
      double modelUs = std::numeric_limits<double>::infinity();
      for (int a = 0; a < kNumAlgos; ++a) {
        for (int p = 0; p < kNumProtos; ++p) {
          const Cell cell{static_cast<Algo>(a), static_cast<Proto>(p)};
          if (!model.valid(c.coll, cell)) continue;
          const double t = model.predictUs(c.coll, cell, bytes);
          if (t < modelUs) {
            modelUs = t;
            ch.model = cell;
          }
        }
      }
      ch.best_us = std::numeric_limits<double>::infinity();
      for (const auto& [i, us] : times) {
        if (us < ch.best_us) {
          ch.best_us = us;
          ch.measured_best = i;
        }
      }
      const int pick = algo ? static_cast<int>(ch.model.algo) : static_cast<int>(ch.model.proto);
      if (auto it = times.find(pick); it != times.end()) ch.model_pick_us = it->second;
      c.choices.push_back(ch);
    }
  };
  addChoices(byAlgo, true);
  addChoices(byProto, false);
  if (c.rows.empty()) {
    throw ConfigError(origin + ": no " + std::string(collName(c.coll)) + " figures between " +
                      formatBytes(options.min_bytes) + " and " + formatBytes(options.max_bytes) +
                      " that the model can run (check --min-bytes/--max-bytes)");
  }
  return c;
}

nlohmann::json compareJson(const TunerConfig& config, const Comparison& c) {
  nlohmann::json doc = {{"schema", "poolrun.tuner-compare/1"},
                        {"config", config.origin},
                        {"table", c.table},
                        {"coll", collName(c.coll)},
                        {"nranks", c.shape.nranks},
                        {"nnodes", c.shape.nnodes}};
  doc["rows"] = nlohmann::json::array();
  for (const CompareRow& r : c.rows) {
    nlohmann::json row = {{"bytes", r.bytes},
                          {"algo", algoName(r.cell.algo)},
                          {"proto", protoName(r.cell.proto)},
                          {"forced", r.forced_algo.has_value() || r.forced_proto.has_value()},
                          {"predicted_us", r.predicted_us},
                          {"measured_us", r.measured_us},
                          {"error", r.error()}};
    doc["rows"].push_back(std::move(row));
  }
  doc["choices"] = nlohmann::json::array();
  for (const ChoiceRow& ch : c.choices) {
    const std::string best = ch.by_algo ? std::string(algoName(static_cast<Algo>(ch.measured_best)))
                                        : std::string(protoName(static_cast<Proto>(ch.measured_best)));
    nlohmann::json row = {{"bytes", ch.bytes},
                          {"forced", ch.by_algo ? "algo" : "proto"},
                          {"model_algo", algoName(ch.model.algo)},
                          {"model_proto", protoName(ch.model.proto)},
                          {"measured_best", best},
                          {"measured_best_us", ch.best_us},
                          {"measured", ch.measured_count},
                          {"agrees", ch.agrees()}};
    if (ch.model_pick_us >= 0) row["model_pick_measured_us"] = ch.model_pick_us;
    doc["choices"].push_back(std::move(row));
  }
  doc["skipped"] = c.skipped;
  return doc;
}

std::string compareText(const TunerConfig& config, const Comparison& c) {
  std::ostringstream out;
  out << collName(c.coll) << " on " << shapeName(c.shape) << ": the model (" << config.origin << ") against "
      << c.table << ", " << c.rows.size() << (c.rows.size() == 1 ? " size" : " sizes") << "\n";
  out << pad("size", 10, true) << "  " << pad("cell", 24, false) << pad("predicted_us", 13, true)
      << pad("measured_us", 13, true) << pad("error", 9, true) << pad("busbw model", 13, true)
      << pad("busbw measured", 16, true) << "\n";
  const double factor = busBandwidthFactor(c.coll, c.shape.nranks);
  for (const CompareRow& r : c.rows) {
    std::string cell = cellName(r.cell);
    if (r.forced_algo || r.forced_proto) cell += " (forced)";
    const double bytes = static_cast<double>(r.bytes) * factor;
    out << pad(formatBytes(r.bytes), 10, true) << "  " << pad(cell, 24, false)
        << pad(fixed(r.predicted_us, 1), 13, true) << pad(fixed(r.measured_us, 1), 13, true)
        << pad(percent(r.error()), 9, true) << pad(fixed(bytes / (r.predicted_us * 1e3), 2), 13, true)
        << pad(fixed(bytes / (r.measured_us * 1e3), 2), 16, true) << "\n";
  }
  for (const std::string& s : c.skipped) out << "skipped " << s << "\n";
  for (std::uint64_t from : {std::uint64_t{64} << 10, std::uint64_t{256} << 20}) {
    if (const CompareRow* w = worstFrom(c, from)) {
      out << "worst error from " << formatBytes(from) << ": " << percent(w->error()) << " at "
          << formatBytes(w->bytes) << "\n";
    }
  }
  if (!c.choices.empty()) out << "choices where the table measured several:\n";
  for (const ChoiceRow& ch : c.choices) out << "  " << choiceText(ch) << "\n";
  return out.str();
}

std::string choiceText(const ChoiceRow& ch) {
  auto name = [&](int i) {
    return ch.by_algo ? std::string(algoName(static_cast<Algo>(i)))
                      : std::string(protoName(static_cast<Proto>(i)));
  };
  const int pick = ch.by_algo ? static_cast<int>(ch.model.algo) : static_cast<int>(ch.model.proto);
  std::string s = formatBytes(ch.bytes) + ": model " + cellName(ch.model) + ", fastest of " +
                  std::to_string(ch.measured_count) + (ch.by_algo ? " algorithms " : " protocols ") +
                  name(ch.measured_best) + " (" + fixed(ch.best_us, 1) + " us)";
  if (ch.agrees()) return s + ": agrees";
  if (ch.model_pick_us < 0) return s + ": differs (" + name(pick) + " not measured)";
  return s + ": differs (" + name(pick) + " measured " +
         fixed((ch.model_pick_us / ch.best_us - 1.0) * 100.0, 1) + "% slower)";
}

std::string formatBytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 5> kUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  std::uint64_t v = bytes;
  while (unit + 1 < kUnits.size() && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++unit;
  }
  return std::to_string(v) + " " + kUnits[unit];
}

std::uint64_t parseBytes(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  std::uint64_t shift = 0;
  if (unit.empty() || unit == "B") {
    shift = 0;
  } else if (unit == "K" || unit == "KiB" || unit == "k") {
    shift = 10;
  } else if (unit == "M" || unit == "MiB") {
    shift = 20;
  } else if (unit == "G" || unit == "GiB") {
    shift = 30;
  } else if (unit == "T" || unit == "TiB") {
    shift = 40;
  } else {
    i = 0;  // reported below
  }
  if (i == 0 || i > 19) {
    throw ConfigError(what + " '" + text + "' is not a byte count (use e.g. 8, 64K, 1MiB or 4G)");
  }
  std::uint64_t v = std::stoull(text.substr(0, i));
  if (shift > 0 && v > (std::numeric_limits<std::uint64_t>::max() >> shift)) {
    throw ConfigError(what + " '" + text + "' is too large");
  }
  return v << shift;
}

Explanation explain(const TunerConfig& config, const ExplainOptions& options) {
  Explanation e;
  e.coll = options.coll;
  e.shape.nnodes = options.nnodes > 0 ? options.nnodes : config.nodes;
  e.shape.nranks = options.nranks > 0 ? options.nranks : e.shape.nnodes * config.gpus_per_node;
  if (e.shape.nnodes > e.shape.nranks) {
    throw ConfigError("--nnodes " + std::to_string(e.shape.nnodes) + " is more than --nranks " +
                      std::to_string(e.shape.nranks) + " (every node holds at least one rank)");
  }
  if (options.min_bytes > options.max_bytes) {
    throw ConfigError("--min-bytes " + std::to_string(options.min_bytes) + " is above --max-bytes " +
                      std::to_string(options.max_bytes) + " (swap them)");
  }
  const DecisionTable table = DecisionTable::build(config, e.shape);
  // NCCL's cost table as the plugin would see it: the cells NCCL's rules allow are open. Without a
  // model (CSV rules only) every cell is open.
  std::array<float, kNumAlgos * kNumProtos> costs{};
  for (int a = 0; a < kNumAlgos; ++a) {
    for (int p = 0; p < kNumProtos; ++p) {
      const bool open = table.model() == nullptr ||
                        table.model()->valid(e.coll, {static_cast<Algo>(a), static_cast<Proto>(p)});
      costs[static_cast<size_t>(a * kNumProtos + p)] = open ? 1.0f : -1.0f;
    }
  }
  std::uint64_t bytes = 1;
  while (bytes < options.min_bytes && bytes <= (std::uint64_t{1} << 62)) bytes <<= 1;
  for (; bytes <= options.max_bytes; bytes <<= 1) {
    ExplainRow row;
    row.bytes = bytes;
    auto cands = table.candidates(e.coll, bytes);
    row.candidates.assign(cands.begin(), cands.end());
    Choice choice;
    if (table.choose(e.coll, bytes, 1, 0, costs.data(), kNumAlgos, kNumProtos, &choice)) {
      row.choice = choice;
      if (choice.time_us > 0) {
        row.busbw_gbyte_s =
            static_cast<double>(bytes) * busBandwidthFactor(e.coll, e.shape.nranks) / (choice.time_us * 1e3);
      }
    }
    e.rows.push_back(std::move(row));
    if (bytes == (std::uint64_t{1} << 63)) break;
  }
  return e;
}

nlohmann::json explainJson(const TunerConfig& config, const Explanation& e) {
  nlohmann::json doc = {{"schema", kExplainSchema},
                        {"config", config.origin},
                        {"coll", collName(e.coll)},
                        {"nranks", e.shape.nranks},
                        {"nnodes", e.shape.nnodes}};
  if (config.has_hardware) doc["fabric"] = fabricName(config.fabric);
  doc["rows"] = nlohmann::json::array();
  for (const ExplainRow& row : e.rows) {
    nlohmann::json r = {{"coll", collName(e.coll)}, {"bytes", row.bytes}};
    if (row.choice) {
      r["algo"] = algoName(row.choice->cell.algo);
      r["proto"] = protoName(row.choice->cell.proto);
      r["channels"] = row.choice->channels;
      r["time_us"] = row.choice->time_us > 0 ? nlohmann::json(row.choice->time_us) : nlohmann::json(nullptr);
      r["busbw_gbyte_s"] =
          row.choice->time_us > 0 ? nlohmann::json(row.busbw_gbyte_s) : nlohmann::json(nullptr);
      if (row.choice->rule >= 0) r["rule"] = row.choice->rule;
    } else {
      r["algo"] = nullptr;
      r["proto"] = nullptr;
      r["channels"] = 0;
      r["time_us"] = nullptr;
      r["busbw_gbyte_s"] = nullptr;
    }
    r["source"] = source(row);
    r["candidates"] = nlohmann::json::array();
    for (const Candidate& c : row.candidates) {
      r["candidates"].push_back({{"algo", algoName(c.cell.algo)},
                                 {"proto", protoName(c.cell.proto)},
                                 {"time_us", c.time_us},
                                 {"source", c.measured ? "measured" : "model"}});
    }
    doc["rows"].push_back(std::move(r));
  }
  return doc;
}

std::string explainText(const TunerConfig& config, const Explanation& e) {
  std::ostringstream out;
  const int ppn = (e.shape.nranks + e.shape.nnodes - 1) / e.shape.nnodes;
  out << collName(e.coll) << " on " << e.shape.nranks << " ranks, " << e.shape.nnodes
      << (e.shape.nnodes == 1 ? " node" : " nodes") << " (" << ppn << " per node)";
  if (config.has_hardware) {
    out << "; fabric " << fabricName(config.fabric) << ", sm" << config.gpu.sm;
    if (config.gpu.nvlink_gbyte_s > 0) {
      out << ", NVLink " << fixed(config.gpu.nvlink_gbyte_s, 0) << " GB/s";
    } else {
      out << ", PCIe only";
    }
    if (config.gpu.nvswitch) out << ", NVSwitch";
    if (config.gpu.nvls) out << ", NVLS";
    if (e.shape.nnodes > 1) {
      out << "; " << config.net.nics_per_node << "x " << fixed(config.net.nic_gbit_s, 0) << " Gb/s NICs"
          << (config.net.gdr ? ", GDR" : ", no GDR") << (config.net.sharp ? ", SHARP" : "");
    }
  } else {
    out << "; rules only (" << config.origin << "), no model";
  }
  out << "\n";
  out << pad("size", 10, true) << "  " << pad("choice", 20, false) << pad("channels", 9, false)
      << pad("time_us", 11, true) << pad("busbw GB/s", 12, true)
      << "  candidates, fastest first (us; * measured)\n";
  for (const ExplainRow& row : e.rows) {
    out << pad(formatBytes(row.bytes), 10, true) << "  ";
    if (row.choice) {
      std::string choice = cellName(row.choice->cell);
      if (row.choice->rule >= 0) choice += " (rule)";
      out << pad(choice, 20, false)
          << pad(row.choice->channels > 0 ? std::to_string(row.choice->channels) : "NCCL", 9, false);
      if (row.choice->time_us > 0) {
        out << pad(fixed(row.choice->time_us, 1), 11, true) << pad(fixed(row.busbw_gbyte_s, 2), 12, true);
      } else {
        out << pad("-", 11, true) << pad("-", 12, true);
      }
    } else {
      out << pad("NCCL decides", 20, false) << pad("", 9, false) << pad("-", 11, true) << pad("-", 12, true);
    }
    out << "  ";
    for (size_t i = 0; i < row.candidates.size(); ++i) {
      const Candidate& c = row.candidates[i];
      out << (i ? ", " : "") << cellName(c.cell) << " " << fixed(c.time_us, 1) << (c.measured ? "*" : "");
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace poolrun::tuner
