// poold-agent's loop (agent.hpp).

#include "poolrun/agent/agent.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>

#include "job_watch.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/client.hpp"

namespace poolrun::agent {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct StopSignal::Impl {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool requested = false;
  bool woken = false;  // wake() since the last waitFor ended
};

StopSignal::StopSignal() : impl_(std::make_shared<Impl>()) {}
StopSignal::~StopSignal() = default;

void StopSignal::request() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->requested = true;
  }
  impl_->cv.notify_all();
}

bool StopSignal::requested() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requested;
}

std::function<void()> StopSignal::waker() const {
  return [impl = impl_] {
    {
      std::lock_guard<std::mutex> lock(impl->mu);
      impl->woken = true;
    }
    impl->cv.notify_all();
  };
}

bool StopSignal::waitFor(milliseconds delay) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait_for(lock, delay, [this] { return impl_->requested || impl_->woken; });
  impl_->woken = false;
  return !impl_->requested;
}

AgentClock systemClock(StopSignal& stop) {
  auto rng = std::make_shared<std::minstd_rand>(std::random_device{}());
  return {[&stop](milliseconds d) { return stop.waitFor(d); },
          [] { return std::chrono::steady_clock::now(); },
          [rng] { return std::uniform_real_distribution<double>(0, 1)(*rng); }, stop.waker()};
}

bool gpuLost(const topo::GpuSample& g) {
  return !g.error.empty() && !g.sm_utilization && !g.memory_utilization && !g.memory_used_bytes &&
         !g.memory_total_bytes && !g.temperature_c && !g.power_w && !g.ecc_uncorrected_volatile;
}

namespace {

// "0:42", "1:02:03": how long poold was out of reach.
std::string elapsed(std::chrono::steady_clock::duration d) {
  return pool::formatElapsed(std::chrono::duration_cast<seconds>(d));
}

std::string portName(const std::string& nic, int port) {
  return nic + " port " + std::to_string(port);
}

// What poold's reader refuses past its bounds is cut here, so that a GPU in an XID storm or with
// thousands of processes does not make the whole heartbeat refused.
void bound(topo::GpuSample& g) {
  if (g.processes.size() > pool::kMaxProcessesPerGpu) g.processes.resize(pool::kMaxProcessesPerGpu);
  if (g.xid_events.size() > pool::kMaxXidEventsPerGpu) g.xid_events.resize(pool::kMaxXidEventsPerGpu);
}

}  // namespace

struct Agent::State {
  AgentConfig config;
  LinkFactory open_link;
  Sampler sample;
  AgentClock clock;
  std::ostream& log;

  std::unique_ptr<pool::AgentLink> link;
  std::shared_ptr<const topo::NodeTopology> topology;
  bool registered = false;
  std::string topology_hash;  // of the topology as registered
  std::optional<JobMappingFiles> job_mapping;

  // poold out of reach: since when, how many attempts failed, the next delay's exponent.
  std::optional<std::chrono::steady_clock::time_point> unreachable_since;
  int failed_attempts = 0;
  int backoff_step = 0;
  std::string refusal;          // the last refusal printed: each distinct one once
  std::string other_failure;    // likewise for anything else that went wrong
  std::string mapping_failure;  // the job-mapping files: once when they start failing
  std::set<size_t> lost_gpus;
  std::map<size_t, std::string> mig_results;  // MIG layouts made (or not) since the last heartbeat
  // MPS: the GPUs whose control daemon runs (started here, or found running at the first reply),
  // those whose daemon did not start (not tried again while poold lists them), and the failures
  // the next heartbeat tells.
  std::optional<std::set<size_t>> mps_running;
  std::set<size_t> mps_failed;
  std::map<size_t, std::string> mps_errors;
  std::optional<int> exit_status;
  // Detached jobs: their launchers, and what became of them that poold has not heard yet.
  std::optional<JobRunner> runner;
  std::vector<std::pair<std::string, pool::JobReport>> job_reports;
  // Between heartbeats: poold has work for the node (JobWatch says so), a launcher ended (SIGCHLD:
  // Agent::wakeForJobs). Shared with the watch's thread, which may outlive the agent.
  std::shared_ptr<std::atomic<bool>> work_due = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> reap_due = false;
  std::unique_ptr<JobWatch> watch;
  // Leases' cgroups: what listing them last failed with, those of ended leases not removed yet.
  std::string cgroup_failure;
  std::set<std::string> cgroups_left;
  std::map<std::string, int> unlisted;  // replies in a row that did not list a confined lease
  // The health checks: what they last said (nullopt: not run yet), when they are due again, and
  // whether the last reply found the node idle (no lease holds anything on it).
  std::optional<std::string> health;
  std::chrono::steady_clock::time_point health_due{};
  bool idle = true;

