// The live pool's rules: what poold does with its agents' registrations and heartbeats, when a
// node becomes unreachable, which GPUs fail by what they report, which run processes of no lease,
// and which leases sit idle (and, with --reclaim-idle, are ended).

#include <algorithm>
#include <iterator>
#include <set>
#include <utility>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/request_options.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {
namespace {

constexpr size_t kMaxXidSeriesPerGpu = 32;

// Why a sample fails its GPU, or "" where it does not. `acknowledged`: the uncorrected ECC count
// an administrator accepted with `poolctl resume`.
std::string failureIn(const topo::GpuSample& g, uint64_t acknowledged) {
  if (g.ecc_uncorrected_volatile && *g.ecc_uncorrected_volatile > acknowledged)
    return std::to_string(*g.ecc_uncorrected_volatile) + " uncorrectable ECC errors since the driver loaded";
  if (g.remapping_failure) return "row remapping failed (the GPU needs a reset or service)";
  for (const topo::XidEvent& e : g.xid_events) {
    if (!topo::xidFailsGpu(e.xid)) continue;
    return "XID " + std::to_string(e.xid) +
           (e.xid == 48   ? " (double-bit ECC error)"
            : e.xid == 79 ? " (fallen off the bus)"
                          : "");
  }
  return "";
}

// Whether a sample shows its GPU in use: SM activity at or over `threshold`, or no utilisation
// reported at all (MIG, an old driver), which cannot be told from idle.
bool busy(const topo::GpuSample& g, double threshold) {
  return !g.sm_utilization || *g.sm_utilization >= threshold;
}

// Counts a sample's XIDs per (GPU, XID), at most kMaxXidSeriesPerGpu different ones per GPU: a
// broken or hostile agent naming ever new XIDs must not grow poold's memory or its metrics without
// bound.
void countXids(NodeLive& live, size_t i, const std::vector<topo::XidEvent>& events) {
  for (const topo::XidEvent& e : events) {
    auto seen = live.xid_counts.find({i, e.xid});
    if (seen != live.xid_counts.end())
      ++seen->second;
    else if (std::distance(live.xid_counts.lower_bound({i, 0}), live.xid_counts.lower_bound({i + 1, 0})) <
             static_cast<std::ptrdiff_t>(kMaxXidSeriesPerGpu))
      live.xid_counts[{i, e.xid}] = 1;
  }
}

}  // namespace

void PoolState::registerAgentNode(const NodeRegistration& registration, TimePoint now) {
  registerNode(registration.node, true, registration.topology_doc);
  PoolNode& node = nodes_.at(registration.node.name);
  node.agent = registration.agent_version.empty() ? "unknown" : registration.agent_version;
  node.launch = registration.launch;
  node.live.last_heartbeat = now;
  node.live.unreachable = false;
  view_time_ = std::max(view_time_, now);
  dirty_.nodes.insert(node.name);
  schedule(now);  // its GPUs may start queued requests
}

