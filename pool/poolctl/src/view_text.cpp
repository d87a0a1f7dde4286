// poolctl's tables (poolctl_top.hpp: `status`, `nodes`, `leases`) and the text pieces every view
// shares (view_text.hpp).

#include "view_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/options.hpp"

namespace poolrun::pool {
namespace view {

seconds since(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration_cast<seconds>(now - t);
}

// Bytes as GiB with one decimal ("79.6"), or whole GiB from 10 on where `compact` ("61").
std::string gib(uint64_t bytes, bool compact) {
  double g = static_cast<double>(bytes) / double(uint64_t{1} << 30);
  char buf[32];
  std::snprintf(buf, sizeof buf, compact && g >= 10 ? "%.0f" : "%.1f", g);
  return buf;
}

std::string percent(std::optional<double> fraction) {
  if (!fraction) return "-";
  return std::to_string(std::lround(std::clamp(*fraction, 0.0, 1.0) * 100)) + "%";
}

std::string rounded(std::optional<double> value, const char* unit) {
  if (!value) return "-";
  return std::to_string(std::lround(*value)) + unit;
}

std::optional<uint64_t> totalMemory(const GpuInfo& g) {
  if (g.memory_total_bytes && *g.memory_total_bytes > 0) return g.memory_total_bytes;
  if (g.memory_bytes > 0) return g.memory_bytes;
  return std::nullopt;  // 0: a topology that does not say
}

// "61.2/79.6" (GiB); "-/79.6" where the use is not known.
std::string memoryText(const GpuInfo& g, bool compact) {
  std::optional<uint64_t> total = totalMemory(g);
  if (!g.memory_used_bytes && !total) return "-";
  return (g.memory_used_bytes ? gib(*g.memory_used_bytes, compact) : "-") + "/" +
         (total ? gib(*total, compact) : "-");
}

std::optional<double> memoryFraction(const GpuInfo& g) {
  std::optional<uint64_t> total = totalMemory(g);
  if (!g.memory_used_bytes || !total || *total == 0) return std::nullopt;
  return static_cast<double>(*g.memory_used_bytes) / static_cast<double>(*total);
}

// What a GPU's line ends with: why it failed and since when, or the processes that make it
// foreign ("pids 4242 (9.5 GiB), 4243 (0.5 GiB)").
std::string gpuNote(const GpuInfo& g, Clock::time_point now) {
  std::string note;
  if (!g.mig_layout.empty()) {
    note = "MIG layout asked:";
    for (size_t i = 0; i < g.mig_layout.size(); ++i) note += (i ? "," : " ") + g.mig_layout[i];
  }
  if (g.state == GpuState::kFailed || !g.failed_reason.empty()) {
    note += (note.empty() ? "" : "; ") + (g.failed_reason.empty() ? std::string("failed") : g.failed_reason);
    if (g.failed_at) note += " at " + formatLocalTime(*g.failed_at, now);
  }
  // A GPU NVML no longer lists (or one with counters it could not read): its agent's words.
  if (!g.sample_error.empty()) note += (note.empty() ? "" : "; ") + g.sample_error;
  if (!g.foreign_processes.empty()) {
    if (!note.empty()) note += "; ";
    note += g.foreign_processes.size() == 1 ? "pid " : "pids ";
    for (size_t i = 0; i < g.foreign_processes.size() && i < kShownProcesses; ++i) {
      const topo::GpuProcess& p = g.foreign_processes[i];
      note += (i ? ", " : "") + std::to_string(p.pid) + " (" +
              (p.used_memory_bytes ? gib(p.used_memory_bytes) + " GiB" : "memory not known") + ")";
    }
    if (g.foreign_processes.size() > kShownProcesses)
      note += " and " + std::to_string(g.foreign_processes.size() - kShownProcesses) + " more";
  }
  return note;
}

// "up", "unreachable" (an up node whose agent went quiet), "draining,unreachable", "down".
std::string nodeStateText(const NodeInfo& n) {
  if (!n.unreachable) return toString(n.state);
  return n.state == NodeState::kUp ? "unreachable" : toString(n.state) + ",unreachable";
}

std::string agentText(const NodeInfo& n) {
  return n.agent.empty() ? "no agent" : n.agent;
}

std::string heartbeatText(const NodeInfo& n, Clock::time_point now) {
  if (!n.last_heartbeat) return "-";
  return formatElapsed(since(*n.last_heartbeat, now)) + " ago";
}

GpuCounts countGpus(const NodeInfo& n) {
  GpuCounts c;
  for (const GpuInfo& g : n.gpus) {
    switch (g.state) {
      case GpuState::kFree:
        ++c.free;
        break;
      case GpuState::kLeased:
        ++c.leased;
        break;
      case GpuState::kFailed:
        ++c.failed;
        break;
      case GpuState::kForeign:
        ++c.foreign;
        break;
      case GpuState::kMig:
        ++c.mig;
        break;
    }
  }
  return c;
}

// Which of a node's GPUs get a line: all of a node with an agent (their readings), only the
// leased, failed or foreign ones of a node without (nothing else is known of the others).
bool gpuShown(const NodeInfo& n, const GpuInfo& g) {
  return !n.agent.empty() || g.state != GpuState::kFree || !g.lease.empty();
}

// Characters (UTF-8 code points) in `s`.
size_t shownWidth(const std::string& s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

std::string rightTrimmed(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Rows of cells as lines, each column as wide as its widest cell (counted in characters), two
// spaces apart; the last cell of a row is not padded.
std::vector<std::string> alignColumns(const std::vector<std::vector<std::string>>& rows) {
  auto width = shownWidth;
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i + 1 < row.size(); ++i) widths[i] = std::max(widths[i], width(row[i]));
  }
  std::vector<std::string> out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - width(row[i]) + 2, ' ');
    }
    out.push_back(rightTrimmed(std::move(line)));
  }
  return out;
}

