// poolctl's commands on leases: acquire, renew, shrink and release.

#include <chrono>

#include "poolctl.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/queue_wait.hpp"
#include "poolrun/pool/request_options.hpp"

namespace poolrun::pool::ctl {

using nlohmann::json;

namespace {

std::string inSeconds(TimePoint t) {
  if (t == kNever) return "never";
  auto s = std::chrono::duration_cast<std::chrono::seconds>(t - std::chrono::system_clock::now()).count();
  return std::to_string(s) + "s";
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
        throw badInput(a + " '" + common::printable(v) + "': MIN:MAX needs both numbers (4:16, say)");
      r.gpus = number(a, v.substr(0, colon), kGpusRange);
      if (colon != std::string::npos) {
        r.max_gpus = number(a, v.substr(colon + 1), kGpusRange);
        if (r.max_gpus < r.gpus)
          throw badInput(a + " '" + common::printable(v) + "': MIN:MAX with MAX at least MIN");
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
    } else if (a == "--account") {
      setAccount(r, value(), a);
    } else if (a == "--reservation") {
      setReservation(r, value(), a);
    } else if (a == "--job") {
      r.job_name = value();
      common::checkText(r.job_name, common::kMaxJobNameBytes, a);
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
    } else if (a == "--placement") {
      setPlacement(r, value(), a);
    } else if (a == "--no-reclaim") {
      r.no_reclaim = true;
    } else if (a == "--preemptible") {
      r.preemptible = true;
    } else if (a == "--label") {
      addLabel(r, value(), a);
    } else if (a == "--exclude") {
      addExcludedNodes(r, value(), a);
    } else {
      throw badInput("acquire: unknown option '" + a + "'");
    }
  }
  if (r.gpus <= 0) throw badInput("acquire needs -n N (N >= 1)");
  return r;
}

}  // namespace

// renew LEASE, shrink LEASE, release LEASE.
int leaseCommand(const Command& c) {
  const std::string& id = c.one("LEASE");
  common::checkLeaseId(id);
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

}  // namespace poolrun::pool::ctl
