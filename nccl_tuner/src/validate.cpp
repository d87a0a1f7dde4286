#include "poolrun/tuner/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace poolrun::tuner {

std::vector<Table> loadTables(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  if (ec) throw ConfigError("tables: cannot list " + dir + " (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  std::vector<Table> tables;
  for (const auto& path : files) {
    Table t;
    t.name = path.filename().string();
    t.config = parseConfig(readConfigFile(path.string(), "table"), path.string());
    t.figures = t.config.calibration;
    if (t.figures.empty()) throw ConfigError("table " + path.string() + ": holds no calibration figures");
    tables.push_back(std::move(t));
  }
  return tables;
}

std::vector<Comparison> compareTable(const Table& t, const ModelFit& fit, std::uint64_t minBytes) {
  std::vector<Comparison> out;
  for (const Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter}) {
    std::set<std::pair<int, int>> shapes;
    for (const Measurement& m : t.figures) {
      if (m.coll == coll && m.bytes >= minBytes) shapes.insert({m.nranks, m.nnodes});
    }
    for (const auto& [nranks, nnodes] : shapes) {
      ExplainOptions options;
      options.coll = coll;
      options.nranks = nranks;
      options.nnodes = nnodes;
      options.min_bytes = minBytes;
      options.max_bytes = std::numeric_limits<std::uint64_t>::max();
      out.push_back(compare(t.config, t.figures, t.name, options, fit));
    }
  }
  return out;
}

double fitCost(const std::vector<const Table*>& tables, const ModelFit& fit, std::uint64_t minBytes) {
  double total = 0;
  for (const Table* t : tables) {
    double sum = 0;
    size_t count = 0;
    for (const Comparison& c : compareTable(*t, fit, minBytes)) {
      for (const CompareRow& r : c.rows) {
        sum += std::fabs(std::log(r.predicted_us / r.measured_us));
        ++count;
      }
    }
    total += count == 0 ? 0.0 : sum / static_cast<double>(count);
  }
  return tables.empty() ? 0.0 : total / static_cast<double>(tables.size());
}

ModelFit fitTables(const std::vector<const Table*>& tables, std::uint64_t minBytes) {
  ModelFit best;
  best.fill_step_us = 0;
  best.fill_half_bytes = 65536;
  best.launch_us = 0;
  if (tables.empty()) return best;
  double bestCost = fitCost(tables, best, minBytes);
  auto consider = [&](const ModelFit& f) {
    const double cost = fitCost(tables, f, minBytes);
    if (cost < bestCost) {
      bestCost = cost;
      best = f;
    }
  };
  // The fill acts from about a MiB up, the launch floor below: fitted in turn, twice.
  for (int round = 0; round < 2; ++round) {
    const double launchUs = best.launch_us;
    for (int tenths = 5; tenths <= 500; tenths += 5) {
      for (int k = 0; k <= 32; ++k) {
        ModelFit f;
        f.fill_step_us = tenths / 10.0;
        f.fill_half_bytes = std::round(65536.0 * std::pow(2.0, k / 2.0));
        f.launch_us = launchUs;
        consider(f);
      }
    }
    const ModelFit fill = best;
    for (int tenths = 0; tenths <= 200; tenths += 2) {
      ModelFit f = fill;
      f.launch_us = tenths / 10.0;
      consider(f);
    }
  }
  return best;
}

std::vector<HeldOut> leaveOneOut(const std::vector<Table>& tables, std::uint64_t minBytes) {
  std::vector<HeldOut> out;
  for (size_t i = 0; i < tables.size(); ++i) {
    std::vector<const Table*> others;
    for (size_t j = 0; j < tables.size(); ++j) {
      if (j != i) others.push_back(&tables[j]);
    }
    HeldOut h;
    h.name = tables[i].name;
    h.fit = fitTables(others, minBytes);
    h.comparisons = compareTable(tables[i], h.fit, minBytes);
    out.push_back(std::move(h));
  }
  return out;
}

