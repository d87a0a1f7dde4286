// poolctl's views of the live pool (poolctl_top.hpp): the tables of `nodes` and `leases`, and
// `poolctl top`, a frame rendered from what the pool said, drawn in place in a terminal.

#include "poolrun/pool/poolctl_top.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>

#include "poolrun/topo/error.hpp"
#include "poolrun/topo/names.hpp"
#include "poolrun/topo/options.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;

constexpr int64_t kMaxIntervalSeconds = 3600;
constexpr size_t kShownProcesses = 4;  // foreign processes named per GPU; the rest are counted

seconds since(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration_cast<seconds>(now - t);
}

// Bytes as GiB with one decimal ("79.6"), or whole GiB from 10 on where `compact` ("61").
std::string gib(uint64_t bytes, bool compact = false) {
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

struct GpuCounts {
  int free = 0, leased = 0, failed = 0, foreign = 0, mig = 0;
};

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

// --- the frame of `poolctl top`

// A section of the frame: its lines, and for each the item (node, lease, request) it starts, so
// that a cut section can say how many items it leaves out.
struct Section {
  std::vector<std::string> lines;
  std::vector<int> starts;  // per line: the index of the item it starts, or -1
  int items = 0;
  const char* noun = "";  // "nodes": "... 3 more nodes"

  void add(std::string line, bool startsItem) {
    lines.push_back(std::move(line));
    starts.push_back(startsItem ? items++ : -1);
  }
  // `line`, and `note` after it where both fit `width`, else on a line of its own under it.
  void addWithNote(const std::string& line, const std::string& note, bool startsItem, size_t width) {
    if (note.empty()) {
      add(line, startsItem);
    } else if (shownWidth(line) + 2 + shownWidth(note) <= width) {
      add(line + "  " + note, startsItem);
    } else {
      add(line, startsItem);
      add("        " + note, false);
    }
  }
  // The first `budget` lines, the last of them saying what is left out where not all fit.
  std::vector<std::string> cut(size_t budget) const {
    if (budget >= lines.size()) return lines;
    if (budget == 0) return {};
    std::vector<std::string> out(lines.begin(), lines.begin() + static_cast<ptrdiff_t>(budget - 1));
    int shownItems = 0;
    for (size_t i = 0; i + 1 < budget; ++i) shownItems += starts[i] >= 0;
    int more = items - shownItems;
    size_t moreLines = lines.size() - (budget - 1);
    out.push_back(more > 0 ? "... " + std::to_string(more) + " more " + noun
                           : "... " + std::to_string(moreLines) + " more lines");
    return out;
  }
};

Section nodeSection(const std::vector<NodeInfo>& nodes, Clock::time_point now, size_t width) {
  Section s;
  s.noun = "nodes";
  if (nodes.empty()) {
    s.add("no nodes in the pool", false);
    return s;
  }
  // GPU lines: index, state, two bars, temperature, power, lease. The bars take what the other
  // columns (50 characters with a lease, separators included) leave, 10 to 30 each.
  size_t room = width > 50 ? width - 50 : 0;
  size_t utilWidth = std::clamp<size_t>(room / 2, 10, 30);
  size_t memWidth = std::clamp<size_t>(room - std::min(room, utilWidth), 12, 30);
  std::vector<std::vector<std::string>> nodeRows, gpuRows;
  struct Row {
    bool node;
    size_t index;  // in nodeRows or gpuRows
    std::string note;
  };
  std::vector<Row> order;
  gpuRows.push_back({"  GPU", "STATE", "UTIL", "MEMORY GiB", "TEMP", "POWER", "LEASE"});
  for (const NodeInfo& n : nodes) {
    GpuCounts c = countGpus(n);
    // "8 GPUs: 5 free, 2 leased, 1 failed": the states it has.
    std::string gpus = std::to_string(n.gpus.size()) + " GPUs:";
    const char* sep = " ";
    for (auto [count, word] :
         {std::pair{c.free, "free"}, std::pair{c.leased, "leased"}, std::pair{c.failed, "failed"},
          std::pair{c.foreign, "foreign"}, std::pair{c.mig, "in MIG mode"}})
      if (count > 0) gpus += std::exchange(sep, ", ") + std::to_string(count) + " " + word;
    std::string heartbeat = n.agent.empty()    ? ""
                            : n.last_heartbeat ? "seen " + heartbeatText(n, now)
                                               : "not seen yet";
    std::string agent = n.agent.starts_with("poold-agent ") ? "agent " + n.agent.substr(12) : agentText(n);
    order.push_back({true, nodeRows.size(), ""});
    nodeRows.push_back({n.name, nodeStateText(n), agent, heartbeat, gpus});
    for (const GpuInfo& g : n.gpus) {
      if (!gpuShown(n, g)) continue;
      order.push_back({false, gpuRows.size(), gpuNote(g, now)});
      gpuRows.push_back({"  " + std::to_string(g.index), toString(g.state),
                         bar(g.utilization, utilWidth, percent(g.utilization)),
                         bar(memoryFraction(g), memWidth, memoryText(g, true)), rounded(g.temperature_c, "C"),
                         rounded(g.power_w, "W"), orDash(g.lease)});
    }
  }
  std::vector<std::string> nodeLines = alignColumns(nodeRows), gpuLines = alignColumns(gpuRows);
  if (gpuRows.size() > 1) s.add(gpuLines[0], false);
  for (const Row& r : order) {
    if (r.node)
      s.add(nodeLines[r.index], true);
    else
      s.addWithNote(gpuLines[r.index], r.note, false, width);
  }
  return s;
}

Section leaseSection(const std::vector<Lease>& leases, Clock::time_point now, size_t width) {
  Section s;
  s.noun = "leases";
  if (leases.empty()) {
    s.add("no leases", false);
    return s;
  }
  std::vector<std::vector<std::string>> rows{{"LEASE", "OWNER", "JOB", "GPUS", "AGE", "IDLE", "NODES"}};
  for (const Lease& l : leases)
    rows.push_back({l.id, l.owner, orDash(l.job_name), std::to_string(l.gpus.size()),
                    formatElapsed(since(l.created, now)), idleText(l, now), formatGpus(l.gpus)});
  std::vector<std::string> lines = alignColumns(rows);
  s.add(lines[0], false);
  for (size_t i = 1; i < lines.size(); ++i)
    s.addWithNote(lines[i], leaseNote(leases[i - 1], now), true, width);
  return s;
}

Section queueSection(const std::vector<QueueInfo>& queue, Clock::time_point now) {
  Section s;
  s.noun = "queued";
  if (queue.empty()) {
    s.add("queue empty", false);
    return s;
  }
  std::vector<std::vector<std::string>> rows{
      {"POS", "TICKET", "OWNER", "JOB", "GPUS", "PRIO", "WAITED", "START", "REASON"}};
  for (const QueueInfo& q : queue)
    rows.push_back({std::to_string(q.position), std::to_string(q.ticket), q.owner, orDash(q.job_name),
                    std::to_string(q.gpus), std::to_string(q.priority), formatElapsed(since(q.enqueued, now)),
                    q.planned_start ? formatLocalTime(*q.planned_start, now) : "-", orDash(q.reason)});
  std::vector<std::string> lines = alignColumns(rows);
  for (size_t i = 0; i < lines.size(); ++i) s.add(lines[i], i > 0);
  return s;
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

// The header's parts, packed into at most two lines of `width` (a part that does not fit a line
// of its own is cut).
std::vector<std::string> headerLines(const TopView& view, Clock::time_point now, size_t width) {
  // In the order they matter: what is cut is the pool's name (the user named it) and the hint.
  std::vector<std::string> parts{formatLocalTime(now, now)};
  if (view.snapshot) {
    // Each node in its administrator's state, and those whose agent went quiet counted again as
    // unreachable: as `poolctl status` counts them.
    int up = 0, unreachable = 0, draining = 0, down = 0;
    for (const NodeInfo& n : view.snapshot->nodes) {
      (n.state == NodeState::kUp ? up : n.state == NodeState::kDraining ? draining : down)++;
      if (n.unreachable) ++unreachable;
    }
    std::string nodes =
        "nodes " + std::to_string(up) + " up, " + std::to_string(unreachable) + " unreachable";
    if (draining > 0) nodes += ", " + std::to_string(draining) + " draining";
    if (down > 0) nodes += ", " + std::to_string(down) + " down";
    const PoolStatus& st = view.snapshot->status;
    parts[0] += "  " + nodes;
    parts.push_back(
        "GPUs " + std::to_string(st.gpus_free) + " free, " + std::to_string(st.gpus_leased) + " leased, " +
        std::to_string(st.gpus_failed) + " failed, " + std::to_string(st.gpus_foreign) + " foreign" +
        (st.gpus_mig > 0 ? ", " + std::to_string(st.gpus_mig) + " in MIG mode" : "") +
        (st.gpus_unreachable > 0 ? "; " + std::to_string(st.gpus_unreachable) + " unreachable" : ""));
    if (const std::string mig = migText(st); !mig.empty()) parts.push_back(mig.substr(0, mig.size() - 2));
    if (const std::string mps = mpsText(st); !mps.empty()) parts.push_back(mps.substr(0, mps.size() - 2));
    parts.push_back("leases " + std::to_string(st.leases) + ", queue " + std::to_string(st.queued));
  }
  parts.push_back(view.pool + (view.interactive
                                   ? " (every " + std::to_string(view.interval.count()) + "s, q quits)"
                                   : ""));
  // Each part on the first line it fits; on the second where it fits none (cut there).
  std::vector<std::string> lines;
  for (const std::string& part : parts) {
    auto fits = std::find_if(lines.begin(), lines.end(), [&](const std::string& line) {
      return shownWidth(line) + 3 + shownWidth(part) <= width;
    });
    if (fits != lines.end())
      *fits += " | " + part;
    else if (lines.size() < 2)
      lines.push_back(part);
    else
      lines.back() += " | " + part;
  }
  if (!view.error.empty()) {
    std::string error = "ERROR " + view.error;
    if (view.interactive) {
      error += " (trying again every " + std::to_string(view.interval.count()) + "s";
      error += view.snapshot ? "; below: what it said at " + formatLocalTime(view.read_at, now) + ")" : ")";
    }
    lines.push_back(error);
  } else if (!view.snapshot) {
    lines.push_back("reading the pool ...");
  }
  return lines;
}

}  // namespace

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

std::vector<std::string> nodeTable(const std::vector<NodeInfo>& nodes, Clock::time_point now) {
  std::vector<std::vector<std::string>> nodeRows{
      {"NODE", "STATE", "SWITCH", "FABRIC", "AGENT", "HEARTBEAT", "GPUS (free/leased/failed/foreign)"}};
  std::vector<std::vector<std::string>> gpuRows{
      {"  GPU", "STATE", "UTIL", "MEM GiB", "TEMP", "POWER", "LEASE", "NOTE"}};
  std::vector<std::pair<bool, size_t>> order;
  for (const NodeInfo& n : nodes) {
    GpuCounts c = countGpus(n);
    order.push_back({true, nodeRows.size()});
    nodeRows.push_back({n.name, nodeStateText(n), orDash(n.switch_name), orDash(n.fabric), agentText(n),
                        heartbeatText(n, now),
                        std::to_string(n.gpus.size()) + " (" + std::to_string(c.free) + "/" +
                            std::to_string(c.leased) + "/" + std::to_string(c.failed) + "/" +
                            std::to_string(c.foreign) + ")"});
    for (const GpuInfo& g : n.gpus) {
      if (!gpuShown(n, g)) continue;
      order.push_back({false, gpuRows.size()});
      gpuRows.push_back({"  " + std::to_string(g.index), toString(g.state), percent(g.utilization),
                         memoryText(g, false), rounded(g.temperature_c, "C"), rounded(g.power_w, "W"),
                         orDash(g.lease), gpuNote(g, now)});
      // Its MIG instances, as GPU/GPU-instance.compute-instance (nvidia-smi's GI and CI ids).
      for (const MigInstanceInfo& m : g.mig_instances) {
        order.push_back({false, gpuRows.size()});
        gpuRows.push_back({"   " + std::to_string(g.index) + "/" + std::to_string(m.gpu_instance) + "." +
                               std::to_string(m.compute_instance),
                           toString(m.state), "-", gib(m.memory_bytes), "-", "-", orDash(m.lease),
                           m.profile + " " + m.uuid});
      }
      // Its MPS shares, one line each: the share's SMs and memory.
      for (const GpuInfo::Share& sh : g.shares) {
        order.push_back({false, gpuRows.size()});
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
  for (const auto& [isNode, i] : order) out.push_back(isNode ? nodeLines[i] : gpuLines[i]);
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

std::vector<std::string> renderTopFrame(const TopView& view, Clock::time_point now, int width, int height) {
  const size_t w = static_cast<size_t>(std::max(width, 1)), h = static_cast<size_t>(std::max(height, 1));
  std::vector<std::string> frame = headerLines(view, now, w);
  if (frame.size() > h) frame.resize(h);
  if (view.snapshot) {
    Section sections[3] = {nodeSection(view.snapshot->nodes, now, w),
                           leaseSection(view.snapshot->leases, now, w),
                           queueSection(view.snapshot->queue, now)};
    // The nodes take what the leases and the queue leave; these get up to a quarter of the room
    // each (at least 3 lines: the column names and two rows) while the nodes need more, and what
    // the nodes leave over.
    const size_t room = h - frame.size();
    size_t need[3], budget[3];
    for (int i = 0; i < 3; ++i) need[i] = sections[i].lines.size();
    size_t share = std::max<size_t>(3, room / 4);
    budget[1] = std::min(need[1], share);
    budget[2] = std::min(need[2], share);
    if (budget[1] + budget[2] > room) {
      budget[1] = std::min(budget[1], room);
      budget[2] = std::min(budget[2], room - budget[1]);
    }
    budget[0] = std::min(need[0], room - budget[1] - budget[2]);
    if (budget[0] < std::min<size_t>(need[0], 2)) {  // a tiny terminal: the nodes first
      budget[0] = std::min(need[0], room);
      budget[1] = std::min(need[1], room - budget[0]);
      budget[2] = std::min(need[2], room - budget[0] - budget[1]);
    }
    for (int i = 0; i < 3; ++i) {
      size_t left = room - budget[0] - budget[1] - budget[2];
      budget[i] += std::min(left, need[i] - budget[i]);
    }
    for (int i = 0; i < 3; ++i) {
      std::vector<std::string> lines = sections[i].cut(budget[i]);
      frame.insert(frame.end(), lines.begin(), lines.end());
    }
  }
  for (std::string& line : frame) line = rightTrimmed(fitWidth(line, w));
  return frame;
}

TopOptions parseTopOptions(const std::vector<std::string>& args) {
  TopOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--once") {
      o.once = true;
    } else if (args[i] == "--interval") {
      if (i + 1 >= args.size()) throw badInput(args[i] + " needs a value (SECONDS, 1 to 3600)");
      o.interval = seconds(topo::parseOption<int64_t>("--interval", args[++i], 1, kMaxIntervalSeconds));
    } else {
      throw badInput("top: unknown option '" + topo::printable(args[i]) +
                     "' (use --interval SECONDS, --once)");
    }
  }
  return o;
}

// --- drawing in a terminal

namespace {

// A positive number from the environment ($COLUMNS, $LINES), else 0.
int fromEnvironment(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  try {
    return topo::parseOption<int>(name, v, 1, 10000);
  } catch (const Error&) {
    return 0;
  }
}

// The terminal's size (TIOCGWINSZ on stdout), else $COLUMNS x $LINES, else 80x24.
std::pair<int, int> screenSize() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0)
    return {ws.ws_col, ws.ws_row};
  int cols = fromEnvironment("COLUMNS"), rows = fromEnvironment("LINES");
  return {cols > 0 ? cols : 80, rows > 0 ? rows : 24};
}

TopSnapshot readSnapshot(PoolControl& pool) {
  TopSnapshot s;
  s.status = pool.status();
  s.nodes = pool.nodes();
  s.leases = pool.leases();
  s.queue = pool.queue();
  return s;
}

void writeAll(const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(STDOUT_FILENO, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone: nothing to draw on
    done += static_cast<size_t>(n);
  }
}

// The signals top acts on, noted by the handler and written to a pipe that wakes the loop.
int g_wake[2] = {-1, -1};
volatile sig_atomic_t g_quit = 0, g_resized = 0, g_suspend = 0, g_resumed = 0;

void onSignal(int sig) {
  int saved = errno;
  if (sig == SIGWINCH)
    g_resized = 1;
  else if (sig == SIGTSTP)
    g_suspend = 1;
  else if (sig == SIGCONT)
    g_resumed = 1;
  else
    g_quit = 1;
  char c = 's';
  [[maybe_unused]] ssize_t n = ::write(g_wake[1], &c, 1);
  errno = saved;
}

// The handlers while top runs; the previous ones come back when it goes. A signal the process was
// started ignoring (nohup) stays ignored.
class TopSignals {
 public:
  TopSignals() {
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      sigaction(kSignals[i], nullptr, &previous_[i]);
      if (previous_[i].sa_handler == SIG_IGN && kSignals[i] != SIGWINCH && kSignals[i] != SIGCONT) continue;
      struct sigaction sa {};
      sa.sa_handler = onSignal;
      sigemptyset(&sa.sa_mask);
      sigaction(kSignals[i], &sa, nullptr);  // no SA_RESTART: poll() returns at once
    }
  }
  ~TopSignals() {
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  }
  TopSignals(const TopSignals&) = delete;
  TopSignals& operator=(const TopSignals&) = delete;

  // Ctrl-Z: stops the process as SIGTSTP would have (the caller restored the terminal first).
  static void stopHere() {
    struct sigaction dfl {
    }, ours{};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGTSTP, &dfl, &ours);
    raise(SIGTSTP);  // returns once the job is continued
    sigaction(SIGTSTP, &ours, nullptr);
  }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP, SIGCONT};
  struct sigaction previous_[std::size(kSignals)]{};
};

