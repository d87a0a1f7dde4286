#pragma once

// What poolctl prints of the live pool: the text of `poolctl status`, `nodes` and `leases`, and
// the frames of `poolctl top`. Every function here is pure (no terminal, no clock, no pool), so
// that tests check the text; the loop that reads the pool and draws in a terminal is topCommand.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/control.hpp"

namespace poolrun::pool {

using Clock = std::chrono::system_clock;

// "http://h:7450: 3 nodes (2 up, 0 draining, 1 down; 1 unreachable), 24 GPUs (13 free, 8 leased,
// 1 failed, 1 foreign; 8 on unreachable nodes), 2 leases, 1 queued". Unreachable nodes are also
// counted in their administrator's state, their GPUs in their own.
std::string statusLine(const std::string& pool, const PoolStatus& status);

// `poolctl nodes`: a line per node (state, switch, fabric, agent, heartbeat age, GPU counts) and
// under it a line per GPU (state, utilisation, memory, temperature, power, lease, and why it failed
// or the processes that make it foreign). A node without an agent has no readings: only its GPUs
// that are leased or failed get a line. Lines end without white space.
std::vector<std::string> nodeTable(const std::vector<NodeInfo>& nodes, Clock::time_point now);

// `poolctl leases`: a line per lease (id, job, owner, GPUs, age, idle time, expiry, end, GPUs) with
// a note where the pool warns of a reclaim, finds a node at risk, or the lease is exempt.
std::vector<std::string> leaseTable(const std::vector<Lease>& leases, Clock::time_point now);

// What one refresh of `poolctl top` read from the pool.
struct TopSnapshot {
  PoolStatus status;
  std::vector<NodeInfo> nodes;
  std::vector<Lease> leases;
  std::vector<QueueInfo> queue;
};

struct TopView {
  std::string pool;                     // PoolClient::describe()
  std::optional<TopSnapshot> snapshot;  // the last one read; nullopt before the first
  Clock::time_point read_at;            // when `snapshot` was read
  std::string error;                    // why the last refresh failed; empty where it did not
  std::chrono::seconds interval{2};     // the refresh interval, shown in the header
  bool interactive = false;             // a terminal: the header says how to quit
};

// One frame of `poolctl top`, `width` columns by at most `height` lines, each line cut at `width`
// characters (never wrapped) and free of control characters: the header (pool, time, nodes up and
// unreachable, GPUs free, leased, failed and foreign, leases, queue), the nodes and their GPUs
// with utilisation and memory bars, the leases with owner, GPUs, age and idle time, and the queue
// with positions, waits and reasons. Where the sections do not fit, each ends with "... N more".
// Widths and heights under 1 are taken as 1.
std::vector<std::string> renderTopFrame(const TopView& view, Clock::time_point now, int width, int height);

// `text` cut to `width` characters (UTF-8 code points), with control characters, C1 controls and
// bytes that are not UTF-8 shown as '?': safe to write to a terminal.
std::string fitWidth(const std::string& text, size_t width);

// `poolctl top [--interval SECONDS] [--once]`: `args` are what follows `top`. Throws
// poolrun::Error (kBadInput) naming a bad option or value (--interval: 1 to 3600 whole seconds).
struct TopOptions {
  std::chrono::seconds interval{2};
  bool once = false;
};
TopOptions parseTopOptions(const std::vector<std::string>& args);

// Reads the pool every interval. On a terminal: draws in place (the alternate screen, the cursor
// hidden, stdin without echo or line editing) until `q`, SIGINT, SIGTERM or SIGHUP (exit status 0),
// restoring the terminal on every way out (Ctrl-Z too, until the job is resumed); a refresh that
// fails is shown in the header and tried again at the next interval. Otherwise (stdout not a
// terminal), or with --once: one frame without escapes, of the terminal's size, else $COLUMNS x
// $LINES, else 80x24; exit status 0, or 1 after saying why on stderr where the pool could not be
// read.
int topCommand(const TopOptions& options, PoolControl& pool);

}  // namespace poolrun::pool
