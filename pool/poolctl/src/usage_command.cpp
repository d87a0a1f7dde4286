// poolctl usage: the usage ledger's report (docs/accounting.md), sreport's view: allocated, used and
// idle GPU-hours, efficiency and energy per owner, account, job, node or GPU model over a range.

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "poolctl.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/usage_json.hpp"

namespace poolrun::pool::ctl {

namespace {

std::string hours(double seconds) {
  return decimal(seconds / 3600.0, 2);
}
std::string kwh(double joules) {
  return decimal(joules / 3.6e6, 3);
}
std::string efficiency(const UsageTotals& t) {
  return t.allocated_s > 0 ? decimal(100.0 * t.used_s / t.allocated_s, 1) + "%" : "-";
}

std::string shown(const std::string& name) {
  return name.empty() ? "(none)" : name;
}

}  // namespace

std::string decimal(double v, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << v;
  return out.str();
}

std::string usageLine(const UsageTotals& t) {
  return hours(t.allocated_s) + " GPU-h allocated, " + hours(t.used_s) + " used (" + efficiency(t) + "), " +
         hours(t.idle_s) + " idle, " + kwh(t.energy_j) + " kWh";
}

int usageCommand(const Command& c) {
  std::vector<std::string> args = c.args;
  UsageQuery q;
  const std::string by = takeOption(args, "--by"), since = takeOption(args, "--since"),
                    until = takeOption(args, "--until");
  std::string format = takeOption(args, "--format");
  if (!args.empty())
    throw badInput("usage takes --by B, --since T, --until T and --format F (got '" +
                   common::printable(args[0]) + "')");
  if (!by.empty()) {
    auto parsed = usageByOf(by);
    if (!parsed)
      throw badInput("usage: --by '" + common::printable(by) +
                     "': give owner, account, job, node or gpu-model");
    q.by = *parsed;
  }
  if (format.empty()) format = c.json ? "json" : "table";
  if (format != "table" && format != "csv" && format != "json")
    throw badInput("usage: --format '" + common::printable(format) + "': give table, csv or json");
  if (c.json && format != "json") throw badInput("usage: give --json or --format " + format + ", not both");
  if (!since.empty()) q.since = timeOption("--since", since);
  if (!until.empty()) q.until = timeOption("--until", until);
  if (q.until <= q.since)
    throw badInput("usage: --until " + until + " is not after " +
                   (since.empty() ? std::string("the ledger's start (1970)") : "--since " + since));
  const std::vector<UsageTotals> rows = c.pool().usage(q);
  if (format == "json") {
    printJsonList(rows);
    return 0;
  }
  const std::string column = q.by == UsageBy::kGpuModel ? "gpu_model" : toString(q.by);
  if (format == "csv") {
    std::cout << column
              << ",leases,allocated_gpu_hours,used_gpu_hours,idle_gpu_hours,efficiency_percent,energy_kwh\n";
    for (const UsageTotals& t : rows)
      std::cout << csvField(t.name) << "," << t.leases << "," << decimal(t.allocated_s / 3600, 4) << ","
                << decimal(t.used_s / 3600, 4) << "," << decimal(t.idle_s / 3600, 4) << ","
                << (t.allocated_s > 0 ? decimal(100.0 * t.used_s / t.allocated_s, 2) : "") << ","
                << decimal(t.energy_j / 3.6e6, 6) << "\n";
    return 0;
  }
  size_t width = column.size();
  for (const UsageTotals& t : rows) width = std::max(width, std::min<size_t>(shown(t.name).size(), 40));
  std::string header = column;
  std::transform(header.begin(), header.end(), header.begin(), [](char ch) { return ch == '_' ? ' ' : ch; });
  std::transform(header.begin(), header.end(), header.begin(), ::toupper);
  std::cout << std::left << std::setw(static_cast<int>(width + 2)) << header << std::right << std::setw(7)
            << "LEASES" << std::setw(13) << "ALLOC GPU-h" << std::setw(12) << "USED GPU-h" << std::setw(12)
            << "IDLE GPU-h" << std::setw(11) << "EFFICIENCY" << std::setw(11) << "ENERGY kWh"
            << "\n";
  UsageTotals all;
  for (const UsageTotals& t : rows) {
    std::cout << std::left << std::setw(static_cast<int>(width + 2)) << shown(t.name).substr(0, 40)
              << std::right << std::setw(7) << t.leases << std::setw(13) << hours(t.allocated_s)
              << std::setw(12) << hours(t.used_s) << std::setw(12) << hours(t.idle_s) << std::setw(11)
              << efficiency(t) << std::setw(11) << kwh(t.energy_j) << "\n";
    all.allocated_s += t.allocated_s;
    all.used_s += t.used_s;
    all.idle_s += t.idle_s;
    all.energy_j += t.energy_j;
    all.leases += t.leases;
  }
  std::cout << std::left << std::setw(static_cast<int>(width + 2)) << "TOTAL" << std::right << std::setw(7)
            << all.leases << std::setw(13) << hours(all.allocated_s) << std::setw(12) << hours(all.used_s)
            << std::setw(12) << hours(all.idle_s) << std::setw(11) << efficiency(all) << std::setw(11)
            << kwh(all.energy_j) << "\n";
  return 0;
}

}  // namespace poolrun::pool::ctl
