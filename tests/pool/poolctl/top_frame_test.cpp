// poolctl's views of the live pool without a terminal or a pool
// (pool/poolctl/include/poolrun/pool/poolctl_top.hpp): the frames of `poolctl top` on a compact pool (an
// unreachable node, a failed GPU with its reason, a foreign GPU with its processes, an idle lease warned of
// its reclaim, a queued request) at 80 and 200 columns and on a 20x5 terminal, cut sections, the error
// header, text from the pool that would move the cursor; and the tables of `poolctl nodes`, `leases` and
// `status`.

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>

#include "poolrun/pool/poolctl_top.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// 2026-12-01T12:00:00Z; the tests run in UTC so that local times read the same everywhere.
Clock::time_point noon() {
  setenv("TZ", "UTC", 1);
  tzset();
  return Clock::time_point(seconds(1796126400));
}

GpuInfo gpu(size_t index, GpuState state, std::string lease = "") {
  GpuInfo g;
  g.index = index;
  g.state = state;
  g.lease = std::move(lease);
  g.memory_bytes = 80 * kGiB;
  return g;
}

GpuInfo withReadings(GpuInfo g, double util, uint64_t usedGiB, double temp, double power) {
  g.utilization = util;
  g.memory_used_bytes = usedGiB * kGiB;
  g.memory_total_bytes = 80 * kGiB;
  g.temperature_c = temp;
  g.power_w = power;
  return g;
}

NodeInfo node(std::string name, std::string agent, std::optional<Clock::time_point> heartbeat,
              std::vector<GpuInfo> gpus) {
  NodeInfo n;
  n.name = std::move(name);
  n.levels.switch_name = "leaf1";
  n.fabric = "ib";
  n.agent = std::move(agent);
  n.last_heartbeat = heartbeat;
  n.gpus = std::move(gpus);
  return n;
}

// n01: an agent, GPU 0 leased and busy, GPU 1 failed by XID 79. n02: its agent gone quiet, GPU 0
// foreign (two processes of no lease), GPU 1 leased and idle. n03: no agent, two free GPUs.
TopSnapshot compactPool(Clock::time_point now) {
  TopSnapshot s;
  GpuInfo failed = gpu(1, GpuState::kFailed);
  failed.failed_reason = "XID 79 (fallen off the bus)";
  failed.failed_at = now - minutes(1);
  GpuInfo foreign = withReadings(gpu(0, GpuState::kForeign), 0.35, 10, 50, 200);
  foreign.foreign_processes = {{4242, kGiB * 19 / 2}, {4243, 0}};
  s.nodes = {node("n01", "poold-agent 0.1.0", now - seconds(3),
                  {withReadings(gpu(0, GpuState::kLeased, "L00000000000000a1"), 0.87, 61, 64, 412), failed}),
             node("n02", "poold-agent 0.1.0", now - seconds(65),
                  {foreign, withReadings(gpu(1, GpuState::kLeased, "L00000000000000a1"), 0.01, 2, 35, 70)}),
             node("n03", "", std::nullopt, {gpu(0, GpuState::kFree), gpu(1, GpuState::kFree)})};
  s.nodes[1].unreachable = true;
  Lease l;
  l.id = "L00000000000000a1";
  l.owner = "alice";
  l.job_name = "train";
  l.gpus = {{"n01", 0}, {"n02", 1}};
  l.created = now - minutes(50);
  l.expires = now + seconds(40);
  l.idle_since = now - minutes(35);
  l.reclaim_at = now + minutes(5);
  l.at_risk_nodes = {"n02"};
  s.leases = {l};
  QueueInfo q;
  q.ticket = 7;
  q.position = 1;
  q.owner = "bob";
  q.job_name = "eval";
  q.gpus = 4;
  q.enqueued = now - seconds(303);
  q.reason = "needs 4 GPUs, 2 free";
  s.queue = {q};
  s.status.nodes_up = 3;
  s.status.nodes_unreachable = 1;
  s.status.gpus_free = 2;
  s.status.gpus_leased = 2;
  s.status.gpus_failed = 1;
  s.status.gpus_foreign = 1;
  s.status.gpus_unreachable = 2;
  s.status.leases = 1;
  s.status.queued = 1;
  return s;
}

