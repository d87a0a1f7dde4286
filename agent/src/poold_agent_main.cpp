// poold-agent: registers this node with a poold and sends it heartbeats. See docs/agent.md.

#include <pthread.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "poolrun/agent/agent.hpp"
#include "poolrun/agent/health.hpp"
#include "poolrun/agent/join.hpp"
#include "poolrun/agent/launch_server.hpp"
#include "poolrun/agent/lease_cgroup.hpp"
#include "poolrun/agent/options.hpp"
#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/topo/sources.hpp"
#include "poolrun/topo/sysfs.hpp"
#include "poolrun/topo/version.hpp"

namespace {

using namespace poolrun;

// How long a stop may wait for the round in progress (a call to poold has timeouts of seconds):
// past it the agent exits without it. Nothing is lost: every file it writes is renamed into place.
constexpr std::chrono::milliseconds kStopGrace{800};

std::string hostName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

topo::NodeTopology loadTopology(const agent::AgentOptions& o) {
  if (o.from.empty()) {
    topo::LiveOptions live;
    if (!o.sysfs_root.empty()) live.sysfs_root = o.sysfs_root;
    return topo::probeLive(live);
  }
  topo::NodeTopology t = topo::readTopologyFile(o.from);
  if (!o.sysfs_root.empty()) {
    std::vector<std::string> warnings;
    topo::mergeRdmaDevices(t, topo::readRdmaDevices(o.sysfs_root, warnings));
    t.warnings.insert(t.warnings.end(), warnings.begin(), warnings.end());
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  agent::AgentOptions o;
  try {
    o = agent::parseAgentOptions(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const Error& e) {
    std::cerr << "poold-agent: error: " << e.what() << "\n" << agent::agentUsage();
    return 2;
  }
  if (o.help) {
    std::cout << agent::agentUsage();
    return 0;
  }
  if (o.version) {
    std::cout << topo::versionText("poold-agent");
    return 0;
  }
  // SIGTERM and SIGINT are taken by one thread with sigwait, never by a handler (as poold does).
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGTERM);
  sigaddset(&stopSignals, SIGINT);
  // SIGCHLD likewise, by another: a detached job's launcher ended (Agent::wakeForJobs).
  sigset_t childSignal;
  sigemptyset(&childSignal);
  sigaddset(&childSignal, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  pthread_sigmask(SIG_BLOCK, &childSignal, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  try {
    // The token is checked now, so that a wrong path fails at once; it is read again later. A
    // node that joins has none before it joined.
    if (o.join.empty()) agent::readTokenFile(o.token_file);
    topo::NodeTopology t = loadTopology(o);
    for (const std::string& w : t.warnings) std::cerr << "poold-agent: warning: " << w << "\n";
    agent::AgentConfig config;
    config.node.name = !o.node.empty()                         ? o.node
                       : o.from.empty() && !t.hostname.empty() ? t.hostname
                                                               : hostName();
    common::checkNodeName(config.node.name, "the host name (give --node NAME)");
    config.node.topology_file = o.from;
    config.node.levels = o.levels;
    config.node.labels = o.labels;
    config.agent_version = topo::versionText("poold-agent");
    config.agent_version.resize(config.agent_version.find('\n'));
    config.interval = o.interval;
    if (!o.proc_root.empty()) config.proc_root = o.proc_root;
    config.job_mapping_dir = o.job_mapping_dir;
    if (!o.job_mapping_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(o.job_mapping_dir, ec);
      if (!std::filesystem::is_directory(o.job_mapping_dir))
        throw badInput("--dcgm-job-mapping-dir " + o.job_mapping_dir.string() +
                       ": not a directory, and cannot be made one" + (ec ? " (" + ec.message() + ")" : ""));
    }
    agent::Sampler sampler =
        agent::telemetrySampler(t, o.sysfs_root.empty() ? "/sys" : o.sysfs_root, &config.apply_mig);
    config.mps = agent::mpsControl(t, {o.mps_dir, o.mps_control});
    std::error_code self_ec;
    config.jobs = agent::JobRunnerOptions{
        config.node.name, o.pool,
        !o.poolrun.empty()
            ? o.poolrun
            : std::filesystem::read_symlink("/proc/self/exe", self_ec).parent_path() / "poolrun",
        o.ca_file, o.job_dir / config.node.name};
    if (o.lease_pids > 0) config.jobs->lease_pids = o.lease_pids;
    agent::confineJobs(*config.jobs, o.cgroup, o.cgroup_parent, t,
                       o.proc_root.empty() ? "/proc" : o.proc_root, std::cerr);
    config.node.topology = std::make_shared<const topo::NodeTopology>(std::move(t));
    agent::LinkFactory link = [o] {
      return pool::openAgentLink(o.pool, agent::linkOptions(o, agent::readTokenFile(o.token_file)));
    };
    // The launch port: jobs' daemons started here for mpirun (docs/launch.md).
    std::unique_ptr<agent::LaunchServer> launches;
    if (!o.launch_listen.empty()) {
      agent::LaunchServerOptions lo;
      lo.node = config.node.name;
      lo.listen = o.launch_listen;
      lo.launch_key = [link, node = config.node.name] { return link()->launchKey(node); };
      lo.confinement = *config.jobs;
      lo.allow_root = o.allow_root_launches;
      lo.min_uid = static_cast<uid_t>(o.launch_min_uid);
      lo.node_hostname = o.simulated_node;
      lo.log = [](const std::string& line) {
        static std::mutex mu;
        std::lock_guard<std::mutex> lock(mu);
        std::cerr << line << std::endl;
      };
      launches = std::make_unique<agent::LaunchServer>(std::move(lo));
      config.launch =
          o.launch_advertise.empty() ? ":" + std::to_string(launches->port()) : o.launch_advertise;
      std::cerr << "poold-agent: starting jobs' daemons for launch credentials at port " << launches->port()
                << std::endl;
    }

    // The health checks: the doctor's GPU and NIC port checks (docs/agent.md).
    if (o.health_interval.count() > 0) {
      config.health_check = agent::doctorHealthCheck(
          o.sysfs_root.empty() ? "/sys" : o.sysfs_root,
          (std::filesystem::read_symlink("/proc/self/exe", self_ec).parent_path() / "poolrun-cuda-probe")
              .string());
      config.health_interval = o.health_interval;
    }
    // Where leases are confined: the cgroups of those that ended are ended after the heartbeats
    // (through the launch port where there is one: it holds the lease's lock).
    if (const agent::JobRunnerOptions& c = *config.jobs; c.cgroup) {
      config.lease_cgroups.list = [c] {
        return agent::leaseCgroupNames(c.cgroup_mounts, *c.cgroup, c.cgroup_parent);
      };
      config.lease_cgroups.end = [c, server = launches.get()](const std::string& lease) {
        return server ? server->leaseEnded(lease)
                      : agent::LeaseCgroup(c.cgroup_mounts, *c.cgroup, c.cgroup_parent, lease, {})
                            .destroy(std::chrono::seconds(5));
      };
    }

    // Shared with the signal thread, which may still wait on them as main returns (a mutex or a
    // condition variable destroyed under it makes it throw, and the process abort).
    struct Shutdown {
      agent::StopSignal stop;
      std::mutex mu;
      std::condition_variable done_cv;
      bool done = false;
    };
    const auto shutdown = std::make_shared<Shutdown>();
    agent::StopSignal& stop = shutdown->stop;
    std::thread([shutdown, stopSignals] {
      int sig = 0;
      sigwait(&stopSignals, &sig);
      shutdown->stop.request();
      std::unique_lock<std::mutex> lock(shutdown->mu);
      if (!shutdown->done_cv.wait_for(lock, kStopGrace, [&] { return shutdown->done; })) {
        std::cerr << "poold-agent: stopped (signal " << sig << ", during a call to poold)" << std::endl;
        _exit(0);
      }
    }).detach();
    int status = 0;
    const std::string name = config.node.name;
    auto join = [&o, &name](const std::string& credential) {
      return pool::joinPool(o.pool, agent::linkOptions(o, ""), name, o.join, credential);
    };
    if (o.join.empty() || agent::joinIfNeeded(o.token_file, join, stop, std::cerr)) {
      auto a = std::make_shared<agent::Agent>(std::move(config), std::move(link), std::move(sampler),
                                              agent::systemClock(stop), std::cerr);
      std::thread([agent = std::weak_ptr<agent::Agent>(a), childSignal] {
        for (int sig = 0; sigwait(&childSignal, &sig) == 0;)
          if (auto running = agent.lock()) running->wakeForJobs();
      }).detach();
      status = a->run();
    }
    {
      std::lock_guard<std::mutex> lock(shutdown->mu);
      shutdown->done = true;
    }
    shutdown->done_cv.notify_all();
    if (status == 0) std::cerr << "poold-agent: stopped" << std::endl;
    return status;
  } catch (const Error& e) {
    std::cerr << "poold-agent: error: " << e.what() << "\n";
    return e.code() == ErrorCode::kBadInput || e.code() == ErrorCode::kNotFound ? 2 : 1;
  }
}