  State(AgentConfig c, LinkFactory l, Sampler s, AgentClock k, std::ostream& o)
      : config(std::move(c)), open_link(std::move(l)), sample(std::move(s)), clock(std::move(k)), log(o) {
    if (config.jobs) runner.emplace(*config.jobs);
    topology = config.node.topology;
    if (!topology) topology = std::make_shared<topo::NodeTopology>();
    if (!config.job_mapping_dir.empty()) job_mapping.emplace(config.job_mapping_dir, topology->gpus.size());
  }

  const std::string& name() const { return config.node.name; }

  void registerNode() {
    link = open_link();
    pool::NodeRegistration r;
    r.node = config.node;
    r.node.topology = topology;
    r.agent_version = config.agent_version;
    r.launch = config.launch;
    link->registerNode(r);
    registered = true;
    topology_hash = pool::topologyHash(*topology);
    size_t ports = 0;
    for (const topo::Nic& n : topology->nics) ports += n.ports.size();
    log << "poold-agent: registered node " << name() << " with " << link->describe() << " ("
        << topology->gpus.size() << " GPUs, " << ports << " NIC ports, topology " << topology_hash
        << "); a heartbeat every " << config.interval.count() << " s" << std::endl;
  }

  // Where a NIC port's state in the samples differs from the registered topology's: the topology
  // with the new states, and a line per port. Unknown states (a file that could not be read) are
  // no change.
  bool takePortChanges(const NodeSamples& s) {
    std::optional<topo::NodeTopology> next;
    for (const topo::NicPortSample& p : s.nics) {
      if (p.state == topo::PortState::kUnknown) continue;
      const topo::NodeTopology& t = next ? *next : *topology;
      for (size_t n = 0; n < t.nics.size(); ++n) {
        if (t.nics[n].name != p.nic) continue;
        for (size_t q = 0; q < t.nics[n].ports.size(); ++q) {
          const topo::NicPort& port = t.nics[n].ports[q];
          if (port.port != p.port || port.state == p.state) continue;
          log << "poold-agent: NIC " << portName(p.nic, p.port) << " is " << topo::toString(p.state)
              << " (was " << topo::toString(port.state) << "): registering the node's topology again"
              << std::endl;
          if (!next) next = *topology;
          next->nics[n].ports[q].state = p.state;
          if (p.rate_gbps > 0) next->nics[n].ports[q].rate_gbps = p.rate_gbps;
        }
      }
    }
    if (!next) return false;
    topology = std::make_shared<const topo::NodeTopology>(std::move(*next));
    return true;
  }

  // Where a GPU's MIG state in the samples (mode, pending mode, instances) differs from the
  // registered topology's: the topology with the new states, and a line per GPU. A GPU NVML does not
  // answer for keeps what the topology says.
  bool takeMigChanges(const NodeSamples& s) {
    std::optional<topo::NodeTopology> next;
    for (size_t i = 0; i < s.mig.size() && i < topology->gpus.size(); ++i) {
      if (!s.mig[i] || *s.mig[i] == topology->gpus[i].mig) continue;
      const topo::MigState& now = *s.mig[i];
      // A reading NVML could not complete (the mode not answered, an instance without its UUID: a
      // driver busy or recovering) says nothing: registering it would end the leases of instances
      // that are still there.
      const bool partial = (!now.capable && topology->gpus[i].mig.capable) ||
                           std::any_of(now.instances.begin(), now.instances.end(),
                                       [](const topo::MigInstance& m) { return m.uuid.empty(); });
      if (partial) continue;
      log << "poold-agent: GPU " << i << " MIG " << (now.enabled ? "on" : "off")
          << (now.resetPending() ? std::string(" (") + (now.pending ? "on" : "off") + " after a reset)" : "")
          << ", " << now.instances.size() << " instance" << (now.instances.size() == 1 ? "" : "s") << " (was "
          << topology->gpus[i].mig.instances.size() << "): registering the node's topology again"
          << std::endl;
      if (!next) next = *topology;
      next->gpus[i].mig = now;
    }
    if (!next) return false;
    topology = std::make_shared<const topo::NodeTopology>(std::move(*next));
    return true;
  }