// The terminal while top draws: stdin without echo or line editing (keys come one at a time; ^C
// still sends SIGINT), the alternate screen, the cursor hidden. Left as it was found by leave() and
// the destructor, whichever way top ends.
class TopTerminal {
 public:
  TopTerminal() : stdin_tty_(isatty(STDIN_FILENO) == 1) {
    if (stdin_tty_ && tcgetattr(STDIN_FILENO, &saved_) != 0) stdin_tty_ = false;
    enter();
  }
  ~TopTerminal() { leave(); }
  TopTerminal(const TopTerminal&) = delete;
  TopTerminal& operator=(const TopTerminal&) = delete;

  void enter() {
    if (entered_) return;
    if (stdin_tty_) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    writeAll("\x1b[?1049h\x1b[?25l");
    entered_ = true;
  }
  void leave() {
    if (!entered_) return;
    writeAll("\x1b[?25h\x1b[?1049l");
    if (stdin_tty_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    entered_ = false;
  }
  bool keys() const { return stdin_tty_; }

 private:
  bool stdin_tty_;
  termios saved_{};
  bool entered_ = false;
};

// Draws `lines` from the top left. `full`: clears the screen first (the first frame, a resize);
// otherwise each line is cleared to its end, and what is below the frame.
void draw(const std::vector<std::string>& lines, int width, int height, bool full) {
  std::string out = full ? "\x1b[H\x1b[2J" : "\x1b[H";
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\r\n";
    out += lines[i];
    // A line of the full width leaves the cursor on its last character, which \x1b[K would clear.
    if (shownWidth(lines[i]) < static_cast<size_t>(width)) out += "\x1b[K";
  }
  if (lines.size() < static_cast<size_t>(height)) out += "\r\n\x1b[J";
  writeAll(out);
}