TopView view(Clock::time_point now) {
  TopView v;
  v.pool = "http://127.0.0.1:7450";
  v.snapshot = compactPool(now);
  v.read_at = now;
  return v;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// The line that contains every one of `parts`, or "" where none does.
std::string lineWith(const std::vector<std::string>& lines, std::initializer_list<std::string> parts) {
  for (const std::string& l : lines) {
    bool all = true;
    for (const std::string& p : parts) all = all && l.find(p) != std::string::npos;
    if (all) return l;
  }
  return "";
}

void expectFits(const std::vector<std::string>& frame, size_t width, size_t height) {
  EXPECT_LE(frame.size(), height) << joined(frame);
  for (const std::string& l : frame) {
    EXPECT_LE(l.size(), width) << "'" << l << "'";
    for (char c : l) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "'" << l << "'";
  }
}

TEST(TopFrame, ShowsTheCompactPoolAt80Columns) {
  const Clock::time_point now = noon();
  std::vector<std::string> frame = renderTopFrame(view(now), now, 80, 40);
  expectFits(frame, 80, 40);
  const std::string text = joined(frame);
  // Each part of the header on the first line it fits.
  EXPECT_EQ(frame[0], "12:00:00  nodes 3 up, 1 unreachable | leases 1, queue 1 | http://127.0.0.1:7450")
      << text;
  EXPECT_EQ(frame[1], "GPUs 2 free, 2 leased, 1 failed, 1 foreign; 2 unreachable") << text;
  EXPECT_EQ(lineWith(frame, {"n01"}),
            "n01  up           agent 0.1.0  seen 0:03 ago  2 GPUs: 1 leased, 1 failed")
      << text;
  EXPECT_EQ(lineWith(frame, {"n02"}),
            "n02  unreachable  agent 0.1.0  seen 1:05 ago  2 GPUs: 1 leased, 1 foreign")
      << text;
  EXPECT_NE(lineWith(frame, {"n03", "no agent", "2 GPUs: 2 free"}), "") << text;
  // Bars of 15 characters at 80 columns, the reading written over their right end.
  EXPECT_NE(
      lineWith(frame, {"  0    leased   [##########87%]  [########61/80]  64C   412W   L00000000000000a1"}),
      "")
      << text;
  EXPECT_NE(
      lineWith(frame, {"  1    leased   [...........1%]  [.......2.0/80]  35C   70W    L00000000000000a1"}),
      "")
      << text;
  // Notes that do not fit after their row come on a line of their own under it.
  EXPECT_NE(lineWith(frame, {"        XID 79 (fallen off the bus) at 11:59:00"}), "") << text;
  EXPECT_NE(lineWith(frame, {"        pids 4242 (9.5 GiB), 4243 (memory not known)"}), "") << text;
  EXPECT_NE(lineWith(frame, {"L00000000000000a1", "alice", "train", "2", "50:00", "35:00", "n01:0 n02:1"}),
            "")
      << text;
  EXPECT_NE(lineWith(frame, {"idle: reclaimed at 12:05:00 (in 5:00)", "at risk: n02 unreachable"}), "")
      << text;
  EXPECT_NE(lineWith(frame, {"1", "7", "bob", "eval", "4", "5:03", "needs 4 GPUs, 2 free"}), "") << text;
  // The free GPUs of a node without an agent have nothing to show.
  EXPECT_EQ(text.find("free    -"), std::string::npos) << text;
}

TEST(TopFrame, ShowsEverythingOnOneLineEachAt200Columns) {
  const Clock::time_point now = noon();
  TopView v = view(now);
  v.interactive = true;
  std::vector<std::string> frame = renderTopFrame(v, now, 200, 60);
  expectFits(frame, 200, 60);
  const std::string text = joined(frame);
  EXPECT_EQ(
      frame[0],
      "12:00:00  nodes 3 up, 1 unreachable | GPUs 2 free, 2 leased, 1 failed, 1 foreign; 2 unreachable | "
      "leases 1, queue 1 | http://127.0.0.1:7450 (every 2s, q quits)")
      << text;
  EXPECT_NE(lineWith(frame, {"failed", "XID 79 (fallen off the bus) at 11:59:00"}), "") << text;
  EXPECT_NE(lineWith(frame, {"foreign", "[#########", "35%]", "pids 4242 (9.5 GiB)"}), "") << text;
  EXPECT_NE(lineWith(frame, {"L00000000000000a1", "n01:0 n02:1", "idle: reclaimed at 12:05:00"}), "") << text;
  // 30-character bars, the widest.
  EXPECT_NE(lineWith(frame, {"[" + std::string(24, '#') + ".87%]"}), "") << text;
}

// A drained node whose agent went quiet is draining and unreachable, as poolctl status counts it.
TEST(TopFrame, CountsEachNodeInItsAdministratorsStateAndTheUnreachableAgain) {
  const Clock::time_point now = noon();
  TopView v = view(now);
  v.snapshot->nodes[1].state = NodeState::kDraining;
  v.snapshot->nodes[2].state = NodeState::kDown;
  std::vector<std::string> frame = renderTopFrame(v, now, 200, 40);
  EXPECT_EQ(frame[0].rfind("12:00:00  nodes 1 up, 1 unreachable, 1 draining, 1 down | ", 0), 0u)
      << joined(frame);
}

TEST(TopFrame, FitsATinyTerminal) {
  const Clock::time_point now = noon();
  std::vector<std::string> frame = renderTopFrame(view(now), now, 20, 5);
  expectFits(frame, 20, 5);
  ASSERT_EQ(frame.size(), 5u) << joined(frame);
  EXPECT_EQ(frame[0], "12:00:00  nodes 3 up") << joined(frame);
  EXPECT_NE(lineWith(frame, {"... "}), "") << joined(frame);
  expectFits(renderTopFrame(view(now), now, 0, 0), 1, 1);
}

TEST(TopFrame, CutsTheNodesOfALargePoolAndKeepsLeasesAndQueue) {
  const Clock::time_point now = noon();
  TopView v = view(now);
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < 100; ++i) {
    std::vector<GpuInfo> gpus;
    for (size_t k = 0; k < 8; ++k) gpus.push_back(withReadings(gpu(k, GpuState::kFree), 0.0, 0, 30, 60));
    nodes.push_back(node("hgx" + std::to_string(100 + i), "poold-agent 0.1.0", now - seconds(2), gpus));
  }
  v.snapshot->nodes = nodes;
  std::vector<std::string> frame = renderTopFrame(v, now, 80, 24);
  expectFits(frame, 80, 24);
  EXPECT_EQ(frame.size(), 24u);
  const std::string text = joined(frame);
  EXPECT_NE(lineWith(frame, {"... ", "more nodes"}), "") << text;
  EXPECT_NE(lineWith(frame, {"LEASE", "OWNER", "IDLE"}), "") << text;
  EXPECT_NE(lineWith(frame, {"POS", "TICKET", "WAITED", "REASON"}), "") << text;
  EXPECT_NE(lineWith(frame, {"bob", "needs 4 GPUs"}), "") << text;
}