  // A GPU NVML no longer lists stays in the topology (GPU indexes are stable; poold fails it from
  // the heartbeat's sample): a line when it goes, and one when it is back.
  void noteLostGpus(const NodeSamples& s) {
    if (!s.nvml_ok) return;
    for (const topo::GpuSample& g : s.gpus) {
      bool lost = gpuLost(g);
      if (lost && lost_gpus.insert(g.index).second)
        log << "poold-agent: GPU " << g.index << " (" << g.pci << ") is lost: " << g.error
            << "; it stays in the node's topology and its heartbeat sample tells poold" << std::endl;
      if (!lost && lost_gpus.erase(g.index) > 0)
        log << "poold-agent: GPU " << g.index << " (" << g.pci << ") answers NVML again" << std::endl;
    }
  }

  // The MIG layouts poold asks for: made now, the outcome told in the next heartbeat (which follows
  // the registration of the new layout, taken from the next sample).
  void makeMigLayouts(const pool::HeartbeatReply& reply) {
    for (const auto& [gpu, profiles] : reply.mig_layouts) {
      std::string layout;
      for (const std::string& p : profiles) layout += (layout.empty() ? "" : ",") + p;
      std::string error = config.apply_mig ? config.apply_mig(gpu, profiles)
                                           : "this poold-agent cannot change MIG layouts (no NVML access)";
      log << "poold-agent: GPU " << gpu << ": MIG layout " << layout
          << (error.empty() ? " made" : " not made: " + error) << std::endl;
      mig_results[gpu] = std::move(error);
    }
  }

  // The MPS control daemons poold asks for run, and only those: started for GPUs newly listed,
  // stopped for GPUs no longer listed (their last share ended).
  void manageMps(const pool::HeartbeatReply& reply) {
    if (!mps_running) mps_running = config.mps.running ? config.mps.running() : std::set<size_t>{};
    std::erase_if(mps_failed, [&](size_t gpu) { return !reply.mps_gpus.count(gpu); });
    for (size_t gpu : reply.mps_gpus) {
      if (mps_running->count(gpu) || mps_failed.count(gpu)) continue;
      std::string error = gpu >= topology->gpus.size() ? "the node has no GPU " + std::to_string(gpu)
                          : config.mps.start           ? config.mps.start(gpu)
                                                       : "this poold-agent does not run MPS daemons";
      if (error.empty()) {
        mps_running->insert(gpu);
        log << "poold-agent: GPU " << gpu << ": MPS control daemon running (its GPU has shares)" << std::endl;
        continue;
      }
      log << "poold-agent: GPU " << gpu << ": MPS control daemon not started: " << error << std::endl;
      mps_failed.insert(gpu);
      mps_errors[gpu] = std::move(error);
    }
    for (auto it = mps_running->begin(); it != mps_running->end();) {
      if (reply.mps_gpus.count(*it)) {
        ++it;
        continue;
      }
      const std::string error = config.mps.stop ? config.mps.stop(*it) : "";
      log << "poold-agent: GPU " << *it << ": MPS control daemon "
          << (error.empty() ? "stopped (no share left)" : "not stopped: " + error) << std::endl;
      it = mps_running->erase(it);
    }
  }