HeartbeatReply PoolState::heartbeat(const Heartbeat& hb, TimePoint now, bool planNow) {
  HeartbeatReply reply;
  reply.interval = live_.heartbeat_interval;
  auto it = nodes_.find(hb.node);
  // A node poold does not know, or knows without an agent or with another topology, is registered
  // again by its agent before its samples count.
  if (it == nodes_.end() || it->second.agent.empty() || it->second.topology_hash != hb.topology_hash) {
    reply.register_again = true;
    return reply;
  }
  PoolNode& node = it->second;
  checkHeartbeat(node, hb);  // before anything changes: a heartbeat is taken whole or refused whole
  view_time_ = std::max(view_time_, now);
  const bool cameBack = node.live.unreachable;  // an unreachable node coming back may start queued requests
  if (node.live.unreachable) node_events_.push_back({NodeEvent::Kind::kReachable, node.name, 0, ""});
  node.live.previous_heartbeat = node.live.last_heartbeat;
  node.live.last_heartbeat = now;
  node.live.unreachable = false;
  node.live.gpus.resize(node.gpuCount());
  node.live.nics = hb.nics;
  bool freed = takeAgentResults(node, hb, now) || cameBack;
  freed |= takeHealth(node, hb);
  const Occupancy& held = occupancy(node.name);
  for (const topo::GpuSample& sample : hb.gpus) freed |= takeSample(node, held, hb, sample, now);
  // The layouts whose GPU no lease holds any more (itself or one of its instances): the agent makes
  // them now.
  for (const auto& [gpu, profiles] : node.mig_layouts) {
    bool inUse = (gpu < held.holder.size() && !held.holder[gpu].empty()) || held.sharers.count(gpu);
    for (size_t u = node.gpuCount(); u < node.unitCount() && u < held.holder.size() && !inUse; ++u)
      inUse = node.gpuOf(u) == gpu && !held.holder[u].empty();
    if (!inUse) reply.mig_layouts[gpu] = profiles;
  }
  // Whole GPUs only: dcgm-exporter's job-mapping files name GPUs by index (a MIG lease's
  // utilisation is not reported per instance either).
  for (size_t i = 0; i < held.holder.size() && i < node.gpuCount(); ++i)
    if (!held.holder[i].empty()) reply.gpu_leases[i] = held.holder[i];
  for (const auto& [gpu, ids] : held.sharers) reply.mps_gpus.insert(gpu);
  reply.leases.emplace();
  for (const std::string& lease : held.holder)
    if (!lease.empty()) reply.leases->insert(lease);
  for (const auto& [gpu, ids] : held.sharers) reply.leases->insert(ids.begin(), ids.end());
  node.live.mps_asked = reply.mps_gpus;
  reply.jobs = jobs_.workOf(node.name) != nullptr;
  if (freed && planNow)
    schedule(now);
  else if (freed)
    replan_ = true;  // the next tick plans
  return reply;
}

// The agent's health checks, where what they say changed: a failure drains a node that is up; a pass
// resumes a node they drained (never one an administrator drained). Whether the node was resumed.
bool PoolState::takeHealth(PoolNode& node, const Heartbeat& hb) {
  if (!hb.health_failure || hb.health_failure == node.live.health_failure) return false;
  node.live.health_failure = hb.health_failure;
  const std::string& failure = *hb.health_failure;
  if (!failure.empty() && node.state == NodeState::kUp) {
    node.state = NodeState::kDraining;
    node.drain_reason = "health check failed: " + failure;
    node.drained_by_agent = true;
    node_events_.push_back({NodeEvent::Kind::kDrained, node.name, 0, node.drain_reason});
  } else if (!failure.empty() && node.drained_by_agent) {
    node.drain_reason = "health check failed: " + failure;  // failing otherwise now
  } else if (failure.empty() && node.drained_by_agent) {
    node.state = NodeState::kUp;
    node.drain_reason.clear();
    node.drained_by_agent = false;
    node_events_.push_back({NodeEvent::Kind::kResumed, node.name, 0, "its agent's health checks pass again"});
    dirty_.nodes.insert(node.name);
    replan_ = true;
    return true;
  } else {
    return false;
  }
  dirty_.nodes.insert(node.name);
  replan_ = true;
  return false;
}

