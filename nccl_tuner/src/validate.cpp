#include "poolrun/tuner/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
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

Comparison compareTable(const Table& t, const ModelFit& fit, std::uint64_t minBytes) {
  ExplainOptions options;
  options.coll = Coll::kAllReduce;
  options.min_bytes = minBytes;
  options.max_bytes = std::numeric_limits<std::uint64_t>::max();
  return compare(t.config, t.figures, t.name, options, fit);
}

double fitCost(const std::vector<const Table*>& tables, const ModelFit& fit, std::uint64_t minBytes) {
  double total = 0;
  for (const Table* t : tables) {
    const Comparison c = compareTable(*t, fit, minBytes);
    double sum = 0;
    for (const CompareRow& r : c.rows) {
      const double e = std::log(r.predicted_us / r.measured_us);
      sum += std::fabs(e);
    }
    total += c.rows.empty() ? 0.0 : sum / static_cast<double>(c.rows.size());
  }
  return tables.empty() ? 0.0 : total / static_cast<double>(tables.size());
}

ModelFit fitTables(const std::vector<const Table*>& tables, std::uint64_t minBytes) {
  ModelFit best;
  best.fill_us = 0;
  best.fill_half_bytes = 65536;
  if (tables.empty()) return best;
  double bestCost = fitCost(tables, best, minBytes);
  for (int us = 5; us <= 1000; us += 5) {
    for (int k = 0; k <= 32; ++k) {
      ModelFit f;
      f.fill_us = us;
      f.fill_half_bytes = std::round(65536.0 * std::pow(2.0, k / 2.0));
      const double cost = fitCost(tables, f, minBytes);
      if (cost < bestCost) {
        bestCost = cost;
        best = f;
      }
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
    h.comparison = compareTable(tables[i], h.fit, minBytes);
    out.push_back(std::move(h));
  }
  return out;
}

std::string validationReport(const std::vector<HeldOut>& heldOut) {
  std::ostringstream out;
  char buf[160];
  for (const HeldOut& h : heldOut) {
    std::snprintf(buf, sizeof buf,
                  "%s (%d ranks on %d node(s)), fitted without it: fill %.0f us, half at %s\n",
                  h.name.c_str(), h.comparison.shape.nranks, h.comparison.shape.nnodes, h.fit.fill_us,
                  formatBytes(static_cast<std::uint64_t>(h.fit.fill_half_bytes)).c_str());
    out << buf;
    double worstSmall = 0, worstLarge = 0;
    for (const CompareRow& r : h.comparison.rows) {
      std::snprintf(buf, sizeof buf, "  %10s  %-22s %+7.1f%%\n", formatBytes(r.bytes).c_str(),
                    (std::string(algoName(r.cell.algo)) + "/" + std::string(protoName(r.cell.proto)) +
                     (r.forced_algo || r.forced_proto ? " forced" : ""))
                        .c_str(),
                    r.error() * 100);
      out << buf;
      worstSmall = std::max(worstSmall, std::fabs(r.error()));
      if (r.bytes >= (std::uint64_t{256} << 20)) worstLarge = std::max(worstLarge, std::fabs(r.error()));
    }
    std::snprintf(buf, sizeof buf, "  worst |error|: %.1f%% from 64 KiB, %.1f%% from 256 MiB\n",
                  worstSmall * 100, worstLarge * 100);
    out << buf;
  }
  return out.str();
}

}  // namespace poolrun::tuner