// A bar of `width` characters in all, "[#####.....]", with `label` written over its right end
// where it fits ("[#####...87%]"); "-" where `fraction` is not known.
std::string bar(std::optional<double> fraction, size_t width, const std::string& label) {
  if (!fraction) return "-";
  size_t inner = width > 2 ? width - 2 : 0;
  size_t full = static_cast<size_t>(std::lround(std::clamp(*fraction, 0.0, 1.0) * double(inner)));
  std::string fill = std::string(full, '#') + std::string(inner - full, '.');
  if (label.size() < inner) fill.replace(inner - label.size(), label.size(), label);
  return "[" + fill + "]";
}

std::string leaseNote(const Lease& l, Clock::time_point now) {
  std::vector<std::string> notes;
  if (l.reclaim_at)
    notes.push_back("idle: reclaimed at " + formatLocalTime(*l.reclaim_at, now) + " (in " +
                    formatElapsed(since(now, *l.reclaim_at)) + ")");
  if (!l.at_risk_nodes.empty()) {
    std::string nodes;
    for (const std::string& n : l.at_risk_nodes) nodes += (nodes.empty() ? "" : ",") + n;
    notes.push_back("at risk: " + nodes + " unreachable");
  }
  if (l.no_reclaim) notes.push_back("never reclaimed");
  if (l.preempt_at)
    notes.push_back("preempted: ends by " + formatLocalTime(*l.preempt_at, now) + " (ticket " +
                    std::to_string(l.preempted_for) + ")");
  else if (l.preemptible)
    notes.push_back("preemptible");
  if (l.elastic)
    notes.push_back("elastic " + std::to_string(l.elastic->gpus) + ":" + std::to_string(l.elastic->max_gpus) +
                    (l.resizes > 0 ? ", resized " + std::to_string(l.resizes) + "x" : ""));
  if (l.shrink_at)
    notes.push_back("shrinking: gives back " + formatGpus(l.shrink_gpus) + " by " +
                    formatLocalTime(*l.shrink_at, now) + " (ticket " + std::to_string(l.shrunk_for) + ")");
  std::string out;
  for (const std::string& n : notes) out += (out.empty() ? "" : "; ") + n;
  return out;
}