// The layouts the agent made or failed to make, and the MPS daemons it could not start; whether GPUs
// may have been freed for queued requests.
bool PoolState::takeAgentResults(PoolNode& node, const Heartbeat& hb, TimePoint now) {
  bool freed = false;
  // The layouts the agent made or failed to make (a result for a GPU without a request is old news).
  for (const auto& [gpu, error] : hb.mig_results) {
    auto asked = node.mig_layouts.find(gpu);
    if (asked == node.mig_layouts.end()) continue;
    if (!error.empty() && !node.failed.count(gpu)) {
      std::string layout;
      for (const std::string& p : asked->second) layout += (layout.empty() ? "" : ",") + p;
      std::string why = "MIG layout " + layout + " not made: " + error;
      node.failed.insert(gpu);
      node.failures[gpu] = {why, now};
      node_events_.push_back({NodeEvent::Kind::kGpuFailed, node.name, gpu, std::move(why)});
    }
    node.mig_layouts.erase(asked);
    dirty_.nodes.insert(node.name);
    replan_ = true;
    freed = true;
  }
  // MPS control daemons the agent could not start: no share works there (CUDA runs a client
  // without MPS, and without its limits, where it finds no daemon).
  for (const auto& [gpu, error] : hb.mps_errors) {
    if (error.empty() || node.failed.count(gpu)) continue;
    std::string why = "MPS control daemon not started: " + error;
    node.failed.insert(gpu);
    node.failures[gpu] = {why, now};
    node_events_.push_back({NodeEvent::Kind::kGpuFailed, node.name, gpu, std::move(why)});
    dirty_.nodes.insert(node.name);
    replan_ = true;
  }
  return freed;
}

// One GPU's sample: its XIDs, a failure it tells of, foreign processes, and the utilisation of the
// leases on it; whether it may have freed GPUs for queued requests.
bool PoolState::takeSample(PoolNode& node, const Occupancy& held, const Heartbeat& hb,
                           const topo::GpuSample& sample, TimePoint now) {
  bool freed = false;
  size_t i = sample.index;
  accountSample(node, held, node.live.gpus[i], sample, now);
  node.live.gpus[i] = sample;
  countXids(node.live, i, sample.xid_events);
  auto acknowledged = node.ecc_acknowledged.find(i);
  std::string why = failureIn(sample, acknowledged == node.ecc_acknowledged.end() ? 0 : acknowledged->second);
  if (!why.empty() && !node.failed.count(i)) {
    node.failed.insert(i);
    node.failures[i] = {why, now};
    dirty_.nodes.insert(node.name);
    node_events_.push_back({NodeEvent::Kind::kGpuFailed, node.name, i, why});
    replan_ = true;  // capacity gone: what was promised on it is planned again
  }
  // Processes that are not of the lease holding this GPU, or of the leases holding its MIG
  // instances (or of any lease), make it foreign.
  const std::string& holder = held.holder[i];
  std::set<std::string_view> holders;
  if (!holder.empty()) holders.insert(holder);
  for (size_t u = node.gpuCount(); u < node.unitCount() && u < held.holder.size(); ++u)
    if (node.gpuOf(u) == i && !held.holder[u].empty()) holders.insert(held.holder[u]);
  const auto sharers = held.sharers.find(i);
  if (sharers != held.sharers.end()) holders.insert(sharers->second.begin(), sharers->second.end());
  std::vector<topo::GpuProcess> outside;
  for (const topo::GpuProcess& p : sample.processes) {
    auto owner = hb.process_leases.find(p.pid);
    if (owner == hb.process_leases.end() || !holders.count(owner->second)) outside.push_back(p);
  }
  if (outside.empty()) {
    freed = node.live.foreign.erase(i) > 0;
  } else {
    replan_ |= !node.live.foreign.count(i);
    node.live.foreign[i] = std::move(outside);
  }
  // The leases the GPU's utilisation tells of: its holder, or every share of it (NVML does not
  // tell it per MPS client; nor for a GPU in MIG mode, so not for its instances).
  std::vector<std::string> measured;
  if (!holder.empty()) measured.push_back(holder);
  if (sharers != held.sharers.end())
    measured.insert(measured.end(), sharers->second.begin(), sharers->second.end());
  for (const std::string& lease : measured) {
    auto [last, fresh] = last_busy_.try_emplace(lease, now);
    if (!fresh && busy(sample, live_.idle_utilization)) last->second = now;
  }
  return freed;
}