std::string validationReport(const std::vector<HeldOut>& heldOut) {
  std::ostringstream out;
  char buf[256];
  for (const HeldOut& h : heldOut) {
    std::snprintf(buf, sizeof buf,
                  "%s, fitted without it: fill %.1f us a step, half at %s, launch %.1f us a GPU\n",
                  h.name.c_str(), h.fit.fill_step_us,
                  formatBytes(static_cast<std::uint64_t>(h.fit.fill_half_bytes)).c_str(), h.fit.launch_us);
    out << buf;
    double worstSmall = 0, worstLarge = 0;
    int agree = 0, choices = 0;
    for (const Comparison& c : h.comparisons) {
      std::snprintf(buf, sizeof buf, "  %s on %d ranks, %d node(s)\n", std::string(collName(c.coll)).c_str(),
                    c.shape.nranks, c.shape.nnodes);
      out << buf;
      for (const CompareRow& r : c.rows) {
        std::snprintf(buf, sizeof buf, "  %10s  %-22s %+7.1f%%\n", formatBytes(r.bytes).c_str(),
                      (std::string(algoName(r.cell.algo)) + "/" + std::string(protoName(r.cell.proto)) +
                       (r.forced_algo || r.forced_proto ? " forced" : ""))
                          .c_str(),
                      r.error() * 100);
        out << buf;
        worstSmall = std::max(worstSmall, std::fabs(r.error()));
        if (r.bytes >= (std::uint64_t{256} << 20)) worstLarge = std::max(worstLarge, std::fabs(r.error()));
      }
      for (const ChoiceRow& ch : c.choices) {
        out << "  choice " << choiceText(ch) << "\n";
        agree += ch.agrees() ? 1 : 0;
        ++choices;
      }
    }
    std::snprintf(buf, sizeof buf, "  worst |error|: %.1f%% from 64 KiB, %.1f%% from 256 MiB\n",
                  worstSmall * 100, worstLarge * 100);
    out << buf;
    if (choices > 0) out << "  choices: " << agree << " of " << choices << " agree\n";
  }
  return out.str();
}

namespace {

// "a100-8x2-oci-roce, 16 ranks on 2 nodes", with the collective where it is not allreduce and the
// cell a run forced.
std::string curveLabel(const std::string& table, const Comparison& c, const CompareRow& r) {
  std::string label = table.substr(0, table.rfind(".json"));
  if (c.coll != Coll::kAllReduce) label += ", " + std::string(collName(c.coll));
  label += ", " + std::to_string(c.shape.nranks) + " ranks";
  if (c.shape.nnodes > 1) label += " on " + std::to_string(c.shape.nnodes) + " nodes";
  if (r.forced_algo && r.forced_proto)
    label += ", " + cellName({*r.forced_algo, *r.forced_proto}) + " forced";
  if (r.forced_algo && !r.forced_proto) label += ", " + std::string(algoName(*r.forced_algo)) + " forced";
  if (!r.forced_algo && r.forced_proto) label += ", " + std::string(protoName(*r.forced_proto)) + " forced";
  return label;
}

}  // namespace

std::string perSizeMarkdown(const std::vector<HeldOut>& heldOut) {
  struct Curve {
    std::string label;
    std::map<std::uint64_t, double> error;              // by size
    std::vector<std::pair<std::uint64_t, Cell>> cells;  // where NCCL chose: the model's cell by size
    bool forced = false;
  };
  std::vector<Curve> curves;
  std::map<std::string, size_t> byLabel;
  std::set<std::uint64_t> sizes;
  for (const HeldOut& h : heldOut) {
    for (const Comparison& c : h.comparisons) {
      for (const CompareRow& r : c.rows) {
        const std::string label = curveLabel(h.name, c, r);
        auto [it, added] = byLabel.emplace(label, curves.size());
        if (added) curves.push_back({label, {}, {}, r.forced_algo || r.forced_proto});
        Curve& curve = curves[it->second];
        curve.error[r.bytes] = r.error();
        if (!curve.forced) curve.cells.emplace_back(r.bytes, r.cell);
        sizes.insert(r.bytes);
      }
    }
  }
  std::ostringstream out;
  out << "| held out |";
  for (std::uint64_t b : sizes) out << " " << formatBytes(b) << " |";
  out << "\n|---|";
  for (size_t i = 0; i < sizes.size(); ++i) out << "---:|";
  out << "\n";
  char buf[32];
  for (const Curve& curve : curves) {
    out << "| " << curve.label << " |";
    for (std::uint64_t b : sizes) {
      auto it = curve.error.find(b);
      if (it == curve.error.end()) {
        out << " |";
        continue;
      }
      std::snprintf(buf, sizeof buf, " %+.1f |", it->second * 100);
      out << buf;
    }
    out << "\n";
  }
  out << "\nThe model's cells where NCCL chose (sizes as above):\n\n";
  for (const Curve& curve : curves) {
    if (curve.forced) continue;
    out << "- " << curve.label << ":";
    for (size_t i = 0; i < curve.cells.size();) {
      size_t j = i;
      while (j + 1 < curve.cells.size() && curve.cells[j + 1].second == curve.cells[i].second) ++j;
      out << (i == 0 ? " " : ", ") << cellName(curve.cells[i].second) << " "
          << formatBytes(curve.cells[i].first);
      if (j > i) out << "-" << formatBytes(curve.cells[j].first);
      i = j + 1;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace poolrun::tuner