// What the reader thread hands the drawing loop.
struct Refresh {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool reading = false;
  bool fresh = false;
  std::optional<TopSnapshot> snapshot;
  Clock::time_point read_at;
  std::string error;
};

void readLoop(PoolControl& pool, Refresh& r, seconds interval) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // the signals are the drawing thread's
  std::unique_lock<std::mutex> lock(r.mu);
  while (!r.stop) {
    r.reading = true;
    lock.unlock();
    std::optional<TopSnapshot> snapshot;
    std::string error;
    try {
      snapshot = readSnapshot(pool);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    r.reading = false;
    if (snapshot) {
      r.snapshot = std::move(snapshot);
      r.read_at = Clock::now();
    }
    r.error = error;
    r.fresh = true;
    char c = 'd';
    [[maybe_unused]] ssize_t n = ::write(g_wake[1], &c, 1);
    r.cv.wait_for(lock, interval, [&] { return r.stop; });
  }
}

int liveTop(const TopOptions& options, PoolControl& pool) {
  if (pipe(g_wake) != 0)
    throw Error(ErrorCode::kIo, "poolctl top: cannot make a pipe: " + std::string(strerror(errno)));
  for (int fd : g_wake) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  g_quit = 0;
  g_resized = 0;
  g_suspend = 0;
  g_resumed = 0;
  Refresh refresh;
  TopView view;
  view.pool = pool.describe();
  view.interval = options.interval;
  view.interactive = true;
  bool abandoned = false;
  {
    TopSignals signals;
    TopTerminal terminal;
    std::thread reader(readLoop, std::ref(pool), std::ref(refresh), options.interval);
    bool full = true;
    while (g_quit == 0) {
      {
        std::lock_guard<std::mutex> lock(refresh.mu);
        if (refresh.fresh) {
          view.snapshot = refresh.snapshot;
          view.read_at = refresh.read_at;
          view.error = refresh.error;
          refresh.fresh = false;
        }
      }
      auto [width, height] = screenSize();
      draw(renderTopFrame(view, Clock::now(), width, height), width, height, full);
      full = false;
      // Until the reader has news, a key, or a signal; the clock in the header moves each second.
      pollfd fds[2] = {{g_wake[0], POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      int ready = poll(fds, terminal.keys() ? 2 : 1, 1000);
      if (ready > 0 && (fds[0].revents & POLLIN)) {
        char buf[64];
        while (::read(g_wake[0], buf, sizeof buf) > 0) {
        }
      }
      if (ready > 0 && terminal.keys() && (fds[1].revents & (POLLIN | POLLHUP))) {
        char buf[64];
        ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0 && (fds[1].revents & POLLHUP)) break;  // the terminal hung up
        for (ssize_t i = 0; i < n; ++i)
          if (buf[i] == 'q' || buf[i] == 'Q') g_quit = 1;
      }
      if (g_suspend != 0) {
        g_suspend = 0;
        terminal.leave();
        TopSignals::stopHere();
        terminal.enter();
        full = true;
      }
      if (g_resized != 0 || g_resumed != 0) {
        g_resized = 0;
        g_resumed = 0;
        full = true;
      }
    }
    {
      std::lock_guard<std::mutex> lock(refresh.mu);
      refresh.stop = true;
    }
    refresh.cv.notify_all();
    // A read in progress from a poold that does not answer may take its whole timeout: the
    // terminal is restored now and the process ends without waiting for it.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    for (;;) {
      std::lock_guard<std::mutex> lock(refresh.mu);
      if (!refresh.reading || std::chrono::steady_clock::now() >= deadline) {
        abandoned = refresh.reading;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (abandoned)
      reader.detach();
    else
      reader.join();
  }
  if (abandoned) {
    std::cout.flush();
    std::_Exit(0);
  }
  for (int& fd : g_wake) {
    close(fd);
    fd = -1;
  }
  return 0;
}

}  // namespace

int topCommand(const TopOptions& options, PoolControl& pool) {
  if (!options.once && isatty(STDOUT_FILENO) == 1) return liveTop(options, pool);
  TopView view;
  view.pool = pool.describe();
  view.interval = options.interval;
  try {
    view.snapshot = readSnapshot(pool);
    view.read_at = Clock::now();
  } catch (const std::exception& e) {
    view.error = e.what();
  }
  auto [width, height] = screenSize();
  for (const std::string& line : renderTopFrame(view, Clock::now(), width, height)) std::cout << line << "\n";
  std::cout << std::flush;
  if (view.error.empty()) return 0;
  std::cerr << "poolctl: error: " << view.error << "\n";
  return 1;
}

}  // namespace poolrun::pool