  pool::Heartbeat heartbeatOf(const NodeSamples& s) const {
    pool::Heartbeat h;
    h.node = name();
    h.agent_version = config.agent_version;
    h.time = std::chrono::system_clock::now();
    h.topology_hash = topology_hash.empty() ? pool::topologyHash(*topology) : topology_hash;
    h.gpus = s.gpus;
    for (topo::GpuSample& g : h.gpus) bound(g);
    h.nics = s.nics;
    if (h.nics.size() > pool::kMaxNicPorts) h.nics.resize(pool::kMaxNicPorts);
    h.process_leases = processLeases(h.gpus, config.proc_root);
    h.mig_results = mig_results;
    h.mps_errors = mps_errors;
    h.health_failure = health;
    // The MPS server of a GPU the agent runs a daemon for is the pool's, not a process outside it.
    if (mps_running)
      for (topo::GpuSample& g : h.gpus)
        if (mps_running->count(g.index))
          std::erase_if(g.processes,
                        [&](const topo::GpuProcess& p) { return isMpsServer(config.proc_root, p.pid); });
    return h;
  }

  void writeJobMapping(const pool::HeartbeatReply& reply) {
    if (!job_mapping) return;
    try {
      job_mapping->update(reply.gpu_leases);
      if (!mapping_failure.empty())
        log << "poold-agent: the job-mapping files in " << job_mapping->dir().string() << " are written again"
            << std::endl;
      mapping_failure.clear();
    } catch (const Error& e) {
      if (mapping_failure.empty())
        log << "poold-agent: cannot write dcgm-exporter's job-mapping files: " << e.what()
            << "; trying again after each heartbeat" << std::endl;
      mapping_failure = e.what();
    }
  }

  // poold answered: the end of an outage, if there was one.
  void reached() {
    if (unreachable_since && link)
      log << "poold-agent: reached poold again at " << link->describe() << " after " << failed_attempts
          << " failed attempt" << (failed_attempts == 1 ? "" : "s") << " over "
          << elapsed(clock.now() - *unreachable_since) << std::endl;
    unreachable_since.reset();
    failed_attempts = 0;
    backoff_step = 0;
  }

  milliseconds unreachable(const Error& e) {
    if (!unreachable_since) {
      unreachable_since = clock.now();
      log << "poold-agent: " << e.what() << " (retrying after 1 s, doubling up to " << config.interval.count()
          << " s; nothing more is said until poold answers)" << std::endl;
    }
    ++failed_attempts;
    milliseconds base =
        std::min<milliseconds>(milliseconds(int64_t{1000} << std::min(backoff_step, 12)), config.interval);
    ++backoff_step;
    return milliseconds(
        static_cast<int64_t>(static_cast<double>(base.count()) * (0.75 + 0.5 * clock.random())));
  }

  // A refusal: printed once per distinct message, then the node is registered again (the link
  // opened again, the token file re-read) after kRefusedRetry.
  milliseconds refused(const std::string& what) {
    if (what != refusal)
      log << "poold-agent: " << what << "; trying again every " << kRefusedRetry.count()
          << " s (the token file is read again each time)" << std::endl;
    refusal = what;
    registered = false;
    return kRefusedRetry;
  }

  // The health checks, at the start and then every interval while the node is idle: each change of
  // what they say is one line (poold drains the node, or resumes it, from the heartbeat).
  void checkHealth() {
    if (!config.health_check || (health && (!idle || clock.now() < health_due))) return;
    std::string now;
    try {
      now = config.health_check();
    } catch (const std::exception& e) {
      now = std::string("the health checks could not run: ") + e.what();
    }
    health_due = clock.now() + config.health_interval;
    if (health == now) return;
    if (!now.empty())
      log << "poold-agent: health checks fail: " << now << " (poold drains node " << name()
          << " until they pass)" << std::endl;
    else
      log << "poold-agent: health checks pass" << (health ? " again" : "") << " (run every "
          << config.health_interval.count() << " s while no lease holds the node)" << std::endl;
    health = std::move(now);
  }

  std::set<std::string> listLeaseCgroups() {
    if (!config.lease_cgroups.list) return {};
    try {
      std::set<std::string> leases = config.lease_cgroups.list();
      cgroup_failure.clear();
      return leases;
    } catch (const std::exception& e) {
      if (e.what() != cgroup_failure)
        log << "poold-agent: cannot list the leases' cgroups: " << e.what() << std::endl;
      cgroup_failure = e.what();
      return {};
    }
  }

