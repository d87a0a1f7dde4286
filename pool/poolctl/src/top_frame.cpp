// `poolctl top`'s frame (poolctl_top.hpp): the header, nodes, leases and queue, rendered from what
// the pool said to a width and a height; and top's options.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/options.hpp"

#include "poolrun/pool/poolctl_top.hpp"
#include "view_text.hpp"

namespace poolrun::pool {
namespace {

using namespace view;

constexpr int64_t kMaxIntervalSeconds = 3600;

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
      o.interval = seconds(common::parseOption<int64_t>("--interval", args[++i], 1, kMaxIntervalSeconds));
    } else {
      throw badInput("top: unknown option '" + common::printable(args[i]) +
                     "' (use --interval SECONDS, --once)");
    }
  }
  return o;
}

}  // namespace poolrun::pool