TEST(TopFrame, SaysWhyThePoolCouldNotBeRead) {
  const Clock::time_point now = noon();
  TopView v = view(now);
  v.interactive = true;
  v.read_at = now - seconds(6);
  v.error = "cannot reach poold at http://127.0.0.1:7450 (connection refused)";
  std::vector<std::string> frame = renderTopFrame(v, now, 200, 40);
  EXPECT_NE(lineWith(frame, {"ERROR cannot reach poold at http://127.0.0.1:7450 (connection refused) (trying "
                             "again every 2s; below: what it said at 11:59:54)"}),
            "")
      << joined(frame);
  EXPECT_NE(lineWith(frame, {"n01"}), "");  // the last snapshot stays

  TopView none;
  none.pool = "http://127.0.0.1:7450";
  none.error = "cannot reach poold";
  frame = renderTopFrame(none, now, 80, 24);
  ASSERT_EQ(frame.size(), 2u) << joined(frame);
  EXPECT_EQ(frame[1], "ERROR cannot reach poold");
}

TEST(TopFrame, ShowsNoControlCharactersFromThePool) {
  const Clock::time_point now = noon();
  TopView v = view(now);
  v.snapshot->leases[0].job_name =
      "a\x1b[2Jb\xc2\x9b"
      "c\xff";
  v.snapshot->nodes[0].gpus[1].failed_reason = "bad\r\nline";
  std::vector<std::string> frame = renderTopFrame(v, now, 200, 40);
  expectFits(frame, 200, 40);
  EXPECT_NE(lineWith(frame, {"a?[2Jb?c?"}), "") << joined(frame);
  EXPECT_NE(lineWith(frame, {"bad??line"}), "") << joined(frame);
  EXPECT_EQ(fitWidth("h\xc3\xa9llo", 3), "h\xc3\xa9l");  // cut by characters, not bytes
}

