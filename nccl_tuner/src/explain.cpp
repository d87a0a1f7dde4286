#include "poolrun/tuner/explain.hpp"

#include <array>
#include <cctype>
#include <cstdio>
#include <limits>
#include <sstream>

namespace poolrun::tuner {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string cellName(Cell c) {
  return std::string(algoName(c.algo)) + "/" + std::string(protoName(c.proto));
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

}  // namespace

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
