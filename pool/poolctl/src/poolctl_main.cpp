// poolctl: look at and administer a GPU pool (local, sim:FILE or a poold). See pool/README.md.

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "poolrun/common/http_connection.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "poolrun/pool/poolctl_top.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/request_options.hpp"
#include "poolrun/topo/names.hpp"
#include "poolrun/topo/nesting.hpp"
#include "poolrun/topo/options.hpp"
#include "poolrun/topo/regular_file.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/version.hpp"
#include "poolrun/pool/queue_wait.hpp"

namespace {

using namespace poolrun;
using namespace poolrun::pool;
using nlohmann::json;

constexpr const char* kUsage =
    "usage: poolctl [--pool URI] [--token-file FILE] [--json] COMMAND [ARGS]\n"
    "commands:\n"
    "  status | nodes | leases | queue     look at the pool\n"
    "  quota                               GPUs used against each quota (poold --quotas)\n"
    "  top [--interval SECONDS] [--once]   a live view of nodes, GPUs, leases and the queue; q quits\n"
    "  acquire -n N|MIN:MAX [--gpus-per-node K | --whole-nodes] [--ttl SECONDS] [--wait SECONDS]\n"
    "          [--max-duration SECONDS] [--priority P] [--job NAME] [--model TEXT]\n"
    "          [--min-memory-gib G] [--fabric ib|roce|tcp] [--label KEY=VALUE]... [--one-switch]\n"
    "          [--no-reclaim] [--preemptible] [--resize-interval SECONDS] [--mig PROFILE[+]]\n"
    "          [--share FRACTION] [--gpu-memory BYTES]\n"
    "  renew LEASE | release LEASE | shrink LEASE\n"
    "  register [--cluster FILE]           (admin) add nodes; without --cluster, probe this node\n"
    "  drain NODE | resume NODE            (admin) stop / restart new leases on a node\n"
    "  fail NODE:GPU | NODE                (admin) mark a GPU, or every GPU of a node, failed\n"
    "  mig NODE:GPU --profiles P,P... [--wait SECONDS]\n"
    "                                      (admin) split a GPU into MIG instances (docs/mig.md)\n"
    "  events [--since SEQ] [--follow]     poold's event log: grants, releases, expiries, nodes, GPUs\n"
    "options:\n"
    "  --pool URI        local (default, or $POOLRUN_POOL), sim:CLUSTER_FILE or http://HOST:PORT\n"
    "                    (poold replicas on etcd: http://A:PORT,http://B:PORT)\n"
    "  --token-file FILE the bearer token for http pools (else $POOLRUN_TOKEN)\n"
    "  --state DIR       state directory of local and sim: pools (else $POOLRUN_STATE_DIR)\n"
    "  --owner NAME, --role user|admin   identity in local and sim: pools (default $USER, admin)\n"
    "  --json            machine-readable output on stdout\n"
    "defaults: --ttl 60 (a lease not renewed within its ttl expires; poolrun renews every ttl/3),\n"
    "  --wait: without limit while the pool could ever satisfy the request, fail at once otherwise\n"
    "exit status: 0 done, 1 error, 2 bad input, 3 did not fit (within --wait, or never),\n"
    "  4 refused (401 unknown token, 403 not allowed), 5 lease gone (renew, shrink; release of a lease\n"
    "  not held says so and exits 0), 128+N interrupted by signal N while queued (the request is withdrawn)\n"
    "environment:\n"
    "  POOLRUN_POOL       the pool when --pool is not given\n"
    "  POOLRUN_TOKEN      the bearer token when --token-file is not given\n"
    "  POOLRUN_STATE_DIR  the state directory when --state is not given (else $XDG_STATE_HOME/poolrun,\n"
    "                     else $HOME/.local/state/poolrun)\n"
    "  USER               the owner in local and sim: pools when --owner is not given\n"
    "  POOLRUN_FIXTURES   where cluster files' shared/fixtures/ topologies are (sim:, register)\n"
    "  POOLRUN_PREEMPT_GRACE, POOLRUN_MIN_RUNTIME, POOLRUN_QUOTAS  local and sim: pools' preemption\n"
    "                     grace and minimum runtime (seconds) and quotas file (poold's --preempt-grace,\n"
    "                     --min-runtime, --quotas)\n"
    "`poolctl help COMMAND` or `poolctl COMMAND --help`: that command's help; `poolctl --version`.\n";

// `poolctl help COMMAND`, `poolctl COMMAND --help`. Options of every command: see kUsage.
const char* commandHelp(const std::string& command) {
  static const std::map<std::string, const char*> kHelp = {
      {"status",
       "usage: poolctl [--pool URI] [--json] status\n"
       "The pool in one line: nodes (up, draining, down; of them unreachable: their agent went quiet),\n"
       "GPUs (free, leased, failed, foreign: busy with processes of no lease; of them on unreachable\n"
       "nodes), leases, queued.\n"},
      {"nodes",
       "usage: poolctl [--pool URI] [--json] nodes\n"
       "Every node: its state (up, draining, down, unreachable), leaf switch, fabric, agent (or \"no\n"
       "agent\"), the age of its last heartbeat and its GPUs (free/leased/failed/foreign); under it a line\n"
       "per GPU: state, utilisation, memory used/total (GiB), temperature, power, lease, and why it\n"
       "failed (and when) or the processes of no lease that make it foreign. A node without an agent\n"
       "has no readings: only its leased and failed GPUs get a line.\n"},
      {"leases",
       "usage: poolctl [--pool URI] [--json] leases\n"
       "Every lease held: its id, job, owner, GPUs, age, idle time (where the pool finds its GPUs\n"
       "unused: poold --idle-after), expiry, end, and a note: when the pool reclaims it as idle (poold\n"
       "--reclaim-idle), the nodes at risk (unreachable), or that it is never reclaimed (--no-reclaim).\n"},
      {"queue",
       "usage: poolctl [--pool URI] [--json] queue\n"
       "The waiting requests in the order they will be served: position, ticket, GPUs, priority, owner,\n"
       "job.\n"},
      {"quota",
       "usage: poolctl [--pool URI] [--json] quota\n"
       "Each quota of the pool (poold --quotas, POOLRUN_QUOTAS for the embedded pools): the group or\n"
       "owner, its members, the GPUs guaranteed, its limit, the GPUs its owners hold, how many of those\n"
       "are borrowed beyond the guarantee (their youngest leases: preempted first when an owner within\n"
       "its guarantee needs them), and the GPUs its owners' waiting requests ask for.\n"},
      {"top",
       "usage: poolctl [--pool URI] top [--interval SECONDS] [--once]\n"
       "A live view, redrawn in place every interval: the pool, the time, nodes up and unreachable,\n"
       "GPUs free, leased, failed and foreign, leases and the queue's length; each node and its GPUs\n"
       "with utilisation and memory bars; the leases with owner, GPUs, age and idle time; the queue\n"
       "with positions, waits and reasons. Fits the terminal (lines are cut, not wrapped). q or Ctrl-C\n"
       "quits (exit 0). Where the pool cannot be read, the header says why and it tries again.\n"
       "With --once, or when stdout is not a terminal: one frame without escapes ($COLUMNS x $LINES,\n"
       "else 80x24), exit status 0, or 1 where the pool could not be read.\n"
       "  --interval SECONDS   between refreshes, 1 to 3600 (default 2)\n"
       "  --once               print one frame and exit\n"},
      {"acquire",
       "usage: poolctl [--pool URI] [--json] acquire -n N [options]\n"
       "Takes N GPUs (all or nothing) and prints the lease; queues while they are not free.\n"
       "  -n, --gpus N             GPUs to take\n"
       "  -n, --gpus MIN:MAX       an elastic lease: MIN GPUs (all or nothing), grown towards MAX while\n"
       "                           GPUs are free and nobody of equal or higher priority waits, shrunk\n"
       "                           back towards MIN for a request of higher priority\n"
       "  --resize-interval SECONDS  an elastic lease grows at most this often (default 600)\n"
       "  --gpus-per-node K        exactly K on each node\n"
       "  --whole-nodes            whole nodes only: every GPU of each node it takes\n"
       "  --ttl SECONDS            the lease expires unless renewed within SECONDS (default 60)\n"
       "  --wait SECONDS           give up queueing after SECONDS (default: while it could ever fit)\n"
       "  --max-duration SECONDS   the lease ends after SECONDS however it is renewed\n"
       "  --priority P             queue priority (higher first)\n"
       "  --job NAME               the job's name, shown in leases and queue\n"
       "  --model TEXT             only GPUs whose model contains TEXT\n"
       "  --mig PROFILE            N MIG instances of that profile (1g.10gb, 3g.40gb) instead of whole\n"
       "                           GPUs, packed onto as few GPUs as possible; PROFILE+: that or larger\n"
       "  --share FRACTION         N MPS shares (one per GPU) of 0.25 or 25% of a GPU's SMs (and memory)\n"
       "  --gpu-memory BYTES       N MPS shares with this much device memory each (512M, 10G)\n"
       "  --min-memory-gib G       only GPUs with at least G GiB\n"
       "  --fabric ib|roce|tcp     only nodes with that fabric\n"
       "  --label KEY=VALUE        only nodes with that label (repeatable)\n"
       "  --one-switch             only nodes under one leaf switch\n"
       "  --no-reclaim             (admin) never end the lease as idle (poold --reclaim-idle); a user's\n"
       "                           token is refused (exit status 4)\n"
       "  --preemptible            a waiting request of higher priority may preempt the lease (its\n"
       "                           holder gets the pool's grace period to end the job)\n"
       "exit status: 3 when it does not fit within --wait (or never can); 128+N when signal N (Ctrl-C:\n"
       "130) interrupts the wait: the queued request is withdrawn first.\n"},
      {"renew",
       "usage: poolctl [--pool URI] [--json] renew LEASE\n"
       "Extends LEASE by its TTL from now. Exit status 5 when the lease is gone.\n"},
      {"release",
       "usage: poolctl [--pool URI] [--json] release LEASE\n"
       "Gives LEASE's GPUs back to the pool.\n"},
      {"shrink",
       "usage: poolctl [--pool URI] [--json] shrink LEASE\n"
       "An elastic lease under a shrink notice gives the GPUs it names back now (its job has left\n"
       "them), instead of at the notice's deadline; prints the lease. Exit status 5 when it is gone.\n"},
      {"register",
       "usage: poolctl [--pool URI] register [--cluster FILE]\n"
       "(admin) Adds the nodes of a cluster file, or without --cluster this node, probed.\n"},
      {"drain",
       "usage: poolctl [--pool URI] drain NODE\n"
       "(admin) NODE takes no new lease; its leases run on.\n"},
      {"resume",
       "usage: poolctl [--pool URI] resume NODE\n"
       "(admin) NODE takes new leases again.\n"},
      {"mig",
       "usage: poolctl --pool http://HOST:PORT mig NODE:GPU --profiles PROFILE[,PROFILE...] [--wait "
       "SECONDS]\n"
       "(admin) Splits the GPU into MIG instances: a GPU instance of each profile, in order, with one\n"
       "compute instance each (3g.40gb,3g.40gb; 1g.10gb,1g.10gb,2g.20gb,3g.40gb). The GPU and its\n"
       "instances take no new lease; once none is held, the node's agent makes the layout through NVML\n"
       "(as root; turning MIG mode on may wait for a GPU reset) and the new instances are leased. A\n"
       "layout that cannot be made fails the GPU with the reason (poolctl nodes; poolctl resume NODE).\n"
       "  --wait SECONDS   wait that long for the layout to be made, and say how it went (exit status\n"
       "                   1 when it failed or the time ran out; the request stays)\n"},
      {"fail",
       "usage: poolctl [--pool URI] fail NODE:GPU | NODE\n"
       "(admin) Marks GPU (its index) of NODE failed, or every GPU of NODE: leased no more until\n"
       "`poolctl resume NODE`.\n"},
      {"events",
       "usage: poolctl --pool http://HOST:PORT [--json] events [--since SEQ] [--follow]\n"
       "poold's event log, one line per event: grants, releases, expiries, node state changes, GPU\n"
       "failures (docs/operations.md). Without --since, every event poold keeps; with --follow and\n"
       "without --since, the last 10, then each new one as it comes, until Ctrl-C (exit 0), waiting for\n"
       "poold where it is down. --json: each event as its JSON line.\n"
       "  --since SEQ   only the events after SEQ\n"
       "  --follow      keep printing events as they come\n"},
  };
  auto it = kHelp.find(command);
  return it == kHelp.end() ? nullptr : it->second;
}

std::string inSeconds(TimePoint t) {
  if (t == kNever) return "never";
  auto s = std::chrono::duration_cast<std::chrono::seconds>(t - std::chrono::system_clock::now()).count();
  return std::to_string(s) + "s";
}

std::string orDash(const std::string& s) {
  return s.empty() ? "-" : s;
}

// The columns squeue users look for: what waits, one per line (leases: leaseTable).
void printQueueTable(const std::vector<QueueInfo>& queue, TimePoint now) {
  std::cout << std::left << std::setw(5) << "POS" << std::setw(8) << "TICKET" << std::setw(16) << "JOB"
            << std::setw(12) << "OWNER" << std::setw(6) << "GPUS" << std::setw(6) << "PRIO" << std::setw(11)
            << "WAITED" << std::setw(11) << "START"
            << "REASON\n";
  for (const QueueInfo& q : queue)
    std::cout << std::setw(5) << q.position << std::setw(8) << q.ticket << std::setw(16) << orDash(q.job_name)
              << std::setw(12) << q.owner << std::setw(6) << q.gpus << std::setw(6) << q.priority
              << std::setw(11)
              << formatElapsed(std::chrono::duration_cast<std::chrono::seconds>(now - q.enqueued))
              << std::setw(11) << (q.planned_start ? formatLocalTime(*q.planned_start, now) : "-")
              << orDash(q.reason) << "\n";
}

void printQuotaTable(const std::vector<QuotaUse>& quotas) {
  std::cout << std::left << std::setw(24) << "QUOTA" << std::setw(24) << "MEMBERS" << std::setw(12)
            << "GUARANTEED" << std::setw(7) << "LIMIT" << std::setw(6) << "USED" << std::setw(10)
            << "BORROWED"
            << "WAITING\n";
  for (const QuotaUse& q : quotas) {
    std::string members;
    for (const std::string& m : q.quota.members) members += (members.empty() ? "" : ",") + m;
    std::string name =
        toString(q.quota.kind) + (q.quota.kind == Quota::Kind::kDefault ? "" : " " + q.quota.name);
    std::cout << std::setw(24) << name << std::setw(24) << orDash(members) << std::setw(12)
              << q.quota.guaranteed << std::setw(7) << (q.quota.limit ? std::to_string(*q.quota.limit) : "-")
              << std::setw(6) << q.used << std::setw(10) << q.borrowed << q.waiting << "\n";
  }
}

void printLease(const Lease& l) {
  std::cout << l.id << "  " << l.gpus.size() << " GPUs  " << formatGpus(l.gpus) << "  owner " << l.owner
            << "  expires in " << inSeconds(l.expires);
  if (l.elastic)
    std::cout << "  elastic " << l.elastic->gpus << ":" << l.elastic->max_gpus << " (resized " << l.resizes
              << (l.resizes == 1 ? " time)" : " times)");
  if (l.shrink_at)
    std::cout << "  giving back " << formatGpus(l.shrink_gpus) << " in " << inSeconds(*l.shrink_at);
  std::cout << "\n";
}

template <typename T>
T number(const std::string& option, const std::string& text, Range<T> range) {
  return topo::parseOption<T>(option, text, range.min, range.max);
}

// --- poolctl events: poold's event log through GET /v1/events.

// A field of an event as text: strings as they are, numbers as JSON writes them, "" where absent.
std::string field(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// "2026-12-01T15:04:05.123Z grant L0123... alice 8 GPUs n01:0-7".
std::string eventText(const json& e) {
  const std::string kind = field(e, "kind");
  std::string out = field(e, "time") + " " + kind;
  auto add = [&](const std::string& text) {
    if (!text.empty()) out += " " + text;
  };
  if (kind == "grant" || kind == "release" || kind == "expiry") {
    add(field(e, "lease"));
    add(field(e, "owner"));
    add(field(e, "gpu_count") + " GPUs");
    add(field(e, "gpus"));
    if (!field(e, "job").empty()) add("job " + field(e, "job"));
    if (!field(e, "held_s").empty()) add("held " + field(e, "held_s") + " s");
    if (!field(e, "reason").empty()) add("(" + field(e, "reason") + ")");
    return out;
  }
  if (kind == "node_state") {
    add(field(e, "node"));
    add(field(e, "state"));
  } else if (kind == "gpu_failed") {
    add(field(e, "node") + ":" + field(e, "index"));
    add(field(e, "reason"));
  } else {
    // A kind this poolctl does not know: its fields as KEY=VALUE.
    for (const auto& [key, value] : e.items())
      if (key != "schema" && key != "seq" && key != "time" && key != "kind")
        add(key + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
    return out;
  }
  if (!field(e, "by").empty()) add("(by " + field(e, "by") + ")");
  return out;
}

// `poolctl status` of a pool on etcd: a line per replica, then per etcd member.
//   replicas (etcd://e1:2379,... (prefix /poolrun)):
//     http://a:7450  leader
//     http://b:7450  standby
//   etcd:
//     e1:2379  answers, etcd's leader, 3.4.23
//     e2:2379  unreachable: cannot connect to e2:2379: Connection refused
std::string replicaLines(const PoolReplicas& r) {
  std::string out = "replicas (" + r.store + "):\n";
  for (const auto& replica : r.replicas)
    out += "  " + replica.url + "  " + (replica.leader ? "leader" : "standby") + "\n";
  int reachable = 0;
  for (const auto& m : r.etcd) reachable += m.reachable;
  out += "etcd: " + std::to_string(reachable) + " of " + std::to_string(r.etcd.size()) + " members answer" +
         (2 * reachable > static_cast<int>(r.etcd.size()) ? "" : " (no quorum: the pool accepts no change)") +
         "\n";
  for (const auto& m : r.etcd)
    out += "  " + m.endpoint + "  " +
           (m.reachable ? std::string("answers") + (m.leader ? ", etcd's leader" : "") + ", " + m.version
                        : "unreachable: " + m.error) +
           "\n";
  return out;
}

// An event as its line in poold's file: schema, seq, time and kind first.
std::string eventJson(const json& e) {
  nlohmann::ordered_json out;
  for (const char* key : {"schema", "seq", "time", "kind"})
    if (e.contains(key)) out[key] = e[key];
  for (const auto& [key, value] : e.items())
    if (!out.contains(key)) out[key] = value;
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// One GET /v1/events: the reply, or PoolError (4xx, refused) or HttpFailed (poold unreachable).
json eventsPage(HttpConnection& c, const std::string& uri, uint64_t since, int waitMs, int limit) {
  std::string path = "/v1/events?since=" + std::to_string(since) + "&wait_ms=" + std::to_string(waitMs) +
                     "&limit=" + std::to_string(limit);
  HttpResponse r = c.request("GET", path, "");
  json doc = topo::jsonTooDeepAt(r.body, topo::kMaxJsonDepth) ? json() : json::parse(r.body, nullptr, false);
  if (r.status == 200 && doc.is_object() && doc.contains("events") && doc["events"].is_array()) return doc;
  std::string msg = doc.is_object() && doc.contains("error") && doc["error"].is_string()
                        ? doc["error"].get<std::string>()
                        : topo::printable(r.body.substr(0, 200));
  std::string where = uri + " refused GET /v1/events (" + std::to_string(r.status) + "): " + msg;
  if (r.status == 401)
    throw PoolError(PoolFailure::kUnauthorized, ErrorCode::kBadInput,
                    where + "; set POOLRUN_TOKEN or --token-file to a token poold knows");
  if (r.status == 403) throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput, where);
  if (r.status == 404)
    throw PoolError(PoolFailure::kOther, ErrorCode::kUnsupported, where + " (a poold without an event log?)");
  throw PoolError(PoolFailure::kOther, r.status == 400 ? ErrorCode::kBadInput : ErrorCode::kIo, where);
}

int eventsCommand(const std::string& uri, const std::string& token, const std::vector<std::string>& args,
                  bool asJson) {
  std::optional<uint64_t> since;
  bool follow = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--follow" || args[i] == "-f") {
      follow = true;
    } else if (args[i] == "--since") {
      if (i + 1 >= args.size()) throw badInput("--since needs a value");
      since = number("--since", args[++i], Range<uint64_t>{0, INT64_MAX});
    } else {
      throw badInput("events: unknown option '" + topo::printable(args[i]) + "' (use --since SEQ, --follow)");
    }
  }
  if (!uri.starts_with("http://"))
    throw badInput("events: the event log is poold's (STATE/events.jsonl, GET /v1/events); pool '" +
                   topo::printable(uri) + "' is not a poold and keeps none (use --pool http://HOST:PORT)");
  if (uri.find(',') != std::string::npos)
    throw badInput(
        "events: each poold replica keeps its own event log (what it saw while it led): name one "
        "of '" +
        topo::printable(uri) + "' (--pool http://HOST:PORT)");
  std::string rest = uri.substr(7);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t colon = rest.rfind(':');
  int port = 0;
  const std::string portText = colon == std::string::npos ? "" : rest.substr(colon + 1);
  auto [p, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (colon == std::string::npos || colon == 0 || ec != std::errc() ||
      p != portText.data() + portText.size() || port < 1 || port > 65535)
    throw badInput("bad pool URI '" + topo::printable(uri) + "': expected http://HOST:PORT");
  HttpConnection connection(rest.substr(0, colon), port, token);
  connection.io_timeout = std::chrono::milliseconds(15000);

  auto print = [&](const json& events) {
    for (const json& e : events) std::cout << (asJson ? eventJson(e) : eventText(e)) << "\n";
    std::cout << std::flush;
  };
  // Takes a page's events after `next`; false where there were none.
  uint64_t next = since.value_or(0);
  auto take = [&](const json& page) {
    const json& events = page["events"];
    uint64_t last = page.value("last", uint64_t{0});
    if (next > last) {
      std::cerr << "poolctl: poold's event log ends at seq " << last << ", before " << next
                << " (a new log?): going on from " << last << "\n";
      next = last;
    }
    if (events.empty()) return false;
    uint64_t first = events.front().value("seq", uint64_t{0});
    if (first > next + 1)
      std::cerr << "poolctl: events " << next + 1 << " to " << first - 1
                << " are no longer kept (the log was rotated past them, or lost)\n";
    print(events);
    next = events.back().value("seq", next);
    return true;
  };

  auto unreachable = [&](const std::exception& e) {
    return PoolError(
        PoolFailure::kOther, ErrorCode::kIo,
        "cannot reach poold at " + uri + " (" + e.what() + "); is it running and listening there?");
  };
  if (!follow) {
    try {
      while (take(eventsPage(connection, uri, next, 0, 1000))) {
      }
    } catch (const HttpFailed& e) {
      throw unreachable(e);
    }
    return 0;
  }

  QueueInterruption interruption;  // Ctrl-C, SIGTERM, SIGHUP: stop following, exit 0
  bool down = false;
  auto backoff = std::chrono::milliseconds(250);
  bool started = since.has_value();
  while (pendingInterrupt() == 0) {
    try {
      if (!started) {
        uint64_t last = eventsPage(connection, uri, 0, 0, 1).value("last", uint64_t{0});
        next = last > 10 ? last - 10 : 0;
        started = true;
      }
      const auto asked = std::chrono::steady_clock::now();
      json page = eventsPage(connection, uri, next, 1000, 1000);
      if (down) std::cerr << "poolctl: poold at " << uri << " answers again\n";
      down = false;
      backoff = std::chrono::milliseconds(250);
      // Nothing new, at once: poold had no long poll to spare (its workers are for renewals and
      // acquires first); ask again a little later rather than at once.
      if (!take(page) && std::chrono::steady_clock::now() - asked < std::chrono::milliseconds(100))
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    } catch (const HttpFailed& e) {
      if (!down)
        std::cerr << "poolctl: poold at " << uri << " does not answer (" << e.what() << "); trying again\n";
      down = true;
      for (auto slept = std::chrono::milliseconds(0); slept < backoff && pendingInterrupt() == 0;
           slept += std::chrono::milliseconds(50))
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
    }
  }
  (void)interrupted("stopped following");  // the signal is acted on: the scope does not raise it again
  return 0;
}

// poolctl mig NODE:GPU --profiles A,B [--wait SECONDS]: asks for the layout, and with --wait
// follows it until the agent has made it (0) or failed to, or the time ran out (1).
int migCommand(const std::function<PoolControl&()>& pool, const std::vector<std::string>& args, bool asJson) {
  std::string spec;
  std::vector<std::string> profiles;
  std::optional<std::chrono::seconds> wait;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw badInput(args[i] + " needs a value");
      return args[++i];
    };
    if (args[i] == "--profiles") {
      std::string list = value();
      topo::checkText(list, 1024, "--profiles");
      for (size_t at = 0; at <= list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        LeaseRequest named;
        setMigProfile(named, list.substr(at, comma - at), "--profiles");
        if (named.mig_or_larger)
          throw badInput("--profiles '" + topo::printable(list) + "': name each profile (no '+')");
        profiles.push_back(named.mig_profile);
        at = comma + 1;
      }
    } else if (args[i] == "--wait") {
      wait = std::chrono::seconds(number("--wait", value(), Range<int64_t>{1, 86'400}));
    } else if (spec.empty() && !args[i].starts_with("-")) {
      spec = args[i];
    } else {
      throw badInput("mig: unexpected '" + topo::printable(args[i]) + "' (see poolctl help mig)");
    }
  }
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || profiles.empty())
    throw badInput("mig needs NODE:GPU and --profiles PROFILE[,PROFILE...] (3g.40gb,3g.40gb, say)");
  const std::string node = spec.substr(0, colon);
  topo::checkNodeName(node);
  const size_t gpu = number("mig GPU index", spec.substr(colon + 1), kGpuIndexRange);
  pool().setMigLayout(node, gpu, profiles);
  std::string layout;
  for (const std::string& p : profiles) layout += (layout.empty() ? "" : ",") + p;
  if (!wait) {
    if (asJson)
      std::cout << json{{"node", node}, {"index", gpu}, {"mig_layout", profiles}}.dump() << "\n";
    else
      std::cout << spec << ": MIG layout " << layout
                << " asked; the node's agent makes it once no lease holds the GPU or its instances\n";
    return 0;
  }
  const auto end = std::chrono::steady_clock::now() + *wait;
  for (;;) {
    for (const NodeInfo& n : pool().nodes()) {
      if (n.name != node || gpu >= n.gpus.size() || !n.gpus[gpu].mig_layout.empty()) continue;
      const GpuInfo& g = n.gpus[gpu];
      if (asJson) {
        std::cout << toJson(n).dump(2) << "\n";
      } else if (g.state == GpuState::kFailed) {
        std::cerr << "poolctl: " << spec << ": " << g.failed_reason << "\n";
      } else {
        std::cout << spec << ": MIG layout " << layout << " made: " << g.mig_instances.size()
                  << " instances\n";
        for (const MigInstanceInfo& m : g.mig_instances)
          std::cout << "  " << gpu << "/" << m.gpu_instance << "." << m.compute_instance << "  " << m.profile
                    << "  " << m.uuid << "\n";
      }
      return g.state == GpuState::kFailed ? 1 : 0;
    }
    if (std::chrono::steady_clock::now() >= end) {
      std::cerr
          << "poolctl: " << spec << ": the MIG layout " << layout << " is not made after " << wait->count()
          << " s (a lease still holds the GPU or one of its instances, or its agent is silent; `poolctl "
             "nodes` shows which); the request stays\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// One command's call: its name, its arguments, --json, and the pool, opened at the first use (once
// the command's arguments are known to be good).
struct Command {
  std::string name;
  std::vector<std::string> args;
  bool json = false;
  const ClientOptions& options;
  std::function<PoolControl&()> pool;

  // The only argument, naming `what` where there is none or more.
  const std::string& one(const std::string& what) const {
    if (args.size() != 1) throw badInput(name + " needs exactly one " + what);
    return args[0];
  }
};

// A list as a JSON array of toJson's documents, printed.
template <typename T>
void printJsonList(const std::vector<T>& items) {
  json out = json::array();
  for (const T& item : items) out.push_back(toJson(item));
  std::cout << out.dump(2) << "\n";
}

int statusCommand(const Command& c) {
  PoolStatus s = c.pool().status();
  std::optional<PoolReplicas> replicas = c.pool().replicas();
  if (!c.json) {
    std::cout << statusLine(c.pool().describe(), s) << "\n";
    if (replicas) std::cout << replicaLines(*replicas);
    return 0;
  }
  json out = toJson(s);
  if (replicas) {
    out["replicas"] = json::array();
    for (const auto& r : replicas->replicas)
      out["replicas"].push_back({{"url", r.url}, {"leader", r.leader}});
    out["etcd"] = json::array();
    for (const auto& m : replicas->etcd)
      out["etcd"].push_back({{"endpoint", m.endpoint},
                             {"reachable", m.reachable},
                             {"leader", m.leader},
                             {"version", m.version},
                             {"error", m.error}});
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

int nodesCommand(const Command& c) {
  std::vector<NodeInfo> nodes = c.pool().nodes();
  if (c.json) {
    printJsonList(nodes);
  } else {
    for (const std::string& line : nodeTable(nodes, std::chrono::system_clock::now()))
      std::cout << line << "\n";
  }
  return 0;
}

int leasesCommand(const Command& c) {
  std::vector<Lease> leases = c.pool().leases();
  if (c.json) {
    printJsonList(leases);
  } else if (leases.empty()) {
    std::cout << "no leases\n";
  } else {
    for (const std::string& line : leaseTable(leases, std::chrono::system_clock::now()))
      std::cout << line << "\n";
  }
  return 0;
}

int queueCommand(const Command& c) {
  std::vector<QueueInfo> queue = c.pool().queue();
  if (c.json)
    printJsonList(queue);
  else if (queue.empty())
    std::cout << "queue empty\n";
  else
    printQueueTable(queue, std::chrono::system_clock::now());
  return 0;
}

int quotaCommand(const Command& c) {
  if (!c.args.empty()) throw badInput("quota takes no arguments");
  std::vector<QuotaUse> quotas = c.pool().quotas();
  if (c.json)
    printJsonList(quotas);
  else if (quotas.empty())
    std::cout << "no quotas (poold --quotas FILE sets them)\n";
  else
    printQuotaTable(quotas);
  return 0;
}

int registerCommand(const Command& c) {
  std::vector<topo::ClusterNode> nodes;
  if (c.args.size() == 2 && c.args[0] == "--cluster") {
    nodes = topo::readClusterFile(c.args[1]).nodes;
  } else if (c.args.empty()) {
    topo::ClusterNode node;
    auto t = std::make_shared<topo::NodeTopology>(topo::probeLive());
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    node.name = t->hostname.empty() ? host : t->hostname;
    node.topology = std::move(t);
    nodes.push_back(std::move(node));
  } else {
    throw badInput("register takes [--cluster FILE]");
  }
  c.pool().registerNodes(nodes);
  if (c.json)
    std::cout << json{{"registered", nodes.size()}}.dump() << "\n";
  else
    std::cout << "registered " << nodes.size() << " node(s) in " << c.pool().describe() << "\n";
  return 0;
}

// drain NODE, resume NODE.
int drainOrResumeCommand(const Command& c) {
  const std::string& node = c.one("NODE");
  topo::checkNodeName(node);
  c.name == "drain" ? c.pool().drain(node) : c.pool().resume(node);
  if (!c.json) std::cout << node << ": " << (c.name == "drain" ? "draining" : "up") << "\n";
  return 0;
}

// fail NODE:GPU, or fail NODE: every GPU of the node.
int failCommand(const Command& c) {
  const std::string& spec = c.one("NODE:GPU (or NODE)");
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos) {
    topo::checkNodeName(spec, "fail");
    const std::vector<NodeInfo> nodes = c.pool().nodes();
    auto n = std::find_if(nodes.begin(), nodes.end(), [&](const NodeInfo& i) { return i.name == spec; });
    if (n == nodes.end())
      throw Error(ErrorCode::kNotFound, "no node '" + spec + "' in the pool (see `poolctl nodes`)");
    for (const GpuInfo& g : n->gpus) c.pool().failGpu(spec, g.index);
    if (!c.json) std::cout << spec << ": " << n->gpus.size() << " GPUs failed\n";
    return 0;
  }
  std::string node = spec.substr(0, colon);
  topo::checkNodeName(node);
  size_t index = number("fail GPU index", spec.substr(colon + 1), kGpuIndexRange);
  c.pool().failGpu(node, index);
  if (!c.json) std::cout << spec << ": failed\n";
  return 0;
}

// renew LEASE, shrink LEASE, release LEASE.
int leaseCommand(const Command& c) {
  const std::string& id = c.one("LEASE");
  topo::checkLeaseId(id);
  if (c.name != "release") {
    Lease l = c.name == "renew" ? c.pool().renew(id) : c.pool().shrink(id);
    if (c.json)
      std::cout << toJson(l).dump(2) << "\n";
    else
      printLease(l);
    return 0;
  }
  // Idempotent: a lease that is gone already is not an error (exit 0), but it is said.
  bool held = c.pool().release(id);
  if (c.json)
    std::cout << json{{"id", id}, {"released", held}}.dump() << "\n";
  else if (held)
    std::cout << id << ": released\n";
  else
    std::cerr << "poolctl: lease " << id << " was not held (already released, expired, or never granted)\n";
  return 0;
}

// acquire's options as a request (the placement ones through the setters poolrun shares).
LeaseRequest acquireRequest(const std::vector<std::string>& args) {
  LeaseRequest r;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw badInput(a + " needs a value");
      return args[++i];
    };
    if (a == "-n" || a == "--gpus") {
      const std::string v = value();
      const size_t colon = v.find(':');
      if (colon != std::string::npos && (colon == 0 || colon + 1 == v.size()))
        throw badInput(a + " '" + topo::printable(v) + "': MIN:MAX needs both numbers (4:16, say)");
      r.gpus = number(a, v.substr(0, colon), kGpusRange);
      if (colon != std::string::npos) {
        r.max_gpus = number(a, v.substr(colon + 1), kGpusRange);
        if (r.max_gpus < r.gpus)
          throw badInput(a + " '" + topo::printable(v) + "': MIN:MAX with MAX at least MIN");
      }
    } else if (a == "--resize-interval") {
      r.resize_interval = std::chrono::seconds(number(a, value(), kResizeIntervalSecondsRange));
    } else if (a == "--gpus-per-node") {
      r.gpus_per_node = number(a, value(), kGpusPerNodeRange);
    } else if (a == "--whole-nodes") {
      r.whole_nodes = true;
    } else if (a == "--ttl") {
      r.ttl = std::chrono::seconds(number(a, value(), kTtlSecondsRange));
    } else if (a == "--wait") {
      r.wait = std::chrono::seconds(number(a, value(), kWaitSecondsRange));
    } else if (a == "--max-duration") {
      r.max_duration = std::chrono::seconds(number(a, value(), kMaxDurationSecondsRange));
    } else if (a == "--priority") {
      r.priority = number(a, value(), kPriorityRange);
    } else if (a == "--job") {
      r.job_name = value();
      topo::checkText(r.job_name, topo::kMaxJobNameBytes, a);
    } else if (a == "--model") {
      setGpuModel(r, value(), a);
    } else if (a == "--mig") {
      setMigProfile(r, value(), a);
    } else if (a == "--share") {
      setSharePercent(r, value(), a);
    } else if (a == "--gpu-memory") {
      setShareMemory(r, value(), a);
    } else if (a == "--min-memory-gib") {
      setMinMemoryGib(r, value(), a);
    } else if (a == "--fabric") {
      r.fabric = topo::fabricFromString(value());
    } else if (a == "--one-switch") {
      r.one_switch = true;
    } else if (a == "--no-reclaim") {
      r.no_reclaim = true;
    } else if (a == "--preemptible") {
      r.preemptible = true;
    } else if (a == "--label") {
      addLabel(r, value(), a);
    } else {
      throw badInput("acquire: unknown option '" + a + "'");
    }
  }
  if (r.gpus <= 0) throw badInput("acquire needs -n N (N >= 1)");
  return r;
}

int acquireCommand(const Command& c) {
  LeaseRequest r = acquireRequest(c.args);
  r.owner = c.options.owner;
  PoolControl& p = c.pool();
  Lease l;
  {
    // Ctrl-C (or SIGTERM, SIGHUP) while queued withdraws the request: main() says so.
    QueueInterruption interruption;
    try {
      l = p.acquire(r, [&](const QueueProgress& progress) {
        if (!c.json)
          std::cerr << "poolctl: " << formatQueueProgress(progress, std::chrono::system_clock::now()) << "\n";
      });
    } catch (const PoolError& e) {
      // poold names the field; the user typed the option.
      if (e.failure() != PoolFailure::kForbidden || !r.no_reclaim) throw;
      throw PoolError(e.failure(), e.code(),
                      "--no-reclaim is for administrators (an administrator's token may set it): " +
                          std::string(e.what()));
    }
  }
  if (c.json)
    std::cout << toJson(l).dump(2) << "\n";
  else
    printLease(l);
  return 0;
}

int topCommandOf(const Command& c) {
  if (c.json) throw badInput("top draws text; for JSON use status, nodes, leases and queue with --json");
  TopOptions options = parseTopOptions(c.args);
  return topCommand(options, c.pool());
}

int migCommandOf(const Command& c) {
  return migCommand(c.pool, c.args, c.json);
}

// Every command but `events` (which reads poold's event log over a connection of its own).
const std::map<std::string, int (*)(const Command&)>& commands() {
  static const std::map<std::string, int (*)(const Command&)> table{{"status", statusCommand},
                                                                    {"nodes", nodesCommand},
                                                                    {"leases", leasesCommand},
                                                                    {"queue", queueCommand},
                                                                    {"quota", quotaCommand},
                                                                    {"register", registerCommand},
                                                                    {"drain", drainOrResumeCommand},
                                                                    {"resume", drainOrResumeCommand},
                                                                    {"fail", failCommand},
                                                                    {"renew", leaseCommand},
                                                                    {"release", leaseCommand},
                                                                    {"shrink", leaseCommand},
                                                                    {"acquire", acquireCommand},
                                                                    {"top", topCommandOf},
                                                                    {"mig", migCommandOf}};
  return table;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  ClientOptions copt;
  std::string uri = std::getenv("POOLRUN_POOL") ? std::getenv("POOLRUN_POOL") : "local";
  std::string tokenFile;
  bool asJson = false;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw badInput(a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h" || (a == "help" && rest.empty())) {
      // After a command (or `help COMMAND`), that command's help.
      std::string command = !rest.empty() ? rest[0] : a == "help" && i + 1 < args.size() ? args[i + 1] : "";
      const char* help = commandHelp(command);
      if (help == nullptr && !command.empty())
        throw badInput("no command '" + topo::printable(command) + "' to give the help of");
      std::cout << (help != nullptr ? help : kUsage);
      return 0;
    } else if (a == "--version") {
      std::cout << topo::versionText("poolctl");
      return 0;
    } else if (a == "--pool") {
      uri = value();
    } else if (a == "--token-file") {
      tokenFile = value();
    } else if (a == "--json") {
      asJson = true;
    } else if (a == "--state") {
      copt.state_dir = value();
    } else if (a == "--owner") {
      copt.owner = value();
      topo::checkOwner(copt.owner, "--owner");
    } else if (a == "--role") {
      copt.role = value();
      if (copt.role != "user" && copt.role != "admin")
        throw badInput("--role '" + topo::printable(copt.role) + "': use user or admin");
    } else {
      rest.push_back(a);
    }
  }
  if (rest.empty()) throw badInput("no command given");
  if (!tokenFile.empty())
    copt.token = readClientToken(tokenFile, "your token");
  else if (const char* t = std::getenv("POOLRUN_TOKEN"))
    copt.token = t;

  const std::string cmd = rest[0];
  std::vector<std::string> cargs(rest.begin() + 1, rest.end());
  if (cmd == "events") return eventsCommand(uri, copt.token, cargs, asJson);
  auto handler = commands().find(cmd);
  if (handler == commands().end()) throw badInput("unknown command '" + cmd + "'");
  std::unique_ptr<PoolControl> opened;
  Command command{cmd, std::move(cargs), asJson, copt, [&]() -> PoolControl& {
                    if (!opened) opened = openPoolControl(uri, copt);
                    return *opened;
                  }};
  return handler->second(command);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const PoolError& e) {
    if (e.failure() == PoolFailure::kInterrupted) {
      std::cerr << "poolctl: " << e.what() << "\n";
      return 128 + e.signal();
    }
    std::cerr << "poolctl: error: " << e.what() << "\n";
    switch (e.failure()) {
      case PoolFailure::kNeverFits:
      case PoolFailure::kTimeout:
        return 3;
      case PoolFailure::kUnauthorized:
      case PoolFailure::kForbidden:
        return 4;
      case PoolFailure::kGone:
        return 5;
      default:
        return e.code() == ErrorCode::kBadInput ? 2 : 1;
    }
  } catch (const Error& e) {
    std::cerr << "poolctl: error: " << e.what() << "\n";
    if (e.code() == ErrorCode::kBadInput) {
      std::cerr << kUsage;
      return 2;
    }
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "poolctl: error: " << e.what() << "\n";
    return 1;
  }
}