void PoolState::checkHeartbeat(const PoolNode& node, const Heartbeat& hb) const {
  const std::string count = std::to_string(node.gpuCount()) + " GPUs" +
                            (node.gpuCount() > 0 ? ", 0-" + std::to_string(node.gpuCount() - 1) : "");
  const std::string fix =
      "; restart poold-agent on " + node.name +
      " (it registers the node again), and check that poold and poold-agent are of one version";
  for (const topo::GpuSample& sample : hb.gpus)
    if (sample.index >= node.gpuCount())
      throw badInput("the heartbeat of node " + node.name + " has a sample of GPU " +
                     std::to_string(sample.index) + ", which the node does not have (it registered " + count +
                     ")" + fix);
  if (hb.mps_errors.empty()) return;
  const Occupancy* held = nullptr;
  if (auto o = occupancy_.find(node.name); o != occupancy_.end()) held = &o->second;
  std::string asked;
  if (node.live.mps_asked)
    for (size_t gpu : *node.live.mps_asked) asked += (asked.empty() ? "" : ",") + std::to_string(gpu);
  for (const auto& [gpu, error] : hb.mps_errors) {
    if (gpu >= node.gpuCount())
      throw badInput("the heartbeat of node " + node.name + " reports an MPS error for GPU " +
                     std::to_string(gpu) + ", which the node does not have (it registered " + count + ")" +
                     fix);
    // An agent starts a daemon only for a GPU poold's last reply listed (whose shares may have
    // ended since). Before poold's first reply to the node (after a restart) what was asked is
    // not known, and the error is taken as it comes: the agent sends it until a heartbeat is taken.
    const bool shared = held && held->sharers.count(gpu);
    if (!shared && node.live.mps_asked && !node.live.mps_asked->count(gpu))
      throw badInput("the heartbeat of node " + node.name + " reports an MPS error for GPU " +
                     std::to_string(gpu) + " (\"" + common::printable(error) +
                     "\"), which has no MPS shares (poold asked for MPS daemons on " +
                     (asked.empty() ? "no GPU of the node" : "GPUs " + asked) + ")" + fix);
  }
}

void PoolState::updateLiveness(TimePoint now) {
  view_time_ = std::max(view_time_, now);
  for (auto& [name, node] : nodes_) {
    if (node.agent.empty()) continue;
    // Loaded from the state file: the node timeout counts from poold's first tick.
    if (node.live.last_heartbeat == TimePoint{}) node.live.last_heartbeat = now;
    if (!node.live.unreachable && now - node.live.last_heartbeat > live_.node_timeout) {
      node.live.unreachable = true;
      replan_ = true;
      auto silent = std::chrono::duration_cast<std::chrono::seconds>(now - node.live.last_heartbeat).count();
      node_events_.push_back({NodeEvent::Kind::kUnreachable, name, 0,
                              "no heartbeat from its agent for " + std::to_string(silent) + " s"});
    }
  }
}

std::optional<TimePoint> PoolState::lastBusy(const std::string& lease) const {
  auto it = last_busy_.find(lease);
  if (it == last_busy_.end()) return std::nullopt;
  return it->second;
}

bool PoolState::idle(const Lease& lease, TimePoint now) const {
  if (live_.idle_after.count() <= 0) return false;
  auto last = last_busy_.find(lease.id);
  if (last == last_busy_.end() || now - last->second < live_.idle_after) return false;
  // Only what every GPU's agent reports makes a lease idle: a GPU without a fresh sample (no agent,
  // an unreachable node) may be busy.
  for (const GpuRef& g : lease.gpus) {
    auto n = nodes_.find(g.node);
    if (n == nodes_.end() || n->second.agent.empty() || n->second.live.unreachable ||
        g.index >= n->second.live.gpus.size() || busy(n->second.live.gpus[g.index], live_.idle_utilization))
      return false;
  }
  return true;
}