  // The cgroups of `confined` (listed before the heartbeat) whose lease this reply and the one before
  // do not list: ended, each said once (a cgroup that cannot go yet is tried again after the next
  // heartbeat). Two replies, not one: a detached job's launcher releases its lease as its last act,
  // and is given an interval to exit with its own status.
  void endLeases(const std::set<std::string>& confined, const pool::HeartbeatReply& reply) {
    if (!reply.leases || !config.lease_cgroups.end) return;
    std::erase_if(unlisted,
                  [&](const auto& l) { return !confined.count(l.first) || reply.leases->count(l.first); });
    for (const std::string& lease : confined) {
      if (reply.leases->count(lease) || ++unlisted[lease] < 2) continue;
      try {
        const size_t killed = config.lease_cgroups.end(lease);
        log << "poold-agent: lease " << lease << " has ended (poold lists it no more on node " << name()
            << "): its cgroup removed";
        if (killed > 0) log << ", " << killed << " process" << (killed == 1 ? "" : "es") << " in it killed";
        log << std::endl;
        cgroups_left.erase(lease);
        unlisted.erase(lease);
      } catch (const std::exception& e) {
        if (cgroups_left.insert(lease).second)
          log << "poold-agent: lease " << lease << " has ended, but its cgroup on node " << name()
              << " is left for now (tried again after each heartbeat): " << e.what() << std::endl;
      }
    }
  }

  // Detached jobs: the work poold has for the node where its reply says so (launchers started,
  // cancels' signals sent), the launchers that ended, and every report poold has not taken yet (kept
  // while poold cannot be reached; one it refuses is dropped, saying why).
  void runJobs(bool work) {
    if (!runner) return;
    if (work) {
      const pool::NodeJobWork todo = link->jobWork(name());
      for (const pool::JobLaunch& l : todo.start) {
        pool::JobReport r = runner->start(l);
        log << "poold-agent: job " << l.id << " of " << l.owner
            << (r.kind == pool::JobReport::Kind::kStarted ? " started (lease " + l.lease + ")"
                                                          : " could not start: " + r.exit.reason)
            << std::endl;
        job_reports.push_back({l.id, std::move(r)});
      }
      // After the starts: a job cancelled as it was granted is started, then signalled.
      for (const pool::JobSignal& s : todo.signal) {
        const bool here = runner->signal(s.id, s.signal);
        log << "poold-agent: job " << s.id << " cancelled: "
            << (here ? "signal " + std::to_string(s.signal) + " sent to its launcher"
                     : "its launcher does not run here")
            << std::endl;
        job_reports.push_back({s.id, {pool::JobReport::Kind::kSignalled, {}}});
        // A job whose launcher no record here knows (the agent's records lost) ends with its cancel.
        if (!here)
          job_reports.push_back(
              {s.id,
               {pool::JobReport::Kind::kEnded,
                {1, 0,
                 "its launcher does not run on node " + name() + " (poold-agent has no record of it)"}}});
      }
    }
    for (auto& [id, report] : runner->reap()) {
      log << "poold-agent: job " << id << " ended (exit status " << report.exit.exit_status << ")"
          << std::endl;
      job_reports.push_back({id, std::move(report)});
    }
    for (const std::string& note : runner->takeNotes()) log << "poold-agent: " << note << std::endl;
    while (!job_reports.empty()) {
      const auto& [id, report] = job_reports.front();
      try {
        link->reportJob(name(), id, report);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kIo) throw;
        log << "poold-agent: poold refused the report of job " << id << ": " << e.what() << std::endl;
      }
      if (report.kind == pool::JobReport::Kind::kEnded) runner->reported(id);
      job_reports.erase(job_reports.begin());
    }
  }

  // Where the clock can be woken: a thread that wakes the loop when poold has work for the node.
  void watchJobs() {
    if (!runner || !clock.wake) return;
    watch =
        std::make_unique<JobWatch>(open_link, name(), config.interval, [due = work_due, wake = clock.wake] {
          due->store(true);
          wake();
        });
  }

  // Between heartbeats, once woken: the node's work fetched (where the watch said there is some),
  // ended launchers reaped, reports sent. What fails is left to the next heartbeat's round, which
  // says what is wrong with poold and sends the reports kept.
  void jobRound() {
    const bool work = work_due->exchange(false);
    reap_due = false;
    if (registered && link) {
      try {
        runJobs(work);
      } catch (const std::exception&) {
      }
    }
    if (work && watch) watch->handled();
  }

  // One round (Agent::run); the time to wait before the next.
  milliseconds round() {
    bool registering = !registered;
    try {
      if (!registered) {
        registerNode();
        reached();
      }
      registering = false;
      checkHealth();
      NodeSamples s = sample();
      noteLostGpus(s);
      const bool ports = takePortChanges(s), mig = takeMigChanges(s);
      if (ports || mig) {
        registering = true;
        registered = false;
        registerNode();
        registering = false;
      }
      // The lease cgroups before the heartbeat: a lease's cgroup made after it was sent may belong
      // to a lease granted after poold answered, so only these may be ended by the reply.
      const std::set<std::string> confined = listLeaseCgroups();
      pool::HeartbeatReply reply = link->heartbeat(heartbeatOf(s));
      mig_results.clear();  // told
      mps_errors.clear();
      reached();
      refusal.clear();
      other_failure.clear();
      // A reply that asks for the node again says nothing of its leases.
      if (!reply.register_again) writeJobMapping(reply);
      if (!reply.register_again) makeMigLayouts(reply);
      if (!reply.register_again) manageMps(reply);
      if (!reply.register_again) endLeases(confined, reply);
      if (!reply.register_again)
        idle = reply.leases ? reply.leases->empty() : reply.gpu_leases.empty() && reply.mps_gpus.empty();
      if (!reply.register_again) {
        runJobs(reply.jobs);
        if (reply.jobs && watch) watch->handled();
      }
      if (reply.register_again) {
        log << "poold-agent: poold asks for node " << name() << " again: registering it" << std::endl;
        registering = true;
        registered = false;
        registerNode();
      }
      return std::min<milliseconds>(config.interval, reply.interval);
    } catch (const pool::PoolError& e) {
      if (e.code() == ErrorCode::kIo) return unreachable(e);
      reached();
      bool token =
          e.failure() == pool::PoolFailure::kUnauthorized || e.failure() == pool::PoolFailure::kForbidden;
      if (registering && !token && e.code() == ErrorCode::kBadInput) {
        log << "poold-agent: error: " << e.what()
            << " (poold refuses the node's registration document; check that poold and poold-agent are "
               "of one version)"
            << std::endl;
        exit_status = 1;
        return milliseconds(0);
      }
      return refused(e.what());
    } catch (const std::exception& e) {
      // The token file, the sampler, a reply poold should not have sent: once, and on.
      if (e.what() != other_failure)
        log << "poold-agent: " << e.what() << "; trying again every " << kRefusedRetry.count() << " s"
            << std::endl;
      other_failure = e.what();
      registered = false;
      return kRefusedRetry;
    }
  }
};