std::string idleText(const Lease& l, Clock::time_point now) {
  return l.idle_since ? formatElapsed(since(*l.idle_since, now)) : "-";
}

std::string orDash(const std::string& s) {
  return s.empty() ? "-" : s;
}

// "14 MIG instances (9 free, 5 leased), ": where the pool has any (with those unusable with their GPU).
std::string migText(const PoolStatus& s) {
  const int all = s.mig_free + s.mig_leased + s.mig_unusable;
  if (all == 0) return "";
  return std::to_string(all) + " MIG instances (" + std::to_string(s.mig_free) + " free, " +
         std::to_string(s.mig_leased) + " leased" +
         (s.mig_unusable > 0 ? ", " + std::to_string(s.mig_unusable) + " unusable" : "") + "), ";
}

// "6 MPS shares on 2 GPUs, ": where the pool has any.
std::string mpsText(const PoolStatus& s) {
  if (s.mps_shares == 0) return "";
  return std::to_string(s.mps_shares) + " MPS share" + (s.mps_shares == 1 ? "" : "s") + " on " +
         std::to_string(s.gpus_shared) + " GPU" + (s.gpus_shared == 1 ? "" : "s") + ", ";
}

}  // namespace view

using namespace view;

std::string fitWidth(const std::string& text, size_t width) {
  std::string out;
  size_t shown = 0;
  for (size_t i = 0; i < text.size() && shown < width; ++shown) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    // Control characters (C0, DEL, C1) would move the cursor or start an escape sequence.
    bool control = c < 0x20 || c == 0x7f ||
                   (ok && n == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0);
    if (!ok || control) {
      out += '?';
      i += ok ? n : 1;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

std::string statusLine(const std::string& pool, const PoolStatus& s) {
  return pool + ": " + std::to_string(s.nodes_up + s.nodes_draining + s.nodes_down) + " nodes (" +
         std::to_string(s.nodes_up) + " up, " + std::to_string(s.nodes_draining) + " draining, " +
         std::to_string(s.nodes_down) + " down; " + std::to_string(s.nodes_unreachable) + " unreachable), " +
         std::to_string(s.gpus_free + s.gpus_leased + s.gpus_failed + s.gpus_foreign + s.gpus_mig) +
         " GPUs (" + std::to_string(s.gpus_free) + " free, " + std::to_string(s.gpus_leased) + " leased, " +
         std::to_string(s.gpus_failed) + " failed, " + std::to_string(s.gpus_foreign) + " foreign" +
         (s.gpus_mig > 0 ? ", " + std::to_string(s.gpus_mig) + " in MIG mode" : "") + "; " +
         std::to_string(s.gpus_unreachable) + " on unreachable nodes), " + migText(s) + mpsText(s) +
         std::to_string(s.leases) + " leases, " + std::to_string(s.queued) + " queued";
}

// A node's levels, lowest first: "nvl:rack1 leaf:leaf1 spine:s1" ("-" where none is known).
std::string levelsText(const topo::NodeLevels& levels) {
  const std::pair<const char*, const std::string*> shown[] = {{"nvl", &levels.nvlink_domain},
                                                              {"block", &levels.block},
                                                              {"leaf", &levels.switch_name},
                                                              {"rail", &levels.rail_group},
                                                              {"spine", &levels.spine}};
  std::string out;
  for (const auto& [key, name] : shown)
    if (!name->empty()) out += (out.empty() ? "" : " ") + std::string(key) + ":" + *name;
  return orDash(out);
}

std::vector<std::string> nodeTable(const std::vector<NodeInfo>& nodes, Clock::time_point now) {
  std::vector<std::vector<std::string>> nodeRows{
      {"NODE", "STATE", "LEVELS", "FABRIC", "AGENT", "HEARTBEAT", "GPUS (free/leased/failed/foreign)"}};
  std::vector<std::vector<std::string>> gpuRows{
      {"  GPU", "STATE", "UTIL", "MEM GiB", "TEMP", "POWER", "LEASE", "NOTE"}};
  enum class Row { kNode, kGpu, kNote };
  std::vector<std::pair<Row, size_t>> order;
  std::vector<std::string> notes;  // under a node's line: why it drains, where its agent drained it
  for (const NodeInfo& n : nodes) {
    GpuCounts c = countGpus(n);
    order.push_back({Row::kNode, nodeRows.size()});
    nodeRows.push_back({n.name, nodeStateText(n), levelsText(n.levels), orDash(n.fabric), agentText(n),
                        heartbeatText(n, now),
                        std::to_string(n.gpus.size()) + " (" + std::to_string(c.free) + "/" +
                            std::to_string(c.leased) + "/" + std::to_string(c.failed) + "/" +
                            std::to_string(c.foreign) + ")"});
    if (!n.drain_reason.empty()) {
      order.push_back({Row::kNote, notes.size()});
      notes.push_back("  drained by its agent: " + n.drain_reason);
    }
    for (const GpuInfo& g : n.gpus) {
      if (!gpuShown(n, g)) continue;
      order.push_back({Row::kGpu, gpuRows.size()});
      gpuRows.push_back({"  " + std::to_string(g.index), toString(g.state), percent(g.utilization),
                         memoryText(g, false), rounded(g.temperature_c, "C"), rounded(g.power_w, "W"),
                         orDash(g.lease), gpuNote(g, now)});
      // Its MIG instances, as GPU/GPU-instance.compute-instance (nvidia-smi's GI and CI ids).
      for (const MigInstanceInfo& m : g.mig_instances) {
        order.push_back({Row::kGpu, gpuRows.size()});
        gpuRows.push_back({"   " + std::to_string(g.index) + "/" + std::to_string(m.gpu_instance) + "." +
                               std::to_string(m.compute_instance),
                           toString(m.state), "-", gib(m.memory_bytes), "-", "-", orDash(m.lease),
                           m.profile + " " + m.uuid});
      }
      // Its MPS shares, one line each: the share's SMs and memory.
      for (const GpuInfo::Share& sh : g.shares) {
        order.push_back({Row::kGpu, gpuRows.size()});
        gpuRows.push_back(
            {"   " + std::to_string(g.index) + "~", "share", "-",
             sh.memory_bytes > 0 ? gib(sh.memory_bytes) : "-", "-", "-", sh.lease,
             "MPS " + (sh.percent > 0 ? std::to_string(sh.percent) + "% of the SMs" : "SMs not limited")});
      }
    }
  }
  std::vector<std::string> nodeLines = alignColumns(nodeRows), gpuLines = alignColumns(gpuRows);
  std::vector<std::string> out{nodeLines[0]};
  if (gpuRows.size() > 1) out.push_back(gpuLines[0]);
  for (const auto& [row, i] : order)
    out.push_back(row == Row::kNode ? nodeLines[i] : row == Row::kGpu ? gpuLines[i] : notes[i]);
  for (std::string& line : out) line = fitWidth(line, line.size());
  return out;
}

std::vector<std::string> leaseTable(const std::vector<Lease>& leases, Clock::time_point now) {
  std::vector<std::vector<std::string>> rows{
      {"LEASE", "JOB", "OWNER", "GPUS", "AGE", "IDLE", "EXPIRES", "END", "NODELIST", "NOTE"}};
  auto fromNow = [&](Clock::time_point t) {
    return t == Clock::time_point::max() ? "-" : formatElapsed(since(now, t));
  };
  for (const Lease& l : leases)
    rows.push_back({l.id, orDash(l.job_name), l.owner, std::to_string(l.gpus.size()),
                    formatElapsed(since(l.created, now)), idleText(l, now), fromNow(l.expires),
                    l.max_end ? fromNow(*l.max_end) : "-", formatGpus(l.gpus), leaseNote(l, now)});
  std::vector<std::string> out = alignColumns(rows);
  for (std::string& line : out) line = fitWidth(line, line.size());
  return out;
}

}  // namespace poolrun::pool