TEST(PoolctlTables, NodesShowStateAgentHeartbeatAndEveryGpuReading) {
  const Clock::time_point now = noon();
  std::vector<std::string> lines = nodeTable(compactPool(now).nodes, now);
  const std::string text = joined(lines);
  EXPECT_EQ(lines[0],
            "NODE  STATE        LEVELS      FABRIC  AGENT              HEARTBEAT  GPUS "
            "(free/leased/failed/foreign)")
      << text;
  EXPECT_EQ(lines[1], "  GPU  STATE    UTIL  MEM GiB    TEMP  POWER  LEASE              NOTE") << text;
  EXPECT_EQ(lines[2], "n01   up           leaf:leaf1  ib      poold-agent 0.1.0  0:03 ago   2 (0/1/1/0)")
      << text;
  EXPECT_EQ(lines[3], "  0    leased   87%   61.0/80.0  64C   412W   L00000000000000a1") << text;
  EXPECT_EQ(lines[4],
            "  1    failed   -     -/80.0     -     -      -                  XID 79 (fallen off the bus) at "
            "11:59:00")
      << text;
  EXPECT_EQ(lines[5], "n02   unreachable  leaf:leaf1  ib      poold-agent 0.1.0  1:05 ago   2 (0/1/0/1)")
      << text;
  EXPECT_EQ(lines[6],
            "  0    foreign  35%   10.0/80.0  50C   200W   -                  pids 4242 (9.5 GiB), 4243 "
            "(memory not known)")
      << text;
  EXPECT_EQ(lines[8], "n03   up           leaf:leaf1  ib      no agent           -          2 (2/0/0/0)")
      << text;
  EXPECT_EQ(lines.size(), 9u) << text;  // n03's free GPUs: no line
}

// A free GPU its agent's NVML no longer lists: shown with the agent's words, though nothing holds it.
TEST(PoolctlTables, AGpuNvmlNoLongerListsShowsItsError) {
  const Clock::time_point now = noon();
  GpuInfo lost = gpu(1, GpuState::kFree);
  lost.sample_error = "NVML does not list the GPU at 0000:53:00.0";
  std::vector<std::string> lines =
      nodeTable({node("n01", "poold-agent 0.1.0", now - seconds(3),
                      {withReadings(gpu(0, GpuState::kFree), 0, 1, 30, 60), lost})},
                now);
  ASSERT_EQ(lines.size(), 5u) << joined(lines);
  EXPECT_EQ(lines[4],
            "  1    free   -     -/80.0    -     -      -      NVML does not list the GPU at 0000:53:00.0")
      << joined(lines);
}

TEST(PoolctlTables, LeasesShowIdleTimeReclaimAndNodesAtRisk) {
  const Clock::time_point now = noon();
  std::vector<Lease> leases = compactPool(now).leases;
  Lease exempt = leases[0];
  exempt.id = "L00000000000000b2";
  exempt.idle_since.reset();
  exempt.reclaim_at.reset();
  exempt.at_risk_nodes.clear();
  exempt.no_reclaim = true;
  leases.push_back(exempt);
  std::vector<std::string> lines = leaseTable(leases, now);
  ASSERT_EQ(lines.size(), 3u) << joined(lines);
  EXPECT_EQ(lines[0], "LEASE              JOB    OWNER  GPUS  AGE    IDLE   EXPIRES  END  NODELIST     NOTE");
  EXPECT_EQ(
      lines[1],
      "L00000000000000a1  train  alice  2     50:00  35:00  0:40     -    n01:0 n02:1  idle: reclaimed at "
      "12:05:00 (in 5:00); at risk: n02 unreachable");
  EXPECT_EQ(
      lines[2],
      "L00000000000000b2  train  alice  2     50:00  -      0:40     -    n01:0 n02:1  never reclaimed");
}

TEST(PoolctlTables, StatusCountsForeignAndUnreachable) {
  EXPECT_EQ(
      statusLine("http://h:1", compactPool(noon()).status),
      "http://h:1: 3 nodes (3 up, 0 draining, 0 down; 1 unreachable), 6 GPUs (2 free, 2 leased, 1 failed, 1 "
      "foreign; 2 on unreachable nodes), 1 leases, 1 queued");
  PoolStatus withMig = compactPool(noon()).status;
  withMig.gpus_mig = 8;
  EXPECT_EQ(
      statusLine("http://h:1", withMig),
      "http://h:1: 3 nodes (3 up, 0 draining, 0 down; 1 unreachable), 14 GPUs (2 free, 2 leased, 1 failed, "
      "1 foreign, 8 in MIG mode; 2 on unreachable nodes), 1 leases, 1 queued");
}

TEST(PoolctlTop, RefusesBadIntervals) {
  EXPECT_EQ(parseTopOptions({}).interval, seconds(2));
  EXPECT_EQ(parseTopOptions({"--interval", "3600", "--once"}).interval, seconds(3600));
  for (const char* bad : {"0", "-1", "x", "1.5", "99999999999999999999", "3601", ""}) {
    try {
      parseTopOptions({"--interval", bad});
      ADD_FAILURE() << "--interval '" << bad << "' was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadInput);
      EXPECT_NE(std::string(e.what()).find("--interval"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("1 to 3600"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parseTopOptions({"--interval"}), Error);
  EXPECT_THROW(parseTopOptions({"--frobnicate"}), Error);
}

}  // namespace
}  // namespace poolrun::pool