Agent::Agent(AgentConfig config, LinkFactory link, Sampler sampler, AgentClock clock, std::ostream& log)
    : s_(std::make_unique<State>(std::move(config), std::move(link), std::move(sampler), std::move(clock),
                                 log)) {}

Agent::~Agent() = default;

int Agent::run() {
  s_->watchJobs();
  for (;;) {
    const milliseconds wait = s_->round();
    if (s_->exit_status) return *s_->exit_status;
    // The wait, with the job rounds that wakes ask for on the way.
    const auto due = s_->clock.now() + wait;
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(due - s_->clock.now());
      if (left <= milliseconds(0)) break;
      // A launcher taken back from the records is no child of this agent (no SIGCHLD): its end is
      // looked for every second while there is one, as a lease's cgroup not removed yet is tried again.
      const bool foster = s_->runner && s_->runner->wantsPolling();
      if (!s_->clock.sleep(foster ? std::min(left, milliseconds(1000)) : left)) return 0;
      if (foster) s_->reap_due = true;
      if (*s_->work_due || s_->reap_due) s_->jobRound();
    }
  }
}

void Agent::wakeForJobs() {
  s_->reap_due = true;
  if (s_->clock.wake) s_->clock.wake();
}

const topo::NodeTopology& Agent::topology() const {
  return *s_->topology;
}

pool::Heartbeat Agent::heartbeatOf(const NodeSamples& samples) const {
  return s_->heartbeatOf(samples);
}

}  // namespace poolrun::agent