void PoolState::reclaimIdle(TimePoint now) {
  if (live_.idle_after.count() <= 0) return;
  std::vector<std::string> ended;
  for (const auto& [id, lease] : leases_) {
    if (!idle(lease, now)) {
      reclaim_at_.erase(id);
      continue;
    }
    if (!live_.reclaim_idle || lease.no_reclaim) continue;
    auto [at, warned] = reclaim_at_.try_emplace(id, now + live_.reclaim_grace);
    if (now >= at->second) ended.push_back(id);
  }
  for (const std::string& id : ended) {
    auto minutes = std::chrono::duration_cast<std::chrono::minutes>(now - last_busy_.at(id)).count();
    std::string why = "reclaimed: its GPUs were idle (under " +
                      std::to_string(static_cast<int>(live_.idle_utilization * 100)) + "% utilisation) for " +
                      std::to_string(minutes) + " min, and poold reclaims idle leases";
    dropLease(id, now, LeaseEvent::Kind::kReleased, why);
    endedByPool(id, std::move(why));
    ++leases_reclaimed_;
  }
}

Lease PoolState::withLiveView(const Lease& lease, TimePoint now) const {
  Lease out = lease;
  out.preempt_grace = preempt_.grace;  // the pool's, whatever it was when the lease was granted
  for (const GpuRef& g : lease.gpus) {
    auto n = nodes_.find(g.node);
    if (n != nodes_.end() && n->second.live.unreachable &&
        std::find(out.at_risk_nodes.begin(), out.at_risk_nodes.end(), g.node) == out.at_risk_nodes.end())
      out.at_risk_nodes.push_back(g.node);
  }
  if (idle(lease, now)) out.idle_since = last_busy_.at(lease.id);
  if (auto r = reclaim_at_.find(lease.id); r != reclaim_at_.end()) out.reclaim_at = r->second;
  return out;
}

std::vector<NodeEvent> PoolState::takeNodeEvents() {
  return std::exchange(node_events_, {});
}

void PoolState::setMigLayout(const std::string& name, size_t gpu, std::vector<std::string> profiles) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    throw Error(ErrorCode::kNotFound, "no node '" + name + "' in the pool (see `poolctl nodes`)");
  PoolNode& node = it->second;
  const std::string where = name + ":" + std::to_string(gpu);
  if (gpu >= node.gpuCount())
    throw badInput("bad GPU index " + std::to_string(gpu) + " (node " + name + " has " +
                   std::to_string(node.gpuCount()) + " GPUs)");
  if (node.agent.empty())
    throw badInput("node " + name +
                   " has no agent: a MIG layout is made by the node's poold-agent (start it "
                   "there), or by hand with nvidia-smi mig");
  if (!node.topology->gpus[gpu].mig.capable)
    throw badInput("GPU " + where + " (" + node.topology->gpus[gpu].model +
                   ") has no MIG mode, as its agent reports: no layout can be made on it");
  if (profiles.empty() || profiles.size() > kMaxMigLayoutProfiles)
    throw badInput("a MIG layout of " + std::to_string(profiles.size()) + " profiles for " + where +
                   " (give 1 to " + std::to_string(kMaxMigLayoutProfiles) + ", e.g. 3g.40gb,3g.40gb)");
  for (std::string& p : profiles) {
    LeaseRequest named;
    setMigProfile(named, p, "MIG layout for " + where);
    if (named.mig_or_larger)
      throw badInput("MIG layout for " + where + ": '" + p + "' names no single profile");
    p = named.mig_profile;
  }
  node.mig_layouts[gpu] = std::move(profiles);
  replan_ = true;  // what was planned on the GPU is planned again elsewhere
  dirty_.nodes.insert(name);
}

void PoolState::clearGpuFailures(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    throw Error(ErrorCode::kNotFound, "no node '" + name + "' in the pool (see `poolctl nodes`)");
  PoolNode& node = it->second;
  node.failed.clear();
  node.failures.clear();
  replan_ = true;
  // What the GPUs report now is accepted: only new uncorrected errors fail them again.
  for (size_t i = 0; i < node.live.gpus.size(); ++i)
    if (node.live.gpus[i].ecc_uncorrected_volatile)
      node.ecc_acknowledged[i] = *node.live.gpus[i].ecc_uncorrected_volatile;
  dirty_.nodes.insert(name);
}

}  // namespace poolrun::pool
